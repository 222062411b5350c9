package zk_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// disconnectTimeout is the session timeout of tests that disconnect without
// meaning to expire: go-zookeeper waits a second before redialling a lone
// server, so it must be well above that.
const disconnectTimeout = 6 * time.Second

func TestOpenUnreachable(t *testing.T) {
	zkAddr(t) // the suite needs ZooKeeper; this test only needs a closed port
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	before := runtime.NumGoroutine()
	const deadline = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	s, err := zk.Open(ctx, addr, zk.Options{Logger: testLogger()})
	elapsed := time.Since(start)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) of a closed port succeeded", addr)
	}
	t.Logf("Open: %v (after %v)", err, elapsed)
	if !errors.Is(err, meta.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Open error %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("Open error %q does not name the server %s", err, addr)
	}
	// Open cleans up before it returns: go-zookeeper takes up to a second
	// to notice Close while it is between dials.
	if elapsed > deadline+1500*time.Millisecond {
		t.Errorf("Open took %v with a %v deadline", elapsed, deadline)
	}
	waitGoroutines(t, before)

	// A context that has already ended dials nothing.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := zk.Open(ctx, addr, zk.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a canceled context: %v, want context.Canceled", err)
	}
	for _, bad := range []string{"", "/chroot", "127.0.0.1:1/bad//chroot"} {
		if _, err := zk.Open(context.Background(), bad, zk.Options{}); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
}

