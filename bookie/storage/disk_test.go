package storage

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// setUsage makes fs report its disk as used thousandths of 1000 bytes
// full.
func setUsage(fs *vfs.MemFS, used uint64) {
	fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 1000, UsedBytes: used, AvailBytes: 1000 - used})
}

// TestDiskUsageThreshold: above the threshold adds are refused as
// read-only, saying how full the disk is, but for the recovery adds of a
// ledger fenced here; reads, fences and deletes go on; adds are taken
// again only under the warning threshold, and the storage never fails.
func TestDiskUsageThreshold(t *testing.T) {
	fs := vfs.NewMem()
	setUsage(fs, 500)
	s := openT(t, testOptions(fs))
	defer closeT(t, s)
	mustAdd(t, s, 1, 0, -1, 100)
	mustAdd(t, s, 2, 0, -1, 100)

	setUsage(fs, 920) // above the warning threshold only
	if err := s.CheckDisks(); err != nil {
		t.Fatalf("at 92 %%: %v", err)
	}
	mustAdd(t, s, 1, 1, 0, 100)

	setUsage(fs, 960)
	const want = "the disk of /bookie is 96.0% full, above the disk-usage threshold of 95.0%"
	if err := s.CheckDisks(); !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), want) {
		t.Fatalf("at 96 %%: CheckDisks %v, want ErrReadOnly and %q", err, want)
	}
	if err := add(t, s, mkEntry(1, 2, 1, 100)); !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), want) {
		t.Errorf("add at 96 %%: %v, want ErrReadOnly and %q", err, want)
	}
	ch := make(chan error, 1)
	s.AddEntry(mkEntry(1, 2, 1, 100), true, func(err error) { ch <- err })
	if err := await(t, ch, "recovery add"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("recovery add at 96 %%: %v, want ErrReadOnly", err)
	}
	checkEntry(t, s, 1, 1, 100)
	if r := fence(t, s, 1); r.err != nil || r.last != 1 {
		t.Errorf("fence at 96 %%: %+v, want last entry 1", r)
	}
	// Closing a ledger fenced here writes its tail again: taken.
	s.AddEntry(mkEntry(1, 2, 1, 100), true, func(err error) { ch <- err })
	if err := await(t, ch, "recovery add to a fenced ledger"); err != nil {
		t.Errorf("recovery add to ledger 1, fenced here, at 96 %%: %v", err)
	}
	if err := del(t, s, 2); err != nil {
		t.Errorf("delete at 96 %%: %v", err)
	}

	setUsage(fs, 930) // under the threshold, above the low-water mark
	if err := s.CheckDisks(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("back at 93 %%: %v, want adds still refused", err)
	}
	setUsage(fs, 890)
	if err := s.CheckDisks(); err != nil {
		t.Errorf("back at 89 %%: %v", err)
	}
	mustAdd(t, s, 3, 0, -1, 100)
	if err := s.failure(); err != nil {
		t.Errorf("the storage failed: %v", err)
	}
}

