package storage

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// Compaction copies live entries in batches of about this size: one fsync
// and one index batch (under writeMu) per batch.
const (
	compactBatchBytes   = 4 << 20
	compactBatchEntries = 4096
)

// GC runs one garbage-collection pass over the finished entry logs:
//
//   - A finished log has metadata in the index ("m": record bytes per
//     ledger), written once it is complete and fsynced. A log left by a
//     crash has none: GC rebuilds it from one scan of the whole index
//     (bytes per ledger the index references in the log) and a scan of
//     the log (its valid length, before any torn tail).
//   - Live bytes of a log are those of ledgers not deleted. A log with
//     none is removed. A log whose live fraction is below GCMinLiveRatio
//     is compacted: its live entries are copied to the current log, made
//     durable, and their index entries repointed if they still point at
//     the old copy; then it is removed.
//
// Invariants: a log is removed only once the index no longer points into
// it and that index state is flushed (durable); an index entry is only
// repointed at bytes already fsynced. So a crash at any point leaves the
// index pointing at durable bytes (but for entries after the checkpoint,
// which replay repoints anyway). Adds are never held up by a pass: writeMu
// is taken per batch, for the repointing only.
//
// A log found corrupt (a bad record before its valid length, or index
// entries past a torn tail) is reported and left alone.
func (s *Storage) GC() error {
	s.opMu.RLock()
	defer s.opMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	if err := s.failure(); err != nil {
		return err
	}
	return s.gc()
}

func (s *Storage) gc() error {
	ids, err := listLogs(s.fs, s.logs.dir)
	if err != nil {
		return fmt.Errorf("storage: gc: list entry logs: %w", err)
	}
	metas, err := s.idx.logMetas()
	if err != nil {
		return err
	}
	onDisk := make(map[uint64]bool, len(ids))
	var crashed []uint64
	for _, id := range ids {
		onDisk[id] = true
		if _, ok := metas[id]; !ok && id < s.firstLogID && !s.badLogs[id] {
			crashed = append(crashed, id)
		}
	}
	for id := range metas {
		if !onDisk[id] { // a pass removed the log but not its metadata
			if err := s.idx.db.Delete(logMetaKey(id), pebble.NoSync); err != nil {
				return err
			}
			delete(metas, id)
		}
	}
	if len(crashed) > 0 {
		rebuilt, err := s.rebuildMetas(crashed)
		if err != nil {
			return err
		}
		maps.Copy(metas, rebuilt)
	}

	deleted := make(map[int64]bool)
	isDeleted := func(ledger int64) (bool, error) {
		d, ok := deleted[ledger]
		if !ok {
			rec, _, err := s.idx.ledger(ledger)
			if err != nil {
				return false, err
			}
			d = rec.deleted
			deleted[ledger] = d
		}
		return d, nil
	}

	var dead, compact []uint64
	liveOf := map[uint64]int64{}
	for _, id := range slices.Sorted(maps.Keys(metas)) {
		if s.badLogs[id] {
			continue
		}
		var total, live int64
		for ledger, n := range metas[id].ledgers {
			total += n
			if ledger == garbageLedger {
				continue
			}
			d, err := isDeleted(ledger)
			if err != nil {
				return err
			}
			if !d {
				live += n
			}
		}
		switch {
		case live == 0:
			dead = append(dead, id)
		case s.opts.GCMinLiveRatio > 0 && float64(live) < s.opts.GCMinLiveRatio*float64(total):
			compact = append(compact, id)
			liveOf[id] = live
		}
	}

	if room, full := s.compactionRoom(); full && len(compact) > 0 {
		// Compaction needs room for the copies; removing dead logs does
		// not. On a full disk only the emptiest logs whose copies fit in
		// the room are compacted.
		slices.SortStableFunc(compact, func(a, b uint64) int { return cmp.Compare(liveOf[a], liveOf[b]) })
		n := 0
		for _, id := range compact {
			if liveOf[id] > room {
				break
			}
			room -= liveOf[id]
			n++
		}
		if n < len(compact) {
			s.logger.Warn("storage: gc: compaction of some logs skipped while the disk is above its usage threshold",
				"compacted", n, "skipped", len(compact)-n)
		}
		compact = compact[:n]
	}
	var errs []error
	for _, id := range compact {
		err := s.compact(id, metas[id], isDeleted)
		var ce *CorruptionError
		switch {
		case err == nil:
			dead = append(dead, id)
			continue
		case errors.As(err, &ce):
			s.badLogs[id] = true
			s.logger.Error("storage: gc: entry log corrupt, left alone", "log", id, "err", err)
			continue
		}
		errs = append(errs, err)
		break
	}
	if len(dead) > 0 {
		errs = append(errs, s.removeLogs(dead, metas))
	}
	return errors.Join(errs...)
}

