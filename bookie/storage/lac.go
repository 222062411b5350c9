package storage

import (
	"context"
	"fmt"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// ledgerState is the in-memory state of a ledger: its persistent record
// (fenced, deleted) and, loaded on demand, its LAC and last entry.
//
// Locking: every field is guarded by Storage.ledgersMu, but keyPending,
// which only the apply path uses, under Storage.writeMu. rec and persisted
// are only written by the apply path, which also holds Storage.writeMu, so
// the apply path may read them holding writeMu alone.
type ledgerState struct {
	rec       ledgerRecord
	persisted bool // rec is in the index
	// keyPending: rec is in the batch of the segment being applied, not
	// yet committed (apply.go).
	keyPending bool

	// lac and last are valid once lacLoaded. They are loaded from the
	// index (the last entry's key and its header's lac field), which holds
	// every applied entry, so an add applied before the load is counted by
	// it and one applied after by the apply path: both take the max.
	lacLoaded bool
	lac, last int64

	// changed is closed (and cleared) when lac rises or the ledger is fenced
	// or deleted: WaitLAC's wake-up. nil while nobody waits.
	changed chan struct{}
}

func (st *ledgerState) notifyLocked() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// stateLocked returns the ledger's state, reading its record from the index
// on first use. With create, a ledger unknown to the index gets a fresh
// state (not yet persisted); without, it is nil. Unknown ledgers are not
// cached, and neither are deleted ones outside the apply path, so lookups of
// ledgers that do not exist cost no memory.
func (s *Storage) stateLocked(ledger int64, create bool) (*ledgerState, error) {
	if st := s.ledgers[ledger]; st != nil {
		return st, nil
	}
	rec, ok, err := s.idx.ledger(ledger)
	if err != nil {
		return nil, err
	}
	if !ok && !create {
		return nil, nil
	}
	st := &ledgerState{rec: rec, persisted: ok}
	if create || !rec.deleted {
		s.ledgers[ledger] = st
	}
	return st, nil
}

func (s *Storage) state(ledger int64, create bool) (*ledgerState, error) {
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	return s.stateLocked(ledger, create)
}

// loadLACLocked fills in lac and last from the index: the ledger's last
// entry and the lac field of its header. Writers piggyback a non-decreasing
// LAC, so the last entry's is the largest stored.
func (s *Storage) loadLACLocked(ledger int64, st *ledgerState) error {
	if st.lacLoaded {
		return nil
	}
	lac, last := int64(-1), int64(-1)
	for attempt := 1; ; attempt++ {
		id, loc, ok, err := s.idx.lastEntry(ledger)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		e, err := s.readLoc(ledger, id, loc, attempt)
		if err == errLogGone {
			continue // moved by GC; look again
		}
		if err != nil {
			return err
		}
		h, _ := entry.Parse(e) // verified by readLoc
		entry.Recycle(e)
		lac, last = h.LAC, id
		break
	}
	st.lac, st.last, st.lacLoaded = lac, last, true
	return nil
}

// addedLocked records an applied entry in the ledger's LAC and last entry.
func (st *ledgerState) addedLocked(h entry.Header) {
	if !st.lacLoaded {
		return // the load will find it in the index
	}
	if h.Entry > st.last {
		st.last = h.Entry
	}
	if h.LAC > st.lac {
		st.lac = h.LAC
		st.notifyLocked()
	}
}

// LastAddConfirmed returns the LAC this bookie knows for the ledger (the
// largest lac field of its stored entries, -1 if none) and the largest
// entry id stored (-1 if none). ErrNoLedger if the bookie does not hold the
// ledger. After a restart both are rebuilt from the stored entries.
func (s *Storage) LastAddConfirmed(ledger int64) (lac, lastEntry int64, err error) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return -1, -1, ErrClosed
	}
	if s.unapplied() { // count every acknowledged add (ack.go)
		if err := s.awaitApplied(); err != nil {
			return -1, -1, err
		}
	}
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	st, err := s.lacLocked(ledger)
	if err != nil {
		return -1, -1, err
	}
	return st.lac, st.last, nil
}

// lacLocked returns the state of a held ledger with its LAC loaded, or
// ErrNoLedger.
func (s *Storage) lacLocked(ledger int64) (*ledgerState, error) {
	st, err := s.stateLocked(ledger, false)
	if err != nil {
		return nil, err
	}
	if st == nil || st.rec.deleted {
		return nil, fmt.Errorf("%w: %d", ErrNoLedger, ledger)
	}
	if err := s.loadLACLocked(ledger, st); err != nil {
		return nil, err
	}
	return st, nil
}

// WaitLAC blocks until the ledger's LAC exceeds after and returns it. It
// returns early with the current LAC and an error when ctx ends (ctx.Err()),
// the ledger is fenced with its LAC at or below after (ErrFenced: it will
// not grow here), is deleted or unknown (ErrNoLedger), or the storage
// closes (ErrClosed). Waiters are woken by LAC changes, not by polling.
func (s *Storage) WaitLAC(ctx context.Context, ledger, after int64) (int64, error) {
	for {
		ch, lac, err := s.waitChan(ledger, after)
		if ch == nil || err != nil {
			return lac, err
		}
		if hook := s.testHookWaitLAC; hook != nil {
			hook()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return lac, ctx.Err()
		case <-s.closing:
			return lac, ErrClosed
		}
	}
}

// waitChan returns the LAC if it exceeds after (ch nil), or a channel
// closed at the ledger's next change.
func (s *Storage) waitChan(ledger, after int64) (ch <-chan struct{}, lac int64, err error) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return nil, -1, ErrClosed
	}
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	st, err := s.lacLocked(ledger)
	if err != nil {
		return nil, -1, err
	}
	if st.lac > after {
		return nil, st.lac, nil
	}
	if st.rec.fenced {
		return nil, st.lac, fmt.Errorf("%w: ledger %d, LAC %d", ErrFenced, ledger, st.lac)
	}
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	return st.changed, st.lac, nil
}

// IsFenced reports whether the ledger is fenced; ErrNoLedger if the bookie
// does not hold it.
func (s *Storage) IsFenced(ledger int64) (bool, error) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return false, ErrClosed
	}
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	st, err := s.stateLocked(ledger, false)
	if err != nil {
		return false, err
	}
	if st == nil || st.rec.deleted {
		return false, fmt.Errorf("%w: %d", ErrNoLedger, ledger)
	}
	return st.rec.fenced, nil
}

// Ledgers lists the ledgers this bookie holds (not deleted), ascending:
// every add acknowledged before the call is counted, applied or not.
func (s *Storage) Ledgers() ([]int64, error) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.unapplied() {
		if err := s.awaitApplied(); err != nil {
			return nil, err
		}
	}
	var out []int64
	err := s.idx.ledgers(func(ledger int64, r ledgerRecord) error {
		if !r.deleted {
			out = append(out, ledger)
		}
		return nil
	})
	return out, err
}
