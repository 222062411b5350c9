package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// Writer adds entries to a ledger it created. It is the ledger's only
// writer. Its methods are safe for concurrent use.
type Writer struct {
	c   *Client
	id  int64
	log *slog.Logger

	e, qw, qa int

	// life ends when the writer is closed or aborted; it bounds ensemble
	// changes.
	life   context.Context
	cancel context.CancelFunc

	closeMu  sync.Mutex // serializes Close
	closed   bool
	closeErr error

	mu sync.Mutex
	// cur is the metadata as this writer last wrote it; ensemble is its
	// last ensemble, which every pending entry belongs to (they are all
	// after the LAC, and a new ensemble starts at LAC+1).
	cur      versioned
	ensemble []string
	q        addQueue
	next     int64 // id of the next entry
	length   int64 // ledger length through next-1
	lac      int64
	lacLen   int64    // ledger length through lac
	failed   []string // bookies of ensemble waiting to be replaced
	changing bool     // an ensemble change is running; no completion meanwhile
	err      error    // set once: the writer is broken and refuses adds
	closing  bool     // Close started: adds are refused with ErrClosed
	drained  chan struct{}

	// Completions are queued in order and run one at a time, without mu,
	// by whichever goroutine finds none running: the one that answered the
	// add (a bookie connection's reader, a local conn's answering
	// goroutine, the timeout sweeper), or a goroutine started for the
	// completions queued inside Append and Close, which must not run their
	// callers' callbacks (deliverLocked, deliverLaterLocked).
	ready      []completion
	spare      []completion // the delivery's other slice, kept for reuse
	delivering bool         // a goroutine is running the ready callbacks
}

// completion is one done callback to run, or a barrier to close.
type completion struct {
	done    func(int64, error)
	id      int64
	err     error
	barrier chan struct{}
}

func newWriter(c *Client, id int64, cur versioned) *Writer {
	w := &Writer{c: c, id: id, log: c.log.With("ledger", id),
		e: cur.md.EnsembleSize, qw: cur.md.WriteQuorum, qa: cur.md.AckQuorum,
		cur: cur, ensemble: slices.Clone(cur.md.last().Bookies),
		lac: -1}
	w.life, w.cancel = context.WithCancel(context.Background())
	return w
}

// ID returns the ledger id.
func (w *Writer) ID() int64 { return w.id }

// LastAddConfirmed returns the last entry whose add completed, -1 if none.
func (w *Writer) LastAddConfirmed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lac
}

// Metadata returns a copy of the ledger metadata as this writer last
// stored it.
func (w *Writer) Metadata() LedgerMetadata {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur.md.Clone()
}

// Append adds payload as the next entry, asynchronously. payload is the
// caller's again once Append returns. done is called exactly once, in
// entry order, with the entry id, or with an error: ErrFenced when another
// client recovered the ledger, ErrClosed after Close, ErrNotEnoughBookies
// when a failed bookie has no replacement, … After an error the writer is
// broken and later appends fail (except an oversized payload, refused
// without consequence). done runs on the goroutine that received the
// add's last needed answer (never inside Append); it must not block, nor
// call AppendSync or Close.
func (w *Writer) Append(payload []byte, done func(entryID int64, err error)) {
	w.add(len(payload), func(h entry.Header) []byte {
		return entry.Encode(make([]byte, 0, entry.HeaderSize+len(payload)), h, payload)
	}, done)
}

// AppendReserved is Append of buf[entry.HeaderSize:] without copying it:
// the caller leaves buf's first entry.HeaderSize bytes free and the writer
// puts the entry's header there. buf is the writer's until done is called
// (it is sent again on an ensemble change); the payload part must not
// change.
func (w *Writer) AppendReserved(buf []byte, done func(entryID int64, err error)) {
	if len(buf) < entry.HeaderSize {
		w.refuse(done, fmt.Errorf("%w: %d bytes leave no room for the header", entry.ErrMalformed, len(buf)))
		return
	}
	w.add(len(buf)-entry.HeaderSize, func(h entry.Header) []byte { return entry.EncodeInPlace(buf, h) }, done)
}

