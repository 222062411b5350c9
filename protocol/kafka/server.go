// Package kafka serves the Kafka wire protocol on the broker's topics.
//
// Codecs come from github.com/twmb/franz-go/pkg/kmsg; the behaviour is
// ours, one file per API area, each headed by the versions it serves and
// how. A connection reads requests in a loop and answers them in request
// order (clients pipeline): each request gets a slot in the connection's
// response queue, filled when its handler finishes — at once for most
// APIs, when the appends complete for Produce, when data or the wait's end
// comes for Fetch.
//
// Framing (big-endian):
//
//	request:  size i32 | api_key i16 | api_version i16 | correlation_id i32 |
//	          client_id nullable string (i16 length) | [tagged fields, if the
//	          request is flexible (header v2)] | body
//	response: size i32 | correlation_id i32 | [tagged fields, if flexible
//	          (header v1) — never for ApiVersions] | body
//
// Malformed, truncated, oversized (Config.MaxRequestSize) or unknown
// requests close the connection with a log line; nothing from them is
// stored.
package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// Defaults of Config.
const (
	DefaultMaxRequestSize = 100 << 20 // Kafka's socket.request.max.bytes
	// DefaultReadAheadSize bounds the entries read ahead of consumers.
	DefaultReadAheadSize  = 64 << 20
	DefaultMaxMessageSize = 5 << 20 // largest record batch, as for Pulsar messages
	// maxInFlight bounds the requests of one connection read but not yet
	// answered; the reader waits beyond it.
	maxInFlight = 64
)

// Config configures a Server. It is validated once, by NewServer.
type Config struct {
	// Broker serves the topics. Required.
	Broker *broker.Broker
	// AdvertisedHost and AdvertisedPort are what Metadata tells clients
	// to connect to. Required.
	AdvertisedHost string
	AdvertisedPort int32
	// NodeID is this broker's Kafka node id: set from the broker's
	// (Broker.Self), which keeps it across restarts.
	NodeID int32
	// ClusterID is reported in Metadata and DescribeCluster (default: the
	// broker's cluster name).
	ClusterID string
	// MaxRequestSize: a request larger than this closes the connection
	// (default DefaultMaxRequestSize).
	MaxRequestSize int
	// ReadAheadSize bounds the bytes of entries read ahead of consumers
	// that are behind, all partitions together (readahead.go). 0:
	// DefaultReadAheadSize; negative: no read-ahead.
	ReadAheadSize int64
	// MaxMessageSize: a record batch larger than this is refused with
	// MESSAGE_TOO_LARGE (default DefaultMaxMessageSize).
	MaxMessageSize int
	// InitialRebalanceDelay: a consumer group that was empty waits this
	// long for more members before its first assignment (Kafka's
	// group.initial.rebalance.delay.ms). 0: DefaultInitialRebalanceDelay;
	// negative: no wait.
	InitialRebalanceDelay time.Duration
	// Clock is the time of long-poll deadlines, timestamps and group
	// sessions (default time.Now).
	Clock func() time.Time
	// RequestLatency, if set, observes each request's time in the
	// broker, in seconds: from the connection's reader taking its last
	// byte to its response written (Kafka's RequestMetrics TotalTimeMs; a
	// Fetch's includes its wait for data; a request whose handler
	// panicked is not counted). Its one label is the API's name
	// (Produce, Fetch, …).
	RequestLatency prometheus.ObserverVec
	Logger         *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Broker == nil:
		return c, errors.New("kafka: Config.Broker is required")
	case c.AdvertisedHost == "" || c.AdvertisedPort <= 0:
		return c, errors.New("kafka: Config.AdvertisedHost and AdvertisedPort are required")
	}
	if c.ClusterID == "" {
		c.ClusterID = c.Broker.ClusterName()
	}
	c.NodeID = c.Broker.Self().NodeID
	if c.MaxRequestSize == 0 {
		c.MaxRequestSize = DefaultMaxRequestSize
	}
	if c.ReadAheadSize == 0 {
		c.ReadAheadSize = DefaultReadAheadSize
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.MaxRequestSize < 1024 || c.MaxMessageSize < 1024 {
		return c, fmt.Errorf("kafka: MaxRequestSize %d and MaxMessageSize %d must be at least 1024", c.MaxRequestSize, c.MaxMessageSize)
	}
	if c.InitialRebalanceDelay == 0 {
		c.InitialRebalanceDelay = DefaultInitialRebalanceDelay
	}
	if c.InitialRebalanceDelay < 0 {
		c.InitialRebalanceDelay = 0
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Server serves the Kafka protocol.
type Server struct {
	cfg    Config
	b      *broker.Broker
	log    *slog.Logger
	groups *groups    // the consumer group coordinator (groups.go)
	ahead  *readAhead // entries read ahead of consumers (readahead.go)
	// latency observes request latency by API key (nil: not observed).
	latency map[int16]prometheus.Observer

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	stopped   bool
	wg        sync.WaitGroup
}

// NewServer returns a server, with the consumer groups stored in the
// metadata store restored; Serve starts it on a listener.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, b: cfg.Broker, log: cfg.Logger,
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}}
	s.ahead = newReadAhead(cfg.ReadAheadSize, s.log)
	if cfg.RequestLatency != nil {
		s.latency = make(map[int16]prometheus.Observer, len(apis))
		for key := range apis {
			o, err := cfg.RequestLatency.GetMetricWithLabelValues(kmsg.NameForKey(key))
			if err != nil {
				return nil, fmt.Errorf("kafka: Config.RequestLatency: %w", err)
			}
			s.latency[key] = o
		}
	}
	s.groups = newGroups(s)
	if err := s.groups.load(ctx); err != nil {
		return nil, fmt.Errorf("kafka: restoring consumer groups: %w", err)
	}
	go s.groups.run()
	return s, nil
}

