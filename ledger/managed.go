package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
)

// ManagedLedger is a named, unbounded log of entries over a list of
// bookie ledgers. Its methods are safe for concurrent use.
type ManagedLedger struct {
	name, path string
	f          *Factory
	cfg        *Config
	quorums    *[3]int // E, Qw, Qa of new ledgers (WithQuorums); nil: the factory's
	log        *slog.Logger
	cacheID    uint64 // this instance's key space in the shared cache

	// ops holds one token: the operation that changes the list (rollover,
	// trim, terminate, close, delete) holds it for its whole run, so
	// versions and the in-memory list move together. It is not a state
	// lock: mu is never held while waiting for it.
	ops chan struct{}
	// life ends when the managed ledger is closed; it bounds background
	// operations.
	life   context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	state    mlState
	stateErr error        // why appends fail (fenced, terminated, closed)
	version  meta.Version // of the list node, as last read or written
	// ledgers is the list: every ledger of the managed ledger in order,
	// the current one last (while there is one). Entries, sizes, message
	// counts and publish times are those confirmed to appenders.
	ledgers      []*ledger
	terminatedAt Position
	cur          *current // the ledger appends go to; nil unless open
	prepared     *current // the next ledger, created and listed, not yet current
	rolling      bool     // a rollover (or reset after a failure) is running
	// failed is set, in completion order, when an append fails for any
	// reason other than fencing: the appends after it fail too (their
	// offsets would leave a gap) until a reset closes the ledgers at
	// their last confirmed entry and starts a new one.
	failed     error
	nextOffset int64 // offset of the next append
	lastPubMs  int64 // publish time of the last append; publish times never go back

	queue       []*pendingAdd // appends not yet completed to their callers, in order
	sentPending int           // of those, how many were sent to a writer
	delivering  bool          // a goroutine is running callbacks
	drained     chan struct{} // closed when sentPending reaches 0

	lastConfirmed Position // last entry whose append completed successfully
	confirmedNext int64    // offset after it
	waiters       chan struct{}
	readers       map[int64]LedgerReader
	rollTimer     *time.Timer
	retryAt       time.Time // no rollover attempt before (after one failed)
	toDelete      []int64   // ledgers dropped from the list in memory, to delete once it is stored

	// cursors holds the durable cursors by name (cursors.go); cursorOps
	// is a one-slot token ordering OpenCursor and DeleteCursor. Cursor
	// locks are taken before ml.mu, never while holding it.
	cursors   map[string]*Cursor
	cursorOps chan struct{}
	trimming  bool // a trim driven by cursors runs (trimLoop)
	trimAgain bool // and another one was asked for meanwhile
	trimTimer *time.Timer
	// retention overrides Config.RetentionTime/RetentionSize when set
	// (SetRetention; a namespace's retention policy).
	retention *retentionLimits
}

type mlState int

const (
	mlOpen mlState = iota
	mlTerminated
	mlFenced
	mlClosed
)

// ledger is one ledger of the list as this process knows it.
type ledger struct {
	id           int64
	closed       bool // closed on the bookies and recorded so in the list
	entries      int64
	size         int64
	messages     int64
	firstOffset  int64
	firstPubMs   int64
	lastPubMs    int64
	index        sparseIndex
	discarded    bool // removed from the list by a reset (never confirmed)
	closedWriter bool // its writer was closed (bookie metadata CLOSED)
	// pin holds confirmed entries of a ledger this process writes that
	// the bookies cannot serve yet: a reader never reads past the LAC the
	// bookies learnt, and the writer piggybacks its LAC on later adds
	// only. Entry k's add carried a LAC of at least lacAtSend(k), so once
	// k is confirmed every entry up to lacAtSend(k) is readable from
	// bookies. Contiguous entries; dropped when the writer is closed.
	pin []pinned
}

func (l *ledger) stored() storedLedger {
	s := storedLedger{LedgerID: l.id, Closed: l.closed, FirstOffset: l.firstOffset}
	if l.closed {
		s.Entries, s.Size, s.Messages = l.entries, l.size, l.messages
		s.FirstPublishTime, s.LastPublishTime = l.firstPubMs, l.lastPubMs
	}
	return s
}

