package storage

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/magnetar-io/magnetar/bookie/journal"
)

// failing wraps fs so that operations of the given kinds on paths
// containing dir fail with errorfs.ErrInjected while the toggle is on.
func failing(fs vfs.FS, dir string, on *atomic.Bool, kinds ...errorfs.OpKind) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !on.Load() || !strings.Contains(op.Path, dir) {
			return nil
		}
		for _, k := range kinds {
			if op.Kind == k {
				return errorfs.ErrInjected
			}
		}
		return nil
	}))
}

func TestJournalSyncFailure(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var on atomic.Bool
	opts := testOptions(failing(mem, "/journal/", &on, errorfs.OpFileSync, errorfs.OpFileSyncData))
	s := openT(t, opts)
	mustAdd(t, s, 1, 0, -1, 100)

	on.Store(true)
	err := add(t, s, mkEntry(1, 1, 0, 100))
	wantErr(t, err, journal.ErrFailed, "add when the journal fsync fails")
	wantErr(t, err, errorfs.ErrInjected, "add when the journal fsync fails")
	on.Store(false)
	// The journal cannot be trusted any more (an fsync error may have
	// dropped pages): everything after is refused.
	wantErr(t, add(t, s, mkEntry(1, 2, 0, 100)), ErrReadOnly, "add after the journal failed")
	wantErr(t, fence(t, s, 1).err, ErrReadOnly, "fence after the journal failed")
	checkEntry(t, s, 1, 0, 100)
	if err := s.Close(); err == nil {
		t.Fatal("Close of a failed storage: no error")
	}

	// A restart on a healthy disk has the acknowledged entry.
	s, _ = crashOpen(t, nil, mem, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	checkEntry(t, s, 1, 0, 100)
	mustAdd(t, s, 1, 1, 0, 100)
}

// An entry-log write failure after the journal made the record durable:
// the add is acknowledged (adds are acknowledged once journaled), the
// failure makes the storage read-only, and the entry, which the applier
// could not make readable, is read as ErrReadOnly until a restart applies
// it from the journal.
func TestEntryLogWriteFailure(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var on atomic.Bool
	opts := testOptions(failing(mem, "/entrylogs/", &on, errorfs.OpFileWrite))
	opts.WriteBufferSize = 256 // every add reaches the file
	s := openT(t, opts)
	for e := int64(0); e < 10; e++ {
		mustAdd(t, s, 1, e, e-1, 300)
	}
	on.Store(true)
	if err := add(t, s, mkEntry(1, 10, 9, 300)); err != nil {
		t.Fatalf("add when the entry-log write fails (journaled): %v", err)
	}
	wantErr(t, awaitFailure(t, s), errorfs.ErrInjected, "the storage's failure after the entry-log write failed")
	on.Store(false)
	wantErr(t, add(t, s, mkEntry(1, 11, 9, 300)), ErrReadOnly, "add after the failure")
	wantErr(t, add(t, s, mkEntry(2, 0, -1, 300)), ErrReadOnly, "add to another ledger after the failure")
	wantErr(t, del(t, s, 1), ErrReadOnly, "delete after the failure")
	wantErr(t, s.Checkpoint(), ErrReadOnly, "checkpoint after the failure")
	for e := int64(0); e < 10; e++ {
		checkEntry(t, s, 1, e, 300) // reads still work
	}
	_, err := s.ReadEntry(1, 10)
	wantErr(t, err, ErrReadOnly, "read of the entry the applier could not write")
	if err := s.Close(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Close of a read-only storage: %v", err)
	}

	s, _ = crashOpen(t, nil, mem, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e := int64(0); e < 11; e++ { // 10 was journaled, so it is back too
		checkEntry(t, s, 1, e, 300)
	}
	mustAdd(t, s, 1, 11, 10, 300)
}

// An entry-log fsync failure during a checkpoint: the checkpoint fails and
// does not cover anything, the storage goes read-only.
func TestEntryLogSyncFailure(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var on atomic.Bool
	opts := testOptions(failing(mem, "/entrylogs/", &on, errorfs.OpFileSync, errorfs.OpFileSyncData))
	s := openT(t, opts)
	for e := int64(0); e < 10; e++ {
		mustAdd(t, s, 1, e, e-1, 300)
	}
	on.Store(true)
	wantErr(t, s.Checkpoint(), errorfs.ErrInjected, "checkpoint when the entry-log fsync fails")
	on.Store(false)
	wantErr(t, add(t, s, mkEntry(1, 10, 9, 300)), ErrReadOnly, "add after the failed checkpoint")
	s, _ = crashOpen(t, s, mem, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for e := int64(0); e < 10; e++ {
		checkEntry(t, s, 1, e, 300)
	}
}

// The applier asks the kernel to write entry-log pages back as the log
// grows (SyncTo), so that they do not pile up for the checkpoint. That is a
// hint, not durability; but its failure is a write failure like any other.
func TestEntryLogWritebackFailure(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var syncTos atomic.Int64
	var on atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpFileSyncTo || !strings.Contains(op.Path, "/entrylogs/") {
			return nil
		}
		syncTos.Add(1)
		if on.Load() {
			return errorfs.ErrInjected
		}
		return nil
	}))
	opts := testOptions(fs)
	opts.WriteBufferSize = 64 << 10
	s := openT(t, opts)
	const size = 16 << 10
	perHint := int64(writebackBytes/size + 1)
	for e := int64(0); e < 3*perHint; e++ {
		mustAdd(t, s, 1, e, e-1, size)
	}
	if n := syncTos.Load(); n < 2 {
		t.Fatalf("%d writeback requests after %d bytes, want at least 2", n, 3*perHint*size)
	}

	on.Store(true)
	var err error
	e := 3 * perHint
	for ; e < 6*perHint; e++ {
		if err = add(t, s, mkEntry(1, e, e-1, size)); err != nil {
			break
		}
	}
	wantErr(t, err, ErrReadOnly, "add after the writeback request failed")
	wantErr(t, err, errorfs.ErrInjected, "add after the writeback request failed")
	on.Store(false)
	for i := int64(0); i < 3*perHint; i++ { // applied before the failure: readable
		checkEntry(t, s, 1, i, size)
	}
	// Acknowledged once journaled: applied before the failure, or read as
	// ErrReadOnly until a restart applies them.
	for i := 3 * perHint; i < e; i++ {
		if _, err := s.ReadEntry(1, i); err != nil {
			wantErr(t, err, ErrReadOnly, fmt.Sprintf("read of entry %d after the failure", i))
		}
	}

	s, _ = crashOpen(t, s, mem, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for i := int64(0); i < e; i++ {
		checkEntry(t, s, 1, i, size)
	}
	mustAdd(t, s, 1, e, e-1, size)
}
