// Package pulsar serves the Pulsar binary protocol over the broker: one
// connection per client, its commands mapped onto broker topics,
// producers and subscriptions.
//
// A connection has a reader (this goroutine decodes frames and handles
// the quick commands — SEND, FLOW, ACK, PING — in order) and a writer
// goroutine that writes whatever the connection queued, in order, in as
// few writes as it can. Commands that wait on the metadata store or the
// bookies (LOOKUP, PRODUCER, SUBSCRIBE, SEEK, …) run on their own
// goroutines and answer when done, as Pulsar's broker does: the client
// matches answers by request id.
//
// Bad input never brings the broker down: a frame that does not decode
// closes the connection with a log line; a SEND with a bad checksum is
// answered with SEND_ERROR (ChecksumError) and nothing is stored; a
// command the broker does not implement is answered with ERROR naming it.
package pulsar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/protocol/pulsar/frame"
)

// Defaults for Config fields left zero.
const (
	DefaultKeepAliveInterval = 30 * time.Second
)

// Config configures a Server. It is validated once, by NewServer.
type Config struct {
	// Broker serves the topics. Required.
	Broker *broker.Broker
	// AdvertisedURL is the broker service URL answered to lookups
	// ("pulsar://host:port"). Required.
	AdvertisedURL string
	// MaxMessageSize is announced in CONNECTED and enforced on every frame
	// (plus frame.FramePadding). Default frame.DefaultMaxMessageSize.
	MaxMessageSize int
	// KeepAliveInterval: the broker pings an idle client this often and
	// closes a connection that stays silent for twice as long. Default
	// 30 s.
	KeepAliveInterval time.Duration
	// ServerVersion is sent in CONNECTED.
	ServerVersion string
	// PublishLatency, if set, observes the time in the broker of each
	// SEND answered with a SEND_RECEIPT (a duplicate's too), in seconds:
	// from the reader taking its frame to the receipt being queued
	// (Pulsar's pulsar_broker_publish_latency).
	PublishLatency prometheus.Observer
	Logger         *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Broker == nil {
		return c, errors.New("pulsar: Config.Broker is required")
	}
	if c.AdvertisedURL == "" {
		return c, errors.New("pulsar: Config.AdvertisedURL is required")
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = frame.DefaultMaxMessageSize
	}
	if c.MaxMessageSize < 1024 {
		return c, fmt.Errorf("pulsar: MaxMessageSize %d: want at least 1024", c.MaxMessageSize)
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = DefaultKeepAliveInterval
	}
	if c.KeepAliveInterval < 0 {
		return c, fmt.Errorf("pulsar: KeepAliveInterval %v: want > 0", c.KeepAliveInterval)
	}
	if c.ServerVersion == "" {
		c.ServerVersion = "magnetar"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Server accepts Pulsar protocol connections.
type Server struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool
	wg        sync.WaitGroup
}

// NewServer returns a server for cfg.
func NewServer(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, log: cfg.Logger, listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}, nil
}

// Serve accepts connections on ln until Shutdown. It returns nil after
// Shutdown, or the accept error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("pulsar: accept failed; retrying", "err", err, "in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// StopAccepting closes the listeners: no new connections. Those open go
// on until Shutdown.
func (s *Server) StopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
}

// Shutdown stops accepting, then closes every connection once what is
// queued for it is written (receipts of the last messages stored; at most
// until ctx ends), and waits for their handlers, or for ctx. Clients
// reconnect elsewhere or later. Close the broker's topics between
// StopAccepting and Shutdown, so that their last receipts and
// CLOSE_PRODUCER/CLOSE_CONSUMER reach the clients.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StopAccepting()
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.drain(ctx)
		c.close()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