// nextOffset is the offset after the ledger's last confirmed message.
func (l *ledger) nextOffset() int64 { return l.firstOffset + l.messages }

// current is a ledger being written by this process.
type current struct {
	l       *ledger
	w       LedgerWriter
	created time.Time
	sent    int64 // entries handed to the writer
	size    int64 // their bytes
}

type pinned struct {
	entry int64
	data  []byte
}

// Name returns the managed ledger's name.
func (ml *ManagedLedger) Name() string { return ml.name }

// LastConfirmed returns the position of the last entry appended
// successfully ((current ledger, -1) while there is none).
func (ml *ManagedLedger) LastConfirmed() Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.lastConfirmed
}

// NextOffset returns the offset after the last confirmed message: the
// Kafka high watermark (and log end offset).
func (ml *ManagedLedger) NextOffset() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.confirmedNext
}

// FirstOffset returns the offset of the oldest message still stored
// (NextOffset when there is none): the Kafka log start offset.
func (ml *ManagedLedger) FirstOffset() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.firstOffsetLocked()
}

func (ml *ManagedLedger) firstOffsetLocked() int64 {
	for _, l := range ml.ledgers {
		if l.entries > 0 {
			return l.firstOffset
		}
	}
	return ml.confirmedNext
}

// FirstPosition returns the position of the oldest entry still stored, or
// the position after LastConfirmed when there is none.
func (ml *ManagedLedger) FirstPosition() Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for _, l := range ml.ledgers {
		if l.entries > 0 {
			return Position{l.id, 0}
		}
	}
	return Position{ml.lastConfirmed.Ledger, ml.lastConfirmed.Entry + 1}
}

// NumberOfEntries returns the number of entries stored (confirmed).
func (ml *ManagedLedger) NumberOfEntries() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for _, l := range ml.ledgers {
		n += l.entries
	}
	return n
}

// Terminated reports whether Terminate ended the log (appends fail with
// ErrTerminated).
func (ml *ManagedLedger) Terminated() bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.state == mlTerminated
}

// TotalSize returns the bytes of the entries stored, headers included.
func (ml *ManagedLedger) TotalSize() int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for _, l := range ml.ledgers {
		n += l.size
	}
	return n
}

// LedgerInfo describes one ledger of the list.
type LedgerInfo struct {
	LedgerID      int64
	Entries, Size int64
	FirstOffset   int64
	Messages      int64
	FirstPublish  time.Time // zero when empty
	LastPublish   time.Time
	Closed        bool // final; false for the current ledger
}

// Ledgers returns the ledger list as this instance knows it.
func (ml *ManagedLedger) Ledgers() []LedgerInfo {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	out := make([]LedgerInfo, len(ml.ledgers))
	for i, l := range ml.ledgers {
		out[i] = LedgerInfo{LedgerID: l.id, Entries: l.entries, Size: l.size, FirstOffset: l.firstOffset,
			Messages: l.messages, Closed: l.closed}
		if l.entries > 0 {
			out[i].FirstPublish, out[i].LastPublish = time.UnixMilli(l.firstPubMs), time.UnixMilli(l.lastPubMs)
		}
	}
	return out
}

