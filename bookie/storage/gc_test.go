package storage

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// fillAB writes ledger A (1) alone for a while, then A and B (2)
// interleaved, 3 entries of A for each of B, over many small entry logs.
// It returns the number of entries of A and of B.
func fillAB(t *testing.T, s *Storage, size int) (na, nb int64) {
	t.Helper()
	for ; na < 100; na++ {
		mustAdd(t, s, 1, na, na-1, size)
	}
	for i := 0; i < 300; i++ {
		if i%4 == 3 {
			mustAdd(t, s, 2, nb, nb-1, size)
			nb++
		} else {
			mustAdd(t, s, 1, na, na-1, size)
			na++
		}
	}
	return na, nb
}

func gcOptions(fs vfs.FS) Options {
	opts := testOptions(fs)
	opts.EntryLogMaxSize = 32 << 10
	opts.WriteBufferSize = 4 << 10
	return opts
}

func TestGC(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := gcOptions(fs)
	s := openT(t, opts)
	const size = 1000
	na, nb := fillAB(t, s, size)
	// A checkpoint fsyncs the finished logs and records their metadata.
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	logDir := fs.PathJoin(memDir, "entrylogs")
	before, logsBefore := dirSize(t, fs, logDir, logSuffix)
	if logsBefore < 10 {
		t.Fatalf("%d entry logs, want many", logsBefore)
	}

	if err := s.GC(); err != nil { // nothing deleted: nothing to do
		t.Fatal(err)
	}
	if n, _ := dirSize(t, fs, logDir, logSuffix); n != before {
		t.Fatalf("GC with nothing deleted changed the entry logs from %d to %d bytes", before, n)
	}

	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	after, logsAfter := dirSize(t, fs, logDir, logSuffix)
	t.Logf("entry logs: %d bytes in %d files before GC, %d in %d after", before, logsBefore, after, logsAfter)
	// B is a sixth of what was written; its copies and the current log stay.
	if after > before/3 {
		t.Fatalf("GC left %d of %d bytes", after, before)
	}
	check := func(s *Storage) {
		t.Helper()
		if n := checkIndex(t, s); n != int(nb) {
			t.Fatalf("index has %d entries, want %d", n, nb)
		}
		for e := int64(0); e < nb; e++ {
			checkEntry(t, s, 2, e, size)
		}
		for _, e := range []int64{0, na / 2, na - 1} {
			_, err := s.ReadEntry(1, e)
			wantErr(t, err, ErrNoLedger, "read of deleted ledger A")
		}
	}
	check(s)
	mustAdd(t, s, 2, nb, nb-1, size)
	nb++

	// Power loss right after GC: everything live is still there.
	s, crashed := crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	check(s)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	check(s)
	closeT(t, s)
	opts.FS = crashed
	s = openT(t, opts)
	defer closeT(t, s)
	check(s)
}

// On disk, dead logs are deleted gradually (cut a step at a time): the
// space is reclaimed all the same and live entries stay readable. Logs
// written with O_DIRECT too (their files padded to a block).
func TestGCOnDisk(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { testGCOnDisk(t, direct) })
	}
}

func testGCOnDisk(t *testing.T, direct bool) {
	defer func(g fsutil.Gradual) { logDeletion = g }(logDeletion)
	logDeletion = fsutil.Gradual{Step: 4 << 10, Pause: 100 * time.Microsecond}
	opts := gcOptions(vfs.Default)
	opts.Dir = t.TempDir()
	opts.EntryLogDirectIO = direct
	s := openT(t, opts)
	defer closeT(t, s)
	const size = 1000
	_, nb := fillAB(t, s, size)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(opts.Dir, "entrylogs")
	before, logsBefore := dirSize(t, vfs.Default, logDir, logSuffix)
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	after, logsAfter := dirSize(t, vfs.Default, logDir, logSuffix)
	t.Logf("entry logs: %d bytes in %d files before GC, %d in %d after", before, logsBefore, after, logsAfter)
	if after > before/3 {
		t.Fatalf("GC left %d of %d bytes", after, before)
	}
	for e := int64(0); e < nb; e++ {
		checkEntry(t, s, 2, e, size)
	}
}