// Serve accepts connections on ln until StopAccepting or Shutdown; it
// returns nil then, or the accept error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	s.log.Info("serving the Kafka protocol", "addr", ln.Addr().String(),
		"advertised", net.JoinHostPort(s.cfg.AdvertisedHost, fmt.Sprint(s.cfg.AdvertisedPort)))
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopped := s.stopped
			s.mu.Unlock()
			if stopped {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.stopped {
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

// StopAccepting closes the listeners; connections stay.
func (s *Server) StopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for ln := range s.listeners {
		ln.Close()
	}
}

// Shutdown stops accepting, lets each connection answer the requests it
// has read (within ctx), and closes it. Calling it again is harmless.
func (s *Server) Shutdown(ctx context.Context) error {
	s.StopAccepting()
	s.mu.Lock()
	for c := range s.conns {
		c.drain()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		err = ctx.Err()
	}
	s.groups.close() // writes the last group changes
	return err
}

// conn is one client connection.
type conn struct {
	s   *Server
	nc  net.Conn
	log *slog.Logger

	// ctx ends when the connection closes: long polls and appends waiting
	// for it give up.
	ctx    context.Context
	cancel context.CancelFunc

	queue    chan *slot    // responses in request order
	draining chan struct{} // closed by drain: read no more requests
	drainOne sync.Once
}

// slot is the response to one request. done closes when resp is set (or
// nothing is to be sent: resp nil).
type slot struct {
	key, version int16
	correlation  int32
	clientID     string
	done         chan struct{}
	resp         kmsg.Response
	records      []*records // a fetch response's record batches, partition by partition
	read         time.Time  // when the request was read (set with Config.RequestLatency)
	// framed holds a Produce request's records, by topic and partition,
	// with ledger.AppendRoom free bytes in front (producereq.go); nil
	// where the request was read whole.
	framed [][][]byte
}

// abandon answers nothing for a request whose handler failed (a panic):
// the connection closes, and the request is not counted in
// Config.RequestLatency.
func (sl *slot) abandon() {
	sl.read = time.Time{}
	sl.finish(nil)
}

func (sl *slot) finish(resp kmsg.Response) {
	sl.resp = resp
	close(sl.done)
}

// finishFetch answers a fetch whose record batches are in recs, one per
// partition of resp in order (see fetchwire.go).
func (sl *slot) finishFetch(resp *kmsg.FetchResponse, recs []*records) {
	sl.records = recs
	sl.finish(resp)
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{s: s, nc: nc, log: s.log.With("remote", nc.RemoteAddr().String()), ctx: ctx, cancel: cancel,
		queue: make(chan *slot, maxInFlight), draining: make(chan struct{})}
}

func (c *conn) drain() {
	c.drainOne.Do(func() {
		close(c.draining)
		// Unblock the reader; the writer finishes the queue.
		c.nc.SetReadDeadline(time.Now())
	})
}

func (c *conn) serve() {
	c.log.Debug("Kafka connection opened")
	written := make(chan struct{})
	go func() {
		defer close(written)
		c.writeLoop()
	}()
	err := c.readLoop()
	close(c.queue)
	<-written
	c.cancel()
	c.nc.Close()
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		c.log.Debug("Kafka connection closed")
	default:
		select {
		case <-c.draining:
			c.log.Debug("Kafka connection closed by shutdown")
		default:
			c.log.Warn("Kafka connection closed", "err", err)
		}
	}
}

