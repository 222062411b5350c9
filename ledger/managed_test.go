package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	bookieentry "github.com/magnetar-io/magnetar/bookie/entry"
)

func TestNames(t *testing.T) {
	for _, bad := range []string{"", "/a", "a/", "a//b", "a/../b", "a/\x01"} {
		if _, err := Path(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Path(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	p, err := Path("public/default/persistent/t-partition-0")
	if err != nil || p != "/managed-ledgers/public/default/persistent/t-partition-0" {
		t.Fatalf("Path = %q, %v", p, err)
	}
	env := newTestCluster(t, 1).factory()
	env.open(t, "a/b")
	if _, err := env.f.Open(testCtx(t), "a/b"); !errors.Is(err, ErrAlreadyOpen) {
		t.Fatalf("second Open: %v, want ErrAlreadyOpen", err)
	}
	if _, err := env.f.Open(testCtx(t), "a//b"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("Open of a bad name: %v, want ErrInvalidName", err)
	}
}

// Several goroutines append while others tail; ledgers roll over every few
// entries. Completions come in order with continuous offsets, readers see
// every entry in order, and a full read back matches.
func TestAppendReadAcrossRollovers(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 3).factory(func(c *Config) {
		c.MaxEntriesPerLedger = 17
		c.EnsembleSize, c.WriteQuorum, c.AckQuorum = 3, 2, 2
	})
	ml := env.open(t, "t/rollover")
	start := ml.FirstPosition()

	const appenders, each = 4, 200
	const total = appenders * each
	var mu sync.Mutex
	var got []appendResult
	payloads := make(map[int64]string) // first offset → payload
	var all sync.WaitGroup
	all.Add(total)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			window := make(chan struct{}, 4) // pipelined, a few in flight each
			for i := range each {
				p := fmt.Sprintf("g%d-%d", g, i)
				window <- struct{}{}
				ml.Append([]byte(p), FormatPulsar, int32(1+rng.IntN(5)), func(pos Position, off int64, err error) {
					mu.Lock()
					got = append(got, appendResult{pos, off, err})
					payloads[off] = p
					mu.Unlock()
					<-window
					all.Done()
				})
			}
		}()
	}

	// Tailing readers.
	readErrs := make(chan error, 2)
	for range 2 {
		go func() {
			readErrs <- func() error {
				pos, seen, next := start, 0, int64(0)
				for seen < total {
					// pos may be past the end of its ledger: Read moves on.
					es, err := ml.Read(ctx, pos, 50)
					if err != nil {
						return err
					}
					if len(es) == 0 {
						if err := ml.WaitNewEntries(ctx, Position{pos.Ledger, pos.Entry - 1}); err != nil {
							return err
						}
						continue
					}
					for _, e := range es {
						if e.Header.FirstOffset != next {
							return fmt.Errorf("reader: entry %v has offset %d, want %d", e.Position, e.Header.FirstOffset, next)
						}
						if !pos.Before(e.Position) && pos != e.Position {
							return fmt.Errorf("reader: entry %v after position %v", e.Position, pos)
						}
						next = e.Header.NextOffset()
						pos = Position{e.Position.Ledger, e.Position.Entry + 1}
						seen++
					}
				}
				return nil
			}()
		}()
	}

	wg.Wait()
	done := make(chan struct{})
	go func() { all.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("appends did not complete")
	}
	for range 2 {
		if err := <-readErrs; err != nil {
			t.Fatal(err)
		}
	}

	// Completions: in order, offsets continuous, positions increasing.
	next := int64(0)
	for i, r := range got {
		if r.err != nil {
			t.Fatalf("completion %d: %v", i, r.err)
		}
		if r.offset != next {
			t.Fatalf("completion %d: offset %d, want %d", i, r.offset, next)
		}
		if i > 0 && !got[i-1].pos.Before(r.pos) {
			t.Fatalf("completion %d: position %v not after %v", i, r.pos, got[i-1].pos)
		}
		es, err := ml.Read(ctx, r.pos, 1)
		if err != nil || len(es) != 1 {
			t.Fatalf("read %v: %v %v", r.pos, es, err)
		}
		next = es[0].Header.NextOffset()
		if string(es[0].Payload) != payloads[r.offset] {
			t.Fatalf("entry %v: payload %q, want %q", r.pos, es[0].Payload, payloads[r.offset])
		}
	}
	if ml.NextOffset() != next || ml.NumberOfEntries() != total {
		t.Fatalf("NextOffset %d (want %d), NumberOfEntries %d (want %d)", ml.NextOffset(), next, ml.NumberOfEntries(), total)
	}
	// Rollover is asynchronous (limits are soft): count only that it
	// happened.
	lgs := ml.Ledgers()
	if len(lgs) < 3 {
		t.Fatalf("only %d ledgers for %d entries with rollover every 17", len(lgs), total)
	}
	t.Logf("%d entries in %d ledgers", total, len(lgs))
	waitIdle(t, ml)
	checkStoredList(t, env, ml)
}

