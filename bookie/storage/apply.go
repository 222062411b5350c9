package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/journal"
)

// The apply path turns durable journal records into readable state. Live,
// the journal's done callbacks acknowledge adds (ack.go) and queue each
// record for the applier (applier.go), so the journal writes and syncs the
// next group while the applier works; Open's replay applies each record
// directly.
// Both go through applySegment, which applies a segment: a run of records
// ending at the first fence or delete (included) or at the end of what
// was queued. A segment is one critical section under writeMu:
//
//  1. stage each record in order: check the ledger state, append the entry
//     to the current entry log, put its index keys in the segment's one
//     Pebble batch;
//  2. commit the batch (unsynced: the journal is the write-ahead log);
//  3. publish: ledger states (persisted, LAC, fenced/deleted, waiter
//     wake-ups), then applied = the end of the segment's last record;
//
// then, with no lock held, the records' done callbacks run in order.
//
// Invariants:
//
//   - Records apply in journal order: the journal calls done in append
//     order, the queue is FIFO, the applier takes from its head and
//     applies and acknowledges in queue order, on one goroutine.
//   - A ledger's record (fenced, deleted) changes only by a fence or a
//     delete, and those end a segment: while staging, every record sees
//     the state all records before it left, and a fence answers with the
//     LAC and last entry of the records before it, as if applied alone.
//   - applied advances past a record only once its effects are committed
//     to the index and appended to the entry log (or it was refused). A
//     checkpoint at applied is therefore complete, and records journaled
//     but still queued lie after it: the journal keeps them, and a crash
//     replays them.
//   - Publishing follows the commit, and acknowledging a fence or delete
//     follows publishing: a reader woken by a LAC change finds the entry
//     in the index. Adds are acknowledged before: readers that may ask for
//     one wait for the applier (ack.go).
//   - Live, the applier never refuses an add for a fence or delete: adds
//     after a journaled fence or delete are refused before journaling
//     (ack.go). The checks below serve replay.
//   - Applying is idempotent: replaying a record already applied re-adds
//     the entry (the index is repointed at the new copy), re-fences,
//     re-deletes. Replay may find the index ahead of the record, since
//     Pebble flushes memtables by itself; so an add is refused only for a
//     fence or delete whose record comes before it (fencedAt/deletedAt),
//     which gives the same answer live and in replay.
//   - Refusals (ErrFenced, ErrNoLedger) change nothing and are reported
//     to the caller only. Failures (entry-log write, index read or write,
//     a journal error) make the storage read-only and do not advance
//     applied past the record: it stays in the journal for the next run.
//     A failure while staging ends the segment: the records staged before
//     it are committed and acknowledged as usual, every later record gets
//     ErrReadOnly. A failed commit fails every record staged with it.
//   - Replay never reads entries (no LAC loads): until replay is over the
//     index may point at entry-log bytes lost in the crash.

// applyReq is a journal record to apply, with its done callback.
type applyReq struct {
	end    journal.Position
	jerr   error // the journal failed the record: nothing to apply
	typ    byte
	entry  []byte // add, recovery add: the entry (not copied)
	ledger int64  // fence, delete

	done      func(err error)                  // add, recovery add, delete
	fenceDone func(lac, last int64, err error) // fence
}

// applyResult is the outcome of one record in a segment.
type applyResult struct {
	err       error
	lac, last int64 // fence: the ledger's LAC and last entry

	// staged: the record has writes in the segment's batch, to publish
	// once it is committed.
	staged bool
	st     *ledgerState
	h      entry.Header // add
	rec    ledgerRecord // fence, delete: the new ledger record
}

// finish calls r's done callback with its outcome.
func (r *applyReq) finish(out *applyResult) {
	if r.typ == recordFence {
		if r.fenceDone != nil {
			r.fenceDone(out.lac, out.last, out.err)
		}
		return
	}
	if r.done != nil {
		r.done(out.err)
	}
}

