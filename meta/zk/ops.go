package zk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/magnetar-io/magnetar/meta"
)

// Operation names in *meta.PathError.
const (
	opGet      = "get"
	opExists   = "exists"
	opChildren = "children"
	opCreate   = "create"
	opSet      = "set"
	opDelete   = "delete"
)

// Retry backoff after a lost connection. Calls also wait for the session
// before each attempt, so the backoff only paces attempts that fail while
// go-zookeeper still reports a session (the moment a connection breaks).
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

var acl = gozk.WorldACL(gozk.PermAll)

// errRetry asks do for another attempt at once: a write's ambiguity check
// found the tree changing under it.
var errRetry = errors.New("meta/zk: retry")

// Get implements meta.Store.
func (s *Store) Get(ctx context.Context, p string) ([]byte, meta.Stat, error) {
	full, err := s.abs(opGet, p)
	if err != nil {
		return nil, meta.Stat{}, err
	}
	var (
		data []byte
		st   *gozk.Stat
	)
	err = s.do(ctx, opGet, p, false, func(bool) (err error) {
		data, st, err = s.conn.Get(full)
		return err
	})
	if err != nil {
		return nil, meta.Stat{}, err
	}
	return data, toStat(st), nil
}

// GetW implements meta.Store.
func (s *Store) GetW(ctx context.Context, p string) ([]byte, meta.Stat, <-chan meta.Event, error) {
	full, err := s.abs(opGet, p)
	if err != nil {
		return nil, meta.Stat{}, nil, err
	}
	var (
		data []byte
		st   *gozk.Stat
		ch   <-chan gozk.Event
	)
	// go-zookeeper registers no watch when the node is missing (nor does the
	// server for getData), so ErrNotFound leaves nothing behind.
	err = s.do(ctx, opGet, p, false, func(bool) (err error) {
		data, st, ch, err = s.conn.GetW(full)
		return err
	})
	if err != nil {
		return nil, meta.Stat{}, nil, err
	}
	return data, toStat(st), s.forward(p, ch), nil
}

// Exists implements meta.Store.
func (s *Store) Exists(ctx context.Context, p string) (meta.Stat, bool, error) {
	full, err := s.abs(opExists, p)
	if err != nil {
		return meta.Stat{}, false, err
	}
	var (
		ok bool
		st *gozk.Stat
	)
	err = s.do(ctx, opExists, p, false, func(bool) (err error) {
		ok, st, err = s.conn.Exists(full)
		return err
	})
	if err != nil || !ok {
		return meta.Stat{}, false, err
	}
	return toStat(st), true, nil
}

// ExistsW implements meta.Store.
func (s *Store) ExistsW(ctx context.Context, p string) (meta.Stat, bool, <-chan meta.Event, error) {
	full, err := s.abs(opExists, p)
	if err != nil {
		return meta.Stat{}, false, nil, err
	}
	var (
		ok bool
		st *gozk.Stat
		ch <-chan gozk.Event
	)
	err = s.do(ctx, opExists, p, false, func(bool) (err error) {
		ok, st, ch, err = s.conn.ExistsW(full)
		return err
	})
	if err != nil {
		return meta.Stat{}, false, nil, err
	}
	w := s.forward(p, ch)
	if !ok {
		return meta.Stat{}, false, w, nil
	}
	return toStat(st), true, w, nil
}

