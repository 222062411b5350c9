package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// Persistence of durable cursors: a thin driver around the cursor's
// state. Each change bumps Cursor.changes; a write takes a snapshot under
// the lock, writes it by compare-and-set without the lock, and records
// what it covered. Writes are rate-limited (one per
// Config.CursorFlushInterval, coalescing the changes in between), one at a
// time per cursor, and forced by Flush, Close and resets.
//
// What a crash can lose: the snapshot written is the state at some
// moment, and acknowledgements only grow between resets (which are
// written before they return), so the node always holds a subset of what
// was acknowledged — messages are delivered again, never skipped. The
// same holds for the ranges cut by Config.MaxPersistedAckRanges.
//
// Ownership: the broker that opens the managed ledger rewrites every
// cursor node (loadCursor), so a previous owner's later writes fail on
// the version: that cursor is fenced (ErrFenced), as its managed ledger
// is.

// cursorFormat is the "format" of a cursor node. The JSON (storedCursor)
// is a stored format: change it only with a new number.
const cursorFormat = 1

// storedCursor is the value of /managed-ledgers/<name>/<cursor>:
//
//	{"format":1,"markDelete":{"ledgerId":7,"entryId":41},"offset":1030,
//	 "properties":{"kafka.offset":"1030"},
//	 "acked":[[7,43,7,45,1032,1040],[9,0,9,3,1200,1210]],
//	 "droppedRanges":12}
//
// markDelete: every entry up to it is acknowledged ((L, -1) is the point
// before ledger L). offset: the offset after it (the next message to
// deliver), -1 if unknown. acked: the ranges of entries acknowledged
// individually after it, in order, each [fromLedger, fromEntry, toLedger,
// toEntry, fromOffset, endOffset] (both ends included; offsets as in
// ackRange, -1 if unknown). droppedRanges: how many ranges after those
// were not written (Config.MaxPersistedAckRanges).
type storedCursor struct {
	Format     int               `json:"format"`
	MarkDelete Position          `json:"markDelete"`
	Offset     int64             `json:"offset"`
	Properties map[string]string `json:"properties,omitempty"`
	Acked      [][6]int64        `json:"acked,omitempty"`
	Dropped    int               `json:"droppedRanges,omitempty"`
}

func (s *storedCursor) validate() error {
	switch {
	case s.Format != cursorFormat:
		return fmt.Errorf("format %d, this broker reads %d", s.Format, cursorFormat)
	case s.MarkDelete.Entry < -1 || s.Offset < -1:
		return fmt.Errorf("mark-delete position %v, offset %d", s.MarkDelete, s.Offset)
	}
	prev := s.MarkDelete
	for _, a := range s.Acked {
		from, to := Position{a[0], a[1]}, Position{a[2], a[3]}
		if from.Compare(prev) <= 0 || to.Compare(from) < 0 || from.Entry < 0 || to.Entry < 0 || a[4] < -1 || a[5] < -1 {
			return fmt.Errorf("acknowledged range %v..%v after %v", from, to, prev)
		}
		prev = to
	}
	return nil
}

func encodeCursor(s *storedCursor) ([]byte, error) {
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("ledger: invalid cursor state: %w", err)
	}
	for {
		b, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		if len(b) <= meta.MaxValueSize || len(s.Acked) == 0 {
			return b, meta.CheckValue(b)
		}
		// Too large for a node: write fewer ranges (the rest are
		// delivered again after a crash).
		keep := len(s.Acked) / 2
		s.Dropped += len(s.Acked) - keep
		s.Acked = s.Acked[:keep]
	}
}

func decodeCursor(path string, b []byte) (*storedCursor, error) {
	var s storedCursor
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return &s, nil
}

// snapshotLocked returns the state to write.
func (c *Cursor) snapshotLocked() *storedCursor {
	c.acks.advance()
	s := &storedCursor{Format: cursorFormat, MarkDelete: c.acks.markDelete, Offset: c.acks.mdOffset,
		Properties: c.props} // props are replaced, never changed in place
	rs := c.acks.ranges
	n := min(len(rs), c.ml.cfg.MaxPersistedAckRanges)
	s.Acked = make([][6]int64, n)
	for i, r := range rs[:n] {
		s.Acked[i] = [6]int64{r.from.Ledger, r.from.Entry, r.to.Ledger, r.to.Entry, r.fromOffset, r.endOffset}
	}
	s.Dropped = len(rs) - n
	return s
}

// restore sets the cursor's state from a node.
func (c *Cursor) restore(s *storedCursor, v meta.Version) {
	c.acks = ackState{view: mlView{c.ml}, markDelete: s.MarkDelete, mdOffset: s.Offset}
	if s.Offset < 0 {
		c.acks.setMarkDelete(s.MarkDelete, -1)
	}
	c.acks.ranges = make([]ackRange, len(s.Acked))
	for i, a := range s.Acked {
		c.acks.ranges[i] = ackRange{Position{a[0], a[1]}, Position{a[2], a[3]}, a[4], a[5]}
	}
	c.acks.advance()
	c.props = s.Properties
	c.readPos = c.acks.view.next(c.acks.markDelete)
	c.version, c.persisted = v, s.MarkDelete
}

