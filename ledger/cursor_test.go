package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// appendBatches appends n entries of equal size with 1..maxMsgs messages
// each, advancing the fake clock by up to step between them, and waits
// for each rollover to finish (so every ledger but the current one is
// final).
func appendBatches(t testing.TB, env *testEnv, ml *ManagedLedger, rng *rand.Rand, n, maxMsgs int, step time.Duration) []appendResult {
	t.Helper()
	out := make([]appendResult, n)
	for i := range n {
		out[i] = mustAppend(t, ml, fmt.Sprintf("p%06d", i), int32(1+rng.IntN(maxMsgs)))
		if step > 0 {
			env.clock.Advance(time.Duration(rng.Int64N(int64(step))))
		}
		// One append at a time, each after any rollover it started: the
		// ledgers hold exactly MaxEntriesPerLedger entries.
		waitRolled(t, ml)
	}
	return out
}

// waitRolled waits until no rollover runs and every ledger but the last
// is recorded closed.
func waitRolled(t testing.TB, ml *ManagedLedger) {
	t.Helper()
	waitFor(t, 10*time.Second, "rollovers to finish", func() bool {
		ml.mu.Lock()
		defer ml.mu.Unlock()
		for _, l := range ml.ledgers[:max(len(ml.ledgers)-1, 0)] {
			if !l.closed {
				return false
			}
		}
		return !ml.rolling
	})
}

// ackModel is what a test acknowledged, per entry.
type ackModel struct {
	entries []appendResult
	next    int64 // offset after the last entry
	acked   []bool
}

func newAckModel(ml *ManagedLedger, es []appendResult) *ackModel {
	return &ackModel{entries: es, next: ml.NextOffset(), acked: make([]bool, len(es))}
}

func (m *ackModel) backlog() Backlog {
	var b Backlog
	for i := range m.entries {
		if !m.acked[i] {
			b.Entries++
			b.Messages += m.messages(i)
			b.Bytes += int64(HeaderSize + len("p000000"))
		}
	}
	return b
}

func (m *ackModel) messages(i int) int64 {
	if i+1 < len(m.entries) {
		return m.entries[i+1].offset - m.entries[i].offset
	}
	return m.next - m.entries[i].offset
}

// markDelete is the mark-delete position the model implies.
func (m *ackModel) markDelete(initial Position) Position {
	k := 0
	for k < len(m.acked) && m.acked[k] {
		k++
	}
	if k == 0 {
		return initial
	}
	return m.entries[k-1].pos
}

func checkCursor(t *testing.T, ctx context.Context, c *Cursor, m *ackModel, initial Position, what string) {
	t.Helper()
	if got, want := c.MarkDeletePosition(), m.markDelete(initial); got != want {
		t.Fatalf("%s: mark-delete %v, want %v", what, got, want)
	}
	for i, e := range m.entries {
		if c.IsAcked(e.pos) != m.acked[i] {
			t.Fatalf("%s: IsAcked(%v) = %v, want %v", what, e.pos, !m.acked[i], m.acked[i])
		}
	}
	b, err := c.Backlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := m.backlog(); b != want {
		t.Fatalf("%s: backlog %+v, want %+v", what, b, want)
	}
}

// readAll rewinds c and reads everything it has not acknowledged.
func readAll(t *testing.T, ctx context.Context, c *Cursor) []Entry {
	t.Helper()
	c.Rewind()
	var out []Entry
	for {
		es, err := c.ReadEntries(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return out
		}
		out = append(out, es...)
	}
}

