package main

import "os"

// systemFreeMemory is the system's free memory (MemFree), in bytes.
func systemFreeMemory() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return freeMemory(string(b))
}