// WaitNewEntries blocks until an entry after `after` is confirmed, ctx
// ends, or no entry can come any more (ErrTerminated, ErrClosed,
// ErrFenced). Tailing readers call it when a Read came back empty.
func (ml *ManagedLedger) WaitNewEntries(ctx context.Context, after Position) error {
	for {
		ch, err := ml.newEntries(after)
		if err != nil || ch == nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// newEntries returns nil if an entry after `after` is confirmed, the
// error that ends waiting if none can come, or else a channel closed at
// the next confirmation or change of state.
func (ml *ManagedLedger) newEntries(after Position) (<-chan struct{}, error) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.lastConfirmed.Compare(after) > 0 {
		return nil, nil
	}
	if ml.state != mlOpen {
		return nil, ml.stateErr
	}
	if ml.waiters == nil {
		ml.waiters = make(chan struct{})
	}
	return ml.waiters, nil
}

func (ml *ManagedLedger) wakeLocked() {
	if ml.waiters != nil {
		close(ml.waiters)
		ml.waiters = nil
	}
}

// setStateLocked moves to a final state (unless one is set) and wakes
// waiters so they see it.
func (ml *ManagedLedger) setStateLocked(s mlState, err error) {
	if ml.state == mlFenced || ml.state == mlClosed || (ml.state == mlTerminated && s == mlTerminated) {
		return
	}
	ml.state, ml.stateErr = s, err
	ml.wakeLocked()
}

// fenceLocked records that another broker took the managed ledger over.
func (ml *ManagedLedger) fenceLocked(cause error) error {
	if ml.state != mlFenced {
		ml.log.Warn("managed ledger fenced: opened elsewhere", "err", cause)
		ml.state = mlFenced
		ml.stateErr = fmt.Errorf("%w: managed ledger %s: %v", ErrFenced, ml.name, cause)
		ml.wakeLocked()
	}
	return ml.stateErr
}

func isFenced(err error) bool { return errors.Is(err, ErrFenced) || errors.Is(err, client.ErrFenced) }

// acquire takes the operation token.
func (ml *ManagedLedger) acquire(ctx context.Context) error {
	select {
	case ml.ops <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ml *ManagedLedger) release() { <-ml.ops }

// listLocked is the list to store: the in-memory ledgers plus extra
// (a ledger created ahead of a rollover).
func (ml *ManagedLedger) listLocked(extra ...*ledger) (*storedList, meta.Version) {
	l := &storedList{Format: metadataFormat, State: stateOpen}
	if ml.state == mlTerminated {
		l.State = stateTerminated
		at := ml.terminatedAt
		l.TerminatedAt = &at
	}
	for _, x := range ml.ledgers {
		l.Ledgers = append(l.Ledgers, x.stored())
	}
	for _, x := range extra {
		l.Ledgers = append(l.Ledgers, x.stored())
	}
	return l, ml.version
}

// store writes the list by compare-and-set. Only the holder of the
// operation token calls it. A version conflict means another broker
// opened the managed ledger: this one is fenced.
func (ml *ManagedLedger) store(ctx context.Context, l *storedList, v meta.Version) error {
	b, err := encodeList(l)
	if err != nil {
		return err
	}
	st, err := ml.cfg.Meta.Set(ctx, ml.path, b, v)
	ml.mu.Lock()
	defer ml.mu.Unlock()
	switch {
	case err == nil:
		ml.version = st.Version
		return nil
	case errors.Is(err, meta.ErrBadVersion), errors.Is(err, meta.ErrNotFound):
		return ml.fenceLocked(err)
	}
	return fmt.Errorf("ledger: managed ledger %s: storing the ledger list: %w", ml.name, err)
}

// closeWriter closes a ledger's writer, retrying failures of the metadata
// store until it succeeds, the writer turns out fenced, or ctx ends.
func (ml *ManagedLedger) closeWriter(ctx context.Context, c *current) error {
	backoff := 50 * time.Millisecond
	for {
		err := c.w.Close(ctx)
		if err == nil {
			ml.mu.Lock()
			c.l.closedWriter = true
			c.l.pin = nil
			ml.mu.Unlock()
			return nil
		}
		if isFenced(err) {
			ml.mu.Lock()
			defer ml.mu.Unlock()
			return ml.fenceLocked(err)
		}
		ml.log.Warn("closing ledger failed; retrying", "ledger", c.l.id, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("ledger: managed ledger %s: closing ledger %d: %w", ml.name, c.l.id, err)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// waitDrained waits until every append sent to a writer has completed.
func (ml *ManagedLedger) waitDrained(ctx context.Context) error {
	ml.mu.Lock()
	if ml.sentPending == 0 {
		ml.mu.Unlock()
		return nil
	}
	if ml.drained == nil {
		ml.drained = make(chan struct{})
	}
	ch := ml.drained
	ml.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finishCurrentLocked records the current ledger as closed with what was
// confirmed, removing it instead when it is empty and not the only
// ledger. It returns the id to delete from the bookies, or -1.
func (ml *ManagedLedger) finishCurrentLocked() int64 {
	c := ml.cur
	ml.cur = nil
	if ml.rollTimer != nil {
		ml.rollTimer.Stop()
	}
	if c == nil || !c.l.closedWriter {
		return -1
	}
	if c.l.entries == 0 && len(ml.ledgers) > 1 {
		ml.removeLedgerLocked(c.l)
		return c.l.id
	}
	c.l.closed = true
	return -1
}

func (ml *ManagedLedger) removeLedgerLocked(l *ledger) {
	for i, x := range ml.ledgers {
		if x == l {
			ml.ledgers = append(ml.ledgers[:i:i], ml.ledgers[i+1:]...)
			break
		}
	}
	delete(ml.readers, l.id)
}

// deleteLedgers deletes ledgers from the bookies, best effort: one that
// cannot be deleted is logged (it is no longer in any list).
func (ml *ManagedLedger) deleteLedgers(ctx context.Context, ids ...int64) error {
	var errs []error
	for _, id := range ids {
		if id < 0 {
			continue
		}
		if err := ml.cfg.Bookies.DeleteLedger(ctx, id); err != nil && !errors.Is(err, client.ErrNoLedger) {
			ml.log.Warn("deleting ledger failed; it is orphaned", "ledger", id, "err", err)
			errs = append(errs, fmt.Errorf("ledger %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Terminate stops appends for good: pending appends complete, the
// current ledger is closed and the list is marked terminated. It returns
// the last entry's position. Reads go on; later appends fail with
// ErrTerminated. Terminating again returns the same position.
func (ml *ManagedLedger) Terminate(ctx context.Context) (Position, error) {
	if err := ml.acquire(ctx); err != nil {
		return Position{}, err
	}
	defer ml.release()
	ml.mu.Lock()
	switch ml.state {
	case mlTerminated:
		if ml.cur == nil {
			at := ml.terminatedAt
			ml.mu.Unlock()
			return at, nil
		}
	case mlOpen:
		ml.setStateLocked(mlTerminated, fmt.Errorf("%w: %s", ErrTerminated, ml.name))
	default:
		err := ml.stateErr
		ml.mu.Unlock()
		return Position{}, err
	}
	c, prep := ml.cur, ml.prepared
	ml.prepared = nil
	ml.mu.Unlock()

	var drop []int64
	if prep != nil { // listed ahead of a rollover; the list stored below drops it
		prep.w.Close(ctx)
		drop = append(drop, prep.l.id)
	}
	if c != nil {
		if err := ml.closeWriter(ctx, c); err != nil {
			return Position{}, err
		}
	}
	if err := ml.waitDrained(ctx); err != nil {
		return Position{}, err
	}
	ml.mu.Lock()
	drop = append(drop, ml.finishCurrentLocked())
	ml.terminatedAt = ml.lastConfirmed
	l, v := ml.listLocked()
	ml.mu.Unlock()
	if err := ml.store(ctx, l, v); err != nil {
		return Position{}, err
	}
	ml.deleteLedgers(ctx, drop...)
	ml.log.Info("managed ledger terminated", "lastEntry", ml.terminatedAt)
	return ml.terminatedAt, nil
}

// Close stops appends (ErrClosed), closes the cursors (writing their
// state), waits for pending appends, closes the current ledger and
// records it in the list, so that the next open need not recover it. The
// cache keeps entries until they are evicted.
func (ml *ManagedLedger) Close(ctx context.Context) (err error) {
	ml.mu.Lock()
	if ml.state == mlClosed {
		ml.mu.Unlock()
		return nil
	}
	wasOpen := ml.state == mlOpen || ml.state == mlTerminated
	ml.setStateLocked(mlClosed, fmt.Errorf("%w: %s", ErrClosed, ml.name))
	if ml.trimTimer != nil {
		ml.trimTimer.Stop()
	}
	ml.mu.Unlock()
	defer ml.f.forget(ml)
	// Cursors write their last acknowledgements (a fenced one cannot:
	// its node is the new owner's). A failure does not stop the close.
	if cerr := ml.closeCursors(ctx); cerr != nil {
		defer func() {
			err = errors.Join(err, fmt.Errorf("ledger: closing managed ledger %s: cursors: %w", ml.name, cerr))
		}()
	}
	if err := ml.acquire(ctx); err != nil {
		ml.cancel()
		return fmt.Errorf("ledger: closing managed ledger %s: %w", ml.name, err)
	}
	defer ml.release()
	defer ml.cancel()

	if !wasOpen {
		return nil // fenced: the list is the new owner's
	}
	ml.mu.Lock()
	c, prep := ml.cur, ml.prepared
	ml.prepared = nil
	ml.mu.Unlock()
	if c == nil {
		return nil
	}
	var drop []int64
	if prep != nil { // listed ahead of a rollover; the list stored below drops it
		prep.w.Close(ctx)
		drop = append(drop, prep.l.id)
	}
	if err := ml.closeWriter(ctx, c); err != nil {
		if isFenced(err) {
			return nil // the new owner has it: nothing of ours to record
		}
		return err
	}
	if err := ml.waitDrained(ctx); err != nil {
		return err
	}
	ml.mu.Lock()
	drop = append(drop, ml.finishCurrentLocked())
	l, v := ml.listLocked()
	ml.mu.Unlock()
	if err := ml.store(ctx, l, v); err != nil {
		if isFenced(err) {
			return nil
		}
		return err
	}
	ml.deleteLedgers(ctx, drop...)
	ml.log.Debug("managed ledger closed", "lastEntry", ml.LastConfirmed())
	return nil
}

// Delete deletes the managed ledger: its cursors (every cursor node, open
// here or not), its metadata node, then every ledger on the bookies. The
// instance is closed. A crash in between leaves orphan ledgers, whose
// metadata names the managed ledger (custom property "managed-ledger").
// A fenced managed ledger is the new owner's: Delete returns ErrFenced.
func (ml *ManagedLedger) Delete(ctx context.Context) error {
	ml.mu.Lock()
	if ml.state == mlFenced {
		err := ml.stateErr
		ml.mu.Unlock()
		return err
	}
	ml.setStateLocked(mlClosed, fmt.Errorf("%w: %s was deleted", ErrClosed, ml.name))
	if ml.trimTimer != nil {
		ml.trimTimer.Stop()
	}
	ml.mu.Unlock()
	defer ml.f.forget(ml)
	if err := ml.acquire(ctx); err != nil {
		return err
	}
	defer ml.release()
	defer ml.cancel()
	ml.mu.Lock()
	c, prep := ml.cur, ml.prepared
	ml.cur, ml.prepared = nil, nil
	ids := make([]int64, 0, len(ml.ledgers)+1)
	for _, l := range ml.ledgers {
		ids = append(ids, l.id)
	}
	if prep != nil {
		ids = append(ids, prep.l.id)
	}
	v := ml.version
	ml.mu.Unlock()
	for _, x := range []*current{c, prep} {
		if x != nil {
			x.w.Close(ctx) // its error does not matter: the ledger goes
		}
	}
	if err := ml.deleteCursors(ctx); err != nil {
		return fmt.Errorf("ledger: deleting managed ledger %s: deleting cursors: %w", ml.name, err)
	}
	if err := ml.cfg.Meta.Delete(ctx, ml.path, v); err != nil {
		if errors.Is(err, meta.ErrBadVersion) {
			ml.mu.Lock()
			err = ml.fenceLocked(err)
			ml.mu.Unlock()
		}
		return fmt.Errorf("ledger: deleting managed ledger %s: %w", ml.name, err)
	}
	return ml.deleteLedgers(ctx, ids...)
}