// AppendReservedKnown is AppendReserved for a buf whose tail buf[from:]
// has the CRC-32C tailCRC, from a checksum the caller verified: the
// entry's checksum is combined from it (entry.EncodeInPlaceKnown) instead
// of read off the tail again. from must be within [entry.HeaderSize,
// len(buf)]; a wrong tailCRC makes an entry the bookies refuse.
func (w *Writer) AppendReservedKnown(buf []byte, from int, tailCRC uint32, done func(entryID int64, err error)) {
	if from < entry.HeaderSize || from > len(buf) {
		w.refuse(done, fmt.Errorf("%w: a known tail from %d of %d bytes (the header takes %d)", entry.ErrMalformed, from, len(buf), entry.HeaderSize))
		return
	}
	w.add(len(buf)-entry.HeaderSize, func(h entry.Header) []byte { return entry.EncodeInPlaceKnown(buf, h, from, tailCRC) }, done)
}

// refuse completes done with err, as add does a refused append: on a
// goroutine of its own, in order after the appends before it.
func (w *Writer) refuse(done func(int64, error), err error) {
	w.mu.Lock()
	w.pushLocked(completion{done: done, id: -1, err: err})
	w.deliverLaterLocked()
	w.mu.Unlock()
}

// add queues and sends the next entry, of a payload of size bytes that
// encode makes into the entry for its header.
func (w *Writer) add(size int, encode func(entry.Header) []byte, done func(entryID int64, err error)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A refusal, or a failure to send, is completed on a goroutine of its
	// own: the caller may hold a lock its done callback takes.
	defer w.deliverLaterLocked()
	if err := w.refuseLocked(); err != nil {
		w.pushLocked(completion{done: done, id: -1, err: err})
		return
	}
	if entry.HeaderSize+size > entry.MaxSize {
		w.pushLocked(completion{done: done, id: -1, err: fmt.Errorf("%w: %d-byte payload, the limit is %d",
			entry.ErrMalformed, size, entry.MaxSize-entry.HeaderSize)})
		return
	}
	id := w.next
	w.next++
	w.length += int64(size)
	h := entry.Header{Ledger: w.id, Entry: id, LAC: w.lac, Length: w.length}
	p := &pendingAdd{id: id, length: w.length, done: done, data: encode(h)}
	w.q.push(p)
	for i := range w.qw {
		w.sendLocked(p, i)
	}
}

