package client

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/meta"
)

func TestRoundTrip(t *testing.T) { forTransports(t, testRoundTrip) }

func testRoundTrip(t *testing.T, local bool) {
	for _, q := range []struct{ e, qw, qa int }{{1, 1, 1}, {3, 3, 2}, {3, 2, 2}, {5, 3, 2}} {
		t.Run(fmt.Sprintf("%d-%d-%d", q.e, q.qw, q.qa), func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			cl := newClusterOver(t, q.e, local)
			c := cl.client()
			w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: q.e, WriteQuorum: q.qw, AckQuorum: q.qa,
				Custom: map[string]string{"topic": "t1"}})
			if err != nil {
				t.Fatal(err)
			}
			const n = 200
			next := int64(0)
			for r := range appendAll(w, "rt", 0, n) {
				if r.err != nil || r.id != next {
					t.Fatalf("completion %d: id %d err %v", next, r.id, r.err)
				}
				next++
			}
			if lac := w.LastAddConfirmed(); lac != n-1 {
				t.Fatalf("writer LAC %d, want %d", lac, n-1)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			w.Append([]byte("late"), func(_ int64, err error) {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("append after close: %v, want ErrClosed", err)
				}
			})

			r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			md := r.Metadata()
			if md.State != StateClosed || md.LastEntry != n-1 || md.Length != totalLength("rt", n) ||
				md.Custom["topic"] != "t1" || len(md.Ensembles) != 1 || len(md.Ensembles[0].Bookies) != q.e {
				t.Fatalf("metadata %+v", md)
			}
			if r.LastAddConfirmed() != n-1 {
				t.Fatalf("reader LAC %d", r.LastAddConfirmed())
			}
			checkEntries(t, ctx, r, "rt", n-1)
			// A few single-entry reads across the range.
			for _, e := range []int64{0, 1, n / 2, n - 1} {
				es, err := r.Read(ctx, e, e)
				if err != nil || len(es) != 1 || !bytes.Equal(es[0].Payload, payload("rt", int(e))) {
					t.Fatalf("read %d: %v %v", e, es, err)
				}
			}
		})
	}
}

