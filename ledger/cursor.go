package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// Cursor reads a managed ledger and keeps what its reader acknowledged: a
// mark-delete position (every entry up to it is acknowledged) and the
// entries acknowledged individually after it. A Pulsar subscription, or a
// Kafka consumer group on one partition, is a durable cursor: its state is
// written to the metadata store (cursorstore.go) and it holds back
// trimming. A non-durable cursor (a reader, a Kafka fetch outside any
// group) keeps its state in memory and holds nothing back.
//
// Positions are entries: acknowledging single messages of a batch is the
// broker's concern. Its methods are safe for concurrent use, but
// ReadEntries calls run one at a time.
type Cursor struct {
	ml   *ManagedLedger
	name string // "" for a non-durable cursor
	path string // metadata node; "" for a non-durable cursor
	log  *slog.Logger

	reading chan struct{} // one-slot token: the running ReadEntries
	done    chan struct{} // closed when the cursor stops being open: wakes waiters

	mu   sync.Mutex
	acks ackState
	// readPos is the next position to read: after the mark-delete
	// position, possibly on an acknowledged entry (reads skip those).
	readPos Position
	readGen uint64 // bumped by Rewind and resets: a read begun before them does not move readPos
	props   map[string]string
	state   cursorState
	err     error // why operations fail once the cursor is not open

	// Persistence of a durable cursor (cursorstore.go).
	version   meta.Version  // of the node, as last read or written
	changes   uint64        // counts the changes to persist
	written   uint64        // the changes the node holds
	persisted Position      // the mark-delete position the node holds
	writing   chan struct{} // non-nil while a write runs; closed when it ends
	timer     *time.Timer   // the next write, when one is due
	lastWrite time.Time
}

type cursorState uint8

const (
	cursorOpen cursorState = iota
	cursorClosed
	cursorDeleted
	cursorFenced
)

// maxPropertiesSize bounds the properties of a mark-delete position (keys
// and values, in bytes), so that a cursor's node always fits the metadata
// store.
const maxPropertiesSize = 64 << 10

func newCursor(ml *ManagedLedger, name, path string, readFrom Position) *Cursor {
	c := &Cursor{ml: ml, name: name, path: path, reading: make(chan struct{}, 1), done: make(chan struct{}),
		log: ml.log.With("cursor", name)}
	c.acks = newAckState(mlView{ml}, before(readFrom))
	c.readPos = readFrom
	c.persisted = c.acks.markDelete
	return c
}

// Name returns the cursor's name ("" for a non-durable cursor).
func (c *Cursor) Name() string { return c.name }

// Durable reports whether the cursor is persisted.
func (c *Cursor) Durable() bool { return c.path != "" }

// MarkDeletePosition returns the position up to which every entry is
// acknowledged.
func (c *Cursor) MarkDeletePosition() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acks.advance()
	return c.acks.markDelete
}

// PersistedMarkDelete returns the mark-delete position the metadata store
// holds (a durable cursor restarts from there after a crash).
func (c *Cursor) PersistedMarkDelete() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.persisted
}

// ReadPosition returns the position of the next entry ReadEntries would
// return (if it is confirmed by then).
func (c *Cursor) ReadPosition() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acks.firstUnacked(c.readPos)
}

// Properties returns a copy of the properties stored with the mark-delete
// position.
func (c *Cursor) Properties() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.props)
}

// AckedRanges returns the entries acknowledged individually after the
// mark-delete position, as [from, to] ranges in order. The slice is the
// caller's.
func (c *Cursor) AckedRanges() [][2]Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acks.advance()
	out := make([][2]Position, len(c.acks.ranges))
	for i, r := range c.acks.ranges {
		out[i] = [2]Position{r.from, r.to}
	}
	return out
}

// IsAcked reports whether the entry at p is acknowledged.
func (c *Cursor) IsAcked(p Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acks.acked(p)
}

func (c *Cursor) usableLocked() error {
	if c.state != cursorOpen {
		return c.err
	}
	return nil
}

