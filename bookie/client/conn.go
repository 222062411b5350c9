package client

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// errTimeout: a bookie did not answer a request before its deadline.
var errTimeout = errors.New("bookie client: request timed out")

// response is a bookie's answer to one request, or why there is none.
type response struct {
	status wire.Status
	body   []byte // after the status; valid only during the callback, unless owned
	owned  bool   // body is the callback's to keep (a large frame read into its own buffer)
	local  bool   // answered by an in-process bookie (Local): a read entry is verified already
	err    error  // transport failure or timeout; status and body are unset
}

// Err returns the transport error, else the status's error (nil for OK).
func (r response) Err() error {
	if r.err != nil {
		return r.err
	}
	return r.status.Err()
}

// call is a request waiting for its response.
type call struct {
	op       wire.Op
	deadline time.Time
	cb       func(response)
}

// outFrame is a request queued for the connection's writer. body is not
// copied: it must not change until the frame is written (entries are
// immutable once encoded, so one entry is shared by all its sends).
type outFrame struct {
	hdr  [4 + wire.HeaderSize]byte
	body []byte
}

// putFrameHeader writes the size and header of a frame (bookie/wire) with
// a body of n bytes.
func putFrameHeader(dst *[4 + wire.HeaderSize]byte, h wire.Header, n int) {
	binary.BigEndian.PutUint32(dst[0:], uint32(wire.HeaderSize+n))
	dst[4] = wire.Version
	dst[5] = byte(h.Op)
	binary.BigEndian.PutUint16(dst[6:], h.Flags)
	binary.BigEndian.PutUint64(dst[8:], h.ReqID)
}

// conn is one TCP connection to a bookie with pipelined requests: a writer
// goroutine dials, then writes queued frames through a buffer it flushes
// whenever the queue runs empty; a reader goroutine matches responses to
// pending calls by request id. When the connection breaks, every pending
// call fails at once and the conn is never used again (the pool dials a new
// one on next use). Callbacks run on the reader goroutine, on the pool's
// sweeper (timeouts) or on the goroutine that broke the connection; never
// inside send. To a bookie in this process (local), there is no socket:
// send calls it, and an answering goroutine takes the reader's place.
type conn struct {
	addr        string
	dialTimeout time.Duration
	dial        dialFunc
	local       Local // the bookie is in this process: call it, no socket
	log         *slog.Logger

	broken atomic.Bool   // set with err
	done   chan struct{} // closed when broken

	mu      sync.Mutex
	nc      net.Conn // nil until dialed
	nextID  uint64
	pending map[uint64]call
	queue   []outFrame
	answers []localAnswer // local: answers not yet completed
	err     error         // why the connection is broken
	wake    chan struct{} // signals the writer, or local's answerLoop (capacity 1)
}

func newConn(addr string, dialTimeout time.Duration, dial dialFunc, local Local, log *slog.Logger) *conn {
	c := &conn{addr: addr, dialTimeout: dialTimeout, dial: dial, local: local, log: log.With("bookie", addr),
		done: make(chan struct{}), pending: make(map[uint64]call), wake: make(chan struct{}, 1)}
	if local == nil {
		go c.writeLoop()
	} else {
		go c.answerLoop()
	}
	return c
}

// send queues a request. cb is called exactly once with the response, the
// connection's failure or a timeout after timeout — unless send returns an
// error (the connection is broken), in which case cb is never called.
func (c *conn) send(op wire.Op, flags uint16, body []byte, timeout time.Duration, cb func(response)) error {
	deadline := time.Now().Add(timeout)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = call{op: op, deadline: deadline, cb: cb}
	if c.local != nil {
		c.mu.Unlock()
		c.callLocal(id, op, flags, body)
		return nil
	}
	c.queue = append(c.queue, outFrame{body: body})
	putFrameHeader(&c.queue[len(c.queue)-1].hdr, wire.Header{Op: op, Flags: flags, ReqID: id}, len(body))
	c.mu.Unlock()
	c.signal()
	return nil
}

// signal wakes the writer, or a local conn's answerLoop.
func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// fail breaks the connection (once) and fails every pending call with err.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = fmt.Errorf("bookie %s: %w", c.addr, err)
	c.broken.Store(true)
	calls := c.pending
	c.pending = nil
	c.queue = nil
	c.answers = nil
	nc := c.nc
	c.mu.Unlock()
	close(c.done)
	if nc != nil {
		nc.Close()
	}
	if len(calls) > 0 && !errors.Is(err, ErrClosed) {
		c.log.Debug("bookie connection failed", "pending", len(calls), "err", err)
	}
	for _, cl := range calls {
		cl.cb(response{err: c.err})
	}
}

// expire fails the calls whose deadline is before now.
func (c *conn) expire(now time.Time) {
	var expired []call
	c.mu.Lock()
	for id, cl := range c.pending {
		if cl.deadline.Before(now) {
			expired = append(expired, cl)
			delete(c.pending, id)
		}
	}
	c.mu.Unlock()
	for _, cl := range expired {
		cl.cb(response{err: fmt.Errorf("%w: %s to bookie %s", errTimeout, cl.op, c.addr)})
	}
}

func (c *conn) writeLoop() {
	nc, err := c.dial(c.addr, c.dialTimeout)
	if err != nil {
		c.fail(err)
		return
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		nc.Close()
		return
	}
	c.nc = nc
	c.mu.Unlock()
	go c.readLoop(nc)

	w := bufio.NewWriterSize(nc, 64<<10)
	var batch []outFrame
	for {
		c.mu.Lock()
		batch, c.queue = c.queue, batch[:0]
		c.mu.Unlock()
		if len(batch) == 0 {
			if w.Buffered() > 0 {
				if err := w.Flush(); err != nil {
					c.fail(err)
					return
				}
			}
			select {
			case <-c.wake:
				continue
			case <-c.done:
				return
			}
		}
		for i := range batch {
			w.Write(batch[i].hdr[:])
			if _, err := w.Write(batch[i].body); err != nil {
				c.fail(err)
				return
			}
			batch[i].body = nil
		}
	}
}