// errBadRequest marks requests that close the connection.
var errBadRequest = errors.New("bad request")

// readBufferSize is the connection's read buffer; larger reads (a
// produce's records) bypass it.
const readBufferSize = 16 << 10

func (c *conn) readLoop() error {
	br := bufio.NewReaderSize(c.nc, readBufferSize)
	for {
		sl, req, err := c.readRequest(br)
		if err != nil {
			return err
		}
		if c.s.latency != nil {
			sl.read = time.Now()
		}
		select {
		case c.queue <- sl:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
		if req == nil { // answered in parse (unsupported ApiVersions)
			continue
		}
		c.handle(sl, req)
	}
}

// readRequest reads and decodes the next request: a Produce request (v3+)
// as it arrives (readProduce), any other whole, then parse. A nil request
// with a slot is one answered already (parse); an error closes the
// connection.
func (c *conn) readRequest(br *bufio.Reader) (*slot, kmsg.Request, error) {
	var hdr [12]byte // size, api key, version, correlation id
	if _, err := io.ReadFull(br, hdr[:4]); err != nil {
		return nil, nil, err
	}
	size := int32(binary.BigEndian.Uint32(hdr[:]))
	if size < 8 || int(size) > c.s.cfg.MaxRequestSize {
		return nil, nil, fmt.Errorf("%w: request size %d, outside 8..%d (max-request-size)", errBadRequest, size, c.s.cfg.MaxRequestSize)
	}
	if _, err := io.ReadFull(br, hdr[4:]); err != nil {
		return nil, nil, fmt.Errorf("%w: truncated request (%d bytes announced): %w", errBadRequest, size, err)
	}
	key, version := int16(binary.BigEndian.Uint16(hdr[4:])), int16(binary.BigEndian.Uint16(hdr[6:]))
	if key == produceKey && version >= produceFirstStreamed && version <= apis[key].max {
		return c.readProduce(br, hdr[4:], int(size)-8)
	}
	buf := make([]byte, size)
	copy(buf, hdr[4:])
	if _, err := io.ReadFull(br, buf[8:]); err != nil {
		return nil, nil, fmt.Errorf("%w: truncated request (%d bytes announced): %w", errBadRequest, size, err)
	}
	return c.parse(buf)
}

// readProduce reads the rest of a Produce request (readProduce in
// producereq.go), left bytes after its header's first 8 (hdr).
func (c *conn) readProduce(br *bufio.Reader, hdr []byte, left int) (*slot, kmsg.Request, error) {
	version := int16(binary.BigEndian.Uint16(hdr[2:]))
	clientID, req, framed, err := readProduce(br, left, version)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: Produce v%d: %w", errBadRequest, version, err)
	}
	return &slot{key: produceKey, version: version, correlation: int32(binary.BigEndian.Uint32(hdr[4:])),
		clientID: clientID, done: make(chan struct{}), framed: framed}, req, nil
}

// parse decodes a request. A request for an ApiVersions version we do not
// serve is answered (slot done, req nil) so the client retries with v0.
func (c *conn) parse(buf []byte) (*slot, kmsg.Request, error) {
	key := int16(binary.BigEndian.Uint16(buf))
	version := int16(binary.BigEndian.Uint16(buf[2:]))
	sl := &slot{key: key, version: version, correlation: int32(binary.BigEndian.Uint32(buf[4:])), done: make(chan struct{})}
	clientID, body, err := SplitClientID(buf[8:])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s v%d: %w", errBadRequest, kmsg.NameForKey(key), version, err)
	}
	sl.clientID = clientID
	api, ok := apis[key]
	if !ok {
		return nil, nil, fmt.Errorf("%w: API key %d (%s) is not served", errBadRequest, key, kmsg.NameForKey(key))
	}
	if version < api.min || version > api.max {
		if key == apiVersionsKey {
			sl.version = 0
			sl.finish(apiVersionsResponse(0, errUnsupportedVersion))
			return sl, nil, nil
		}
		return nil, nil, fmt.Errorf("%w: %s v%d: versions %d..%d are served", errBadRequest, kmsg.NameForKey(key), version, api.min, api.max)
	}
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	if req.IsFlexible() {
		if body, err = SkipTags(body); err != nil {
			return nil, nil, fmt.Errorf("%w: %s v%d: header tags: %w", errBadRequest, kmsg.NameForKey(key), version, err)
		}
	}
	if err := req.ReadFrom(body); err != nil {
		return nil, nil, fmt.Errorf("%w: %s v%d: %w", errBadRequest, kmsg.NameForKey(key), version, err)
	}
	return sl, req, nil
}