// waitIdle waits until no rollover runs.
func waitIdle(t *testing.T, ml *ManagedLedger) {
	t.Helper()
	waitFor(t, 10*time.Second, "rollover to finish", func() bool {
		ml.mu.Lock()
		defer ml.mu.Unlock()
		return !ml.rolling
	})
}

// checkStoredList compares the stored list with the instance's.
func checkStoredList(t *testing.T, env *testEnv, ml *ManagedLedger) {
	t.Helper()
	l := storedListOf(t, env.meta, ml.Name())
	lgs := ml.Ledgers()
	if len(l.Ledgers) != len(lgs) {
		t.Fatalf("stored list has %d ledgers, the instance %d", len(l.Ledgers), len(lgs))
	}
	for i, s := range l.Ledgers {
		g := lgs[i]
		if s.LedgerID != g.LedgerID || s.FirstOffset != g.FirstOffset {
			t.Fatalf("ledger %d: stored %+v, instance %+v", i, s, g)
		}
		if s.Closed && (s.Entries != g.Entries || s.Messages != g.Messages || s.Size != g.Size) {
			t.Fatalf("closed ledger %d: stored %+v, instance %+v", i, s, g)
		}
	}
}

func TestReopenContinues(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 10 })
	ml := env.open(t, "t/reopen")
	var last appendResult
	for i := range 35 {
		last = mustAppend(t, ml, fmt.Sprintf("a%d", i), 3)
	}
	if last.offset != 34*3 {
		t.Fatalf("last offset %d", last.offset)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mustAppendErr(t, ml, ErrClosed)
	before := storedListOf(t, env.meta, "t/reopen")
	for _, l := range before.Ledgers {
		if !l.Closed {
			t.Fatalf("after Close the list has an open ledger: %+v", before)
		}
	}

	ml = env.open(t, "t/reopen")
	if ml.NextOffset() != 35*3 || ml.NumberOfEntries() != 35 || ml.LastConfirmed() != last.pos {
		t.Fatalf("reopened: next %d, entries %d, last %v (want %v)", ml.NextOffset(), ml.NumberOfEntries(), ml.LastConfirmed(), last.pos)
	}
	r := mustAppend(t, ml, "after", 2)
	if r.offset != 35*3 || !last.pos.Before(r.pos) {
		t.Fatalf("append after reopen: %+v", r)
	}
	es, err := ml.Read(ctx, ml.FirstPosition(), 100)
	if err != nil || len(es) != 36 {
		t.Fatalf("read all: %d entries, %v", len(es), err)
	}
	for i, e := range es[:35] {
		if string(e.Payload) != fmt.Sprintf("a%d", i) || e.Header.FirstOffset != int64(i*3) {
			t.Fatalf("entry %d: %+v %q", i, e.Header, e.Payload)
		}
	}
	checkStoredList(t, env, ml)
}

