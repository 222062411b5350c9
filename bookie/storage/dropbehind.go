package storage

import (
	"math"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// dropBehind keeps the newest keep bytes of written entry logs in the
// page cache and asks the kernel to drop the pages of older ones
// (Options.EntryLogPageCacheKeep, design note 0010): page-cache pages are
// then recycled instead of new ones being taken for every byte written,
// which on a virtual machine whose memory the host backs lazily costs
// more than the write itself. Reads of dropped bytes go to the disk.
//
// It is told each range the entry logs asked the kernel to write back
// (written) and drops what falls more than keep bytes behind, oldest
// first. A page written back long since is clean, so it is dropped; the
// kernel skips a page still dirty, which stays cached until reclaimed.
// Dropping is a hint: failures are ignored, and a log removed meanwhile
// is simply skipped. Not safe for concurrent use; entryLogs calls it under
// syncMu.
type dropBehind struct {
	fs    vfs.FS
	keep  int64
	spans []dropSpan       // asked to write back, not yet dropped; oldest first
	bytes int64            // the spans' total length
	ends  map[uint64]int64 // per log, the end of its last span
	files map[uint64]vfs.File
	// advise drops the pages of [off, off+n) of f, n == 0 meaning to
	// the end of the file: dropFilePages, or a test's recorder.
	advise func(f vfs.File, off, n int64)
	// disk learns what was dropped, to read it from the disk; may be nil.
	disk *diskReads
}

// dropSpan is the byte range [from, to) of the log at path.
type dropSpan struct {
	log      uint64
	path     string
	from, to int64
}

func newDropBehind(fs vfs.FS, keep int64, disk *diskReads) *dropBehind {
	return &dropBehind{fs: fs, keep: keep, ends: map[uint64]int64{}, files: map[uint64]vfs.File{}, advise: dropFilePages, disk: disk}
}

// dropFilePages drops the cached pages of [off, off+n) of f (to the end if
// n == 0), if f is an operating-system file.
func dropFilePages(f vfs.File, off, n int64) {
	if fd := f.Fd(); fd != vfs.InvalidFd {
		dropPages(fd, off, n)
	}
}

// written records that writeback of log (at path) was asked for up to
// offset to, and drops what is now more than keep bytes behind.
func (d *dropBehind) written(log uint64, path string, to int64) {
	from := d.ends[log]
	if to <= from {
		return
	}
	d.ends[log] = to
	if n := len(d.spans); n > 0 && d.spans[n-1].log == log && d.spans[n-1].to == from {
		d.spans[n-1].to = to
	} else {
		d.spans = append(d.spans, dropSpan{log: log, path: path, from: from, to: to})
	}
	d.bytes += to - from
	for d.bytes > d.keep {
		s := &d.spans[0]
		n := min(s.to-s.from, d.bytes-d.keep)
		// A log has one span (its ranges are contiguous), so if keep > 0
		// bytes of later spans remain while this one is used up, its log
		// is finished and no more of it will come.
		finished := n == s.to-s.from
		d.drop(s.log, s.path, s.from, s.from+n, finished)
		s.from += n
		d.bytes -= n
		if finished {
			d.forget(s.log)
			d.spans = d.spans[1:]
		}
	}
}

// dropAlign aligns the ranges dropped. The page cache holds a file in
// folios of up to 2 MiB, each naturally aligned, and the kernel drops only
// folios wholly inside the range asked: ranges on these boundaries, each
// starting where the last one ended, leave none straddling two.
const dropAlign = 2 << 20

// drop asks the kernel to drop the cached pages of [from, to) of log, as
// dropAlign-aligned ranges: the range dropped starts at from rounded down
// and ends at to rounded down, or at the end of the file if the log is
// finished.
func (d *dropBehind) drop(log uint64, path string, from, to int64, finished bool) {
	from &^= dropAlign - 1
	n := int64(0) // to the end of the file
	if !finished {
		if n = to&^(dropAlign-1) - from; n <= 0 {
			return
		}
	}
	f := d.files[log]
	if f == nil {
		var err error
		if f, err = d.fs.Open(path); err != nil {
			return // removed (GC) meanwhile, or not to be opened: only a hint
		}
		d.files[log] = f
	}
	d.advise(f, from, n)
	to = from + n
	if n == 0 {
		to = math.MaxInt64
	}
	d.disk.setMark(log, to)
}

// forget closes log's handle and its bookkeeping.
func (d *dropBehind) forget(log uint64) {
	if f := d.files[log]; f != nil {
		f.Close()
	}
	delete(d.files, log)
	delete(d.ends, log)
}

// close releases every handle.
func (d *dropBehind) close() {
	for log := range d.files {
		d.forget(log)
	}
}
