package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// The managed ledger's side of cursors: the durable cursors it knows (all
// of those stored, loaded when it opens, so that trimming respects
// subscriptions nobody has reopened yet), and trimming driven by them.

// cursorPath returns the node of the durable cursor name, or
// ErrInvalidCursorName. The managed ledger's node has no other children.
// Names are one path element: a broker escapes subscription names and
// Kafka group ids that contain "/".
func (ml *ManagedLedger) cursorPath(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return "", fmt.Errorf("%w %q: must be one path element", ErrInvalidCursorName, name)
	}
	p := meta.Join(ml.path, name)
	if err := meta.ValidatePath(p); err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidCursorName, name, err)
	}
	return p, nil
}

func (ml *ManagedLedger) acquireCursorOps(ctx context.Context) error {
	select {
	case ml.cursorOps <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ml *ManagedLedger) releaseCursorOps() { <-ml.cursorOps }

// OpenCursor opens the durable cursor name, creating it at start if it
// does not exist (start is ignored otherwise). An open cursor is returned
// as it is: a name has one *Cursor at a time; one that was closed is
// reloaded from its node.
func (ml *ManagedLedger) OpenCursor(ctx context.Context, name string, start Start) (*Cursor, error) {
	path, err := ml.cursorPath(name)
	if err != nil {
		return nil, err
	}
	if err := ml.acquireCursorOps(ctx); err != nil {
		return nil, err
	}
	defer ml.releaseCursorOps()
	ml.mu.Lock()
	if ml.state == mlClosed || ml.state == mlFenced {
		err := ml.stateErr
		ml.mu.Unlock()
		return nil, err
	}
	c := ml.cursors[name]
	ml.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		open := c.state == cursorOpen
		c.mu.Unlock()
		if open {
			return c, nil
		}
		c, err = ml.loadCursor(ctx, name, path)
	} else {
		c, err = ml.createCursor(ctx, name, path, ml.startPosition(start))
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: managed ledger %s: opening cursor %s: %w", ml.name, name, err)
	}
	ml.mu.Lock()
	ml.cursors[name] = c
	ml.mu.Unlock()
	c.log.Info("cursor opened", "markDelete", c.MarkDeletePosition(), "readPosition", c.ReadPosition())
	return c, nil
}

// NewNonDurableCursor returns a cursor kept in memory only, reading from
// start. It holds back no trimming: when its read position is trimmed
// away it goes on from the oldest entry stored.
func (ml *ManagedLedger) NewNonDurableCursor(start Start) *Cursor {
	return newCursor(ml, "", "", ml.startPosition(start))
}

// Cursors returns the durable cursors, open or closed, sorted by name.
func (ml *ManagedLedger) Cursors() []*Cursor {
	ml.mu.Lock()
	out := make([]*Cursor, 0, len(ml.cursors))
	for _, c := range ml.cursors {
		out = append(out, c)
	}
	ml.mu.Unlock()
	slices.SortFunc(out, func(a, b *Cursor) int { return strings.Compare(a.name, b.name) })
	return out
}

// DeleteCursor deletes the durable cursor name: its node, and what it
// held back from trimming. The *Cursor fails with ErrNoCursor from then on.
// ErrNoCursor if there is none.
func (ml *ManagedLedger) DeleteCursor(ctx context.Context, name string) error {
	if _, err := ml.cursorPath(name); err != nil {
		return err
	}
	if err := ml.acquireCursorOps(ctx); err != nil {
		return err
	}
	defer ml.releaseCursorOps()
	ml.mu.Lock()
	c := ml.cursors[name]
	ml.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: %s in managed ledger %s", ErrNoCursor, name, ml.name)
	}
	if err := c.delete(ctx); err != nil {
		return err
	}
	ml.mu.Lock()
	delete(ml.cursors, name)
	ml.mu.Unlock()
	c.log.Info("cursor deleted")
	ml.scheduleTrim()
	return nil
}

// delete stops the cursor and deletes its node. If the node cannot be
// deleted the cursor is left closed (and still holds back trimming).
func (c *Cursor) delete(ctx context.Context) error {
	c.mu.Lock()
	prev, prevErr := c.state, c.err
	c.endLocked(cursorDeleted, fmt.Errorf("%w: %v was deleted", ErrNoCursor, c))
	if c.state != cursorDeleted {
		err := c.err // fenced
		c.mu.Unlock()
		return err
	}
	ch := c.writing
	c.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			c.undelete(prev, prevErr)
			return ctx.Err()
		}
	}
	c.mu.Lock()
	v := c.version
	c.mu.Unlock()
	err := c.ml.cfg.Meta.Delete(ctx, c.path, v)
	switch {
	case err == nil, errors.Is(err, meta.ErrNotFound):
		return nil
	case errors.Is(err, meta.ErrBadVersion):
		c.mu.Lock()
		c.state, c.err = cursorFenced, fmt.Errorf("%w: %v: %v", ErrFenced, c, err)
		c.mu.Unlock()
		return c.err
	}
	c.undelete(prev, prevErr)
	return fmt.Errorf("ledger: deleting %v: %w", c, err)
}

