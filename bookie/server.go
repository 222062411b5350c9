// Package bookie is the storage node: it serves the bookie protocol
// (bookie/wire) over its ledger storage (bookie/storage), registers itself
// in the metadata store and guards its identity with a cookie.
package bookie

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// Storage is what the server needs of ledger storage. Callbacks run on the
// storage's goroutine and must not block.
type Storage interface {
	// AddEntry stores an entry (bookie/entry format) and calls done once it
	// is durable. It verifies e's checksum (entry.Verify) and refuses an
	// entry failing it with entry.ErrChecksum: the server parses the
	// header only, so that an add is checksummed once in the bookie, not
	// twice. recovery adds are accepted on fenced ledgers. e may be kept
	// after done (until storage has applied it): it must not change.
	AddEntry(e []byte, recovery bool, done func(error))
	// ReadEntry returns the stored entry in a buffer the caller holds
	// alone (never memory the storage keeps): the server recycles it
	// (entry.Recycle) once written to a connection. The entry has been
	// verified (entry.Verify) since it was read from the disk: a client in
	// this process (Call) does not verify it again.
	ReadEntry(ledger, entryID int64) ([]byte, error)
	LastAddConfirmed(ledger int64) (lac, lastEntry int64, err error)
	// WaitLAC blocks until the ledger's LAC passes after or ctx ends.
	WaitLAC(ctx context.Context, ledger, after int64) (int64, error)
	// Fence refuses further non-recovery adds, durably.
	Fence(ledger int64, done func(lac, lastEntry int64, err error))
	Delete(ledger int64, done func(error))
}

// ServerConfig configures a Server.
type ServerConfig struct {
	Storage Storage
	Logger  *slog.Logger
	// StatusOf maps a storage error to a wire status; nil uses
	// wire.StatusOf (errors that wrap the wire sentinels).
	StatusOf func(error) wire.Status
	// MaxReadsInFlight bounds concurrent reads per connection; the
	// connection stops reading requests while it is reached. Default 64.
	MaxReadsInFlight int
	// MaxWaitLAC bounds a WaitLAC timeout. Default 60 s.
	MaxWaitLAC time.Duration
	// MaxPending bounds the requests of one connection that are not yet
	// answered (or whose answers are not yet written); the connection stops
	// reading requests while it is reached. Default 10,000.
	MaxPending int
}

// Server serves the bookie protocol on listeners.
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	ctx    context.Context // cancelled at shutdown: ends WaitLAC calls
	cancel context.CancelFunc

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*conn]struct{}
	closing  bool
	inflight sync.WaitGroup // connections, and local calls not yet answered

	localReads chan struct{} // local reads in flight (Call)
}

// NewServer checks cfg and returns a server.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Storage == nil {
		return nil, errors.New("bookie: ServerConfig.Storage is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatusOf == nil {
		cfg.StatusOf = wire.StatusOf
	}
	if cfg.MaxReadsInFlight <= 0 {
		cfg.MaxReadsInFlight = 64
	}
	if cfg.MaxWaitLAC <= 0 {
		cfg.MaxWaitLAC = time.Minute
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 10000
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		lns: make(map[net.Listener]struct{}), conns: make(map[*conn]struct{}),
		localReads: make(chan struct{}, cfg.MaxReadsInFlight)}, nil
}

// Call serves one request from a client in the same process (the
// standalone's broker: bookie/client's Config.Local), without the wire's
// framing, copies and connection goroutines: an add is handed to storage
// as it is and answered from storage's callback. body must not change
// afterwards: storage keeps an add's entry until it has applied it, which
// may be after done.
//
// done is called exactly once, with the status and the response body
// after it as parts (the wire's layout, as a frame would carry it): on
// the goroutine that answers — storage's for adds, fences and deletes, a
// read's own — or before Call returns when the answer is immediate (a
// refusal, a LAC). It must not block. The parts are the callee's to keep.
// After Shutdown starts, calls are answered StatusShuttingDown; Shutdown
// waits for the calls in flight.
func (s *Server) Call(op wire.Op, flags uint16, body []byte, done func(st wire.Status, payload [][]byte)) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		done(wire.StatusShuttingDown, nil)
		return
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	s.dispatch(localPeer{s: s, done: done}, wire.Header{Op: op, Flags: flags}, body, true)
}

