package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newTestRegistry(t testing.TB) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "magnetar_test_gauge", Help: "test"})
	g.Set(42)
	reg.MustRegister(g)
	return reg
}

// startServer serves on a loopback port and returns the server and its
// base URL. The server is shut down when the test ends.
func startServer(t *testing.T, reg prometheus.Gatherer) (*Server, string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Listener: ln, Gatherer: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s, "http://" + s.Addr().String(), done
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func TestNewValidatesConfig(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := New(Config{Gatherer: prometheus.NewRegistry()}); err == nil {
		t.Error("New without Listener: want error")
	}
	if _, err := New(Config{Listener: ln}); err == nil {
		t.Error("New without Gatherer: want error")
	}
}

func TestRoutes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s, err := New(Config{Listener: ln, Gatherer: newTestRegistry(t), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("GET /admin/v2/clusters", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `["standalone"]`)
	}))

	for _, tc := range []struct {
		method, path string
		code         int
		body         string // substring
	}{
		{"GET", "/status", 200, "OK"},
		{"HEAD", "/status", 200, ""},
		{"POST", "/status", 405, ""},
		{"GET", "/metrics", 200, "magnetar_test_gauge 42"},
		{"GET", "/metrics", 200, "go_goroutines"},
		{"GET", "/admin/v2/clusters", 200, `["standalone"]`},
		{"GET", "/nope", 404, ""},
	} {
		rec := httptest.NewRecorder()
		s.mux.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
			t.Errorf("%s %s = %d %q, want %d containing %q", tc.method, tc.path, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}

	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics Content-Type = %q, want Prometheus text format", ct)
	}
	rec = httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	if got := strings.TrimSpace(rec.Body.String()); got != "OK" {
		t.Errorf("/status body = %q, want OK", got)
	}
}

func TestServeAndShutdown(t *testing.T) {
	s, base, done := startServer(t, newTestRegistry(t))
	c := &http.Client{Timeout: 5 * time.Second}
	if code, body := get(t, c, base+"/status"); code != 200 || strings.TrimSpace(body) != "OK" {
		t.Fatalf("/status = %d %q, want 200 OK", code, body)
	}
	if code, body := get(t, c, base+"/metrics"); code != 200 || !strings.Contains(body, "magnetar_test_gauge 42") {
		t.Fatalf("/metrics = %d, body without the test gauge:\n%s", code, body)
	}

	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after Shutdown = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
	if _, err := net.DialTimeout("tcp", s.Addr().String(), time.Second); err == nil {
		t.Fatal("listener still accepts after Shutdown")
	}
}

// TestShutdownDrains: a request in flight when Shutdown begins completes;
// /status answers 503 from then on; Shutdown returns only after the
// request is done.
func TestShutdownDrains(t *testing.T) {
	reg := newTestRegistry(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Listener: ln, Gatherer: reg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{})
	release := make(chan struct{})
	var statusDuringDrain *httptest.ResponseRecorder
	s.Handle("GET /slow", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	}))
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()

	type result struct {
		code int
		body string
		err  error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr().String() + "/slow")
		if err != nil {
			slow <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		slow <- result{resp.StatusCode, string(b), err}
	}()
	<-entered

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()

	// Wait until Shutdown has begun (the listener is closed), then check
	// that /status reports it and that Shutdown is still waiting.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr().String(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting 5s after Shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	statusDuringDrain = httptest.NewRecorder()
	s.mux.ServeHTTP(statusDuringDrain, httptest.NewRequest("GET", "/status", nil))
	if statusDuringDrain.Code != http.StatusServiceUnavailable {
		t.Errorf("/status during shutdown = %d, want 503", statusDuringDrain.Code)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
	default:
	}

	close(release)
	r := <-slow
	if r.err != nil || r.code != 200 || r.body != "done" {
		t.Fatalf("in-flight request = %d %q %v, want 200 done", r.code, r.body, r.err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

// TestShutdownDeadline: when ctx ends before in-flight requests finish,
// Shutdown closes them and reports the context error.
func TestShutdownDeadline(t *testing.T) {
	s, base, done := startServer(t, newTestRegistry(t))
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	s.Handle("GET /stuck", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	clientErr := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/stuck")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		clientErr <- err
	}()
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want context.DeadlineExceeded", err)
	}
	if err := <-clientErr; err == nil {
		t.Error("stuck request completed; want its connection closed")
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

// TestShutdownWithoutServe: Shutdown releases the listener even if Serve
// never ran, so a failed startup does not leak the port.
func TestShutdownWithoutServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	s, err := New(Config{Listener: ln, Gatherer: prometheus.NewRegistry(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port not released after Shutdown: %v", err)
	}
	ln2.Close()
	if err := s.Serve(); err != nil {
		t.Fatalf("Serve after Shutdown = %v, want nil", err)
	}
}

func TestServeTwice(t *testing.T) {
	s, base, _ := startServer(t, prometheus.NewRegistry())
	// Once /status answers, the first Serve is running; a second refuses.
	if code, _ := get(t, &http.Client{Timeout: 5 * time.Second}, base+"/status"); code != 200 {
		t.Fatalf("/status = %d", code)
	}
	if err := s.Serve(); err == nil {
		t.Fatal("second Serve: want error")
	}
}

// TestShutdownClosesUnusedConnections: a client connection that never
// sent a request (a transport's spare) does not hold Shutdown.
func TestShutdownClosesUnusedConnections(t *testing.T) {
	s, url, _ := startServer(t, newTestRegistry(t))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server has accepted it once it answers a request on another one.
	if code, _ := get(t, http.DefaultClient, url+"/status"); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with an unused connection open: %v (after %v)", err, time.Since(start))
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
	conn.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the unused connection is still open")
	}
}
