//go:build !linux

package main

// systemFreeMemory: free memory is read on Linux only.
func systemFreeMemory() (int64, error) { return 0, errMemUnsupported }
