package main

import (
	"context"
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

// journalCounter counts the bookies' journal group commits (it is their
// journal.Options.OnSync): bytes/writes is the average group size.
type journalCounter struct {
	writes, bytes atomic.Int64
}

func (c *journalCounter) onSync(_ time.Duration, _, bytes int) {
	c.writes.Add(1)
	c.bytes.Add(int64(bytes))
}

// groups returns the group writes and bytes counted so far.
func (c *journalCounter) groups() (writes, bytes int64) {
	return c.writes.Load(), c.bytes.Load()
}
