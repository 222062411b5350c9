package zk_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// The tests need a real ZooKeeper: MAGNETAR_TEST_ZK names it
// ("127.0.0.1:21810"; scripts/zookeeper.sh starts one). Everything a run
// creates is under runRoot, removed when the run ends.
const envZK = "MAGNETAR_TEST_ZK"

var runRoot = fmt.Sprintf("/magnetar-test-%016x", rand.Uint64())

// testSessionTimeout is short so that expiry tests are quick; the test
// server's tickTime of 500 ms makes its minimum session timeout 1 s.
const testSessionTimeout = 1500 * time.Millisecond

// serverTick is the test server's tickTime: ZooKeeper expires sessions on
// tick boundaries, up to one tick after their timeout.
const serverTick = 500 * time.Millisecond

func TestMain(m *testing.M) {
	code := m.Run()
	if addr := os.Getenv(envZK); addr != "" && zkCheck(addr) == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if s, err := zk.Open(ctx, addr, zk.Options{Logger: testLogger()}); err == nil {
			if err := removeAll(ctx, s, runRoot); err != nil {
				fmt.Fprintf(os.Stderr, "removing %s: %v\n", runRoot, err)
			}
			s.Close()
		}
		cancel()
	}
	os.Exit(code)
}

var (
	checkOnce sync.Once
	checkErr  error
)

// zkAddr returns the test ZooKeeper's address, failing t if it is not set
// or does not answer.
func zkAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(envZK)
	if addr == "" {
		t.Fatalf("%s is not set: these tests need a ZooKeeper. Run `scripts/zookeeper.sh start` and "+
			"`export %s=127.0.0.1:21810`, or run `make test`", envZK, envZK)
	}
	checkOnce.Do(func() { checkErr = zkCheck(addr) })
	if checkErr != nil {
		t.Fatalf("%s=%s: %v. Run `scripts/zookeeper.sh start`, or `make test`", envZK, addr, checkErr)
	}
	return addr
}

// zkCheck asks the first server of addr "ruok".
func zkCheck(addr string) error {
	host, _, _ := strings.Cut(addr, ",")
	host, _, _ = strings.Cut(host, "/")
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return fmt.Errorf("ZooKeeper unreachable: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "ruok"); err != nil {
		return fmt.Errorf("ZooKeeper unreachable: %w", err)
	}
	answer, _ := io.ReadAll(bufio.NewReader(c))
	if string(answer) != "imok" {
		return fmt.Errorf("ZooKeeper at %s answered ruok with %q, want imok", host, answer)
	}
	return nil
}

