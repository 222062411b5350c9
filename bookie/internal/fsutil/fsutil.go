// Package fsutil holds the file-system steps the bookie's journal and entry
// logs share: making directory entries durable, deleting large files
// without stalling the file system, and buffers for O_DIRECT.
package fsutil

import (
	"sync"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SyncDir fsyncs directory dir, so that entries created, renamed or removed
// in it survive a power loss.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// Gradual deletion. Freeing a large file's blocks at once holds up the file
// system's journal commit, and every fsync waiting on it, for as long as the
// freeing (and, on a disk mounted with discard, the discards) takes: over
// 100 ms for 512 MiB on ext4 with discard. DeleteGradually cuts the file
// Step bytes at a time, each cut synced on its own (one commit frees at most
// Step), Pause apart, then removes it.
type Gradual struct {
	Step  int64         // bytes cut at a time; default 8 MiB
	Pause time.Duration // between cuts; default 5 ms
}

// DeleteGradually deletes the file at path as described at Gradual; the
// caller makes the removal durable (SyncDir) if it needs to. A file that
// cannot be truncated (an in-memory file system) is removed at once. If
// stop is closed between cuts, it returns stopped, leaving the file shorter
// but in place. Errors of the cuts are ignored (the removal still frees
// everything); that of the removal is returned.
//
// Only for files nothing reads any more: a cut is seen by open handles.
func (g Gradual) DeleteGradually(fs vfs.FS, path string, stop <-chan struct{}) (stopped bool, err error) {
	step, pause := g.Step, g.Pause
	if step <= 0 {
		step = 8 << 20
	}
	if pause <= 0 {
		pause = 5 * time.Millisecond
	}
	if _, err := fs.Stat(path); err != nil {
		return false, err
	}
	if f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified); err == nil {
		t, ok := f.(interface{ Truncate(int64) error })
		fi, serr := f.Stat()
		if ok && serr == nil {
			timer := time.NewTimer(pause)
			defer timer.Stop()
			for size := fi.Size(); size > step; {
				size -= step
				if t.Truncate(size) != nil {
					break
				}
				_ = f.Sync()
				timer.Reset(pause)
				select {
				case <-stop:
					f.Close()
					return true, nil
				case <-timer.C:
				}
			}
		}
		f.Close()
	}
	return false, fs.Remove(path)
}

// HugePageSize is the size of a transparent huge page on the machines the
// bookie runs on (x86-64 and arm64 with 4 KiB base pages), and
// HugeBuffer's alignment.
//
// O_DIRECT reads into memory backed by huge pages were twice as fast on
// the benchmark machine (a Firecracker virtual machine, whose block
// device takes a request's memory page by page): 640 KiB reads from four
// places at once read 1.6-1.9 GB/s into 4 KiB pages, 3.9 GB/s into huge
// pages (docs/BENCHMARKS.md, "Twenty-ninth look").
const HugePageSize = 2 << 20

// hugeMaps holds the mappings of the buffers HugeBuffer returned, by
// their first byte.
var hugeMaps = struct {
	sync.Mutex
	m map[*byte][]byte
}{m: map[*byte][]byte{}}

// AlignedBuffer returns at least n bytes, a whole number of align-byte
// blocks, whose first byte's address is a multiple of align (a power of
// two): what O_DIRECT reads and writes need.
func AlignedBuffer(n, align int) []byte {
	n = (n + align - 1) &^ (align - 1)
	b := make([]byte, n+align)
	skip := (align - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(align))) % align
	return b[skip : skip+n : skip+n]
}
