package storage

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/journal"
)

// crashOpen simulates a power loss of fs (cfg says what unsynced data
// survives), closes s, and opens the storage on the crashed copy.
func crashOpen(t testing.TB, s *Storage, fs *vfs.MemFS, opts Options, cfg vfs.CrashCloneCfg) (*Storage, *vfs.MemFS) {
	t.Helper()
	crashed := fs.CrashClone(cfg)
	if s != nil {
		s.Close()
	}
	opts.FS = crashed
	return openT(t, opts), crashed
}

func TestCrashWithoutCheckpoint(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	opts.WriteBufferSize = 2048 // some bytes reach the log files, unsynced
	s := openT(t, opts)
	for e := int64(0); e < 50; e++ {
		for l := int64(1); l <= 4; l++ {
			mustAdd(t, s, l, e, e-1, 200)
		}
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	s.Close()
	// Nothing of the entry logs survived: only the journal has the entries.
	if n, _ := dirSize(t, crashed, crashed.PathJoin(memDir, "entrylogs"), logSuffix); n != 0 {
		t.Fatalf("crashed entry logs hold %d bytes, want 0 (never synced)", n)
	}
	opts.FS = crashed
	s = openT(t, opts)
	defer closeT(t, s)
	for e := int64(0); e < 50; e++ {
		for l := int64(1); l <= 4; l++ {
			checkEntry(t, s, l, e, 200)
		}
	}
	if lac, last, err := s.LastAddConfirmed(3); err != nil || lac != 48 || last != 49 {
		t.Fatalf("LastAddConfirmed(3) = %d, %d, %v", lac, last, err)
	}
}

func TestCheckpointReleasesJournal(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	opts.Journal.MaxFileSize = 16 << 10
	jdir := fs.PathJoin(memDir, "journal")
	s := openT(t, opts)
	for e := int64(0); e < 200; e++ {
		mustAdd(t, s, 1, e, e-1, 500)
	}
	before, files := dirSize(t, fs, jdir, ".jnl")
	if files < 4 {
		t.Fatalf("%d journal files, want several", files)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	after, left := dirSize(t, fs, jdir, ".jnl")
	if left != 1 || after >= before/4 {
		t.Fatalf("after a checkpoint: %d journal files, %d bytes (before: %d, %d); want only the current one", left, after, files, before)
	}
	// The entries now live in entry logs and index only.
	mustAdd(t, s, 1, 200, 199, 500)
	s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e := int64(0); e <= 200; e++ {
		checkEntry(t, s, 1, e, 500)
	}
}

// A finished entry log starts a checkpoint at once, long before the
// interval: the journal it covers is released.
func TestCheckpointOnRotation(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	opts.CheckpointInterval = time.Hour
	opts.EntryLogMaxSize = 64 << 10
	opts.Journal.MaxFileSize = 16 << 10
	jdir := fs.PathJoin(memDir, "journal")
	s := openT(t, opts)
	defer closeT(t, s)
	lastCkpt := func() journal.Position {
		s.ckptMu.Lock()
		defer s.ckptMu.Unlock()
		return s.lastCkpt
	}
	// Less than a log: no checkpoint, the journal files stay.
	e := int64(0)
	for ; e < 60; e++ {
		mustAdd(t, s, 1, e, e-1, 500)
	}
	if _, files := dirSize(t, fs, jdir, ".jnl"); files < 2 || lastCkpt() != (journal.Position{}) {
		t.Fatalf("before any rotation: %d journal files, checkpoint %v; want several files, no checkpoint", files, lastCkpt())
	}
	// Past a log's size: the log is finished, a checkpoint follows.
	for ; e < 200; e++ {
		mustAdd(t, s, 1, e, e-1, 500)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ckpt := lastCkpt()
		first := firstJournalFile(t, fs, jdir)
		if ckpt != (journal.Position{}) && first == ckpt.File {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after entry logs were finished: checkpoint %v, first journal file %d; want a checkpoint releasing the files before its own", ckpt, first)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// firstJournalFile is the number of the oldest journal file in dir (free
// files, kept for reuse, are not journal files).
func firstJournalFile(t *testing.T, fs vfs.FS, dir string) uint64 {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := uint64(math.MaxUint64)
	for _, n := range names {
		if hex, ok := strings.CutSuffix(n, ".jnl"); ok {
			num, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				t.Fatalf("journal file %s: %v", n, err)
			}
			first = min(first, num)
		}
	}
	return first
}

// TestPowerLoss streams adds from several goroutines while checkpoints run,
// simulates a power loss in the middle, and checks that every entry
// acknowledged before it reads back intact.
func TestPowerLoss(t *testing.T) {
	for _, tc := range []struct {
		unsynced int
		seed     uint64
	}{{0, 1}, {50, 1}, {50, 2}, {50, 3}, {50, 4}, {100, 5}} {
		t.Run(fmt.Sprintf("unsynced%d/seed%d", tc.unsynced, tc.seed), func(t *testing.T) {
			powerLoss(t, tc.unsynced, tc.seed)
		})
	}
}

func powerLoss(t *testing.T, unsynced int, seed uint64) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	opts.EntryLogMaxSize = 64 << 10
	opts.WriteBufferSize = 8 << 10
	opts.Journal.MaxFileSize = 64 << 10
	s := openT(t, opts)
	// Ledger 100 lives among ledger 99, which is deleted: GC compacts
	// while the adds run.
	const live, dead, prefill = 100, 99, 200
	for e := int64(0); e < prefill; e++ {
		if e%4 == 0 {
			mustAdd(t, s, live, e/4, e/4-1, 1000)
		}
		mustAdd(t, s, dead, e, e-1, 1000)
	}
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := del(t, s, dead); err != nil {
		t.Fatal(err)
	}

	const writers, ledgersPer, window = 4, 2, 16
	var ack acked
	var nacked atomic.Int64
	progress := make(chan struct{}, 1) // an ack happened
	var stop atomic.Bool
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			sem := make(chan struct{}, window)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for e := int64(0); !stop.Load(); e++ {
				for k := range ledgersPer {
					ledger := int64(w*ledgersPer + k + 1)
					size := 10 + rng.IntN(3000)
					sem <- struct{}{}
					inflight.Add(1)
					s.AddEntry(mkEntry(ledger, e, e-1, size), false, func(err error) {
						defer inflight.Done()
						<-sem
						if err != nil {
							if !errors.Is(err, ErrClosed) {
								failed.Store(err)
							}
							return
						}
						ack.add(ledger, e, size)
						nacked.Add(1)
						select {
						case progress <- struct{}{}:
						default:
						}
					})
				}
			}
		}()
	}
	deadline := time.After(waitTimeout)
	waitAcks := func(n int64) {
		t.Helper()
		for nacked.Load() < n {
			select {
			case <-progress:
			case <-deadline:
				t.Fatalf("timed out waiting for %d acks (have %d)", n, nacked.Load())
			}
		}
	}
	for i := range 3 {
		waitAcks(int64(300 * (i + 1)))
		if err := s.Checkpoint(); err != nil {
			t.Fatalf("Checkpoint: %v", err)
		}
		if err := s.GC(); err != nil {
			t.Fatalf("GC: %v", err)
		}
	}
	waitAcks(nacked.Load() + 300) // some acks after the last checkpoint
	want := ack.snapshot()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(seed, 99))})
	waitAcks(nacked.Load() + 100) // keep going a little after the crash point
	stop.Store(true)
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("an add failed: %v", err)
	}
	closeT(t, s)

	opts.FS = crashed
	s = openT(t, opts)
	replayed := s.replayed
	if replayed == 0 {
		t.Fatal("nothing replayed: the crash point was not after the last checkpoint")
	}
	ack.checkAll(t, s, want)
	for e := int64(0); e < prefill/4; e++ {
		checkEntry(t, s, live, e, 1000)
	}
	checkIndex(t, s)
	// The recovered storage takes new adds, and survives another crash.
	for l := int64(1); l <= writers*ledgersPer; l++ {
		mustAdd(t, s, l, 1_000_000, 0, 100)
	}
	t.Logf("%d acknowledged entries before the crash, all recovered (%d journal records replayed)", len(want), replayed)
	s, _ = crashOpen(t, s, crashed, opts, vfs.CrashCloneCfg{})
	ack.checkAll(t, s, want)
	closeT(t, s)
}

