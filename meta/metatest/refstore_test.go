package metatest_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/metatest"
)

// The reference model: the simplest meta.Store that keeps the contract, one
// mutex over an in-memory tree. It is test-only; it exists so that the suite
// itself is tested (a suite change that a correct store fails is a suite
// bug).

func TestReferenceStore(t *testing.T) {
	h := newRefBackend().harness()
	// Twice on one backend, as `make test` twice on one ZooKeeper.
	metatest.Run(t, h)
	metatest.Run(t, h)
	// Every subtest removed its root.
	s := h.Open(t)
	if names, err := s.Children(t.Context(), "/metatest"); err != nil || len(names) != 0 {
		t.Fatalf("left behind under /metatest: %q, %v", names, err)
	}
}

func BenchmarkReferenceStore(b *testing.B) {
	metatest.RunBenchmarks(b, newRefBackend().harness())
}

// refBackend is the shared tree: the "server" that sessions connect to.
type refBackend struct {
	mu       sync.Mutex
	nodes    map[string]*refNode
	watches  map[string][]*refWatch // by watched path
	sessions int64                  // last session id handed out
}

type refNode struct {
	value    []byte
	stat     meta.Stat // NumChildren is filled in on read
	owner    int64     // session id of an ephemeral node
	children map[string]bool
	seq      int64 // next sequential counter for children
}

type watchKind int

const (
	dataWatch     watchKind = iota // GetW: data changed, deleted
	existsWatch                    // ExistsW: created, data changed, deleted
	childrenWatch                  // ChildrenW: children changed, deleted
)

type refWatch struct {
	kind  watchKind
	store *refStore
	ch    chan meta.Event // capacity 1: fired exactly once, under b.mu
}

func newRefBackend() *refBackend {
	now := time.Now()
	return &refBackend{
		nodes:   map[string]*refNode{"/": {stat: meta.Stat{Created: now, Modified: now}, children: map[string]bool{}}},
		watches: map[string][]*refWatch{},
	}
}

func (b *refBackend) harness() metatest.Harness {
	return metatest.Harness{
		Name: "reference",
		Open: func(t testing.TB) meta.Store {
			b.mu.Lock()
			b.sessions++
			s := &refStore{b: b, session: b.sessions}
			b.mu.Unlock()
			t.Cleanup(func() { s.Close() })
			return s
		},
		Expire: func(t testing.TB, s meta.Store) {
			rs := s.(*refStore)
			b.mu.Lock()
			b.dropWatches(rs, meta.ErrSessionExpired)
			b.deleteEphemerals(rs.session)
			b.sessions++
			rs.session = b.sessions
			b.mu.Unlock()
			rs.events.Publish(meta.SessionEvent{State: meta.SessionExpired})
			rs.events.Publish(meta.SessionEvent{State: meta.SessionConnected})
		},
	}
}