func mustAppendErr(t *testing.T, ml *ManagedLedger, want error) {
	t.Helper()
	if r := appendSync(t, ml, "x", 1); !errors.Is(r.err, want) {
		t.Fatalf("append: %v, want %v", r.err, want)
	}
}

// A second broker opening the managed ledger fences the first: its
// appends fail with ErrFenced, and the second continues the offsets.
func TestSecondOpenFencesFirst(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 3)
	cfg := func(c *Config) { c.EnsembleSize, c.WriteQuorum, c.AckQuorum = 3, 2, 2 }
	a, b := tc.factory(cfg), tc.factory(cfg)
	mlA := a.open(t, "t/fence")
	for i := range 20 {
		mustAppend(t, mlA, fmt.Sprintf("a%d", i), 2)
	}
	mlB := b.open(t, "t/fence")
	if mlB.NextOffset() != 40 {
		t.Fatalf("B's next offset %d, want 40", mlB.NextOffset())
	}
	r := appendSync(t, mlA, "late", 1)
	if !errors.Is(r.err, ErrFenced) || !strings.Contains(r.err.Error(), "opened elsewhere") {
		t.Fatalf("A's append after B opened: %v, want ErrFenced", r.err)
	}
	mustAppendErr(t, mlA, ErrFenced)
	if err := mlA.WaitNewEntries(ctx, mlA.LastConfirmed()); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's WaitNewEntries: %v", err)
	}
	rb := mustAppend(t, mlB, "b0", 1)
	if rb.offset != 40 {
		t.Fatalf("B's first append at offset %d, want 40", rb.offset)
	}
	if err := mlA.Close(ctx); err != nil {
		t.Fatalf("closing the fenced instance: %v", err)
	}
	// A's close did not touch B's list.
	checkStoredList(t, b, mlB)
	es, err := mlB.Read(ctx, mlB.FirstPosition(), 100)
	if err != nil || len(es) != 21 {
		t.Fatalf("B reads %d entries, %v", len(es), err)
	}
}

// Pipelined appends in flight while another broker opens: every
// acknowledged entry is in B's log and B's offsets start right after the
// last entry recovered.
func TestFenceDuringAppends(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 3)
	cfg := func(c *Config) {
		c.EnsembleSize, c.WriteQuorum, c.AckQuorum = 3, 2, 2
		c.MaxEntriesPerLedger = 50
	}
	a, b := tc.factory(cfg), tc.factory(cfg)
	mlA := a.open(t, "t/fence2")
	var mu sync.Mutex
	var acked []appendResult
	stop := make(chan struct{})
	fenced := make(chan struct{})
	go func() {
		window := make(chan struct{}, 64)
		var once sync.Once
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case window <- struct{}{}:
			}
			mlA.Append([]byte(fmt.Sprintf("a%d", i)), FormatKafka, 1, func(pos Position, off int64, err error) {
				<-window
				if err != nil {
					once.Do(func() { close(fenced) })
					return
				}
				mu.Lock()
				acked = append(acked, appendResult{pos, off, nil})
				mu.Unlock()
			})
		}
	}()
	waitFor(t, 30*time.Second, "200 acks", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 200 })
	mlB := b.open(t, "t/fence2")
	select {
	case <-fenced:
	case <-ctx.Done():
		t.Fatal("A never failed")
	}
	close(stop)
	mu.Lock()
	defer mu.Unlock()
	for i, r := range acked {
		if r.offset != int64(i) {
			t.Fatalf("A's ack %d at offset %d", i, r.offset)
		}
		es, err := mlB.Read(ctx, r.pos, 1)
		if err != nil || len(es) != 1 || string(es[0].Payload) != fmt.Sprintf("a%d", i) {
			t.Fatalf("acknowledged %v (offset %d) not in B: %v %v", r.pos, r.offset, es, err)
		}
	}
	next := mlB.NextOffset()
	if next < int64(len(acked)) {
		t.Fatalf("B's next offset %d, but %d were acknowledged", next, len(acked))
	}
	if r := mustAppend(t, mlB, "b", 1); r.offset != next {
		t.Fatalf("B appends at %d, want %d", r.offset, next)
	}
	checkContinuous(t, ctx, mlB)
}

