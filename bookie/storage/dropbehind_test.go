package storage

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// The bookkeeping: only what is more than keep bytes behind is dropped,
// oldest first, in 2 MiB-aligned ranges that follow on from each other,
// and a finished log is dropped to its end and its handle closed.
func TestDropBehindSpans(t *testing.T) {
	const mib = 1 << 20
	fs := vfs.NewMem()
	for _, name := range []string{"/a", "/b"} {
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	type call struct {
		file   string
		off, n int64
	}
	var calls []call
	record := func(f vfs.File, off, n int64) {
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call{fi.Name(), off, n})
	}
	d := newDropBehind(fs, 3*mib, nil)
	d.advise = record
	d.written(1, "/a", 2*mib)
	d.written(1, "/a", 2*mib) // nothing new
	if d.bytes != 2*mib || len(d.spans) != 1 || d.spans[0] != (dropSpan{1, "/a", 0, 2 * mib}) || len(calls) != 0 {
		t.Fatalf("under keep: bytes %d, spans %v, drops %v; want 2 MiB, one span [0, 2 MiB), none", d.bytes, d.spans, calls)
	}
	d.written(1, "/a", 5*mib+mib/2) // 2.5 MiB over keep: [0, 2 MiB) goes
	d.written(1, "/a", 6*mib)       // up to 3 MiB: nothing aligned to drop
	d.written(2, "/b", mib)         // the next log: log 1 up to 4 MiB
	if d.bytes != 3*mib || len(d.spans) != 2 || d.spans[0] != (dropSpan{1, "/a", 4 * mib, 6 * mib}) {
		t.Fatalf("after log 2 started: bytes %d, spans %v; want 3 MiB, log 1 [4 MiB, 6 MiB) first", d.bytes, d.spans)
	}
	d.written(2, "/b", 4*mib) // all of log 1 goes, and log 2 up to 1 MiB (nothing aligned)
	if d.bytes != 3*mib || len(d.spans) != 1 || d.spans[0] != (dropSpan{2, "/b", mib, 4 * mib}) {
		t.Fatalf("after log 1 went: bytes %d, spans %v; want 3 MiB, log 2 [1 MiB, 4 MiB)", d.bytes, d.spans)
	}
	want := []call{{"a", 0, 2 * mib}, {"a", 2 * mib, 2 * mib}, {"a", 4 * mib, 0}}
	if !slices.Equal(calls, want) {
		t.Fatalf("dropped %v, want %v", calls, want)
	}
	if _, ok := d.files[1]; ok {
		t.Fatal("log 1's handle is still open after all of it was dropped")
	}
	if _, ok := d.ends[1]; ok {
		t.Fatal("log 1 is still tracked after all of it was dropped")
	}
	d.close()
	if len(d.files) != 0 {
		t.Fatalf("%d handles open after close", len(d.files))
	}

	// A log that cannot be opened (removed meanwhile) is passed over.
	calls = nil
	d = newDropBehind(fs, 2*mib, nil)
	d.advise = record
	d.written(7, "/gone", 3*mib)
	d.written(8, "/a", 5*mib)
	if d.bytes != 2*mib || len(d.spans) != 1 || d.spans[0] != (dropSpan{8, "/a", 3 * mib, 5 * mib}) || d.files[7] != nil {
		t.Fatalf("past a missing log: bytes %d, spans %v, its handle %v; want 2 MiB, log 8 [3 MiB, 5 MiB), none", d.bytes, d.spans, d.files[7])
	}
	if want := []call{{"a", 0, 2 * mib}}; !slices.Equal(calls, want) {
		t.Fatalf("dropped %v, want %v", calls, want)
	}
	d.close()
	if len(d.files) != 0 {
		t.Fatalf("%d handles open after close", len(d.files))
	}
}

// With EntryLogPageCacheKeep, the older part of an entry log written
// through the storage leaves the page cache and the newest part stays;
// every entry still reads back, the dropped ones with O_DIRECT.
func TestEntryLogPageCacheKeep(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatalf("posix_fadvise page dropping is only built on Linux; this is %s", runtime.GOOS)
	}
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Fatalf("%s is on tmpfs, whose pages cannot be dropped; set TMPDIR to a directory on a disk", dir)
	}
	const keep = 4 << 20
	opts := Options{Dir: dir, CheckpointInterval: -1, GCInterval: -1, Logger: discardLogger, EntryLogPageCacheKeep: keep}
	s := openT(t, opts)
	defer closeT(t, s)
	const size, n = 16 << 10, 2048 // 32 MiB
	for i := range int64(n) {
		mustAdd(t, s, 1, i, i-1, size)
	}
	logs, err := filepath.Glob(filepath.Join(dir, "entrylogs", "*"+logSuffix))
	if err != nil || len(logs) != 1 {
		t.Fatalf("entry logs %v (%v), want one", logs, err)
	}
	// The applier writes and asks writeback behind the adds: wait until
	// the first half is out of the page cache.
	deadline := time.Now().Add(waitTimeout)
	var old, recent float64
	for {
		old, recent = residency(t, logs[0], 0, 16<<20), residency(t, logs[0], 32<<20-keep/2, keep/4)
		if old < 0.05 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if old >= 0.05 {
		for mb := int64(0); mb < 32; mb++ {
			t.Logf("MiB %d: %.2f", mb, residency(t, logs[0], mb<<20, 1<<20))
		}
		t.Fatalf("%.0f%% of the log's first 16 MiB still cached, with only the newest %d bytes to be kept", 100*old, keep)
	}
	if recent < 0.95 {
		t.Fatalf("%.0f%% of the newest bytes cached, want them all", 100*recent)
	}
	// Every entry reads back; the dropped ones from the disk, in chunks,
	// leaving the page cache as it was.
	for i := range int64(n) {
		checkEntry(t, s, 1, i, size)
	}
	s.logs.disk.mu.Lock()
	reads, off := s.logs.disk.reads, s.logs.disk.off
	s.logs.disk.mu.Unlock()
	if off || reads < 16 {
		t.Fatalf("%d chunks read from the disk (disk reads off: %t), want at least 16 (16 MiB dropped)", reads, off)
	}
	if again := residency(t, logs[0], 0, 16<<20); again >= 0.05 {
		t.Fatalf("%.0f%% of the log's first 16 MiB cached after reading it back, want it read from the disk", 100*again)
	}
}

// Off by default, and refused when too small to drop only written-back
// pages.
func TestEntryLogPageCacheKeepOption(t *testing.T) {
	o, err := Options{Dir: "/x"}.withDefaults()
	if err != nil || o.EntryLogPageCacheKeep != 0 {
		t.Fatalf("default: keep %d, %v; want 0 (off)", o.EntryLogPageCacheKeep, err)
	}
	for _, keep := range []int64{-1, 1, MinEntryLogPageCacheKeep - 1} {
		if _, err := (Options{Dir: "/x", EntryLogPageCacheKeep: keep}).withDefaults(); err == nil {
			t.Errorf("keep %d accepted", keep)
		}
	}
	if _, err := (Options{Dir: "/x", EntryLogPageCacheKeep: MinEntryLogPageCacheKeep}).withDefaults(); err != nil {
		t.Errorf("keep %d refused: %v", MinEntryLogPageCacheKeep, err)
	}
}

// residency is the fraction of the pages of [off, off+n) of the file at
// path in the page cache (mincore of a mapping).
func residency(t *testing.T, path string, off, n int64) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s [%d, +%d): %v", path, off, n, err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (n+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return float64(in) / float64(len(vec))
}
