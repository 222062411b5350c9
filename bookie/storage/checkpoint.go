package storage

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Checkpoint makes everything applied so far durable outside the journal
// and lets the journal files it covers go:
//
//  1. P := applied (the end of the last applied journal record; records
//     journaled but still queued for the applier come after P and stay in
//     the journal);
//  2. flush and fsync the entry logs (current and finished ones not yet
//     synced, and their directory), recording finished logs' metadata;
//  3. put "c" = P in the index and flush the index;
//  4. journal.Release(P).
//
// Invariant: the checkpoint recorded in the index never covers a record
// whose entry-log bytes are not fsynced. Step 2 precedes step 3, and the
// index is durable as a prefix of its writes (its WAL is off; a flush
// persists the whole memtable), so "c" = P is durable only with everything
// written before it. Index writes after P may become durable earlier (by
// Pebble's own flushes) pointing at unsynced log bytes: replay from P
// repoints them.
//
// The checkpoint lives in the index rather than in a file of its own:
// one flush makes it durable together with the index state it describes,
// with no extra file, rename or directory fsync.
func (s *Storage) Checkpoint() error {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.checkpoint(true)
}

func (s *Storage) checkpoint(release bool) error {
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if err := s.failure(); err != nil {
		return err
	}
	s.writeMu.Lock()
	p := s.applied
	s.writeMu.Unlock()
	if p == s.lastCkpt && release {
		return nil // nothing applied since the last one
	}
	if err := s.syncLogs(); err != nil {
		return err
	}
	if err := s.idx.db.Set([]byte{keyCheckpoint}, appendPos(nil, p), pebble.NoSync); err != nil {
		return s.fail(fmt.Errorf("storage: index put checkpoint: %w", err))
	}
	if err := s.idx.flush(); err != nil {
		return s.fail(err)
	}
	s.lastCkpt = p
	if release {
		if err := s.jnl.Release(p); err != nil {
			// Not fatal: the files go at the next checkpoint.
			return fmt.Errorf("storage: checkpoint %v: %w", p, err)
		}
	}
	return nil
}

// syncLogs fsyncs the entry logs (entryLogs.sync) and puts the metadata of
// the finished logs it synced in the index (unsynced: a lost "m" key only
// means GC rebuilds it). A failure makes the storage read-only.
func (s *Storage) syncLogs() error {
	finished, err := s.logs.sync()
	if err != nil {
		return s.fail(err)
	}
	for _, w := range finished {
		if err := s.idx.db.Set(logMetaKey(w.id), w.meta().encode(), pebble.NoSync); err != nil {
			return s.fail(fmt.Errorf("storage: index put log metadata: %w", err))
		}
	}
	return nil
}

// startLoop runs fn every interval, and whenever trigger (nil: never)
// gets a value, until Close. A run restarts the interval.
func (s *Storage) startLoop(name string, interval time.Duration, trigger <-chan struct{}, fn func() error) {
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			case <-trigger:
			}
			if err := fn(); err != nil && !errors.Is(err, ErrClosed) {
				s.logger.Warn("storage: background "+name+" failed", "err", err)
			}
			t.Reset(interval) // a tick due meanwhile is dropped (Go 1.23 timers)
		}
	}()
}

// Close stops the background loops, closes the journal and stops the
// applier (queued records are applied or refused first, and their done
// callbacks called), makes a final checkpoint and closes the
// entry logs and index. A read-only storage skips the checkpoint and
// returns its failure. A second Close returns ErrClosed.
func (s *Storage) Close() error {
	// closing first: it wakes WaitLAC and stops a GC pass between batches,
	// which holds opMu.
	s.closeOnce.Do(func() { close(s.closing) })
	s.opMu.Lock()
	if s.closed {
		s.opMu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.opMu.Unlock()

	close(s.stop)
	s.loops.Wait()
	// No public method runs now but WaitLAC's wait, which holds nothing.
	var errs []error
	if err := s.jnl.Close(); err != nil {
		errs = append(errs, fmt.Errorf("storage: close journal: %w", err))
	}
	// The journal has queued its last records: the applier applies them,
	// then stops.
	s.applyQ.close()
	if err := s.failure(); err != nil {
		// No checkpoint: the next Open replays the journal.
		errs = append(errs, err)
	} else if err := s.logs.finish(); err != nil {
		// The current log is finished so that it gets its metadata; the
		// journal is closed, so its files go at the next run's checkpoint.
		errs = append(errs, s.fail(err))
	} else if err := s.checkpoint(false); err != nil {
		errs = append(errs, err)
	}
	if err := s.logs.close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.idx.close(); err != nil {
		errs = append(errs, fmt.Errorf("storage: close index: %w", err))
	}
	return errors.Join(errs...)
}
