package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/storage"
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
	// pending counts the replies in the store, not yet written; drained
	// is closed when it falls back to 0 (nil while it is 0).
	pendingMu sync.Mutex
	pending   int
	drained   chan struct{}
	// testHookAwait, if set, runs when awaitReplies is about to wait for
	// replies in the store.
	testHookAwait func()
}

// queued notes a reply put in the store.
func (c *noopConn) queued() {
	c.pendingMu.Lock()
	if c.pending == 0 {
		c.drained = make(chan struct{})
	}
	c.pending++
	c.pendingMu.Unlock()
}

// replied notes a reply of the store written (or dropped).
func (c *noopConn) replied() {
	c.pendingMu.Lock()
	c.pending--
	if c.pending == 0 {
		close(c.drained)
		c.drained = nil
	}
	c.pendingMu.Unlock()
}

// replies returns a channel closed once none of c's replies is in the
// store; nil if none is now.
func (c *noopConn) replies() <-chan struct{} {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	return c.drained
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
//
// With an entry log (openNoopStore's entryLog), each group is also
// written a second time once durable, as a bookie's applier writes its
// entries into an entry log after the journal (noopEntryLog).
type noopStore struct {
	log      *slog.Logger
	f        vfs.File
	size     int64           // the ring's size
	onSync   func(bytes int) // if set, called after each fdatasync with the bytes it covered
	entryLog *noopEntryLog   // nil: each byte written once
	mu       sync.Mutex
	queue    []noopSend
	err      error // the writer's failure; then add fails
	more     chan struct{}
	stop     chan struct{}
	done     chan struct{}
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
// onSync may be nil. With entryLog, every byte is also written to a
// growing file at that path, removed by Close too.
func openNoopStore(ctx context.Context, log *slog.Logger, fs vfs.FS, path string, size int64, onSync func(int), entryLog string) (*noopStore, error) {
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
	if entryLog != "" {
		if st.entryLog, err = openNoopEntryLog(fs, entryLog, st.fail); err != nil {
			f.Close()
			fs.Remove(path)
			return nil, fmt.Errorf("no-op broker's entry log: %w", err)
		}
	}
	go st.run(fs, path)
	return st, nil
}

// fail makes every later add fail with err, with a log line.
func (st *noopStore) fail(err error) {
	st.mu.Lock()
	first := st.err == nil
	if first {
		st.err = err
	}
	st.mu.Unlock()
	if first {
		st.log.Error("no-op broker: the store failed; later messages are refused", "err", err)
	}
}

// add queues data; reply goes to c once it is durable, after the replies
// of everything queued before it.
func (st *noopStore) add(c *noopConn, data, reply []byte) error {
	c.queued()
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
	if st.entryLog != nil {
		defer st.entryLog.close()
	}
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
			if st.err == nil {
				st.err = fmt.Errorf("no-op broker's store: %w", err)
			}
			st.mu.Unlock()
			st.log.Error("no-op broker: the store failed; closing the connections waiting for it", "err", err)
			for _, m := range group {
				if m.done != nil {
					m.done(err)
				} else {
					m.c.c.Close()
					m.c.replied()
				}
			}
			return
		}
		off += int64(len(buf))
		if st.onSync != nil && len(buf) > 0 {
			st.onSync(len(buf))
		}
		if st.entryLog != nil && len(buf) > 0 {
			st.entryLog.add(buf)
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
		for _, m := range group {
			if m.c != nil {
				m.c.replied()
			}
		}
		clear(outs)
		clear(group)
	}
}

// awaitReplies waits until none of c's replies is in the store. With
// some there, it returns the store's failure, or an error once the store
// is closed, which writes no more of them.
func (st *noopStore) awaitReplies(c *noopConn) error {
	ch := c.replies()
	if ch == nil {
		return nil
	}
	if hook := c.testHookAwait; hook != nil {
		hook()
	}
	select {
	case <-ch:
	case <-st.done:
	}
	st.mu.Lock()
	err := st.err
	st.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-st.done:
		return errors.New("no-op broker's store: closed")
	default:
		return nil
	}
}

// Close stops the writer (messages waiting get no receipt) and removes the
// file.
func (st *noopStore) Close() {
	close(st.stop)
	<-st.done
}

// noopEntryLog writes a durable no-op broker's bytes a second time, as a
// bookie's applier writes entries into an entry log once the journal has
// made them durable: in a goroutine of its own, through a queue of
// bounded size (a full queue holds up the store's writer, and so the
// acknowledgements, as the bookie's apply queue holds up its journal),
// appended to a growing file through the page cache, with writeback
// started every noopWritebackBytes (sync_file_range) and the file fsynced
// every checkpoint interval, as a bookie under load checkpoints its entry
// logs by default. It
// does none of the bookie's other work (no index, no cache), so a bookie
// writing each byte twice on this disk adds no faster than a broker on it.
type noopEntryLog struct {
	fs   vfs.FS
	path string
	f    vfs.File
	fail func(error) // the store's: later adds fail
	// queue carries groups to the writer, free their buffers back.
	queue chan []byte
	free  chan []byte
	done  chan struct{}
}

// noopWritebackBytes: the bookie's entry logs start writeback each time
// this many more bytes are written (bookie/storage's writebackBytes).
const noopWritebackBytes = 512 << 10

// noopEntryLogQueue bounds the groups waiting for the entry-log writer.
const noopEntryLogQueue = 64

func openNoopEntryLog(fs vfs.FS, path string, fail func(error)) (*noopEntryLog, error) {
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	l := &noopEntryLog{fs: fs, path: path, f: f, fail: fail,
		queue: make(chan []byte, noopEntryLogQueue), free: make(chan []byte, noopEntryLogQueue+1), done: make(chan struct{})}
	go l.run()
	return l, nil
}

// add queues a copy of b for the writer, waiting while the queue is full.
func (l *noopEntryLog) add(b []byte) {
	var c []byte
	select {
	case c = <-l.free:
	default:
	}
	l.queue <- append(c[:0], b...)
}

func (l *noopEntryLog) run() {
	defer close(l.done)
	var written, writeback int64
	checkpoint := time.NewTicker(storage.DefaultCheckpointInterval) // the bookie's checkpoints
	defer checkpoint.Stop()
	failed := false
	for {
		var b []byte
		var ok bool
		select {
		case b, ok = <-l.queue:
		case <-checkpoint.C:
			if !failed {
				failed = l.check(l.f.Sync())
			}
			continue
		}
		if !ok {
			return
		}
		if !failed {
			_, err := l.f.Write(b)
			written += int64(len(b))
			if err == nil && written-writeback >= noopWritebackBytes {
				writeback = written
				_, err = l.f.SyncTo(written)
			}
			failed = l.check(err)
		}
		select {
		case l.free <- b:
		default:
		}
	}
}

// check reports whether err is a failure, failing the store with it.
func (l *noopEntryLog) check(err error) bool {
	if err == nil {
		return false
	}
	l.fail(fmt.Errorf("no-op broker's entry log: %w", err))
	return true
}

// close waits for the writer to write what was queued, then closes and
// removes the file.
func (l *noopEntryLog) close() {
	close(l.queue)
	<-l.done
	l.f.Close()
	l.fs.Remove(l.path)
}
