package zk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/magnetar-io/magnetar/meta"
)

// Defaults for Options.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultRequestTimeout = 30 * time.Second
)

// closeTimeout bounds how long Close waits for go-zookeeper to finish
// closing the session (it gives the server 1 s to answer the close request
// and needs up to another second to notice a Close while reconnecting).
const closeTimeout = 5 * time.Second

// Options configure Open. Zero values take the defaults noted.
type Options struct {
	// SessionTimeout is the session timeout asked of ZooKeeper, which
	// negotiates it within its minSessionTimeout and maxSessionTimeout.
	// Default DefaultSessionTimeout.
	SessionTimeout time.Duration
	// RequestTimeout bounds calls (and Open) whose context has no deadline.
	// Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives session changes and, at debug and info level,
	// go-zookeeper's own log lines. Default slog.Default().
	Logger *slog.Logger
	// Dialer, if set, opens connections to ZooKeeper servers (tests use it
	// to cut connections).
	Dialer gozk.Dialer
}

func (o *Options) setDefaults() error {
	switch {
	case o.SessionTimeout < 0:
		return fmt.Errorf("meta/zk: negative SessionTimeout %v", o.SessionTimeout)
	case o.RequestTimeout < 0:
		return fmt.Errorf("meta/zk: negative RequestTimeout %v", o.RequestTimeout)
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Store is a meta.Store on one ZooKeeper session. It is safe for concurrent
// use.
type Store struct {
	conn     *gozk.Conn // set once in Open (under mu, for the event callback)
	servers  string     // for messages: "host:port,host:port"
	chroot   string     // "" or a clean path without trailing "/"
	opts     Options
	log      *slog.Logger
	sessions meta.SessionBroadcaster

	closing  chan struct{} // closed when Close starts
	loopDone chan struct{} // closed when go-zookeeper's connection loop has ended

	mu sync.Mutex
	// ready is closed while the session is established (go-zookeeper state
	// StateHasSession) and replaced by an open channel when it is lost.
	ready     chan struct{}
	connected bool
	published meta.SessionState // last state published, to report each change once
	sessionID int64             // last established session, for logs
	lastErr   string            // last connection failure, for Open's error
	closed    bool
	watches   sync.WaitGroup // forwarding goroutines; Add only while !closed
}

var _ meta.Store = (*Store)(nil)

// Open connects to a ZooKeeper connect string "host:port[,host:port...][/chroot]"
// and waits, bounded by ctx (or Options.RequestTimeout if ctx has no
// deadline), until a session is established. If no server can be reached
// it fails with an error wrapping meta.ErrUnavailable and the context's
// error, and leaves nothing running. A chroot node and its parents are
// created if missing.
func Open(ctx context.Context, connect string, opts Options) (*Store, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	servers, chroot, err := parseConnect(connect)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("meta/zk: open %s: %w", connect, err)
	}
	ctx, cancel := withTimeout(ctx, opts.RequestTimeout)
	defer cancel()

	s := &Store{
		servers:  strings.Join(servers, ","),
		opts:     opts,
		log:      opts.Logger.With("component", "meta/zk"),
		closing:  make(chan struct{}),
		loopDone: make(chan struct{}),
		ready:    make(chan struct{}),
	}
	dialer := opts.Dialer
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, events, err := gozk.Connect(servers, opts.SessionTimeout,
		gozk.WithDialer(dialer), gozk.WithLogger(zkLogger{s}), gozk.WithEventCallback(s.onEvent))
	if err != nil { // resolving the server names failed
		return nil, fmt.Errorf("meta/zk: open %s: %w: %w", s.servers, meta.ErrUnavailable, err)
	}
	s.mu.Lock() // the event callback may already be running
	s.conn = conn
	ready := s.ready
	s.mu.Unlock()
	go func() {
		// Events are taken from the callback; the channel only tells when
		// go-zookeeper is done (it closes it last).
		for range events {
		}
		close(s.loopDone)
	}()

	select {
	case <-ready:
	case <-ctx.Done():
		s.mu.Lock()
		last := s.lastErr
		s.mu.Unlock()
		s.Close()
		if last == "" {
			last = "no answer"
		}
		return nil, fmt.Errorf("meta/zk: open: %w: no ZooKeeper session with %s: %w (last error: %s)",
			meta.ErrUnavailable, s.servers, ctx.Err(), last)
	}

	if chroot != "" {
		if err := s.ensureNodes(ctx, chroot); err != nil {
			s.Close()
			return nil, fmt.Errorf("meta/zk: open %s: creating chroot: %w", connect, err)
		}
		s.chroot = chroot
	}
	return s, nil
}

// parseConnect splits "host:port,host:port/chroot" into servers and chroot
// ("" for none or "/").
func parseConnect(connect string) (servers []string, chroot string, err error) {
	hosts := connect
	if i := strings.IndexByte(connect, '/'); i >= 0 {
		hosts, chroot = connect[:i], connect[i:]
		if err := meta.ValidatePath(chroot); err != nil {
			return nil, "", fmt.Errorf("meta/zk: connect string %q: chroot: %w", connect, err)
		}
		if chroot == "/" {
			chroot = ""
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			servers = append(servers, h)
		}
	}
	if len(servers) == 0 {
		return nil, "", fmt.Errorf("meta/zk: connect string %q names no server", connect)
	}
	return servers, chroot, nil
}

// ensureNodes creates the absolute path p and its missing ancestors as
// empty persistent nodes, outside any chroot.
func (s *Store) ensureNodes(ctx context.Context, p string) error {
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		_, err := s.create(ctx, p[:i], p[:i], nil, 0)
		if err != nil && !errors.Is(err, meta.ErrExists) {
			return err
		}
	}
	return nil
}

// onEvent is go-zookeeper's event callback. It runs on go-zookeeper's
// goroutines and must not block.
func (s *Store) onEvent(ev gozk.Event) {
	if ev.Type != gozk.EventSession {
		return // watch events travel on the watch channels
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	var state meta.SessionState
	switch ev.State {
	case gozk.StateHasSession:
		if !s.connected {
			s.connected = true
			close(s.ready)
		}
		if s.conn != nil { // nil only if the session came before Open stored conn
			s.sessionID = s.conn.SessionID()
		}
		state = meta.SessionConnected
	case gozk.StateDisconnected:
		s.disconnected()
		state = meta.SessionDisconnected
	case gozk.StateExpired:
		s.disconnected()
		state = meta.SessionExpired
	default: // connecting, TCP connected: no change for meta
		return
	}
	switch {
	case state == s.published:
		return // go-zookeeper repeats Disconnected on every failed reconnect
	case state == meta.SessionDisconnected && s.published == meta.SessionExpired:
		return // part of the expiry, not news
	default:
		s.sessions.Publish(meta.SessionEvent{State: state})
	}
	s.published = state
	level := slog.LevelInfo
	if state != meta.SessionConnected {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "zookeeper session "+state.String(),
		"state", state.String(), "server", ev.Server, "session", fmt.Sprintf("0x%x", s.sessionID))
}

// disconnected records the loss of the session; s.mu is held.
func (s *Store) disconnected() {
	if s.connected {
		s.connected = false
		s.ready = make(chan struct{})
	}
}

func (s *Store) noteFailure(msg string) {
	s.mu.Lock()
	s.lastErr = msg
	s.mu.Unlock()
}

// waitSession waits until the session is established.
func (s *Store) waitSession(ctx context.Context) error {
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-s.closing:
		return meta.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isConnected reports whether the session is established right now.
func (s *Store) isConnected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// SessionEvents implements meta.Store.
func (s *Store) SessionEvents() (<-chan meta.SessionEvent, func()) {
	return s.sessions.SessionEvents()
}

// Close ends the session (the server deletes its ephemeral nodes), fires
// EventWatchLost with meta.ErrClosed on every pending watch and waits for
// go-zookeeper to stop. Calls after Close fail with meta.ErrClosed. Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	sid := s.sessionID
	s.mu.Unlock()

	s.conn.Close() // sends closeSession and waits up to 1 s for the answer
	select {
	case <-s.loopDone:
	case <-time.After(closeTimeout):
		s.log.Warn("zookeeper connection did not shut down in time", "timeout", closeTimeout, "servers", s.servers)
	}
	s.watches.Wait() // every forwarder has seen s.closing
	s.sessions.Close()
	if sid != 0 { // Open's failures have no session to report
		s.log.Info("zookeeper session closed", "state", meta.SessionClosed.String(), "server", s.conn.Server(),
			"session", fmt.Sprintf("0x%x", sid))
	}
	return nil
}

// zkLogger routes go-zookeeper's log lines to slog: failures at info level,
// the rest (connection chatter) at debug. Failures are also kept for Open's
// error message.
type zkLogger struct{ s *Store }

func (l zkLogger) Printf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	level := slog.LevelDebug
	if strings.Contains(msg, "fail") || strings.Contains(msg, "error") {
		level = slog.LevelInfo
		l.s.noteFailure(msg)
	}
	l.s.log.Log(context.Background(), level, msg, "source", "go-zookeeper")
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
