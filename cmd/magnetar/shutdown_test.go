package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type awaitResult struct{ err error }

// startAwait runs awaitShutdown in a goroutine with fake signals.
func startAwait(stop func(context.Context) error, failed <-chan error, timeout time.Duration) (chan os.Signal, <-chan error, *syncBuffer) {
	sigs := make(chan os.Signal, 2)
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- awaitShutdown(slog.New(slog.NewTextHandler(logs, nil)), sigs, failed, stop, timeout)
	}()
	return sigs, done, logs
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("awaitShutdown did not return")
		return nil
	}
}

func TestAwaitShutdownClean(t *testing.T) {
	var gotDeadline bool
	stop := func(ctx context.Context) error {
		_, gotDeadline = ctx.Deadline()
		return nil
	}
	sigs, done, logs := startAwait(stop, nil, time.Minute)
	sigs <- syscall.SIGTERM
	if err := waitDone(t, done); err != nil {
		t.Fatalf("awaitShutdown = %v, want nil", err)
	}
	if !gotDeadline {
		t.Error("stop's context has no deadline")
	}
	for _, w := range []string{`msg="shutting down" signal=terminated`, `msg="shutdown complete"`} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("logs lack %q:\n%s", w, logs)
		}
	}
}

// TestAwaitShutdownSecondSignal: the process is held in shutdown (stop
// blocks until the test releases it); a second signal then returns
// errSecondSignal at once, without waiting for stop.
func TestAwaitShutdownSecondSignal(t *testing.T) {
	inStop := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	stop := func(ctx context.Context) error {
		close(inStop)
		<-release
		return nil
	}
	sigs, done, logs := startAwait(stop, nil, time.Minute)
	sigs <- syscall.SIGTERM
	<-inStop
	sigs <- syscall.SIGINT
	if err := waitDone(t, done); !errors.Is(err, errSecondSignal) {
		t.Fatalf("awaitShutdown = %v, want errSecondSignal", err)
	}
	if !strings.Contains(logs.String(), "second signal") || !strings.Contains(logs.String(), "signal=interrupt") {
		t.Errorf("logs do not report the second signal:\n%s", logs)
	}
}

// TestAwaitShutdownTimeout: stop gets a context that ends after the
// timeout; its failure is returned.
func TestAwaitShutdownTimeout(t *testing.T) {
	stop := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	sigs, done, _ := startAwait(stop, nil, 20*time.Millisecond)
	sigs <- syscall.SIGTERM
	if err := waitDone(t, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("awaitShutdown = %v, want DeadlineExceeded", err)
	}
}

// TestAwaitShutdownServerFailure: a server that stops serving triggers the
// shutdown, and its error is returned.
func TestAwaitShutdownServerFailure(t *testing.T) {
	var stopped bool
	stop := func(context.Context) error { stopped = true; return nil }
	failed := make(chan error, 1)
	boom := errors.New("accept: too many open files")
	_, done, logs := startAwait(stop, failed, time.Minute)
	failed <- boom
	if err := waitDone(t, done); !errors.Is(err, boom) {
		t.Fatalf("awaitShutdown = %v, want %v", err, boom)
	}
	if !stopped {
		t.Error("stop was not called")
	}
	if !strings.Contains(logs.String(), "server failed") {
		t.Errorf("logs lack the failure:\n%s", logs)
	}
}

// TestSignalDuringStartup: a signal before startup finishes (it cannot
// finish here: the ZooKeeper it connects to is not there) cancels it, and
// standalone returns nil (exit 0) without serving.
func TestSignalDuringStartup(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	logs := &syncBuffer{}
	a := newApp(io.Discard, io.Discard)
	a.logger = slog.New(slog.NewTextHandler(logs, nil))
	a.notify = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	m, err := parseMetadataStore("zk:127.0.0.1:1") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	cfg := standaloneConfig{
		nodeConfig:   nodeConfig{DataDir: t.TempDir(), MetadataStore: m, ZKSessionTimeout: 10 * time.Second},
		PulsarListen: "127.0.0.1:6650",
		KafkaListen:  "127.0.0.1:9092",
		HTTPListen:   "127.0.0.1:0",
		BookieListen: "127.0.0.1:0",
	}
	done := make(chan error, 1)
	go func() { done <- a.standalone(cfg) }()
	sigs <- syscall.SIGTERM
	if err := waitDone(t, done); err != nil {
		t.Fatalf("standalone = %v, want nil", err)
	}
	if !strings.Contains(logs.String(), "signal during startup") {
		t.Errorf("logs lack the startup signal:\n%s", logs)
	}
	if strings.Contains(logs.String(), "ready") {
		t.Errorf("reported ready:\n%s", logs)
	}
}
