package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/meta"
)

// readWindow bounds the entries a Read has in flight.
const readWindow = 64

// maxWaitLACPoll bounds one long-poll round of WaitLAC.
const maxWaitLACPoll = 30 * time.Second

// Entry is an entry read from a ledger.
type Entry struct {
	ID      int64
	Payload []byte // the caller's
	// Buf is the whole entry as read, Payload's buffer, which the
	// caller holds alone: once done with Payload it may give Buf back
	// with entry.Recycle, sparing a later read a fresh buffer.
	Buf []byte
}

// OpenOptions configure OpenLedger.
type OpenOptions struct {
	// Recovery fences and closes a ledger that is not CLOSED, so that the
	// result is CLOSED and its writer (if any) can add nothing more.
	Recovery bool
}

// Reader reads a ledger. Its methods are safe for concurrent use.
type Reader struct {
	c  *Client
	id int64

	mu    sync.Mutex
	cur   versioned
	lac   int64
	watch <-chan meta.Event // armed by WaitLAC; fires when the metadata changes
}

// OpenLedger opens ledger id for reading (ErrNoLedger if it does not
// exist). With o.Recovery a ledger that is not CLOSED is recovered (see the
// package documentation) and the result is CLOSED. Without it, the LAC of
// a ledger still open is asked of its bookies (best effort: if none answers
// it starts from what the metadata proves, and ReadLAC can try again).
func (c *Client) OpenLedger(ctx context.Context, id int64, o OpenOptions) (*Reader, error) {
	cur, err := c.readMetadata(ctx, id)
	if err != nil {
		return nil, err
	}
	if o.Recovery && cur.md.State != StateClosed {
		if cur, err = c.recover(ctx, id, cur); err != nil {
			return nil, err
		}
	}
	r := &Reader{c: c, id: id, cur: cur, lac: lacFloor(&cur.md)}
	if cur.md.State != StateClosed {
		if _, err := r.ReadLAC(ctx); err != nil {
			c.log.Debug("opening ledger: no LAC from bookies yet", "ledger", id, "err", err)
		}
	}
	return r, nil
}

// lacFloor is the LAC the metadata alone proves: the last entry of a closed
// ledger; else every entry before the last ensemble (a new ensemble starts
// after the LAC of its time).
func lacFloor(md *LedgerMetadata) int64 {
	if md.State == StateClosed {
		return md.LastEntry
	}
	return md.last().FirstEntry - 1
}

// ID returns the ledger id.
func (r *Reader) ID() int64 { return r.id }

// Metadata returns a copy of the ledger metadata as last read.
func (r *Reader) Metadata() LedgerMetadata {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur.md.Clone()
}

// LastAddConfirmed returns the last entry known to be readable: LastEntry
// for a closed ledger, the last LAC learnt for an open one (-1 if none).
func (r *Reader) LastAddConfirmed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lac
}

// refresh re-reads the metadata, and with it the LAC floor.
func (r *Reader) refresh(ctx context.Context) (versioned, error) {
	cur, err := r.c.readMetadata(ctx, r.id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		return r.cur, err
	}
	if cur.version >= r.cur.version {
		r.cur = cur
		r.lac = max(r.lac, lacFloor(&cur.md))
	}
	return r.cur, nil
}

// watchMetadata returns the metadata and a channel that fires once it
// changes: the reader's armed watch if it has not fired (the metadata is
// then as last read), else a new one armed by re-reading.
func (r *Reader) watchMetadata(ctx context.Context) (versioned, <-chan meta.Event, error) {
	r.mu.Lock()
	cur, ch := r.cur, r.watch
	r.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		default:
			return cur, ch, nil
		}
	}
	b, st, ch, err := r.c.meta.GetW(ctx, meta.LedgerPath(r.id))
	if errors.Is(err, meta.ErrNotFound) {
		return cur, nil, fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, r.id)
	}
	if err != nil {
		return cur, nil, fmt.Errorf("bookie client: reading ledger %d metadata: %w", r.id, err)
	}
	md, err := decodeMetadata(r.id, b)
	if err != nil {
		return cur, nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watch = ch
	if st.Version >= r.cur.version {
		r.cur = versioned{md, st.Version}
		r.lac = max(r.lac, lacFloor(&md))
	}
	return r.cur, ch, nil
}

// advance raises the known LAC (never past a closed ledger's end).
func (r *Reader) advance(lac int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur.md.State != StateClosed {
		r.lac = max(r.lac, lac)
	}
	return r.lac
}