// checkContinuous reads the whole log and checks offsets have no gap.
func checkContinuous(t *testing.T, ctx context.Context, ml *ManagedLedger) []Entry {
	t.Helper()
	var all []Entry
	pos := ml.FirstPosition()
	next := ml.FirstOffset()
	for {
		es, err := ml.Read(ctx, pos, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if e.Header.FirstOffset != next {
				t.Fatalf("entry %v at offset %d, want %d", e.Position, e.Header.FirstOffset, next)
			}
			next = e.Header.NextOffset()
		}
		all = append(all, es...)
		last := es[len(es)-1].Position
		pos = Position{last.Ledger, last.Entry + 1}
	}
	if next != ml.NextOffset() {
		t.Fatalf("log ends at offset %d, NextOffset %d", next, ml.NextOffset())
	}
	return all
}

func TestTerminate(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 4 })
	ml := env.open(t, "t/term")
	var last appendResult
	for i := range 10 {
		last = mustAppend(t, ml, fmt.Sprintf("e%d", i), 1)
	}
	pos, err := ml.Terminate(ctx)
	if err != nil || pos != last.pos {
		t.Fatalf("Terminate = %v, %v; want %v", pos, err, last.pos)
	}
	mustAppendErr(t, ml, ErrTerminated)
	if err := ml.WaitNewEntries(ctx, pos); !errors.Is(err, ErrTerminated) {
		t.Fatalf("WaitNewEntries: %v", err)
	}
	if again, err := ml.Terminate(ctx); err != nil || again != pos {
		t.Fatalf("second Terminate = %v, %v", again, err)
	}
	if l := storedListOf(t, env.meta, "t/term"); l.State != stateTerminated || *l.TerminatedAt != pos {
		t.Fatalf("stored list: %+v", l)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, "t/term")
	mustAppendErr(t, ml, ErrTerminated)
	if again, err := ml.Terminate(ctx); err != nil || again != pos {
		t.Fatalf("Terminate after reopen = %v, %v", again, err)
	}
	if es := checkContinuous(t, ctx, ml); len(es) != 10 {
		t.Fatalf("read %d entries after reopen", len(es))
	}
}

func TestDelete(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	env := tc.factory(func(c *Config) { c.MaxEntriesPerLedger = 3 })
	ml := env.open(t, "t/del")
	for i := range 10 {
		mustAppend(t, ml, fmt.Sprintf("e%d", i), 1)
		waitIdle(t, ml)
	}
	var ids []int64
	for _, l := range ml.Ledgers() {
		ids = append(ids, l.LedgerID)
	}
	if len(ids) < 3 {
		t.Fatalf("ledgers %v", ids)
	}
	if err := ml.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	mustAppendErr(t, ml, ErrClosed)
	c, _ := tc.client()
	for _, id := range ids {
		if _, err := c.OpenLedger(ctx, id, client.OpenOptions{}); !errors.Is(err, client.ErrNoLedger) {
			t.Fatalf("ledger %d after Delete: %v, want ErrNoLedger", id, err)
		}
	}
	p, _ := Path("t/del")
	if _, ok, err := env.meta.Exists(ctx, p); ok || err != nil {
		t.Fatalf("metadata node after Delete: exists %v, %v", ok, err)
	}
	// The name can be opened again, from scratch.
	ml = env.open(t, "t/del")
	if r := mustAppend(t, ml, "new", 1); r.offset != 0 {
		t.Fatalf("offset after re-creation %d", r.offset)
	}
}

