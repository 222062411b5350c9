package ledger

import (
	"context"
	"time"
)

// rollRetryDelay spaces attempts to start a new ledger after one failed
// (bookies or the metadata store unavailable), so that appends do not
// start one attempt each.
const rollRetryDelay = time.Second

// shouldRollLocked reports whether the current ledger is due for
// rollover, and if so marks a rollover as running: the caller starts it.
func (ml *ManagedLedger) shouldRollLocked() bool {
	c := ml.cur
	if ml.rolling || ml.state != mlOpen || ml.failed != nil || c == nil || c.sent == 0 ||
		(!ml.retryAt.IsZero() && time.Now().Before(ml.retryAt)) {
		return false
	}
	age := ml.cfg.Clock().Sub(c.created)
	if age < ml.cfg.MinLedgerAge {
		return false
	}
	if c.sent >= ml.cfg.MaxEntriesPerLedger || c.size >= ml.cfg.MaxLedgerSize || age >= ml.cfg.MaxLedgerAge {
		ml.rolling = true
		return true
	}
	return false
}

// startRollLocked starts a rollover (here: the reset after a failure) if
// none is running.
func (ml *ManagedLedger) startRollLocked() {
	if ml.rolling || ml.state != mlOpen || time.Now().Before(ml.retryAt) {
		return
	}
	ml.rolling = true
	go ml.rollover()
}

// checkAge runs from the age timer: a ledger that reached MaxLedgerAge
// rolls over even when no append comes to notice it.
func (ml *ManagedLedger) checkAge() {
	ml.mu.Lock()
	roll := ml.shouldRollLocked()
	if !roll && ml.cur != nil && ml.state == mlOpen {
		ml.rollTimer.Reset(ml.cfg.MaxLedgerAge)
	}
	ml.mu.Unlock()
	if roll {
		ml.rollover()
	}
}

// rollover moves appends to a new ledger without stalling them:
//
//  1. create the next ledger and add it to the list (first offset not yet
//     known) by compare-and-set, while appends go on to the current one;
//  2. switch: appends from now on go to the new ledger, whose first
//     offset is the next one to assign; completions stay in global order
//     (deliverLocked);
//  3. close the old ledger (its pending appends complete first) and
//     record it closed, and the new one's first offset, in the list.
//
// A crash between the steps leaves open ledgers at the tail of the list,
// which the next open recovers.
//
// When an append has failed (ml.failed), the offsets assigned after it
// are void, so the switch waits: every pending append completes, the
// ledgers written are closed at their last confirmed entry (one with
// nothing confirmed is dropped from the list and deleted), the next
// offset goes back to the confirmed one, and only then does the new
// ledger become current.
func (ml *ManagedLedger) rollover() {
	defer func() {
		ml.mu.Lock()
		ml.rolling = false
		ml.mu.Unlock()
	}()
	if err := ml.acquire(ml.life); err != nil {
		return
	}
	defer ml.release()
	ctx := ml.life

	ml.mu.Lock()
	if ml.state != mlOpen {
		ml.mu.Unlock()
		return
	}
	failed := ml.failed != nil
	ml.mu.Unlock()
	if !failed {
		if !ml.prepare(ctx) {
			return
		}
		ml.mu.Lock()
		if ml.state != mlOpen {
			ml.mu.Unlock()
			return // Close or Delete drops the prepared ledger
		}
		if ml.failed == nil {
			old := ml.switchLocked()
			ml.mu.Unlock()
			if err := ml.closeWriter(ctx, old); err != nil {
				ml.log.Warn("rollover: closing the previous ledger failed", "ledger", old.l.id, "err", err)
				return
			}
			ml.mu.Lock()
			if ml.failed == nil {
				var drop int64 = -1
				if old.l.entries == 0 {
					ml.removeLedgerLocked(old.l)
					drop = old.l.id
				} else {
					old.l.closed = true
				}
				l, v := ml.listLocked()
				ml.mu.Unlock()
				if err := ml.store(ctx, l, v); err != nil {
					ml.log.Warn("rollover: storing the ledger list failed", "err", err)
					return
				}
				ml.deleteLedgers(ctx, drop)
				ml.log.Debug("rolled over", "from", old.l.id, "to", l.Ledgers[len(l.Ledgers)-1].LedgerID)
				ml.scheduleTrim() // the old ledger may be consumed already
				return
			}
			// An append failed while the old ledger was closing: reset.
		}
		ml.mu.Unlock()
	}
	ml.reset(ctx)
}