// Several goroutines append at once: ids are handed out in call order and
// completions arrive in id order, each with its own payload.
func TestConcurrentAppendOrder(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 150
	var mu sync.Mutex
	var order []int64
	sent := make(map[int64][]byte)
	var wg sync.WaitGroup
	all := make(chan struct{})
	var pending sync.WaitGroup
	pending.Add(goroutines * each)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p := []byte(fmt.Sprintf("g%d-%d", g, i))
				w.Append(p, func(id int64, err error) {
					if err != nil {
						t.Errorf("append: %v", err)
					}
					mu.Lock()
					order = append(order, id)
					sent[id] = p
					mu.Unlock()
					pending.Done()
				})
			}
		}()
	}
	wg.Wait()
	go func() { pending.Wait(); close(all) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	for i, id := range order {
		if id != int64(i) {
			t.Fatalf("completion %d has id %d: out of order", i, id)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es, err := r.Read(ctx, 0, goroutines*each-1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if !bytes.Equal(e.Payload, sent[e.ID]) {
			t.Fatalf("entry %d: %q, want %q", e.ID, e.Payload, sent[e.ID])
		}
	}
}

// A reader of an open ledger learns the LAC the writer piggybacks on its
// entries, reads up to it, and no further.
func TestReaderFollowsOpenLedger(t *testing.T) { forTransports(t, testReaderFollowsOpenLedger) }

func testReaderFollowsOpenLedger(t *testing.T, local bool) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 3, local)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lac, err := r.ReadLAC(ctx); err != nil || lac != -1 {
		t.Fatalf("ReadLAC of an empty ledger: %d, %v", lac, err)
	}
	if _, err := r.Read(ctx, 0, 0); !errors.Is(err, ErrReadBeyondLAC) {
		t.Fatalf("read of an empty ledger: %v, want ErrReadBeyondLAC", err)
	}
	for i := range 10 {
		if _, err := w.AppendSync(ctx, payload("lac", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Entry 9 carries LAC 8: the bookies know it once it is stored.
	waitFor(t, 10*time.Second, "ReadLAC to reach 8", func() bool {
		lac, err := r.ReadLAC(ctx)
		return err == nil && lac == 8
	})
	checkEntries(t, ctx, r, "lac", 8)
	if _, err := r.Read(ctx, 5, 9); !errors.Is(err, ErrReadBeyondLAC) {
		t.Fatalf("read past the LAC: %v, want ErrReadBeyondLAC", err)
	}
	if md := r.Metadata(); md.State != StateOpen {
		t.Fatalf("state %s", md.State)
	}
	// Once closed, ReadLAC answers from the metadata.
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if lac, err := r.ReadLAC(ctx); err != nil || lac != 9 {
		t.Fatalf("ReadLAC after close: %d, %v", lac, err)
	}
	checkEntries(t, ctx, r, "lac", 9)
}

func TestWaitLAC(t *testing.T) { forTransports(t, testWaitLAC) }

func testWaitLAC(t *testing.T, local bool) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 3, local)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(after int64) <-chan result {
		ch := make(chan result, 1)
		go func() {
			lac, err := r.WaitLAC(ctx, after)
			ch <- result{lac, err}
		}()
		return ch
	}
	expect := func(ch <-chan result, want int64, wantErr error) {
		t.Helper()
		select {
		case res := <-ch:
			if res.id != want || !errors.Is(res.err, wantErr) {
				t.Fatalf("WaitLAC: %d, %v; want %d, %v", res.id, res.err, want, wantErr)
			}
		case <-ctx.Done():
			t.Fatal("WaitLAC did not return")
		}
	}

	first := wait(-1)
	for i := range 2 { // entry 1 carries LAC 0
		if _, err := w.AppendSync(ctx, payload("wait", i)); err != nil {
			t.Fatal(err)
		}
	}
	expect(first, 0, nil)

	second := wait(0)
	if _, err := w.AppendSync(ctx, payload("wait", 2)); err != nil { // carries LAC 1
		t.Fatal(err)
	}
	expect(second, 1, nil)

	third := wait(2)
	if err := w.Close(ctx); err != nil { // closed at 2: WaitLAC(2) can never pass
		t.Fatal(err)
	}
	expect(third, 2, ErrClosed)
	expect(wait(1), 2, nil)
}

func TestNotEnoughBookies(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 2)
	_, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), "need 3, 2 available") {
		t.Fatalf("create with 2 bookies for E=3: %v", err)
	}
}

func TestLedgerOptionsValidated(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 1)
	c := cl.client()
	for _, o := range []LedgerOptions{
		{EnsembleSize: 0, WriteQuorum: 0, AckQuorum: 0},
		{EnsembleSize: 2, WriteQuorum: 3, AckQuorum: 1},
		{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 3},
		{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 0},
	} {
		if _, err := c.CreateLedger(ctx, o); err == nil || !strings.Contains(err.Error(), "E ≥ Qw ≥ Qa ≥ 1") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without Meta succeeded")
	}
}

func TestChecksumCorruption(t *testing.T) { forTransports(t, testChecksumCorruption) }