// Children implements meta.Store.
func (s *Store) Children(ctx context.Context, p string) ([]string, error) {
	full, err := s.abs(opChildren, p)
	if err != nil {
		return nil, err
	}
	var names []string
	err = s.do(ctx, opChildren, p, false, func(bool) (err error) {
		names, _, err = s.conn.Children(full)
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// ChildrenW implements meta.Store.
func (s *Store) ChildrenW(ctx context.Context, p string) ([]string, <-chan meta.Event, error) {
	full, err := s.abs(opChildren, p)
	if err != nil {
		return nil, nil, err
	}
	var (
		names []string
		ch    <-chan gozk.Event
	)
	err = s.do(ctx, opChildren, p, false, func(bool) (err error) {
		names, _, ch, err = s.conn.ChildrenW(full)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(names)
	return names, s.forward(p, ch), nil
}

// Create implements meta.Store.
func (s *Store) Create(ctx context.Context, p string, value []byte, flags meta.CreateFlags) (string, error) {
	full, err := s.abs(opCreate, p)
	if err != nil {
		return "", err
	}
	switch {
	case flags&^(meta.Ephemeral|meta.Sequential) != 0:
		return "", meta.Errorf(opCreate, p, errors.New("meta/zk: unknown create flags"), "%#x", uint8(flags))
	case p == "/":
		return "", meta.Errorf(opCreate, p, meta.ErrExists, "the root always exists")
	}
	if err := meta.CheckValue(value); err != nil {
		return "", &meta.PathError{Op: opCreate, Path: p, Err: err}
	}
	created, err := s.create(ctx, p, full, value, flags)
	if err != nil {
		return "", err
	}
	return s.rel(created), nil
}

// create makes the node full (p is the caller's name for it) and returns
// the created node's full path.
func (s *Store) create(ctx context.Context, p, full string, value []byte, flags meta.CreateFlags) (string, error) {
	var zkFlags int32
	if flags&meta.Ephemeral != 0 {
		zkFlags |= gozk.FlagEphemeral
	}
	sequential := flags&meta.Sequential != 0
	if sequential {
		zkFlags |= gozk.FlagSequence
	}
	// The request may be sent after we return (if ctx ends while it is
	// queued): keep our own copy of the caller's value.
	value = bytes.Clone(value)
	var created string
	err := s.do(ctx, opCreate, p, true, func(lost bool) error {
		got, err := s.conn.Create(full, value, zkFlags, acl)
		if err == nil {
			created = got
			return nil
		}
		if !errors.Is(err, gozk.ErrNodeExists) || !lost || sequential {
			return err
		}
		// An earlier attempt may have made this node: see the package doc.
		data, st, gerr := s.conn.Get(full)
		switch {
		case errors.Is(gerr, gozk.ErrNoNode):
			return errRetry
		case gerr != nil:
			return gerr
		case s.ours(st, data, value, flags):
			created = full
			return nil
		}
		return err
	})
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return "", meta.Errorf(opCreate, p, meta.ErrNotFound, "parent %s does not exist", meta.Parent(p))
	case errors.Is(err, meta.ErrEphemeralParent):
		return "", meta.Errorf(opCreate, p, meta.ErrEphemeralParent, "parent %s is ephemeral", meta.Parent(p))
	case err != nil:
		// Cut short by ctx or Close: the attempt may still be running and
		// writing created, which is not read then.
		return "", err
	}
	return created, nil
}

// ours reports whether a node found by a retried Create is the one an
// earlier, lost attempt made.
func (s *Store) ours(st *gozk.Stat, data, value []byte, flags meta.CreateFlags) bool {
	if !bytes.Equal(data, value) {
		return false
	}
	if flags&meta.Ephemeral != 0 {
		return st.EphemeralOwner != 0 && st.EphemeralOwner == s.conn.SessionID()
	}
	return st.EphemeralOwner == 0 && st.Version == 0
}

// Set implements meta.Store.
func (s *Store) Set(ctx context.Context, p string, value []byte, expected meta.Version) (meta.Stat, error) {
	full, err := s.abs(opSet, p)
	if err != nil {
		return meta.Stat{}, err
	}
	if err := meta.CheckValue(value); err != nil {
		return meta.Stat{}, &meta.PathError{Op: opSet, Path: p, Err: err}
	}
	version, ok := zkVersion(expected)
	if !ok {
		return meta.Stat{}, meta.Errorf(opSet, p, meta.ErrBadVersion, "no node can be at version %d", expected)
	}
	value = bytes.Clone(value)
	var st *gozk.Stat
	err = s.do(ctx, opSet, p, true, func(lost bool) (err error) {
		st, err = s.conn.Set(full, value, version)
		if !errors.Is(err, gozk.ErrBadVersion) || !lost || version == -1 {
			return err
		}
		// An earlier attempt may have set it: see the package doc.
		data, cur, gerr := s.conn.Get(full)
		switch {
		case errors.Is(gerr, gozk.ErrNoNode):
			return err
		case gerr != nil:
			return gerr
		case cur.Version == version+1 && bytes.Equal(data, value):
			st = cur
			return nil
		}
		return err
	})
	if errors.Is(err, meta.ErrBadVersion) {
		return meta.Stat{}, meta.Errorf(opSet, p, meta.ErrBadVersion, "expected version %d", expected)
	}
	if err != nil {
		return meta.Stat{}, err
	}
	return toStat(st), nil
}

// Delete implements meta.Store.
func (s *Store) Delete(ctx context.Context, p string, expected meta.Version) error {
	full, err := s.abs(opDelete, p)
	if err != nil {
		return err
	}
	if p == "/" {
		return meta.Errorf(opDelete, p, meta.ErrInvalidPath, "the root cannot be deleted")
	}
	version, ok := zkVersion(expected)
	if !ok {
		return meta.Errorf(opDelete, p, meta.ErrBadVersion, "no node can be at version %d", expected)
	}
	err = s.do(ctx, opDelete, p, true, func(lost bool) error {
		err := s.conn.Delete(full, version)
		if lost && errors.Is(err, gozk.ErrNoNode) {
			return nil // an earlier attempt deleted it: see the package doc
		}
		return err
	})
	if errors.Is(err, meta.ErrBadVersion) {
		return meta.Errorf(opDelete, p, meta.ErrBadVersion, "expected version %d", expected)
	}
	return err
}

// do runs attempt until it succeeds, fails for good, ctx ends or the store
// closes. Each attempt waits for the session and then runs on its own
// goroutine (go-zookeeper calls block and take no context). lost tells an
// attempt that an earlier one may have reached the server without us
// learning the outcome. Errors come back as *meta.PathError.
func (s *Store) do(ctx context.Context, op, p string, write bool, attempt func(lost bool) error) error {
	if err := ctx.Err(); err != nil {
		return &meta.PathError{Op: op, Path: p, Err: err}
	}
	ctx, cancel := withTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	var (
		lost    bool
		connErr error // why the last attempt did not get an answer
		backoff = minBackoff
	)
	for {
		if err := s.waitSession(ctx); err != nil {
			return s.interrupted(op, p, err, connErr)
		}
		err, stop := s.run(ctx, func() error { return attempt(lost) })
		if stop != nil {
			return s.interrupted(op, p, stop, connErr)
		}
		if err == nil {
			return nil
		}
		if s.isClosed() {
			// go-zookeeper fails requests in many ways while closing.
			return &meta.PathError{Op: op, Path: p, Err: meta.ErrClosed}
		}
		switch loss, maybeSent := connLoss(err); {
		case errors.Is(err, errRetry):
			continue
		case loss:
			lost = lost || maybeSent
		case !write && errors.Is(err, gozk.ErrSessionExpired):
			// A read does not care which session serves it.
		default:
			return &meta.PathError{Op: op, Path: p, Err: mapErr(err)}
		}
		connErr = err
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return s.interrupted(op, p, ctx.Err(), connErr)
		case <-s.closing:
			t.Stop()
			return &meta.PathError{Op: op, Path: p, Err: meta.ErrClosed}
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// run calls f on its own goroutine and waits for it, for ctx or for Close.
// stop is ctx's error or meta.ErrClosed if the wait was cut short; f then
// finishes in the background and its results must not be used.
func (s *Store) run(ctx context.Context, f func() error) (err, stop error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err, nil
	case <-ctx.Done():
		stop = ctx.Err()
	case <-s.closing:
		stop = meta.ErrClosed
	}
	select {
	case err := <-done: // finished at the same moment: keep the result
		return err, nil
	default:
		return nil, stop
	}
}

// interrupted builds the error of a call cut short by its context or by
// Close. A context that ends while the store cannot reach ZooKeeper gives
// meta.ErrUnavailable together with the context's error.
func (s *Store) interrupted(op, p string, stop, connErr error) error {
	if errors.Is(stop, meta.ErrClosed) {
		return &meta.PathError{Op: op, Path: p, Err: meta.ErrClosed}
	}
	if connErr == nil && s.isConnected() {
		return &meta.PathError{Op: op, Path: p, Err: stop}
	}
	why := "no session"
	if connErr != nil {
		why = connErr.Error()
	}
	return &meta.PathError{Op: op, Path: p,
		Err: fmt.Errorf("%w: %w (zookeeper %s: %s)", meta.ErrUnavailable, stop, s.servers, why)}
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// connLoss reports whether err means a request got no answer because the
// connection failed, and whether it may nevertheless have reached the
// server.
func connLoss(err error) (loss, maybeSent bool) {
	switch {
	case errors.Is(err, gozk.ErrNoServer): // flushed before it was sent
		return true, false
	case errors.Is(err, gozk.ErrSessionMoved): // the server ignored it
		return true, false
	case errors.Is(err, gozk.ErrConnectionClosed), errors.Is(err, gozk.ErrClosing):
		return true, true
	}
	// go-zookeeper hands back the raw error when writing a request fails.
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return true, true
	}
	return false, false
}

// mapErr turns a go-zookeeper error into the meta sentinel it means.
func mapErr(err error) error {
	switch {
	case errors.Is(err, gozk.ErrNoNode):
		return meta.ErrNotFound
	case errors.Is(err, gozk.ErrNodeExists):
		return meta.ErrExists
	case errors.Is(err, gozk.ErrBadVersion):
		return meta.ErrBadVersion
	case errors.Is(err, gozk.ErrNotEmpty):
		return meta.ErrNotEmpty
	case errors.Is(err, gozk.ErrNoChildrenForEphemerals):
		return meta.ErrEphemeralParent
	case errors.Is(err, gozk.ErrSessionExpired):
		return meta.ErrSessionExpired
	case errors.Is(err, gozk.ErrInvalidPath), errors.Is(err, gozk.ErrBadArguments):
		// BadArguments: ZooKeeper refuses the path (e.g. deleting /zookeeper).
		return fmt.Errorf("%w: %v", meta.ErrInvalidPath, err)
	}
	return err
}

// abs validates the caller's path and returns it under the chroot.
func (s *Store) abs(op, p string) (string, error) {
	if err := meta.ValidatePath(p); err != nil {
		return "", &meta.PathError{Op: op, Path: p, Err: err}
	}
	switch {
	case s.chroot == "":
		return p, nil
	case p == "/":
		return s.chroot, nil
	}
	return s.chroot + p, nil
}

// rel strips the chroot from a path ZooKeeper returned.
func (s *Store) rel(full string) string {
	if s.chroot == "" {
		return full
	}
	if rest := strings.TrimPrefix(full, s.chroot); rest != "" {
		return rest
	}
	return "/"
}

// zkVersion converts an expected version; ok is false for versions no
// znode can have.
func zkVersion(v meta.Version) (version int32, ok bool) {
	if v == meta.AnyVersion {
		return -1, true
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, false
	}
	return int32(v), true
}

func toStat(st *gozk.Stat) meta.Stat {
	return meta.Stat{
		Version:     meta.Version(st.Version),
		Created:     time.UnixMilli(st.Ctime),
		Modified:    time.UnixMilli(st.Mtime),
		Ephemeral:   st.EphemeralOwner != 0,
		NumChildren: int(st.NumChildren),
	}
}
