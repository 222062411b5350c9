package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// directDir is a directory on a file system that allows O_DIRECT: one
// under this package's directory, in the checkout (the system temp
// directory may be tmpfs, which does not).
func directDir(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Fatalf("direct I/O is used on Linux only; this test needs Linux, not %s", runtime.GOOS)
	}
	dir, err := os.MkdirTemp(".", ".direct-test-")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(abs) })
	return filepath.Join(abs, "journal")
}

// Records written with O_DIRECT — groups of every size, records across
// block boundaries, files rotated — replay exactly after a close, and after
// a crash (the directory copied while the journal is open: the current
// file ends with a group's padding, which is cut as a torn tail at the end
// of the last record). BufferedIO writes without padding.
func TestDirectIO(t *testing.T) {
	dir := directDir(t)
	opts := Options{Dir: dir, MaxFileSize: 1 << 20, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})
	if j.w.direct == nil {
		t.Fatalf("the journal in %s writes through the page cache: O_DIRECT was refused there", dir)
	}

	var acked []rec
	var mu sync.Mutex
	// Groups of at least directMinGroup bytes are written with O_DIRECT,
	// smaller ones through the page cache, in the same files.
	sizes := []int{8, 4096 - 9, 4096, 4097, 20 << 10, 100, 3000, directMinGroup + 1000, 9, 5000, 64 << 10}

	for round := range 30 {
		// Several appends at once make groups of several records.
		var wg sync.WaitGroup
		res := make([]rec, 4)
		for k := range res {
			wg.Add(1)
			body := testBody(k, round, sizes[(round*4+k)%len(sizes)]+k)
			typ := testType(k, round)
			j.Append(typ, body, func(end Position, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("append: %v", err)
				}
				res[k] = rec{end, typ, body}
			})
		}
		wg.Wait()
		mu.Lock()
		for _, r := range res {
			acked = append(acked, r)
		}
		mu.Unlock()
	}
	// Then one more record, until one lands without rotating after it: the
	// crash below finds the current file holding records.
	var last result
	for i := 0; last.End.Offset == 0 || last.End.Offset > opts.MaxFileSize; i++ {
		body := testBody(9, i, 1000)
		last = appendWait(t, j, 1, body)
		if last.Err != nil {
			t.Fatal(last.Err)
		}
		acked = append(acked, rec{last.End, 1, body})
	}
	sortRecs(acked)
	if direct, all := j.directGroups.Load(), j.groups.Load(); direct == 0 || direct == all {
		t.Errorf("%d of %d groups written with O_DIRECT: want both kinds", direct, all)
	}
	files := journalFiles(t, vfs.Default, dir)
	if len(files) < 3 {
		t.Fatalf("%d journal files, want rotations (at least 3)", len(files))
	}
	cur := filepath.Join(dir, fileName(last.End.File))
	if size := fileSize(t, vfs.Default, cur); size%directAlign != 0 || size < last.End.Offset {
		t.Errorf("current file is %d bytes for %d written: want the direct writes' padding to a multiple of %d", size, last.End.Offset, directAlign)
	}

	// After the last record: the padding of its block, then the zeros
	// written ahead.
	j = checkCrashAndClose(t, j, opts, acked, last.End)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	// BufferedIO: no padding (and here no zeros written ahead).
	bdir := filepath.Join(filepath.Dir(dir), "buffered")
	b, _ := openT(t, Options{Dir: bdir, Logger: discardLogger, BufferedIO: true, ZeroAhead: -1}, Position{})
	if b.w.direct != nil {
		t.Fatal("BufferedIO journal writes with O_DIRECT")
	}
	r := appendWait(t, b, 1, testBody(0, 0, 100))
	if size := fileSize(t, vfs.Default, filepath.Join(bdir, fileName(r.End.File))); r.Err != nil || size != r.End.Offset {
		t.Errorf("buffered file is %d bytes, its record ends at %d (%v)", size, r.End.Offset, r.Err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkCrashAndClose checks that every acked record of the open journal j
// (last the end of the last) replays from a copy of its files (a crash),
// whose zeros after the last record are logged at info as the end of the
// records and nothing is logged as damage; then that they replay with no
// warning after j is closed. It returns the journal reopened.
func checkCrashAndClose(t *testing.T, j *Journal, opts Options, acked []rec, last Position) *Journal {
	t.Helper()
	crashDir := filepath.Join(filepath.Dir(opts.Dir), "crashed")
	copyDir(t, opts.Dir, crashDir)
	log, lb := newLogger()
	crashed, got := openT(t, Options{Dir: crashDir, Logger: log, BufferedIO: true}, Position{})
	checkRecs(t, got, acked)
	checkQuiet(t, lb)
	if want := fmt.Sprintf("journal: the last file's records end where zeros begin, cutting the zeros off\" file=%s offset=%d ",
		filepath.Join(crashDir, fileName(last.File)), last.Offset); !strings.Contains(lb.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, lb)
	}
	if err := crashed.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	log, lb = newLogger()
	opts.Logger = log
	j, got = openT(t, opts, Position{})
	checkRecs(t, got, acked)
	checkQuiet(t, lb)
	return j
}

// TestAlignedBuffer: buffers start at a multiple of directAlign and are
// whole blocks, whatever size is asked.
func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{1, 4095, 4096, 4097, 1 << 20} {
		b := alignedBuffer(n)
		if len(b) < n || len(b)%directAlign != 0 || cap(b) != len(b) || addr(b)%directAlign != 0 {
			t.Errorf("alignedBuffer(%d): len %d cap %d at %#x", n, len(b), cap(b), addr(b))
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sortRecs sorts records by end position: journal order.
func sortRecs(rs []rec) {
	slices.SortFunc(rs, func(a, b rec) int {
		switch {
		case a.End.Less(b.End):
			return -1
		case b.End.Less(a.End):
			return 1
		}
		return 0
	})
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// A file system that accepts O_DIRECT at open but refuses its writes
// (EINVAL) costs one warning: the group goes through the page cache, and
// so does every later one, in this file and the next.
func TestDirectWriteRefused(t *testing.T) {
	dir := directDir(t)
	log, lb := newLogger()
	opts := Options{Dir: dir, MaxFileSize: 1 << 20, Logger: log}
	j, _ := openT(t, opts, Position{})
	if j.w.direct == nil {
		t.Fatalf("the journal in %s writes through the page cache: O_DIRECT was refused there", dir)
	}
	tries := 0
	j.w.direct.writeDirect = func([]byte, int64) error {
		tries++
		return fmt.Errorf("write: %w", syscall.EINVAL)
	}
	var acked []rec
	for i := range 12 {
		body := testBody(1, i, directMinGroup+i*1000)
		r := appendWait(t, j, 1, body)
		if r.Err != nil {
			t.Fatalf("append %d: %v", i, r.Err)
		}
		acked = append(acked, rec{r.End, 1, body})
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if tries != 1 || j.directGroups.Load() != 0 || j.w.direct != nil || acked[len(acked)-1].End.File == acked[0].End.File {
		t.Errorf("%d direct tries, %d direct groups, direct file after rotation %v, files %d..%d: want one refused try, none after, a rotation",
			tries, j.directGroups.Load(), j.w.direct != nil, acked[0].End.File, acked[len(acked)-1].End.File)
	}
	if w := lb.lines("WARN"); len(w) != 1 || !strings.Contains(w[0], "refused an O_DIRECT write") {
		t.Errorf("want one warning about the refused write:\n%s", lb)
	}
	opts.Logger = discardLogger
	j, got := openT(t, opts, Position{})
	checkRecs(t, got, acked)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}