// waitGoroutines waits until no more goroutines run than before.
func waitGoroutines(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines left running, had %d:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

func TestChroot(t *testing.T) {
	ctx := ctxFor(t)
	chroot := testChroot(t) + "/deeper/still" // parents are created too
	s, _ := openStore(t, chroot, zk.Options{})
	plain, _ := openStore(t, "", zk.Options{})

	if _, err := s.Create(ctx, "/a", []byte("in chroot"), 0); err != nil {
		t.Fatal(err)
	}
	v, _, err := plain.Get(ctx, chroot+"/a")
	if err != nil || string(v) != "in chroot" {
		t.Fatalf("non-chrooted Get(%s/a) = %q, %v", chroot, v, err)
	}
	seq, err := s.Create(ctx, "/a/s-", nil, meta.Sequential|meta.Ephemeral)
	if err != nil || !strings.HasPrefix(seq, "/a/s-") || len(seq) != len("/a/s-")+10 {
		t.Fatalf("sequential Create = %q, %v; want /a/s- and ten digits", seq, err)
	}
	if _, ok, err := plain.Exists(ctx, chroot+seq); !ok || err != nil {
		t.Fatalf("non-chrooted Exists(%s) = %v, %v", chroot+seq, ok, err)
	}
	names, err := s.Children(ctx, "/")
	if err != nil || !slices.Equal(names, []string{"a"}) {
		t.Fatalf("Children(/) = %q, %v; want [a]", names, err)
	}

	// Watch paths are the caller's paths.
	created, err := watchExists(ctx, s, "/a/b")
	if err != nil {
		t.Fatal(err)
	}
	_, kids, err := s.ChildrenW(ctx, "/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Create(ctx, chroot+"/a/b", nil, 0); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, created, meta.EventCreated, "/a/b")
	expectEvent(t, kids, meta.EventChildrenChanged, "/a")

	// The chroot is the store's root: it can be read and set, not deleted.
	if _, st, err := s.Get(ctx, "/"); err != nil || st.NumChildren != 1 {
		t.Fatalf("Get(/) = %+v, %v", st, err)
	}
	if err := s.Delete(ctx, "/", meta.AnyVersion); !errors.Is(err, meta.ErrInvalidPath) {
		t.Fatalf("Delete(/) = %v, want ErrInvalidPath", err)
	}
	if _, err := s.Create(ctx, "/", nil, 0); !errors.Is(err, meta.ErrExists) {
		t.Fatalf("Create(/) = %v, want ErrExists", err)
	}
}

func watchExists(ctx context.Context, s meta.Store, p string) (<-chan meta.Event, error) {
	_, _, ch, err := s.ExistsW(ctx, p)
	return ch, err
}

// expectEvent waits for a watch's one event and its channel's close.
func expectEvent(t testing.TB, ch <-chan meta.Event, typ meta.EventType, p string) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok || ev.Type != typ || ev.Path != p || ev.Err != nil {
			t.Fatalf("watch event %+v (ok %v), want %v on %s", ev, ok, typ, p)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %v event on %s", typ, p)
	}
	if _, ok := <-ch; ok {
		t.Fatalf("watch on %s fired twice", p)
	}
}

// expectLost checks that a watch has already been lost with cause.
func expectLost(t testing.TB, ch <-chan meta.Event, p string, cause error) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok || ev.Type != meta.EventWatchLost || ev.Path != p || !errors.Is(ev.Err, cause) {
			t.Fatalf("watch event %+v (ok %v), want watch-lost on %s with %v", ev, ok, p, cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("watch on %s not lost", p)
	}
	if _, ok := <-ch; ok {
		t.Fatalf("watch on %s fired twice", p)
	}
}

// TestDisconnect cuts the connection without expiring the session: watches,
// ephemeral nodes and the session survive, and calls made during the outage
// complete after it.
func TestDisconnect(t *testing.T) {
	ctx := ctxFor(t)
	chroot := testChroot(t)
	s, fd := openStore(t, chroot, zk.Options{SessionTimeout: disconnectTimeout})
	other, _ := openStore(t, chroot, zk.Options{})
	w := watchSession(t, s)

	for _, p := range []string{"/data", "/dir", "/counter"} {
		if _, err := s.Create(ctx, p, []byte("0"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, "/eph", nil, meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	_, _, dataW, err := s.GetW(ctx, "/data")
	if err != nil {
		t.Fatal(err)
	}
	createdW, err := watchExists(ctx, s, "/later")
	if err != nil {
		t.Fatal(err)
	}
	_, dirW, err := s.ChildrenW(ctx, "/dir")
	if err != nil {
		t.Fatal(err)
	}

	fd.cut()
	w.expect(t, meta.SessionDisconnected)
	// Changes while s is away: the data watch fires when s is back.
	if _, err := other.Set(ctx, "/data", []byte("changed"), 0); err != nil {
		t.Fatal(err)
	}
	// Calls made during the outage wait for the session.
	type setResult struct {
		st  meta.Stat
		err error
	}
	setDone := make(chan setResult, 1)
	go func() {
		st, err := s.Set(ctx, "/counter", []byte("1"), 0)
		setDone <- setResult{st, err}
	}()
	createDone := make(chan error, 1)
	go func() {
		_, err := s.Create(ctx, "/dir/child", []byte("c"), 0)
		createDone <- err
	}()
	fd.restore()
	w.expect(t, meta.SessionConnected)

	if r := <-setDone; r.err != nil || r.st.Version != 1 {
		t.Fatalf("Set during the outage: %+v, %v; want version 1", r.st, r.err)
	}
	if err := <-createDone; err != nil {
		t.Fatalf("Create during the outage: %v", err)
	}
	if v, st, err := other.Get(ctx, "/counter"); err != nil || string(v) != "1" || st.Version != 1 {
		t.Fatalf("counter after the outage: %q, %+v, %v; want \"1\" at version 1", v, st, err)
	}
	expectEvent(t, dataW, meta.EventDataChanged, "/data")
	expectEvent(t, dirW, meta.EventChildrenChanged, "/dir")
	if _, err := other.Create(ctx, "/later", nil, 0); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, createdW, meta.EventCreated, "/later")
	if st, ok, err := other.Exists(ctx, "/eph"); err != nil || !ok || !st.Ephemeral {
		t.Fatalf("ephemeral node after the outage: %+v, %v, %v", st, ok, err)
	}
	// The ephemeral node is still s's: deleting it needs no one else.
	if err := s.Delete(ctx, "/eph", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ch:
		t.Fatalf("unexpected session event %v", ev.State)
	default:
	}
}

// TestLostAnswer loses the answer to a write that the server applied, and
// checks the outcome the retry reports (see the package doc).
func TestLostAnswer(t *testing.T) {
	type env struct {
		ctx   context.Context
		s     *zk.Store
		other *zk.Store
		fd    *faultDialer
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, e env)
		run   func(t *testing.T, e env)
	}{
		{"CreatePersistent", nil, func(t *testing.T, e env) {
			e.fd.dropNext(opCreate, nil)
			if p, err := e.s.Create(e.ctx, "/n", []byte("v"), 0); err != nil || p != "/n" {
				t.Fatalf("Create = %q, %v", p, err)
			}
			if v, st, err := e.other.Get(e.ctx, "/n"); err != nil || string(v) != "v" || st.Version != 0 {
				t.Fatalf("Get = %q, %+v, %v", v, st, err)
			}
		}},
		{"CreateEphemeral", nil, func(t *testing.T, e env) {
			e.fd.dropNext(opCreate, nil)
			if _, err := e.s.Create(e.ctx, "/n", []byte("v"), meta.Ephemeral); err != nil {
				t.Fatalf("Create: %v", err)
			}
			if st, ok, err := e.other.Exists(e.ctx, "/n"); err != nil || !ok || !st.Ephemeral {
				t.Fatalf("Exists = %+v, %v, %v", st, ok, err)
			}
		}},
		{"CreateThenReplaced", nil, func(t *testing.T, e env) {
			// Between the lost answer and the retry, another client
			// replaces the node: it is not ours any more.
			created, err := watchExists(e.ctx, e.other, "/n")
			if err != nil {
				t.Fatal(err)
			}
			e.fd.dropNext(opCreate, func() {
				if !waitFor(t, created, "our Create to be applied") {
					return
				}
				if err := e.other.Delete(e.ctx, "/n", 0); err != nil {
					t.Error(err)
				}
				if _, err := e.other.Create(e.ctx, "/n", []byte("theirs"), 0); err != nil {
					t.Error(err)
				}
			})
			_, err = e.s.Create(e.ctx, "/n", []byte("ours"), 0)
			if !errors.Is(err, meta.ErrExists) {
				t.Fatalf("Create = %v, want ErrExists", err)
			}
		}},
		{"CreateSequential", nil, func(t *testing.T, e env) {
			e.fd.dropNext(opCreate, nil)
			p, err := e.s.Create(e.ctx, "/seq-", []byte("v"), meta.Sequential)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			names, err := e.other.Children(e.ctx, "/")
			if err != nil || !slices.Contains(names, p[1:]) || len(names) > 2 {
				t.Fatalf("Children = %q, %v; want %s and at most one orphan", names, err, p)
			}
			t.Logf("nodes after a lost sequential create: %q (returned %s)", names, p)
		}},
		{"SetVersion", func(t *testing.T, e env) {
			if _, err := e.s.Create(e.ctx, "/n", []byte("v0"), 0); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, e env) {
			e.fd.dropNext(opSetData, nil)
			st, err := e.s.Set(e.ctx, "/n", []byte("v1"), 0)
			if err != nil || st.Version != 1 {
				t.Fatalf("Set = %+v, %v; want version 1", st, err)
			}
			if v, st, err := e.other.Get(e.ctx, "/n"); err != nil || string(v) != "v1" || st.Version != 1 {
				t.Fatalf("Get = %q, %+v, %v", v, st, err)
			}
		}},
		{"SetThenOverwritten", func(t *testing.T, e env) {
			if _, err := e.s.Create(e.ctx, "/n", []byte("v0"), 0); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, e env) {
			_, _, changed, err := e.other.GetW(e.ctx, "/n")
			if err != nil {
				t.Fatal(err)
			}
			e.fd.dropNext(opSetData, func() {
				if !waitFor(t, changed, "our Set to be applied") {
					return
				}
				if _, err := e.other.Set(e.ctx, "/n", []byte("theirs"), 1); err != nil {
					t.Error(err)
				}
			})
			_, err = e.s.Set(e.ctx, "/n", []byte("ours"), 0)
			if !errors.Is(err, meta.ErrBadVersion) {
				t.Fatalf("Set = %v, want ErrBadVersion", err)
			}
		}},
		{"SetAnyVersion", func(t *testing.T, e env) {
			if _, err := e.s.Create(e.ctx, "/n", []byte("v0"), 0); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, e env) {
			e.fd.dropNext(opSetData, nil)
			st, err := e.s.Set(e.ctx, "/n", []byte("v"), meta.AnyVersion)
			if err != nil || st.Version < 1 || st.Version > 2 {
				t.Fatalf("Set = %+v, %v; want version 1 or 2 (repeated)", st, err)
			}
		}},
		{"Delete", func(t *testing.T, e env) {
			if _, err := e.s.Create(e.ctx, "/n", nil, 0); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, e env) {
			e.fd.dropNext(opDelete, nil)
			if err := e.s.Delete(e.ctx, "/n", 0); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, ok, err := e.other.Exists(e.ctx, "/n"); err != nil || ok {
				t.Fatalf("Exists after Delete = %v, %v", ok, err)
			}
		}},
		{"Read", func(t *testing.T, e env) {
			if _, err := e.s.Create(e.ctx, "/n", []byte("v"), 0); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, e env) {
			e.fd.dropNext(opGetData, nil)
			v, _, ch, err := e.s.GetW(e.ctx, "/n")
			if err != nil || string(v) != "v" {
				t.Fatalf("GetW = %q, %v", v, err)
			}
			if _, err := e.other.Set(e.ctx, "/n", nil, 0); err != nil {
				t.Fatal(err)
			}
			expectEvent(t, ch, meta.EventDataChanged, "/n")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chroot := testChroot(t)
			s, fd := openStore(t, chroot, zk.Options{SessionTimeout: disconnectTimeout})
			other, _ := openStore(t, chroot, zk.Options{})
			e := env{ctxFor(t), s, other, fd}
			if tt.setup != nil {
				tt.setup(t, e)
			}
			w := watchSession(t, s)
			tt.run(t, e)
			// The answer was lost to a broken connection, not to expiry.
			w.expect(t, meta.SessionDisconnected, meta.SessionConnected)
		})
	}
}

// waitFor waits for a watch event from a goroutine other than the test's,
// reporting an error if none comes.
func waitFor(t *testing.T, ch <-chan meta.Event, what string) bool {
	select {
	case <-ch:
		return true
	case <-time.After(30 * time.Second):
		t.Errorf("timed out waiting for %s", what)
		return false
	}
}

func TestExpire(t *testing.T) {
	ctx := ctxFor(t)
	chroot := testChroot(t)
	s, fd := openStore(t, chroot, zk.Options{})
	other, _ := openStore(t, chroot, zk.Options{})
	if _, err := s.Create(ctx, "/eph", nil, meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/data", nil, 0); err != nil {
		t.Fatal(err)
	}
	_, _, dataW, err := s.GetW(ctx, "/data")
	if err != nil {
		t.Fatal(err)
	}
	goneW, err := watchExists(ctx, other, "/eph")
	if err != nil {
		t.Fatal(err)
	}
	w := watchSession(t, s)

	expire(t, s, fd, testSessionTimeout)

	w.expect(t, meta.SessionDisconnected, meta.SessionExpired, meta.SessionConnected)
	expectLost(t, dataW, "/data", meta.ErrSessionExpired)
	expectEvent(t, goneW, meta.EventDeleted, "/eph")
	// The store goes on with a new session.
	if _, err := s.Create(ctx, "/eph", nil, meta.Ephemeral); err != nil {
		t.Fatalf("re-creating the ephemeral node: %v", err)
	}
	if _, ok, err := other.Exists(ctx, "/eph"); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
}

func TestClose(t *testing.T) {
	ctx := ctxFor(t)
	chroot := testChroot(t)
	s, _ := openStore(t, chroot, zk.Options{})
	other, _ := openStore(t, chroot, zk.Options{})
	if _, err := s.Create(ctx, "/data", nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/eph", nil, meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	_, _, dataW, err := s.GetW(ctx, "/data")
	if err != nil {
		t.Fatal(err)
	}
	missingW, err := watchExists(ctx, s, "/missing")
	if err != nil {
		t.Fatal(err)
	}
	_, kidsW, err := s.ChildrenW(ctx, "/data")
	if err != nil {
		t.Fatal(err)
	}
	events, _ := s.SessionEvents()

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close has fired every watch and ended the session before returning.
	for p, ch := range map[string]<-chan meta.Event{"/data": dataW, "/missing": missingW} {
		select {
		case ev := <-ch:
			if ev.Type != meta.EventWatchLost || !errors.Is(ev.Err, meta.ErrClosed) || ev.Path != p {
				t.Errorf("watch on %s after Close: %+v", p, ev)
			}
		default:
			t.Errorf("watch on %s not fired when Close returned", p)
		}
	}
	expectLost(t, kidsW, "/data", meta.ErrClosed)
	if _, ok, err := other.Exists(ctx, "/eph"); err != nil || ok {
		t.Errorf("ephemeral node after Close: exists %v, %v", ok, err)
	}
	var states []meta.SessionState
	for ev := range events {
		states = append(states, ev.State)
	}
	if !slices.Equal(states, []meta.SessionState{meta.SessionClosed}) {
		t.Errorf("session events at Close: %v, want [closed]", states)
	}
	if ch, _ := s.SessionEvents(); ch != nil {
		if _, ok := <-ch; ok {
			t.Errorf("SessionEvents after Close delivered an event")
		}
	}

	calls := map[string]func() error{
		"Get":       func() error { _, _, err := s.Get(ctx, "/data"); return err },
		"GetW":      func() error { _, _, _, err := s.GetW(ctx, "/data"); return err },
		"Exists":    func() error { _, _, err := s.Exists(ctx, "/data"); return err },
		"ExistsW":   func() error { _, _, _, err := s.ExistsW(ctx, "/data"); return err },
		"Children":  func() error { _, err := s.Children(ctx, "/data"); return err },
		"ChildrenW": func() error { _, _, err := s.ChildrenW(ctx, "/data"); return err },
		"Create":    func() error { _, err := s.Create(ctx, "/x", nil, 0); return err },
		"Set":       func() error { _, err := s.Set(ctx, "/data", nil, meta.AnyVersion); return err },
		"Delete":    func() error { return s.Delete(ctx, "/data", meta.AnyVersion) },
	}
	for name, call := range calls {
		var pe *meta.PathError
		if err := call(); !errors.Is(err, meta.ErrClosed) || !errors.As(err, &pe) {
			t.Errorf("%s after Close: %v, want a *meta.PathError with ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestCloseWhileDisconnected closes a store whose calls are waiting for a
// session: they fail with ErrClosed at once and Close does not hang.
func TestCloseWhileDisconnected(t *testing.T) {
	s, fd := openStore(t, testChroot(t), zk.Options{})
	w := watchSession(t, s)
	fd.cut()
	w.expect(t, meta.SessionDisconnected)
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Get(context.Background(), "/") // no deadline: waits for the session
		done <- err
	}()
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, meta.ErrClosed) {
		t.Errorf("Get waiting for a session at Close: %v, want ErrClosed", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close while disconnected took %v", d)
	}
}

func TestContext(t *testing.T) {
	ctx := ctxFor(t)
	s, fd := openStore(t, testChroot(t), zk.Options{RequestTimeout: 500 * time.Millisecond})
	if _, err := s.Create(ctx, "/n", nil, 0); err != nil {
		t.Fatal(err)
	}

	// An ended context sends nothing.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	before := fd.sent(opCreate) + fd.sent(opGetData) + fd.sent(opSetData) + fd.sent(opDelete)
	_, err := s.Create(canceled, "/m", nil, 0)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a canceled context: %v", err)
	}
	if _, _, err := s.Get(canceled, "/n"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a canceled context: %v", err)
	}
	if _, err := s.Set(canceled, "/n", nil, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Set with a canceled context: %v", err)
	}
	if err := s.Delete(canceled, "/n", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a canceled context: %v", err)
	}
	if after := fd.sent(opCreate) + fd.sent(opGetData) + fd.sent(opSetData) + fd.sent(opDelete); after != before {
		t.Errorf("calls with a canceled context sent %d requests", after-before)
	}

	// While ZooKeeper is unreachable, calls end with their deadline (or the
	// store's RequestTimeout) and say the store is unavailable.
	w := watchSession(t, s)
	fd.cut()
	w.expect(t, meta.SessionDisconnected)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Set(short, "/n", []byte("x"), 0)
	checkUnavailable(t, "Set with a deadline", err, time.Since(start), 300*time.Millisecond)
	start = time.Now()
	_, _, err = s.Get(context.Background(), "/n")
	checkUnavailable(t, "Get without a deadline", err, time.Since(start), 500*time.Millisecond)

	// Canceling a call that waits returns promptly too. (Whether the call
	// sees the cancellation before or while waiting is up to the scheduler;
	// either way it reports context.Canceled.)
	waiting, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := s.Children(waiting, "/"); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Children while disconnected: %v, want context.Canceled", err)
	}
	fd.restore()
	w.expect(t, meta.SessionConnected)
	// Nothing the timed-out Set queued was applied after the fact.
	if _, st, err := s.Get(ctx, "/n"); err != nil || st.Version != 0 {
		t.Errorf("Get after the outage: %+v, %v; want version 0", st, err)
	}
}

func checkUnavailable(t *testing.T, call string, err error, took, limit time.Duration) {
	t.Helper()
	var pe *meta.PathError
	if !errors.Is(err, meta.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &pe) {
		t.Errorf("%s while disconnected: %v, want a PathError with ErrUnavailable and DeadlineExceeded", call, err)
	} else if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("%s: %q does not name the server", call, err)
	}
	if took > limit+time.Second {
		t.Errorf("%s took %v, its limit was %v", call, took, limit)
	}
}

// TestCheckedBeforeSending: bad paths and oversized values never reach
// ZooKeeper (which drops the connection on an oversized packet).
func TestCheckedBeforeSending(t *testing.T) {
	ctx := ctxFor(t)
	s, fd := openStore(t, testChroot(t), zk.Options{})
	w := watchSession(t, s)
	if _, err := s.Create(ctx, "/n", nil, 0); err != nil {
		t.Fatal(err)
	}
	before := fd.sent(opCreate) + fd.sent(opSetData)
	huge := bytes.Repeat([]byte{1}, 2*meta.MaxValueSize)
	if _, err := s.Create(ctx, "/big", huge, 0); !errors.Is(err, meta.ErrTooLarge) {
		t.Errorf("Create of %d bytes: %v", len(huge), err)
	}
	if _, err := s.Set(ctx, "/n", huge, meta.AnyVersion); !errors.Is(err, meta.ErrTooLarge) {
		t.Errorf("Set of %d bytes: %v", len(huge), err)
	}
	if _, err := s.Create(ctx, "/a//b", nil, 0); !errors.Is(err, meta.ErrInvalidPath) {
		t.Errorf("Create(/a//b): %v", err)
	}
	if _, err := s.Create(ctx, "/n", nil, meta.CreateFlags(0x80)); err == nil {
		t.Errorf("Create with unknown flags succeeded")
	}
	if after := fd.sent(opCreate) + fd.sent(opSetData); after != before {
		t.Errorf("%d refused requests were sent", after-before)
	}
	select {
	case ev := <-w.ch:
		t.Errorf("session event %v", ev.State)
	default:
	}
}

// TestNoWatchLeak: GetW and ChildrenW of a missing node leave no watch
// and no goroutine; watches that fire leave none either.
func TestNoWatchLeak(t *testing.T) {
	ctx := ctxFor(t)
	s, _ := openStore(t, testChroot(t), zk.Options{})
	if _, err := s.Create(ctx, "/n", nil, 0); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for range 100 {
		if _, _, ch, err := s.GetW(ctx, "/missing"); !errors.Is(err, meta.ErrNotFound) || ch != nil {
			t.Fatalf("GetW of a missing node: %v, %v", ch, err)
		}
		if _, ch, err := s.ChildrenW(ctx, "/missing"); !errors.Is(err, meta.ErrNotFound) || ch != nil {
			t.Fatalf("ChildrenW of a missing node: %v, %v", ch, err)
		}
	}
	var chans []<-chan meta.Event
	for range 100 {
		_, _, ch, err := s.GetW(ctx, "/n")
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	if _, err := s.Set(ctx, "/n", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		expectEvent(t, ch, meta.EventDataChanged, "/n")
	}
	waitGoroutines(t, before)
	// The missing node's GetW set no watch: creating it fires nothing, as
	// the ExistsW set after it shows by firing alone.
	created, err := watchExists(ctx, s, "/missing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/missing", nil, 0); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, created, meta.EventCreated, "/missing")
	waitGoroutines(t, before)
}

// TestServerList: a connect string may name several servers, some down.
func TestServerList(t *testing.T) {
	addr := zkAddr(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	ctx := ctxFor(t)
	s, err := zk.Open(ctx, dead+","+addr+testChroot(t), zk.Options{Logger: testLogger()})
	if err != nil {
		t.Fatalf("Open with one server down: %v", err)
	}
	defer s.Close()
	if _, err := s.Create(ctx, "/n", nil, 0); err != nil {
		t.Fatal(err)
	}
}