// endLocked moves the cursor out of the open state (once) and wakes its
// waiters.
func (c *Cursor) endLocked(s cursorState, err error) {
	if c.state == cursorOpen {
		close(c.done)
	}
	if c.state == cursorFenced || c.state == cursorDeleted {
		return
	}
	c.state, c.err = s, err
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

func (c *Cursor) String() string {
	if c.path == "" {
		return fmt.Sprintf("non-durable cursor on %s", c.ml.name)
	}
	return fmt.Sprintf("cursor %s of %s", c.name, c.ml.name)
}

// ReadEntries returns up to maxEntries entries from the read position on,
// skipping acknowledged ones, and moves the read position after them. No
// entries (and no error) at the end: WaitNewEntries waits for more. A
// cursor whose read position was trimmed away (a non-durable one that fell
// behind retention) goes on from the oldest entry stored.
func (c *Cursor) ReadEntries(ctx context.Context, maxEntries int) ([]Entry, error) {
	select {
	case c.reading <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.reading }()
	var out []Entry
	for skips := 0; len(out) < maxEntries; {
		c.mu.Lock()
		if err := c.usableLocked(); err != nil {
			c.mu.Unlock()
			return out, err
		}
		from := c.acks.firstUnacked(c.readPos)
		c.readPos = from
		// Read up to the next acknowledged range only.
		n := int64(maxEntries - len(out))
		if r, ok := c.acks.rangeAfter(from); ok {
			n = max(min(n, c.ml.entriesBetween(from, r)), 1)
		}
		gen := c.readGen
		c.mu.Unlock()

		es, err := c.ml.Read(ctx, from, int(n))
		if err != nil {
			if skips < 3 && c.skipTrimmed(from, gen) {
				skips++
				continue
			}
			return out, fmt.Errorf("%v: %w", c, err)
		}
		c.mu.Lock()
		if gen != c.readGen {
			c.mu.Unlock()
			return out, nil // rewound or reset meanwhile
		}
		for _, e := range es {
			if !c.acks.acked(e.Position) {
				out = append(out, e)
			}
		}
		if len(es) > 0 {
			c.readPos = c.acks.view.next(es[len(es)-1].Position)
		}
		c.mu.Unlock()
		if int64(len(es)) < n {
			break
		}
	}
	return out, nil
}

// skipTrimmed moves the read position of a cursor that failed to read at
// from to the oldest entry stored, if from is before it (trimmed). A
// non-durable cursor's mark-delete position follows.
func (c *Cursor) skipTrimmed(from Position, gen uint64) bool {
	first, _ := c.ml.bounds()
	if from.Compare(first) >= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.readGen {
		return true
	}
	c.readPos = first
	if c.path == "" {
		c.acks.markDeleteTo(before(first))
	}
	c.log.Info("read position was trimmed; going on from the oldest entry", "from", from, "to", first)
	return true
}

// WaitNewEntries blocks until an entry at or after the read position is
// confirmed, ctx ends, the cursor closes (ErrCursorClosed), or no entry
// can come any more (ErrTerminated, ErrClosed, ErrFenced). It is woken by
// the append that confirms the entry; nothing polls.
func (c *Cursor) WaitNewEntries(ctx context.Context) error {
	for {
		c.mu.Lock()
		if err := c.usableLocked(); err != nil {
			c.mu.Unlock()
			return err
		}
		from := c.acks.firstUnacked(c.readPos)
		c.mu.Unlock()
		ch, err := c.ml.newEntries(before(from))
		if err != nil || ch == nil {
			return err
		}
		select {
		case <-ch:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReadEntriesOrWait is ReadEntries, waiting (WaitNewEntries) while there
// is nothing to read.
func (c *Cursor) ReadEntriesOrWait(ctx context.Context, maxEntries int) ([]Entry, error) {
	for {
		es, err := c.ReadEntries(ctx, maxEntries)
		if err != nil || len(es) > 0 {
			return es, err
		}
		if err := c.WaitNewEntries(ctx); err != nil {
			return nil, err
		}
	}
}

// MarkDelete acknowledges every entry up to pos (a cumulative
// acknowledgement). props, when not nil, replace the properties stored
// with the mark-delete position (a Kafka group keeps its committed offset
// and metadata there); nil keeps them. A position before the mark-delete
// position changes nothing (ResetTo moves back); the same position only
// sets the properties. A position after the last confirmed entry is
// ErrOffsetOutOfRange.
//
// The change is persisted asynchronously (Config.CursorFlushInterval);
// Flush or Close wait for it.
func (c *Cursor) MarkDelete(pos Position, props map[string]string) error {
	if err := checkProperties(props); err != nil {
		return fmt.Errorf("%v: %w", c, err)
	}
	if last := c.ml.LastConfirmed(); pos.Compare(last) > 0 || pos.Entry < -1 {
		return fmt.Errorf("%w: %v: mark-delete at %v, the last entry is %v", ErrOffsetOutOfRange, c, pos, last)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(); err != nil {
		return err
	}
	switch pos.Compare(c.acks.markDelete) {
	case -1:
		return nil
	case 1:
		c.acks.markDeleteTo(pos)
		c.movedLocked()
	}
	if props != nil {
		c.props = maps.Clone(props)
	}
	c.changedLocked()
	return nil
}

// Delete acknowledges the entries at ps individually. Entries already
// acknowledged are skipped; a position that is not a confirmed entry
// makes the call fail (ErrOffsetOutOfRange) without acknowledging any.
// The mark-delete position moves over what becomes a contiguous
// acknowledged prefix. Persisted as MarkDelete is.
func (c *Cursor) Delete(ps ...Position) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(); err != nil {
		return err
	}
	if k := c.ml.checkEntries(c.acks.markDelete, ps); k >= 0 {
		return fmt.Errorf("%w: %v: %v is not an entry", ErrOffsetOutOfRange, c, ps[k])
	}
	changed := false
	md := c.acks.markDelete
	for _, p := range ps {
		changed = c.acks.ack(p) || changed
	}
	if c.acks.markDelete != md {
		c.movedLocked()
	}
	if changed {
		c.changedLocked()
	}
	return nil
}

// movedLocked keeps the read position after the mark-delete position.
func (c *Cursor) movedLocked() {
	if c.readPos.Compare(c.acks.markDelete) <= 0 {
		c.readPos = c.acks.view.next(c.acks.markDelete)
	}
}

func checkProperties(props map[string]string) error {
	n := 0
	for k, v := range props {
		n += len(k) + len(v)
	}
	if n > maxPropertiesSize {
		return fmt.Errorf("ledger: cursor properties of %d bytes, the limit is %d", n, maxPropertiesSize)
	}
	return nil
}

// Rewind moves the read position back to the first entry after the
// mark-delete position: unacknowledged entries are read again.
func (c *Cursor) Rewind() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readPos = c.acks.view.next(c.acks.markDelete)
	c.readGen++
}

// ResetTo makes pos the next entry to read and acknowledges everything
// before it, forgetting every acknowledgement after it: the cursor moves
// back or forward. A position before the oldest entry stored resets to
// it, one after the last confirmed entry to the end. A durable cursor's
// new state is persisted before ResetTo returns.
func (c *Cursor) ResetTo(ctx context.Context, pos Position) error {
	return c.reset(ctx, c.ml.startPosition(StartAt(pos)), -1)
}

// ResetToOffset resets the cursor (see ResetTo) to the entry holding
// message offset: that whole entry is read again, so a batch is never cut
// (a Kafka consumer skips the records before its fetch offset). An offset
// equal to NextOffset resets to the end; one outside
// FirstOffset..NextOffset is ErrOffsetOutOfRange.
func (c *Cursor) ResetToOffset(ctx context.Context, offset int64) error {
	if offset == c.ml.NextOffset() {
		_, end := c.ml.bounds()
		return c.reset(ctx, end, -1)
	}
	info, err := c.ml.FindOffset(ctx, offset)
	if err != nil {
		return err
	}
	return c.reset(ctx, info.Position, info.Header.FirstOffset)
}

// ResetToTime resets the cursor (see ResetTo) to the first entry
// published at or after t, or to the end if every entry is older.
func (c *Cursor) ResetToTime(ctx context.Context, t time.Time) error {
	info, err := c.ml.FindTime(ctx, t)
	if errors.Is(err, ErrOffsetOutOfRange) {
		_, end := c.ml.bounds()
		return c.reset(ctx, end, -1)
	}
	if err != nil {
		return err
	}
	return c.reset(ctx, info.Position, info.Header.FirstOffset)
}

// reset makes from the next entry to read; offset is its first message's
// offset, or -1 if not known.
func (c *Cursor) reset(ctx context.Context, from Position, offset int64) error {
	c.mu.Lock()
	if err := c.usableLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	c.acks.reset(before(from), offset)
	c.readPos = from
	c.readGen++
	c.changedLocked()
	target := c.changes
	c.mu.Unlock()
	c.log.Info("cursor reset", "to", from)
	if c.path == "" {
		return nil
	}
	return c.flushTo(ctx, target)
}

// Backlog returns what the cursor has not acknowledged (see Backlog). The
// offsets of the mark-delete position and of the acknowledged ranges are
// usually known from the ledger list, the index or the cache; those that
// are not are read once (an entry header each) and kept.
func (c *Cursor) Backlog(ctx context.Context) (Backlog, error) {
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		c.acks.advance()
		missing := c.acks.missingOffsets()
		if len(missing) == 0 {
			sh := c.ml.shape()
			b := c.acks.backlog(&sh)
			c.mu.Unlock()
			return b, nil
		}
		c.mu.Unlock()
		if attempt == 3 {
			return Backlog{}, fmt.Errorf("ledger: %v: offsets keep changing while counting the backlog", c)
		}
		found := make(map[Position]int64, len(missing))
		for _, p := range missing {
			o, err := c.ml.offsetAt(ctx, p)
			if err != nil {
				return Backlog{}, fmt.Errorf("%v: counting the backlog: %w", c, err)
			}
			found[p] = o
		}
		c.mu.Lock()
		c.acks.fillOffsets(found)
		c.mu.Unlock()
	}
}

// Close stops the cursor (ErrCursorClosed from then on) and, for a durable
// one, writes its state if it changed since the last write. A closed
// durable cursor still holds back trimming; OpenCursor opens it again.
func (c *Cursor) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.state != cursorOpen {
		c.mu.Unlock()
		return nil
	}
	c.endLocked(cursorClosed, fmt.Errorf("%w: %v", ErrCursorClosed, c))
	target := c.changes
	c.mu.Unlock()
	if c.path == "" {
		return nil
	}
	err := c.flushTo(ctx, target)
	if errors.Is(err, ErrFenced) || errors.Is(err, ErrNoCursor) {
		return nil // nothing of ours to write any more
	}
	return err
}
