// Package admin is the HTTP server of a broker's http listener (port 8080 by
// default): health, Prometheus metrics and, in later releases, the Pulsar
// admin (/admin/v2/...) and lookup (/lookup/v2/...) REST APIs.
//
// Routes served today:
//
//	GET /status   200 "OK" while serving; 503 once shutdown has begun
//	GET /metrics  Prometheus text (or protobuf, by content negotiation)
//	              from the Config's Gatherer
//
// Further routes are added with Handle before Serve.
//
// Lifecycle: the caller opens the listener (so that it can report a busy
// port, and every listener is bound before the process says it is ready),
// passes it to New, runs Serve in a goroutine and calls Shutdown to stop.
// Shutdown stops accepting at once, flips /status to 503, and waits for
// in-flight requests until its context ends; then it closes what is left.
// Connections that have sent no request are closed after a short grace.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures a Server.
type Config struct {
	// Listener is where the server accepts connections. Required. The
	// Server owns it from New on: Shutdown closes it, even when Serve was
	// never called.
	Listener net.Listener
	// Gatherer supplies /metrics. Required; usually a *prometheus.Registry.
	Gatherer prometheus.Gatherer
	// Logger receives server errors (failed accepts, broken metric
	// collection). Nil means slog.Default().
	Logger *slog.Logger
	// ReadHeaderTimeout bounds how long a client may take to send request
	// headers. Zero means 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Zero
	// means 2m.
	IdleTimeout time.Duration
}

// Server is the HTTP server of the http listener.
type Server struct {
	ln       net.Listener
	mux      *http.ServeMux
	srv      *http.Server
	logger   *slog.Logger
	draining atomic.Bool // set when Shutdown begins; /status answers 503
	served   atomic.Bool // Serve was called

	mu    sync.Mutex
	fresh map[net.Conn]struct{} // connections that have not sent a request yet
}

// freshConnGrace is how long Shutdown lets connections that have not
// sent a request yet start one before closing them. (net/http counts
// them as busy for 5s, so a client's spare connection — Go's transport
// dials them when requests run concurrently — would hold Shutdown that
// long.)
const freshConnGrace = 500 * time.Millisecond

// New validates cfg and returns a Server with the built-in routes
// registered. It does not start serving.
func New(cfg Config) (*Server, error) {
	if cfg.Listener == nil {
		return nil, errors.New("admin: Config.Listener is required")
	}
	if cfg.Gatherer == nil {
		return nil, errors.New("admin: Config.Gatherer is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadHeaderTimeout == 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	s := &Server{
		ln:     cfg.Listener,
		mux:    http.NewServeMux(),
		logger: cfg.Logger,
		fresh:  map[net.Conn]struct{}{},
	}
	s.srv = &http.Server{
		ConnState:         s.connState,
		Handler:           s.mux,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	s.mux.HandleFunc("GET /status", s.status)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{cfg.Logger},
		ErrorHandling: promhttp.ContinueOnError,
	}))
	return s, nil
}

// Handle registers h for pattern (net/http.ServeMux syntax, e.g.
// "GET /admin/v2/tenants"). Call it before Serve. It panics on a pattern
// that conflicts with one already registered, as ServeMux does.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// Addr returns the listener's address (the bound port when the configured
// one was 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts and serves connections until Shutdown. It returns nil after
// Shutdown and the accept error otherwise. Call it once.
func (s *Server) Serve() error {
	if !s.served.CompareAndSwap(false, true) {
		return errors.New("admin: Serve called twice")
	}
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("admin: serving http on %s: %w", s.ln.Addr(), err)
}

// Shutdown stops accepting connections, makes /status answer 503, and waits
// for in-flight requests to finish or ctx to end. If ctx ends first it
// closes the remaining connections and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.srv.Shutdown(ctx) }()
	var err error
	grace := time.NewTimer(freshConnGrace)
	select {
	case err = <-done:
	case <-grace.C:
		s.closeFresh()
		err = <-done
	}
	grace.Stop()
	// Shutdown closes only listeners Serve is using; close ours in case
	// Serve was never called. A second Close just fails.
	_ = s.ln.Close()
	if err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("admin: draining http connections: %w", err)
	}
	return nil
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == http.StateNew {
		s.fresh[c] = struct{}{}
	} else {
		delete(s.fresh, c)
	}
}

// closeFresh closes the connections that have not sent a request.
func (s *Server) closeFresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.fresh {
		c.Close()
		delete(s.fresh, c)
	}
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "shutting down")
		return
	}
	fmt.Fprintln(w, "OK")
}

// slogPrinter adapts a Logger to promhttp.Logger.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	p.l.Warn("metrics collection failed", "err", fmt.Sprint(v...))
}