// SplitClientID splits what follows a request header's correlation id
// into the client id (a nullable string: i16 length, -1 for null) and the
// rest.
func SplitClientID(b []byte) (string, []byte, error) {
	if len(b) < 2 {
		return "", nil, errors.New("no client id")
	}
	n := int16(binary.BigEndian.Uint16(b))
	if n <= 0 {
		return "", b[2:], nil
	}
	if int(n) > len(b)-2 {
		return "", nil, fmt.Errorf("client id of %d bytes past the end", n)
	}
	return string(b[2 : 2+int(n)]), b[2+int(n):], nil
}

// SkipTags skips a tagged-field section (of a flexible request header):
// uvarint count, then per field a uvarint tag, uvarint size and the bytes.
func SkipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("bad tag count")
	}
	b = b[k:]
	for ; n > 0; n-- {
		_, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, errors.New("bad tag")
		}
		b = b[k:]
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, errors.New("bad tag size")
		}
		b = b[k+int(size):]
	}
	return b, nil
}

func (c *conn) handle(sl *slot, req kmsg.Request) {
	defer func() {
		if r := recover(); r != nil {
			// A bug in a handler must not take the broker down: answer
			// nothing and close this connection.
			c.log.Error("Kafka request handler panicked; closing the connection", "api", kmsg.NameForKey(sl.key), "version", sl.version, "panic", r)
			c.nc.Close()
			select {
			case <-sl.done:
			default:
				sl.abandon()
			}
		}
	}()
	apis[sl.key].handle(c, sl, req)
}

func (c *conn) writeLoop() {
	var buf []byte
	var iov net.Buffers
	broken := false
	for sl := range c.queue {
		select {
		case <-sl.done:
		case <-c.ctx.Done():
			<-sl.done // handlers finish promptly once ctx ends
		}
		if sl.resp == nil || broken {
			if !broken {
				c.observe(sl) // no response: a Produce with acks 0
			}
			releaseRecords(sl.records)
			continue
		}
		sl.resp.SetVersion(sl.version)
		out := iov[:0]
		if fr, ok := sl.resp.(*kmsg.FetchResponse); ok && sl.records != nil && plainFetch(fr) {
			buf, out = appendFetchFrame(buf[:0], out, sl.correlation, fr, sl.records)
		} else {
			if ok && sl.records != nil {
				flattenFetch(fr, sl.records)
				// Its record batches are most of it: one growth, not
				// doublings copying them again and again.
				buf = slices.Grow(buf[:0], fetchResponseSize(fr))
			}
			buf = c.appendFrame(buf[:0], sl)
			out = append(out, buf)
		}
		if len(c.queue) == 0 {
			c.nc.SetWriteDeadline(time.Now().Add(time.Minute))
		}
		iov = out[:0]
		if _, err := out.WriteTo(c.nc); err != nil {
			c.log.Debug("Kafka connection write failed", "err", err)
			broken = true
			c.cancel()
			c.nc.Close()
		} else {
			c.observe(sl)
		}
		releaseRecords(sl.records) // written: the record buffers are free
		clear(iov[:cap(iov)])      // keep no entries alive
		if cap(buf) > keptWriteBuffer {
			buf = nil
		}
	}
}

// observe records sl's time in the broker (Config.RequestLatency).
func (c *conn) observe(sl *slot) {
	if o := c.s.latency[sl.key]; o != nil && !sl.read.IsZero() {
		o.Observe(time.Since(sl.read).Seconds())
	}
}

// appendFrame appends sl's response, encoded whole, as a frame: size,
// header, body.
func (c *conn) appendFrame(buf []byte, sl *slot) []byte {
	buf = append(buf, 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(sl.correlation))
	if sl.resp.IsFlexible() && sl.key != apiVersionsKey {
		buf = append(buf, 0) // no header tags
	}
	buf = sl.resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}

// keptWriteBuffer bounds the response buffer a connection keeps between
// responses.
const keptWriteBuffer = 8 << 20

// fetchResponseSize is an upper estimate of fr's encoded size: its record
// batches plus a generous allowance for the fields around them.
func fetchResponseSize(fr *kmsg.FetchResponse) int {
	n := 64
	for i := range fr.Topics {
		t := &fr.Topics[i]
		n += 64 + len(t.Topic)
		for j := range t.Partitions {
			p := &t.Partitions[j]
			n += 128 + 32*len(p.AbortedTransactions) + len(p.RecordBatches)
		}
	}
	return n
}

// requestTimeout bounds the broker work of one request (topic loads,
// metadata reads, appends).
const requestTimeout = 30 * time.Second
