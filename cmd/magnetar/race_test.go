//go:build race

package main

// raceEnabled: the tests run under -race, so the binary they build does too.
const raceEnabled = true
