package ledger

import (
	"context"
	"sort"
)

// What cursors ask of the ledger list: how entries follow one another,
// message offsets known without reading, counts for the backlog, and
// where a cursor may start.

// mlView is the logView of a managed ledger; each call takes ml.mu.
type mlView struct{ ml *ManagedLedger }

func (v mlView) next(p Position) Position {
	v.ml.mu.Lock()
	defer v.ml.mu.Unlock()
	return v.ml.nextLocked(p)
}

func (v mlView) offsetAt(p Position) (int64, bool) { return v.ml.knownOffset(p) }

// ledgerIndexLocked returns the index of the first listed ledger whose id
// is at least id.
func (ml *ManagedLedger) ledgerIndexLocked(id int64) int {
	return sort.Search(len(ml.ledgers), func(i int) bool { return ml.ledgers[i].id >= id })
}

// nextLocked implements logView.next. A ledger's entry count is final
// once it is recorded closed, or once a later ledger has a confirmed
// entry: completions are in global order, so nothing more can be
// confirmed in the earlier one (this covers the previous ledger during a
// rollover, before it is recorded closed). Until then the entry after a
// ledger's last one is in it.
func (ml *ManagedLedger) nextLocked(p Position) Position {
	i := ml.ledgerIndexLocked(p.Ledger)
	if i < len(ml.ledgers) && ml.ledgers[i].id == p.Ledger {
		if l := ml.ledgers[i]; p.Entry+1 < l.entries || !ml.finalLocked(i) {
			return Position{p.Ledger, p.Entry + 1}
		}
		i++
	}
	for ; i < len(ml.ledgers); i++ {
		if l := ml.ledgers[i]; l.entries > 0 || !l.closed {
			return Position{l.id, 0}
		}
	}
	return Position{p.Ledger, p.Entry + 1}
}

// finalLocked reports whether the entry count of ledger i is final.
func (ml *ManagedLedger) finalLocked(i int) bool {
	if ml.ledgers[i].closed {
		return true
	}
	for _, l := range ml.ledgers[i+1:] {
		if l.entries > 0 {
			return true
		}
	}
	return false
}

// knownOffset implements logView.offsetAt: ledger boundaries come from
// the list, other entries from the sparse index, the pinned tail or the
// cache.
func (ml *ManagedLedger) knownOffset(p Position) (int64, bool) {
	ml.mu.Lock()
	i := ml.ledgerIndexLocked(p.Ledger)
	if i == len(ml.ledgers) {
		defer ml.mu.Unlock()
		return ml.confirmedNext, true
	}
	l := ml.ledgers[i]
	switch {
	case l.id != p.Ledger || p.Entry <= 0:
		defer ml.mu.Unlock()
		return l.firstOffset, true
	case p.Entry >= l.entries:
		defer ml.mu.Unlock()
		return l.nextOffset(), true
	}
	pts := l.index.points
	if k := sort.Search(len(pts), func(k int) bool { return pts[k].entry >= p.Entry }); k < len(pts) && pts[k].entry == p.Entry {
		defer ml.mu.Unlock()
		return pts[k].h.FirstOffset, true
	}
	if pin := l.pin; len(pin) > 0 && p.Entry >= pin[0].entry && p.Entry <= pin[len(pin)-1].entry {
		b := pin[p.Entry-pin[0].entry].data
		ml.mu.Unlock()
		if h, _, err := ParseHeader(b); err == nil {
			return h.FirstOffset, true
		}
		return 0, false
	}
	ml.mu.Unlock()
	if b, ok := ml.cfg.Cache.Get(EntryKey{ML: ml.cacheID, Ledger: p.Ledger, Entry: p.Entry}); ok {
		if h, _, err := ParseHeader(b); err == nil {
			return h.FirstOffset, true
		}
	}
	return 0, false
}

// offsetAt is knownOffset, reading the entry's header when it must.
func (ml *ManagedLedger) offsetAt(ctx context.Context, p Position) (int64, error) {
	if o, ok := ml.knownOffset(p); ok {
		return o, nil
	}
	h, err := ml.header(ctx, p.Ledger, p.Entry)
	if err != nil {
		return 0, err
	}
	return h.FirstOffset, nil
}

