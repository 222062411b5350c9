package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/journal"
)

// Journal record types. These are an on-disk format.
const (
	recordAdd         byte = 1 // body: the entry bytes
	recordRecoveryAdd byte = 4 // body: the entry bytes; accepted on fenced ledgers
	recordFence       byte = 2 // body: ledger u64
	recordDelete      byte = 3 // body: ledger u64
)

// maxReadAttempts bounds re-lookups of an entry whose log GC removed
// between the index lookup and the read.
const maxReadAttempts = 3

// Storage is the ledger storage of one bookie. Its methods are safe for
// concurrent use.
type Storage struct {
	opts   Options
	fs     vfs.FS
	logger *slog.Logger
	idx    *index
	logs   *entryLogs
	jnl    *journal.Journal

	// firstLogID is the first entry log of this process: logs below it
	// without metadata in the index are from a crashed run.
	firstLogID uint64

	// opMu is read-held by the public methods while they use the journal,
	// index or logs, and write-held by Close to set closed: so nothing
	// touches them once Close tears them down. Internal code never takes
	// it (a read lock taken twice deadlocks against a waiting Close).
	opMu      sync.RWMutex
	closed    bool
	closing   chan struct{} // closed when Close starts: wakes WaitLAC, stops GC
	closeOnce sync.Once

	// applyQ takes journaled records to the applier goroutine (applier.go).
	applyQ *applyQueue

	// writeMu serializes the apply path (the applier, or Open's replay)
	// with GC's index repointing and the checkpoint's read of applied.
	// Under it, apply's checks of the ledger states, entry-log appends,
	// index batch commit and state updates of a segment are one step, and
	// GC's check-and-repoint of an entry location is atomic against them.
	writeMu sync.Mutex
	// applied is the end position of the last journal record applied (or
	// refused) in order; everything up to it is in the entry logs and the
	// index. Records after it may be journaled and queued for the applier.
	// Guarded by writeMu.
	applied journal.Position
	// replaying is set during Open's journal replay. Guarded by writeMu.
	replaying bool

	// failed is the first apply, sync or checkpoint failure (wrapping
	// ErrReadOnly); after it every mutation is refused.
	failMu sync.Mutex
	failed error

	// disk is what the last disk usage check found (disk.go).
	diskMu sync.Mutex
	disk   diskState

	// locs keeps runs of entry locations for readers going through a
	// ledger (locruns.go).
	locs locRuns

	ledgersMu sync.Mutex
	ledgers   map[int64]*ledgerState
	// pendingFences and pendingDeletes count, by ledger, the fences and
	// deletes journaled but not yet applied (ack.go). Guarded by ledgersMu.
	pendingFences, pendingDeletes map[int64]int

	// orderMu orders adds against fences and deletes in the journal (ack.go).
	orderMu sync.RWMutex
	// ackedTo is the end of the last add acknowledged once journaled,
	// appliedTo the applier's progress (applied's copy); awaitApplied
	// waits on appliedCh, closed when appliedTo advances or the storage
	// fails. Guarded by ackMu.
	ackMu              sync.Mutex
	ackedTo, appliedTo journal.Position
	appliedCh          chan struct{}

	ckptMu   sync.Mutex       // one checkpoint at a time
	lastCkpt journal.Position // guarded by ckptMu
	gcMu     sync.Mutex       // one GC pass at a time
	badLogs  map[uint64]bool  // guarded by gcMu: logs GC found corrupt and leaves alone

	// replayed is what Open's recovery did: records replayed from the
	// checkpoint. For logs and tests.
	replayed int

	stop  chan struct{} // stops the background loops
	loops sync.WaitGroup

	// Compaction batch limits (compactBatchBytes, compactBatchEntries;
	// tests make them small).
	batchBytes, batchEntries int
	// testHookCompactBatch, if set, runs when a compaction batch is copied
	// and synced, before it is repointed, with no lock held.
	testHookCompactBatch func()
	// testHookWaitLAC, if set, runs when WaitLAC is about to block.
	testHookWaitLAC func()
	// testHookAwaitApplied, if set, runs when awaitApplied is about to
	// block.
	testHookAwaitApplied func()
	// testHookApply, if set, runs on the applier when records are queued,
	// before it takes them, with no lock held.
	testHookApply func()
	// testHookReadMissed, if set, runs when ReadEntry first finds no
	// index entry, before it looks whether the applier is behind.
	testHookReadMissed func()
}

