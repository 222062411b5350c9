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
	f, err := createDirect(dir, "disk-baseline-direct")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := syncedWriteLoop(ctx, f.Write, func() error { return syscall.Fdatasync(int(f.Fd())) }, alignedPattern(block), d)
	return r, directErr(dir, err)
}

// measureTwiceWrites measures the disk taking each byte twice, as a bookie
// writes an entry: once into its journal, fdatasync'd before the add is
// acknowledged, and once into an entry log, written beside it and made
// durable later. One goroutine writes block-sized groups to one file, each
// followed by fdatasync, for d (or until ctx ends); another writes the same
// bytes to a second file as each group is synced (at most 64 groups behind)
// and fdatasyncs that file at the end. Both files are O_DIRECT, the
// cheapest way for this disk to take the bytes (no page-cache pages, no
// writeback to wait on). The result counts each payload byte once and
// includes the final fdatasync: no bookie that keeps both copies on this
// disk adds faster. errDirectUnsupported where O_DIRECT is refused.
func measureTwiceWrites(ctx context.Context, dir string, block int, d time.Duration) (*syncedWrites, error) {
	journal, err := createDirect(dir, "disk-baseline-journal")
	if err != nil {
		return nil, err
	}
	defer journal.Close()
	entryLog, err := createDirect(dir, "disk-baseline-entrylog")
	if err != nil {
		return nil, err
	}
	defer entryLog.Close()
	buf := alignedPattern(block) // both files write it; writes only read it

	synced := make(chan struct{}, 64) // a token per group the journal synced
	logDone := make(chan error, 1)
	go func() {
		var err error
		for range synced {
			if err == nil {
				_, err = entryLog.Write(buf)
			}
		}
		if err == nil {
			err = syscall.Fdatasync(int(entryLog.Fd()))
		}
		logDone <- err
	}()
	start := time.Now()
	r, err := syncedWriteLoop(ctx, journal.Write, func() error {
		if err := syscall.Fdatasync(int(journal.Fd())); err != nil {
			return err
		}
		synced <- struct{}{}
		return nil
	}, buf, d)
	close(synced)
	err = errors.Join(err, <-logDone)
	if err != nil {
		return nil, directErr(dir, err)
	}
	r.Elapsed = time.Since(start) // until the entry log is durable too
	return r, nil
}

// createDirect creates (truncates) name in dir with O_DIRECT, removed when
// closed.
func createDirect(dir, name string) (*removeOnClose, error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_DIRECT, 0o644)
	if err != nil {
		os.Remove(path) // O_CREATE makes it even when O_DIRECT is then refused
		return nil, directErr(dir, err)
	}
	return &removeOnClose{f}, nil
}

// alignedPattern is a block-sized buffer of pattern bytes aligned for
// O_DIRECT, which wants memory aligned to the device's block size; 4 KiB
// is a multiple of the common ones, and block a multiple of it.
func alignedPattern(block int) []byte {
	const align = 4096
	raw := make([]byte, block+align)
	skip := (align - int(uintptr(unsafe.Pointer(&raw[0]))%align)) % align
	buf := raw[skip : skip+block]
	fillPattern(buf)
	return buf
}

// removeOnClose is a file removed once closed.
type removeOnClose struct{ *os.File }

func (f *removeOnClose) Close() error {
	return errors.Join(f.File.Close(), os.Remove(f.Name()))
}

// directErr marks EINVAL, the refusal of O_DIRECT (at open, or at the
// first write on some file systems), as errDirectUnsupported.
func directErr(dir string, err error) error {
	if errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%w in %s: %w", errDirectUnsupported, dir, err)
	}
	return err
}
