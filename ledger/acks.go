package ledger

import "sort"

// The acknowledgement state of a cursor, kept apart from I/O: it decides
// what is acknowledged from what it is told and from a logView, which says
// how entries follow one another. The cursor (cursor.go) drives it and
// persists it (cursorstore.go).

// logView is what the acknowledgement state needs to know of the log.
// mlView provides it over a managed ledger; tests fake it.
type logView interface {
	// next returns the position of the entry after p: (p.Ledger,
	// p.Entry+1), unless p is at or past the end of a ledger whose entry
	// count is final; then the first entry of the next ledger that has
	// entries or may get some (or (p.Ledger, p.Entry+1) when there is
	// none). p need not be an entry: (L, -1) is the point before ledger
	// L, and a position in a ledger that is no longer listed is followed
	// by the first entry of the next listed one.
	next(p Position) Position
	// offsetAt returns the offset of the first message of the entry at p,
	// or, when p is past a ledger's last confirmed entry, of the message
	// that would follow; false if finding it would take a read.
	offsetAt(p Position) (int64, bool)
}

// ackRange is a run of individually acknowledged entries: every entry
// from from to to, both included. fromOffset is the offset of from's
// first message and endOffset the offset after to's last one; -1 while
// unknown (they are learnt without reads where possible, and by reading
// when the backlog needs them).
type ackRange struct {
	from, to   Position
	fromOffset int64
	endOffset  int64
}

// ackState is a cursor's acknowledgements: the mark-delete position
// (every entry up to it is acknowledged) and the entries acknowledged
// individually after it, as ranges. Entries are acknowledged as a whole;
// acknowledging single messages of a batch is the broker's concern.
//
// Invariants:
//   - ranges are sorted, disjoint and after the mark-delete position:
//     markDelete < ranges[0].from, ranges[i].to < ranges[i+1].from.
//   - Every change merges a new range with its neighbours when the view
//     shows them adjacent, and then advances the mark-delete position over
//     the ranges that follow it directly (advance). Adjacency across a
//     ledger boundary shows once the earlier ledger's entry count is
//     final (mlView: it is recorded closed or a later ledger has a
//     confirmed entry), which is always so by the time an entry of the
//     later ledger can be acknowledged. Were two ranges ever left apart,
//     it would cost a range, never correctness: acknowledged is what some
//     range or the mark-delete position covers; advance runs again on
//     reads of the state and before each write.
//   - mdOffset is the offset after the mark-delete position (the next
//     message to deliver; a Kafka committed offset), or -1 while unknown.
type ackState struct {
	view       logView
	markDelete Position
	mdOffset   int64
	ranges     []ackRange
}

func newAckState(v logView, markDelete Position) ackState {
	s := ackState{view: v}
	s.setMarkDelete(markDelete, -1)
	return s
}

// reset forgets every acknowledgement after p and makes p the mark-delete
// position; endOffset is the offset after p, or -1 if not known.
func (s *ackState) reset(p Position, endOffset int64) {
	s.ranges = nil
	s.setMarkDelete(p, endOffset)
}

func (s *ackState) setMarkDelete(p Position, endOffset int64) {
	s.markDelete = p
	if endOffset < 0 {
		if o, ok := s.view.offsetAt(s.view.next(p)); ok {
			endOffset = o
		}
	}
	s.mdOffset = endOffset
}

// markDeleteTo acknowledges every entry up to p (cumulatively). It
// reports whether the mark-delete position moved: not when p is not
// after it.
func (s *ackState) markDeleteTo(p Position) bool {
	if p.Compare(s.markDelete) <= 0 {
		return false
	}
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].to.Compare(p) > 0 })
	s.ranges = s.ranges[i:]
	if len(s.ranges) > 0 && s.ranges[0].from.Compare(p) <= 0 {
		// p is inside the first range left: the mark-delete position
		// takes all of it.
		r := s.ranges[0]
		s.ranges = s.ranges[1:]
		s.setMarkDelete(r.to, r.endOffset)
	} else {
		s.setMarkDelete(p, -1)
	}
	s.advance()
	return true
}

// ack acknowledges the entry at p individually. It reports whether p was
// not acknowledged before.
func (s *ackState) ack(p Position) bool {
	if p.Compare(s.markDelete) <= 0 {
		return false
	}
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].to.Compare(p) >= 0 })
	if i < len(s.ranges) && s.ranges[i].from.Compare(p) <= 0 {
		return false
	}
	next := s.view.next(p)
	left := i > 0 && s.view.next(s.ranges[i-1].to) == p
	right := i < len(s.ranges) && s.ranges[i].from == next
	switch {
	case left && right:
		s.ranges[i-1].to, s.ranges[i-1].endOffset = s.ranges[i].to, s.ranges[i].endOffset
		s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
	case left:
		s.ranges[i-1].to, s.ranges[i-1].endOffset = p, s.offset(next)
	case right:
		s.ranges[i].from, s.ranges[i].fromOffset = p, s.offset(p)
	default:
		r := ackRange{from: p, to: p, fromOffset: s.offset(p), endOffset: s.offset(next)}
		s.ranges = append(s.ranges, ackRange{})
		copy(s.ranges[i+1:], s.ranges[i:])
		s.ranges[i] = r
	}
	s.advance()
	return true
}

func (s *ackState) offset(p Position) int64 {
	if o, ok := s.view.offsetAt(p); ok {
		return o
	}
	return -1
}