// failure returns the error that made the storage read-only, or nil.
func (s *Storage) failure() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

// fail makes the storage read-only (once) and returns the error to report.
func (s *Storage) fail(err error) error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failed == nil {
		if errors.Is(err, ErrReadOnly) {
			s.failed = err
		} else {
			s.failed = fmt.Errorf("%w after a write failure: %w", ErrReadOnly, err)
		}
		s.logger.Error("storage: write failure, now read-only", "err", err)
		s.ackMu.Lock()
		s.wakeAppliedLocked()
		s.ackMu.Unlock()
	}
	return s.failed
}

// mutable returns why the storage refuses mutations, or nil.
func (s *Storage) mutable() error {
	if s.closed {
		return ErrClosed
	}
	return s.failure()
}

// Recovery adds are what a client recovering a ledger writes to re-replicate
// its tail after fencing it; only they may write to a fenced ledger.
//
// AddEntry stores an entry: it verifies e (entry.Verify: ErrChecksum or
// ErrMalformed, nothing stored), refuses fenced ledgers (ErrFenced) unless
// recovery is set, refuses deleted ones (ErrNoLedger) — a fence or delete
// journaled but not yet applied counts — journals it and, once the journal
// record is durable, calls done(nil); the applier then makes it readable
// (entry log, index, LAC), and reads wait for that (ack.go).
//
// e must not be modified until the entry is applied (storage keeps it
// until then). done is called exactly once: on the journal's goroutine, in
// journal order with the done callbacks of the other adds, once the
// record is durable; on the applier's if the journal failed it; or before
// AddEntry returns when the entry is refused at once. It must be quick and
// must not block, nor call Storage methods synchronously (it holds up the
// journal, which a method may wait for).
func (s *Storage) AddEntry(e []byte, recovery bool, done func(err error)) {
	h, err := entry.Verify(e)
	if err == nil && (h.Ledger < 0 || h.Entry < 0) {
		err = fmt.Errorf("%w: negative ledger %d or entry %d", ErrMalformed, h.Ledger, h.Entry)
	}
	if err == nil {
		err = s.appendAdd(h, e, recovery, done)
	}
	if err != nil {
		done(err)
	}
}

func (s *Storage) appendAdd(h entry.Header, e []byte, recovery bool, done func(error)) error {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if err := s.mutable(); err != nil {
		return err
	}
	s.orderMu.RLock()
	defer s.orderMu.RUnlock()
	fenced, err := s.addAllowed(h.Ledger, recovery)
	switch {
	case errors.Is(err, ErrNoLedger):
		return fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, h.Ledger)
	case errors.Is(err, ErrFenced):
		return fmt.Errorf("%w: ledger %d", ErrFenced, h.Ledger)
	case err != nil:
		return s.fail(fmt.Errorf("storage: ledger %d: %w", h.Ledger, err))
	}
	// A disk above its usage threshold still takes the recovery adds of
	// a ledger fenced here: the few entries past its LAC that closing it
	// writes again, without which its topic cannot open (disk.go).
	if full := s.diskFull(); full != nil && !(recovery && fenced) {
		return full
	}
	typ := recordAdd
	if recovery {
		typ = recordRecoveryAdd
	}
	// Acknowledged once durable; the applier makes it readable (ack.go).
	// A journal failure is the applier's to report, in order.
	journaled := func(end journal.Position, err error) {
		ack := done
		if err == nil {
			s.ackedAt(end)
			ack(nil)
			ack = nil
		}
		s.applyQ.put(applyReq{end: end, jerr: err, typ: typ, entry: e, done: ack})
	}
	if len(e)-entry.HeaderSize >= knownPayloadMin {
		// AddEntry verified e: its checksum is right, and the journal
		// record's is combined from it rather than read off the payload
		// a second time.
		s.jnl.AppendKnown(typ, e, entry.HeaderSize, entry.PayloadChecksum(e), journaled)
	} else {
		s.jnl.Append(typ, e, journaled)
	}
	return nil
}