func TestTrimWithRetention(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	env := tc.factory(func(c *Config) { c.MaxEntriesPerLedger = 5 })
	ml := env.open(t, "t/trim")
	// 8 ledgers of 5 entries (one minute apart), and a current one.
	for i := range 41 {
		mustAppend(t, ml, fmt.Sprintf("e%02d", i), 2)
		waitIdle(t, ml)
		if i%5 == 4 {
			env.clock.Advance(time.Minute)
		}
	}
	lgs := ml.Ledgers()
	if len(lgs) != 9 {
		t.Fatalf("%d ledgers", len(lgs))
	}
	size := lgs[0].Size
	trim := func(needed Position, rt time.Duration, rs int64) int {
		t.Helper()
		n, err := ml.trim(ctx, needed, rt, rs)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Nothing is needed-free before ledger 0's end.
	if n := trim(Position{lgs[0].LedgerID, 4}, 0, 0); n != 0 {
		t.Fatalf("trimmed %d ledgers though ledger 0 is needed", n)
	}
	// Infinite retention keeps everything.
	if n := trim(Position{lgs[3].LedgerID, 0}, -1, -1); n != 0 {
		t.Fatalf("trimmed %d ledgers under infinite retention", n)
	}
	// Ledgers 0..2 are not needed; time retention of 6.5 min keeps those
	// whose last entry is younger: ledger 0's (now-8min) and 1's (now-7min)
	// go, ledger 2's (now-6min) stays.
	if n := trim(Position{lgs[3].LedgerID, 0}, 6*time.Minute+30*time.Second, -1); n != 2 {
		t.Fatalf("time retention trimmed %d ledgers, want 2", n)
	}
	// Size retention keeping 5 ledgers' worth: of ledgers 2..8, 2 and 3
	// can go, but only 2 is not needed (needed is ledger 3 entry 0).
	if n := trim(Position{lgs[3].LedgerID, 0}, -1, 5*size); n != 1 {
		t.Fatalf("size retention trimmed %d ledgers, want 1", n)
	}
	if got := ml.FirstOffset(); got != 30 {
		t.Fatalf("FirstOffset %d after trimming 3 ledgers, want 30", got)
	}
	if _, err := ml.FindOffset(ctx, 29); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("FindOffset of a trimmed offset: %v", err)
	}
	if _, err := ml.Read(ctx, Position{lgs[0].LedgerID, 0}, 1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Read of a trimmed position: %v", err)
	}
	// Everything needed-free, no retention: all but the current ledger go.
	if n := trim(Position{1 << 62, 0}, 0, 0); n != 5 {
		t.Fatalf("trimmed %d ledgers, want the 5 left before the current one", n)
	}
	if got := ml.Ledgers(); len(got) != 1 || got[0].LedgerID != lgs[8].LedgerID {
		t.Fatalf("left %+v", got)
	}
	c, _ := tc.client()
	for _, l := range lgs[:8] {
		if _, err := c.OpenLedger(ctx, l.LedgerID, client.OpenOptions{}); !errors.Is(err, client.ErrNoLedger) {
			t.Fatalf("trimmed ledger %d still there: %v", l.LedgerID, err)
		}
	}
	checkStoredList(t, env, ml)
	if es := checkContinuous(t, ctx, ml); len(es) != 1 || es[0].Header.FirstOffset != 80 {
		t.Fatalf("left %+v", es)
	}
	// Reopen keeps the offsets.
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, "t/trim")
	if ml.FirstOffset() != 80 || ml.NextOffset() != 82 {
		t.Fatalf("after reopen: first %d next %d", ml.FirstOffset(), ml.NextOffset())
	}
	// Trim everything: only the new, empty ledger is left, and it keeps
	// the offsets through Close and reopen.
	if n := trim(Position{1 << 62, 0}, 0, 0); n != 1 {
		t.Fatalf("trimmed %d ledgers, want 1", n)
	}
	if ml.FirstOffset() != 82 || ml.NumberOfEntries() != 0 {
		t.Fatalf("after trimming all: first %d, %d entries", ml.FirstOffset(), ml.NumberOfEntries())
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, "t/trim")
	if r := mustAppend(t, ml, "again", 1); r.offset != 82 {
		t.Fatalf("append after reopening an empty managed ledger at offset %d, want 82", r.offset)
	}
}