// truncateFile cuts a file on fs to size (MemFS has no truncate: rewrite).
func truncateFile(t testing.TB, fs vfs.FS, path string, size int64) {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) < size {
		t.Fatalf("%s is %d bytes, cannot cut to %d", path, len(data), size)
	}
	w, err := fs.Create(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[:size]); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// A crash cut the current entry log short before a checkpoint covered it:
// the journal still has the entries, and Open puts them in a new log.
func TestTruncatedLogBeforeCheckpoint(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	opts.WriteBufferSize = 512
	s := openT(t, opts)
	for e := int64(0); e < 100; e++ {
		mustAdd(t, s, 1, e, e-1, 100)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
	s.Close()
	path := crashed.PathJoin(memDir, "entrylogs", logFileName(1))
	fi, err := crashed.Stat(path)
	if err != nil || fi.Size() < 100*100 {
		t.Fatalf("entry log before the cut: %v, %v", fi, err)
	}
	truncateFile(t, crashed, path, fi.Size()/2+3)
	opts.FS = crashed
	s = openT(t, opts)
	defer closeT(t, s)
	for e := int64(0); e < 100; e++ {
		checkEntry(t, s, 1, e, 100)
	}
}

// An entry log a checkpoint covered lost its tail (or a bit) anyway:
// reads of the missing entries report corruption with file and offset.
func TestTruncatedLogAfterCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	for e := int64(0); e < 100; e++ {
		mustAdd(t, s, 1, e, e-1, 100)
	}
	locs := make([]location, 100)
	for e := range locs {
		loc, ok, err := s.idx.location(1, int64(e))
		if !ok || err != nil {
			t.Fatalf("index has no entry %d: %v", e, err)
		}
		locs[e] = loc
	}
	closeT(t, s) // the final checkpoint covers everything

	path := fs.PathJoin(memDir, "entrylogs", logFileName(locs[0].log))
	cut := locs[60].offset + 10 // inside entry 60
	truncateFile(t, fs, path, cut)
	// And flip a payload bit of entry 30.
	f, err := fs.OpenReadWrite(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, locs[30].offset+50)
	b[0] ^= 0x10
	f.WriteAt(b, locs[30].offset+50)
	f.Close()

	s = openT(t, opts)
	defer closeT(t, s)
	for e := int64(0); e < 100; e++ {
		_, err := s.ReadEntry(1, e)
		if e < 60 && e != 30 {
			if err != nil {
				t.Fatalf("entry %d: %v", e, err)
			}
			continue
		}
		var ce *CorruptionError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorruption) {
			t.Fatalf("entry %d: got %v, want a CorruptionError", e, err)
		}
		if ce.File != path || ce.Offset != locs[e].offset-recordPrefixSize {
			t.Fatalf("entry %d: corruption at %s:%d, want %s:%d", e, ce.File, ce.Offset, path, locs[e].offset-recordPrefixSize)
		}
	}
	// The LAC comes from the last entry, which is gone.
	_, _, err = s.LastAddConfirmed(1)
	wantErr(t, err, ErrCorruption, "LastAddConfirmed with the last entry cut off")
}

