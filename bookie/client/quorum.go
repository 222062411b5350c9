package client

import (
	"math/bits"
)

// The decision logic of writes and recovery, free of I/O so tests drive it
// directly: write sets, ack tracking, fencing coverage, recovery verdicts.

// maxWriteQuorum bounds Qw so that an ackSet fits in a word.
const maxWriteQuorum = 64

// writeSetIndex returns the ensemble index of member i (0 ≤ i < Qw) of
// entry's write set.
func writeSetIndex(entry int64, i, ensembleSize int) int {
	return int((entry + int64(i)) % int64(ensembleSize))
}

// writeSetMember returns i such that ensemble index idx is member i of
// entry's write set, or -1 when idx is not in it.
func writeSetMember(entry int64, idx, ensembleSize, writeQuorum int) int {
	i := (idx - int(entry%int64(ensembleSize)) + ensembleSize) % ensembleSize
	if i < writeQuorum {
		return i
	}
	return -1
}

// writeSet returns the bookies of entry's write set, in write-set order.
func writeSet(ensemble []string, entry int64, writeQuorum int) []string {
	ws := make([]string, writeQuorum)
	for i := range ws {
		ws[i] = ensemble[writeSetIndex(entry, i, len(ensemble))]
	}
	return ws
}

// ackSet records which members of a write set acknowledged an add (bit i
// for member i).
type ackSet uint64

func (a ackSet) with(i int) ackSet    { return a | 1<<uint(i) }
func (a ackSet) without(i int) ackSet { return a &^ (1 << uint(i)) }
func (a ackSet) has(i int) bool       { return a&(1<<uint(i)) != 0 }
func (a ackSet) count() int           { return bits.OnesCount64(uint64(a)) }

// pendingAdd is an add sent but not yet completed.
type pendingAdd struct {
	id     int64
	data   []byte // the encoded entry, shared by every send; immutable
	length int64  // ledger length through this entry
	done   func(int64, error)
	acked  ackSet // members of the write set (current ensemble) that stored it
}

// addQueue holds the pending adds of a writer in entry order.
//
// Invariant: the adds are consecutive entry ids starting at first, every
// entry before first has completed, and so first-1 is the LAC.
type addQueue struct {
	first int64
	adds  []*pendingAdd
}

func (q *addQueue) len() int { return len(q.adds) }

// push appends the next entry; p.id must be first+len.
func (q *addQueue) push(p *pendingAdd) {
	if p.id != q.first+int64(len(q.adds)) {
		panic("client: add queue out of order")
	}
	q.adds = append(q.adds, p)
}

// get returns the pending add for entry id, or nil.
func (q *addQueue) get(id int64) *pendingAdd {
	i := id - q.first
	if i < 0 || i >= int64(len(q.adds)) {
		return nil
	}
	return q.adds[i]
}

// popCompleted removes and returns the adds at the head that have at least
// ackQuorum acks: those, and only those, may complete, because every add
// before them has.
func (q *addQueue) popCompleted(ackQuorum int) []*pendingAdd {
	n := 0
	for n < len(q.adds) && q.adds[n].acked.count() >= ackQuorum {
		n++
	}
	return q.pop(n)
}

// popAll removes and returns every pending add.
func (q *addQueue) popAll() []*pendingAdd { return q.pop(len(q.adds)) }

func (q *addQueue) pop(n int) []*pendingAdd {
	if n == 0 {
		return nil
	}
	out := make([]*pendingAdd, n)
	copy(out, q.adds)
	clear(q.adds[:n])
	q.adds = q.adds[n:]
	q.first += int64(n)
	return out
}

// coverageNeed is how many bookies of every write set must answer (be
// fenced, or lack an entry) so that no writer can gather ackQuorum acks
// there: the other Qw-(Qw-Qa+1) = Qa-1 are too few.
func coverageNeed(writeQuorum, ackQuorum int) int { return writeQuorum - ackQuorum + 1 }

// covered reports whether every write set of the ensemble (one per starting
// index) has at least Qw-Qa+1 members with ok set. When not, it returns the
// ensemble index where the first uncovered write set starts.
func covered(ok []bool, writeQuorum, ackQuorum int) (bool, int) {
	need := coverageNeed(writeQuorum, ackQuorum)
	for start := range ok {
		n := 0
		for i := range writeQuorum {
			if ok[writeSetIndex(int64(start), i, len(ok))] {
				n++
			}
		}
		if n < need {
			return false, start
		}
	}
	return true, -1
}

// verdict is recovery's decision about one entry past the LAC.
type verdict int

const (
	verdictPending   verdict = iota // wait for more answers
	verdictFound                    // a bookie has it: part of the ledger
	verdictAbsent                   // never acknowledged: the ledger ends before it
	verdictUndecided                // every bookie answered and neither holds
)

func (v verdict) String() string {
	switch v {
	case verdictPending:
		return "pending"
	case verdictFound:
		return "found"
	case verdictAbsent:
		return "absent"
	case verdictUndecided:
		return "undecided"
	}
	return "?"
}

// recoveryVerdict decides about an entry from its write set's answers so
// far: found (some bookie returned it, intact), missing (bookies that
// answered that they do not have it) and failed (bookies that could not
// answer, or returned a damaged copy).
func recoveryVerdict(found bool, missing, failed, writeQuorum, ackQuorum int) verdict {
	switch {
	case found:
		return verdictFound
	case missing >= coverageNeed(writeQuorum, ackQuorum):
		return verdictAbsent
	case missing+failed >= writeQuorum:
		return verdictUndecided
	}
	return verdictPending
}

// replaceBookies returns a copy of ensemble with failed[i] replaced by
// replacements[i], and the ensemble indexes that changed. Failed bookies
// not in the ensemble are skipped.
func replaceBookies(ensemble, failed, replacements []string) ([]string, []int) {
	out := append([]string(nil), ensemble...)
	var changed []int
	for i, f := range failed {
		for j, b := range out {
			if b == f {
				out[j] = replacements[i]
				changed = append(changed, j)
				break
			}
		}
	}
	return out, changed
}

// withEnsemble returns ensembles with a new last ensemble of bookies
// starting at firstEntry. If the current last one starts there too (no entry
// was ever completed on it) it is replaced rather than followed.
func withEnsemble(ensembles []Ensemble, firstEntry int64, bookies []string) []Ensemble {
	out := append([]Ensemble(nil), ensembles...)
	e := Ensemble{FirstEntry: firstEntry, Bookies: append([]string(nil), bookies...)}
	if n := len(out); n > 0 && out[n-1].FirstEntry == firstEntry {
		out[n-1] = e
		return out
	}
	return append(out, e)
}