// localPeer answers a Call.
type localPeer struct {
	s    *Server
	done func(wire.Status, [][]byte)
}

func (p localPeer) respond(_ wire.Header, st wire.Status, payload ...[]byte) {
	p.done(st, payload)
	p.s.inflight.Done()
}

func (p localPeer) respondAdded(h wire.Header, ledger, entryID int64) {
	p.respond(h, wire.StatusOK, wire.LedgerEntry(ledger, entryID))
}

func (p localPeer) respondEntries(h wire.Header, _ [][]byte, payload ...[]byte) {
	p.respond(h, wire.StatusOK, payload...)
}

func (p localPeer) logger() *slog.Logger            { return p.s.log }
func (p localPeer) readSlot() (chan struct{}, bool) { return p.s.localReads, false }

// Serve accepts connections on ln until Shutdown. It returns nil after
// Shutdown, or the accept error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			delete(s.lns, ln)
			s.mu.Unlock()
			if closing {
				return nil
			}
			return fmt.Errorf("bookie: accept on %s: %w", ln.Addr(), err)
		}
		c := s.newConn(nc)
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.inflight.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Shutdown stops accepting, stops reading new requests, waits (within ctx)
// for requests in flight to be answered, and closes every connection.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// conn is one client connection: a reader that dispatches requests and a
// writer that sends responses as they complete, in any order.
//
// Responses are queued without blocking, because they are produced on the
// storage's callback goroutine, which a slow client must never stall. The
// queue is bounded by slots: the reader takes one per request before
// dispatching it, the writer returns it once the response is written.
type conn struct {
	s   *Server
	nc  net.Conn
	log *slog.Logger

	slots   chan struct{}  // requests taken but not yet answered on the wire
	reads   chan struct{}  // reads in flight
	pending sync.WaitGroup // requests not yet answered

	mu    sync.Mutex
	queue []outFrame    // response frames not yet written
	wake  chan struct{} // signals the writer (capacity 1)
	done  bool          // no more responses will be queued
}

func (s *Server) newConn(nc net.Conn) *conn {
	return &conn{s: s, nc: nc, log: s.log.With("remote", nc.RemoteAddr().String()),
		slots: make(chan struct{}, s.cfg.MaxPending), reads: make(chan struct{}, s.cfg.MaxReadsInFlight),
		wake: make(chan struct{}, 1)}
}

// stopReading makes the reader's next read fail, so it stops taking
// requests; answers to those in flight still go out.
func (c *conn) stopReading() { c.nc.SetReadDeadline(time.Now()) }

func (c *conn) serve() {
	defer c.s.inflight.Done()
	wrote := make(chan struct{})
	go func() { defer close(wrote); c.writeLoop() }()
	c.readLoop()
	c.pending.Wait() // every request is answered
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
	c.signal()
	<-wrote
	c.nc.Close()
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
}

func (c *conn) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	var buf []byte
	for {
		h, body, b, err := wire.ReadFrame(r, buf)
		buf = b
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, context.Canceled):
			return
		case errors.Is(err, wire.ErrFrame):
			c.log.Warn("bad frame from client; closing the connection", "err", err)
			return
		default:
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) { // a timeout is stopReading
				c.log.Debug("connection read failed", "err", err)
			}
			return
		}
		c.slots <- struct{}{}
		c.pending.Add(1)
		c.s.dispatch(c, h, body, false)
	}
}

// respond queues a response; it must be called exactly once per request.
//
// The payload slices are written as they are, after respond returns: the
// caller must not modify them (entries read from storage are not). A small
// response is copied into one buffer; a larger one keeps its parts, and
// the writer sends large parts (entries) without copying them.
func (c *conn) respond(h wire.Header, st wire.Status, payload ...[]byte) {
	c.enqueue(c.frame(h, st, payload))
}

