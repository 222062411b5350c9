//go:build !linux

package main

import "errors"

// diskFree is not measured on this system.
func diskFree(string) (int64, error) { return 0, errors.New("not measured on this system") }
