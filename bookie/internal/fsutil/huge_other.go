//go:build !linux

package fsutil

// HugeBuffer returns nil: transparent huge pages are asked for on Linux
// only (huge_linux.go); callers use AlignedBuffer instead.
func HugeBuffer(n int) []byte { return nil }

// FreeHugeBuffer returns false: there are no huge buffers here.
func FreeHugeBuffer(b []byte) bool { return false }

// IsHugeBuffer returns false: there are no huge buffers here.
func IsHugeBuffer(b []byte) bool { return false }
