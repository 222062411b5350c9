package bookie

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

func newLocalServer(t *testing.T, st Storage, maxReads int) *Server {
	t.Helper()
	srv, err := NewServer(ServerConfig{Storage: st, Logger: slog.New(slog.DiscardHandler), MaxReadsInFlight: maxReads})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

type localAnswer struct {
	st   wire.Status
	body []byte
}

// callAsync makes a local call; its answer arrives on the channel.
func callAsync(srv *Server, op wire.Op, flags uint16, body []byte) <-chan localAnswer {
	ch := make(chan localAnswer, 1)
	srv.Call(op, flags, body, func(st wire.Status, payload [][]byte) {
		ch <- localAnswer{st, bytes.Join(payload, nil)}
	})
	return ch
}

func call(t *testing.T, srv *Server, op wire.Op, flags uint16, body []byte) localAnswer {
	t.Helper()
	select {
	case a := <-callAsync(srv, op, flags, body):
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%v: no answer", op)
		return localAnswer{}
	}
}

// Local calls get the answers a connection's requests get, with the
// response bodies in the wire's layout.
func TestLocalCalls(t *testing.T) {
	srv := newLocalServer(t, newMemStorage(), 0)
	for i := range 10 {
		e := entry.Encode(nil, entry.Header{Ledger: 5, Entry: int64(i), LAC: int64(i) - 1}, []byte(fmt.Sprint("payload-", i)))
		a := call(t, srv, wire.OpAdd, 0, e)
		vs, err := wire.ParseInt64s(a.body, 2)
		if a.st != wire.StatusOK || err != nil || vs[0] != 5 || vs[1] != int64(i) {
			t.Fatalf("add %d: status %d, body %v (%v)", i, a.st, vs, err)
		}
	}
	a := call(t, srv, wire.OpRead, 0, wire.LedgerEntry(5, 3))
	if h, err := entry.Verify(a.body); a.st != wire.StatusOK || err != nil || h.Entry != 3 {
		t.Fatalf("read: status %d, %+v, %v", a.st, h, err)
	}
	a = call(t, srv, wire.OpReadRange, 0, wire.ReadRange(5, 2, 20, 1<<20))
	entries, err := wire.ParseEntries(a.body)
	if a.st != wire.StatusOK || err != nil || len(entries) != 8 {
		t.Fatalf("read range: status %d, %d entries, %v", a.st, len(entries), err)
	}
	for j, e := range entries {
		if h, err := entry.Verify(e); err != nil || h.Entry != int64(2+j) {
			t.Fatalf("read range: entry %d is %+v %v", j, h, err)
		}
	}
	a = call(t, srv, wire.OpReadLAC, 0, wire.Ledger(5))
	if vs, err := wire.ParseInt64s(a.body, 2); a.st != wire.StatusOK || err != nil || vs[0] != 8 {
		t.Fatalf("read LAC: status %d, %v %v", a.st, vs, err)
	}

	good := entry.Encode(nil, entry.Header{Ledger: 2, Entry: 0, LAC: -1}, []byte("x"))
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-1] ^= 1
	for _, tc := range []struct {
		name  string
		op    wire.Op
		flags uint16
		body  []byte
		want  wire.Status
	}{
		{"bad checksum", wire.OpAdd, 0, corrupt, wire.StatusChecksum},
		{"short entry", wire.OpAdd, 0, []byte("short"), wire.StatusMalformed},
		{"missing entry", wire.OpRead, 0, wire.LedgerEntry(2, 0), wire.StatusNoEntry},
		{"malformed read", wire.OpRead, 0, []byte{1, 2}, wire.StatusMalformed},
		{"unknown op", 77, 0, nil, wire.StatusUnknownOp},
		{"fence", wire.OpReadLAC, wire.FlagFence, wire.Ledger(2), wire.StatusOK},
		{"add after fence", wire.OpAdd, 0, good, wire.StatusFenced},
		{"recovery add after fence", wire.OpAdd, wire.FlagRecovery, good, wire.StatusOK},
		{"wait lac times out", wire.OpWaitLAC, 0, wire.WaitLAC(2, 5, 10), wire.StatusTimeout},
	} {
		if a := call(t, srv, tc.op, tc.flags, tc.body); a.st != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, a.st, tc.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// More reads than the read slots never block the caller: the extra ones
// wait on their own goroutines.
func TestLocalReadsDoNotBlockCaller(t *testing.T) {
	st := &slowReads{memStorage: newMemStorage(), release: make(chan struct{})}
	srv := newLocalServer(t, st, 2)
	e := entry.Encode(nil, entry.Header{Ledger: 1, Entry: 0, LAC: -1}, []byte("x"))
	if a := call(t, srv, wire.OpAdd, 0, e); a.st != wire.StatusOK {
		t.Fatalf("add: %d", a.st)
	}
	var answers []<-chan localAnswer
	issued := make(chan struct{})
	go func() {
		for range 10 {
			answers = append(answers, callAsync(srv, wire.OpRead, 0, wire.LedgerEntry(1, 0)))
		}
		close(issued)
	}()
	select {
	case <-issued:
	case <-time.After(10 * time.Second):
		t.Fatal("issuing 10 reads with 2 read slots blocked the caller")
	}
	close(st.release)
	for i, ch := range answers {
		if a := <-ch; a.st != wire.StatusOK {
			t.Fatalf("read %d: status %d", i, a.st)
		}
	}
}

type slowReads struct {
	*memStorage
	release chan struct{}
}

func (s *slowReads) ReadEntry(ledger, id int64) ([]byte, error) {
	<-s.release
	return s.memStorage.ReadEntry(ledger, id)
}

// Shutdown waits for the local calls in flight; calls after it are
// answered StatusShuttingDown at once.
func TestLocalShutdown(t *testing.T) {
	st := newMemStorage()
	st.hold = make(chan struct{})
	srv := newLocalServer(t, st, 0)
	e := entry.Encode(nil, entry.Header{Ledger: 1, Entry: 0, LAC: -1}, []byte("x"))
	held := callAsync(srv, wire.OpAdd, 0, e)
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with an add unanswered", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(st.hold)
	if a := <-held; a.st != wire.StatusOK {
		t.Fatalf("held add: status %d", a.st)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if a := call(t, srv, wire.OpRead, 0, wire.LedgerEntry(1, 0)); a.st != wire.StatusShuttingDown {
		t.Fatalf("call after shutdown: status %d, want %d", a.st, wire.StatusShuttingDown)
	}
}
