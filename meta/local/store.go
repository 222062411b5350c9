package local

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/magnetar-io/magnetar/meta"
)

// Options configure Open.
type Options struct {
	// Logger receives the store's log lines; nil means slog.Default().
	Logger *slog.Logger
	// NoSync skips fsync. For throughput tests only: a machine crash (not
	// a process crash) can then lose acknowledged writes or corrupt the
	// file.
	NoSync bool
}

// Store is a session on an embedded store. It implements meta.Store.
type Store struct {
	meta.SessionBroadcaster

	b         *backend
	sid       atomic.Uint64 // current session id; changes on ExpireSession
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ meta.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir and returns its first
// session. Only one process can have a directory open; a second Open of the
// same directory fails with an error saying it is in use.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b, err := openBackend(dir, opts)
	if err != nil {
		return nil, err
	}
	return b.session(), nil
}

func (b *backend) session() *Store {
	s := &Store{b: b}
	s.sid.Store(b.newSID(true))
	return s
}

// NewSession opens another session on the same store. Its ephemeral nodes
// and watches are its own, and the store stays open until every session is
// closed. It fails with ErrClosed if s is closed.
func (s *Store) NewSession() (*Store, error) {
	if s.closed.Load() {
		return nil, meta.ErrClosed
	}
	return s.b.session(), nil
}

// ExpireSession ends the current session as a ZooKeeper server would on a
// timeout: its ephemeral nodes are deleted, its pending watches get
// EventWatchLost with ErrSessionExpired, subscribers see SessionExpired and
// then SessionConnected as the store continues with a new session. It lets
// tests exercise what a real expiry does to code built on the store.
func (s *Store) ExpireSession() {
	if s.closed.Load() {
		return
	}
	old := s.sid.Swap(s.b.newSID(false))
	s.b.submit(nil, op{kind: opEndSession, session: old})
	s.b.loseWatches(s, old, meta.ErrSessionExpired)
	s.Publish(meta.SessionEvent{State: meta.SessionExpired})
	s.Publish(meta.SessionEvent{State: meta.SessionConnected})
}

// Close ends the session, deleting its ephemeral nodes, and closes the
// store if it was the last session.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		res, _ := s.b.submit(nil, op{kind: opEndSession, session: s.sid.Load()})
		s.b.loseWatches(s, 0, meta.ErrClosed)
		s.SessionBroadcaster.Close()
		s.closeErr = errors.Join(res.err, s.b.release())
	})
	return s.closeErr
}

// check is the common entry of every call.
func (s *Store) check(ctx context.Context, op, path string) error {
	if err := ctx.Err(); err != nil {
		return &meta.PathError{Op: op, Path: path, Err: err}
	}
	if s.closed.Load() {
		return &meta.PathError{Op: op, Path: path, Err: meta.ErrClosed}
	}
	if err := meta.ValidatePath(path); err != nil {
		return &meta.PathError{Op: op, Path: path, Err: err}
	}
	return nil
}

// view runs fn on the node at path (nil if missing) under the readers'
// lock, and registers a watch in reg when fn asks for one.
func (s *Store) view(ctx context.Context, op, path string, reg map[string][]*watch, fn func(n *node) (watch bool, err error)) (<-chan meta.Event, error) {
	if err := s.check(ctx, op, path); err != nil {
		return nil, err
	}
	b := s.b
	b.rmu.RLock()
	defer b.rmu.RUnlock()
	w, err := fn(b.r.nodes[path])
	if err == nil && w {
		var ch <-chan meta.Event
		if ch, err = b.register(reg, s, path); err == nil {
			return ch, nil
		}
	}
	if err != nil {
		return nil, &meta.PathError{Op: op, Path: path, Err: err}
	}
	return nil, nil
}

func (s *Store) get(ctx context.Context, path string, watch bool) (value []byte, st meta.Stat, ch <-chan meta.Event, err error) {
	ch, err = s.view(ctx, "get", path, s.b.dataW, func(n *node) (bool, error) {
		if n == nil {
			return false, meta.ErrNotFound
		}
		value, st = slices.Clone(n.value), n.stat()
		return watch, nil
	})
	return value, st, ch, err
}