// ReadLAC refreshes the metadata (a ledger closed meanwhile answers with
// its last entry) and asks the bookies of the last ensemble for the LAC.
// It returns the largest answer once every write set has answered enough
// (Qw-Qa+1 bookies) or every bookie has answered or failed; it fails only
// when no bookie answered.
func (r *Reader) ReadLAC(ctx context.Context) (int64, error) {
	cur, err := r.refresh(ctx)
	if err != nil {
		return r.LastAddConfirmed(), err
	}
	if cur.md.State == StateClosed {
		return cur.md.LastEntry, nil
	}
	lac, ok, errs, err := r.c.readLACs(ctx, r.id, &cur.md, 0, func(rp reply) bool {
		err := rp.Err()
		return err == nil || errors.Is(err, wire.ErrNoLedger) || errors.Is(err, wire.ErrNoEntry)
	})
	if err != nil {
		return r.LastAddConfirmed(), err
	}
	if len(errs) == len(ok) {
		return r.LastAddConfirmed(), fmt.Errorf("bookie client: ledger %d: no bookie answered for its LAC: %w", r.id, errors.Join(errs...))
	}
	return r.advance(lac), nil
}

// WaitLAC waits until the LAC passes after and returns it, long-polling
// the bookies of the last ensemble and watching the metadata. If the
// ledger is closed at or before after, it returns the last entry and
// ErrClosed: nothing will follow.
func (r *Reader) WaitLAC(ctx context.Context, after int64) (int64, error) {
	backoff := 10 * time.Millisecond
	for {
		if lac := r.LastAddConfirmed(); lac > after {
			return lac, nil
		}
		cur, changed, err := r.watchMetadata(ctx)
		if err != nil {
			return r.LastAddConfirmed(), err
		}
		if cur.md.State == StateClosed {
			if cur.md.LastEntry > after {
				return cur.md.LastEntry, nil
			}
			return cur.md.LastEntry, fmt.Errorf("%w: ledger %d ends at entry %d", ErrClosed, r.id, cur.md.LastEntry)
		}
		if lac := r.LastAddConfirmed(); lac > after {
			return lac, nil
		}
		poll := maxWaitLACPoll
		if d, ok := ctx.Deadline(); ok {
			poll = min(poll, time.Until(d))
		}
		if poll < time.Millisecond {
			return r.LastAddConfirmed(), ctx.Err()
		}
		bookies := cur.md.last().Bookies
		replies := make(chan reply, len(bookies))
		body := wire.WaitLAC(r.id, after, uint32(poll/time.Millisecond))
		for i, b := range bookies {
			r.c.request(b, wire.OpWaitLAC, 0, body, poll+r.c.cfg.ReadTimeout, i, replies)
		}
		waited, interrupted := false, false
		for range bookies {
			var rp reply
			select {
			case rp = <-replies:
			case <-changed: // closed, or a new ensemble: look again
				interrupted = true
			case <-ctx.Done():
				return r.LastAddConfirmed(), ctx.Err()
			}
			if interrupted {
				break
			}
			switch err := rp.Err(); {
			case err == nil:
				if vs, err := wire.ParseInt64s(rp.body, 1); err == nil && vs[0] > after {
					return r.advance(vs[0]), nil
				}
			case errors.Is(err, wire.ErrTimeout):
				waited = true
			}
		}
		if waited || interrupted {
			backoff = 10 * time.Millisecond
			continue
		}
		// No bookie could wait (none holds the ledger yet, it is fenced,
		// or they are unreachable): look again shortly.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return r.LastAddConfirmed(), ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Read returns entries first..last, which must not pass the LAC
// (ErrReadBeyondLAC). Each entry is read from its write set, falling back
// to the next bookie when one fails or lacks it; its checksum and ids are
// verified. Requests for many entries are in flight at once.
func (r *Reader) Read(ctx context.Context, first, last int64) ([]Entry, error) {
	if first < 0 || first > last {
		return nil, fmt.Errorf("bookie client: ledger %d: bad read range %d..%d", r.id, first, last)
	}
	r.mu.Lock()
	cur, lac := r.cur, r.lac
	r.mu.Unlock()
	if last > lac {
		return nil, fmt.Errorf("%w: ledger %d: entries %d..%d asked, LAC is %d", ErrReadBeyondLAC, r.id, first, last, lac)
	}
	raw, err := r.c.readEntries(ctx, r.id, &cur.md, first, last)
	if err != nil && cur.md.State != StateClosed && ctx.Err() == nil {
		// The writer may have changed ensembles since the metadata was
		// read: try once more with fresh metadata.
		if fresh, ferr := r.refresh(ctx); ferr == nil && len(fresh.md.Ensembles) != len(cur.md.Ensembles) {
			raw, err = r.c.readEntries(ctx, r.id, &fresh.md, first, last)
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]Entry, len(raw))
	for i, b := range raw {
		out[i] = Entry{ID: first + int64(i), Payload: entry.Payload(b), Buf: b}
	}
	return out, nil
}

// readEntries reads entries first..last (whole, verified) with up to
// readWindow in flight, each from the bookies of its write set in turn.
func (c *Client) readEntries(ctx context.Context, id int64, md *LedgerMetadata, first, last int64) ([][]byte, error) {
	n := int(last - first + 1)
	out := make([][]byte, n)
	tried := make([]int, n)
	errs := make([][]error, n)
	// Room for every request in flight, so that no answer waits: one per
	// entry, within the window. A Kafka fetch of large batches reads a few
	// entries at a time: a channel of 64 replies for each was 6 % of a
	// standalone's CPU in a catch-up read.
	replies := make(chan reply, min(readWindow, n))
	send := func(i int) {
		e := first + int64(i)
		ens := md.EnsembleFor(e)
		addr := ens[writeSetIndex(e, tried[i], len(ens))]
		c.request(addr, wire.OpRead, 0, wire.LedgerEntry(id, e), c.cfg.ReadTimeout, i, replies)
	}
	next, inflight := 0, 0
	for done := 0; done < n; {
		for inflight < readWindow && next < n {
			send(next)
			next++
			inflight++
		}
		var rp reply
		select {
		case rp = <-replies:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		i := rp.tag
		b, err := checkEntry(rp, id, first+int64(i))
		if err == nil {
			out[i] = b
			done++
			inflight--
			continue
		}
		errs[i] = append(errs[i], err)
		if tried[i]++; tried[i] < md.WriteQuorum {
			send(i)
			continue
		}
		return nil, fmt.Errorf("bookie client: ledger %d entry %d: no replica could be read: %w",
			id, first+int64(i), errors.Join(errs[i]...))
	}
	return out, nil
}

// checkEntry returns the verified entry in a Read reply. An in-process
// bookie's entry was verified as it left the disk (Local), so only its
// header is read.
func checkEntry(rp reply, ledger, entryID int64) ([]byte, error) {
	if err := rp.Err(); err != nil {
		return nil, err
	}
	verify := entry.Verify
	if rp.local {
		verify = entry.Parse
	}
	h, err := verify(rp.body)
	if err != nil {
		return nil, fmt.Errorf("bookie %s: %w", rp.addr, err)
	}
	if h.Ledger != ledger || h.Entry != entryID {
		return nil, fmt.Errorf("bookie %s: %w: asked for ledger %d entry %d, got ledger %d entry %d",
			rp.addr, entry.ErrMalformed, ledger, entryID, h.Ledger, h.Entry)
	}
	return rp.body, nil
}

// readLACs sends ReadLAC (with flags) to every bookie of the last ensemble
// and gathers answers until those that counts accepts cover every write set
// (Qw-Qa+1 each), or every bookie has answered, or ctx ends. It returns the
// largest LAC among the OK answers (-1 if none), which bookies counted, and
// the errors of the others.
func (c *Client) readLACs(ctx context.Context, id int64, md *LedgerMetadata, flags uint16, counts func(reply) bool) (int64, []bool, []error, error) {
	bookies := md.last().Bookies
	replies := make(chan reply, len(bookies))
	for i, b := range bookies {
		c.request(b, wire.OpReadLAC, flags, wire.Ledger(id), c.cfg.ReadTimeout, i, replies)
	}
	lac := int64(-1)
	ok := make([]bool, len(bookies))
	var errs []error
	for range bookies {
		var rp reply
		select {
		case rp = <-replies:
		case <-ctx.Done():
			return lac, ok, errs, ctx.Err()
		}
		if rp.Err() == nil {
			vs, err := wire.ParseInt64s(rp.body, 2)
			if err != nil {
				errs = append(errs, fmt.Errorf("bookie %s: %w", rp.addr, err))
				continue
			}
			lac = max(lac, vs[0])
		}
		if counts(rp) {
			ok[rp.tag] = true
		} else {
			errs = append(errs, rp.Err())
		}
		if done, _ := covered(ok, md.WriteQuorum, md.AckQuorum); done {
			break
		}
	}
	return lac, ok, errs, nil
}
