package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func locStats(s *Storage) (hits, fills uint64) {
	s.locs.mu.Lock()
	defer s.locs.mu.Unlock()
	return s.locs.hits, s.locs.fills
}

// A reader going through a ledger looks the index up once per run of
// locRunLen entries; the entries read are the right ones, and a deleted
// ledger's kept runs serve nothing.
func TestLocationRuns(t *testing.T) {
	s := openT(t, testOptions(vfs.NewMem()))
	defer closeT(t, s)
	const n, size = 150, 100
	for e := int64(0); e < n; e++ {
		mustAdd(t, s, 1, e, e-1, size)
		if e < 10 {
			mustAdd(t, s, 2, e, e-1, size)
		}
	}
	for e := int64(0); e < n; e++ {
		checkEntry(t, s, 1, e, size)
	}
	hits, fills := locStats(s)
	if want := uint64((n + locRunLen - 1) / locRunLen); fills != want || hits != n-want {
		t.Fatalf("%d entries read in order: %d runs read from the index and %d lookups answered from them, want %d and %d", n, fills, hits, want, n-want)
	}
	_, err := s.ReadEntry(1, n)
	wantErr(t, err, ErrNoEntry, "read past the last entry")
	for e := int64(0); e < 10; e++ {
		checkEntry(t, s, 2, e, size)
	}

	// The deleted ledger's entries are still in the entry log (no GC
	// yet), and its runs were kept: reads must not find them.
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	for _, e := range []int64{0, 5, 70, n - 1} {
		_, err := s.ReadEntry(1, e)
		wantErr(t, err, ErrNoLedger, "read of a deleted ledger")
	}
	checkEntry(t, s, 2, 3, size)
}

// Runs kept before GC moved their entries point into removed logs: the
// reads look the entries up again in the index and find them.
func TestLocationRunsAfterGC(t *testing.T) {
	fs := vfs.NewMem()
	s := openT(t, gcOptions(fs))
	defer closeT(t, s)
	const size = 1000
	_, nb := fillAB(t, s, size)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < nb; e++ {
		checkEntry(t, s, 2, e, size)
	}
	if _, fills := locStats(s); fills == 0 {
		t.Fatal("no run kept")
	}
	logDir := fs.PathJoin(memDir, "entrylogs")
	_, logsBefore := dirSize(t, fs, logDir, logSuffix)
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if _, logsAfter := dirSize(t, fs, logDir, logSuffix); logsAfter >= logsBefore {
		t.Fatalf("GC left %d of %d entry logs: no log removed, nothing tested", logsAfter, logsBefore)
	}
	for e := int64(0); e < nb; e++ {
		checkEntry(t, s, 2, e, size)
	}
}

// A run read from the index before a forget is not kept: it may hold a
// deleted ledger's entries.
func TestLocRunsForget(t *testing.T) {
	var r locRuns
	locs := []location{{log: 1, offset: 10, size: 5}, {log: 1, offset: 20, size: 5}}
	r.keep(r.generation(), 7, 100, locs)
	r.keep(r.generation(), 8, 0, locs)
	if loc, ok := r.get(7, 101); !ok || loc != locs[1] {
		t.Fatalf("get(7, 101) = %v, %v; want %v", loc, ok, locs[1])
	}
	for _, e := range []int64{99, 102} {
		if _, ok := r.get(7, e); ok {
			t.Fatalf("get(7, %d) found a location outside the run", e)
		}
	}
	gen := r.generation()
	r.forget(7)
	if _, ok := r.get(7, 100); ok {
		t.Fatal("a forgotten ledger's run still answers")
	}
	if _, ok := r.get(8, 1); !ok {
		t.Fatal("forget(7) dropped ledger 8's run")
	}
	r.keep(gen, 7, 100, locs) // read before the forget
	if _, ok := r.get(7, 100); ok {
		t.Fatal("a run read before a forget was kept")
	}
}

// A location the index cannot decode fails the read of its entry, not
// the reads of the entries before it in a run.
func TestLocationRunsBadNeighbour(t *testing.T) {
	s := openT(t, testOptions(vfs.NewMem()))
	defer closeT(t, s)
	for e := int64(0); e < 10; e++ {
		mustAdd(t, s, 1, e, e-1, 100)
	}
	if err := s.idx.db.Set(entryKey(1, 5), []byte{1, 2, 3}, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < 5; e++ {
		checkEntry(t, s, 1, e, 100)
	}
	if _, err := s.ReadEntry(1, 5); err == nil {
		t.Fatal("the entry whose location cannot be decoded was read")
	}
	for e := int64(6); e < 10; e++ {
		checkEntry(t, s, 1, e, 100)
	}
}