// changedLocked records a change to persist and, for an open durable
// cursor, makes sure a write is due.
func (c *Cursor) changedLocked() {
	c.changes++
	if c.path == "" || c.state != cursorOpen || c.timer != nil || c.writing != nil {
		return
	}
	c.scheduleLocked()
}

// scheduleLocked starts the timer of the next write: now, or one flush
// interval after the last write.
func (c *Cursor) scheduleLocked() {
	d := time.Until(c.lastWrite.Add(c.ml.cfg.CursorFlushInterval))
	c.timer = time.AfterFunc(max(d, 0), c.background)
}

// background is the timer's write.
func (c *Cursor) background() {
	c.mu.Lock()
	c.timer = nil
	target := c.changes
	c.mu.Unlock()
	if err := c.flushTo(c.ml.life, target); err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrNoCursor) {
		c.log.Warn("writing cursor state failed; retrying", "err", err)
	}
}

// Flush writes the cursor's state now if it changed since the last write
// and waits for that (a non-durable cursor has nothing to write).
func (c *Cursor) Flush(ctx context.Context) error {
	if c.path == "" {
		return nil
	}
	c.mu.Lock()
	target := c.changes
	c.mu.Unlock()
	return c.flushTo(ctx, target)
}

// flushTo returns once the node holds at least the first target changes,
// writing them if needed. Errors: ErrFenced (another broker owns the
// cursor), ErrNoCursor (deleted), the metadata store's.
func (c *Cursor) flushTo(ctx context.Context, target uint64) error {
	for {
		c.mu.Lock()
		switch {
		case c.written >= target:
			c.mu.Unlock()
			return nil
		case c.state == cursorFenced || c.state == cursorDeleted:
			err := c.err
			c.mu.Unlock()
			return err
		case c.writing != nil:
			ch := c.writing
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		s := c.snapshotLocked()
		upto, v := c.changes, c.version
		ch := make(chan struct{})
		c.writing = ch
		c.mu.Unlock()

		err := c.write(ctx, s, v)
		c.mu.Lock()
		c.writing = nil
		close(ch)
		moved := false
		if err == nil {
			moved = c.persisted != s.MarkDelete
			c.persisted = s.MarkDelete
			c.written = max(c.written, upto)
		}
		c.lastWrite = time.Now() // failures wait an interval too
		if c.written < c.changes && c.state == cursorOpen && c.timer == nil {
			c.scheduleLocked()
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if hook := c.ml.cfg.cursorWritten; hook != nil {
			hook(c, *s)
		}
		if moved {
			c.ml.scheduleTrim()
		}
	}
}

// write stores s by compare-and-set on version v. The offset after the
// mark-delete position is looked up first if unknown (it is the Kafka
// committed offset).
func (c *Cursor) write(ctx context.Context, s *storedCursor, v meta.Version) error {
	if s.Offset < 0 {
		if o, err := c.ml.offsetAt(ctx, mlView{c.ml}.next(s.MarkDelete)); err == nil {
			s.Offset = o
			c.mu.Lock()
			if c.acks.markDelete == s.MarkDelete && c.acks.mdOffset < 0 {
				c.acks.mdOffset = o
			}
			c.mu.Unlock()
		}
	}
	b, err := encodeCursor(s)
	if err != nil {
		return err
	}
	if hook := c.ml.cfg.cursorWriting; hook != nil {
		hook(c, *s)
	}
	st, err := c.ml.cfg.Meta.Set(ctx, c.path, b, v)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.version = st.Version
		return nil
	case errors.Is(err, meta.ErrBadVersion), errors.Is(err, meta.ErrNotFound):
		if c.state != cursorDeleted {
			c.log.Warn("cursor fenced: its node was changed elsewhere", "err", err)
			c.endLocked(cursorFenced, fmt.Errorf("%w: %v: %v", ErrFenced, c, err))
		}
		return c.err
	}
	return fmt.Errorf("ledger: %v: writing its state: %w", c, err)
}

// loadCursor reads a durable cursor's node and rewrites it unchanged, so
// that the version moves and a previous owner's writes fail. A conflict
// (the previous owner wrote meanwhile) reads again.
func (ml *ManagedLedger) loadCursor(ctx context.Context, name, path string) (*Cursor, error) {
	for attempt := 1; ; attempt++ {
		b, st, err := ml.cfg.Meta.Get(ctx, path)
		if err != nil {
			return nil, err
		}
		s, err := decodeCursor(path, b)
		if err != nil {
			return nil, err
		}
		st, err = ml.cfg.Meta.Set(ctx, path, b, st.Version)
		if errors.Is(err, meta.ErrBadVersion) && attempt < maxOpenAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		c := newCursor(ml, name, path, Position{})
		c.restore(s, st.Version)
		return c, nil
	}
}

// createCursor creates a durable cursor's node, reading from `from`. If
// the node exists, it is loaded instead.
func (ml *ManagedLedger) createCursor(ctx context.Context, name, path string, from Position) (*Cursor, error) {
	c := newCursor(ml, name, path, from)
	b, err := encodeCursor(c.snapshotLocked()) // not shared yet
	if err != nil {
		return nil, err
	}
	if _, err := ml.cfg.Meta.Create(ctx, path, b, 0); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return ml.loadCursor(ctx, name, path)
		}
		return nil, err
	}
	c.version = 0
	return c, nil
}
