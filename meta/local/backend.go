package local

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/magnetar-io/magnetar/meta"
)

// Batch limits for group commit: a batch closes when the queue is empty or
// one of these is reached.
const (
	maxBatchOps   = 1024
	maxBatchBytes = 4 << 20
)

// backend is the store shared by all sessions: the file, the two trees, the
// writer and the watch registry.
type backend struct {
	file   string
	db     *bolt.DB
	update func(func(*bolt.Tx) error) error // db.Update; a seam for failure tests
	log    *slog.Logger

	ops     chan *request // unbuffered: the writer batches waiting senders
	stop    chan struct{}
	stopped chan struct{}

	w *tree // the writer's tree; only the writer goroutine touches it

	rmu sync.RWMutex
	r   *tree // the readers' tree: durable state only

	// watchMu guards the registries. Taken inside rmu (read side when a
	// reader registers, write side when the writer publishes), so a watch is
	// registered atomically with the read it belongs to.
	watchMu sync.Mutex
	dataW   map[string][]*watch
	childW  map[string][]*watch

	smu      sync.Mutex
	sessions int    // open sessions; the backend closes with the last
	nextSID  uint64 // last session id handed out
}

type request struct {
	op   op
	done chan result
}

type watch struct {
	ch      chan meta.Event // buffered 1; receives one event, then closed
	path    string
	session *Store
	sid     uint64
}

func openBackend(dir string, opts Options) (*backend, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("local: creating metadata directory: %w", err)
	}
	file := filepath.Join(dir, "meta.db")
	db, err := bolt.Open(file, 0o600, &bolt.Options{Timeout: time.Second, NoSync: opts.NoSync})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("local: metadata store %s is in use by another process", file)
	}
	if err != nil {
		return nil, fmt.Errorf("local: opening metadata store %s: %w", file, err)
	}
	t, err := load(db, file)
	if err != nil {
		db.Close()
		return nil, err
	}
	b := &backend{
		file:    file,
		db:      db,
		update:  db.Update,
		log:     opts.Logger,
		ops:     make(chan *request),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
		w:       t,
		r:       t.clone(),
		dataW:   make(map[string][]*watch),
		childW:  make(map[string][]*watch),
	}
	go b.run()
	return b, nil
}

