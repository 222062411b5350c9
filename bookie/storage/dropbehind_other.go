//go:build !linux

package storage

// dropPages does nothing where posix_fadvise is not available: the page
// cache is left to the kernel.
func dropPages(fd uintptr, off, n int64) {}