// Get implements meta.Store.
func (s *Store) Get(ctx context.Context, path string) ([]byte, meta.Stat, error) {
	v, st, _, err := s.get(ctx, path, false)
	return v, st, err
}

// GetW implements meta.Store.
func (s *Store) GetW(ctx context.Context, path string) ([]byte, meta.Stat, <-chan meta.Event, error) {
	return s.get(ctx, path, true)
}

func (s *Store) exists(ctx context.Context, path string, watch bool) (st meta.Stat, ok bool, ch <-chan meta.Event, err error) {
	ch, err = s.view(ctx, "exists", path, s.b.dataW, func(n *node) (bool, error) {
		if n != nil {
			st, ok = n.stat(), true
		}
		return watch, nil
	})
	return st, ok, ch, err
}

// Exists implements meta.Store.
func (s *Store) Exists(ctx context.Context, path string) (meta.Stat, bool, error) {
	st, ok, _, err := s.exists(ctx, path, false)
	return st, ok, err
}

// ExistsW implements meta.Store.
func (s *Store) ExistsW(ctx context.Context, path string) (meta.Stat, bool, <-chan meta.Event, error) {
	return s.exists(ctx, path, true)
}

func (s *Store) children(ctx context.Context, path string, watch bool) (names []string, ch <-chan meta.Event, err error) {
	ch, err = s.view(ctx, "children", path, s.b.childW, func(n *node) (bool, error) {
		if n == nil {
			return false, meta.ErrNotFound
		}
		names = make([]string, 0, len(n.children))
		for c := range n.children {
			names = append(names, c)
		}
		return watch, nil
	})
	slices.Sort(names) // outside the lock
	return names, ch, err
}

// Children implements meta.Store.
func (s *Store) Children(ctx context.Context, path string) ([]string, error) {
	names, _, err := s.children(ctx, path, false)
	return names, err
}

// ChildrenW implements meta.Store.
func (s *Store) ChildrenW(ctx context.Context, path string) ([]string, <-chan meta.Event, error) {
	return s.children(ctx, path, true)
}

// write validates a request, hands it to the writer and waits.
func (s *Store) write(ctx context.Context, name string, o op) (result, error) {
	if err := s.check(ctx, name, o.path); err != nil {
		return result{}, err
	}
	if err := meta.CheckValue(o.value); err != nil {
		return result{}, &meta.PathError{Op: name, Path: o.path, Err: err}
	}
	o.session = s.sid.Load()
	res, ok := s.b.submit(ctx.Done(), o)
	switch {
	case !ok:
		return result{}, &meta.PathError{Op: name, Path: o.path, Err: ctx.Err()}
	case res.err != nil && errors.Is(res.err, meta.ErrSessionExpired) && s.closed.Load():
		return result{}, &meta.PathError{Op: name, Path: o.path, Err: meta.ErrClosed}
	case res.err != nil:
		return result{}, &meta.PathError{Op: name, Path: o.path, Err: res.err}
	}
	return res, nil
}

// Create implements meta.Store.
func (s *Store) Create(ctx context.Context, path string, value []byte, flags meta.CreateFlags) (string, error) {
	res, err := s.write(ctx, "create", op{kind: opCreate, path: path, value: slices.Clone(value), flags: flags})
	return res.path, err
}

// Set implements meta.Store.
func (s *Store) Set(ctx context.Context, path string, value []byte, expected meta.Version) (meta.Stat, error) {
	res, err := s.write(ctx, "set", op{kind: opSet, path: path, value: slices.Clone(value), expected: expected})
	return res.stat, err
}

// Delete implements meta.Store.
func (s *Store) Delete(ctx context.Context, path string, expected meta.Version) error {
	_, err := s.write(ctx, "delete", op{kind: opDelete, path: path, expected: expected})
	return err
}