// load reads every record into a new tree, creating the buckets of a new
// file. Keys come in byte order, so a parent always precedes its children.
func load(db *bolt.DB, file string) (*tree, error) {
	t := newTree()
	err := db.Update(func(tx *bolt.Tx) error {
		f, err := tx.CreateBucketIfNotExists(bucketFormat)
		if err != nil {
			return err
		}
		if v := f.Get(keyVersion); v == nil {
			if err := f.Put(keyVersion, []byte{formatVersion}); err != nil {
				return err
			}
		} else if len(v) != 1 || v[0] != formatVersion {
			return fmt.Errorf("local: %s has format %v; this build reads format %d", file, v, formatVersion)
		}
		nodes, err := tx.CreateBucketIfNotExists(bucketNodes)
		if err != nil {
			return err
		}
		return nodes.ForEach(func(k, v []byte) error {
			path := string(k)
			if err := meta.ValidatePath(path); err != nil {
				return &CorruptionError{File: file, Key: path, Reason: err.Error()}
			}
			n, bad := decodeRecord(v)
			if bad != "" {
				return &CorruptionError{File: file, Key: path, Reason: bad}
			}
			if path == "/" {
				root := t.nodes["/"]
				root.value, root.version, root.ctime, root.mtime, root.seq = n.value, n.version, n.ctime, n.mtime, n.seq
				return nil
			}
			if _, ok := t.nodes[meta.Parent(path)]; !ok {
				return &CorruptionError{File: file, Key: path, Reason: "its parent is missing"}
			}
			t.mutate(&mutation{kind: mCreate, path: path, node: n})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("local: loading %s: %w", file, err)
	}
	return t, nil
}

// run is the writer: it batches waiting requests, applies them, makes them
// durable in one transaction, publishes them, then answers.
func (b *backend) run() {
	defer close(b.stopped)
	var (
		batch   []*request
		results []result
		muts    []mutation
	)
	for {
		select {
		case req := <-b.ops:
			batch = append(batch[:0], req)
		case <-b.stop:
			return
		}
		size := len(batch[0].op.value)
	fill:
		for len(batch) < maxBatchOps && size < maxBatchBytes {
			select {
			case req := <-b.ops:
				batch = append(batch, req)
				size += len(req.op.value)
			default:
				break fill
			}
		}
		now := time.Now().UnixNano()
		results, muts = results[:0], muts[:0]
		for _, req := range batch {
			var res result
			res, muts = b.w.apply(&req.op, now, muts)
			results = append(results, res)
		}
		if err := b.persist(muts); err != nil {
			b.log.Error("metadata store write failed; the batch is rolled back", "file", b.file, "requests", len(batch), "err", err)
			b.rmu.RLock()
			b.w = b.r.clone()
			b.rmu.RUnlock()
			for i := range results {
				if results[i].err == nil {
					results[i] = result{err: fmt.Errorf("local: writing %s: %w", b.file, err)}
				}
			}
		} else {
			b.publish(muts)
		}
		for i, req := range batch {
			req.done <- results[i]
			batch[i] = nil
		}
	}
}

// persist writes the final state of every persistent node the mutations
// touched in one transaction. Changes to ephemeral nodes only need no disk.
func (b *backend) persist(muts []mutation) error {
	touched := make(map[string]struct{}, len(muts))
	for i := range muts {
		if m := &muts[i]; m.kind != mEndSession {
			touched[m.path] = struct{}{}
		}
	}
	dirty := false
	for p := range touched {
		if n := b.w.nodes[p]; n == nil || n.owner == 0 {
			dirty = true
			break
		}
	}
	if !dirty {
		return nil
	}
	return b.update(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(bucketNodes)
		for p := range touched {
			n := b.w.nodes[p]
			var err error
			switch {
			case n == nil:
				err = bucket.Delete([]byte(p))
			case n.owner == 0:
				err = bucket.Put([]byte(p), encodeRecord(n))
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// publish replays durable mutations on the readers' tree and fires the
// watches they trigger, in mutation order.
func (b *backend) publish(muts []mutation) {
	if len(muts) == 0 {
		return
	}
	var fired []firing
	b.rmu.Lock()
	b.watchMu.Lock()
	for i := range muts {
		m := &muts[i]
		b.r.mutate(m)
		switch m.kind {
		case mCreate:
			fired = b.take(fired, b.dataW, m.path, meta.EventCreated)
			fired = b.take(fired, b.childW, meta.Parent(m.path), meta.EventChildrenChanged)
		case mSet:
			fired = b.take(fired, b.dataW, m.path, meta.EventDataChanged)
		case mDelete:
			fired = b.take(fired, b.dataW, m.path, meta.EventDeleted)
			fired = b.take(fired, b.childW, m.path, meta.EventDeleted)
			fired = b.take(fired, b.childW, meta.Parent(m.path), meta.EventChildrenChanged)
		}
	}
	b.watchMu.Unlock()
	b.rmu.Unlock()
	for _, f := range fired {
		f.w.ch <- meta.Event{Type: f.typ, Path: f.w.path}
		close(f.w.ch)
	}
}

type firing struct {
	w   *watch
	typ meta.EventType
}

// take removes the watches on path from reg and appends them to fired.
func (b *backend) take(fired []firing, reg map[string][]*watch, path string, typ meta.EventType) []firing {
	for _, w := range reg[path] {
		fired = append(fired, firing{w, typ})
	}
	delete(reg, path)
	return fired
}

// register adds a watch; the caller holds rmu (read) so the watch is
// atomic with its read. It refuses once the session is closed, so that
// loseWatches, which runs after the close flag is set, sees every watch.
func (b *backend) register(reg map[string][]*watch, s *Store, path string) (<-chan meta.Event, error) {
	b.watchMu.Lock()
	defer b.watchMu.Unlock()
	if s.closed.Load() {
		return nil, meta.ErrClosed
	}
	w := &watch{ch: make(chan meta.Event, 1), path: path, session: s, sid: s.sid.Load()}
	reg[path] = append(reg[path], w)
	return w.ch, nil
}

// loseWatches ends the watches of session s (only those registered under
// session id sid, or all of them if sid is 0) with EventWatchLost.
func (b *backend) loseWatches(s *Store, sid uint64, cause error) {
	var lost []*watch
	b.watchMu.Lock()
	for _, reg := range []map[string][]*watch{b.dataW, b.childW} {
		for path, ws := range reg {
			kept := ws[:0]
			for _, w := range ws {
				if w.session == s && (sid == 0 || w.sid == sid) {
					lost = append(lost, w)
				} else {
					kept = append(kept, w)
				}
			}
			if len(kept) == 0 {
				delete(reg, path)
			} else {
				reg[path] = kept
			}
		}
	}
	b.watchMu.Unlock()
	for _, w := range lost {
		w.ch <- meta.Event{Type: meta.EventWatchLost, Path: w.path, Err: cause}
		close(w.ch)
	}
}

// submit hands a request to the writer and waits for its result. A request
// whose context ends after it was handed over may still be applied.
func (b *backend) submit(ctxDone <-chan struct{}, o op) (result, bool) {
	req := &request{op: o, done: make(chan result, 1)}
	select {
	case b.ops <- req:
	case <-ctxDone:
		return result{}, false
	case <-b.stopped:
		return result{err: meta.ErrClosed}, true
	}
	select {
	case res := <-req.done:
		return res, true
	case <-ctxDone:
		return result{}, false
	}
}

// newSID hands out a session id; a new session (not a renewed one after
// expiry) also counts towards the sessions that keep the backend open.
func (b *backend) newSID(newSession bool) uint64 {
	b.smu.Lock()
	defer b.smu.Unlock()
	if newSession {
		b.sessions++
	}
	b.nextSID++
	return b.nextSID
}

// release drops one session and closes the backend with the last.
func (b *backend) release() error {
	b.smu.Lock()
	b.sessions--
	last := b.sessions == 0
	b.smu.Unlock()
	if !last {
		return nil
	}
	close(b.stop)
	<-b.stopped
	return b.db.Close()
}