// knownPayloadMin: from this payload size on, an add's journal checksum is
// combined from the entry's (two crc32c.Combine, about 0.4 µs) instead of
// computed over the payload (about 0.6 µs per 16 KiB here, more when the
// bytes are not in the CPU's cache).
const knownPayloadMin = 16 << 10

// journalFailed handles a journal error for a record (on the applier, in
// journal order): the journal refuses everything after a failure, so the
// storage goes read-only too.
func (s *Storage) journalFailed(err error) error {
	if errors.Is(err, journal.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	// The storage is read-only from now on, and the error says so (a
	// client leaves a read-only bookie out of new ledgers), with the
	// journal's error as its cause.
	return s.fail(err)
}

// Fence marks the ledger fenced and calls done with its LAC and last entry
// (-1 for none). The fence is journaled, so it survives a crash; adds
// journaled after it fail with ErrFenced. Fencing an unknown ledger creates
// it (fenced, no entries); fencing a deleted one fails with ErrNoLedger.
// done is called like AddEntry's.
func (s *Storage) Fence(ledger int64, done func(lac, lastEntry int64, err error)) {
	if journaled, lac, last, err := s.appendFence(ledger, done); !journaled {
		done(lac, last, err)
	}
}

// appendFence journals a fence or, when it can answer at once, returns
// journaled false with the answer.
func (s *Storage) appendFence(ledger int64, done func(lac, lastEntry int64, err error)) (journaled bool, lac, last int64, err error) {
	if ledger < 0 {
		return false, -1, -1, fmt.Errorf("%w: %d", ErrNoLedger, ledger)
	}
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if err := s.mutable(); err != nil {
		return false, -1, -1, err
	}
	s.ledgersMu.Lock()
	st, err := s.stateLocked(ledger, false)
	if err == nil && st != nil {
		switch {
		case st.rec.deleted:
			err = fmt.Errorf("%w: ledger %d was deleted", ErrNoLedger, ledger)
		case st.rec.fenced:
			// Applied, hence durable: answer without journaling again.
			if err = s.loadLACLocked(ledger, st); err == nil {
				lac, last = st.lac, st.last
				s.ledgersMu.Unlock()
				return false, lac, last, nil
			}
		}
	}
	s.ledgersMu.Unlock()
	if err != nil {
		return false, -1, -1, err
	}
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	s.ledgersMu.Lock()
	pendingLocked(s.pendingFences, ledger, 1)
	s.ledgersMu.Unlock()
	s.jnl.Append(recordFence, ledgerBody(ledger), func(end journal.Position, err error) {
		s.applyQ.put(applyReq{end: end, jerr: err, typ: recordFence, ledger: ledger, fenceDone: done})
	})
	return true, 0, 0, nil
}

// Delete removes the ledger: its index entries and state go (a tombstone
// stays, so late adds are refused), its bytes in the entry logs become
// garbage for GC. The delete is journaled, so it survives a crash. Deleting
// a ledger already deleted succeeds. done is called like AddEntry's.
func (s *Storage) Delete(ledger int64, done func(err error)) {
	if journaled, err := s.appendDelete(ledger, done); !journaled {
		done(err)
	}
}

// appendDelete journals a delete or, when it can answer at once, returns
// journaled false with the answer.
func (s *Storage) appendDelete(ledger int64, done func(error)) (journaled bool, err error) {
	if ledger < 0 {
		return false, fmt.Errorf("%w: %d", ErrNoLedger, ledger)
	}
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if err := s.mutable(); err != nil {
		return false, err
	}
	s.ledgersMu.Lock()
	st, err := s.stateLocked(ledger, false)
	deleted := st != nil && st.rec.deleted
	s.ledgersMu.Unlock()
	if err != nil || deleted {
		return false, err
	}
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	s.ledgersMu.Lock()
	pendingLocked(s.pendingDeletes, ledger, 1)
	s.ledgersMu.Unlock()
	s.jnl.Append(recordDelete, ledgerBody(ledger), func(end journal.Position, err error) {
		s.applyQ.put(applyReq{end: end, jerr: err, typ: recordDelete, ledger: ledger, done: done})
	})
	return true, nil
}

// ReadEntry returns a copy of the stored entry, in a buffer the caller
// holds alone (from entry.NewReadBuf: it may Recycle it). It checks the record
// against the index and the entry's checksum and header against what was
// asked: a mismatch is a *CorruptionError naming the log and offset.
// ErrNoLedger if the bookie holds nothing of the ledger (or deleted it),
// ErrNoEntry if it holds the ledger but not that entry. Entries still in
// the entry-log write buffer are served from it.
func (s *Storage) ReadEntry(ledger, entryID int64) ([]byte, error) {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	waited := false
	for attempt := 1; ; attempt++ {
		loc, ok, err := s.lookup(ledger, entryID)
		if err != nil {
			return nil, err
		}
		if !ok && !waited {
			// Maybe acknowledged, not yet applied when the index was looked
			// at: wait for the applier if it is behind, and look again
			// either way, since it may have applied the entry between the
			// look and now.
			if hook := s.testHookReadMissed; hook != nil {
				hook()
			}
			if err := s.awaitApplied(); err != nil {
				return nil, err
			}
			waited = true
			attempt--
			continue
		}
		if !ok {
			rec, ok, err := s.idx.ledger(ledger)
			switch {
			case err != nil:
				return nil, err
			case !ok || rec.deleted:
				return nil, fmt.Errorf("%w: %d", ErrNoLedger, ledger)
			default:
				return nil, fmt.Errorf("%w: ledger %d entry %d", ErrNoEntry, ledger, entryID)
			}
		}
		e, err := s.readLoc(ledger, entryID, loc, attempt)
		if err == errLogGone {
			s.locs.forget(ledger) // its kept runs may point into the log
			continue              // GC moved the entry and removed the log; look again
		}
		return e, err
	}
}

// readLoc reads and checks the entry (ledger, entryID) at loc. If the log
// no longer exists it returns errLogGone, for the caller to look the entry
// up again (GC repoints entries before it removes a log), unless this was
// the last attempt: then the index points into a missing log, which is
// corruption.
func (s *Storage) readLoc(ledger, entryID int64, loc location, attempt int) ([]byte, error) {
	e, sum, summed, err := s.logs.read(loc)
	if err == errLogGone {
		if attempt < maxReadAttempts {
			return nil, errLogGone
		}
		return nil, corruptf(s.logs.path(loc.log), loc.offset-recordPrefixSize, "entry log missing (ledger %d entry %d)", ledger, entryID)
	}
	if err != nil {
		return nil, err
	}
	var h entry.Header
	if summed {
		h, err = entry.VerifySum(e, sum)
	} else {
		h, err = entry.Verify(e)
	}
	if err != nil {
		return nil, &CorruptionError{File: s.logs.path(loc.log), Offset: loc.offset - recordPrefixSize, Err: err}
	}
	if h.Ledger != ledger || h.Entry != entryID {
		return nil, corruptf(s.logs.path(loc.log), loc.offset-recordPrefixSize, "record holds ledger %d entry %d, index says ledger %d entry %d",
			h.Ledger, h.Entry, ledger, entryID)
	}
	return e, nil
}

func ledgerBody(ledger int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(ledger))
}