// prepare creates the next ledger and lists it (ml.prepared), unless one
// is prepared already. false if that failed (logged; retried later).
func (ml *ManagedLedger) prepare(ctx context.Context) bool {
	ml.mu.Lock()
	ready := ml.prepared != nil
	ml.mu.Unlock()
	if ready {
		return true
	}
	w, err := ml.cfg.Bookies.CreateLedger(ctx, ml.ledgerOptions())
	if err != nil {
		ml.log.Warn("creating the next ledger failed; retrying later", "err", err)
		ml.retryLater()
		return false
	}
	c := &current{l: &ledger{id: w.ID(), firstOffset: -1}, w: w}
	ml.mu.Lock()
	if ml.state != mlOpen {
		ml.mu.Unlock()
		w.Close(ctx)
		ml.deleteLedgers(ctx, w.ID())
		return false
	}
	if ml.failed != nil {
		// A reset: no append is assigned an offset until the switch, so
		// the first offset is known already.
		c.l.firstOffset = ml.nextOffset
	}
	l, v := ml.listLocked(c.l)
	ml.mu.Unlock()
	if err := ml.store(ctx, l, v); err != nil {
		ml.log.Warn("listing the next ledger failed", "ledger", w.ID(), "err", err)
		w.Close(ctx)
		ml.deleteLedgers(ctx, w.ID())
		ml.retryLater()
		return false
	}
	ml.mu.Lock()
	ml.prepared = c
	ml.mu.Unlock()
	return true
}

func (ml *ManagedLedger) retryLater() {
	ml.mu.Lock()
	ml.retryAt = time.Now().Add(rollRetryDelay)
	ml.mu.Unlock()
}

func (ml *ManagedLedger) ledgerOptions() LedgerOptions {
	o := LedgerOptions{EnsembleSize: ml.cfg.EnsembleSize, WriteQuorum: ml.cfg.WriteQuorum,
		AckQuorum: ml.cfg.AckQuorum, Custom: map[string]string{"managed-ledger": ml.name}}
	if q := ml.quorums; q != nil {
		o.EnsembleSize, o.WriteQuorum, o.AckQuorum = q[0], q[1], q[2]
	}
	return o
}

// switchLocked makes the prepared ledger current, starting at the next
// offset to assign, and returns the previous current ledger.
func (ml *ManagedLedger) switchLocked() *current {
	c, old := ml.prepared, ml.cur
	ml.prepared = nil
	c.l.firstOffset = ml.nextOffset
	c.created = ml.cfg.Clock()
	ml.ledgers = append(ml.ledgers, c.l)
	ml.cur = c
	if ml.lastConfirmed.Entry < 0 {
		ml.lastConfirmed = Position{c.l.id, -1}
	}
	if ml.rollTimer != nil {
		ml.rollTimer.Reset(ml.cfg.MaxLedgerAge)
	}
	return old
}

// reset recovers from a failed append (see rollover).
func (ml *ManagedLedger) reset(ctx context.Context) {
	if err := ml.waitDrained(ctx); err != nil {
		return
	}
	ml.mu.Lock()
	c := ml.cur
	ml.mu.Unlock()
	if c != nil && !c.l.closedWriter {
		if err := ml.closeWriter(ctx, c); err != nil {
			ml.log.Warn("reset: closing the failed ledger failed", "ledger", c.l.id, "err", err)
			ml.retryLater()
			return
		}
	}
	ml.mu.Lock()
	for _, l := range append([]*ledger(nil), ml.ledgers...) {
		switch {
		case l.closed || !l.closedWriter:
		case l.entries == 0:
			ml.removeLedgerLocked(l)
			ml.toDelete = append(ml.toDelete, l.id)
		default:
			l.closed = true
		}
	}
	ml.cur = nil
	ml.nextOffset = ml.confirmedNext
	ml.mu.Unlock()
	if !ml.prepare(ctx) {
		return
	}
	ml.mu.Lock()
	if ml.state != mlOpen {
		ml.mu.Unlock()
		return
	}
	ml.switchLocked()
	ml.failed = nil
	next := ml.cur.l.id
	l, v := ml.listLocked()
	drop := ml.toDelete
	ml.toDelete = nil
	ml.mu.Unlock()
	if err := ml.store(ctx, l, v); err != nil {
		ml.log.Warn("reset: storing the ledger list failed", "err", err)
		ml.mu.Lock()
		ml.toDelete = append(ml.toDelete, drop...)
		ml.mu.Unlock()
		return
	}
	// Ledgers with nothing confirmed left the list with the store above
	// (or with prepare's): only now may they go from the bookies.
	ml.deleteLedgers(ctx, drop...)
	ml.log.Info("appends resumed on a new ledger after a failure", "ledger", next)
}
