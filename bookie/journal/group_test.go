package journal

import (
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// commitWhileSyncing appends one record, holds its group's sync, queues n
// more records from several goroutines, lets the syncs go and returns how
// many syncs the n+1 records took.
func commitWhileSyncing(t *testing.T, opts Options, n, size int) int64 {
	t.Helper()
	fs := newGateFS(vfs.NewMem())
	opts.FS, opts.Dir, opts.Logger = fs, memDir, discardLogger
	j, _ := openT(t, opts, Position{})
	defer j.Close()

	results := make(chan result, n+1)
	done := func(end Position, err error) { results <- result{end, err} }
	before := fs.syncs.Load()
	fs.gated.Store(true)
	j.Append(1, testBody(0, 0, size), done)
	recv(t, fs.entered, "the first group's sync")

	// Append returns once the record is queued: when Wait returns, all n
	// records wait behind the held sync.
	var wg sync.WaitGroup
	const G = 4
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := g; seq < n; seq += G {
				j.Append(1, testBody(g, seq, size), done)
			}
		}()
	}
	wg.Wait()
	close(fs.release)

	var last Position
	for i := range n + 1 {
		r := recv(t, results, "done callback")
		if r.Err != nil {
			t.Fatalf("record %d: %v", i, r.Err)
		}
		if !last.Less(r.End) {
			t.Fatalf("done at %v after %v", r.End, last)
		}
		last = r.End
	}
	return fs.syncs.Load() - before
}

func TestGroupCommit(t *testing.T) {
	const n, size = 200, 100
	t.Run("concurrent appends share a sync", func(t *testing.T) {
		// One sync for the first record, one for all that queued meanwhile.
		// (No zeros written ahead: their syncs would count.)
		if syncs := commitWhileSyncing(t, Options{ZeroAhead: -1}, n, size); syncs != 2 {
			t.Fatalf("%d records took %d syncs, want 2", n+1, syncs)
		}
	})
	t.Run("MaxGroupBytes closes groups", func(t *testing.T) {
		opts := Options{MaxGroupBytes: 10 * int(recordSize(size)), ZeroAhead: -1}
		if syncs := commitWhileSyncing(t, opts, n, size); syncs != 1+n/10 {
			t.Fatalf("%d records took %d syncs, want %d", n+1, syncs, 1+n/10)
		}
	})
}

// With NoFlushWhenQueueEmpty a group waits for records arriving within
// MaxGroupWait instead of flushing when the queue runs dry.
func TestNoFlushWhenQueueEmpty(t *testing.T) {
	const size = 100
	newJournal := func(t *testing.T, wait time.Duration, groupRecords int) (*Journal, *gateFS) {
		fs := newGateFS(vfs.NewMem())
		j, _ := openT(t, Options{
			FS: fs, Dir: memDir, Logger: discardLogger,
			NoFlushWhenQueueEmpty: true,
			MaxGroupWait:          wait,
			MaxGroupBytes:         groupRecords * int(recordSize(size)),
		}, Position{})
		return j, fs
	}

	t.Run("gathers until full", func(t *testing.T) {
		j, fs := newJournal(t, time.Hour, 5)
		defer j.Close()
		before := fs.syncs.Load()
		results := make(chan result, 5)
		for i := range 5 {
			j.Append(1, testBody(0, i, size), func(end Position, err error) { results <- result{end, err} })
			if i < 4 {
				// The writer has taken the record and waits for more; a
				// writer that flushed on an empty queue would have synced.
				waitWriterIdle(t, j)
			}
		}
		for range 5 {
			if r := recv(t, results, "done callback"); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if syncs := fs.syncs.Load() - before; syncs != 1 {
			t.Fatalf("5 records took %d syncs, want 1", syncs)
		}
	})

	t.Run("flushes after MaxGroupWait", func(t *testing.T) {
		const wait = 200 * time.Millisecond
		j, fs := newJournal(t, wait, 1000)
		defer j.Close()
		before := fs.syncs.Load()
		results := make(chan result, 3)
		start := time.Now()
		for i := range 3 {
			j.Append(1, testBody(0, i, size), func(end Position, err error) { results <- result{end, err} })
		}
		for range 3 {
			if r := recv(t, results, "done callback"); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if elapsed := time.Since(start); elapsed < wait {
			t.Fatalf("group flushed after %v, before MaxGroupWait %v", elapsed, wait)
		}
		if syncs := fs.syncs.Load() - before; syncs != 1 {
			t.Fatalf("3 records took %d syncs, want 1", syncs)
		}
	})

	t.Run("Close flushes a gathering group", func(t *testing.T) {
		j, _ := newJournal(t, time.Hour, 1000)
		results := make(chan result, 1)
		j.Append(1, testBody(0, 0, size), func(end Position, err error) { results <- result{end, err} })
		waitWriterIdle(t, j)
		closed := make(chan error, 1)
		go func() { closed <- j.Close() }()
		if r := recv(t, results, "done callback"); r.Err != nil {
			t.Fatal(r.Err)
		}
		if err := recv(t, closed, "Close"); err != nil {
			t.Fatal(err)
		}
	})
}