// respondEntries responds with payload and recycles entries once the
// frame is written.
func (c *conn) respondEntries(h wire.Header, entries [][]byte, payload ...[]byte) {
	f := c.frame(h, wire.StatusOK, payload)
	f.recycle = entries
	c.enqueue(f)
}

// frame makes the response frame of h with st and payload.
func (c *conn) frame(h wire.Header, st wire.Status, payload [][]byte) outFrame {
	n := 2 // the status
	for _, p := range payload {
		n += len(p)
	}
	var f outFrame
	if n <= smallFrame {
		b := make([]byte, 0, 4+wire.HeaderSize+n)
		b = wire.AppendFrameHead(b, h, n)
		b = binary.BigEndian.AppendUint16(b, uint16(st))
		for _, p := range payload {
			b = append(b, p...)
		}
		f = outFrame{small: b}
	} else {
		head := wire.AppendFrameHead(make([]byte, 0, 4+wire.HeaderSize+2), h, n)
		f = outFrame{parts: append([][]byte{binary.BigEndian.AppendUint16(head, uint16(st))}, payload...)}
	}
	return f
}

// respondAdded answers an add with its ledger and entry id: respond
// without the payload's own allocations.
func (c *conn) respondAdded(h wire.Header, ledger, entryID int64) {
	const n = 2 + 16
	b := make([]byte, 0, 4+wire.HeaderSize+n)
	b = wire.AppendFrameHead(b, h, n)
	b = binary.BigEndian.AppendUint16(b, uint16(wire.StatusOK))
	b = binary.BigEndian.AppendUint64(b, uint64(ledger))
	b = binary.BigEndian.AppendUint64(b, uint64(entryID))
	c.enqueue(outFrame{small: b})
}

// enqueue queues a response frame for the writer.
func (c *conn) enqueue(f outFrame) {
	c.mu.Lock()
	c.queue = append(c.queue, f)
	c.mu.Unlock()
	c.signal()
	c.pending.Done()
}

// outFrame is a response frame: one buffer (small), or parts written back
// to back; recycle are read buffers to give back once it is written
// (writeFrame copies or writes every part before it returns).
type outFrame struct {
	small   []byte
	parts   [][]byte
	recycle [][]byte
}

// A response up to smallFrame bytes is copied into one buffer; parts of
// directWrite bytes or more skip the writer's buffer.
const (
	smallFrame  = 4 << 10
	directWrite = 16 << 10
)