// AppendSync appends payload and waits for its completion. If ctx ends
// first it returns ctx's error; the add may still complete.
func (w *Writer) AppendSync(ctx context.Context, payload []byte) (int64, error) {
	type result struct {
		id  int64
		err error
	}
	ch := make(chan result, 1)
	w.Append(payload, func(id int64, err error) { ch <- result{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Close waits for pending adds to complete or fail and their callbacks to
// run, then closes the ledger: metadata CLOSED with LastEntry the LAC and
// Length the ledger length through it. It returns ErrFenced if another
// client recovered the ledger meanwhile. If ctx ends first it returns ctx's
// error and may be called again. Later calls return the first result.
func (w *Writer) Close(ctx context.Context) error {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closed {
		return w.closeErr
	}
	w.mu.Lock()
	w.closing = true
	for w.q.len() > 0 {
		if w.drained == nil {
			w.drained = make(chan struct{})
		}
		ch := w.drained
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("bookie client: closing ledger %d: %w", w.id, ctx.Err())
		}
		w.mu.Lock()
	}
	broken, cur, lac, length := w.err, w.cur, w.lac, w.lacLen
	barrier := make(chan struct{})
	w.pushLocked(completion{barrier: barrier})
	w.deliverLaterLocked()
	w.mu.Unlock()
	select {
	case <-barrier: // every done callback has run
	case <-ctx.Done():
		return fmt.Errorf("bookie client: closing ledger %d: %w", w.id, ctx.Err())
	}

	var err error
	switch {
	case errors.Is(broken, ErrFenced), errors.Is(broken, ErrClosed):
		err = broken
	default:
		// A writer broken otherwise (no replacement bookie) still closes
		// its ledger at its LAC: every entry through it is on Qa bookies.
		var next versioned
		next, err = w.c.updateMetadata(ctx, w.id, cur, func(m *LedgerMetadata) (bool, error) {
			if m.State != StateOpen {
				return false, fmt.Errorf("%w: ledger %d is %s", ErrFenced, w.id, m.State)
			}
			m.State, m.LastEntry, m.Length = StateClosed, lac, length
			return true, nil
		})
		if err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrNoLedger) {
			return err // the metadata store failed: Close may be retried
		}
		if err == nil {
			w.mu.Lock()
			w.cur = next
			w.mu.Unlock()
		}
	}
	w.closed, w.closeErr = true, err
	w.finish()
	if err == nil {
		w.log.Debug("ledger closed", "lastEntry", lac, "length", length)
	}
	return err
}

// abort breaks the writer with err and stops it (the client is closing).
func (w *Writer) abort(err error) {
	w.mu.Lock()
	w.failLocked(err)
	w.deliverLaterLocked()
	w.mu.Unlock()
	w.finish()
}

// finish ends the writer's life.
func (w *Writer) finish() {
	w.cancel()
	w.c.forget(w)
}

func (w *Writer) refuseLocked() error {
	switch {
	case w.err != nil:
		return w.err
	case w.closing:
		return fmt.Errorf("%w: ledger %d writer", ErrClosed, w.id)
	}
	return nil
}

// sendLocked sends p to member i of its write set, unless that bookie is
// waiting to be replaced (the ensemble change sends it to the replacement).
func (w *Writer) sendLocked(p *pendingAdd, i int) {
	if w.err != nil {
		return
	}
	addr := w.ensemble[writeSetIndex(p.id, i, w.e)]
	if slices.Contains(w.failed, addr) {
		return
	}
	id := p.id
	err := w.c.pool.send(addr, wire.OpAdd, 0, p.data, w.c.cfg.AddTimeout, func(r response) {
		w.onAddResponse(id, addr, r)
	})
	if err != nil {
		w.bookieFailedLocked(addr, err)
	}
}

// onAddResponse takes a bookie's answer to entry id, and runs the
// callbacks it completes (deliverLocked).
func (w *Writer) onAddResponse(id int64, addr string, r response) {
	w.mu.Lock()
	defer w.deliverLocked()
	if w.err != nil {
		return
	}
	p := w.q.get(id)
	idx := slices.Index(w.ensemble, addr)
	if p == nil || idx < 0 {
		return // completed already, or an answer from a replaced bookie
	}
	i := writeSetMember(id, idx, w.e, w.qw)
	if i < 0 {
		return
	}
	switch err := r.Err(); {
	case err == nil:
		p.acked = p.acked.with(i)
		w.completeLocked()
	case errors.Is(err, wire.ErrFenced):
		w.failLocked(fmt.Errorf("%w: ledger %d: bookie %s refused entry %d", ErrFenced, w.id, addr, id))
	default:
		w.bookieFailedLocked(addr, err)
	}
}

// bookieFailedLocked schedules the replacement of a failed bookie.
func (w *Writer) bookieFailedLocked(addr string, err error) {
	if errors.Is(err, ErrClosed) {
		w.failLocked(err)
		return
	}
	if w.err != nil || !slices.Contains(w.ensemble, addr) || slices.Contains(w.failed, addr) {
		return
	}
	if errors.Is(err, wire.ErrReadOnly) {
		w.c.markReadOnly(addr, err)
	}
	w.log.Warn("bookie failed during adds; replacing it", "bookie", addr, "err", err)
	w.failed = append(w.failed, addr)
	if !w.changing {
		w.changing = true
		go w.changeEnsemble()
	}
}

// completeLocked completes the adds at the head of the queue that have
// their ack quorum — not during an ensemble change, which must find the
// LAC where it started.
func (w *Writer) completeLocked() {
	if w.changing {
		return
	}
	for _, p := range w.q.popCompleted(w.qa) {
		w.lac, w.lacLen = p.id, p.length
		w.pushLocked(completion{done: p.done, id: p.id})
	}
	w.notifyDrainedLocked()
}

// failLocked breaks the writer (once): the adds at the head that reached
// their ack quorum complete, every other pending add fails with err, and
// so does every later one.
func (w *Writer) failLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	for _, p := range w.q.popCompleted(w.qa) {
		w.lac, w.lacLen = p.id, p.length
		w.pushLocked(completion{done: p.done, id: p.id})
	}
	for _, p := range w.q.popAll() {
		w.pushLocked(completion{done: p.done, id: p.id, err: err})
	}
	w.notifyDrainedLocked()
	if !errors.Is(err, ErrClosed) {
		w.log.Warn("ledger writer broken", "lac", w.lac, "err", err)
	}
}

func (w *Writer) notifyDrainedLocked() {
	if w.q.len() == 0 && w.drained != nil {
		close(w.drained)
		w.drained = nil
	}
}

// changeEnsemble replaces the failed bookies, one change at a time, until
// none is left or the writer breaks.
func (w *Writer) changeEnsemble() {
	for {
		w.mu.Lock()
		if w.err != nil || len(w.failed) == 0 {
			w.changing = false
			w.completeLocked()
			w.deliverLocked()
			return
		}
		failed := slices.Clone(w.failed)
		ensemble := slices.Clone(w.ensemble)
		cur, first := w.cur, w.lac+1
		w.mu.Unlock()

		next, changed, err := w.replace(cur, ensemble, failed, first)

		w.mu.Lock()
		if err != nil {
			w.changing = false
			w.failLocked(err)
			w.deliverLocked()
			return
		}
		w.cur = next
		w.ensemble = slices.Clone(next.md.last().Bookies)
		w.failed = slices.DeleteFunc(w.failed, func(b string) bool { return slices.Contains(failed, b) })
		w.log.Info("ensemble changed", "firstEntry", first, "replaced", failed, "ensemble", w.ensemble)
		// The replacements have none of the pending entries: forget the
		// old bookies' acks and send there.
		for _, p := range slices.Clone(w.q.adds) {
			for _, idx := range changed {
				if i := writeSetMember(p.id, idx, w.e, w.qw); i >= 0 {
					p.acked = p.acked.without(i)
					w.sendLocked(p, i)
				}
			}
		}
		w.deliverLocked() // a send refused by a closed client fails the writer
	}
}

// replace picks replacements for failed and stores the new ensemble,
// starting at first, in the metadata. It returns the new metadata and the
// ensemble indexes replaced.
func (w *Writer) replace(cur versioned, ensemble, failed []string, first int64) (versioned, []int, error) {
	ctx, cancel := context.WithTimeout(w.life, max(w.c.cfg.AddTimeout, w.c.cfg.ReadTimeout))
	defer cancel()
	repl, err := w.c.pickBookies(ctx, ensemble, len(failed))
	if err != nil {
		return cur, nil, fmt.Errorf("bookie client: ledger %d: replacing failed bookies %v: %w", w.id, failed, err)
	}
	bookies, changed := replaceBookies(ensemble, failed, repl)
	next, err := w.c.updateMetadata(ctx, w.id, cur, func(m *LedgerMetadata) (bool, error) {
		if m.State != StateOpen {
			return false, fmt.Errorf("%w: ledger %d is %s", ErrFenced, w.id, m.State)
		}
		if !slices.Equal(m.last().Bookies, ensemble) {
			return false, fmt.Errorf("%w: ledger %d: its ensemble was changed by another client", ErrFenced, w.id)
		}
		m.Ensembles = withEnsemble(m.Ensembles, first, bookies)
		return true, nil
	})
	if err != nil {
		return cur, nil, err
	}
	return next, changed, nil
}

func (w *Writer) pushLocked(c completion) {
	w.ready = append(w.ready, c)
}

// deliverLocked, called with w.mu held, runs the ready callbacks, in order
// and without the lock, until none is left, unless another goroutine is
// running them (it runs these too). It returns with w.mu released.
func (w *Writer) deliverLocked() {
	if w.delivering || len(w.ready) == 0 {
		w.mu.Unlock()
		return
	}
	w.delivering = true
	w.runReadyLocked()
}

// deliverLaterLocked has a goroutine of its own run the ready callbacks,
// unless one is running them already.
func (w *Writer) deliverLaterLocked() {
	if w.delivering || len(w.ready) == 0 {
		return
	}
	w.delivering = true
	go func() {
		w.mu.Lock()
		w.runReadyLocked()
	}()
}

// runReadyLocked is the delivery itself: called with w.mu held and
// w.delivering set, it returns with w.mu released and w.delivering clear.
func (w *Writer) runReadyLocked() {
	batch := w.spare
	for len(w.ready) > 0 {
		batch, w.ready = w.ready, batch[:0]
		w.mu.Unlock()
		for i, c := range batch {
			switch {
			case c.barrier != nil:
				close(c.barrier)
			case c.done != nil:
				c.done(c.id, c.err)
			}
			batch[i] = completion{}
		}
		w.mu.Lock()
	}
	w.spare = batch[:0]
	w.delivering = false
	w.mu.Unlock()
}