// fire delivers ev to the watches on path whose kind is in kinds.
func (b *refBackend) fire(path string, typ meta.EventType, kinds ...watchKind) {
	kept := b.watches[path][:0]
	for _, w := range b.watches[path] {
		if slices.Contains(kinds, w.kind) {
			w.ch <- meta.Event{Type: typ, Path: path}
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	b.watches[path] = kept
}

// dropWatches ends every watch of s with EventWatchLost.
func (b *refBackend) dropWatches(s *refStore, cause error) {
	for path, ws := range b.watches {
		b.watches[path] = slices.DeleteFunc(ws, func(w *refWatch) bool {
			if w.store != s {
				return false
			}
			w.ch <- meta.Event{Type: meta.EventWatchLost, Path: path, Err: cause}
			close(w.ch)
			return true
		})
	}
}

func (b *refBackend) deleteEphemerals(session int64) {
	for path, n := range b.nodes {
		if n.stat.Ephemeral && n.owner == session {
			b.remove(path)
		}
	}
}

func (b *refBackend) remove(path string) {
	delete(b.nodes, path)
	parent := meta.Parent(path)
	delete(b.nodes[parent].children, meta.Base(path))
	b.fire(path, meta.EventDeleted, dataWatch, existsWatch, childrenWatch)
	b.fire(parent, meta.EventChildrenChanged, childrenWatch)
}

// refStore is one session on the backend.
type refStore struct {
	b      *refBackend
	events meta.SessionBroadcaster

	// Guarded by b.mu.
	session int64
	closed  bool
}

// begin locks the backend and checks what every call checks. On success
// the caller must unlock b.mu.
func (s *refStore) begin(ctx context.Context, op, path string) error {
	s.b.mu.Lock()
	var err error
	switch {
	case s.closed:
		err = meta.ErrClosed
	case ctx.Err() != nil:
		err = ctx.Err()
	default:
		err = meta.ValidatePath(path)
	}
	if err != nil {
		s.b.mu.Unlock()
		return &meta.PathError{Op: op, Path: path, Err: err}
	}
	return nil
}

func (s *refStore) watch(path string, kind watchKind) <-chan meta.Event {
	w := &refWatch{kind: kind, store: s, ch: make(chan meta.Event, 1)}
	s.b.watches[path] = append(s.b.watches[path], w)
	return w.ch
}

func (s *refStore) statOf(n *refNode) meta.Stat {
	st := n.stat
	st.NumChildren = len(n.children)
	return st
}

func (s *refStore) get(ctx context.Context, path string, watch bool) ([]byte, meta.Stat, <-chan meta.Event, error) {
	if err := s.begin(ctx, "get", path); err != nil {
		return nil, meta.Stat{}, nil, err
	}
	defer s.b.mu.Unlock()
	n := s.b.nodes[path]
	if n == nil {
		return nil, meta.Stat{}, nil, meta.Errorf("get", path, meta.ErrNotFound, "")
	}
	var ch <-chan meta.Event
	if watch {
		ch = s.watch(path, dataWatch)
	}
	return bytes.Clone(n.value), s.statOf(n), ch, nil
}

func (s *refStore) Get(ctx context.Context, path string) ([]byte, meta.Stat, error) {
	v, st, _, err := s.get(ctx, path, false)
	return v, st, err
}

func (s *refStore) GetW(ctx context.Context, path string) ([]byte, meta.Stat, <-chan meta.Event, error) {
	return s.get(ctx, path, true)
}

func (s *refStore) exists(ctx context.Context, path string, watch bool) (meta.Stat, bool, <-chan meta.Event, error) {
	if err := s.begin(ctx, "exists", path); err != nil {
		return meta.Stat{}, false, nil, err
	}
	defer s.b.mu.Unlock()
	var ch <-chan meta.Event
	if watch {
		ch = s.watch(path, existsWatch)
	}
	n := s.b.nodes[path]
	if n == nil {
		return meta.Stat{}, false, ch, nil
	}
	return s.statOf(n), true, ch, nil
}

func (s *refStore) Exists(ctx context.Context, path string) (meta.Stat, bool, error) {
	st, ok, _, err := s.exists(ctx, path, false)
	return st, ok, err
}

func (s *refStore) ExistsW(ctx context.Context, path string) (meta.Stat, bool, <-chan meta.Event, error) {
	return s.exists(ctx, path, true)
}

func (s *refStore) children(ctx context.Context, path string, watch bool) ([]string, <-chan meta.Event, error) {
	if err := s.begin(ctx, "children", path); err != nil {
		return nil, nil, err
	}
	defer s.b.mu.Unlock()
	n := s.b.nodes[path]
	if n == nil {
		return nil, nil, meta.Errorf("children", path, meta.ErrNotFound, "")
	}
	var ch <-chan meta.Event
	if watch {
		ch = s.watch(path, childrenWatch)
	}
	return slices.Sorted(maps.Keys(n.children)), ch, nil
}

func (s *refStore) Children(ctx context.Context, path string) ([]string, error) {
	names, _, err := s.children(ctx, path, false)
	return names, err
}

func (s *refStore) ChildrenW(ctx context.Context, path string) ([]string, <-chan meta.Event, error) {
	return s.children(ctx, path, true)
}

func (s *refStore) Create(ctx context.Context, path string, value []byte, flags meta.CreateFlags) (string, error) {
	if err := s.begin(ctx, "create", path); err != nil {
		return "", err
	}
	defer s.b.mu.Unlock()
	if err := meta.CheckValue(value); err != nil {
		return "", &meta.PathError{Op: "create", Path: path, Err: err}
	}
	parentPath := meta.Parent(path)
	parent := s.b.nodes[parentPath]
	switch {
	case parent == nil:
		return "", meta.Errorf("create", path, meta.ErrNotFound, "parent %s is missing", parentPath)
	case parent.stat.Ephemeral:
		return "", meta.Errorf("create", path, meta.ErrEphemeralParent, "")
	}
	name := path
	if flags&meta.Sequential != 0 {
		name = fmt.Sprintf("%s%010d", path, parent.seq)
		parent.seq++
	}
	if s.b.nodes[name] != nil {
		return "", meta.Errorf("create", path, meta.ErrExists, "")
	}
	now := time.Now()
	n := &refNode{
		value:    bytes.Clone(value),
		stat:     meta.Stat{Created: now, Modified: now, Ephemeral: flags&meta.Ephemeral != 0},
		children: map[string]bool{},
	}
	if n.stat.Ephemeral {
		n.owner = s.session
	}
	s.b.nodes[name] = n
	parent.children[meta.Base(name)] = true
	s.b.fire(name, meta.EventCreated, existsWatch)
	s.b.fire(parentPath, meta.EventChildrenChanged, childrenWatch)
	return name, nil
}

func (s *refStore) Set(ctx context.Context, path string, value []byte, expected meta.Version) (meta.Stat, error) {
	if err := s.begin(ctx, "set", path); err != nil {
		return meta.Stat{}, err
	}
	defer s.b.mu.Unlock()
	if err := meta.CheckValue(value); err != nil {
		return meta.Stat{}, &meta.PathError{Op: "set", Path: path, Err: err}
	}
	n := s.b.nodes[path]
	switch {
	case n == nil:
		return meta.Stat{}, meta.Errorf("set", path, meta.ErrNotFound, "")
	case expected != meta.AnyVersion && expected != n.stat.Version:
		return meta.Stat{}, meta.Errorf("set", path, meta.ErrBadVersion, "at %d, not %d", n.stat.Version, expected)
	}
	n.value = bytes.Clone(value)
	n.stat.Version++
	n.stat.Modified = time.Now()
	s.b.fire(path, meta.EventDataChanged, dataWatch, existsWatch)
	return s.statOf(n), nil
}

func (s *refStore) Delete(ctx context.Context, path string, expected meta.Version) error {
	if err := s.begin(ctx, "delete", path); err != nil {
		return err
	}
	defer s.b.mu.Unlock()
	n := s.b.nodes[path]
	switch {
	case n == nil:
		return meta.Errorf("delete", path, meta.ErrNotFound, "")
	case expected != meta.AnyVersion && expected != n.stat.Version:
		return meta.Errorf("delete", path, meta.ErrBadVersion, "at %d, not %d", n.stat.Version, expected)
	case len(n.children) > 0:
		return meta.Errorf("delete", path, meta.ErrNotEmpty, "")
	}
	s.b.remove(path)
	return nil
}

func (s *refStore) SessionEvents() (<-chan meta.SessionEvent, func()) {
	return s.events.SessionEvents()
}

func (s *refStore) Close() error {
	s.b.mu.Lock()
	if s.closed {
		s.b.mu.Unlock()
		return nil
	}
	s.closed = true
	s.b.dropWatches(s, meta.ErrClosed)
	s.b.deleteEphemerals(s.session)
	s.b.mu.Unlock()
	s.events.Close()
	return nil
}
