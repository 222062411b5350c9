// Package memnet is an in-process stream transport: a Listener whose Dial
// returns one end of a buffered in-memory connection and whose Accept
// returns the other. `magnetar standalone` reaches its in-process bookie
// through it, so that an add costs no system calls and no trip through the
// kernel's loopback; the bytes, framing and protocol are the same as over
// TCP.
//
// A connection is two one-way pipes. A write appends to the pipe's buffer
// (waiting while more than maxBuffered bytes are unread, as a socket's
// send buffer would); a read takes what is there, or waits for data, the
// writer's close (io.EOF once drained) or the read deadline
// (os.ErrDeadlineExceeded, a net.Error whose Timeout is true). Only read
// deadlines are kept; write deadlines are accepted and ignored.
package memnet

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// maxBuffered bounds the unread bytes of one direction.
const maxBuffered = 4 << 20

// Listener accepts the connections Dial makes.
type Listener struct {
	addr  addr
	conns chan *Conn
	done  chan struct{}
	once  sync.Once
}

// Listen returns a listener known by name (its Addr).
func Listen(name string) *Listener {
	return &Listener{addr: addr(name), conns: make(chan *Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the listener's name.
func (l *Listener) Addr() net.Addr { return l.addr }

// ErrRefused: the listener is closed.
var ErrRefused = errors.New("memnet: connection refused")

// Dial connects to the listener, waiting until it accepts.
func (l *Listener) Dial() (net.Conn, error) {
	ab, ba := newPipe(), newPipe()
	client := &Conn{r: ba, w: ab, local: addr("client"), remote: l.addr}
	server := &Conn{r: ab, w: ba, local: l.addr, remote: addr("client")}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "memnet", Addr: l.addr, Err: ErrRefused}
	}
}

type addr string

func (a addr) Network() string { return "memnet" }
func (a addr) String() string  { return string(a) }

// pipe carries bytes one way.
type pipe struct {
	mu       sync.Mutex
	buf      []byte
	off      int       // read position in buf
	eof      bool      // the writer closed
	gone     bool      // the reader closed: writes fail
	deadline time.Time // read deadline; zero: none
	timer    *time.Timer
	readable chan struct{} // signalled on data, close or deadline change
	writable chan struct{} // signalled when bytes are read or the reader goes
}

func newPipe() *pipe {
	return &pipe{readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *pipe) read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		switch {
		case p.off < len(p.buf):
			n := copy(b, p.buf[p.off:])
			p.off += n
			if p.off == len(p.buf) {
				p.buf, p.off = p.buf[:0], 0
			}
			p.mu.Unlock()
			signal(p.writable)
			return n, nil
		case p.eof:
			p.mu.Unlock()
			return 0, io.EOF
		case p.gone:
			p.mu.Unlock()
			return 0, net.ErrClosed
		case !p.deadline.IsZero() && !time.Now().Before(p.deadline):
			p.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		p.mu.Unlock()
		<-p.readable
	}
}

func (p *pipe) write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		p.mu.Lock()
		switch {
		case p.gone:
			p.mu.Unlock()
			return n, errors.New("memnet: write to a closed connection: broken pipe")
		case p.eof:
			p.mu.Unlock()
			return n, net.ErrClosed
		case len(p.buf)-p.off >= maxBuffered:
			p.mu.Unlock()
			<-p.writable
			continue
		}
		if p.off > 0 && p.off == len(p.buf) {
			p.buf, p.off = p.buf[:0], 0
		}
		k := min(len(b)-n, maxBuffered-(len(p.buf)-p.off))
		p.buf = append(p.buf, b[n:n+k]...)
		n += k
		p.mu.Unlock()
		signal(p.readable)
	}
	return n, nil
}

// closeWrite: no more bytes; the reader gets io.EOF once it has read all.
func (p *pipe) closeWrite() {
	p.mu.Lock()
	p.eof = true
	p.mu.Unlock()
	signal(p.readable)
}

// closeRead: the reader is gone; writes fail and unread bytes are dropped.
func (p *pipe) closeRead() {
	p.mu.Lock()
	p.gone, p.buf, p.off = true, nil, 0
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	signal(p.writable)
	signal(p.readable)
}

func (p *pipe) setReadDeadline(t time.Time) {
	p.mu.Lock()
	p.deadline = t
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if d := time.Until(t); !t.IsZero() && d > 0 {
		p.timer = time.AfterFunc(d, func() { signal(p.readable) })
	}
	p.mu.Unlock()
	signal(p.readable)
}

// Conn is one end of an in-memory connection.
type Conn struct {
	r, w          *pipe
	local, remote addr
	once          sync.Once
}

// Read reads what the other end wrote.
func (c *Conn) Read(b []byte) (int, error) { return c.r.read(b) }

// Write writes for the other end to read.
func (c *Conn) Write(b []byte) (int, error) { return c.w.write(b) }

// Close ends both directions: the other end reads io.EOF after what was
// written, and its writes fail.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.w.closeWrite()
		c.r.closeRead()
	})
	return nil
}

func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the read deadline (write deadlines are not kept).
func (c *Conn) SetDeadline(t time.Time) error { c.r.setReadDeadline(t); return nil }

// SetReadDeadline makes a waiting and every later Read fail with
// os.ErrDeadlineExceeded once t passes (zero: no deadline).
func (c *Conn) SetReadDeadline(t time.Time) error { c.r.setReadDeadline(t); return nil }

// SetWriteDeadline is accepted and ignored: writes wait only while the
// other end has maxBuffered bytes unread.
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }
