package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

// measureDirectWrites is measureSyncedWrites with the file opened with
// O_DIRECT: the writes skip the page cache (as the journal's large groups
// do), so it measures the disk without the cost of page-cache pages. It
// returns errDirectUnsupported where the file system refuses O_DIRECT.
func measureDirectWrites(ctx context.Context, dir string, block int, d time.Duration) (*syncedWrites, error) {
	path := filepath.Join(dir, "disk-baseline-direct")
	defer os.Remove(path) // O_CREATE makes it even when O_DIRECT is then refused
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_DIRECT, 0o644)
	if errors.Is(err, syscall.EINVAL) {
		return nil, fmt.Errorf("%w in %s: %w", errDirectUnsupported, dir, err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// O_DIRECT wants memory aligned to the device's block size; 4 KiB is
	// a multiple of the common ones, and block a multiple of it.
	const align = 4096
	raw := make([]byte, block+align)
	skip := (align - int(uintptr(unsafe.Pointer(&raw[0]))%align)) % align
	buf := raw[skip : skip+block]
	fillPattern(buf)
	r, err := syncedWriteLoop(ctx, f.Write, func() error { return syscall.Fdatasync(int(f.Fd())) }, buf, d)
	if errors.Is(err, syscall.EINVAL) { // taken at open, refused at the write
		return nil, fmt.Errorf("%w in %s: %w", errDirectUnsupported, dir, err)
	}
	return r, err
}