// testLogger discards logs unless MAGNETAR_TEST_LOG is "debug", "info" or
// "warn". (Logging through t.Log would race with the end of the test.)
func testLogger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv("MAGNETAR_TEST_LOG"))); err != nil || os.Getenv("MAGNETAR_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// openStore opens a store on chroot (under runRoot) through a fault
// dialer, closed at cleanup.
func openStore(t testing.TB, chroot string, opts zk.Options) (*zk.Store, *faultDialer) {
	t.Helper()
	addr := zkAddr(t)
	fd := newFaultDialer()
	if opts.Dialer == nil {
		opts.Dialer = fd.dial
	}
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = testSessionTimeout
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zk.Open(ctx, addr+chroot, opts)
	if err != nil {
		t.Fatalf("Open(%q): %v", addr+chroot, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, fd
}

// testChroot returns a fresh chroot under runRoot for one test.
func testChroot(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s/%s-%08x", runRoot, name, rand.Uint32())
}

// ctxFor returns a context for a test's calls.
func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// faultDialer stands between a store and ZooKeeper, like a network that can
// fail: it can cut every connection and refuse new ones (down), lose the
// answer to one request that the server does receive (dropNext), and counts
// the requests it passes.
type faultDialer struct {
	mu       sync.Mutex
	down     bool
	conns    map[*faultConn]struct{}
	dropOp   int32  // opcode of the request whose answer to lose; 0: none
	onDrop   func() // runs after the dropped request is sent, before the connection breaks
	requests map[int32]int
}

// go-zookeeper's opcodes (ZooKeeper's wire protocol).
const (
	opCreate  int32 = 1
	opDelete  int32 = 2
	opExists  int32 = 3
	opGetData int32 = 4
	opSetData int32 = 5
	opPing    int32 = 11
	opChild2  int32 = 12
)

func newFaultDialer() *faultDialer {
	return &faultDialer{conns: make(map[*faultConn]struct{}), requests: make(map[int32]int)}
}

func (d *faultDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d.mu.Lock()
	down := d.down
	d.mu.Unlock()
	if down {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, d: d}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down {
		c.Close()
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	d.conns[fc] = struct{}{}
	return fc, nil
}

// cut breaks every connection and refuses new ones until restore.
func (d *faultDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.down = true
	for c := range d.conns {
		c.kill()
	}
	clear(d.conns)
}

func (d *faultDialer) restore() {
	d.mu.Lock()
	d.down = false
	d.mu.Unlock()
}

// dropNext makes the next request with opcode op reach the server and its
// connection break before the answer arrives. onDrop, if not nil, runs in
// between.
func (d *faultDialer) dropNext(op int32, onDrop func()) {
	d.mu.Lock()
	d.dropOp, d.onDrop = op, onDrop
	d.mu.Unlock()
}

// sent returns how many requests with opcode op went out.
func (d *faultDialer) sent(op int32) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests[op]
}

type faultConn struct {
	net.Conn
	d      *faultDialer
	mu     sync.Mutex
	dead   bool // answers are no longer delivered
	writes int
}

func (c *faultConn) kill() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.Conn.Close()
}

func (c *faultConn) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// Write sees whole packets: go-zookeeper writes each request with one call,
// the first being the session handshake.
func (c *faultConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	first := c.writes == 1
	c.mu.Unlock()
	if first || len(b) < 12 {
		return c.Conn.Write(b)
	}
	op := int32(binary.BigEndian.Uint32(b[8:12]))
	d := c.d
	d.mu.Lock()
	if op != opPing {
		d.requests[op]++
	}
	drop := d.dropOp != 0 && op == d.dropOp
	var onDrop func()
	if drop {
		onDrop = d.onDrop
		d.dropOp, d.onDrop = 0, nil
	}
	d.mu.Unlock()
	if !drop {
		return c.Conn.Write(b)
	}
	// Dead before the request leaves, so that its answer cannot be read.
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	n, err := c.Conn.Write(b)
	if onDrop != nil {
		onDrop()
	}
	c.Conn.Close()
	return n, err
}

func (c *faultConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.isDead() {
		return 0, net.ErrClosed
	}
	return n, err
}

// sessionWatcher records a store's session events.
type sessionWatcher struct {
	ch     <-chan meta.SessionEvent
	cancel func()
}

func watchSession(t testing.TB, s meta.Store) *sessionWatcher {
	ch, cancel := s.SessionEvents()
	t.Cleanup(cancel)
	return &sessionWatcher{ch: ch, cancel: cancel}
}

// next returns the next session state, failing t after timeout.
func (w *sessionWatcher) next(t testing.TB, timeout time.Duration) meta.SessionState {
	t.Helper()
	select {
	case ev, ok := <-w.ch:
		if !ok {
			t.Fatalf("session events closed")
		}
		return ev.State
	case <-time.After(timeout):
		t.Fatalf("no session event within %v", timeout)
	}
	panic("unreachable")
}

// expect checks that the next session states are want, in order.
func (w *sessionWatcher) expect(t testing.TB, want ...meta.SessionState) {
	t.Helper()
	for _, st := range want {
		if got := w.next(t, 30*time.Second); got != st {
			t.Fatalf("session event %v, want %v", got, st)
		}
	}
}

// expire ends s's session on the server: it cuts s off from ZooKeeper for
// longer than the session timeout and lets it reconnect, to be told its
// session has expired; it returns once s has a new session. timeout is the
// session timeout s asked for.
func expire(t testing.TB, s meta.Store, d *faultDialer, timeout time.Duration) {
	t.Helper()
	w := watchSession(t, s)
	defer w.cancel()
	outage := timeout + serverTick + serverTick/2
	for attempt := 1; ; attempt++ {
		d.cut()
		w.expect(t, meta.SessionDisconnected)
		// The one timed wait: nothing tells a client that the server has
		// expired its session until it reconnects. The server has heard
		// nothing since before the disconnection and expires the session
		// within its timeout plus one tick.
		time.Sleep(outage)
		d.restore()
		switch st := w.next(t, 30*time.Second); st {
		case meta.SessionExpired:
			w.expect(t, meta.SessionConnected)
			return
		case meta.SessionConnected:
			// The server granted a longer timeout than asked (its
			// minSessionTimeout): cut for longer.
			if attempt == 4 {
				t.Fatalf("session survived %d outages, the last of %v", attempt, outage)
			}
			outage *= 2
		default:
			t.Fatalf("session event %v after reconnecting, want %v", st, meta.SessionExpired)
		}
	}
}

// removeAll deletes p and everything under it.
func removeAll(ctx context.Context, s meta.Store, p string) error {
	names, err := s.Children(ctx, p)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAll(ctx, s, meta.Join(p, n)); err != nil {
			return err
		}
	}
	if err := s.Delete(ctx, p, meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	return nil
}