// applyAll applies reqs segment by segment, calling the done callbacks of
// each segment after it. res is scratch space, grown as needed and
// returned for reuse.
func (s *Storage) applyAll(reqs []applyReq, res []applyResult) []applyResult {
	if cap(res) < len(reqs) {
		res = make([]applyResult, len(reqs))
	}
	all := res[:len(reqs)]
	for i := 0; i < len(reqs); {
		n := s.applySegment(reqs[i:], all[i:])
		for ; n > 0; i, n = i+1, n-1 {
			reqs[i].finish(&all[i])
			all[i] = applyResult{}
		}
	}
	return all[:0]
}

// applySegment applies the segment at the head of reqs (see above), puts
// the outcomes in res and returns the number of records it took (at
// least one). The caller then calls their done callbacks.
func (s *Storage) applySegment(reqs []applyReq, res []applyResult) int {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	b := s.idx.db.NewBatch()
	defer b.Close()
	var last journal.Position
	progressed, staged := false, false
	n := 0
	for n < len(reqs) {
		r, out := &reqs[n], &res[n]
		*out = applyResult{lac: -1, last: -1}
		n++
		if !s.stage(b, r, out) {
			break // a failure: the segment ends before the record
		}
		last, progressed = r.end, true
		staged = staged || out.staged
		if r.typ == recordFence || r.typ == recordDelete {
			break
		}
	}
	if staged {
		if err := b.Commit(pebble.NoSync); err != nil {
			err = s.fail(fmt.Errorf("storage: index write: %w", err))
			for i := range res[:n] {
				if out := &res[i]; out.staged {
					out.st.keyPending = false
					*out = applyResult{err: err, lac: -1, last: -1}
				}
			}
			return n
		}
	}
	s.publish(reqs[:n], res[:n])
	if progressed {
		s.applied = last
		s.appliedUpTo(last)
	}
	return n
}

// stage checks r against the ledger state and writes its effects to the
// entry log and b. It returns false on a failure (out.err says which), true
// otherwise: staged (out.staged) or refused (out.err). Called with writeMu.
func (s *Storage) stage(b *pebble.Batch, r *applyReq, out *applyResult) bool {
	if r.jerr != nil {
		out.err = s.journalFailed(r.jerr)
		return false
	}
	if err := s.failure(); err != nil {
		out.err = err
		return false
	}
	switch r.typ {
	case recordAdd, recordRecoveryAdd:
		return s.stageAdd(b, r, out)
	case recordFence:
		return s.stageFence(b, r, out)
	case recordDelete:
		return s.stageDelete(b, r, out)
	}
	out.err = s.fail(&CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("unknown record type %d ending at %v", r.typ, r.end)})
	return false
}

func (s *Storage) stageAdd(b *pebble.Batch, r *applyReq, out *applyResult) bool {
	h, err := entry.Parse(r.entry)
	if err != nil {
		out.err = s.fail(&CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("add record ending at %v: %w", r.end, err)})
		return false
	}
	st, err := s.state(h.Ledger, true)
	if err != nil {
		out.err = s.fail(err)
		return false
	}
	if st.rec.deleted && st.rec.deletedAt.Less(r.end) {
		out.err = fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, h.Ledger)
		return true
	}
	if st.rec.fenced && st.rec.fencedAt.Less(r.end) && r.typ != recordRecoveryAdd {
		out.err = fmt.Errorf("%w: ledger %d", ErrFenced, h.Ledger)
		return true
	}
	loc, err := s.logs.append(h.Ledger, r.entry)
	if err != nil {
		out.err = s.fail(err)
		return false
	}
	if !st.persisted && !st.keyPending {
		if err := b.Set(ledgerKey(h.Ledger), st.rec.encode(), nil); err != nil {
			out.err = s.fail(fmt.Errorf("storage: index put: %w", err))
			return false
		}
		st.keyPending = true
	}
	key, val := entryKeyArray(h.Ledger, h.Entry), locArray(loc)
	if err := b.Set(key[:], val[:], nil); err != nil {
		out.err = s.fail(fmt.Errorf("storage: index put: %w", err))
		return false
	}
	out.staged, out.st, out.h = true, st, h
	return true
}