// advance moves the mark-delete position over the ranges that follow it
// directly.
func (s *ackState) advance() {
	for len(s.ranges) > 0 && s.ranges[0].from.Compare(s.view.next(s.markDelete)) <= 0 {
		r := s.ranges[0]
		s.ranges = s.ranges[1:]
		s.setMarkDelete(r.to, r.endOffset)
	}
}

// acked reports whether the entry at p is acknowledged.
func (s *ackState) acked(p Position) bool {
	if p.Compare(s.markDelete) <= 0 {
		return true
	}
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].to.Compare(p) >= 0 })
	return i < len(s.ranges) && s.ranges[i].from.Compare(p) <= 0
}

// firstUnacked returns the first position at or after p that is not
// acknowledged.
func (s *ackState) firstUnacked(p Position) Position {
	if p.Compare(s.markDelete) <= 0 {
		p = s.view.next(s.markDelete)
	}
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].to.Compare(p) >= 0 })
	for i < len(s.ranges) && s.ranges[i].from.Compare(p) <= 0 {
		p = s.view.next(s.ranges[i].to)
		i++
	}
	return p
}

// rangeAfter returns the start of the first range after p.
func (s *ackState) rangeAfter(p Position) (Position, bool) {
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].from.Compare(p) > 0 })
	if i == len(s.ranges) {
		return Position{}, false
	}
	return s.ranges[i].from, true
}

// missingOffsets returns the positions whose offsets the state lacks.
func (s *ackState) missingOffsets() []Position {
	var out []Position
	if s.mdOffset < 0 {
		out = append(out, s.view.next(s.markDelete))
	}
	for _, r := range s.ranges {
		if r.fromOffset < 0 {
			out = append(out, r.from)
		}
		if r.endOffset < 0 {
			out = append(out, s.view.next(r.to))
		}
	}
	return out
}

// fillOffsets records offsets found for positions missingOffsets
// returned.
func (s *ackState) fillOffsets(found map[Position]int64) {
	if o, ok := found[s.view.next(s.markDelete)]; ok && s.mdOffset < 0 {
		s.mdOffset = o
	}
	for i := range s.ranges {
		r := &s.ranges[i]
		if o, ok := found[r.from]; ok && r.fromOffset < 0 {
			r.fromOffset = o
		}
		if r.endOffset < 0 {
			if o, ok := found[s.view.next(r.to)]; ok {
				r.endOffset = o
			}
		}
	}
}

// Backlog is what a cursor has not acknowledged: the entries after its
// mark-delete position up to the last confirmed one, less those
// acknowledged individually.
type Backlog struct {
	// Entries is exact.
	Entries int64
	// Messages is exact (offsets are message indexes).
	Messages int64
	// Bytes (headers included) is exact for whole ledgers; for a ledger
	// only partly in the backlog it is estimated from the ledger's
	// average entry size.
	Bytes int64
}

// logShape is a snapshot of the ledger list for counting.
type logShape struct {
	ledgers     []ledgerShape
	firstOffset int64 // offset of the oldest message stored
	nextOffset  int64 // offset after the last confirmed message
}

type ledgerShape struct{ id, entries, size int64 }

// rank returns the number of entries at or before p, and the index of
// the ledger holding p (or of the first one after it).
func (sh *logShape) rank(prefix []int64, p Position) (int64, int) {
	i := sort.Search(len(sh.ledgers), func(i int) bool { return sh.ledgers[i].id >= p.Ledger })
	n := prefix[i]
	if i < len(sh.ledgers) && sh.ledgers[i].id == p.Ledger {
		n += min(max(p.Entry+1, 0), sh.ledgers[i].entries)
	}
	return n, i
}

// backlog counts s's backlog over sh. The offsets of s (mdOffset and the
// ranges') must be known. It costs O(ledgers + ranges).
func (s *ackState) backlog(sh *logShape) Backlog {
	n := len(sh.ledgers)
	prefix := make([]int64, n+1)
	for i, l := range sh.ledgers {
		prefix[i+1] = prefix[i] + l.entries
	}
	// unacked[i]: entries of ledger i in the backlog.
	unacked := make([]int64, n)
	mdRank, mdAt := sh.rank(prefix, s.markDelete)
	for i := mdAt; i < n; i++ {
		unacked[i] = sh.ledgers[i].entries
	}
	if mdAt < n && sh.ledgers[mdAt].id == s.markDelete.Ledger {
		unacked[mdAt] -= mdRank - prefix[mdAt]
	}
	b := Backlog{Entries: prefix[n] - mdRank, Messages: sh.nextOffset - max(s.mdOffset, sh.firstOffset)}
	for _, r := range s.ranges {
		before, i := sh.rank(prefix, Position{r.from.Ledger, r.from.Entry - 1})
		last, j := sh.rank(prefix, r.to)
		b.Entries -= last - before
		if r.endOffset > sh.firstOffset {
			b.Messages -= r.endOffset - max(r.fromOffset, sh.firstOffset)
		}
		// Spread the range over the ledgers it covers, i..j.
		for k := i; k <= j && k < n; k++ {
			lo, hi := prefix[k], prefix[k+1]
			unacked[k] -= max(min(hi, last)-max(lo, before), 0)
		}
	}
	for i, l := range sh.ledgers {
		if l.entries > 0 {
			b.Bytes += unacked[i] * l.size / l.entries
		}
	}
	return b
}
