package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/journal"
)

// Defaults for Options fields left zero.
const (
	DefaultEntryLogMaxSize    = 1 << 30
	DefaultCheckpointInterval = 10 * time.Second
	DefaultGCInterval         = 60 * time.Second
	DefaultGCMinLiveRatio     = 0.5
	DefaultWriteBufferSize    = 1 << 20

	DefaultDiskUsageThreshold     = 0.95
	DefaultDiskUsageWarnThreshold = 0.90
	DefaultDiskCheckInterval      = 10 * time.Second
)

// MinEntryLogPageCacheKeep is the least Options.EntryLogPageCacheKeep
// (above 0): pages are dropped a few writeback requests (writebackBytes)
// behind the writer, once written back and clean.
const MinEntryLogPageCacheKeep = 4 * writebackBytes

// Options configure Open. Zero values take the defaults documented per field.
type Options struct {
	// FS is the filesystem for everything (journal, entry logs, index).
	// Default vfs.Default.
	FS vfs.FS
	// Dir holds the entry logs (<Dir>/entrylogs) and the index
	// (<Dir>/index). Required.
	Dir string
	// JournalDir holds the journal; default <Dir>/journal. It may be on
	// another disk.
	JournalDir string
	// Journal carries the group-commit settings. Its FS, Dir, NoSync and
	// Logger are filled in from these Options.
	Journal journal.Options
	// NoSync skips every fsync (journal, entry logs, index). For throughput
	// tests only: nothing survives a power loss.
	NoSync bool
	// EntryLogMaxSize: an entry log is finished and a new one started once
	// it grows past this size. Default 1 GiB.
	EntryLogMaxSize int64
	// EntryLogPageCacheKeep > 0 keeps only the newest this many bytes
	// written to entry logs in the page cache: older written pages are
	// dropped (posix_fadvise DONTNEED, on Linux) once written back, so the
	// page cache is recycled instead of growing with every byte written.
	// Reads of older entries then go to the disk, with O_DIRECT into the
	// storage's own buffers (diskread.go). Default 0: the page cache is
	// left to the kernel. At least MinEntryLogPageCacheKeep.
	EntryLogPageCacheKeep int64
	// EntryLogDirectIO writes the entry logs with O_DIRECT where the file
	// system allows it (directwrite.go), and reads the blocks a direct
	// write finished with by O_DIRECT too (diskread.go);
	// EntryLogPageCacheKeep does not apply. False here (the zero Options):
	// written and read through the page cache. The bookie and standalone
	// commands turn it on by default (entry-log-direct-io, design note 0010).
	EntryLogDirectIO bool
	// WriteBufferSize is the entry-log write buffer; appends reach the file
	// when it fills. Default 1 MiB.
	WriteBufferSize int
	// CheckpointInterval between background checkpoints. 0 uses the
	// default (10 s); negative disables the loop (call Checkpoint).
	CheckpointInterval time.Duration
	// GCInterval between background garbage collections. 0 uses the
	// default (60 s); negative disables the loop (call GC).
	GCInterval time.Duration
	// GCMinLiveRatio: a finished entry log whose live bytes fall under this
	// fraction of its entry bytes is compacted. 0 uses the default (0.5);
	// negative disables compaction (logs with no live bytes are still
	// deleted). At most 1.
	GCMinLiveRatio float64
	// DiskUsageThreshold: above this share of a directory's file system
	// used, adds are refused (ErrReadOnly) until the usage is back at or
	// below DiskUsageWarnThreshold (disk.go). 0 uses the default (0.95);
	// 1 never refuses.
	DiskUsageThreshold float64
	// DiskUsageWarnThreshold: above it a warning is logged; it is also the
	// low-water mark under which a full disk takes adds again. 0 uses the
	// default (0.90); at most DiskUsageThreshold.
	DiskUsageWarnThreshold float64
	// DiskCheckInterval between disk usage checks. 0 uses the default
	// (10 s); negative disables the loop (call CheckDisks).
	DiskCheckInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// withDefaults validates o and returns a copy with defaults filled in.
func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("storage: Options.Dir is required")
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.NoSync {
		o.FS = noSyncFS{o.FS}
	}
	if o.JournalDir == "" {
		o.JournalDir = o.FS.PathJoin(o.Dir, "journal")
	}
	if o.EntryLogMaxSize == 0 {
		o.EntryLogMaxSize = DefaultEntryLogMaxSize
	}
	if o.EntryLogMaxSize <= logHeaderSize {
		return o, errors.New("storage: Options.EntryLogMaxSize too small")
	}
	if o.EntryLogPageCacheKeep < 0 || o.EntryLogPageCacheKeep > 0 && o.EntryLogPageCacheKeep < MinEntryLogPageCacheKeep {
		return o, fmt.Errorf("storage: Options.EntryLogPageCacheKeep %d: 0 (off) or at least %d", o.EntryLogPageCacheKeep, MinEntryLogPageCacheKeep)
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = DefaultWriteBufferSize
	}
	if o.WriteBufferSize < 0 {
		return o, errors.New("storage: Options.WriteBufferSize negative")
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.GCInterval == 0 {
		o.GCInterval = DefaultGCInterval
	}
	if o.GCMinLiveRatio == 0 {
		o.GCMinLiveRatio = DefaultGCMinLiveRatio
	}
	if o.GCMinLiveRatio > 1 {
		return o, errors.New("storage: Options.GCMinLiveRatio above 1")
	}
	if o.DiskUsageThreshold == 0 {
		o.DiskUsageThreshold = DefaultDiskUsageThreshold
	}
	if o.DiskUsageWarnThreshold == 0 {
		o.DiskUsageWarnThreshold = min(DefaultDiskUsageWarnThreshold, o.DiskUsageThreshold)
	}
	if !(o.DiskUsageThreshold > 0 && o.DiskUsageThreshold <= 1) { // NaN too
		return o, fmt.Errorf("storage: Options.DiskUsageThreshold %g: want a share of the disk, above 0 and at most 1", o.DiskUsageThreshold)
	}
	if !(o.DiskUsageWarnThreshold > 0 && o.DiskUsageWarnThreshold <= o.DiskUsageThreshold) {
		return o, fmt.Errorf("storage: Options.DiskUsageWarnThreshold %g: want a share of the disk, above 0 and at most DiskUsageThreshold (%g)",
			o.DiskUsageWarnThreshold, o.DiskUsageThreshold)
	}
	if o.DiskCheckInterval == 0 {
		o.DiskCheckInterval = DefaultDiskCheckInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Journal.FS = o.FS
	o.Journal.Dir = o.JournalDir
	o.Journal.NoSync = o.NoSync
	o.Journal.Logger = o.Logger
	return o, nil
}
