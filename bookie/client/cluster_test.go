package client

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

// An in-process cluster for tests: a meta/local store and bookie servers
// on 127.0.0.1:0 over real ledger storage (bookie/storage), each
// registered as an ephemeral node under /bookies/available.

// testLogger discards logs unless BKCLIENT_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("BKCLIENT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// bookieStorage wraps *storage.Storage (a bookie.Storage) so that tests
// can damage what a bookie serves or stall its adds.
type bookieStorage struct {
	*storage.Storage

	corrupt atomic.Bool // flip a payload byte of every entry read

	mu      sync.Mutex
	stall   bool          // hold adds unanswered (until release)
	stalled []func(error) // done callbacks of held adds
}

// AddEntry holds the add while stall is set.
func (s *bookieStorage) AddEntry(e []byte, recovery bool, done func(error)) {
	s.mu.Lock()
	if s.stall {
		s.stalled = append(s.stalled, done)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.Storage.AddEntry(e, recovery, done)
}

func (s *bookieStorage) ReadEntry(ledger, entryID int64) ([]byte, error) {
	b, err := s.Storage.ReadEntry(ledger, entryID)
	if err == nil && s.corrupt.Load() && len(b) > entry.HeaderSize {
		b[len(b)-1] ^= 0x5a
	}
	return b, err
}

// release answers every held add with err and stops holding.
func (s *bookieStorage) release(err error) {
	s.mu.Lock()
	held := s.stalled
	s.stalled, s.stall = nil, false
	s.mu.Unlock()
	for _, done := range held {
		done(err)
	}
}

type testBookie struct {
	*bookietest.Bookie
	addr    string
	storage *bookieStorage
	// damaged flips a payload byte of every entry-log read on the
	// bookie's file system: its disk returns bytes other than written.
	damaged *atomic.Bool
	// full, while on, fails every write on the bookie's file system
	// with ENOSPC.
	full *errorfs.Toggle
	// mem is the bookie's in-memory file system (nil on disk), whose
	// disk usage a test may set.
	mem *vfs.MemFS
}

// damagingFS is a file system whose entry-log files, while on is set,
// return every read with its last byte flipped.
type damagingFS struct {
	vfs.FS
	on *atomic.Bool
}

func (fs damagingFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil || !strings.Contains(name, "entrylogs") {
		return f, err
	}
	return damagingFile{f, fs.on}, nil
}

type damagingFile struct {
	vfs.File
	on *atomic.Bool
}

func (f damagingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if n > 0 && f.on.Load() {
		p[n-1] ^= 0x5a
	}
	return n, err
}

type cluster struct {
	t       testing.TB
	meta    *local.Store
	bookies []*testBookie
	// onDisk puts storage in a temporary directory (without fsync) rather
	// than in memory; benchmarks use it to keep the heap small.
	onDisk bool
	// local: clients call the bookies in-process (Config.Local) instead
	// of connecting over TCP.
	local      bool
	localCalls atomic.Int64
}

// countingLocal counts the calls a local client makes.
type countingLocal struct {
	Local
	n *atomic.Int64
}

func (l countingLocal) Call(op wire.Op, flags uint16, body []byte, done func(wire.Status, [][]byte)) {
	l.n.Add(1)
	l.Local.Call(op, flags, body, done)
}

// forTransports runs test with clients that reach the bookies over TCP,
// then with clients that call them in-process (Config.Local, as the
// standalone's broker does).
func forTransports(t *testing.T, test func(t *testing.T, local bool)) {
	t.Run("tcp", func(t *testing.T) { test(t, false) })
	t.Run("local", func(t *testing.T) { test(t, true) })
}

// newClusterOver is newCluster whose clients call the bookies in-process
// when local is set.
func newClusterOver(t testing.TB, n int, local bool) *cluster {
	cl := newCluster(t, n)
	cl.local = local
	if local {
		t.Cleanup(func() {
			if cl.localCalls.Load() == 0 {
				t.Error("no request went to a bookie in-process")
			}
		})
	}
	return cl
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	store, err := local.Open(t.TempDir(), local.Options{Logger: testLogger(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{t: t, meta: store}
	t.Cleanup(func() {
		for _, b := range cl.bookies {
			cl.stop(b)
		}
		store.Close()
	})
	if err := meta.EnsurePath(context.Background(), store, meta.BookiesAvailableRoot); err != nil {
		t.Fatal(err)
	}
	for range n {
		cl.addBookie()
	}
	return cl
}

// addBookie starts a bookie and registers it.
func (cl *cluster) addBookie() *testBookie {
	t := cl.t
	t.Helper()
	mem := vfs.NewMem()
	o := bookietest.Options{FS: mem, Dir: fmt.Sprintf("/b%d", len(cl.bookies)+1), Logger: testLogger()}
	if cl.onDisk {
		mem = nil
		o.FS, o.Dir, o.NoSync = vfs.Default, t.TempDir(), true
	}
	damaged := new(atomic.Bool)
	filling, full := bookietest.FullDisk(o.FS)
	o.FS = damagingFS{filling, damaged}
	var bs *bookieStorage
	o.Wrap = func(st *storage.Storage) bookie.Storage {
		bs = &bookieStorage{Storage: st}
		return bs
	}
	tb, err := bookietest.Start(cl.meta, o)
	if err != nil {
		t.Fatal(err)
	}
	b := &testBookie{Bookie: tb, addr: tb.Addr, storage: bs, damaged: damaged, full: full, mem: mem}
	cl.bookies = append(cl.bookies, b)
	return b
}

// kill makes a bookie fail: its registration goes, its connections break
// and new ones are refused.
func (cl *cluster) kill(b *testBookie) {
	cl.t.Helper()
	if err := b.Deregister(cl.meta); err != nil {
		cl.t.Fatal(err)
	}
	cl.stop(b)
}

// stop answers held adds, then stops the bookie.
func (cl *cluster) stop(b *testBookie) {
	b.storage.release(storage.ErrClosed)
	b.Stop()
}

// bookie returns the test bookie at addr.
func (cl *cluster) bookie(addr string) *testBookie {
	for _, b := range cl.bookies {
		if b.addr == addr {
			return b
		}
	}
	cl.t.Fatalf("no bookie %s", addr)
	return nil
}

// client returns a client on its own metadata session, closed at cleanup.
// tweak, if given, adjusts its config.
func (cl *cluster) client(tweak ...func(*Config)) *Client {
	t := cl.t
	t.Helper()
	s, err := cl.meta.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Meta: s, Logger: testLogger(), DialTimeout: time.Second,
		AddTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}
	if cl.local {
		cfg.Local = func(addr string) Local {
			for _, b := range cl.bookies {
				if b.addr == addr {
					return countingLocal{b.Server(), &cl.localCalls}
				}
			}
			return nil
		}
	}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c
}

// testCtx is a context that ends with the test or after a minute.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// payload is the test payload of entry i of a stream.
func payload(stream string, i int) []byte {
	return []byte(fmt.Sprintf("%s-entry-%06d-%s", stream, i, bytes.Repeat([]byte{byte('a' + i%26)}, i%97)))
}

// appendAll appends n payloads asynchronously and returns a channel that
// receives the ids (or errors) in completion order, closed after n.
type result struct {
	id  int64
	err error
}

func appendAll(w *Writer, stream string, from, to int) <-chan result {
	out := make(chan result, to-from)
	var left atomic.Int64
	left.Store(int64(to - from))
	for i := from; i < to; i++ {
		w.Append(payload(stream, i), func(id int64, err error) {
			out <- result{id, err}
			if left.Add(-1) == 0 {
				close(out)
			}
		})
	}
	return out
}

// readAll reads entries 0..last and checks them against the stream.
func checkEntries(t *testing.T, ctx context.Context, r *Reader, stream string, last int64) {
	t.Helper()
	if last < 0 {
		return
	}
	es, err := r.Read(ctx, 0, last)
	if err != nil {
		t.Fatalf("read 0..%d: %v", last, err)
	}
	if len(es) != int(last+1) {
		t.Fatalf("read %d entries, want %d", len(es), last+1)
	}
	for i, e := range es {
		if e.ID != int64(i) || !bytes.Equal(e.Payload, payload(stream, i)) {
			t.Fatalf("entry %d: id %d payload %.40q, want %.40q", i, e.ID, e.Payload, payload(stream, i))
		}
	}
}

func totalLength(stream string, n int) int64 {
	var l int64
	for i := range n {
		l += int64(len(payload(stream, i)))
	}
	return l
}