func (c *conn) readLoop(nc net.Conn) {
	r := bufio.NewReaderSize(nc, 64<<10)
	var buf []byte
	for {
		// A large frame (entries read) has its payload, after the status,
		// read into a read buffer of its own (entry.NewReadBuf), which the
		// callback takes without copying; the frame's head, and small
		// frames, reuse buf.
		h, head, tail, b, err := wire.ReadFrameSplit(r, buf, ownedFrame, 2, entry.NewReadBuf)
		buf = b
		owned := tail != nil
		if err != nil {
			c.fail(err)
			return
		}
		c.mu.Lock()
		cl, ok := c.pending[h.ReqID]
		delete(c.pending, h.ReqID)
		c.mu.Unlock()
		if !ok {
			continue // timed out already
		}
		st, payload, err := wire.ParseStatus(head)
		if err != nil {
			cl.cb(response{err: fmt.Errorf("bookie %s: %w", c.addr, err)})
			c.fail(err)
			return
		}
		if owned {
			payload = tail
		}
		cl.cb(response{status: st, body: payload, owned: owned})
	}
}

// answer completes the call id with r, unless it timed out or failed
// already.
func (c *conn) answer(id uint64, r response) {
	c.mu.Lock()
	cl, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if ok {
		cl.cb(r)
	}
}

// callLocal hands request id to the in-process bookie. Its answer is
// queued for the conn's answering goroutine (answerLoop), which runs the
// callback, as a TCP conn's reader would: never inside send, and never on
// the bookie's storage goroutines. A callback may wait for a lock its
// sender holds while that sender waits in Call for room in the bookie's
// journal, which waits for storage's callbacks: run there, it would close
// the circle.
func (c *conn) callLocal(id uint64, op wire.Op, flags uint16, body []byte) {
	c.local.Call(op, flags, body, func(st wire.Status, payload [][]byte) {
		r := localResponse(st, payload)
		c.mu.Lock()
		c.answers = append(c.answers, localAnswer{id, r})
		c.mu.Unlock()
		c.signal()
	})
}

// answerLoop completes the answers of an in-process bookie, in the order
// given, until the conn fails.
func (c *conn) answerLoop() {
	var batch []localAnswer
	for {
		c.mu.Lock()
		batch, c.answers = c.answers, batch[:0]
		c.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-c.wake:
				continue
			case <-c.done:
				return
			}
		}
		for i := range batch {
			c.answer(batch[i].id, batch[i].r)
			batch[i] = localAnswer{}
		}
	}
}

type localAnswer struct {
	id uint64
	r  response
}

// localResponse makes a Local answer a response: its body is the payload
// (in one piece), the callback's to keep.
func localResponse(st wire.Status, payload [][]byte) response {
	r := response{status: st, owned: true, local: true}
	switch len(payload) {
	case 0:
	case 1:
		r.body = payload[0]
	default:
		r.body = bytes.Join(payload, nil)
	}
	return r
}

// Frames larger than ownedFrame are read into a buffer of their own.
const ownedFrame = 4 << 10

// pool holds one connection per bookie address, dialed lazily, and a
// sweeper that times out requests.
type pool struct {
	dialTimeout time.Duration
	dial        dialFunc
	local       func(addr string) Local // nil, or nil for addr: dial
	log         *slog.Logger
	stop        chan struct{}
	swept       sync.WaitGroup

	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
}

// dialFunc connects to a bookie's address.
type dialFunc func(addr string, timeout time.Duration) (net.Conn, error)

func dialTCP(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

func newPool(dialTimeout, sweepEvery time.Duration, dial dialFunc, local func(string) Local, log *slog.Logger) *pool {
	if dial == nil {
		dial = dialTCP
	}
	p := &pool{dialTimeout: dialTimeout, dial: dial, local: local, log: log, stop: make(chan struct{}), conns: make(map[string]*conn)}
	p.swept.Add(1)
	go p.sweep(sweepEvery)
	return p
}

// get returns the connection to addr, dialing a new one if there is none
// or the last one broke. ErrClosed after close.
func (p *pool) get(addr string) (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	c := p.conns[addr]
	if c == nil || c.broken.Load() {
		var local Local
		if p.local != nil {
			local = p.local(addr)
		}
		c = newConn(addr, p.dialTimeout, p.dial, local, p.log)
		p.conns[addr] = c
	}
	return c, nil
}

// send sends a request to addr; like conn.send, cb is not called when an
// error is returned.
func (p *pool) send(addr string, op wire.Op, flags uint16, body []byte, timeout time.Duration, cb func(response)) error {
	c, err := p.get(addr)
	if err != nil {
		return err
	}
	return c.send(op, flags, body, timeout, cb)
}

func (p *pool) sweep(every time.Duration) {
	defer p.swept.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			conns := make([]*conn, 0, len(p.conns))
			for _, c := range p.conns {
				conns = append(conns, c)
			}
			p.mu.Unlock()
			for _, c := range conns {
				c.expire(now)
			}
		}
	}
}

// close fails every connection's pending calls with ErrClosed.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	close(p.stop)
	p.swept.Wait()
	for _, c := range conns {
		c.fail(ErrClosed)
	}
}