func (c *Cursor) undelete(prev cursorState, prevErr error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.err = cursorClosed, fmt.Errorf("%w: %v (deleting it failed)", ErrCursorClosed, c)
	if prev != cursorOpen {
		c.err = prevErr
	}
}

// loadCursors loads every durable cursor stored under the managed
// ledger's node, taking them over from a previous owner.
func (ml *ManagedLedger) loadCursors(ctx context.Context) error {
	names, err := ml.cfg.Meta.Children(ctx, ml.path)
	if err != nil {
		return fmt.Errorf("ledger: managed ledger %s: listing cursors: %w", ml.name, err)
	}
	for _, name := range names {
		c, err := ml.loadCursor(ctx, name, meta.Join(ml.path, name))
		if err != nil {
			return fmt.Errorf("ledger: managed ledger %s: loading cursor %s: %w", ml.name, name, err)
		}
		ml.mu.Lock()
		ml.cursors[name] = c
		ml.mu.Unlock()
	}
	if len(names) > 0 {
		ml.log.Info("cursors loaded", "cursors", names)
	}
	return nil
}

// closeCursors closes every durable cursor (writing their state).
func (ml *ManagedLedger) closeCursors(ctx context.Context) error {
	var errs []error
	for _, c := range ml.Cursors() {
		errs = append(errs, c.Close(ctx))
	}
	return errors.Join(errs...)
}

// deleteCursors deletes every cursor node under the managed ledger's,
// whether this instance loaded it or not.
func (ml *ManagedLedger) deleteCursors(ctx context.Context) error {
	for _, c := range ml.Cursors() {
		c.mu.Lock()
		c.endLocked(cursorDeleted, fmt.Errorf("%w: %v: its managed ledger was deleted", ErrNoCursor, c))
		ch := c.writing
		c.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	names, err := ml.cfg.Meta.Children(ctx, ml.path)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ml.cfg.Meta.Delete(ctx, meta.Join(ml.path, name), meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
			return err
		}
	}
	ml.mu.Lock()
	clear(ml.cursors)
	ml.mu.Unlock()
	return nil
}

// Trimming driven by cursors. A ledger goes once every durable cursor's
// persisted mark-delete position is past it and retention lets it go
// (Trim). The persisted position, not the one in memory: after a crash a
// cursor restarts from its node, and what it would deliver again must
// still be there. Non-durable cursors hold nothing back. With no durable
// cursor, retention alone decides.
//
// A trim runs after a rollover, after a cursor's persisted mark-delete
// position moves, after a cursor is deleted, after open, and every
// Config.TrimInterval (time retention expires without any event). Runs
// are coalesced: one at a time, and one more if asked meanwhile.

// neededByCursors returns the first position a durable cursor still
// needs: the entry after the slowest persisted mark-delete position.
func (ml *ManagedLedger) neededByCursors() Position {
	needed := Position{math.MaxInt64, 0}
	for _, c := range ml.Cursors() {
		c.mu.Lock()
		if c.state != cursorDeleted {
			if p := (Position{c.persisted.Ledger, c.persisted.Entry + 1}); p.Before(needed) {
				needed = p
			}
		}
		c.mu.Unlock()
	}
	return needed
}

// TrimConsumed deletes the leading ledgers that every durable cursor has
// passed (as persisted) and retention lets go, and returns how many. It
// is what the managed ledger runs by itself (see Trim).
func (ml *ManagedLedger) TrimConsumed(ctx context.Context) (int, error) {
	return ml.Trim(ctx, ml.neededByCursors())
}

// scheduleTrim starts a trim in the background, or asks the running one
// to go once more.
func (ml *ManagedLedger) scheduleTrim() {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.state != mlOpen && ml.state != mlTerminated {
		return
	}
	if ml.trimming {
		ml.trimAgain = true
		return
	}
	ml.trimming = true
	go ml.trimLoop()
}

func (ml *ManagedLedger) trimLoop() {
	for {
		if n, err := ml.TrimConsumed(ml.life); err != nil {
			ml.log.Debug("trimming failed", "err", err)
		} else if n > 0 {
			ml.log.Debug("trimmed consumed ledgers", "ledgers", n)
		}
		ml.mu.Lock()
		if !ml.trimAgain || (ml.state != mlOpen && ml.state != mlTerminated) {
			ml.trimming = false
			ml.mu.Unlock()
			return
		}
		ml.trimAgain = false
		ml.mu.Unlock()
	}
}

// startTrimming arms the periodic trim and runs a first one.
func (ml *ManagedLedger) startTrimming() {
	if d := ml.cfg.TrimInterval; d > 0 {
		var tick func()
		tick = func() {
			ml.scheduleTrim()
			ml.mu.Lock()
			if ml.state == mlOpen || ml.state == mlTerminated {
				ml.trimTimer = time.AfterFunc(d, tick)
			}
			ml.mu.Unlock()
		}
		ml.mu.Lock()
		ml.trimTimer = time.AfterFunc(d, tick)
		ml.mu.Unlock()
	}
	ml.scheduleTrim()
}
