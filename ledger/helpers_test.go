package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

// An in-process cluster for tests: a meta/local store and bookie servers
// on loopback over real storage, registered under /bookies/available.

// testLogger discards logs unless LEDGER_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("LEDGER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type testCluster struct {
	t       testing.TB
	store   *local.Store
	bookies []*bookietest.Bookie
	// local: clients made from now on call the bookies in-process, as the
	// standalone's does (client.Config.Local).
	local bool
}

func newTestCluster(t testing.TB, n int) *testCluster {
	t.Helper()
	store, err := local.Open(t.TempDir(), local.Options{Logger: testLogger(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, store: store}
	t.Cleanup(tc.stop)
	for i := range n {
		tc.addBookie(bookietest.Options{Dir: fmt.Sprintf("/b%d", i)})
	}
	return tc
}

func (tc *testCluster) stop() {
	for _, b := range tc.bookies {
		b.Stop()
	}
	tc.store.Close()
}

func (tc *testCluster) addBookie(o bookietest.Options) *bookietest.Bookie {
	tc.t.Helper()
	o.Logger = testLogger()
	b, err := bookietest.Start(tc.store, o)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.bookies = append(tc.bookies, b)
	return b
}

// client returns a bookie client on its own metadata session.
func (tc *testCluster) client() (*client.Client, *local.Store) {
	t := tc.t
	t.Helper()
	s, err := tc.store.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.Config{Meta: s, Logger: testLogger(), DialTimeout: time.Second,
		AddTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second}
	if tc.local {
		bookies := tc.bookies
		cfg.Local = func(addr string) client.Local {
			for _, b := range bookies {
				if b.Addr == addr {
					return b.Server()
				}
			}
			return nil
		}
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// testEnv is a factory over the cluster, as one broker would have it.
type testEnv struct {
	f       *Factory
	bookies *countingBookies
	cache   *Cache
	clock   *fakeClock
	meta    meta.Store
}

// factory returns a factory with its own bookie client, metadata session
// and cache, and test-sized limits; tweak adjusts the config.
func (tc *testCluster) factory(tweak ...func(*Config)) *testEnv {
	t := tc.t
	t.Helper()
	c, s := tc.client()
	cache, err := NewCache(CacheConfig{MaxBytes: 64 << 20, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	env := &testEnv{bookies: &countingBookies{Bookies: ClientBookies(c)}, cache: cache,
		clock: newFakeClock(), meta: s}
	// Infinite retention unless a test sets one: with no durable cursor,
	// retention alone decides what is trimmed.
	cfg := Config{Bookies: env.bookies, Meta: s, Cache: cache, Clock: env.clock.Now, Logger: testLogger(),
		MinLedgerAge: -1, RetentionTime: -1, RetentionSize: -1}
	for _, f := range tweak {
		f(&cfg)
	}
	if env.f, err = NewFactory(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		env.f.Close(ctx)
		cache.Close()
	})
	return env
}

func (env *testEnv) open(t testing.TB, name string) *ManagedLedger {
	t.Helper()
	ml, err := env.f.Open(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return ml
}

// countingBookies counts the entries read from bookies.
type countingBookies struct {
	Bookies
	reads   atomic.Int64 // Read calls
	entries atomic.Int64 // entries they returned
}

func (b *countingBookies) OpenLedger(ctx context.Context, id int64, recovery bool) (LedgerReader, error) {
	r, err := b.Bookies.OpenLedger(ctx, id, recovery)
	if err != nil {
		return nil, err
	}
	return &countingReader{LedgerReader: r, b: b}, nil
}

type countingReader struct {
	LedgerReader
	b *countingBookies
}

func (r *countingReader) Read(ctx context.Context, first, last int64) ([][]byte, [][]byte, error) {
	bs, bufs, err := r.LedgerReader.Read(ctx, first, last)
	r.b.reads.Add(1)
	r.b.entries.Add(int64(len(bs)))
	return bs, bufs, err
}

// fakeClock is a clock tests move by hand; it starts at a fixed time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.UnixMilli(1_764_450_000_000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testCtx ends with the test or after two minutes.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// appendResult is one completion.
type appendResult struct {
	pos    Position
	offset int64
	err    error
}

// appendSync appends and waits for the completion.
func appendSync(t testing.TB, ml *ManagedLedger, payload string, messages int32) appendResult {
	t.Helper()
	ch := make(chan appendResult, 1)
	ml.Append([]byte(payload), FormatKafka, messages, func(pos Position, off int64, err error) {
		ch <- appendResult{pos, off, err}
	})
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatal("append did not complete within a minute")
	}
	return appendResult{}
}

// mustAppend appends and fails the test on error.
func mustAppend(t testing.TB, ml *ManagedLedger, payload string, messages int32) appendResult {
	t.Helper()
	r := appendSync(t, ml, payload, messages)
	if r.err != nil {
		t.Fatalf("append %q: %v", payload, r.err)
	}
	return r
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// storedListOf reads the stored list of a managed ledger.
func storedListOf(t testing.TB, s meta.Store, name string) storedList {
	t.Helper()
	p, err := Path(name)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.Get(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := decodeList(p, b)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