func checkReads(t *testing.T, ctx context.Context, c *Cursor, m *ackModel, what string) {
	t.Helper()
	got := readAll(t, ctx, c)
	var want []Position
	for i, e := range m.entries {
		if !m.acked[i] {
			want = append(want, e.pos)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: read %d entries, want the %d unacknowledged", what, len(got), len(want))
	}
	for i, e := range got {
		if e.Position != want[i] {
			t.Fatalf("%s: read %d is %v, want %v", what, i, e.Position, want[i])
		}
	}
}

// Random individual and cumulative acknowledgements through a durable
// cursor against a model: mark-delete position, acknowledged entries,
// backlog (entries, messages, bytes) and what reads return; then the same
// after closing and reopening the managed ledger.
func TestCursorAcksProperty(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ctx := testCtx(t)
			rng := rand.New(rand.NewPCG(seed, 99))
			env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = int64(4 + rng.IntN(20)) })
			ml := env.open(t, "t/acks")
			c, err := ml.OpenCursor(ctx, "sub", StartEarliest)
			if err != nil {
				t.Fatal(err)
			}
			initial := c.MarkDeletePosition()
			m := newAckModel(ml, appendBatches(t, env, ml, rng, 120, 5, 0))
			if b, _ := c.Backlog(ctx); b.Entries != 120 || b.Messages != ml.NextOffset() {
				t.Fatalf("backlog before acks %+v, next offset %d", b, ml.NextOffset())
			}
			for step := range 150 {
				i := rng.IntN(len(m.entries))
				switch rng.IntN(10) {
				case 0:
					if err := c.MarkDelete(m.entries[i].pos, map[string]string{"step": fmt.Sprint(step)}); err != nil {
						t.Fatal(err)
					}
					for k := 0; k <= i; k++ {
						m.acked[k] = true
					}
				case 1: // several at once
					j := min(i+rng.IntN(6), len(m.entries)-1)
					var ps []Position
					for k := i; k <= j; k++ {
						ps = append(ps, m.entries[k].pos)
						m.acked[k] = true
					}
					if err := c.Delete(ps...); err != nil {
						t.Fatal(err)
					}
				default:
					if err := c.Delete(m.entries[i].pos); err != nil {
						t.Fatal(err)
					}
					m.acked[i] = true
				}
				if step%10 == 0 {
					checkCursor(t, ctx, c, m, initial, fmt.Sprintf("step %d", step))
				}
			}
			checkCursor(t, ctx, c, m, initial, "end")
			checkReads(t, ctx, c, m, "end")
			props, ranges := c.Properties(), c.AckedRanges()

			if err := ml.Close(ctx); err != nil {
				t.Fatal(err)
			}
			ml = env.open(t, "t/acks")
			cs := ml.Cursors()
			if len(cs) != 1 || cs[0].Name() != "sub" {
				t.Fatalf("cursors after reopen: %v", cs)
			}
			c, err = ml.OpenCursor(ctx, "sub", StartLatest) // exists: start is ignored
			if err != nil || c != cs[0] {
				t.Fatalf("OpenCursor after reopen: %v, %v", c, err)
			}
			if !maps.Equal(c.Properties(), props) || fmt.Sprint(c.AckedRanges()) != fmt.Sprint(ranges) {
				t.Fatalf("after reopen: properties %v ranges %v, want %v %v", c.Properties(), c.AckedRanges(), props, ranges)
			}
			checkCursor(t, ctx, c, m, initial, "reopened")
			checkReads(t, ctx, c, m, "reopened")
		})
	}
}

// MaxPersistedAckRanges bounds what is written: after a reopen the first
// ranges are restored and the entries of the others are read again.
func TestCursorPersistedRangesBounded(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) {
		c.MaxEntriesPerLedger = 6
		c.MaxPersistedAckRanges = 3
	})
	ml := env.open(t, "t/bounded")
	c, err := ml.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	m := newAckModel(ml, appendBatches(t, env, ml, rng, 20, 3, 0))
	// Entries 0..1 cumulatively; then every other one from 3: ranges
	// {3} {5} {7} {9} {11}.
	if err := c.MarkDelete(m.entries[1].pos, map[string]string{"kafka.offset": fmt.Sprint(m.entries[2].offset)}); err != nil {
		t.Fatal(err)
	}
	m.acked[0], m.acked[1] = true, true
	for i := 3; i <= 11; i += 2 {
		if err := c.Delete(m.entries[i].pos); err != nil {
			t.Fatal(err)
		}
		m.acked[i] = true
	}
	if n := len(c.AckedRanges()); n != 5 {
		t.Fatalf("%d ranges in memory, want 5", n)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadEntries(ctx, 1); !errors.Is(err, ErrCursorClosed) {
		t.Fatalf("read from a closed cursor: %v", err)
	}
	b, _, err := env.meta.Get(ctx, c.path)
	if err != nil {
		t.Fatal(err)
	}
	var s storedCursor
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Acked) != 3 || s.Dropped != 2 || s.MarkDelete != m.entries[1].pos || s.Offset != m.entries[2].offset {
		t.Fatalf("stored %s", b)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, "t/bounded")
	c, err = ml.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	m.acked[9], m.acked[11] = false, false // not written: delivered again
	checkReads(t, ctx, c, m, "reopened")
	if got := c.Properties()["kafka.offset"]; got != fmt.Sprint(m.entries[2].offset) {
		t.Fatalf("properties after reopen: %v", c.Properties())
	}
}