// Pebble flushes its memtable on its own, so after a crash the index may
// be ahead of the checkpoint: a fence or delete from a record that replay
// has not reached yet. Replay must still re-apply the adds before it
// (their entry-log bytes were lost), and re-delete after them.
func TestReplayWithIndexAhead(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	for e := int64(0); e < 20; e++ {
		mustAdd(t, s, 1, e, e-1, 100)
		mustAdd(t, s, 2, e, e-1, 100)
	}
	if r := fence(t, s, 1); r.err != nil {
		t.Fatal(r.err)
	}
	if err := del(t, s, 2); err != nil {
		t.Fatal(err)
	}
	// As if Pebble flushed by itself: the index is durable, the entry
	// logs are not, and the checkpoint is still the empty one.
	if err := s.idx.flush(); err != nil {
		t.Fatal(err)
	}
	s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e := int64(0); e < 20; e++ {
		checkEntry(t, s, 1, e, 100)
		_, err := s.ReadEntry(2, e)
		wantErr(t, err, ErrNoLedger, "read of deleted ledger 2")
	}
	wantErr(t, add(t, s, mkEntry(1, 20, 19, 100)), ErrFenced, "add to fenced ledger 1")
	if lac, last, err := s.LastAddConfirmed(1); err != nil || lac != 18 || last != 19 {
		t.Fatalf("LastAddConfirmed(1) = %d, %d, %v", lac, last, err)
	}
	checkIndex(t, s)
}

// Large adds' journal records carry a checksum combined from the entry's
// (knownPayloadMin): replayed after a crash that lost the entry logs,
// they come back whole, on either side of the size where that starts.
func TestCrashReplaysLargeEntries(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	sizes := []int{knownPayloadMin - 1, knownPayloadMin, 3*knownPayloadMin + 5, 100}
	for e, size := range sizes {
		mustAdd(t, s, 1, int64(e), int64(e)-1, size)
	}
	s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e, size := range sizes {
		checkEntry(t, s, 1, int64(e), size)
	}
}
