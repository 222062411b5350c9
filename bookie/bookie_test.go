package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

type node struct {
	store *local.Store
	fs    vfs.FS
	dir   string
	id    string
}

func (n *node) start(t *testing.T) (*Bookie, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Start(context.Background(), Config{
		Listener: ln,
		ID:       n.id,
		Storage:  storage.Options{FS: n.fs, Dir: n.dir, CheckpointInterval: -1, GCInterval: -1},
		Meta:     n.store,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		ln.Close()
	}
	return b, err
}

func stop(t *testing.T, b *Bookie) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func newNode(t *testing.T) *node {
	s, err := local.Open(t.TempDir(), local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &node{store: s, fs: vfs.NewMem(), dir: "/bookie", id: "127.0.0.1:3999"}
}

func registered(t *testing.T, s meta.Store, id string) bool {
	t.Helper()
	st, ok, err := s.Exists(context.Background(), meta.Join(meta.BookiesAvailableRoot, id))
	if err != nil {
		t.Fatal(err)
	}
	if ok && !st.Ephemeral {
		t.Fatalf("registration of %s is not ephemeral", id)
	}
	return ok
}

func TestRegistration(t *testing.T) {
	n := newNode(t)
	b, err := n.start(t)
	if err != nil {
		t.Fatal(err)
	}
	if !registered(t, n.store, n.id) {
		t.Fatal("bookie not registered")
	}
	// After a session expiry the ephemeral node is gone; the bookie puts it back.
	_, _, watch, err := n.store.ExistsW(context.Background(), meta.Join(meta.BookiesAvailableRoot, n.id))
	if err != nil {
		t.Fatal(err)
	}
	n.store.ExpireSession()
	if ev := <-watch; ev.Type != meta.EventDeleted {
		t.Fatalf("registration after expiry: %+v", ev)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !registered(t, n.store, n.id) {
		if time.Now().After(deadline) {
			t.Fatal("bookie did not register again after its session expired")
		}
		_, _, w, err := n.store.ExistsW(context.Background(), meta.Join(meta.BookiesAvailableRoot, n.id))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-w:
		case <-time.After(time.Until(deadline)):
		}
	}
	stop(t, b)
	if registered(t, n.store, n.id) {
		t.Fatal("bookie still registered after shutdown")
	}
}

func TestCookie(t *testing.T) {
	n := newNode(t)
	b, err := n.start(t)
	if err != nil {
		t.Fatal(err)
	}
	stop(t, b)

	// A restart on the same disks is fine.
	if b, err = n.start(t); err != nil {
		t.Fatalf("restart: %v", err)
	}
	stop(t, b)

	// The disk is wiped: the bookie must not rejoin as itself.
	wiped := *n
	wiped.fs = vfs.NewMem()
	_, err = wiped.start(t)
	if !errors.Is(err, ErrCookie) || !strings.Contains(err.Error(), "wiped") || !strings.Contains(err.Error(), n.id) {
		t.Fatalf("start on a wiped disk: %v", err)
	}
	if registered(t, n.store, n.id) {
		t.Fatal("a refused bookie registered itself")
	}

	// Another bookie's disk under this identity.
	other := newNode(t)
	other.id = "127.0.0.1:3998"
	ob, err := other.start(t)
	if err != nil {
		t.Fatal(err)
	}
	stop(t, ob)
	swapped := *n
	swapped.fs = other.fs
	if _, err := swapped.start(t); !errors.Is(err, ErrCookie) {
		t.Fatalf("start on another bookie's disk: %v", err)
	}

	// The metadata store was reset but the disk kept its cookie.
	reset := *n
	reset.store = newNode(t).store
	if _, err := reset.start(t); !errors.Is(err, ErrCookie) || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("start against a reset metadata store: %v", err)
	}
}

// A ledger deleted while the bookie was down (its metadata gone, its entries
// still here) is deleted by the bookie itself.
func TestCollectDeletedLedgers(t *testing.T) {
	n := newNode(t)
	b, err := n.start(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, b)
	ctx := context.Background()
	for _, id := range []int64{1, 2, 100_001} {
		done := make(chan error, 1)
		b.storage.AddEntry(entry.Encode(nil, entry.Header{Ledger: id, LAC: -1}, []byte("x")), false, func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Ledger 1 still has metadata; 2 and 100001 were deleted.
	if err := meta.EnsurePath(ctx, n.store, meta.LedgerPath(1)); err != nil {
		t.Fatal(err)
	}
	got, err := b.collectDeletedLedgers(ctx)
	if err != nil || got != 2 {
		t.Fatalf("collected %d ledgers (%v), want 2", got, err)
	}
	if _, err := b.storage.ReadEntry(1, 0); err != nil {
		t.Fatalf("live ledger 1: %v", err)
	}
	for _, id := range []int64{2, 100_001} {
		if _, err := b.storage.ReadEntry(id, 0); !errors.Is(err, storage.ErrNoLedger) {
			t.Fatalf("ledger %d after collection: %v", id, err)
		}
	}
}

// readOnlyMark reads /bookies/readonly/<id>: whether it is there, and its
// reason.
func readOnlyMarkOf(t *testing.T, s meta.Store, id string) (bool, string) {
	t.Helper()
	v, st, err := s.Get(context.Background(), meta.Join(meta.BookiesReadOnlyRoot, id))
	if errors.Is(err, meta.ErrNotFound) {
		return false, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	if !st.Ephemeral {
		t.Fatalf("read-only mark of %s is not ephemeral", id)
	}
	var m readOnlyMark
	if err := json.Unmarshal(v, &m); err != nil {
		t.Fatalf("read-only mark %q: %v", v, err)
	}
	return true, m.Reason
}

// TestReadOnlyMark: a bookie whose disk goes above its usage threshold
// marks itself read-only in the metadata store, puts the mark back after a
// session expiry, and removes it once it takes adds again, and at
// shutdown.
func TestReadOnlyMark(t *testing.T) {
	n := newNode(t)
	b, err := n.start(t)
	if err != nil {
		t.Fatal(err)
	}
	mem := n.fs.(*vfs.MemFS)
	setUsage := func(used uint64) {
		t.Helper()
		mem.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 100, UsedBytes: used, AvailBytes: 100 - used})
		b.Storage().CheckDisks()
	}
	waitMark := func(want bool, what string) string {
		t.Helper()
		return waitReadOnlyMark(t, n.store, n.id, what, func(there bool, _ string) bool { return there == want })
	}
	setUsage(50)
	time.Sleep(2 * readOnlyCheckInterval)
	waitMark(false, "a disk half full")

	setUsage(96)
	if reason := waitMark(true, "a disk 96 % full"); !strings.Contains(reason, "above the disk-usage threshold") {
		t.Errorf("the mark's reason: %q", reason)
	}
	_, _, watch, err := n.store.ExistsW(context.Background(), meta.Join(meta.BookiesReadOnlyRoot, n.id))
	if err != nil {
		t.Fatal(err)
	}
	n.store.ExpireSession()
	if ev := <-watch; ev.Type != meta.EventDeleted {
		t.Fatalf("read-only mark at the session's expiry: %+v", ev)
	}
	waitMark(true, "after a session expiry")

	setUsage(85)
	waitMark(false, "a disk back under the warning threshold")

	setUsage(97)
	waitMark(true, "a disk full again")
	stop(t, b)
	if got, _ := readOnlyMarkOf(t, n.store, n.id); got {
		t.Fatal("read-only mark still there after shutdown")
	}
}

// TestReadOnlyMarkReplacesOld: a bookie started read-only (its disk above
// the usage threshold at open) replaces a mark left under its id, which
// could be its previous session's, due to vanish when that expires.
func TestReadOnlyMarkReplacesOld(t *testing.T) {
	n := newNode(t)
	ctx := context.Background()
	if err := meta.EnsurePath(ctx, n.store, meta.BookiesReadOnlyRoot); err != nil {
		t.Fatal(err)
	}
	if _, err := n.store.Create(ctx, meta.Join(meta.BookiesReadOnlyRoot, n.id), []byte(`{"reason":"an old session's"}`), meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	n.fs.(*vfs.MemFS).TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 100, UsedBytes: 97, AvailBytes: 3})
	b, err := n.start(t)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, b)
	waitReadOnlyMark(t, n.store, n.id, "the mark left before the bookie started, replaced", func(there bool, reason string) bool {
		return there && strings.Contains(reason, "above the disk-usage threshold")
	})
}

// waitReadOnlyMark waits up to 10 s for bookie id's read-only mark (there
// or not, and its reason) to satisfy ok, and returns the reason.
func waitReadOnlyMark(t *testing.T, s meta.Store, id, what string, ok func(there bool, reason string) bool) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		there, reason := readOnlyMarkOf(t, s, id)
		if ok(there, reason) {
			return reason
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: read-only mark there: %v, reason %q", what, there, reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