func (s *Storage) stageFence(b *pebble.Batch, r *applyReq, out *applyResult) bool {
	st, err := s.state(r.ledger, true)
	if err != nil {
		out.err = s.fail(err)
		return false
	}
	out.st = st
	if st.rec.deleted && st.rec.deletedAt.Less(r.end) {
		out.err = fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, r.ledger)
		return true
	}
	// Already fenced by this record or an earlier one: nothing to write.
	// A fence the index has from a later record (replay) moves back here.
	if !st.rec.fenced || r.end.Less(st.rec.fencedAt) {
		rec := st.rec
		rec.fenced, rec.fencedAt = true, r.end
		if err := b.Set(ledgerKey(r.ledger), rec.encode(), nil); err != nil {
			out.err = s.fail(fmt.Errorf("storage: index put: %w", err))
			return false
		}
		out.staged, out.rec = true, rec
	}
	return true
}

// stageDelete always deletes the ledger's entries, even when the index
// already has the tombstone: replay may have re-added entries from records
// before it.
func (s *Storage) stageDelete(b *pebble.Batch, r *applyReq, out *applyResult) bool {
	st, err := s.state(r.ledger, true)
	if err != nil {
		out.err = s.fail(err)
		return false
	}
	rec := st.rec
	if !rec.deleted || r.end.Less(rec.deletedAt) {
		rec.deleted, rec.deletedAt = true, r.end
	}
	lower, upper := ledgerEntries(r.ledger)
	err = b.DeleteRange(lower, upper, nil)
	if err == nil {
		err = b.Set(ledgerKey(r.ledger), rec.encode(), nil)
	}
	if err != nil {
		out.err = s.fail(fmt.Errorf("storage: index delete: %w", err))
		return false
	}
	out.staged, out.st, out.rec = true, st, rec
	return true
}

// publish makes a committed segment visible in the ledger states, in
// order, and fills in the fences' answers. Called with writeMu.
func (s *Storage) publish(reqs []applyReq, res []applyResult) {
	s.ledgersMu.Lock()
	defer s.ledgersMu.Unlock()
	for i := range reqs {
		r, out := &reqs[i], &res[i]
		switch r.typ {
		case recordAdd, recordRecoveryAdd:
			if out.staged {
				out.st.persisted, out.st.keyPending = true, false
				out.st.addedLocked(out.h)
			}
		case recordFence:
			if out.err != nil || out.st == nil {
				continue
			}
			if out.staged {
				out.st.rec, out.st.persisted = out.rec, true
				out.st.notifyLocked()
			}
			if s.replaying {
				continue
			}
			if err := s.loadLACLocked(r.ledger, out.st); err != nil {
				out.err = err
				continue
			}
			out.lac, out.last = out.st.lac, out.st.last
		case recordDelete:
			if out.staged {
				out.st.rec, out.st.persisted = out.rec, true
				out.st.notifyLocked()
				delete(s.ledgers, r.ledger) // a tombstone needs no memory: lookups read the index
				s.locs.forget(r.ledger)     // committed: a later lookup finds no entry
			}
		}
	}
	// Fences and deletes are pending until their state is set (ack.go).
	for i := range reqs {
		switch reqs[i].typ {
		case recordFence:
			pendingLocked(s.pendingFences, reqs[i].ledger, -1)
		case recordDelete:
			pendingLocked(s.pendingDeletes, reqs[i].ledger, -1)
		}
	}
}

// replay applies one record during Open. Refusals are normal (they were
// refused live too); only failures stop Open.
func (s *Storage) replay(end journal.Position, typ byte, body []byte) error {
	r := applyReq{end: end, typ: typ}
	switch typ {
	case recordAdd, recordRecoveryAdd:
		r.entry = body
	case recordFence, recordDelete:
		if len(body) != 8 {
			return &CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("record type %d ending at %v: body of %d bytes", typ, end, len(body))}
		}
		r.ledger = int64(binary.BigEndian.Uint64(body))
	default:
		return &CorruptionError{File: s.opts.JournalDir, Offset: -1, Err: fmt.Errorf("unknown record type %d ending at %v", typ, end)}
	}
	var res [1]applyResult
	s.applySegment([]applyReq{r}, res[:])
	// A refusal is in res[0].err; a failure made the storage read-only.
	return s.failure()
}
