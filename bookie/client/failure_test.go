package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta"
)

// Failure scenarios, each a script over an in-process cluster.

// ensembleBookie returns the test bookie at index i of the writer's
// current ensemble.
func ensembleBookie(cl *cluster, w *Writer, i int) *testBookie {
	md := w.Metadata()
	return cl.bookie(md.last().Bookies[i])
}

// A bookie of the ensemble fails during a stream of adds (killed, or
// silently holding adds until AddTimeout): the writer replaces it by the
// spare and goes on. Every add succeeds, in order, the metadata has two
// ensembles, and everything reads back.
func TestEnsembleChange(t *testing.T) { forTransports(t, testEnsembleChange) }

func testEnsembleChange(t *testing.T, local bool) {
	for _, tc := range []struct {
		name string
		fail func(cl *cluster, b *testBookie)
	}{
		{"bookie killed", func(cl *cluster, b *testBookie) { cl.kill(b) }},
		{"bookie stops answering adds", func(cl *cluster, b *testBookie) {
			b.storage.mu.Lock()
			b.storage.stall = true
			b.storage.mu.Unlock()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			cl := newClusterOver(t, 4, local) // three for the ensemble, one spare
			c := cl.client(func(cfg *Config) { cfg.AddTimeout = time.Second })
			w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			const n = 600
			var (
				mu   sync.Mutex
				next int64
			)
			failAt := make(chan struct{})
			all := make(chan struct{})
			check := func(id int64, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil || id != next {
					t.Errorf("completion %d: id %d err %v", next, id, err)
				}
				next++
				if next == 100 {
					close(failAt)
				}
				if next == n {
					close(all)
				}
			}
			for i := range 200 {
				w.Append(payload("ens", i), check)
			}
			<-failAt
			victim := ensembleBookie(cl, w, 1)
			tc.fail(cl, victim)
			for i := 200; i < n; i++ {
				w.Append(payload("ens", i), check)
			}
			select {
			case <-all:
			case <-ctx.Done():
				t.Fatal("adds did not complete")
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}

			r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			md := r.Metadata()
			// One change replaces the victim. On a loaded machine an add
			// to a healthy bookie may also time out and change the
			// ensemble once more; the last must still be without the
			// victim, and begin after it failed.
			if len(md.Ensembles) < 2 {
				t.Fatalf("ensembles %+v, want a change after the victim failed", md.Ensembles)
			}
			if len(md.Ensembles) > 2 {
				t.Logf("ensembles %+v: more than one change (adds timed out on a loaded machine)", md.Ensembles)
			}
			last := md.Ensembles[len(md.Ensembles)-1]
			if last.FirstEntry < 100 || last.FirstEntry >= n || slices.Contains(last.Bookies, victim.addr) {
				t.Fatalf("last ensemble %+v (victim %s), want one without the victim from an entry in [100, %d)", last, victim.addr, n)
			}
			if md.State != StateClosed || md.LastEntry != n-1 || md.Length != totalLength("ens", n) {
				t.Fatalf("metadata %+v", md)
			}
			checkEntries(t, ctx, r, "ens", n-1)
		})
	}
}

// With no spare, a failed bookie cannot be replaced: the pending adds that
// lack their quorum fail with ErrNotEnoughBookies, later ones too, and
// Close still closes the ledger at the LAC.
func TestEnsembleChangeWithoutSpare(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	for r := range appendAll(w, "ns", 0, 10) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	cl.kill(cl.bookies[0])
	if _, err := w.AppendSync(ctx, payload("ns", 10)); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("append with a dead bookie and no spare: %v", err)
	}
	if _, err := w.AppendSync(ctx, payload("ns", 11)); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("append on a broken writer: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if md := w.Metadata(); md.State != StateClosed || md.LastEntry != 9 {
		t.Fatalf("metadata %+v", md)
	}
}

// The writer "crashes" (is abandoned with adds in flight). Recovery by
// another client closes the ledger with every acknowledged entry, the old
// writer is fenced: its next add and its Close fail with ErrFenced.
func TestRecoveryAfterWriterCrash(t *testing.T) { forTransports(t, testRecoveryAfterWriterCrash) }