// shape returns the ledger list's counts for backlog computations.
func (ml *ManagedLedger) shape() logShape {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	sh := logShape{ledgers: make([]ledgerShape, len(ml.ledgers)),
		firstOffset: ml.firstOffsetLocked(), nextOffset: ml.confirmedNext}
	for i, l := range ml.ledgers {
		sh.ledgers[i] = ledgerShape{l.id, l.entries, l.size}
	}
	return sh
}

// entriesBetween counts the confirmed entries at or after from and
// before to.
func (ml *ManagedLedger) entriesBetween(from, to Position) int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for i := ml.ledgerIndexLocked(from.Ledger); i < len(ml.ledgers) && ml.ledgers[i].id <= to.Ledger; i++ {
		l := ml.ledgers[i]
		lo, hi := int64(0), l.entries
		if l.id == from.Ledger {
			lo = max(from.Entry, 0)
		}
		if l.id == to.Ledger {
			hi = min(hi, to.Entry)
		}
		n += max(hi-lo, 0)
	}
	return n
}

// bounds returns the first stored entry and the position after the last
// confirmed one: where a cursor may start reading.
func (ml *ManagedLedger) bounds() (first, end Position) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	end = ml.nextLocked(ml.lastConfirmed)
	for _, l := range ml.ledgers {
		if l.entries > 0 {
			return Position{l.id, 0}, end
		}
	}
	return end, end
}

// checkEntries reports the first of ps that is after the mark-delete
// position md but is not a confirmed entry, or -1.
func (ml *ManagedLedger) checkEntries(md Position, ps []Position) int {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for k, p := range ps {
		if p.Compare(md) <= 0 {
			continue
		}
		i := ml.ledgerIndexLocked(p.Ledger)
		if len(ml.ledgers) > 0 && p.Ledger < ml.ledgers[0].id {
			continue // trimmed: nothing left to acknowledge
		}
		if i == len(ml.ledgers) || ml.ledgers[i].id != p.Ledger || p.Entry < 0 || p.Entry >= ml.ledgers[i].entries {
			return k
		}
	}
	return -1
}

// Start says where a new cursor begins.
type Start struct {
	kind startKind
	pos  Position
}

type startKind uint8

const (
	startEarliest startKind = iota
	startLatest
	startAt
)

var (
	// StartEarliest starts at the oldest entry stored.
	StartEarliest = Start{kind: startEarliest}
	// StartLatest starts after the last confirmed entry: only entries
	// appended from now on are read.
	StartLatest = Start{kind: startLatest}
)

// StartAt starts at p: p is the first entry read, everything before it
// counts as acknowledged. A position before the oldest entry stored starts
// there; one after the last confirmed entry starts after it.
func StartAt(p Position) Start { return Start{kind: startAt, pos: p} }

// startPosition returns the first position to read for s.
func (ml *ManagedLedger) startPosition(s Start) Position {
	first, end := ml.bounds()
	switch {
	case s.kind == startEarliest:
		return first
	case s.kind == startLatest:
		return end
	case s.pos.Compare(first) < 0:
		return first
	case s.pos.Compare(end) > 0:
		return end
	}
	return s.pos
}

// before is the mark-delete position that makes p the first position to
// read: (L, -1) is the point before ledger L's first entry.
func before(p Position) Position { return Position{p.Ledger, p.Entry - 1} }

// Next returns the position of the entry after p (p may be the point
// before a ledger, (L, -1)): the next entry of p's ledger, or the first
// of the next ledger once p's ledger is known to end at p. A position
// after the last confirmed entry is answered as if more entries followed
// in its ledger.
func (ml *ManagedLedger) Next(p Position) Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.nextLocked(p)
}

// OffsetAt returns the offset of the first message of the entry at p
// (NextOffset if p is past the last confirmed entry), reading the entry's
// header only if no table knows it.
func (ml *ManagedLedger) OffsetAt(ctx context.Context, p Position) (int64, error) {
	if p.Compare(ml.LastConfirmed()) > 0 {
		return ml.NextOffset(), nil
	}
	return ml.offsetAt(ctx, p)
}
