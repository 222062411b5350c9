package storage

import "github.com/magnetar-io/magnetar/bookie/journal"

// Adds are acknowledged once their journal record is durable, before the
// applier has written them to an entry log and the index: BookKeeper's
// order, which keeps the applier off every add's latency. Three things
// make that safe.
//
//   - No add is acknowledged that the applier would refuse. The applier
//     refuses an add journaled after a fence (unless a recovery add) or a
//     delete of its ledger. AddEntry checks the ledger holding orderMu
//     shared through its journal append, and Fence and Delete append
//     holding it exclusively, so a fence or delete is either journaled
//     before the check — and the check sees it: applied in the ledger's
//     state, or still pending (pendingFences, pendingDeletes: journaled,
//     not yet applied) — or after the add.
//   - Reads see every acknowledged add. ReadEntry, on a miss, and
//     LastAddConfirmed first wait until the applier has applied every add
//     acknowledged so far (awaitApplied): a reader that learned of an
//     entry from its writer finds it.
//   - An acknowledged add survives: it is in the journal, which keeps
//     every record after the last checkpoint, and a checkpoint covers only
//     what is applied. If applying fails, the storage goes read-only and
//     the record stays in the journal for the next run's replay.

// ackedAt records that the add ending at end was acknowledged (on the
// journal's goroutine, in journal order).
func (s *Storage) ackedAt(end journal.Position) {
	s.ackMu.Lock()
	s.ackedTo = end
	s.ackMu.Unlock()
}

// appliedUpTo records the applier's progress and wakes awaitApplied.
func (s *Storage) appliedUpTo(end journal.Position) {
	s.ackMu.Lock()
	s.appliedTo = end
	s.wakeAppliedLocked()
	s.ackMu.Unlock()
}

func (s *Storage) wakeAppliedLocked() {
	if s.appliedCh != nil {
		close(s.appliedCh)
		s.appliedCh = nil
	}
}

// unapplied reports whether an acknowledged add is not yet applied.
func (s *Storage) unapplied() bool {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	return s.appliedTo.Less(s.ackedTo)
}

// awaitApplied waits until every add acknowledged before the call is
// applied, the storage fails (its error) or closes (ErrClosed).
func (s *Storage) awaitApplied() error {
	s.ackMu.Lock()
	target := s.ackedTo
	for s.appliedTo.Less(target) {
		if s.appliedCh == nil {
			s.appliedCh = make(chan struct{})
		}
		ch := s.appliedCh
		s.ackMu.Unlock()
		if err := s.failure(); err != nil {
			return err
		}
		if hook := s.testHookAwaitApplied; hook != nil {
			hook()
		}
		select {
		case <-ch:
		case <-s.closing:
			return ErrClosed
		}
		s.ackMu.Lock()
	}
	s.ackMu.Unlock()
	return nil
}

// addAllowed checks, holding orderMu shared, that an add to ledger may be
// journaled and acknowledged: ErrNoLedger if the ledger is deleted or its
// delete is pending, ErrFenced if it is fenced or its fence is pending
// (unless recovery). An unknown ledger is looked up in the index.
func (s *Storage) addAllowed(ledger int64, recovery bool) (fenced bool, err error) {
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	// Pending first: the applier sets the state before it drops the
	// pending mark, so one of the two shows a fence or delete journaled
	// before this check.
	deleted := s.pendingDeletes[ledger] > 0
	fenced = s.pendingFences[ledger] > 0
	if !deleted && (!fenced || recovery) {
		st, err := s.stateLocked(ledger, false)
		if err != nil {
			return fenced, err
		}
		if st != nil {
			deleted, fenced = st.rec.deleted, fenced || st.rec.fenced
		}
	}
	switch {
	case deleted:
		return fenced, ErrNoLedger
	case fenced && !recovery:
		return fenced, ErrFenced
	}
	return fenced, nil
}

// pendingLocked counts a fence or delete of ledger journaled (delta 1) or
// applied (-1). Called with ledgersMu.
func pendingLocked(m map[int64]int, ledger int64, delta int) {
	switch n := m[ledger] + delta; {
	case n > 0:
		m[ledger] = n
	default:
		delete(m, ledger)
	}
}