// removeLogs removes logs the index no longer points into, once that is
// durable.
func (s *Storage) removeLogs(ids []uint64, metas map[uint64]logMeta) error {
	if err := s.idx.flush(); err != nil {
		return s.fail(err)
	}
	var freed int64
	for _, id := range ids {
		size, _ := s.logs.fileSize(id)
		if err := s.logs.remove(id, s.closing); err != nil {
			return fmt.Errorf("storage: gc: remove entry log %d: %w", id, err)
		}
		freed += size
		if err := s.idx.db.Delete(logMetaKey(id), pebble.NoSync); err != nil {
			return s.fail(err)
		}
	}
	// Not needed for correctness (a log that comes back after a crash is
	// garbage GC collects again), but the space should stay reclaimed.
	if err := syncDir(s.fs, s.logs.dir); err != nil {
		return fmt.Errorf("storage: gc: fsync entry-log directory: %w", err)
	}
	s.logger.Info("storage: gc removed entry logs", "logs", len(ids), "bytes", freed)
	return nil
}

// rebuildMetas builds the metadata of logs left by a crash: the record
// bytes per ledger that the index references in each (one scan of the
// whole index), each log's valid length (a scan of the log up to its first
// bad record), and the rest of the valid bytes as garbage (garbageLedger):
// copies superseded by replay, entries of ledgers deleted since. Index
// entries past the valid length are corruption: the log is left alone.
// The rebuilt metadata is put in the index.
func (s *Storage) rebuildMetas(ids []uint64) (map[uint64]logMeta, error) {
	metas := make(map[uint64]logMeta, len(ids))
	refEnd := make(map[uint64]int64, len(ids))
	for _, id := range ids {
		metas[id] = logMeta{ledgers: make(map[int64]int64)}
	}
	err := s.idx.entries(func(ledger, _ int64, loc location) error {
		if m, ok := metas[loc.log]; ok {
			m.ledgers[ledger] += recordPrefixSize + int64(loc.size)
			refEnd[loc.log] = max(refEnd[loc.log], loc.offset+int64(loc.size))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]logMeta, len(ids))
	for _, id := range ids {
		end, bad, err := s.logs.scan(id, -1, func(location, []byte) error { return nil })
		if err != nil {
			return nil, fmt.Errorf("storage: gc: scan entry log %d: %w", id, err)
		}
		if bad != nil {
			if refEnd[id] > end {
				s.badLogs[id] = true
				s.logger.Error("storage: gc: index references entries past corruption, log left alone",
					"log", id, "referenced_to", refEnd[id], "err", bad)
				continue
			}
			s.logger.Info("storage: gc: entry log of a crashed run ends in a torn tail", "log", id, "valid", end, "err", bad)
		}
		m := metas[id]
		m.validLength = end
		var referenced int64
		for _, n := range m.ledgers {
			referenced += n
		}
		if garbage := end - logHeaderSize - referenced; garbage > 0 {
			m.ledgers[garbageLedger] = garbage
		}
		if err := s.idx.db.Set(logMetaKey(id), m.encode(), pebble.NoSync); err != nil {
			return nil, s.fail(err)
		}
		out[id] = m
	}
	return out, nil
}

// copyItem is one entry being moved by compaction; its bytes are
// arena[start:end].
type copyItem struct {
	ledger, entry int64
	from, to      location
	start, end    int
}

// compact moves the live entries of log id to the current log and
// repoints the index at them, batch by batch. Entries of deleted ledgers,
// and entries the index no longer points at (re-added or moved since),
// are garbage and stay behind.
func (s *Storage) compact(id uint64, m logMeta, isDeleted func(int64) (bool, error)) error {
	var items []copyItem
	var arena []byte
	flush := func() error {
		if len(items) == 0 {
			return nil
		}
		for i := range items {
			to, err := s.logs.append(items[i].ledger, arena[items[i].start:items[i].end])
			if err != nil {
				return s.fail(err)
			}
			items[i].to = to
		}
		// The copies are durable before anything points at them.
		if err := s.syncLogs(); err != nil {
			return err
		}
		if hook := s.testHookCompactBatch; hook != nil {
			hook()
		}
		s.writeMu.Lock()
		err := s.repoint(items)
		s.writeMu.Unlock()
		if err != nil {
			return s.fail(err)
		}
		items, arena = items[:0], arena[:0]
		select {
		case <-s.closing:
			return ErrClosed
		default:
			return nil
		}
	}
	_, bad, err := s.logs.scan(id, m.validLength, func(loc location, e []byte) error {
		h, _ := entry.Parse(e) // verified by scan
		if d, err := isDeleted(h.Ledger); err != nil || d {
			return err
		}
		cur, ok, err := s.idx.location(h.Ledger, h.Entry)
		if err != nil || !ok || cur != loc {
			return err
		}
		start := len(arena)
		arena = append(arena, e...)
		items = append(items, copyItem{ledger: h.Ledger, entry: h.Entry, from: loc, start: start, end: len(arena)})
		if len(arena) >= s.batchBytes || len(items) >= s.batchEntries {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return bad
	}
	return flush()
}

// repoint points each item's index entry at its copy, if it still points
// at the original. Called with writeMu held, so no add or delete of the
// same entry interleaves between the check and the put.
func (s *Storage) repoint(items []copyItem) error {
	b := s.idx.db.NewBatch()
	defer b.Close()
	for _, it := range items {
		cur, ok, err := s.idx.location(it.ledger, it.entry)
		if err != nil {
			return err
		}
		if ok && cur == it.from {
			if err := b.Set(entryKey(it.ledger, it.entry), encodeLoc(it.to), nil); err != nil {
				return err
			}
		}
	}
	return b.Commit(pebble.NoSync)
}