// Damaged bytes are never returned as an entry: damaged on a bookie's
// disk, the bookie's storage finds them (it verifies what it reads, over
// either transport); damaged after that, on the way (simulated by a
// storage wrapper that damages what it returns), the client does — over
// TCP. An in-process bookie's answer takes no way: the client does not
// check its checksum again (Local), which the last case shows.
func testChecksumCorruption(t *testing.T, local bool) {
	for _, tc := range []struct {
		name    string
		disk    int // bookies whose disk returns damaged bytes
		wire    int // bookies whose answers are damaged after storage read them
		wantErr error
		tcpOnly bool
	}{
		{name: "one disk damaged: read from another", disk: 1},
		{name: "every disk damaged", disk: 3, wantErr: wire.ErrChecksum},
		{name: "one answer damaged on the way: read from another", wire: 1, tcpOnly: true},
		{name: "every answer damaged on the way", wire: 3, wantErr: entry.ErrChecksum, tcpOnly: true},
	} {
		if tc.tcpOnly && local {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			cl := newClusterOver(t, 3, local)
			c := cl.client()
			w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 3})
			if err != nil {
				t.Fatal(err)
			}
			for r := range appendAll(w, "crc", 0, 20) {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			for _, b := range cl.bookies {
				// The entries in the entry logs' files: a checkpoint
				// covers what is applied, and an add is acknowledged
				// once journaled, so wait for the applier first (asking
				// for the LAC does). Entries applied after the checkpoint
				// would be read from the log's write buffer, past the
				// damaged disk (this test failed so once in CI).
				if _, _, err := b.Storage.LastAddConfirmed(w.ID()); err != nil {
					t.Fatal(err)
				}
				if err := b.Storage.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			for _, b := range cl.bookies[:tc.disk] {
				b.damaged.Store(true)
			}
			for _, b := range cl.bookies[:tc.wire] {
				b.storage.corrupt.Store(true)
			}
			r, err := c.OpenLedger(ctx, w.ID(), OpenOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Read(ctx, 0, 19)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				checkEntries(t, ctx, r, "crc", 19)
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("read: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// The contract that lets a client skip the checksum of an in-process
// bookie's answers (Local): without the bookie's own check, damaged
// bytes from its storage reach the reader.
func TestLocalReadsAreNotVerifiedTwice(t *testing.T) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 1, true)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	for r := range appendAll(w, "once", 0, 3) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cl.bookies[0].storage.corrupt.Store(true) // after the storage's check
	r, err := c.OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, 2)
	if err != nil {
		t.Fatalf("read: %v (the client checked the checksum of an in-process answer)", err)
	}
	for i, e := range got {
		want := payload("once", i)
		want[len(want)-1] ^= 0x5a
		if !bytes.Equal(e.Payload, want) {
			t.Fatalf("entry %d: payload %.40q, want the damage the wrapper made, %.40q", i, e.Payload, want)
		}
	}
}

func TestDeleteLedger(t *testing.T) { forTransports(t, testDeleteLedger) }

func testDeleteLedger(t *testing.T, local bool) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 4, local)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for r := range appendAll(w, "del", 0, 30) {
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ensemble := w.Metadata().Ensembles[0].Bookies
	if err := c.DeleteLedger(ctx, w.ID()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.meta.Get(ctx, meta.LedgerPath(w.ID())); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("metadata after delete: %v", err)
	}
	if _, err := c.OpenLedger(ctx, w.ID(), OpenOptions{}); !errors.Is(err, ErrNoLedger) {
		t.Fatalf("open after delete: %v, want ErrNoLedger", err)
	}
	for _, addr := range ensemble {
		for e := range int64(30) {
			if _, err := cl.bookie(addr).storage.ReadEntry(w.ID(), e); !errors.Is(err, storage.ErrNoLedger) {
				t.Fatalf("bookie %s entry %d after delete: %v, want ErrNoLedger", addr, e, err)
			}
		}
	}
	if err := c.DeleteLedger(ctx, w.ID()); !errors.Is(err, ErrNoLedger) {
		t.Fatalf("second delete: %v, want ErrNoLedger", err)
	}
}

// A bookie that is down does not stop a delete: it is skipped (its GC
// reclaims the ledger later) and the metadata goes.
func TestDeleteLedgerWithBookieDown(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendSync(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cl.kill(cl.bookies[0])
	if err := c.DeleteLedger(ctx, w.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenLedger(ctx, w.ID(), OpenOptions{}); !errors.Is(err, ErrNoLedger) {
		t.Fatalf("open after delete: %v", err)
	}
	if _, err := cl.bookies[1].storage.ReadEntry(w.ID(), 0); !errors.Is(err, storage.ErrNoLedger) {
		t.Fatalf("live bookie after delete: %v", err)
	}
}

func TestClientClose(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 1)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendSync(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := w.AppendSync(ctx, []byte("y")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after client close: %v", err)
	}
	if _, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("create after client close: %v", err)
	}
}

// TestAppendReserved: entries written in place (the caller leaves room
// for the header), with or without a known tail CRC, read back as if
// appended by copy, in order with copied appends; a buffer without room
// for the header, or a known tail outside it, is refused.
func TestAppendReserved(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 3)
	c := cl.client()
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	done := make(chan error, n)
	for i := range n {
		p := []byte(fmt.Sprint("entry-", i))
		cb := func(id int64, err error) {
			if err == nil && id != int64(i) {
				err = fmt.Errorf("entry %d got id %d", i, id)
			}
			done <- err
		}
		switch buf := append(make([]byte, entry.HeaderSize), p...); i % 3 {
		case 0:
			w.AppendReserved(buf, cb)
		case 1:
			from := entry.HeaderSize + i%len(p)
			w.AppendReservedKnown(buf, from, crc32.Checksum(buf[from:], crc32.MakeTable(crc32.Castagnoli)), cb)
		default:
			w.Append(p, cb)
		}
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	w.AppendReserved(make([]byte, entry.HeaderSize-1), func(_ int64, err error) { done <- err })
	if err := <-done; !errors.Is(err, entry.ErrMalformed) {
		t.Fatalf("a buffer too short for the header: %v", err)
	}
	for _, from := range []int{entry.HeaderSize - 1, entry.HeaderSize + 3} {
		w.AppendReservedKnown(make([]byte, entry.HeaderSize+2), from, 0, func(_ int64, err error) { done <- err })
		if err := <-done; !errors.Is(err, entry.ErrMalformed) {
			t.Fatalf("a known tail from %d of %d bytes: %v", from, entry.HeaderSize+2, err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es, err := r.Read(ctx, 0, n-1)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if e.ID != int64(i) || string(e.Payload) != fmt.Sprint("entry-", i) {
			t.Fatalf("entry %d reads %d %q", i, e.ID, e.Payload)
		}
	}
}

// Entries over 32 KiB come back in read buffers of their own, of a pooled
// size, over either transport: Buf is the whole entry, Payload within it.
// Recycling them (as a Kafka fetch does) leaves later reads correct. (Race
// builds poison what is recycled.)
func TestReadBuffersRecyclable(t *testing.T) { forTransports(t, testReadBuffersRecyclable) }

func testReadBuffersRecyclable(t *testing.T, local bool) {
	ctx := testCtx(t)
	cl := newClusterOver(t, 1, local)
	w, err := cl.client().CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	want := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 40<<10+i) }
	for i := range n {
		done := make(chan error, 1)
		w.Append(want(i), func(_ int64, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := cl.client().OpenLedger(ctx, w.ID(), OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		es, err := r.Read(ctx, 0, n-1)
		if err != nil || len(es) != n {
			t.Fatalf("round %d: %d entries, %v", round, len(es), err)
		}
		for i, e := range es {
			if !bytes.Equal(e.Payload, want(i)) {
				t.Fatalf("round %d: entry %d: payload of %d bytes differs", round, i, len(e.Payload))
			}
			if len(e.Buf) != entry.HeaderSize+len(e.Payload) || &e.Buf[entry.HeaderSize] != &e.Payload[0] {
				t.Fatalf("round %d: entry %d: Buf (%d bytes) is not the whole entry around Payload", round, i, len(e.Buf))
			}
			if c := cap(entry.NewReadBuf(len(e.Buf))); cap(e.Buf) != c {
				t.Fatalf("round %d: entry %d: Buf of capacity %d, a pooled one has %d", round, i, cap(e.Buf), c)
			}
			entry.Recycle(e.Buf)
		}
	}
}