// TestDiskUsageCheckedInBackground: a storage opened on a full disk
// refuses adds from the first, and the background check lets them in
// once space is freed.
func TestDiskUsageCheckedInBackground(t *testing.T) {
	fs := vfs.NewMem()
	setUsage(fs, 990)
	opts := testOptions(fs)
	opts.DiskCheckInterval = 5 * time.Millisecond
	s := openT(t, opts)
	defer closeT(t, s)
	if err := add(t, s, mkEntry(1, 0, -1, 100)); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("add on a 99 %% full disk: %v, want ErrReadOnly", err)
	}
	setUsage(fs, 100)
	deadline := time.Now().Add(waitTimeout)
	for add(t, s, mkEntry(1, 0, -1, 100)) != nil {
		if time.Now().After(deadline) {
			t.Fatal("adds still refused with the disk at 10 %")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDiskUsageOptions(t *testing.T) {
	for _, tc := range []struct {
		threshold, warn float64
		want            string
	}{
		{1.2, 0, "DiskUsageThreshold 1.2"},
		{-0.5, 0, "DiskUsageThreshold -0.5"},
		{0.8, 0.85, "DiskUsageWarnThreshold 0.85"},
	} {
		o := testOptions(vfs.NewMem())
		o.DiskUsageThreshold, o.DiskUsageWarnThreshold = tc.threshold, tc.warn
		if _, err := o.withDefaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("threshold %g, warn %g: %v, want %q", tc.threshold, tc.warn, err, tc.want)
		}
	}
	o, err := testOptions(vfs.NewMem()).withDefaults()
	if err != nil || o.DiskUsageThreshold != 0.95 || o.DiskUsageWarnThreshold != 0.90 {
		t.Errorf("defaults %g and %g (%v), want 0.95 and 0.90", o.DiskUsageThreshold, o.DiskUsageWarnThreshold, err)
	}
	o = testOptions(vfs.NewMem())
	o.DiskUsageThreshold = 0.8
	if o, err = o.withDefaults(); err != nil || o.DiskUsageWarnThreshold != 0.8 {
		t.Errorf("warn threshold under a threshold of 0.8: %g (%v), want 0.8", o.DiskUsageWarnThreshold, err)
	}
}

// TestGCCompactionWhileDiskFull: above the threshold GC removes the logs
// with nothing live, and compacts only logs whose live entries fit in a
// quarter of the room left: none on a disk with 40 bytes left, all on
// one with 40 MB left (still 96 % full).
func TestGCCompactionWhileDiskFull(t *testing.T) {
	fs := vfs.NewCrashableMem()
	setUsage(fs, 500)
	s := openT(t, gcOptions(fs))
	defer closeT(t, s)
	const size = 1000
	_, nb := fillAB(t, s, size)
	if err := s.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	logDir := fs.PathJoin(memDir, "entrylogs")
	before, logsBefore := dirSize(t, fs, logDir, logSuffix)
	if err := del(t, s, 1); err != nil {
		t.Fatal(err)
	}
	setUsage(fs, 960)
	if err := s.CheckDisks(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("at 96 %%: %v", err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	full, logsFull := dirSize(t, fs, logDir, logSuffix)
	// Ledger A alone filled the first logs: they are dead. The mixed
	// ones are three quarters dead: compactable, but left.
	if logsFull >= logsBefore || full < before/2 {
		t.Fatalf("GC on a full disk: %d bytes in %d logs before, %d in %d after; want the dead logs removed and no compaction",
			before, logsBefore, full, logsFull)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 1 << 30, UsedBytes: 96 << 30 / 100, AvailBytes: 4 << 30 / 100})
	if err := s.CheckDisks(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("at 96 %% of 1 GiB: %v", err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	after, logsAfter := dirSize(t, fs, logDir, logSuffix)
	if after > full/2 {
		t.Fatalf("GC with 40 MB left: %d bytes in %d logs, then %d in %d; want the mixed logs compacted", full, logsFull, after, logsAfter)
	}
	for e := int64(0); e < nb; e++ {
		checkEntry(t, s, 2, e, size)
	}
}

// TestDiskUsageUnreadable: a disk whose usage cannot be read does not
// make a full disk writable again, however empty the other looks.
func TestDiskUsageUnreadable(t *testing.T) {
	mem := vfs.NewMem()
	unreadable := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpGetDiskUsage && op.Path == memDir {
			return errors.New("statfs: input/output error")
		}
		return nil
	})}
	opts := testOptions(errorfs.Wrap(mem, unreadable))
	opts.JournalDir = "/journal"
	s := openT(t, opts)
	defer closeT(t, s)
	setUsage(mem, 960)
	if err := s.CheckDisks(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("at 96 %%: %v", err)
	}
	unreadable.On()
	setUsage(mem, 100) // what the journal's disk says; the data disk's is unknown
	if err := s.CheckDisks(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("with the data disk unreadable: %v, want adds still refused", err)
	}
	unreadable.Off()
	if err := s.CheckDisks(); err != nil {
		t.Errorf("with both disks at 10 %%: %v", err)
	}
}
