package metatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

func testEphemeralVisible(t *testing.T, h Harness) {
	f := newFixture(t, h)
	owner, other := f.open(), f.open()
	e := f.path("ephemeral")
	f.create(owner, e, []byte("mine"), meta.Ephemeral)
	if v, st := f.get(other, e); string(v) != "mine" || !st.Ephemeral {
		t.Fatalf("another session reads %q, %+v; want %q, ephemeral", v, st, "mine")
	}
	if names := f.children(other, f.root); !slices.Equal(names, []string{"ephemeral"}) {
		t.Fatalf("another session lists %s", quoteAll(names))
	}
	// Any session may change or delete it; it stays the owner's.
	if st := f.set(other, e, []byte("theirs"), 0); !st.Ephemeral {
		t.Fatalf("Set by another session returned %+v, want ephemeral", st)
	}
	f.delete(other, e, 1)
	f.mustNotExist(owner, e)
}

func testEphemeralDeletedOnClose(t *testing.T, h Harness) {
	f := newFixture(t, h)
	owner, survivor, watcher := f.open(), f.open(), f.open()
	mine, theirs := f.path("mine"), f.path("theirs")
	persistent := f.path("persistent")
	f.create(owner, mine, nil, meta.Ephemeral)
	f.create(owner, persistent, nil, 0)
	f.create(survivor, theirs, nil, meta.Ephemeral)

	existsW := f.existsW(watcher, mine)
	childrenW := f.childrenW(watcher, f.root)
	if err := owner.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	expectEvent(t, existsW, meta.EventDeleted, mine)
	expectEvent(t, childrenW, meta.EventChildrenChanged, f.root)

	// The watcher has seen the deletion, so its reads come after it.
	f.mustNotExist(watcher, mine)
	f.mustExist(watcher, theirs)
	f.mustExist(watcher, persistent)
	if names := f.children(watcher, f.root); !slices.Equal(names, []string{"persistent", "theirs"}) {
		t.Fatalf("children after the owner closed: %s", quoteAll(names))
	}
}

func testEphemeralDeletedOnExpire(t *testing.T, h Harness) {
	f := newFixture(t, h)
	owner, survivor, watcher := f.open(), f.open(), f.open()
	mine, theirs, data := f.path("mine"), f.path("theirs"), f.path("data")
	f.create(owner, mine, nil, meta.Ephemeral)
	f.create(survivor, theirs, nil, meta.Ephemeral)
	f.create(owner, data, nil, 0)

	events, cancel := owner.SessionEvents()
	defer cancel()
	// The owner's watch is on a node the expiry leaves alone, so the only
	// thing that can end it is the loss of the session.
	ownerW := f.getW(owner, data)
	deletedW := f.existsW(watcher, mine)

	h.Expire(t, owner)
	waitSession(t, events, meta.SessionExpired)
	expectLost(t, ownerW, data, meta.ErrSessionExpired)
	expectEvent(t, deletedW, meta.EventDeleted, mine)
	f.mustNotExist(watcher, mine)
	f.mustExist(watcher, theirs)
	f.mustExist(watcher, data)

	// The store carries on with a new session that owns what it creates.
	f.mustNotExist(owner, mine)
	f.create(owner, mine, []byte("again"), meta.Ephemeral)
	if v, st := f.get(watcher, mine); string(v) != "again" || !st.Ephemeral {
		t.Fatalf("re-created ephemeral reads %q, %+v", v, st)
	}
	deletedW = f.existsW(watcher, mine)
	ownerW = f.getW(owner, data)
	if err := owner.Close(); err != nil {
		t.Fatalf("Close after expiry: %v", err)
	}
	expectEvent(t, deletedW, meta.EventDeleted, mine)
	expectLost(t, ownerW, data, meta.ErrClosed)
	f.mustExist(watcher, theirs)
}

func testCloseOperationsFail(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, nil, 0)
	s := f.open()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range pathCalls {
		checkErr(t, c.name+" after Close", c.do(f.ctx, s, p), meta.ErrClosed, p)
	}
	if err := s.Close(); err != nil && !errors.Is(err, meta.ErrClosed) {
		t.Errorf("second Close: %v, want nil or %v", err, meta.ErrClosed)
	}
	// The node is untouched by the calls on the closed store.
	if st := f.mustExist(f.s, p); st.Version != 0 {
		t.Errorf("calls after Close changed the node to version %d", st.Version)
	}
}

func testCloseWatchesLost(t *testing.T, h Harness) {
	f := newFixture(t, h)
	s := f.open()
	data, missing := f.path("data"), f.path("missing")
	f.create(f.s, data, nil, 0)
	getW, existsW, childrenW := f.getW(s, data), f.existsW(s, missing), f.childrenW(s, data)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	expectLost(t, getW, data, meta.ErrClosed)
	expectLost(t, existsW, missing, meta.ErrClosed)
	expectLost(t, childrenW, data, meta.ErrClosed)
}

func testCloseSessionEvents(t *testing.T, h Harness) {
	f := newFixture(t, h)
	s := f.open()
	first, cancelFirst := s.SessionEvents()
	defer cancelFirst()
	second, cancelSecond := s.SessionEvents()
	defer cancelSecond()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, ch := range []<-chan meta.SessionEvent{first, second} {
		waitSession(t, ch, meta.SessionClosed)
		if after := drainSession(t, ch); len(after) != 0 {
			t.Fatalf("session events after SessionClosed: %v", after)
		}
	}
	// A subscription after Close ends at once, with nothing but SessionClosed.
	late, cancelLate := s.SessionEvents()
	defer cancelLate()
	if states := drainSession(t, late); slices.ContainsFunc(states, func(st meta.SessionState) bool { return st != meta.SessionClosed }) {
		t.Fatalf("subscription after Close delivered %v", states)
	}
}

func testCloseOtherSessions(t *testing.T, h Harness) {
	f := newFixture(t, h)
	closing := f.open()
	p := f.path("node")
	f.create(f.s, p, nil, 0)
	staying := f.getW(f.s, p)
	f.getW(closing, p)
	if err := closing.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The open session's watch is not lost with the other's: it fires for
	// the next change, and the session goes on working.
	f.set(f.s, p, []byte("x"), 0)
	expectEvent(t, staying, meta.EventDataChanged, p)
	f.create(f.s, f.path("after"), nil, meta.Ephemeral)
}

func testSessionCancel(t *testing.T, h Harness) {
	f := newFixture(t, h)
	s := f.open()
	events, cancel := s.SessionEvents()
	cancel()
	cancel() // harmless
	drainSession(t, events)
	// Only the subscription ended, not the session.
	f.create(s, f.path("node"), nil, meta.Ephemeral)
	kept, cancelKept := s.SessionEvents()
	defer cancelKept()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitSession(t, kept, meta.SessionClosed)
}

func testContextCanceled(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, nil, 0)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	for _, c := range pathCalls {
		err := c.do(ctx, f.s, p)
		checkErr(t, fmt.Sprintf("%s with a cancelled context", c.name), err, context.Canceled, p)
	}
	// The store still works with a live context.
	f.set(f.s, p, []byte("x"), meta.AnyVersion)
}

func testContextDeadline(t *testing.T, h Harness) {
	f := newFixture(t, h)
	p := f.path("node")
	f.create(f.s, p, nil, 0)
	ctx, cancel := context.WithDeadline(f.ctx, time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range pathCalls {
		err := c.do(ctx, f.s, p)
		checkErr(t, fmt.Sprintf("%s with an expired deadline", c.name), err, context.DeadlineExceeded, p)
	}
}