func testRecoveryAfterWriterCrash(t *testing.T, local bool) {
	for _, q := range []struct{ e, qw, qa int }{{3, 2, 2}, {3, 3, 2}, {5, 3, 2}, {1, 1, 1}} {
		t.Run(fmt.Sprintf("%d-%d-%d", q.e, q.qw, q.qa), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			cl := newClusterOver(t, q.e, local)
			w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: q.e, WriteQuorum: q.qw, AckQuorum: q.qa})
			if err != nil {
				t.Fatal(err)
			}
			for r := range appendAll(w, "crash", 0, 50) {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			// More adds in flight while recovery runs.
			var mu sync.Mutex
			var acked []int64
			var inflight sync.WaitGroup
			inflight.Add(30)
			for i := 50; i < 80; i++ {
				w.Append(payload("crash", i), func(id int64, err error) {
					if err == nil {
						mu.Lock()
						acked = append(acked, id)
						mu.Unlock()
					} else if !errors.Is(err, ErrFenced) {
						t.Errorf("in-flight add %d: %v, want success or ErrFenced", id, err)
					}
					inflight.Done()
				})
			}

			r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
			if err != nil {
				t.Fatal(err)
			}
			md := r.Metadata()
			if md.State != StateClosed || md.LastEntry < 49 || md.LastEntry > 79 {
				t.Fatalf("recovered metadata %+v", md)
			}
			if md.Length != totalLength("crash", int(md.LastEntry+1)) {
				t.Fatalf("length %d, want %d", md.Length, totalLength("crash", int(md.LastEntry+1)))
			}
			if r.LastAddConfirmed() != md.LastEntry {
				t.Fatalf("reader LAC %d, last entry %d", r.LastAddConfirmed(), md.LastEntry)
			}
			checkEntries(t, ctx, r, "crash", md.LastEntry)

			if _, err := w.AppendSync(ctx, []byte("after recovery")); !errors.Is(err, ErrFenced) {
				t.Fatalf("old writer's append after recovery: %v, want ErrFenced", err)
			}
			inflight.Wait()
			mu.Lock()
			for _, id := range acked {
				if id > md.LastEntry {
					t.Fatalf("entry %d was acknowledged but the recovered ledger ends at %d", id, md.LastEntry)
				}
			}
			mu.Unlock()
			if err := w.Close(ctx); !errors.Is(err, ErrFenced) {
				t.Fatalf("old writer's Close: %v, want ErrFenced", err)
			}
			// Opening again (with or without recovery) sees the same ledger.
			r2, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
			if err != nil || r2.Metadata().LastEntry != md.LastEntry {
				t.Fatalf("second open: %v, %+v", err, r2.Metadata())
			}
		})
	}
}

// An idle writer (nothing in flight) is fenced too: recovery closes at its
// LAC and its next add fails.
func TestRecoveryOfIdleWriter(t *testing.T) {
	for _, n := range []int{0, 1, 7} {
		t.Run(fmt.Sprintf("%d entries", n), func(t *testing.T) {
			ctx := testCtx(t)
			cl := newCluster(t, 3)
			w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if _, err := w.AppendSync(ctx, payload("idle", i)); err != nil {
					t.Fatal(err)
				}
			}
			r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
			if err != nil {
				t.Fatal(err)
			}
			if md := r.Metadata(); md.LastEntry != int64(n-1) || md.Length != totalLength("idle", n) {
				t.Fatalf("recovered %+v, want last entry %d", md, n-1)
			}
			checkEntries(t, ctx, r, "idle", int64(n-1))
			if _, err := w.AppendSync(ctx, []byte("late")); !errors.Is(err, ErrFenced) {
				t.Fatalf("append after recovery: %v, want ErrFenced", err)
			}
		})
	}
}

// Two clients recover the same ledger at once: one closes it, the other
// adopts its result.
func TestConcurrentRecoveries(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for r := range appendAll(w, "race", 0, 40) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	appendAll(w, "race", 40, 60) // in flight, never waited for
	const recoverers = 3
	mds := make([]LedgerMetadata, recoverers)
	errs := make([]error, recoverers)
	var wg sync.WaitGroup
	for i := range recoverers {
		c := cl.client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
			if errs[i] = err; err == nil {
				mds[i] = r.Metadata()
			}
		}()
	}
	wg.Wait()
	for i := range recoverers {
		if errs[i] != nil {
			t.Fatalf("recoverer %d: %v", i, errs[i])
		}
		if mds[i].State != StateClosed || mds[i].LastEntry != mds[0].LastEntry || mds[i].Length != mds[0].Length {
			t.Fatalf("recoverers disagree: %+v vs %+v", mds[i], mds[0])
		}
	}
	if mds[0].LastEntry < 39 {
		t.Fatalf("recovered to %d, acknowledged 39", mds[0].LastEntry)
	}
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, ctx, r, "race", mds[0].LastEntry)
}

