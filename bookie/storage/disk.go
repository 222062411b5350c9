package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Disk usage thresholds (BookKeeper's diskUsageThreshold and
// diskUsageWarnThreshold). Usage is counted as df counts its Use%: used ÷
// (used + available), so blocks reserved for root count as neither, and a
// disk an unprivileged process cannot write to any more is 100 % full.
//
// Every DiskCheckInterval the storage looks at the file systems of its
// directories. Above DiskUsageThreshold on any of them it refuses adds
// (ErrReadOnly, saying which disk and how full) until every one is back
// at or below DiskUsageWarnThreshold, the low-water mark: so a disk that
// fills is refused writes while there is still room for the entries in
// flight, the index and the checkpoint, instead of failing a write with
// ENOSPC, which leaves the storage read-only until a restart. Fences,
// deletes and reads go on, so retention can free space, and so do the
// recovery adds of a ledger fenced here (closing a ledger writes its tail
// again; without them its topic cannot open). GC removes logs with
// nothing live, and compacts only the emptiest logs whose live entries
// fit in a quarter of the room left, since the copies need room. Above
// DiskUsageWarnThreshold it logs a warning.

// diskState is what the last disk check found. Guarded by Storage.diskMu.
type diskState struct {
	// full is why adds are refused (wrapping ErrReadOnly), or nil.
	full error
	// warned: above the warning threshold at the last check, logged.
	warned bool
	// checkErr is the last failure to read a disk's usage, logged once.
	checkErr string
	// dataAvail is the bytes available on the data directory's disk, as
	// last read.
	dataAvail uint64
}

// diskFull returns why adds are refused for lack of disk space, or nil.
func (s *Storage) diskFull() error {
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	return s.disk.full
}

// diskDirs are the directories whose file systems the check looks at.
func (s *Storage) diskDirs() []string {
	return slices.Compact([]string{s.opts.Dir, s.opts.JournalDir})
}

// checkDisks reads the usage of each directory's file system and updates
// the disk state, logging each change. A directory whose usage cannot be
// read does not make a full disk writable again: with a read failure the
// state can only get worse. It never fails (the loop's func type): a
// read failure is logged once.
func (s *Storage) checkDisks() error {
	var (
		worst     float64
		worstAt   string
		readErr   error
		dataAvail uint64
	)
	for _, dir := range s.diskDirs() {
		u, err := s.fs.GetDiskUsage(dir)
		if err == nil && u.UsedBytes+u.AvailBytes == 0 {
			err = fmt.Errorf("a file system of 0 bytes")
		}
		if err != nil {
			readErr = fmt.Errorf("storage: disk usage of %s: %w", dir, err)
			continue
		}
		if used := float64(u.UsedBytes) / float64(u.UsedBytes+u.AvailBytes); worstAt == "" || used > worst {
			worst, worstAt = used, dir
		}
		if dir == s.opts.Dir {
			dataAvail = u.AvailBytes
		}
	}
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	s.disk.dataAvail = dataAvail
	if readErr != nil {
		if msg := readErr.Error(); msg != s.disk.checkErr {
			s.disk.checkErr = msg
			lv := slog.LevelWarn
			if errors.Is(readErr, vfs.ErrUnsupported) { // an in-memory file system, in tests
				lv = slog.LevelInfo
			}
			s.logger.Log(context.Background(), lv, "storage: cannot check the disk's usage; the disk-usage thresholds are not applied to it", "err", readErr)
		}
	} else {
		s.disk.checkErr = ""
	}
	if worstAt == "" {
		return nil
	}
	pct := func(r float64) string { return fmt.Sprintf("%.1f%%", 100*r) }
	switch {
	case worst > s.opts.DiskUsageThreshold:
		if s.disk.full == nil {
			s.logger.Error("storage: disk above the usage threshold: refusing adds until it is back under the warning threshold",
				"dir", worstAt, "usage", pct(worst), "threshold", pct(s.opts.DiskUsageThreshold),
				"warn_threshold", pct(s.opts.DiskUsageWarnThreshold))
		}
		// Made again at each check, so that it says how full the disk is now.
		s.disk.full = fmt.Errorf("%w: the disk of %s is %s full, above the disk-usage threshold of %s",
			ErrReadOnly, worstAt, pct(worst), pct(s.opts.DiskUsageThreshold))
		s.disk.warned = true
	case worst > s.opts.DiskUsageWarnThreshold:
		if !s.disk.warned && s.disk.full == nil {
			s.logger.Warn("storage: disk above the usage warning threshold",
				"dir", worstAt, "usage", pct(worst), "warn_threshold", pct(s.opts.DiskUsageWarnThreshold),
				"threshold", pct(s.opts.DiskUsageThreshold))
		}
		s.disk.warned = true
	case readErr != nil:
		// Under the warning threshold where it could look, but not
		// everywhere: leave it as it was.
	default:
		if s.disk.full != nil {
			s.logger.Info("storage: disk usage back under the warning threshold: taking adds again",
				"dir", worstAt, "usage", pct(worst), "warn_threshold", pct(s.opts.DiskUsageWarnThreshold))
		}
		s.disk.full, s.disk.warned = nil, false
	}
	return nil
}

// compactionRoom says whether the disk is above its usage threshold and,
// if so, how many bytes GC may copy into the entry logs meanwhile: a
// quarter of what is available on the data directory's disk.
func (s *Storage) compactionRoom() (room int64, full bool) {
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	return int64(s.disk.dataAvail / 4), s.disk.full != nil
}

// ReadOnly returns why the storage refuses adds now (wrapping
// ErrReadOnly): a write failure, for good, or a disk above its usage
// threshold, until it is back under the warning threshold; nil when it
// takes them.
func (s *Storage) ReadOnly() error {
	if err := s.failure(); err != nil {
		return err
	}
	return s.diskFull()
}

// CheckDisks looks at the disks' usage now, as the background check does
// every DiskCheckInterval, and returns why adds are refused for lack of
// space (wrapping ErrReadOnly), or nil.
func (s *Storage) CheckDisks() error {
	s.opMu.RLock()
	closed := s.closed
	s.opMu.RUnlock()
	if closed {
		return ErrClosed
	}
	// Not under opMu: the statfs calls would hold up Close, and the check
	// touches only the file system and diskMu, as the loop's does.
	s.checkDisks()
	return s.diskFull()
}