// A reader waiting in WaitNewEntries wakes on an append, and tail reads
// come from the cache: no bookie read.
func TestTailingFromCache(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 25 })
	ml := env.open(t, "t/tail")
	const n = 100
	got := make(chan error, 1)
	go func() {
		got <- func() error {
			last := ml.LastConfirmed()
			for i := 0; i < n; {
				es, err := ml.Read(ctx, Position{last.Ledger, last.Entry + 1}, 10)
				if err != nil {
					return err
				}
				if len(es) == 0 {
					if err := ml.WaitNewEntries(ctx, last); err != nil {
						return err
					}
					continue
				}
				for _, e := range es {
					if string(e.Payload) != fmt.Sprintf("t%d", i) {
						return fmt.Errorf("entry %d: %q", i, e.Payload)
					}
					last = e.Position
					i++
				}
			}
			return nil
		}()
	}()
	for i := range n {
		mustAppend(t, ml, fmt.Sprintf("t%d", i), 1)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("tailing reader did not finish")
	}
	if r := env.bookies.reads.Load(); r != 0 {
		t.Fatalf("tailing reads went to bookies %d times", r)
	}
	// A cold cache sends reads to the bookies.
	ml2 := env.open(t, "t/tail2")
	mustAppend(t, ml2, "x", 1)
	ml2.Close(ctx)
	ml2 = env.open(t, "t/tail2")
	if es, err := ml2.Read(ctx, ml2.FirstPosition(), 10); err != nil || len(es) != 1 {
		t.Fatalf("%v %v", es, err)
	}
	if env.bookies.reads.Load() == 0 {
		t.Fatal("a read of a reopened managed ledger did not go to a bookie")
	}
}

// When a bookie fails with no replacement, appends fail; once bookies are
// back the managed ledger goes on with a new ledger, at the offset after
// the last confirmed entry (the failed appends' offsets are reused).
func TestAppendFailureStartsNewLedger(t *testing.T) {
	tc := newTestCluster(t, 1)
	env := tc.factory()
	ml := env.open(t, "t/fail")
	var last appendResult
	for i := range 10 {
		last = mustAppend(t, ml, fmt.Sprintf("e%d", i), 2)
	}
	b := tc.bookies[0]
	if err := b.Deregister(tc.store); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	r := appendSync(t, ml, "lost", 5)
	if r.err == nil {
		t.Fatal("append succeeded with the only bookie down")
	}
	t.Logf("append with the bookie down: %v", r.err)
	tc.addBookie(bookietest.Options{Dir: "/again"})
	var ok appendResult
	waitFor(t, 30*time.Second, "appends to resume", func() bool {
		ok = appendSync(t, ml, "resumed", 1)
		return ok.err == nil
	})
	if ok.offset != last.offset+2 {
		t.Fatalf("resumed at offset %d, want %d", ok.offset, last.offset+2)
	}
	if ok.pos.Ledger == last.pos.Ledger {
		t.Fatalf("resumed in the failed ledger %d", ok.pos.Ledger)
	}
	waitIdle(t, ml)
	checkStoredList(t, env, ml)
	l := storedListOf(t, env.meta, "t/fail")
	if !l.Ledgers[0].Closed || l.Ledgers[0].Entries != 10 || l.Ledgers[0].Messages != 20 {
		t.Fatalf("failed ledger in the list: %+v", l.Ledgers[0])
	}
}