// countingStore counts Sets of nodes under a prefix.
type countingStore struct {
	meta.Store
	prefix string
	sets   atomic.Int64
}

func (s *countingStore) Set(ctx context.Context, path string, value []byte, v meta.Version) (meta.Stat, error) {
	if strings.HasPrefix(path, s.prefix) {
		s.sets.Add(1)
	}
	return s.Store.Set(ctx, path, value, v)
}

// Many MarkDelete calls make few writes: one at once, then none until the
// flush interval has passed (an hour here), and one at Close.
func TestCursorFlushRateLimited(t *testing.T) {
	ctx := testCtx(t)
	var store *countingStore
	env := newTestCluster(t, 1).factory(func(c *Config) {
		store = &countingStore{Store: c.Meta, prefix: "/managed-ledgers/t/rate/"}
		c.Meta = store
		c.CursorFlushInterval = time.Hour
	})
	ml := env.open(t, "t/rate")
	var last appendResult
	for i := range 300 {
		last = mustAppend(t, ml, fmt.Sprint(i), 1)
	}
	c, err := ml.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if n := store.sets.Load(); n != 0 {
		t.Fatalf("%d writes creating the cursor", n)
	}
	first := c.PersistedMarkDelete()
	es, err := c.ReadEntries(ctx, 300)
	if err != nil || len(es) != 300 {
		t.Fatalf("read %d, %v", len(es), err)
	}
	for i, e := range es {
		if err := c.MarkDelete(e.Position, map[string]string{"n": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if i == 0 { // the first change is written at once
			waitFor(t, 10*time.Second, "the first write", func() bool { return c.PersistedMarkDelete() != first })
		}
	}
	if n := store.sets.Load(); n != 1 {
		t.Fatalf("%d writes for 300 mark-deletes within the flush interval, want 1", n)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := store.sets.Load(); n != 2 {
		t.Fatalf("%d writes after Close, want 2", n)
	}
	if c.PersistedMarkDelete() != last.pos {
		t.Fatalf("persisted %v after Close, want %v", c.PersistedMarkDelete(), last.pos)
	}
	c, err = ml.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if c.MarkDeletePosition() != last.pos || c.Properties()["n"] != "299" {
		t.Fatalf("reopened cursor at %v %v", c.MarkDeletePosition(), c.Properties())
	}
}

// Reset by position, offset and time, over random batches published at
// random (fake) times.
func TestCursorReset(t *testing.T) {
	ctx := testCtx(t)
	rng := rand.New(rand.NewPCG(3, 4))
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 9 })
	ml := env.open(t, "t/reset")
	start := env.clock.Now()
	es := appendBatches(t, env, ml, rng, 60, 8, 5*time.Second)
	c, err := ml.OpenCursor(ctx, "sub", StartLatest)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := c.Backlog(ctx); b.Entries != 0 || b.Messages != 0 {
		t.Fatalf("backlog of a cursor created at the end: %+v", b)
	}
	pubs := make([]time.Time, len(es))
	for i, e := range es {
		got, err := ml.Read(ctx, e.pos, 1)
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = time.UnixMilli(got[0].Header.PublishTime)
	}
	next := ml.NextOffset()
	expect := func(what string, i int) {
		t.Helper()
		if i == len(es) {
			if b, err := c.Backlog(ctx); err != nil || b.Entries != 0 {
				t.Fatalf("%s: backlog %+v %v, want none", what, b, err)
			}
			return
		}
		if got := c.ReadPosition(); got != es[i].pos {
			t.Fatalf("%s: read position %v, want entry %d at %v", what, got, i, es[i].pos)
		}
		b, err := c.Backlog(ctx)
		if err != nil || b.Entries != int64(len(es)-i) || b.Messages != next-es[i].offset {
			t.Fatalf("%s: backlog %+v %v, want %d entries, %d messages", what, b, err, len(es)-i, next-es[i].offset)
		}
		got, err := c.ReadEntries(ctx, 1)
		if err != nil || len(got) != 1 || got[0].Position != es[i].pos {
			t.Fatalf("%s: read %v %v, want entry %d", what, got, err, i)
		}
		// The reset was written before it returned.
		if c.PersistedMarkDelete() != c.MarkDeletePosition() {
			t.Fatalf("%s: persisted %v, mark-delete %v", what, c.PersistedMarkDelete(), c.MarkDeletePosition())
		}
	}
	for range 30 {
		// By offset: the entry holding it is read again whole.
		off := rng.Int64N(next)
		if err := c.ResetToOffset(ctx, off); err != nil {
			t.Fatal(err)
		}
		i := 0
		for i+1 < len(es) && es[i+1].offset <= off {
			i++
		}
		expect(fmt.Sprintf("offset %d", off), i)

		// By time: the first entry published at or after it.
		at := start.Add(time.Duration(rng.Int64N(int64(pubs[len(pubs)-1].Sub(start) + 10*time.Second))))
		if err := c.ResetToTime(ctx, at); err != nil {
			t.Fatal(err)
		}
		i = 0
		for i < len(es) && pubs[i].Before(at) {
			i++
		}
		expect(fmt.Sprintf("time %v", at.Sub(start)), i)

		// By position, after some acknowledgements: they are forgotten.
		i = rng.IntN(len(es))
		for k := i; k < len(es); k += 2 {
			if err := c.Delete(es[k].pos); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.ResetTo(ctx, es[i].pos); err != nil {
			t.Fatal(err)
		}
		if len(c.AckedRanges()) != 0 {
			t.Fatalf("ranges after reset: %v", c.AckedRanges())
		}
		expect(fmt.Sprintf("position %v", es[i].pos), i)
	}
	if err := c.ResetToOffset(ctx, next); err != nil {
		t.Fatal(err)
	}
	expect("next offset", len(es))
	if err := c.ResetToOffset(ctx, next+1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("reset past the end: %v", err)
	}
	if err := c.ResetTo(ctx, Position{}); err != nil {
		t.Fatal(err)
	}
	expect("position before the first", 0)
	// The reset survives a reopen.
	if err := c.ResetToOffset(ctx, es[17].offset); err != nil {
		t.Fatal(err)
	}
	if err := ml.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml = env.open(t, "t/reset")
	c, err = ml.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	expect("reopened", 17)
}

// A reader blocked in WaitNewEntries wakes on an append, and on Close.
func TestCursorTailing(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 4 })
	ml := env.open(t, "t/tail")
	durable, err := ml.OpenCursor(ctx, "sub", StartLatest)
	if err != nil {
		t.Fatal(err)
	}
	reader := ml.NewNonDurableCursor(StartLatest)
	const n = 30
	errs := make(chan error, 2)
	for _, c := range []*Cursor{durable, reader} {
		go func() {
			errs <- func() error {
				for i := 0; i < n; {
					es, err := c.ReadEntriesOrWait(ctx, 10)
					if err != nil {
						return err
					}
					for _, e := range es {
						if string(e.Payload) != fmt.Sprint(i) {
							return fmt.Errorf("%v: entry %d is %q", c, i, e.Payload)
						}
						if err := c.Delete(e.Position); err != nil {
							return err
						}
						i++
					}
				}
				return nil
			}()
		}()
	}
	for i := range n {
		mustAppend(t, ml, fmt.Sprint(i), 1)
	}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("tailing readers did not finish")
		}
	}
	if md := durable.MarkDeletePosition(); md != ml.LastConfirmed() {
		t.Fatalf("mark-delete %v after acknowledging everything, last %v", md, ml.LastConfirmed())
	}
	waiting := make(chan error, 1)
	go func() { waiting <- durable.WaitNewEntries(ctx) }()
	if err := durable.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrCursorClosed) {
			t.Fatalf("waiter woke with %v, want ErrCursorClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not wake the waiter")
	}
}

