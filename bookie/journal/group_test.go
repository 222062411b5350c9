package journal

import (
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// commitWhileHeld appends one record, holds its group's write (holdWrite)
// or its sync, queues n more records from several goroutines, lets the
// writes and syncs go and returns how many group writes and syncs the n+1
// records took. While a sync is held the writer writes the records as they
// come (syncer.go); they are all written before the sync is let go.
func commitWhileHeld(t *testing.T, opts Options, n, size int, holdWrite bool) (writes, syncs int64) {
	t.Helper()
	fs := newGateFS(vfs.NewMem())
	opts.FS, opts.Dir, opts.Logger = fs, memDir, discardLogger
	j, _ := openT(t, opts, Position{})
	defer j.Close()

	results := make(chan result, n+1)
	done := func(end Position, err error) { results <- result{end, err} }
	syncsBefore, writesBefore := fs.syncs.Load(), j.groups.Load()
	if holdWrite {
		fs.gatedWrites.Store(true)
		j.Append(1, testBody(0, 0, size), done)
		recv(t, fs.entered, "the first group's write")
	} else {
		fs.gated.Store(true)
		j.Append(1, testBody(0, 0, size), done)
		recv(t, fs.entered, "the first group's sync")
	}

	// Append returns once the record is queued: when Wait returns, all n
	// records wait behind the held write or sync.
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
	if !holdWrite {
		waitUntil(t, "the records are written", func() bool {
			j.sync.mu.Lock()
			defer j.sync.mu.Unlock()
			queued := 0
			for _, w := range j.sync.pending {
				queued += len(w.group)
			}
			return queued == n
		})
	}
	close(fs.release)

	recvInOrder(t, results, n+1)
	return j.groups.Load() - writesBefore, fs.syncs.Load() - syncsBefore
}

func TestGroupCommit(t *testing.T) {
	const n, size = 200, 100
	t.Run("concurrent appends share a sync", func(t *testing.T) {
		// One sync for the first record, one for all written meanwhile.
		// (No zeros written ahead: their syncs would count.)
		if _, syncs := commitWhileHeld(t, Options{ZeroAhead: -1}, n, size, false); syncs != 2 {
			t.Fatalf("%d records took %d syncs, want 2", n+1, syncs)
		}
	})
	t.Run("concurrent appends share a write", func(t *testing.T) {
		// One write for the first record, one for all queued meanwhile;
		// one or two syncs, as the syncer takes the second write with the
		// first or after.
		writes, syncs := commitWhileHeld(t, Options{ZeroAhead: -1}, n, size, true)
		if writes != 2 || syncs < 1 || syncs > 2 {
			t.Fatalf("%d records took %d writes and %d syncs, want 2 writes and 1 or 2 syncs", n+1, writes, syncs)
		}
	})
	t.Run("MaxGroupBytes closes groups", func(t *testing.T) {
		opts := Options{MaxGroupBytes: 10 * int(recordSize(size)), ZeroAhead: -1}
		if writes, _ := commitWhileHeld(t, opts, n, size, true); writes != 1+n/10 {
			t.Fatalf("%d records took %d writes, want %d", n+1, writes, 1+n/10)
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

// The writer writes ahead of a sync in progress (syncer.go), but no record
// is acknowledged before an fsync that began after its write; and the
// writer stops maxWrittenAhead bytes ahead, so that the queue fills and
// Append blocks while syncs fall behind.
func TestWriteAheadOfSync(t *testing.T) {
	fs := newGateFS(vfs.NewMem())
	j, _ := openT(t, Options{FS: fs, Dir: memDir, Logger: discardLogger, QueueSize: 4, ZeroAhead: -1}, Position{})
	results := make(chan result, 100)
	done := func(end Position, err error) { results <- result{end, err} }

	fs.gated.Store(true)
	j.Append(1, testBody(0, 0, 100), done)
	recv(t, fs.entered, "the first group's sync")
	j.Append(1, testBody(0, 1, 100), done)
	waitUntil(t, "the second record written during the first sync", func() bool { return j.records.Load() == 2 })
	select {
	case r := <-results:
		t.Fatalf("a record was acknowledged (%v, %v) while the only sync was held", r.End, r.Err)
	default:
	}

	// 1 MiB records: the writer stops once 4 MiB are written ahead of the
	// held sync; the queue (4) fills; the next Append blocks.
	const big = 1 << 20
	n := 2 + maxWrittenAhead/big + 4 + 1
	for i := 2; i < n; i++ {
		go j.Append(1, testBody(0, i, big), done)
	}
	waitUntil(t, "an Append blocked on the full queue", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.mu.blocked > 0
	})
	if ahead := j.records.Load() - 1; ahead*big > 2*maxWrittenAhead {
		t.Fatalf("%d records written ahead of the held sync, want the writer stopped near %d bytes", ahead, maxWrittenAhead)
	}
	close(fs.release)
	recvInOrder(t, results, n)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// recvInOrder receives n done results and checks that each succeeded,
// ending after the one before.
func recvInOrder(t testing.TB, results <-chan result, n int) {
	t.Helper()
	var last Position
	for i := range n {
		r := recv(t, results, "done callback")
		if r.Err != nil {
			t.Fatalf("record %d: %v", i, r.Err)
		}
		if !last.Less(r.End) {
			t.Fatalf("done at %v after %v", r.End, last)
		}
		last = r.End
	}
}
