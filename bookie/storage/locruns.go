package storage

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Entry locations read in runs. A reader going through a ledger entry by
// entry (a consumer catching up, its reads ahead) would look each entry
// up in the index on its own, and a Pebble lookup builds an iterator over
// every level: tens of microseconds, a tenth of the CPU of a catching-up
// read of large entries, more of small ones. So a lookup that misses
// reads the locations of the entries after it too, with one iterator, and
// keeps them; the next entries' lookups are then a map access.
//
// A kept location may be stale in two ways, both handled:
//   - GC moved the entry and repointed the index: the old location holds
//     the same bytes until GC removes its log, and a read of a removed
//     log is errLogGone, after which ReadEntry drops the ledger's runs
//     and looks again: in the index, repointed before the log's removal.
//   - The ledger was deleted: publish drops the ledger's runs once the
//     deletion is committed, and a run read from the index before that
//     is not kept (gen).

const (
	// locRunLen is how many locations a lookup reads: the entry asked
	// for and those after it.
	locRunLen = 64
	// locRunSlots is how many runs are kept, least recently filled
	// replaced first: one or two per ledger being read through.
	locRunSlots = 32
)

// locRuns keeps runs of consecutive entries' locations. Safe for
// concurrent use.
type locRuns struct {
	mu    sync.Mutex
	runs  [locRunSlots]locRun
	next  int    // the slot filled next
	gen   uint64 // counts forgets: a run read before one is not kept
	hits  uint64 // lookups answered from a run (tests)
	fills uint64 // runs read from the index (tests)
}

// locRun holds the locations of entries first .. first+len(locs)-1 of
// ledger.
type locRun struct {
	ledger int64
	first  int64
	locs   []location
}

// get returns the kept location of the entry, if a run holds it.
func (r *locRuns) get(ledger, entryID int64) (location, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.runs {
		run := &r.runs[i]
		if run.locs != nil && run.ledger == ledger && entryID >= run.first && entryID-run.first < int64(len(run.locs)) {
			r.hits++
			return run.locs[entryID-run.first], true
		}
	}
	return location{}, false
}

// generation is to be read before the index, and passed to keep.
func (r *locRuns) generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// keep stores a run read from the index, unless a forget came since gen
// was read.
func (r *locRuns) keep(gen uint64, ledger, first int64, locs []location) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen || len(locs) == 0 {
		return
	}
	r.fills++
	run := &r.runs[r.next]
	r.next = (r.next + 1) % len(r.runs)
	run.ledger, run.first = ledger, first
	run.locs = append(run.locs[:0], locs...)
}

// forget drops the ledger's runs; a run being read from the index
// meanwhile will not be kept.
func (r *locRuns) forget(ledger int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	for i := range r.runs {
		if r.runs[i].ledger == ledger {
			r.runs[i].locs = nil
		}
	}
}

// locationRun returns the locations of entries from, from+1, ... of
// ledger that the index holds, up to max of them and stopping at the
// first missing (or, past from, the first it cannot decode, which that
// entry's own lookup reports): empty if it does not hold from.
func (x *index) locationRun(ledger, from int64, max int) ([]location, error) {
	lower := entryKey(ledger, from)
	_, upper := ledgerEntries(ledger)
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("storage: index scan: %w", err)
	}
	defer it.Close()
	var locs []location
	for ok := it.First(); ok && len(locs) < max; ok = it.Next() {
		k := it.Key()
		if len(k) != len(lower) || int64(binary.BigEndian.Uint64(k[9:])) != from+int64(len(locs)) {
			break
		}
		loc, err := x.decodeLoc(it.Value())
		if err != nil {
			if len(locs) > 0 {
				break // that entry's read reports it
			}
			return nil, err
		}
		locs = append(locs, loc)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("storage: index scan: %w", err)
	}
	return locs, nil
}

// lookup returns where the entry is, if the index has it: from a kept
// run if one holds it, else from the index, reading and keeping the run
// that starts at it.
func (s *Storage) lookup(ledger, entryID int64) (location, bool, error) {
	if loc, ok := s.locs.get(ledger, entryID); ok {
		return loc, true, nil
	}
	gen := s.locs.generation()
	locs, err := s.idx.locationRun(ledger, entryID, locRunLen)
	if err != nil || len(locs) == 0 {
		return location{}, false, err
	}
	s.locs.keep(gen, ledger, entryID, locs)
	return locs[0], true, nil
}
