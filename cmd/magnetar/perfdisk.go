package main

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// syncedWrites is the result of measureSyncedWrites.
type syncedWrites struct {
	Block   int           // bytes per write
	Writes  int64         // writes, each followed by fdatasync
	Elapsed time.Duration // wall time of all of them
	Latency latencyHist   // of each write + fdatasync
}

// MBps is the bandwidth in MB/s (10^6 bytes).
func (r *syncedWrites) MBps() float64 {
	return mbps(r.Writes*int64(r.Block), r.Elapsed)
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}

// measureSyncedWrites appends block-sized writes to a new file in dir, each
// made durable with fdatasync before the next, for d (or until ctx ends),
// and removes the file. It is what the journal does with one group at a
// time through the same vfs.FS calls, so it is the disk's limit for the
// journal at that group size.
func measureSyncedWrites(ctx context.Context, fs vfs.FS, dir string, block int, d time.Duration) (*syncedWrites, error) {
	path := fs.PathJoin(dir, "disk-baseline")
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	defer fs.Remove(path)
	defer f.Close()
	buf := make([]byte, block)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8) // not all zeros, in case the disk compresses
	}
	r := &syncedWrites{Block: block}
	start := time.Now()
	for now := start; now.Sub(start) < d && ctx.Err() == nil; {
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		if err := f.SyncData(); err != nil {
			return nil, err
		}
		end := time.Now()
		r.Latency.Record(end.Sub(now))
		r.Writes++
		now = end
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// journalCounter is a vfs.FS that counts the writes to journal files
// (*.jnl). The journal writes each group with one Write, so bytes/writes is
// the average group size (a file's 8-byte header is one write too: a
// negligible error over a run).
type journalCounter struct {
	vfs.FS
	writes, bytes atomic.Int64
}

func (fs *journalCounter) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.HasSuffix(name, ".jnl") {
		return f, err
	}
	return countedFile{File: f, fs: fs}, nil
}

func (fs *journalCounter) Unwrap() vfs.FS { return fs.FS }

// groups returns the writes and bytes counted so far.
func (fs *journalCounter) groups() (writes, bytes int64) {
	return fs.writes.Load(), fs.bytes.Load()
}

type countedFile struct {
	vfs.File
	fs *journalCounter
}

func (f countedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.fs.writes.Add(1)
	f.fs.bytes.Add(int64(n))
	return n, err
}
