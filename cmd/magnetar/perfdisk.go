package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// errDirectUnsupported: the file system (or system) does not allow O_DIRECT.
var errDirectUnsupported = errors.New("O_DIRECT not supported")

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
	fillPattern(buf)
	return syncedWriteLoop(ctx, f.Write, f.SyncData, buf, d)
}

// fillPattern fills buf with bytes that are not all zeros, in case the
// disk compresses.
func fillPattern(buf []byte) {
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
}

// syncedWriteLoop writes buf with write, then syncs, one after the other,
// for d or until ctx ends.
func syncedWriteLoop(ctx context.Context, write func([]byte) (int, error), sync func() error, buf []byte, d time.Duration) (*syncedWrites, error) {
	r := &syncedWrites{Block: len(buf)}
	start := time.Now()
	for now := start; now.Sub(start) < d && ctx.Err() == nil; {
		if _, err := write(buf); err != nil {
			return nil, err
		}
		if err := sync(); err != nil {
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

// journalCounter counts the bookies' journal fsyncs (it is their
// journal.Options.OnSync): bytes/fsyncs is the average bytes one covers.
type journalCounter struct {
	fsyncs, bytes atomic.Int64
}

func (c *journalCounter) onSync(_ time.Duration, _, bytes int) {
	c.fsyncs.Add(1)
	c.bytes.Add(int64(bytes))
}

// counts returns the fsyncs and the bytes they covered so far.
func (c *journalCounter) counts() (fsyncs, bytes int64) {
	return c.fsyncs.Load(), c.bytes.Load()
}

// durableAppends is the result of measureDurableAppends.
type durableAppends struct {
	Rate    float64 // appends per second asked for
	Size    int     // bytes per append
	Appends int64   // appends made durable
	Syncs   int64   // fdatasyncs
	Elapsed time.Duration
	// Latency is from each append's due time to the return of the
	// fdatasync that made it durable.
	Latency latencyHist
}

// measureDurableAppends appends size-byte records to a file in dir at rate
// per second (an open loop) for d, or until ctx ends, with the least work
// a log that acknowledges after fsync can do: one writer takes every
// record waiting, writes them at once, calls fdatasync, and the records
// are durable when it returns (group commit, a new group as soon as the
// last one is synced). The file is written and synced first, then written
// over from its start, as the journal writes over the files it reuses, so
// that an fdatasync has no file size to commit. Its latency at a rate is
// the disk's limit for publish latency at that rate: a broker cannot
// acknowledge sooner than its records are durable.
func measureDurableAppends(ctx context.Context, fs vfs.FS, dir string, rate float64, size int, d time.Duration) (*durableAppends, error) {
	if rate <= 0 || rate > 1e6 || size <= 0 {
		return nil, fmt.Errorf("durable appends: rate %g must be within (0, 10^6] and size %d positive", rate, size)
	}
	path := fs.PathJoin(dir, "disk-appends")
	defer fs.Remove(path)
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	fillPattern(buf)
	// Written beforehand: what the run appends, within reason.
	prefill := min(int64(rate*d.Seconds())*int64(size)+chunk, 1<<30)
	if err := prefillFile(ctx, fs, path, buf, prefill); err != nil {
		return nil, err
	}
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	r := &durableAppends{Rate: rate, Size: size}
	var (
		mu      sync.Mutex
		due     []time.Time // appends waiting for the writer
		more    = make(chan struct{}, 1)
		stopped = make(chan struct{})
		done    = make(chan error, 1)
	)
	go func() { // the writer; once stopped, it takes what is left, then returns
		var off int64
		var group []time.Time
		for last := false; !last; {
			select {
			case <-more:
			case <-stopped:
				last = true
			}
			mu.Lock()
			group, due = due, group[:0]
			mu.Unlock()
			if len(group) == 0 {
				continue
			}
			for left := len(group) * size; left > 0; {
				n := min(left, chunk)
				if _, err := f.WriteAt(buf[:n], off); err != nil {
					done <- err
					return
				}
				off += int64(n)
				left -= n
			}
			if err := f.SyncData(); err != nil {
				done <- err
				return
			}
			now := time.Now()
			for _, t := range group {
				r.Latency.Record(now.Sub(t))
			}
			r.Appends += int64(len(group))
			r.Syncs++
		}
		done <- nil
	}()

	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for n := 0; ctx.Err() == nil; n++ {
		at := start.Add(time.Duration(n) * interval)
		if at.Sub(start) >= d {
			break
		}
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		mu.Lock()
		due = append(due, at)
		mu.Unlock()
		select {
		case more <- struct{}{}:
		default:
		}
		select {
		case err := <-done: // before stopped is closed, only a failure
			return nil, err
		default:
		}
	}
	close(stopped)
	if err := <-done; err != nil {
		return nil, err
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// prefillFile writes size bytes of buf, repeated, to a new file at path
// and makes them durable; less if ctx ends.
func prefillFile(ctx context.Context, fs vfs.FS, path string, buf []byte, size int64) error {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	for left := size; left > 0 && ctx.Err() == nil; left -= int64(len(buf)) {
		if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