// Compaction runs while adds keep coming: none fails, and adds complete
// while the compaction is between batches (it never holds them up for the
// whole pass).
func TestGCCompactionWithConcurrentAdds(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := gcOptions(fs)
	s := openT(t, opts)
	const size = 1000
	_, nb := fillAB(t, s, size)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}

	var acks atomic.Int64
	progress := make(chan struct{}, 1)
	stop := make(chan struct{})
	addErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // ledger 3, adds back to back
		defer wg.Done()
		for e := int64(0); ; e++ {
			select {
			case <-stop:
				return
			default:
			}
			done := make(chan error, 1)
			s.AddEntry(mkEntry(3, e, e-1, size), false, func(err error) { done <- err })
			if err := <-done; err != nil {
				addErr <- fmt.Errorf("add entry %d during GC: %w", e, err)
				return
			}
			acks.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()

	s.batchBytes, s.batchEntries = 8<<10, 8 // many small batches
	var batches, addsDuringPauses int
	s.testHookCompactBatch = func() {
		// Between batches, GC holds no lock: adds must get through.
		batches++
		start := acks.Load()
		deadline := time.After(waitTimeout)
		for acks.Load() < start+3 {
			select {
			case <-progress:
			case err := <-addErr:
				t.Errorf("%v", err)
				return
			case <-deadline:
				t.Errorf("no add completed during a compaction pause")
				return
			}
		}
		addsDuringPauses += 3
	}
	startAcks := acks.Load()
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	duringGC := acks.Load() - startAcks
	close(stop)
	wg.Wait()
	select {
	case err := <-addErr:
		t.Fatal(err)
	default:
	}
	if batches < 5 || duringGC < int64(addsDuringPauses) {
		t.Fatalf("%d compaction batches, %d adds during GC; want several of each", batches, duringGC)
	}
	t.Logf("%d compaction batches, %d adds completed during GC", batches, duringGC)
	s.testHookCompactBatch = nil

	n3 := acks.Load()
	s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e := int64(0); e < nb; e++ {
		checkEntry(t, s, 2, e, size)
	}
	for e := int64(0); e < n3; e++ {
		checkEntry(t, s, 3, e, size)
	}
}

// Logs left by a crash have no metadata: GC rebuilds it from the index and
// a scan of the log (which may end in a torn tail), then collects them.
func TestGCCrashedLogs(t *testing.T) {
	for _, unsynced := range []int{0, 50} {
		t.Run(fmt.Sprintf("unsynced%d", unsynced), func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := gcOptions(fs)
			opts.EntryLogMaxSize = 1 << 20 // one log: it is current at the crash
			s := openT(t, opts)
			const size = 1000
			na, nb := fillAB(t, s, size)
			if err := s.Checkpoint(); err != nil { // log 1 is synced, not finished
				t.Fatal(err)
			}
			for i := int64(0); i < 20; i++ { // and more, unsynced
				mustAdd(t, s, 2, nb, nb-1, size)
				nb++
			}
			s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rngFor(unsynced)})
			defer func() { closeT(t, s) }()
			if err := del(t, s, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.GC(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.logs.fileSize(1); err == nil {
				t.Fatal("crashed log 1 is still there after GC")
			}
			for e := int64(0); e < nb; e++ {
				checkEntry(t, s, 2, e, size)
			}
			checkIndex(t, s)
			_, err := s.ReadEntry(1, na-1)
			wantErr(t, err, ErrNoLedger, "read of deleted ledger A")
			s, _ = crashOpen(t, s, s.fs.(*vfs.MemFS), opts, vfs.CrashCloneCfg{})
			for e := int64(0); e < nb; e++ {
				checkEntry(t, s, 2, e, size)
			}
		})
	}
}

// GC leaves a log alone when the index points past a corrupt record.
func TestGCCorruptLog(t *testing.T) {
	fs := vfs.NewMem()
	opts := gcOptions(fs)
	opts.EntryLogMaxSize = 1 << 20
	s := openT(t, opts)
	const size = 1000
	_, nb := fillAB(t, s, size)
	loc, _, _ := s.idx.location(2, 10)
	closeT(t, s) // log 1 finished with metadata

	path := fs.PathJoin(memDir, "entrylogs", logFileName(1))
	f, err := fs.OpenReadWrite(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, loc.offset+100) // inside B's entry 10
	f.Close()

	s = openT(t, opts)
	defer closeT(t, s)
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.logs.fileSize(1); err != nil {
		t.Fatalf("GC removed a corrupt log: %v", err)
	}
	for e := int64(0); e < nb; e++ {
		_, err := s.ReadEntry(2, e)
		if e == 10 {
			wantErr(t, err, ErrCorruption, "read of the corrupt entry")
		} else if err != nil {
			t.Fatalf("entry %d: %v", e, err)
		}
	}
	if err := s.GC(); err != nil { // known bad: skipped quietly
		t.Fatal(err)
	}
}

// A ledger deleted while compaction copies it, between the copy and the
// repointing: the copies must not bring its index entries back.
func TestGCDeleteDuringCompaction(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, gcOptions(fs))
	defer closeT(t, s)
	_, nb := fillAB(t, s, 1000)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	s.batchBytes, s.batchEntries = 8<<10, 4
	var batches int
	s.testHookCompactBatch = func() {
		if batches++; batches == 1 {
			if err := del(t, s, 2); err != nil {
				t.Errorf("delete during compaction: %v", err)
			}
		}
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if batches == 0 {
		t.Fatal("no compaction batch")
	}
	if n := checkIndex(t, s); n != 0 {
		t.Fatalf("index has %d entries after both ledgers were deleted", n)
	}
	for e := int64(0); e < nb; e++ {
		_, err := s.ReadEntry(2, e)
		wantErr(t, err, ErrNoLedger, "read of ledger 2 deleted during compaction")
	}
}