// AddLatency observes every successful append once.
func TestAddLatency(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "add_latency_seconds", Buckets: prometheus.DefBuckets})
	env := newTestCluster(t, 1).factory(func(c *Config) { c.AddLatency = h })
	ml := env.open(t, "t/ns/persistent/latency")
	for i := range 5 {
		mustAppend(t, ml, fmt.Sprint("m", i), 1)
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 5 {
		t.Fatalf("%d latencies observed, want 5", got)
	}
	if sum := m.GetHistogram().GetSampleSum(); sum <= 0 {
		t.Fatalf("latencies sum to %v s", sum)
	}
}

// checkRoomWritten checks that an append in place wrote every byte of
// buf's room with the headers of the entry r: the bookie entry's (its
// checksum verifying the whole entry, its length the ledger's so far)
// and the managed ledger's.
func checkRoomWritten(t *testing.T, buf []byte, r appendResult, messages int32) {
	t.Helper()
	eh, err := bookieentry.Verify(buf)
	if err != nil {
		t.Fatalf("entry appended in place: %v", err)
	}
	if eh.Ledger != r.pos.Ledger || eh.Entry != r.pos.Entry || eh.LAC < -1 || eh.LAC >= eh.Entry || eh.Length < int64(len(buf)-bookieentry.HeaderSize) {
		t.Fatalf("entry appended in place at %v, %d bytes: header %+v", r.pos, len(buf), eh)
	}
	h, _, err := ParseHeader(buf[bookieentry.HeaderSize:])
	if err != nil || h.Format != FormatKafka || h.FirstOffset != r.offset || h.Messages != messages || h.PublishTime <= 0 || buf[bookieentry.HeaderSize+3] != 0 {
		t.Fatalf("entry appended in place at offset %d: ledger header %+v (reserved byte %#x), %v", r.offset, h, buf[bookieentry.HeaderSize+3], err)
	}
}

// AppendInPlace stores what Append would, between Appends, without a
// copy, with or without a known tail checksum (the bookies verify each
// entry's checksum on add, so a wrongly combined one fails the append):
// the cache holds the caller's buffer; a buffer without the room for
// headers, or a known tail outside the payload, is refused and the
// appends after it go on.
func TestAppendInPlace(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory()
	ml := env.open(t, "t/inplace")
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	inPlace := func(payload string, messages int32, knownFrom int) (appendResult, []byte) {
		t.Helper()
		// The room holds garbage, as a buffer allocated without zeroing
		// does (the Kafka produce's): every byte of it must be written.
		buf := append(bytes.Repeat([]byte{0xa5}, AppendRoom), payload...)
		var tail TailCRC
		if knownFrom > 0 {
			tail = TailCRC{From: knownFrom, CRC: crc32.Checksum(buf[knownFrom:], castagnoli)}
		}
		ch := make(chan appendResult, 1)
		ml.AppendInPlace(buf, tail, FormatKafka, messages, func(pos Position, off int64, err error) {
			ch <- appendResult{pos, off, err}
		})
		r := <-ch
		if r.err == nil {
			checkRoomWritten(t, buf, r, messages)
		}
		return r, buf
	}
	if r := mustAppend(t, ml, "a", 1); r.offset != 0 {
		t.Fatalf("first append at offset %d", r.offset)
	}
	r, buf := inPlace("bb", 2, 0)
	if r.err != nil || r.offset != 1 {
		t.Fatalf("append in place: offset %d, %v; want 1", r.offset, r.err)
	}
	if r := mustAppend(t, ml, "c", 1); r.offset != 3 {
		t.Fatalf("append after one in place at offset %d, want 3", r.offset)
	}
	es, err := ml.Read(ctx, r.pos, 1)
	if err != nil || len(es) != 1 || string(es[0].Payload) != "bb" || es[0].Header.Messages != 2 || es[0].Header.FirstOffset != 1 {
		t.Fatalf("entry appended in place, from the cache: %+v, %v", es, err)
	}
	if &es[0].Payload[0] != &buf[AppendRoom] {
		t.Fatal("the cache holds a copy of the buffer appended in place")
	}
	if r, _ := inPlace("", 1, 0); r.err != nil {
		// AppendRoom bytes and an empty payload: room enough.
		t.Fatalf("append in place of an empty payload: %v", r.err)
	}
	short := make(chan error, 1)
	ml.AppendInPlace(make([]byte, AppendRoom-1), TailCRC{}, FormatKafka, 1, func(_ Position, _ int64, err error) { short <- err })
	if err := <-short; err == nil {
		t.Fatal("a buffer shorter than AppendRoom was appended")
	}
	for _, from := range []int{AppendRoom - 1, AppendRoom + 4} {
		ml.AppendInPlace(append(make([]byte, AppendRoom), "eee"...), TailCRC{From: from}, FormatKafka, 1,
			func(_ Position, _ int64, err error) { short <- err })
		if err := <-short; err == nil {
			t.Fatalf("a known tail from %d of %d bytes was appended", from, AppendRoom+3)
		}
	}
	if r := mustAppend(t, ml, "d", 1); r.offset != 5 {
		t.Fatalf("append after a refused one at offset %d, want 5", r.offset)
	}
	for i, from := range []int{AppendRoom, AppendRoom + 2, AppendRoom + 5} {
		if r, _ := inPlace("known", 1, from); r.err != nil || r.offset != int64(6+i) {
			t.Fatalf("append in place with a known tail from %d: offset %d, %v; want %d", from, r.offset, r.err, 6+i)
		}
	}
	// From the bookies, after a reopen: the same entries.
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, "t/inplace")
	es, err = ml.Read(ctx, ml.FirstPosition(), 10)
	var got []string
	for _, e := range es {
		got = append(got, string(e.Payload))
	}
	if err != nil || strings.Join(got, ",") != "a,bb,c,,d,known,known,known" {
		t.Fatalf("entries read from the bookies: %q, %v", got, err)
	}
}

