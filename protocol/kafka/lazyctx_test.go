package kafka

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// TestLazyDeadline: the context is made when asked for, with the deadline
// counted from its creation; it ends at that deadline or at release; one
// never asked for is ended after release; values come from the parent.
func TestLazyDeadline(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")

	before := time.Now()
	l := newLazyDeadline(parent, time.Hour)
	if l.ctx != nil {
		t.Fatal("made before it was asked for")
	}
	if l.Value(ctxKey{}) != "v" {
		t.Error("the parent's value is lost")
	}
	d, ok := l.Deadline()
	if !ok || d.Before(before.Add(time.Hour)) || d.After(time.Now().Add(time.Hour)) {
		t.Errorf("deadline %v (%v), want an hour from its creation", d, ok)
	}
	select {
	case <-l.Done():
		t.Fatal("done before its deadline or release")
	default:
	}
	l.release()
	waitDone(t, l, "after release")
	if !errors.Is(l.Err(), context.Canceled) {
		t.Errorf("err %v after release, want context.Canceled", l.Err())
	}

	never := newLazyDeadline(parent, time.Hour)
	never.release()
	if never.cancel != nil {
		t.Error("release made a context nobody asked for")
	}
	if !errors.Is(never.Err(), context.Canceled) {
		t.Errorf("err %v of a released context never asked for, want context.Canceled", never.Err())
	}

	short := newLazyDeadline(parent, 20*time.Millisecond)
	waitDone(t, short, "at its deadline")
	if !errors.Is(short.Err(), context.DeadlineExceeded) {
		t.Errorf("err %v at the deadline, want context.DeadlineExceeded", short.Err())
	}
	short.release()

	gone, cancel := context.WithCancel(parent)
	child := newLazyDeadline(gone, time.Hour)
	cancel()
	waitDone(t, child, "when its parent ended")
	child.release()
}

func waitDone(t *testing.T, ctx context.Context, when string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("not done %s", when)
	}
}