// Recovery needs Qw-Qa+1 fenced bookies in every write set: with 3/2/2 one
// bookie down of three leaves that; two down do not, and recovery fails
// clearly without changing the ledger's end.
func TestRecoveryWithBookiesDown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		down    int
		wantErr error
	}{
		{"one of three down", 1, nil},
		{"two of three down", 2, ErrNoQuorum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			cl := newCluster(t, 3)
			w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			for r := range appendAll(w, "down", 0, 30) {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			for _, b := range cl.bookies[:tc.down] {
				cl.kill(b)
			}
			r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("recovery: %v, want %v", err, tc.wantErr)
				}
				t.Logf("recovery failed as expected: %v", err)
				md := readMD(t, ctx, cl, w.ID())
				if md.State != StateInRecovery {
					t.Fatalf("state after a failed recovery: %s", md.State)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			md := r.Metadata()
			if md.State != StateClosed || md.LastEntry != 29 || md.Length != totalLength("down", 30) {
				t.Fatalf("recovered %+v", md)
			}
			checkEntries(t, ctx, r, "down", 29)
		})
	}
}

// A recoverer that died leaves the ledger IN_RECOVERY; the next one
// finishes the job.
func TestRecoveryResumesAfterRecovererDied(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for r := range appendAll(w, "resume", 0, 10) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	c := cl.client()
	cur, err := c.readMetadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.updateMetadata(ctx, w.ID(), cur, func(m *LedgerMetadata) (bool, error) {
		m.State = StateInRecovery
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The writer cannot close a ledger another client is recovering.
	if err := w.Close(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("Close of a ledger in recovery: %v, want ErrFenced", err)
	}
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
	if err != nil {
		t.Fatal(err)
	}
	if md := r.Metadata(); md.State != StateClosed || md.LastEntry != 9 {
		t.Fatalf("recovered %+v", md)
	}
}

func readMD(t *testing.T, ctx context.Context, cl *cluster, id int64) LedgerMetadata {
	t.Helper()
	b, _, err := cl.meta.Get(ctx, meta.LedgerPath(id))
	if err != nil {
		t.Fatal(err)
	}
	md, err := decodeMetadata(id, b)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// A bookie whose disk fills refuses adds as read-only: the writer moves
// its ledger to another bookie, and the client leaves the read-only one
// out of new ensembles. Once no writable bookie is left, creating a
// ledger fails at once, saying why, without allocating an id.
func TestReadOnlyBookieLeftOut(t *testing.T) { forTransports(t, testReadOnlyBookieLeftOut) }

func testReadOnlyBookieLeftOut(t *testing.T, local bool) {
	t.Parallel()
	ctx := testCtx(t)
	cl := newClusterOver(t, 2, local)
	c := cl.client()
	opts := LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}
	append1 := func(w *Writer, i int) error {
		errc := make(chan error, 1)
		w.Append(payload("ro", i), func(_ int64, err error) { errc <- err })
		return <-errc
	}
	w, err := c.CreateLedger(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := append1(w, 0); err != nil {
		t.Fatal(err)
	}
	first := ensembleBookie(cl, w, 0)
	first.full.On()
	if err := append1(w, 1); err != nil {
		t.Fatalf("append after the bookie's disk filled: %v (want it moved to the other bookie)", err)
	}
	other := ensembleBookie(cl, w, 0)
	if other == first {
		t.Fatalf("ledger still on the full bookie %s", first.addr)
	}
	for range 8 {
		w2, err := c.CreateLedger(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if b := ensembleBookie(cl, w2, 0); b != other {
			t.Fatalf("new ledger placed on %s, the read-only bookie is %s", b.addr, first.addr)
		}
	}

	other.full.On()
	err = append1(w, 2)
	if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "1 read-only") {
		t.Fatalf("append with both bookies full: %v", err)
	}
	counter, _, err := cl.meta.Get(ctx, meta.LedgerIDCounterPath)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateLedger(ctx, opts)
	if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "need 1, 0 available (2 registered, 2 read-only)") {
		t.Fatalf("create with both bookies read-only: %v", err)
	}
	after, _, err := cl.meta.Get(ctx, meta.LedgerIDCounterPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(counter, after) {
		t.Errorf("a refused create allocated a ledger id: counter %q, then %q", counter, after)
	}
}

// TestReadOnlyMarkLeavesBookieOut: a bookie marked read-only in the
// metadata store (/bookies/readonly/<id>, written by the bookie itself) is
// left out of new ensembles without having refused anything, and is
// placed on again as soon as the mark is gone.
func TestReadOnlyMarkLeavesBookieOut(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	cl := newCluster(t, 2)
	c := cl.client()
	marked, other := cl.bookies[0], cl.bookies[1]
	if err := meta.EnsurePath(ctx, cl.meta, meta.BookiesReadOnlyRoot); err != nil {
		t.Fatal(err)
	}
	mark := meta.Join(meta.BookiesReadOnlyRoot, marked.addr)
	if _, err := cl.meta.Create(ctx, mark, []byte(`{"reason":"test"}`), meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	one := LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}
	for range 8 {
		w, err := c.CreateLedger(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if b := ensembleBookie(cl, w, 0); b != other {
			t.Fatalf("new ledger placed on %s, marked read-only", b.addr)
		}
	}
	two := LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2}
	if _, err := c.CreateLedger(ctx, two); !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "1 read-only") {
		t.Fatalf("a 2-bookie ledger with 1 of 2 marked read-only: %v", err)
	}
	if err := cl.meta.Delete(ctx, mark, meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateLedger(ctx, two); err != nil {
		t.Fatalf("a 2-bookie ledger once the mark is gone: %v", err)
	}
}

// TestRecoveryOnFullDisk: a bookie above its disk-usage threshold refuses
// new adds but still takes the recovery adds that close a ledger it
// fenced, so a ledger left open can be recovered and its topic opened.
func TestRecoveryOnFullDisk(t *testing.T) { forTransports(t, testRecoveryOnFullDisk) }

func testRecoveryOnFullDisk(t *testing.T, local bool) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 1, local)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := w.AppendSync(ctx, payload("full", i)); err != nil {
			t.Fatal(err)
		}
	}
	b := cl.bookies[0]
	b.mem.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 1000, UsedBytes: 960, AvailBytes: 40})
	if err := b.Storage.CheckDisks(); !errors.Is(err, storage.ErrReadOnly) {
		t.Fatalf("a disk check at 96 %%: %v, want ErrReadOnly", err)
	}
	if _, err := w.AppendSync(ctx, payload("full", 5)); err == nil {
		t.Fatal("an add on a bookie above its disk-usage threshold succeeded")
	}
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{Recovery: true})
	if err != nil {
		t.Fatalf("recovering the ledger on a full bookie: %v", err)
	}
	if last := r.Metadata().LastEntry; last != 4 {
		t.Errorf("recovered ledger's last entry %d, want 4", last)
	}
	es, err := r.Read(ctx, 0, 4)
	if err != nil || len(es) != 5 {
		t.Fatalf("reading the recovered ledger: %d entries, %v", len(es), err)
	}
	for i, e := range es {
		if !bytes.Equal(e.Payload, payload("full", i)) {
			t.Errorf("entry %d after recovery: %q", i, e.Payload)
		}
	}
}

// A read of fewer entries than the read window (whose answers' channel
// then has room for those entries only), where the first bookie asked
// for two of them is gone, gets them from their other replica.
func TestReadFewEntriesFromReplica(t *testing.T) { forTransports(t, testReadFewEntriesFromReplica) }

func testReadFewEntriesFromReplica(t *testing.T, local bool) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 2, local)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 // entries 0 and 2 are asked of the ensemble's first bookie first
	for r := range appendAll(w, "few", 0, n) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cl.kill(ensembleBookie(cl, w, 0))
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, ctx, r, "few", n-1)
}
