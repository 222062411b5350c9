package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
)

// Trimming driven by cursors while appends and reads go on, ledgers
// rolling over every 20 entries, no retention:
//
//  1. a durable cursor that acknowledges nothing holds every ledger;
//  2. once it acknowledges into the fourth ledger, the three before go,
//     from the list and from the bookie;
//  3. deleting it lets trimming follow the other durable cursor, and the
//     bookie's garbage collection gives the space back.
//
// Appenders, a durable reader (acknowledging as it goes) and a
// non-durable reader keep working throughout.
func TestTrimUnderLoad(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 0)
	bk := tc.addBookie(bookietest.Options{Dir: "/b0", EntryLogMaxSize: 64 << 10})
	env := tc.factory(func(c *Config) {
		c.MaxEntriesPerLedger = 20
		c.RetentionTime, c.RetentionSize = 0, 0
		c.CursorFlushInterval = 5 * time.Millisecond
	})
	ml := env.open(t, "t/trimload")
	fast, err := ml.OpenCursor(ctx, "fast", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := ml.OpenCursor(ctx, "slow", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	tail := ml.NewNonDurableCursor(StartEarliest)
	firstLedger := ml.Ledgers()[0].LedgerID

	failures := make(chan error, 16)
	fail := func(err error) {
		select {
		case failures <- err:
		default:
		}
	}
	stop := make(chan struct{})
	var appenders sync.WaitGroup
	payload := make([]byte, 1000)
	for range 2 {
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			window := make(chan struct{}, 16)
			for {
				select {
				case <-stop:
					for range cap(window) { // wait for the appends in flight
						window <- struct{}{}
					}
					return
				case window <- struct{}{}:
				}
				ml.Append(payload, FormatPulsar, 1, func(_ Position, _ int64, err error) {
					if err != nil {
						fail(fmt.Errorf("append: %w", err))
					}
					<-window
				})
			}
		}()
	}
	rctx, cancelReaders := context.WithCancel(ctx)
	defer cancelReaders()
	var fastNext, tailSkips atomic.Int64
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { // durable: sees every offset, acknowledges as it goes
		defer readers.Done()
		for next := int64(0); ; {
			es, err := fast.ReadEntriesOrWait(rctx, 50)
			if err != nil {
				if rctx.Err() == nil {
					fail(fmt.Errorf("fast reader: %w", err))
				}
				return
			}
			for _, e := range es {
				if e.Header.FirstOffset != next {
					fail(fmt.Errorf("fast reader: offset %d, want %d", e.Header.FirstOffset, next))
					return
				}
				next = e.Header.NextOffset()
			}
			fastNext.Store(next)
			if err := fast.MarkDelete(es[len(es)-1].Position, nil); err != nil {
				fail(fmt.Errorf("fast reader: %w", err))
				return
			}
		}
	}()
	go func() { // non-durable: in order; may be trimmed past
		defer readers.Done()
		for next := int64(0); ; {
			es, err := tail.ReadEntriesOrWait(rctx, 10)
			if err != nil {
				if rctx.Err() == nil {
					fail(fmt.Errorf("non-durable reader: %w", err))
				}
				return
			}
			for _, e := range es {
				switch {
				case e.Header.FirstOffset < next:
					fail(fmt.Errorf("non-durable reader: offset %d after %d", e.Header.FirstOffset, next))
					return
				case e.Header.FirstOffset > next:
					tailSkips.Add(1)
				}
				next = e.Header.NextOffset()
			}
		}
	}()
	check := func() {
		t.Helper()
		select {
		case err := <-failures:
			t.Fatal(err)
		default:
		}
	}
	bookieLedgers := func() []int64 {
		ids, err := bk.Storage.Ledgers()
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}

	// 1. "slow" holds everything.
	waitFor(t, 30*time.Second, "8 ledgers", func() bool { check(); return len(ml.Ledgers()) >= 8 })
	before := ml.Ledgers()
	if before[0].LedgerID != firstLedger {
		t.Fatalf("ledger %d trimmed while a cursor at the start needs it", firstLedger)
	}
	waitFor(t, 10*time.Second, "the bookie to hold the closed ledgers", func() bool {
		ids := bookieLedgers()
		for _, l := range before {
			if l.Closed && !slices.Contains(ids, l.LedgerID) {
				return false
			}
		}
		return true
	})
	held := len(bookieLedgers())

	// 2. "slow" acknowledges up to the first entry of the fourth ledger
	// (rollover limits are soft: ledgers hold 20 entries or more).
	upTo := Position{before[3].LedgerID, 0}
	if err := slow.MarkDelete(upTo, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "trimming up to the slow cursor", func() bool {
		check()
		return ml.Ledgers()[0].LedgerID >= upTo.Ledger
	})
	if first, next := ml.FirstPosition(), (mlView{ml}).next(upTo); next.Before(first) {
		t.Fatalf("trimmed up to %v, but the slow cursor needs %v", first, next)
	}
	// The list is stored first, then the ledgers are deleted.
	c, _ := tc.client()
	var trimmed []int64
	for _, l := range before {
		if l.LedgerID < upTo.Ledger {
			trimmed = append(trimmed, l.LedgerID)
		}
	}
	if len(trimmed) == 0 {
		t.Fatal("nothing trimmed")
	}
	waitFor(t, 10*time.Second, "the trimmed ledgers to be deleted", func() bool {
		ids := bookieLedgers()
		for _, id := range trimmed {
			if _, err := c.OpenLedger(ctx, id, client.OpenOptions{}); !errors.Is(err, client.ErrNoLedger) || slices.Contains(ids, id) {
				return false
			}
		}
		return true
	})

	// 3. Deleting "slow" releases what it held.
	if err := ml.DeleteCursor(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	fastAt := fast.PersistedMarkDelete()
	waitFor(t, 30*time.Second, "trimming up to the fast cursor", func() bool {
		check()
		return ml.Ledgers()[0].LedgerID >= fastAt.Ledger
	})
	waitFor(t, 10*time.Second, "the bookie to drop them", func() bool { return len(bookieLedgers()) < held })

	close(stop)
	appenders.Wait()
	waitFor(t, 30*time.Second, "the fast reader to catch up", func() bool {
		check()
		return fastNext.Load() == ml.NextOffset()
	})
	cancelReaders()
	readers.Wait()
	check()
	waitFor(t, 30*time.Second, "trimming after the last acknowledgement", func() bool {
		return len(ml.Ledgers()) <= 2
	})

	// A checkpoint records which ledgers each finished entry log holds;
	// garbage collection then removes the logs of deleted ledgers.
	if err := bk.Storage.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	logBytes := entryLogBytes(t, bk)
	if err := bk.Storage.GC(); err != nil {
		t.Fatal(err)
	}
	after := entryLogBytes(t, bk)
	if after >= logBytes {
		t.Fatalf("entry logs %d bytes before GC, %d after", logBytes, after)
	}
	t.Logf("%d entries (%d ledgers) appended; bookie ledgers %d → %d; entry logs %d → %d bytes after GC; non-durable reader skipped %d times",
		ml.NextOffset(), len(before), held, len(bookieLedgers()), logBytes, after, tailSkips.Load())
}

func entryLogBytes(t testing.TB, b *bookietest.Bookie) int64 {
	t.Helper()
	n, err := b.EntryLogBytes()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// SetRetention gives one managed ledger its own retention (a namespace's
// policy) over the factory's, which the others keep; it starts a trim by
// itself, and ResetRetention goes back to the factory's.
func TestSetRetention(t *testing.T) {
	ctx := testCtx(t)
	tc := newTestCluster(t, 1)
	env := tc.factory(func(c *Config) { // the factory keeps everything
		c.MaxEntriesPerLedger = 5
		c.CursorFlushInterval = -1
	})
	entrySize := int64(HeaderSize + len("p000000"))
	// Two managed ledgers of 6 full ledgers and a current one, everything
	// acknowledged by their subscription.
	fill := func(name string) *ManagedLedger {
		t.Helper()
		ml := env.open(t, name)
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
		return ml
	}
	a, b := fill("t/setretention-a"), fill("t/setretention-b")
	trim := func(ml *ManagedLedger) int {
		t.Helper()
		if _, err := ml.TrimConsumed(ctx); err != nil {
			t.Fatal(err)
		}
		return len(ml.Ledgers())
	}
	all := len(a.Ledgers())
	if all < 7 {
		t.Fatalf("%d ledgers, want 7", all)
	}
	if rt, rs := a.Retention(); rt != -1 || rs != -1 {
		t.Fatalf("Retention before SetRetention: %v %d, want the factory's -1 -1", rt, rs)
	}

	// Time: 10 minutes keeps everything until the clock passes them.
	a.SetRetention(10*time.Minute, -1)
	if rt, rs := a.Retention(); rt != 10*time.Minute || rs != -1 {
		t.Fatalf("Retention: %v %d", rt, rs)
	}
	if n := trim(a); n != all {
		t.Fatalf("10 min retention kept %d of %d ledgers before they are 10 min old", n, all)
	}
	env.clock.Advance(11 * time.Minute)
	if n := trim(a); n != 1 {
		t.Fatalf("10 min retention kept %d ledgers after 11 min, want the current one", n)
	}
	if n := trim(b); n != all {
		t.Fatalf("the other managed ledger (factory retention, infinite) kept %d of %d ledgers", n, all)
	}

	// Size: 3 full ledgers' bytes after a ledger keep it, as in
	// TestCursorRetention. SetRetention trims without being asked.
	b.SetRetention(-1, 3*5*entrySize)
	waitFor(t, 10*time.Second, "SetRetention to trim by size", func() bool { return len(b.Ledgers()) == 4 })
	if n := trim(b); n != 4 {
		t.Fatalf("size retention kept %d ledgers, want 4", n)
	}

	// Back to the factory's (infinite): what comes is kept.
	b.ResetRetention()
	if rt, rs := b.Retention(); rt != -1 || rs != -1 {
		t.Fatalf("Retention after ResetRetention: %v %d", rt, rs)
	}
	appendBatches(t, env, b, rand.New(rand.NewPCG(2, 2)), 10, 1, 0)
	c, err := b.OpenCursor(ctx, "sub", StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MarkDelete(b.LastConfirmed(), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(time.Hour)
	if n := trim(b); n != 6 {
		t.Fatalf("after ResetRetention %d ledgers kept, want all 6", n)
	}

	// Zero keeps nothing the cursor passed.
	b.SetRetention(0, 0)
	waitFor(t, 10*time.Second, "zero retention to trim", func() bool { return len(b.Ledgers()) == 1 })
}
