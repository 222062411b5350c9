package client

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/meta"
)

// queueingLocal is an in-process bookie whose Call, like storage's add when
// its journal queue is full, waits until the callbacks of earlier calls
// have returned; and those callbacks run on its own goroutines.
type queueingLocal struct {
	mu          sync.Mutex
	cond        sync.Cond
	outstanding int
	giveUp      bool // stop waiting (the test failed)
}

func (l *queueingLocal) stopWaiting() {
	l.mu.Lock()
	l.giveUp = true
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *queueingLocal) Call(op wire.Op, _ uint16, body []byte, done func(wire.Status, [][]byte)) {
	l.mu.Lock()
	for l.outstanding > 0 && !l.giveUp {
		l.cond.Wait()
	}
	l.outstanding++
	l.mu.Unlock()
	go func() {
		h, err := entry.Parse(body)
		if op != wire.OpAdd || err != nil {
			done(wire.StatusMalformed, nil)
		} else {
			done(wire.StatusOK, [][]byte{wire.LedgerEntry(h.Ledger, h.Entry)})
		}
		l.mu.Lock()
		l.outstanding--
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
}

// A writer sends adds holding its lock, and answers take that lock: if an
// in-process bookie's answer ran the callback where it is given, a sender
// waiting in Call for room that only the answer frees would deadlock. The
// caller here appends under a lock of its own that its done callbacks
// take, as the managed ledger does.
func TestLocalAnswersDoNotRunOnTheBookie(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t, 0)
	const addr = "in-process:3181"
	if _, err := cl.meta.Create(ctx, meta.Join(meta.BookiesAvailableRoot, addr), []byte(`{}`), meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	l := &queueingLocal{}
	l.cond.L = &l.mu
	c := cl.client(func(cfg *Config) {
		cfg.Local = func(a string) Local {
			if a == addr {
				return l
			}
			return nil
		}
	})
	w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	// Appended from a goroutine of their own: a deadlocked sender must
	// not stop the test from failing.
	resultsCh := make(chan (<-chan result), 1)
	go func() {
		var callerMu sync.Mutex
		out := make(chan result, n)
		for i := range n {
			callerMu.Lock()
			w.Append(payload("q", i), func(id int64, err error) {
				callerMu.Lock()
				out <- result{id, err}
				callerMu.Unlock()
			})
			callerMu.Unlock()
		}
		resultsCh <- out
	}()
	var results <-chan result
	select {
	case results = <-resultsCh:
	case <-time.After(20 * time.Second):
		l.stopWaiting()
		t.Fatal("sending the adds deadlocked")
	}
	next := int64(0)
	timeout := time.After(20 * time.Second)
	for next < n {
		select {
		case r := <-results:
			if r.err != nil || r.id != next {
				t.Fatalf("completion %d: id %d err %v", next, r.id, r.err)
			}
			next++
		case <-timeout:
			l.stopWaiting()
			t.Fatalf("%d of %d adds completed: deadlocked", next, n)
		}
	}
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
