package autorecovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// The tests run on the test ZooKeeper named by MAGNETAR_TEST_ZK (make test
// starts one), each under a fresh chroot, with in-process bookies
// (bookie/bookietest) on loopback. Every "node" stands for a bookie
// process: its own ZooKeeper session, bookie, client and auto-recovery.

// testTimings make the auditor and workers quick.
var testTimings = Config{AuditInterval: 500 * time.Millisecond, GracePeriod: 300 * time.Millisecond,
	PollInterval: 200 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}

// testLogger discards logs unless MAGNETAR_TEST_LOG is a level (debug,
// info, warn).
func testLogger() *slog.Logger {
	var level slog.Level
	if v := os.Getenv("MAGNETAR_TEST_LOG"); v == "" || level.UnmarshalText([]byte(v)) != nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing t after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cluster is a fresh chroot on the test ZooKeeper.
type cluster struct {
	t      *testing.T
	addr   string // ZooKeeper servers
	chroot string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	addr := os.Getenv("MAGNETAR_TEST_ZK")
	if addr == "" {
		t.Fatal("MAGNETAR_TEST_ZK is not set: run `make test`, or `scripts/zookeeper.sh start` and export the address it prints")
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	cl := &cluster{t: t, addr: addr, chroot: fmt.Sprintf("/magnetar-test-autorecovery/%s-%08x", name, rand.Uint32())}
	t.Cleanup(cl.removeChroot) // registered first: runs after every session closed
	return cl
}

// session opens a new session on the cluster's chroot, closed at cleanup.
func (cl *cluster) session() meta.Store {
	t := cl.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zk.Open(ctx, cl.addr+cl.chroot, zk.Options{SessionTimeout: 2 * time.Second, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (cl *cluster) removeChroot() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zk.Open(ctx, cl.addr, zk.Options{Logger: testLogger()})
	if err != nil {
		return
	}
	defer s.Close()
	if err := removeAll(ctx, s, cl.chroot); err != nil {
		cl.t.Logf("removing %s: %v", cl.chroot, err)
	}
}

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

// node is a bookie process: a session, a bookie registered through it, a
// client, and auto-recovery (auditor candidate and worker).
type node struct {
	store    meta.Store
	bookie   *bookietest.Bookie
	client   *client.Client
	recovery *Service
	stopOnce sync.Once
}

func (cl *cluster) startNode(dir string) *node {
	t := cl.t
	t.Helper()
	store := cl.session()
	bk, err := bookietest.Start(store, bookietest.Options{Dir: dir, NoSync: true, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{store: store, bookie: bk}
	t.Cleanup(n.stop)
	if n.client, err = client.New(client.Config{Meta: store, Logger: testLogger(), DialTimeout: time.Second,
		AddTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	cfg := testTimings
	cfg.Meta, cfg.Client, cfg.BookieID, cfg.Logger = store, n.client, bk.Addr, testLogger()
	if n.recovery, err = Start(cfg); err != nil {
		t.Fatal(err)
	}
	return n
}

// stop makes the process go: auto-recovery stops, the bookie fails and its
// session (with its registration) ends.
func (n *node) stop() {
	n.stopOnce.Do(func() {
		if n.recovery != nil {
			n.recovery.Close()
		}
		if n.client != nil {
			n.client.Close()
		}
		n.bookie.Stop()
		n.store.Close()
	})
}

func testPayload(ledger, i int) []byte {
	return fmt.Appendf(nil, "ledger-%d-entry-%05d-%s", ledger, i, bytes.Repeat([]byte{byte('a' + i%26)}, i%50))
}

// appendRange appends entries from..to-1 of stream k asynchronously and
// returns a channel closed once all completed; errors go to t.
func appendRange(t *testing.T, w *client.Writer, k, from, to int) <-chan struct{} {
	done := make(chan struct{})
	var mu sync.Mutex
	left := to - from
	for i := from; i < to; i++ {
		w.Append(testPayload(k, i), func(id int64, err error) {
			if err != nil || id != int64(i) {
				t.Errorf("ledger %d append %d: id %d, %v", w.ID(), i, id, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if left--; left == 0 {
				close(done)
			}
		})
	}
	return done
}

func readMetadata(t *testing.T, s meta.Store, id int64) client.LedgerMetadata {
	t.Helper()
	v, _, err := s.Get(context.Background(), meta.LedgerPath(id))
	if err != nil {
		t.Fatal(err)
	}
	md, err := client.ParseMetadata(id, v)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

// replicated reports whether every ensemble of md names only live bookies.
func replicated(md client.LedgerMetadata, live []string) bool {
	return len(md.MissingBookies(live)) == 0
}

func marked(t *testing.T, s meta.Store, id int64) (Mark, bool) {
	v, _, err := s.Get(context.Background(), markPath(id))
	if errors.Is(err, meta.ErrNotFound) {
		return Mark{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var m Mark
	if err := json.Unmarshal(v, &m); err != nil {
		t.Fatalf("mark of ledger %d: %v", id, err)
	}
	return m, true
}

// TestAutoRecovery is the whole story on three bookies:
//
//  1. Ledger A (E=3, Qw=2, Qa=2) is written and closed; ledgers B and C
//     (E=2, Qw=2, Qa=2) are being written.
//  2. A bookie of B's ensemble dies during the writes. B's writer replaces
//     it by ensemble change and every add succeeds.
//  3. After the grace period the auditor marks the ledgers that name the
//     dead bookie. B's first fragment is re-replicated to the one spare
//     bookie; A cannot be (its ensemble holds every bookie left): it stays
//     marked, naming the dead bookie.
//  4. An empty bookie joins: A is re-replicated to it. Every fragment of
//     every ledger then names only live bookies, every entry is on every
//     bookie of its write set (read from each bookie's storage), and no
//     mark is left.
//  5. Another original bookie stops: every entry still reads back through
//     the client.
func TestAutoRecovery(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t)
	nodes := []*node{cl.startNode("/b1"), cl.startNode("/b2"), cl.startNode("/b3")}
	writerStore := cl.session()
	wc, err := client.New(client.Config{Meta: writerStore, Logger: testLogger(), DialTimeout: time.Second,
		AddTimeout: time.Second, ReadTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	nodeAt := func(addr string) *node {
		for _, n := range nodes {
			if n.bookie.Addr == addr {
				return n
			}
		}
		t.Fatalf("no bookie %s", addr)
		return nil
	}

	// 1.
	const n = 300
	wa, err := wc.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-appendRange(t, wa, 0, 0, n)
	if err := wa.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var writers []*client.Writer
	for range 2 {
		w, err := wc.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 2, WriteQuorum: 2, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		writers = append(writers, w)
		<-appendRange(t, w, len(writers), 0, n/2)
	}
	wb := writers[0]

	// 2.
	victim := nodeAt(wb.Metadata().Ensembles[0].Bookies[0])
	var pending []<-chan struct{}
	for k, w := range writers {
		pending = append(pending, appendRange(t, w, k+1, n/2, n*3/4))
	}
	victim.stop()
	for k, w := range writers {
		pending = append(pending, appendRange(t, w, k+1, n*3/4, n))
	}
	for _, p := range pending {
		select {
		case <-p:
		case <-ctx.Done():
			t.Fatal("appends did not complete")
		}
	}
	for _, w := range writers {
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if md := wb.Metadata(); len(md.Ensembles) < 2 || slices.Contains(md.Ensembles[len(md.Ensembles)-1].Bookies, victim.bookie.Addr) {
		t.Fatalf("ledger B's writer did not replace the dead bookie: %+v", md.Ensembles)
	}
	live := func() []string {
		var out []string
		for _, n := range nodes {
			if n != victim && n.bookie != nil {
				out = append(out, n.bookie.Addr)
			}
		}
		return out
	}

	// 3.
	store := nodes[0].store
	if nodes[0] == victim {
		store = nodes[1].store
	}
	waitFor(t, 30*time.Second, "ledger B re-replicated", func() bool {
		_, isMarked := marked(t, store, wb.ID())
		return !isMarked && replicated(readMetadata(t, store, wb.ID()), live())
	})
	m, isMarked := marked(t, store, wa.ID())
	if !isMarked || !slices.Equal(m.MissingBookies, []string{victim.bookie.Addr}) {
		t.Fatalf("ledger A: mark %+v (marked %v), want missing [%s]", m, isMarked, victim.bookie.Addr)
	}
	if !slices.Contains(readMetadata(t, store, wa.ID()).Ensembles[0].Bookies, victim.bookie.Addr) {
		t.Fatal("ledger A's ensemble changed though no bookie could replace the dead one")
	}

	// 4.
	nodes = append(nodes, cl.startNode("/b4"))
	ids := []int64{wa.ID(), writers[0].ID(), writers[1].ID()}
	waitFor(t, 30*time.Second, "every ledger re-replicated", func() bool {
		list, err := UnderReplicated(ctx, store)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			return false
		}
		for _, id := range ids {
			if !replicated(readMetadata(t, store, id), live()) {
				return false
			}
		}
		return true
	})
	for k, id := range ids {
		md := readMetadata(t, store, id)
		for e := int64(0); e < n; e++ {
			ens := md.EnsembleFor(e)
			for i := range md.WriteQuorum {
				b := ens[(e+int64(i))%int64(len(ens))]
				data, err := nodeAt(b).bookie.Storage.ReadEntry(id, e)
				if err != nil {
					t.Fatalf("ledger %d entry %d on %s: %v", id, e, b, err)
				}
				if _, err := entry.Verify(data); err != nil || !bytes.Equal(entry.Payload(data), testPayload(k, int(e))) {
					t.Fatalf("ledger %d entry %d on %s: %v, payload %.40q", id, e, b, err, entry.Payload(data))
				}
			}
		}
	}

	// 5. (Auto-recovery stops first: this step is about reads alone.)
	for _, n := range nodes {
		if n.recovery != nil {
			n.recovery.Close()
		}
	}
	for _, n := range nodes[:3] {
		if n != victim {
			n.stop()
			break
		}
	}
	for k, id := range ids {
		r, err := wc.OpenLedger(ctx, id, client.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		es, err := r.Read(ctx, 0, n-1)
		if err != nil {
			t.Fatalf("ledger %d after a second bookie stopped: %v", id, err)
		}
		for i, e := range es {
			if !bytes.Equal(e.Payload, testPayload(k, i)) {
				t.Fatalf("ledger %d entry %d: %.40q", id, i, e.Payload)
			}
		}
	}
}

// TestAuditorElection: of two candidates exactly one is the auditor, named
// in the auditor node; closing it hands over to the other; and when the
// auditor's session ends a third candidate takes over.
func TestAuditorElection(t *testing.T) {
	cl := newCluster(t)
	start := func(id string) (*Auditor, meta.Store) {
		s := cl.session()
		cfg := testTimings
		cfg.Meta, cfg.BookieID, cfg.Logger = s, id, testLogger()
		a, err := StartAuditor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Close)
		return a, s
	}
	observer := cl.session()
	holder := func() string {
		v, _, err := observer.Get(context.Background(), meta.AuditorPath)
		if errors.Is(err, meta.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		var n auditorNode
		if err := json.Unmarshal(v, &n); err != nil {
			t.Fatalf("auditor node %q: %v", v, err)
		}
		return n.Bookie
	}
	a1, s1 := start("b1")
	a2, s2 := start("b2")
	waitFor(t, 10*time.Second, "an auditor", func() bool { return a1.Leading() || a2.Leading() })
	leader, other, otherStore, otherID := a1, a2, s2, "b2"
	if a2.Leading() {
		leader, other, otherStore, otherID = a2, a1, s1, "b1"
	}
	if other.Leading() {
		t.Fatal("both candidates lead")
	}
	if got, want := holder(), map[*Auditor]string{a1: "b1", a2: "b2"}[leader]; got != want {
		t.Fatalf("auditor node names %q, want %q", got, want)
	}

	leader.Close()
	if leader.Leading() {
		t.Fatal("a closed auditor still leads")
	}
	waitFor(t, 10*time.Second, "the other candidate to take over", other.Leading)
	if got := holder(); got != otherID {
		t.Fatalf("auditor node names %q, want %q", got, otherID)
	}

	a3, _ := start("b3")
	otherStore.Close() // the auditor's session ends
	waitFor(t, 10*time.Second, "the third candidate to take over", a3.Leading)
	waitFor(t, 10*time.Second, "the auditor whose session ended to step down", func() bool { return !other.Leading() })
	if got := holder(); got != "b3" {
		t.Fatalf("auditor node names %q, want b3", got)
	}
}

// TestAuditorMarks: the auditor marks, after the grace period, exactly the
// ledgers whose ensembles name a bookie gone from /bookies/available, with
// the bookies they miss; it skips what is no ledger (the id counter,
// metadata it cannot decode) without stopping.
func TestAuditorMarks(t *testing.T) {
	ctx := testCtx(t)
	cl := newCluster(t)
	s := cl.session()
	bookies := cl.session() // the registrations' session
	for _, b := range []string{"a:1", "b:1", "c:1"} {
		if err := meta.EnsurePath(ctx, bookies, meta.BookiesAvailableRoot); err != nil {
			t.Fatal(err)
		}
		if _, err := bookies.Create(ctx, meta.Join(meta.BookiesAvailableRoot, b), nil, meta.Ephemeral); err != nil {
			t.Fatal(err)
		}
	}
	put := func(id int64, value string) {
		if err := meta.EnsurePath(ctx, s, meta.Parent(meta.LedgerPath(id))); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, meta.LedgerPath(id), []byte(value), 0); err != nil {
			t.Fatal(err)
		}
	}
	md := func(state string, ensembles ...string) string {
		return fmt.Sprintf(`{"format":1,"ensembleSize":2,"writeQuorum":2,"ackQuorum":2,"state":%q,"lastEntry":9,"length":90,"ensembles":[%s]}`,
			state, strings.Join(ensembles, ","))
	}
	put(1, md("CLOSED", `{"firstEntry":0,"bookies":["a:1","b:1"]}`))
	put(2, md("CLOSED", `{"firstEntry":0,"bookies":["b:1","c:1"]}`))
	put(3, md("OPEN", `{"firstEntry":0,"bookies":["c:1","b:1"]}`, `{"firstEntry":5,"bookies":["c:1","a:1"]}`))
	put(4, `{"format":1,"ensembles":[]}`) // invalid: skipped
	put(100_001, "not json")              // another bucket, undecodable
	if _, err := s.Create(ctx, meta.LedgerIDCounterPath, []byte{0, 0, 0, 0, 0, 0, 0, 9}, 0); err != nil {
		t.Fatal(err)
	}

	cfg := testTimings
	cfg.Meta, cfg.BookieID, cfg.Logger = s, "auditor", testLogger()
	cfg.AuditInterval = time.Hour // only the watch on /bookies/available and the grace timer drive it
	a, err := StartAuditor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	waitFor(t, 10*time.Second, "the auditor", a.Leading)
	gone := time.Now()
	if err := bookies.Delete(ctx, meta.Join(meta.BookiesAvailableRoot, "a:1"), meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "ledgers 1 and 3 marked", func() bool {
		_, ok1 := marked(t, s, 1)
		_, ok3 := marked(t, s, 3)
		return ok1 && ok3
	})
	for _, id := range []int64{1, 3} {
		m, _ := marked(t, s, id)
		if !slices.Equal(m.MissingBookies, []string{"a:1"}) {
			t.Errorf("ledger %d mark %+v, want missing [a:1]", id, m)
		}
		if early := gone.Add(cfg.GracePeriod).UnixMilli() - m.MarkedAt; early > 0 {
			t.Errorf("ledger %d marked %d ms before the grace period ended", id, early)
		}
	}
	names, err := s.Children(ctx, meta.UnderReplicatedLedgersRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"1", "3"}) {
		t.Errorf("marks %v, want [1 3]", names)
	}
}

// The grace period and the bookkeeping of lost bookies, with explicit
// times.
func TestLostSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	grace := 30 * time.Second
	l := lostSince{}
	l.update(t0, []string{"a"})
	if got := l.confirmed([]string{"a"}, t0.Add(29*time.Second), grace); got != nil {
		t.Errorf("confirmed within the grace period: %v", got)
	}
	if due := l.nextDue(t0.Add(time.Second), grace); !due.Equal(t0.Add(grace)) {
		t.Errorf("nextDue = %v, want %v", due, t0.Add(grace))
	}
	// a restarts within the grace period: forgotten, its clock restarts.
	l.update(t0.Add(10*time.Second), nil)
	l.update(t0.Add(20*time.Second), []string{"a", "b"})
	if got := l.confirmed([]string{"a", "b"}, t0.Add(45*time.Second), grace); got != nil {
		t.Errorf("confirmed after a restart: %v", got)
	}
	if got := l.confirmed([]string{"a", "b", "c"}, t0.Add(50*time.Second), grace); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("confirmed = %v, want [a b]", got)
	}
	if due := l.nextDue(t0.Add(50*time.Second), grace); !due.IsZero() {
		t.Errorf("nextDue with nothing waiting = %v", due)
	}
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {30, 10 * time.Second}} {
		if got := backoff(tc.failures, 10*time.Second); got != tc.want {
			t.Errorf("backoff(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestLedgerIDs(t *testing.T) {
	got := ledgerIDs([]string{"100", "12", "7", "idgen", "underreplication", "-1", "007", ""})
	if !slices.Equal(got, []int64{7, 12, 100}) {
		t.Errorf("ledgerIDs = %v", got)
	}
}
