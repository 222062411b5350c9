package meta

import (
	"errors"
	"strings"
	"testing"
)

func TestValidatePath(t *testing.T) {
	valid := []string{"/", "/a", "/a/b-c_d.e", "/a b", "/x:y", "/主题", "/" + strings.Repeat("a", MaxPathLength-1)}
	for _, p := range valid {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want nil", p, err)
		}
	}
	invalid := []string{"", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/a\x00", "/a\x7f", "/\u0085",
		"/\ud7ff\ue000", "/\ufff0", "/🚀", "/" + strings.Repeat("a", MaxPathLength), "/\xff"}
	for _, p := range invalid {
		err := ValidatePath(p)
		if !errors.Is(err, ErrInvalidPath) {
			t.Errorf("ValidatePath(%q) = %v, want ErrInvalidPath", p, err)
		}
	}
}

func TestPathHelpers(t *testing.T) {
	cases := []struct{ path, parent, base string }{
		{"/", "/", ""},
		{"/a", "/", "a"},
		{"/a/b/c", "/a/b", "c"},
	}
	for _, c := range cases {
		if got := Parent(c.path); got != c.parent {
			t.Errorf("Parent(%q) = %q, want %q", c.path, got, c.parent)
		}
		if got := Base(c.path); got != c.base {
			t.Errorf("Base(%q) = %q, want %q", c.path, got, c.base)
		}
	}
	if got := Join("/a/", "b", "c"); got != "/a/b/c" {
		t.Errorf("Join = %q", got)
	}
	if p := LedgerPath(1234567); p != "/ledgers/12/1234567" {
		t.Errorf("LedgerPath(1234567) = %s", p)
	}
	if p := LedgerPath(5); p != "/ledgers/0/5" {
		t.Errorf("LedgerPath(5) = %s", p)
	}
	if got := Join(LedgersRoot, "L1"); got != "/ledgers/L1" {
		t.Errorf("Join = %q", got)
	}
}

func TestCheckValue(t *testing.T) {
	if err := CheckValue(make([]byte, MaxValueSize)); err != nil {
		t.Fatal(err)
	}
	err := CheckValue(make([]byte, MaxValueSize+1))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1000001") {
		t.Fatalf("CheckValue over the limit: %v", err)
	}
}

func TestPathError(t *testing.T) {
	err := error(Errorf("create", "/a/b", ErrNotFound, "parent %s is missing", "/a"))
	if !errors.Is(err, ErrNotFound) || err.Error() != "create /a/b: meta: node does not exist: parent /a is missing" {
		t.Fatalf("Errorf: %v", err)
	}
	var pe *PathError
	if !errors.As(err, &pe) || pe.Path != "/a/b" || pe.Op != "create" {
		t.Fatalf("errors.As: %+v", pe)
	}
}

func TestSessionBroadcaster(t *testing.T) {
	var b SessionBroadcaster
	slow, cancelSlow := b.SessionEvents()
	fast, _ := b.SessionEvents()
	gone, cancelGone := b.SessionEvents()
	cancelGone()
	if _, ok := <-gone; ok {
		t.Fatal("cancelled subscription delivered an event")
	}
	// Publishing never blocks, even with nobody reading.
	states := []SessionState{SessionDisconnected, SessionConnected, SessionExpired, SessionConnected}
	for _, s := range states {
		b.Publish(SessionEvent{State: s})
	}
	b.Close()
	b.Publish(SessionEvent{State: SessionConnected}) // after Close: dropped
	want := append(states, SessionClosed)
	for _, ch := range []<-chan SessionEvent{fast, slow} {
		var got []SessionState
		for ev := range ch {
			got = append(got, ev.State)
		}
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("got %v, want %v", got, want)
			}
		}
	}
	cancelSlow() // cancelling after the end is harmless
	late, _ := b.SessionEvents()
	if _, ok := <-late; ok {
		t.Fatal("subscription after Close delivered an event")
	}
}
