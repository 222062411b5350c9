package storage

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// holdApplier makes the applier wait, once records are queued, until
// release is called: everything journaled meanwhile queues up and is then
// taken as one batch. takes counts the batches taken.
func holdApplier(s *Storage) (release func(), takes *atomic.Int64) {
	gate := make(chan struct{})
	var once sync.Once
	takes = new(atomic.Int64)
	s.testHookApply = func() {
		<-gate
		takes.Add(1)
	}
	return func() { once.Do(func() { close(gate) }) }, takes
}

// waitQueued waits until n records are journaled and queued for the
// applier.
func waitQueued(t *testing.T, s *Storage, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for s.applyQ.len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d queued records (have %d)", n, s.applyQ.len())
		}
		time.Sleep(time.Millisecond)
	}
}

// opLog collects done callbacks: which operation, in which order, with
// what outcome.
type opLog struct {
	mu    sync.Mutex
	order []string
	errs  map[string]error
	fence map[string][2]int64
	all   chan struct{} // closed once want callbacks came
	want  int
}

func newOpLog(want int) *opLog {
	return &opLog{errs: make(map[string]error), fence: make(map[string][2]int64), all: make(chan struct{}), want: want}
}

func (l *opLog) done(name string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = append(l.order, name)
	l.errs[name] = err
	if len(l.order) == l.want {
		close(l.all)
	}
}

func (l *opLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.order)
}

func (l *opLog) add(s *Storage, name string, ledger, entryID, lac int64, recovery bool) {
	s.AddEntry(mkEntry(ledger, entryID, lac, 100), recovery, func(err error) { l.done(name, err) })
}

func (l *opLog) fenceOp(s *Storage, name string, ledger int64) {
	s.Fence(ledger, func(lac, last int64, err error) {
		l.mu.Lock()
		l.fence[name] = [2]int64{lac, last}
		l.mu.Unlock()
		l.done(name, err)
	})
}

func (l *opLog) del(s *Storage, name string, ledger int64) {
	s.Delete(ledger, func(err error) { l.done(name, err) })
}

