package storage

import "golang.org/x/sys/unix"

// dropPages asks the kernel to drop the cached pages of [off, off+n) of
// the file fd, or from off to its end if n == 0 (clean pages are dropped,
// dirty ones skipped); a hint, so errors are ignored.
func dropPages(fd uintptr, off, n int64) {
	_ = unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED)
}
