package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/journal"
)

// The apply path turns durable journal records into readable state. It
// runs on the journal goroutine (done callbacks, in journal order) and in
// Open's replay (same order), and keeps these invariants:
//
//   - Records apply in journal order, each under writeMu, and applied
//     advances past a record only once its effects are in the entry logs
//     and the index (or it was refused). A checkpoint at applied is
//     therefore complete.
//   - Applying is idempotent: replaying a record already applied re-adds
//     the entry (the index is repointed at the new copy), re-fences,
//     re-deletes. Replay may find the index ahead of the record, since
//     Pebble flushes memtables by itself; so an add is refused only for a
//     fence or delete whose record comes before it (fencedAt/deletedAt),
//     which gives the same answer live and in replay.
//   - Refusals (ErrFenced, ErrNoLedger) change nothing and are reported
//     to the caller only. Failures (entry-log write, index read or write)
//     make the storage read-only and do not advance applied: the record
//     stays in the journal for the next run.
//   - Replay never reads entries (no LAC loads): until replay is over the
//     index may point at entry-log bytes lost in the crash.

// applyAdd applies an add record ending at end.
func (s *Storage) applyAdd(end journal.Position, e []byte, recovery bool) error {
	h, err := entry.Parse(e)
	if err != nil {
		return s.fail(&CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("add record ending at %v: %w", end, err)})
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.failure(); err != nil {
		return err
	}
	st, err := s.state(h.Ledger, true)
	if err != nil {
		return s.fail(err)
	}
	if st.rec.deleted && st.rec.deletedAt.Less(end) {
		s.applied = end
		return fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, h.Ledger)
	}
	if st.rec.fenced && st.rec.fencedAt.Less(end) && !recovery {
		s.applied = end
		return fmt.Errorf("%w: ledger %d", ErrFenced, h.Ledger)
	}
	loc, err := s.logs.append(h.Ledger, e)
	if err != nil {
		return s.fail(err)
	}
	b := s.idx.db.NewBatch()
	defer b.Close()
	if !st.persisted {
		b.Set(ledgerKey(h.Ledger), st.rec.encode(), nil)
	}
	b.Set(entryKey(h.Ledger, h.Entry), encodeLoc(loc), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return s.fail(fmt.Errorf("storage: index put: %w", err))
	}
	s.ledgersMu.Lock()
	st.persisted = true
	st.addedLocked(h)
	s.ledgersMu.Unlock()
	s.applied = end
	return nil
}

// applyFence applies a fence record ending at end and returns the
// ledger's LAC and last entry.
func (s *Storage) applyFence(end journal.Position, ledger int64) (lac, last int64, err error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.failure(); err != nil {
		return -1, -1, err
	}
	st, err := s.state(ledger, true)
	if err != nil {
		return -1, -1, s.fail(err)
	}
	if st.rec.deleted && st.rec.deletedAt.Less(end) {
		s.applied = end
		return -1, -1, fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, ledger)
	}
	// Already fenced by this record or an earlier one: nothing to write.
	// A fence the index has from a later record (replay) moves back here.
	if !st.rec.fenced || end.Less(st.rec.fencedAt) {
		rec := st.rec
		rec.fenced, rec.fencedAt = true, end
		if err := s.idx.db.Set(ledgerKey(ledger), rec.encode(), pebble.NoSync); err != nil {
			return -1, -1, s.fail(fmt.Errorf("storage: index put: %w", err))
		}
		s.ledgersMu.Lock()
		st.rec, st.persisted = rec, true
		st.notifyLocked()
		s.ledgersMu.Unlock()
	}
	s.applied = end
	if s.replaying {
		return -1, -1, nil
	}
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	if err := s.loadLACLocked(ledger, st); err != nil {
		return -1, -1, err
	}
	return st.lac, st.last, nil
}

// applyDelete applies a delete record ending at end. It always deletes the
// ledger's entries, even when the index already has the tombstone: replay
// may have re-added entries from records before it.
func (s *Storage) applyDelete(end journal.Position, ledger int64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.failure(); err != nil {
		return err
	}
	st, err := s.state(ledger, true)
	if err != nil {
		return s.fail(err)
	}
	rec := st.rec
	if !rec.deleted || end.Less(rec.deletedAt) {
		rec.deleted, rec.deletedAt = true, end
	}
	b := s.idx.db.NewBatch()
	defer b.Close()
	lower, upper := ledgerEntries(ledger)
	b.DeleteRange(lower, upper, nil)
	b.Set(ledgerKey(ledger), rec.encode(), nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		return s.fail(fmt.Errorf("storage: index delete: %w", err))
	}
	s.ledgersMu.Lock()
	st.rec, st.persisted = rec, true
	st.notifyLocked()
	delete(s.ledgers, ledger) // a tombstone needs no memory: lookups read the index
	s.ledgersMu.Unlock()
	s.applied = end
	return nil
}

// replay applies one record during Open. Refusals are normal (they were
// refused live too); only failures stop Open.
func (s *Storage) replay(end journal.Position, typ byte, body []byte) error {
	var err error
	switch typ {
	case recordAdd, recordRecoveryAdd:
		err = s.applyAdd(end, body, typ == recordRecoveryAdd)
	case recordFence, recordDelete:
		if len(body) != 8 {
			return &CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("record type %d ending at %v: body of %d bytes", typ, end, len(body))}
		}
		ledger := int64(binary.BigEndian.Uint64(body))
		if typ == recordFence {
			_, _, err = s.applyFence(end, ledger)
		} else {
			err = s.applyDelete(end, ledger)
		}
	default:
		return &CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("unknown record type %d ending at %v", typ, end)}
	}
	if f := s.failure(); f != nil {
		return f
	}
	_ = err // a refusal
	return nil
}