// entriesPayload is a ReadRange response payload (wire.AppendEntries's
// layout) as parts that refer to the entries instead of copying them.
func entriesPayload(entries [][]byte) [][]byte {
	lens := make([]byte, 4*(1+len(entries)))
	parts := make([][]byte, 0, 1+2*len(entries))
	binary.BigEndian.PutUint32(lens, uint32(len(entries)))
	parts = append(parts, lens[:4:4])
	for i, e := range entries {
		l := lens[4*(i+1) : 4*(i+2) : 4*(i+2)]
		binary.BigEndian.PutUint32(l, uint32(len(e)))
		parts = append(parts, l, e)
	}
	return parts
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// peer is where a request came from and its answer goes: a connection,
// or a local caller (Call).
type peer interface {
	// respond answers the request; exactly once per request. The payload
	// slices must not be modified afterwards.
	respond(h wire.Header, st wire.Status, payload ...[]byte)
	// respondAdded is respond(h, wire.StatusOK, wire.LedgerEntry(ledger,
	// entryID)), an add's answer.
	respondAdded(h wire.Header, ledger, entryID int64)
	// respondEntries is respond(h, wire.StatusOK, payload...), a read's
	// answer, where entries (within payload) are buffers from storage that
	// p holds alone from then on: a connection recycles them once written
	// (entry.Recycle), a local caller keeps them.
	respondEntries(h wire.Header, entries [][]byte, payload ...[]byte)
	logger() *slog.Logger
	// readSlot is the semaphore of p's reads in flight, and whether a
	// read waits for a slot before dispatch returns (a connection's
	// reader: backpressure) or on the read's own goroutine (a local
	// caller, who must not be blocked: its callbacks may need what it
	// holds).
	readSlot() (slots chan struct{}, block bool)
}

func (c *conn) logger() *slog.Logger            { return c.log }
func (c *conn) readSlot() (chan struct{}, bool) { return c.reads, true }

// fail answers h with the status for err.
func (s *Server) fail(p peer, h wire.Header, err error) {
	var st wire.Status
	switch {
	case errors.Is(err, entry.ErrChecksum):
		st = wire.StatusChecksum
	case errors.Is(err, entry.ErrMalformed):
		st = wire.StatusMalformed
	default:
		st = s.cfg.StatusOf(err)
	}
	if st == wire.StatusInternal {
		p.logger().Error("request failed", "op", h.Op.String(), "err", err)
	}
	p.respond(h, st)
}

// goRead runs a read on its own goroutine, within p's read slots.
func goRead(p peer, read func()) {
	slots, block := p.readSlot()
	if block {
		slots <- struct{}{}
	}
	go func() {
		if !block {
			slots <- struct{}{}
		}
		defer func() { <-slots }()
		read()
	}()
}

// dispatch handles one request from p. body is only valid until dispatch
// returns, unless kept (the caller will not change it until answered).
func (s *Server) dispatch(p peer, h wire.Header, body []byte, kept bool) {
	st := s.cfg.Storage
	switch h.Op {
	case wire.OpAdd:
		e := body
		if !kept {
			e = append([]byte(nil), body...) // kept by storage until applied
		}
		eh, err := entry.Parse(e) // storage verifies the checksum
		if err != nil {
			s.fail(p, h, err)
			return
		}
		st.AddEntry(e, h.Flags&wire.FlagRecovery != 0, func(err error) {
			if err != nil {
				s.fail(p, h, err)
				return
			}
			p.respondAdded(h, eh.Ledger, eh.Entry)
		})
	case wire.OpRead:
		vs, err := wire.ParseInt64s(body, 2)
		if err != nil {
			p.respond(h, wire.StatusMalformed)
			return
		}
		fence := h.Flags&wire.FlagFence != 0
		goRead(p, func() {
			if fence {
				if err := s.fence(vs[0]); err != nil {
					s.fail(p, h, err)
					return
				}
			}
			e, err := st.ReadEntry(vs[0], vs[1])
			if err != nil {
				s.fail(p, h, err)
				return
			}
			p.respondEntries(h, [][]byte{e}, e)
		})
	case wire.OpReadRange:
		ledger, first, last, maxBytes, err := wire.ParseReadRange(body)
		if err != nil || last < first {
			p.respond(h, wire.StatusMalformed)
			return
		}
		goRead(p, func() {
			entries, err := readRange(st, s.cfg.StatusOf, ledger, first, last, int(min(maxBytes, wire.MaxFrameSize-HeaderRoom)))
			if err != nil {
				s.fail(p, h, err)
				return
			}
			p.respondEntries(h, entries, entriesPayload(entries)...)
		})
	case wire.OpReadLAC:
		vs, err := wire.ParseInt64s(body, 1)
		if err != nil {
			p.respond(h, wire.StatusMalformed)
			return
		}
		if h.Flags&wire.FlagFence != 0 {
			st.Fence(vs[0], func(lac, last int64, err error) {
				if err != nil {
					s.fail(p, h, err)
					return
				}
				p.respond(h, wire.StatusOK, wire.Int64s(lac, last))
			})
			return
		}
		lac, last, err := st.LastAddConfirmed(vs[0])
		if err != nil {
			s.fail(p, h, err)
			return
		}
		p.respond(h, wire.StatusOK, wire.Int64s(lac, last))
	case wire.OpWaitLAC:
		ledger, after, ms, err := wire.ParseWaitLAC(body)
		if err != nil {
			p.respond(h, wire.StatusMalformed)
			return
		}
		timeout := min(time.Duration(ms)*time.Millisecond, s.cfg.MaxWaitLAC)
		go func() {
			ctx, cancel := context.WithTimeout(s.ctx, timeout)
			defer cancel()
			lac, err := st.WaitLAC(ctx, ledger, after)
			switch {
			case err == nil:
				p.respond(h, wire.StatusOK, wire.Int64s(lac))
			case errors.Is(err, context.DeadlineExceeded):
				p.respond(h, wire.StatusTimeout)
			case errors.Is(err, context.Canceled):
				p.respond(h, wire.StatusShuttingDown)
			default:
				s.fail(p, h, err)
			}
		}()
	case wire.OpDelete:
		vs, err := wire.ParseInt64s(body, 1)
		if err != nil {
			p.respond(h, wire.StatusMalformed)
			return
		}
		st.Delete(vs[0], func(err error) {
			if err != nil {
				s.fail(p, h, err)
				return
			}
			p.respond(h, wire.StatusOK)
		})
	default:
		p.logger().Warn("unknown op from client", "op", h.Op.String())
		p.respond(h, wire.StatusUnknownOp)
	}
}

// HeaderRoom is what a response frame needs beside its entries.
const HeaderRoom = 64

// readRange reads consecutive entries from first to last, stopping at the
// first missing one or before maxBytes would be passed; the first entry is
// always included.
func readRange(st Storage, statusOf func(error) wire.Status, ledger, first, last int64, maxBytes int) ([][]byte, error) {
	var entries [][]byte
	size := 0
	for id := first; id <= last; id++ {
		e, err := st.ReadEntry(ledger, id)
		if err != nil {
			if len(entries) > 0 && statusOf(err) == wire.StatusNoEntry {
				break
			}
			for _, e := range entries {
				entry.Recycle(e)
			}
			return nil, err
		}
		if len(entries) > 0 && size+4+len(e) > maxBytes {
			entry.Recycle(e)
			break
		}
		entries = append(entries, e)
		size += 4 + len(e)
	}
	return entries, nil
}

// fence fences a ledger synchronously (for fencing reads).
func (s *Server) fence(ledger int64) error {
	done := make(chan error, 1)
	s.cfg.Storage.Fence(ledger, func(_, _ int64, err error) { done <- err })
	return <-done
}

// writeFrame writes f's parts through w, the large ones straight to nc
// after flushing w: one copy fewer of every entry read.
func writeFrame(w *bufio.Writer, nc net.Conn, f outFrame) error {
	if f.parts == nil {
		_, err := w.Write(f.small)
		return err
	}
	for _, p := range f.parts {
		if len(p) < directWrite {
			if _, err := w.Write(p); err != nil {
				return err
			}
			continue
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if _, err := nc.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// writeLoop writes queued responses, one flush per batch. After a write
// error it keeps discarding responses (returning their slots) so that the
// reader, if blocked on a slot, wakes up and sees the closed socket.
func (c *conn) writeLoop() {
	var batch []outFrame
	w := bufio.NewWriterSize(c.nc, 64<<10)
	failed := false
	for {
		c.mu.Lock()
		batch, c.queue = c.queue, batch[:0]
		done := c.done
		c.mu.Unlock()
		if len(batch) == 0 {
			if done { // every response was queued before done was set
				if !failed {
					w.Flush()
				}
				return
			}
			<-c.wake
			continue
		}
		for i, frame := range batch {
			if !failed {
				if err := writeFrame(w, c.nc, frame); err != nil {
					failed = true
					c.nc.Close()
				}
			}
			for _, b := range frame.recycle {
				entry.Recycle(b)
			}
			batch[i] = outFrame{}
			<-c.slots
		}
		if !failed {
			if err := w.Flush(); err != nil {
				failed = true
				c.nc.Close()
			}
		}
	}
}
