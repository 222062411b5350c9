package ledger

import (
	"context"
	"fmt"
	"time"
)

// Trim deletes the leading ledgers that nothing needs any more and returns
// how many it deleted. needed is the first position a reader still needs
// (TrimConsumed passes the entry after the slowest durable cursor's
// persisted mark-delete position; the managed ledger runs it by itself,
// see cursors.go): a ledger is a candidate only if all of it is before
// needed. A candidate is deleted when it is outside retention (see
// Config.RetentionTime and RetentionSize, or SetRetention); the first one retention keeps
// stops the trim, so what remains is always a suffix of the log.
//
// Invariants: the current ledger, and the last ledger of the list (whose
// end is the next offset), are never deleted; the list without the
// deleted ledgers is stored (compare-and-set) before any of them is
// deleted from the bookies, so a crash in between leaves unlisted ledgers
// on the bookies, never a list naming deleted ones.
func (ml *ManagedLedger) Trim(ctx context.Context, needed Position) (int, error) {
	rt, rs := ml.Retention()
	return ml.trim(ctx, needed, rt, rs)
}

type retentionLimits struct {
	time time.Duration
	size int64
}

// SetRetention replaces, for this managed ledger only, the factory's
// retention (Config.RetentionTime and RetentionSize, with their meaning:
// zero keeps nothing, negative is no limit) and starts a trim, so that a
// shorter retention applies at once. It lasts until ResetRetention or
// Close (a managed ledger opened again has the factory's retention).
// Setting the retention it already has does nothing.
func (ml *ManagedLedger) SetRetention(retentionTime time.Duration, size int64) {
	r := &retentionLimits{retentionTime, size}
	ml.mu.Lock()
	same := ml.retention != nil && *ml.retention == *r
	ml.retention = r
	ml.mu.Unlock()
	if !same {
		ml.scheduleTrim()
	}
}

// OpenOption is an option of Factory.Open.
type OpenOption func(*ManagedLedger)

// WithRetention opens the managed ledger with its own retention (see
// SetRetention), applied from its first trim on.
func WithRetention(retentionTime time.Duration, size int64) OpenOption {
	return func(ml *ManagedLedger) {
		ml.mu.Lock()
		ml.retention = &retentionLimits{retentionTime, size}
		ml.mu.Unlock()
	}
}

// WithQuorums opens the managed ledger with its own ensemble size, write
// quorum and ack quorum for the ledgers it creates (E ≥ Qw ≥ Qa ≥ 1;
// others are ignored), instead of the factory's.
func WithQuorums(ensemble, writeQuorum, ackQuorum int) OpenOption {
	return func(ml *ManagedLedger) {
		if ensemble >= writeQuorum && writeQuorum >= ackQuorum && ackQuorum >= 1 {
			ml.quorums = &[3]int{ensemble, writeQuorum, ackQuorum}
		}
	}
}

// ResetRetention gives the managed ledger the factory's retention back
// (see SetRetention).
func (ml *ManagedLedger) ResetRetention() {
	ml.mu.Lock()
	was := ml.retention != nil
	ml.retention = nil
	ml.mu.Unlock()
	if was {
		ml.scheduleTrim()
	}
}

// Retention returns the retention time and size Trim applies.
func (ml *ManagedLedger) Retention() (time.Duration, int64) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if r := ml.retention; r != nil {
		return r.time, r.size
	}
	return ml.cfg.RetentionTime, ml.cfg.RetentionSize
}

// trim is Trim with retention limits rt and rs.
func (ml *ManagedLedger) trim(ctx context.Context, needed Position, rt time.Duration, rs int64) (int, error) {
	if err := ml.acquire(ctx); err != nil {
		return 0, err
	}
	defer ml.release()
	ml.mu.Lock()
	if ml.state != mlOpen && ml.state != mlTerminated {
		err := ml.stateErr
		ml.mu.Unlock()
		return 0, err
	}
	nowMs := ml.cfg.Clock().UnixMilli()
	var total int64
	for _, l := range ml.ledgers {
		total += l.size
	}
	var drop []int64
	var dropped int64
	for i, l := range ml.ledgers {
		if i == len(ml.ledgers)-1 || !l.closed || (ml.cur != nil && ml.cur.l == l) {
			break
		}
		if !(l.id < needed.Ledger || (l.id == needed.Ledger && needed.Entry >= l.entries)) {
			break
		}
		expired := l.entries == 0 || (rt >= 0 && nowMs-l.lastPubMs >= rt.Milliseconds())
		overSize := rs >= 0 && total-dropped-l.size >= rs
		if !expired && !overSize {
			break
		}
		drop = append(drop, l.id)
		dropped += l.size
	}
	if len(drop) == 0 {
		ml.mu.Unlock()
		return 0, nil
	}
	keep := ml.ledgers[len(drop):]
	list, v := ml.listLocked()
	list.Ledgers = list.Ledgers[len(drop):]
	ml.mu.Unlock()

	if err := ml.store(ctx, list, v); err != nil {
		return 0, fmt.Errorf("ledger: managed ledger %s: trimming: %w", ml.name, err)
	}
	ml.mu.Lock()
	ml.ledgers = keep
	for _, id := range drop {
		delete(ml.readers, id)
	}
	ml.mu.Unlock()
	ml.log.Info("trimmed ledgers", "ledgers", drop, "bytes", dropped)
	return len(drop), ml.deleteLedgers(ctx, drop...)
}
