package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The durable no-op brokers' store (noopStore), shared by the Pulsar and
// the Kafka no-op brokers of perf all (pulsarnoop.go, kafkanoop.go).

// noopListener accepts a no-op broker's connections on a free loopback
// port and serves each with serve until Close; a connection that serve
// gives up on with an error (other than its end) is logged.
type noopListener struct {
	ln     net.Listener
	name   string // "no-op Pulsar broker", for log lines
	log    *slog.Logger
	serve  func(net.Conn) error
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool // by Close: connections accepted afterwards are closed
}

func listenNoop(name string, log *slog.Logger, serve func(net.Conn) error) (*noopListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	l := &noopListener{ln: ln, name: name, log: log, serve: serve, conns: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the host:port it listens on.
func (l *noopListener) Addr() string { return l.ln.Addr().String() }

// Close stops listening, closes every connection and waits for them.
func (l *noopListener) Close() {
	l.ln.Close()
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *noopListener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed { // accepted just as Close ran
			l.mu.Unlock()
			c.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := l.serve(c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				l.log.Warn(l.name+": connection closed", "remote", c.RemoteAddr().String(), "err", err)
			}
			c.Close()
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
}

// noopConn is a connection of a no-op broker: its replies and the store's
// are written under mu.
type noopConn struct {
	c  net.Conn
	mu sync.Mutex
}

func (c *noopConn) write(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.c.Write(b)
	return err
}

// noopStore is a durable no-op broker's log: one writer takes every
// message waiting, writes them with one write, calls fdatasync, then
// sends their replies (group commit, a new group as soon as the last is
// synced, as measureDurableAppends does). Its file is written and synced
// first and then written over as a ring, as a journal reusing its files
// does, so that no fdatasync has a file size to commit. The durable no-op
// bookie (noopbookie.go) uses it too, with callbacks for replies.
type noopStore struct {
	log    *slog.Logger
	f      vfs.File
	size   int64           // the ring's size
	onSync func(bytes int) // if set, called after each fdatasync with the bytes it covered
	mu     sync.Mutex
	queue  []noopSend
	err    error // the writer's failure; then add fails
	more   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// noopStoreSize is the size of the durable no-op broker's file.
const noopStoreSize = 64 << 20

// noopSend is a message waiting for the store: its bytes, and the reply
// to write to its connection once they are durable, or else done to call
// then (or with the store's failure).
type noopSend struct {
	c     *noopConn
	data  []byte
	reply []byte
	done  func(error)
}

// openNoopStore prefills a size-byte file at path (removed by Close);
// onSync may be nil.
func openNoopStore(ctx context.Context, log *slog.Logger, fs vfs.FS, path string, size int64, onSync func(int)) (*noopStore, error) {
	buf := make([]byte, 1<<20)
	fillPattern(buf)
	if err := prefillFile(ctx, fs, path, buf, size); err != nil {
		return nil, fmt.Errorf("no-op broker's store: %w", err)
	}
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("no-op broker's store: %w", err)
	}
	st := &noopStore{log: log, f: f, size: size, onSync: onSync, more: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go st.run(fs, path)
	return st, nil
}

// add queues data; reply goes to c once it is durable, after the replies
// of everything queued before it.
func (st *noopStore) add(c *noopConn, data, reply []byte) error {
	return st.queueSend(noopSend{c: c, data: data, reply: reply})
}

// addFunc queues data; done is called once it is durable (after the
// callbacks of everything queued before it), or with the store's failure.
func (st *noopStore) addFunc(data []byte, done func(error)) error {
	return st.queueSend(noopSend{data: data, done: done})
}

func (st *noopStore) queueSend(m noopSend) error {
	st.mu.Lock()
	err := st.err
	if err == nil {
		st.queue = append(st.queue, m)
	}
	st.mu.Unlock()
	select {
	case st.more <- struct{}{}:
	default:
	}
	return err
}

func (st *noopStore) run(fs vfs.FS, path string) {
	defer close(st.done)
	defer fs.Remove(path)
	defer st.f.Close()
	var (
		group []noopSend
		buf   []byte
		off   int64
		outs  = map[*noopConn][]byte{}
	)
	for {
		select {
		case <-st.more:
		case <-st.stop:
			return
		}
		st.mu.Lock()
		group, st.queue = st.queue, group[:0]
		st.mu.Unlock()
		if len(group) == 0 {
			continue
		}
		buf = buf[:0]
		for _, m := range group {
			buf = append(buf, m.data...)
		}
		if off+int64(len(buf)) > st.size {
			off = 0
		}
		var err error
		if len(buf) > 0 { // else only replies waiting their turn
			if _, err = st.f.WriteAt(buf, off); err == nil {
				err = st.f.SyncData()
			}
		}
		if err != nil {
			// Nothing is acknowledged from now on; the connections
			// waiting are closed rather than left without receipts.
			st.mu.Lock()
			st.err = fmt.Errorf("no-op broker's store: %w", err)
			st.mu.Unlock()
			st.log.Error("no-op broker: the store failed; closing the connections waiting for it", "err", err)
			for _, m := range group {
				if m.done != nil {
					m.done(err)
				} else {
					m.c.c.Close()
				}
			}
			return
		}
		off += int64(len(buf))
		if st.onSync != nil && len(buf) > 0 {
			st.onSync(len(buf))
		}
		for _, m := range group {
			if m.done != nil {
				m.done(nil)
				continue
			}
			outs[m.c] = append(outs[m.c], m.reply...)
		}
		for c, out := range outs {
			_ = c.write(out) // a failed connection fails its reader too
		}
		clear(outs)
		clear(group)
	}
}

// Close stops the writer (messages waiting get no receipt) and removes the
// file.
func (st *noopStore) Close() {
	close(st.stop)
	<-st.done
}