// Adds are acknowledged once journaled, before the applier runs; an add
// journaled after a fence or delete of its ledger would be refused by the
// applier, so it is refused at once, never acknowledged. The applier
// then applies the batch of queued adds, fences and deletes in journal
// order, as if one at a time: a fence answers with the entries before it
// only; reads of an acknowledged entry wait for it. Replay after a crash
// gives the same state.
func TestApplyKeepsJournalOrder(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	release, takes := holdApplier(s)

	type step struct {
		name string
		do   func(l *opLog)
		want error // nil, or the sentinel the callback must match
		// at: when the callback comes: at once (refused), at the journal
		// (an acknowledged add), or once applied.
		at string
	}
	addStep := func(name string, ledger, entryID, lac int64, want error, at string) step {
		return step{name, func(l *opLog) { l.add(s, name, ledger, entryID, lac, false) }, want, at}
	}
	steps := []step{
		addStep("1/e0", 1, 0, -1, nil, "journal"),
		addStep("4/e0", 4, 0, -1, nil, "journal"),
		addStep("1/e1", 1, 1, 0, nil, "journal"),
		{"fence 1", func(l *opLog) { l.fenceOp(s, "fence 1", 1) }, nil, "applied"},
		addStep("1/e2", 1, 2, 1, ErrFenced, "once"), // after the fence
		{"1/e2 recovery", func(l *opLog) { l.add(s, "1/e2 recovery", 1, 2, 1, true) }, nil, "journal"},
		addStep("2/e0", 2, 0, -1, nil, "journal"),
		addStep("4/e1", 4, 1, 0, nil, "journal"),
		{"delete 2", func(l *opLog) { l.del(s, "delete 2", 2) }, nil, "applied"},
		addStep("2/e1", 2, 1, 0, ErrNoLedger, "once"), // after the delete
		{"fence 2", func(l *opLog) { l.fenceOp(s, "fence 2", 2) }, ErrNoLedger, "applied"},
		{"fence 3", func(l *opLog) { l.fenceOp(s, "fence 3", 3) }, nil, "applied"}, // unknown: created fenced
		addStep("3/e0", 3, 0, -1, ErrFenced, "once"),
		addStep("4/e2", 4, 2, 1, nil, "journal"),
	}
	l := newOpLog(len(steps))
	journaled, early := 0, 0
	for _, st := range steps {
		st.do(l)
		if st.at != "once" {
			journaled++
		}
		if st.at != "applied" {
			early++
		}
	}
	waitQueued(t, s, journaled)
	// With the applier held: the refusals and the acknowledgements are in,
	// the fences and deletes are not, and a read of an acknowledged entry
	// waits.
	deadline := time.Now().Add(waitTimeout)
	for l.count() < early && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	waiting := make(chan struct{}, 1)
	s.testHookAwaitApplied = func() { // once per wait: don't block the later ones
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	read := make(chan error, 1)
	go func() {
		_, err := s.ReadEntry(4, 2)
		read <- err
	}()
	select {
	case <-waiting:
	case err := <-read:
		t.Fatalf("a read of an entry not yet applied returned (%v) before the applier ran", err)
	case <-time.After(waitTimeout):
		t.Fatal("the read of an acknowledged entry neither waited nor returned")
	}
	l.mu.Lock()
	got := slices.Clone(l.order)
	l.mu.Unlock()
	// The acknowledgements in journal order; the refusals (which come
	// before AddEntry returns) among them.
	var want, acks, gotAcks []string
	for _, st := range steps {
		if st.at != "applied" {
			want = append(want, st.name)
		}
		if st.at == "journal" {
			acks = append(acks, st.name)
		}
	}
	for _, name := range got {
		if slices.Contains(acks, name) {
			gotAcks = append(gotAcks, name)
		}
	}
	if len(got) != len(want) || !slices.Equal(gotAcks, acks) {
		t.Fatalf("before the applier ran, callbacks %q; want the refusals and, in journal order, the acknowledgements %q", got, acks)
	}
	release()
	await(t, l.all, "the callbacks")
	if err := await(t, read, "the read"); err != nil {
		t.Fatalf("read of an acknowledged entry: %v", err)
	}

	if n := takes.Load(); n != 1 {
		t.Fatalf("the applier took the records in %d batches, want 1", n)
	}
	applied := l.order[len(want):]
	want = nil
	for _, st := range steps {
		if st.at == "applied" {
			want = append(want, st.name)
		}
	}
	if !slices.Equal(applied, want) {
		t.Fatalf("applied callbacks %q, want %q (journal order)", applied, want)
	}
	for _, st := range steps {
		if err := l.errs[st.name]; st.want == nil && err != nil || st.want != nil && !errors.Is(err, st.want) {
			t.Fatalf("%s: got %v, want %v", st.name, err, st.want)
		}
	}
	// The fence answers with the entries before it (not the recovery add
	// after it); the fence of an unknown ledger with none.
	if got := l.fence["fence 1"]; got != [2]int64{0, 1} {
		t.Fatalf("fence 1 answered LAC, last entry %v, want [0 1]", got)
	}
	if got := l.fence["fence 3"]; got != [2]int64{-1, -1} {
		t.Fatalf("fence 3 answered LAC, last entry %v, want [-1 -1]", got)
	}

	check := func(s *Storage) {
		t.Helper()
		for e := int64(0); e <= 2; e++ {
			checkEntry(t, s, 1, e, 100)
			checkEntry(t, s, 4, e, 100)
		}
		if fenced, err := s.IsFenced(1); err != nil || !fenced {
			t.Fatalf("IsFenced(1) = %v, %v", fenced, err)
		}
		if lac, last, err := s.LastAddConfirmed(1); err != nil || lac != 1 || last != 2 {
			t.Fatalf("LastAddConfirmed(1) = %d, %d, %v; want 1, 2", lac, last, err)
		}
		_, err := s.ReadEntry(2, 0)
		wantErr(t, err, ErrNoLedger, "read of deleted ledger 2")
		_, err = s.ReadEntry(3, 0)
		wantErr(t, err, ErrNoEntry, "read of the refused add to fenced ledger 3")
		wantErr(t, add(t, s, mkEntry(1, 3, 2, 100)), ErrFenced, "add to fenced ledger 1")
		wantErr(t, add(t, s, mkEntry(2, 2, 1, 100)), ErrNoLedger, "add to deleted ledger 2")
	}
	check(s)
	// Replay (nothing checkpointed) applies the same records one by one.
	s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	if s.replayed < journaled {
		t.Fatalf("replayed %d records, want at least %d", s.replayed, journaled)
	}
	check(s)
}

// A read that misses an acknowledged entry in the index because the
// applier had not applied it yet, and finds the applier caught up by the
// time it looks whether to wait, looks in the index again instead of
// answering ErrNoEntry (a client reading right after its acknowledgement
// got "no such entry" about once in a few hundred runs).
func TestReadRacingTheApplier(t *testing.T) {
	s := openT(t, testOptions(vfs.NewCrashableMem()))
	release, _ := holdApplier(s)
	defer release()
	acked := make(chan error, 1)
	s.AddEntry(mkEntry(1, 0, -1, 100), false, func(err error) { acked <- err })
	if err := await(t, acked, "the acknowledgement"); err != nil {
		t.Fatal(err)
	}
	// Between the read's miss and its look at the applier, the applier
	// runs and applies the entry.
	var once sync.Once
	s.testHookReadMissed = func() {
		once.Do(func() {
			release()
			if err := s.awaitApplied(); err != nil {
				t.Errorf("waiting for the applier: %v", err)
			}
		})
	}
	e, err := s.ReadEntry(1, 0)
	if err != nil {
		t.Fatalf("read of an entry acknowledged before the read began: %v", err)
	}
	if h, err := entry.Verify(e); err != nil || h.Ledger != 1 || h.Entry != 0 {
		t.Fatalf("read returned %v, %v; want ledger 1 entry 0", h, err)
	}
}

// A checkpoint covers what is applied, not what is journaled: records
// journaled (and acknowledged) but still queued for a lagging applier
// stay in the journal, and a crash right after the checkpoint replays
// them.
func TestCheckpointWhileApplierLags(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	opts.Journal.MaxFileSize = 4 << 10 // the queued records span several files
	s := openT(t, opts)
	const applied, queued, size = 10, 30, 500
	for e := int64(0); e < applied; e++ {
		mustAdd(t, s, 1, e, e-1, size)
	}
	release, _ := holdApplier(s)
	defer release()
	acks := make(chan error, queued)
	for e := int64(applied); e < applied+queued; e++ {
		s.AddEntry(mkEntry(1, e, e-1, size), false, func(err error) { acks <- err })
	}
	waitQueued(t, s, queued)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	ckpt, err := s.idx.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	s.writeMu.Lock()
	if ckpt != s.applied {
		t.Fatalf("checkpoint at %v, applied %v", ckpt, s.applied)
	}
	s.writeMu.Unlock()
	// The queued adds are acknowledged, the applier still held: they are
	// durable in the journal only.
	for range queued {
		if err := await(t, acks, "an ack"); err != nil {
			t.Fatal(err)
		}
	}
	// Power loss now: the acknowledged records are only in the journal.
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})

	release()
	closeT(t, s)

	opts.FS = crashed
	s = openT(t, opts)
	defer closeT(t, s)
	if s.replayed < queued {
		t.Fatalf("replayed %d records, want at least the %d queued at the checkpoint", s.replayed, queued)
	}
	for e := int64(0); e < applied+queued; e++ {
		checkEntry(t, s, 1, e, size)
	}
}

// An entry-log write failing in the middle of a batch: every add was
// acknowledged once journaled; those applied before the failure are
// readable, the others read as ErrReadOnly until a restart applies them
// from the journal.
func TestEntryLogWriteFailureInBatch(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var allow atomic.Int64 // entry-log writes still allowed; -1: no limit
	allow.Store(-1)
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpFileWrite || !strings.Contains(op.Path, "/entrylogs/") {
			return nil
		}
		for {
			n := allow.Load()
			switch {
			case n < 0:
				return nil
			case n == 0:
				return errorfs.ErrInjected
			case allow.CompareAndSwap(n, n-1):
				return nil
			}
		}
	}))
	opts := testOptions(fs)
	opts.WriteBufferSize = 256 // one write per add
	s := openT(t, opts)
	mustAdd(t, s, 1, 0, -1, 300)

	release, takes := holdApplier(s)
	const n = 5
	l := newOpLog(n)
	for e := int64(1); e <= n; e++ {
		s.AddEntry(mkEntry(1, e, e-1, 300), false, func(err error) { l.done(fmt.Sprint(e), err) })
	}
	waitQueued(t, s, n)
	allow.Store(2) // entries 1 and 2 get written, 3 fails
	release()
	await(t, l.all, "the callbacks")
	failure := awaitFailure(t, s)
	if takes.Load() != 1 {
		t.Fatalf("%d batches, want 1", takes.Load())
	}
	// Every add was acknowledged once journaled, before the applier ran.
	for e := 1; e <= n; e++ {
		if err := l.errs[fmt.Sprint(e)]; err != nil {
			t.Fatalf("add %d: %v", e, err)
		}
	}
	wantErr(t, failure, errorfs.ErrInjected, "the storage's failure")
	for e := int64(0); e <= 2; e++ {
		checkEntry(t, s, 1, e, 300)
	}
	for e := int64(3); e <= n; e++ { // journaled, not applied: back after a restart
		_, err := s.ReadEntry(1, e)
		wantErr(t, err, ErrReadOnly, fmt.Sprintf("read of entry %d, not applied", e))
	}
	wantErr(t, s.Checkpoint(), ErrReadOnly, "checkpoint after the failure")
	allow.Store(-1)

	s, _ = crashOpen(t, s, mem, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e := int64(0); e <= n; e++ {
		checkEntry(t, s, 1, e, 300)
	}
}