// Entries read from a bookie in-process come in read buffers of their own,
// which Release recycles; entries from the cache have none, and Release
// leaves the cache's bytes alone. (Race builds poison recycled buffers:
// cache bytes recycled by mistake would read back as 0xdb.)
func TestReleaseRecyclesOnlyBookieReads(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	tc.local = true
	payload := func(i int) string { return strings.Repeat(fmt.Sprintf("%03d", i), 40<<10/3) }
	writer := tc.factory()
	ml := writer.open(t, "t/release")
	for i := range 6 {
		mustAppend(t, ml, payload(i), 1)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A fresh cache: the six entries are read from the bookie, the two
	// appended now from the cache.
	env := tc.factory()
	ml = env.open(t, "t/release")
	for i := 6; i < 8; i++ {
		mustAppend(t, ml, payload(i), 1)
	}
	for round := range 3 {
		es, err := ml.Read(ctx, ml.FirstPosition(), 100)
		if err != nil || len(es) != 8 {
			t.Fatalf("round %d: read %d entries, %v", round, len(es), err)
		}
		for i := range es {
			e := &es[i]
			if string(e.Payload) != payload(i) {
				t.Fatalf("round %d: entry %d holds %.12q…, want %.12q…", round, i, e.Payload, payload(i))
			}
			fromBookie := i < 6
			if got := e.buf != nil; got != fromBookie {
				t.Fatalf("round %d: entry %d has a read buffer: %v, want %v", round, i, got, fromBookie)
			}
			if fromBookie && cap(e.buf) != cap(bookieentry.NewReadBuf(len(e.buf))) {
				t.Fatalf("round %d: entry %d: read buffer of capacity %d (%d bytes) is not a recyclable size", round, i, cap(e.buf), len(e.buf))
			}
			e.Release()
			if e.buf != nil || e.Payload != nil {
				t.Fatalf("round %d: entry %d still set after Release", round, i)
			}
		}
	}
}
