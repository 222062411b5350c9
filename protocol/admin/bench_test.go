package admin

import (
	"net"
	"net/http/httptest"
	"testing"
)

func benchServer(b *testing.B) *Server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	reg := newTestRegistry(b)
	s, err := New(Config{Listener: ln, Gatherer: reg, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkStatus: the cost of a health check, without the network.
func BenchmarkStatus(b *testing.B) {
	s := benchServer(b)
	req := httptest.NewRequest("GET", "/status", nil)
	for b.Loop() {
		s.mux.ServeHTTP(httptest.NewRecorder(), req)
	}
}

// BenchmarkMetrics: the cost of a scrape of the Go runtime metrics.
func BenchmarkMetrics(b *testing.B) {
	s := benchServer(b)
	req := httptest.NewRequest("GET", "/metrics", nil)
	for b.Loop() {
		s.mux.ServeHTTP(httptest.NewRecorder(), req)
	}
}
