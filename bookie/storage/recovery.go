package storage

import (
	"fmt"
	"math"
	"time"

	"github.com/magnetar-io/magnetar/bookie/journal"
)

// Open opens (creating if needed) the storage in opts.Dir and recovers it:
//
//  1. open the index and read the checkpoint P;
//  2. start a new entry log, numbered above every log on disk or in the
//     index (never append after a possibly torn tail);
//  3. open the journal, replaying every record after P into the new log,
//     in order, with the apply path (idempotent: see apply.go);
//  4. checkpoint, so the replayed records are durable in entry logs and
//     index and their journal files can go;
//  5. start the applier, which applies the records journaled from now on.
//
// Ledger states load lazily from the index afterwards. Logs left by a
// crash (below the new log, without metadata) are sorted out by GC.
func Open(opts Options) (*Storage, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := o.FS
	logDir := fs.PathJoin(o.Dir, "entrylogs")
	for _, d := range []string{o.Dir, logDir} {
		if err := mkdirAllSynced(fs, d); err != nil {
			return nil, fmt.Errorf("storage: create %s: %w", d, err)
		}
	}
	idx, err := openIndex(fs, fs.PathJoin(o.Dir, "index"), o.Logger)
	if err != nil {
		return nil, err
	}
	s, err := recoverStorage(o, idx, logDir)
	if err != nil {
		idx.close()
		return nil, err
	}
	if o.CheckpointInterval > 0 {
		// Also after each finished entry log, BookKeeper's rule: under heavy
		// writes the journal since the last checkpoint stays about one entry
		// log long instead of interval × the write rate (at 500 MB/s, ten
		// 512 MiB files, more than the journal keeps for reuse: the rest
		// were deleted under the next writes), and so does a crash's replay.
		s.startLoop("checkpoint", o.CheckpointInterval, s.logs.rotated, s.Checkpoint)
	}
	if o.GCInterval > 0 {
		s.startLoop("gc", o.GCInterval, nil, s.GC)
	}
	// Before the first add: a bookie started on a full disk refuses adds
	// from the start.
	s.checkDisks()
	if o.DiskCheckInterval > 0 {
		s.startLoop("disk check", o.DiskCheckInterval, nil, s.checkDisks)
	}
	return s, nil
}

func recoverStorage(o Options, idx *index, logDir string) (*Storage, error) {
	ckpt, err := idx.checkpoint()
	if err != nil {
		return nil, err
	}
	ids, err := listLogs(o.FS, logDir)
	if err != nil {
		return nil, fmt.Errorf("storage: list entry logs: %w", err)
	}
	metas, err := idx.logMetas()
	if err != nil {
		return nil, err
	}
	next := uint64(1)
	if len(ids) > 0 {
		next = ids[len(ids)-1] + 1
	}
	for id := range metas {
		next = max(next, id+1)
	}
	logs, err := openEntryLogs(o.FS, logDir, o.EntryLogMaxSize, o.WriteBufferSize, o.EntryLogDirectIO, o.EntryLogPageCacheKeep, next, o.Logger)
	if err != nil {
		return nil, err
	}
	if o.EntryLogDirectIO { // the logs of earlier runs are read as new ones are
		for _, id := range ids {
			logs.disk.setMark(id, math.MaxInt64)
		}
	}
	s := &Storage{
		opts:           o,
		fs:             o.FS,
		logger:         o.Logger,
		idx:            idx,
		logs:           logs,
		firstLogID:     next,
		closing:        make(chan struct{}),
		applied:        ckpt,
		lastCkpt:       ckpt,
		applyQ:         newApplyQueue(o.Journal.QueueSize),
		ledgers:        make(map[int64]*ledgerState),
		pendingFences:  make(map[int64]int),
		pendingDeletes: make(map[int64]int),
		badLogs:        make(map[uint64]bool),
		stop:           make(chan struct{}),

		batchBytes:   compactBatchBytes,
		batchEntries: compactBatchEntries,
	}
	start := time.Now()
	s.replaying = true
	s.jnl, err = journal.Open(o.Journal, ckpt, func(end journal.Position, typ byte, body []byte) error {
		s.replayed++
		return s.replay(end, typ, body)
	})
	s.writeMu.Lock()
	s.replaying = false
	s.writeMu.Unlock()
	if err != nil {
		logs.close()
		return nil, fmt.Errorf("storage: journal replay from %v: %w", ckpt, err)
	}
	s.logger.Info("storage: recovered", "dir", o.Dir, "checkpoint", ckpt, "replayed", s.replayed,
		"applied", s.applied, "entrylog", next, "took", time.Since(start))
	if s.replayed > 0 {
		if err := s.checkpoint(true); err != nil {
			s.jnl.Close()
			logs.close()
			return nil, err
		}
	}
	go s.runApplier()
	return s, nil
}