func TestCursorNamesAndDelete(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	env := tc.factory()
	ml := env.open(t, "t/names")
	for _, bad := range []string{"", ".", "..", "a/b", "x\x01"} {
		if _, err := ml.OpenCursor(ctx, bad, StartEarliest); !errors.Is(err, ErrInvalidCursorName) {
			t.Errorf("OpenCursor(%q): %v, want ErrInvalidCursorName", bad, err)
		}
	}
	if err := ml.DeleteCursor(ctx, "nope"); !errors.Is(err, ErrNoCursor) {
		t.Fatalf("DeleteCursor of an unknown cursor: %v", err)
	}
	mustAppend(t, ml, "x", 1)
	a, err := ml.OpenCursor(ctx, "a", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ml.OpenCursor(ctx, "a", StartLatest); err != nil || again != a {
		t.Fatalf("second OpenCursor: %v %v", again, err)
	}
	if _, err := ml.OpenCursor(ctx, "b", StartEarliest); err != nil {
		t.Fatal(err)
	}
	if err := ml.DeleteCursor(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := a.MarkDelete(ml.LastConfirmed(), nil); !errors.Is(err, ErrNoCursor) {
		t.Fatalf("MarkDelete on a deleted cursor: %v", err)
	}
	if cs := ml.Cursors(); len(cs) != 1 || cs[0].Name() != "b" {
		t.Fatalf("cursors %v", cs)
	}
	p, _ := Path("t/names")
	if names, err := env.meta.Children(ctx, p); err != nil || len(names) != 1 || names[0] != "b" {
		t.Fatalf("cursor nodes %v %v", names, err)
	}
	// Deleting the managed ledger deletes its cursors, even those not
	// loaded by this instance (written here behind its back).
	if _, err := env.meta.Create(ctx, meta.Join(p, "other"), []byte(`{"format":1,"markDelete":{"ledgerId":1,"entryId":-1},"offset":-1}`), 0); err != nil {
		t.Fatal(err)
	}
	if err := ml.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := env.meta.Exists(ctx, p); ok || err != nil {
		t.Fatalf("node after Delete: %v %v", ok, err)
	}
}

// A second broker opening the managed ledger takes its cursors over: the
// first one's cursor writes fail (ErrFenced) and never overwrite the new
// owner's.
func TestCursorFencedByNewOwner(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	env1, env2 := tc.factory(), tc.factory()
	ml1 := env1.open(t, "t/owner")
	var es []appendResult
	for i := range 10 {
		es = append(es, mustAppend(t, ml1, fmt.Sprint(i), 1))
	}
	c1, err := ml1.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.MarkDelete(es[2].pos, nil); err != nil {
		t.Fatal(err)
	}
	if err := c1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ml2 := env2.open(t, "t/owner")
	c2, err := ml2.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if c2.MarkDeletePosition() != es[2].pos {
		t.Fatalf("new owner's cursor at %v, want %v", c2.MarkDeletePosition(), es[2].pos)
	}
	if err := c1.MarkDelete(es[5].pos, nil); err != nil {
		t.Fatal(err)
	}
	if err := c1.Flush(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner's flush: %v, want ErrFenced", err)
	}
	if err := c1.Delete(es[7].pos); !errors.Is(err, ErrFenced) {
		t.Fatalf("old owner's ack after fencing: %v, want ErrFenced", err)
	}
	if err := c2.MarkDelete(es[3].pos, nil); err != nil {
		t.Fatal(err)
	}
	if err := c2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ml2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ml3 := env2.open(t, "t/owner")
	c3, err := ml3.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil || c3.MarkDeletePosition() != es[3].pos {
		t.Fatalf("after the new owner closed: %v %v, want %v", c3.MarkDeletePosition(), err, es[3].pos)
	}
}

// ledgerSet returns the ids of the listed ledgers.
func ledgerSet(ml *ManagedLedger) map[int64]bool {
	out := make(map[int64]bool)
	for _, l := range ml.Ledgers() {
		out[l.LedgerID] = true
	}
	return out
}

// A non-durable cursor reads like a durable one but holds nothing back:
// ledgers it has not read are trimmed once the durable cursors are past
// them, and it goes on from the oldest entry left.
func TestNonDurableCursorHoldsNothing(t *testing.T) {
	ctx := testCtx(t)
	env := newTestCluster(t, 1).factory(func(c *Config) {
		c.MaxEntriesPerLedger = 5
		c.RetentionTime, c.RetentionSize = 0, 0
		c.CursorFlushInterval = -1
	})
	ml := env.open(t, "t/nondurable")
	sub, err := ml.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	reader := ml.NewNonDurableCursor(StartEarliest)
	if reader.Durable() || reader.Name() != "" {
		t.Fatal("a non-durable cursor looks durable")
	}
	es := appendBatches(t, env, ml, rand.New(rand.NewPCG(1, 1)), 23, 1, 0)
	got, err := reader.ReadEntries(ctx, 3)
	if err != nil || len(got) != 3 || got[0].Position != es[0].pos {
		t.Fatalf("non-durable read %v %v", got, err)
	}
	if n := len(ml.Ledgers()); n < 5 {
		t.Fatalf("%d ledgers", n)
	}
	// The durable cursor consumes up to entry 17: the ledgers before
	// entry 17's go, though the reader is still in the first one.
	if err := sub.MarkDelete(es[17].pos, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "trimming", func() bool { return ml.FirstPosition() == Position{es[17].pos.Ledger, 0} })
	got, err = reader.ReadEntries(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	first := 15 // entry 17's ledger starts at entry 15
	if len(got) != len(es)-first || got[0].Position != es[first].pos {
		t.Fatalf("after trimming, the reader read %d entries from %v, want %d from %v", len(got), got[0].Position, len(es)-first, es[first].pos)
	}
	// With only non-durable cursors, retention alone decides: everything
	// before the current ledger goes.
	if err := ml.DeleteCursor(ctx, "sub"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "trimming without durable cursors", func() bool { return len(ml.Ledgers()) == 1 })
}

// Retention keeps data after it is acknowledged: by time (fake clock)
// and by size.
func TestCursorRetention(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	for _, tt := range []struct {
		name   string
		rt     time.Duration
		rs     int64
		expire func(env *testEnv, ml *ManagedLedger)
	}{
		{name: "time", rt: 10 * time.Minute, rs: -1,
			expire: func(env *testEnv, ml *ManagedLedger) { env.clock.Advance(11 * time.Minute) }},
		{name: "size", rt: -1, rs: 3 * (5 * int64(HeaderSize+len("p000000")))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := tc.factory(func(c *Config) {
				c.MaxEntriesPerLedger = 5
				c.RetentionTime, c.RetentionSize = tt.rt, tt.rs
				c.CursorFlushInterval = -1
			})
			ml := env.open(t, "t/retention-"+tt.name)
			c, err := ml.OpenCursor(ctx, "sub", StartEarliest)
			if err != nil {
				t.Fatal(err)
			}
			es := appendBatches(t, env, ml, rand.New(rand.NewPCG(1, 1)), 30, 1, 0)
			if err := c.MarkDelete(es[len(es)-1].pos, nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := ml.TrimConsumed(ctx); err != nil {
				t.Fatal(err)
			}
			lgs := ml.Ledgers()
			if tt.expire == nil {
				// Size: 3 full ledgers' bytes after a ledger keep it, so
				// the ledgers kept are the last 3 full ones and the
				// current one.
				if len(lgs) != 4 {
					t.Fatalf("size retention kept %d ledgers: %+v", len(lgs), lgs)
				}
				return
			}
			if len(lgs) < 6 {
				t.Fatalf("time retention kept %d ledgers, want all (6+)", len(lgs))
			}
			tt.expire(env, ml)
			if _, err := ml.TrimConsumed(ctx); err != nil {
				t.Fatal(err)
			}
			if n := len(ml.Ledgers()); n != 1 {
				t.Fatalf("after expiry %d ledgers left", n)
			}
		})
	}
}
