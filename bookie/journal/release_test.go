package journal

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

func TestRotationAndRelease(t *testing.T) {
	mem := vfs.NewCrashableMem()
	// A header and 10 records of 109 bytes pass 1010 bytes: each file holds
	// 10 records.
	opts := Options{FS: mem, Dir: memDir, MaxFileSize: 1010, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})
	var acked []rec
	for i := range 60 {
		body := testBody(0, i, 100)
		r := appendWait(t, j, 1, body)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		acked = append(acked, rec{r.End, 1, body})
	}
	files := func() []uint64 { return journalFiles(t, mem, memDir) }
	// Rotation follows the last group's callbacks.
	waitWriterIdle(t, j)
	// Files 1-6 full; file 7 started after the 60th record filled file 6.
	if got, want := files(), []uint64{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	for i, r := range acked {
		if want := uint64(1 + i/10); r.End.File != want {
			t.Fatalf("record %d in file %d, want %d", i, r.End.File, want)
		}
	}

	release := func(pos Position, want []uint64) {
		t.Helper()
		if err := j.Release(pos); err != nil {
			t.Fatalf("Release(%v): %v", pos, err)
		}
		if got := files(); !slices.Equal(got, want) {
			t.Fatalf("after Release(%v): files %v, want %v", pos, got, want)
		}
		// Deletions are durable: a crash now sees the same files.
		if got := journalFiles(t, mem.CrashClone(vfs.CrashCloneCfg{}), memDir); !slices.Equal(got, want) {
			t.Fatalf("after Release(%v) and a crash: files %v, want %v", pos, got, want)
		}
	}
	release(Position{}, []uint64{1, 2, 3, 4, 5, 6, 7})
	release(acked[4].End, []uint64{1, 2, 3, 4, 5, 6, 7}) // inside file 1
	release(acked[24].End, []uint64{3, 4, 5, 6, 7})      // inside file 3
	release(acked[29].End, []uint64{4, 5, 6, 7})         // the end of file 3
	release(Position{File: 4, Offset: 8}, []uint64{4, 5, 6, 7})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	// Replay from a released position, and from one inside a kept file.
	j, got := openT(t, opts, acked[29].End)
	checkRecs(t, got, acked[30:])
	j.Close()
	j, got = openT(t, opts, acked[44].End)
	checkRecs(t, got, acked[45:])
	// Files 8 and 9 came from the two Opens; the current file stays.
	release(Position{File: 1 << 40}, []uint64{9})
	if r := appendWait(t, j, 1, []byte("still works")); r.Err != nil || r.End.File != 9 {
		t.Fatalf("append after releasing everything: %v at %v", r.Err, r.End)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// Release after Close still deletes covered files.
	j, _ = openT(t, opts, Position{})
	j.Close()
	release(Position{File: 10, Offset: 8}, []uint64{10})
}

// freeFiles lists the numbers of the free files in dir, ascending.
func freeFiles(t testing.TB, dir string) []uint64 {
	t.Helper()
	return numbersOf(t, vfs.Default, dir, parseFreeName)
}

func inode(t testing.TB, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// Released files are kept for reuse (RecycledFiles of them; the others are
// deleted in the background), a new file reuses one, and neither a clean
// restart nor a crash replays anything of a reused file's old records.
func TestReuseOfReleasedFiles(t *testing.T) {
	// Deletions go in steps, here of a quarter of a file.
	defer func(g fsutil.Gradual) { freeDeletion = g }(freeDeletion)
	freeDeletion = fsutil.Gradual{Step: 256}
	dir := t.TempDir() + "/journal"
	logger, lb := newLogger()
	// Files of about 1 KiB: no zeros written ahead of their records, and
	// no direct writes, whose padding to a block would write zeros over a
	// reused file's old records right after the new ones.
	opts := Options{Dir: dir, MaxFileSize: 1010, Logger: logger, ZeroAhead: -1, BufferedIO: true, RecycledFiles: 2}
	j, _ := openT(t, opts, Position{})
	var acked []rec
	add := func(n, size int) {
		t.Helper()
		for i := range n {
			body := testBody(len(acked), i, size)
			r := appendWait(t, j, 1, body)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			acked = append(acked, rec{r.End, 1, body})
		}
		waitWriterIdle(t, j)
	}
	add(60, 100) // files 1-6 full, file 7 current
	if err := j.Release(acked[39].End); err != nil {
		t.Fatal(err)
	}
	if got, want := journalFiles(t, vfs.Default, dir), []uint64{5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	// Four released; the trimmer deletes the two oldest.
	waitUntil(t, "two free files are left", func() bool { return slices.Equal(freeFiles(t, dir), []uint64{3, 4}) })
	reused := inode(t, filepath.Join(dir, freeName(4)))

	// Records of another size, so that the old records after the new ones
	// do not line up with them.
	add(14, 70) // fills file 7 (13 records), then file 8 reuses free file 4
	if got := inode(t, filepath.Join(dir, fileName(8))); got != reused {
		t.Fatalf("file 8 is inode %d, want %d (free file 4 reused)", got, reused)
	}
	if got, want := freeFiles(t, dir), []uint64{3}; !slices.Equal(got, want) {
		t.Fatalf("free files %v, want %v", got, want)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	checkQuiet(t, lb)

	// A clean restart reads file 8 up to its end: no old records, no
	// warnings.
	j, got := openT(t, opts, acked[39].End)
	checkRecs(t, got, acked[40:])
	checkQuiet(t, lb)
	add(5, 30) // into file 9, a reuse of free file 3
	if got, want := freeFiles(t, dir), []uint64(nil); !slices.Equal(got, want) {
		t.Fatalf("free files %v, want %v", got, want)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash leaves file 9 unfinished: its old records (of file 3) follow
	// the new ones and are cut as a torn tail, never replayed.
	path := filepath.Join(dir, fileName(9))
	data := readFile(t, vfs.Default, path)
	clear(data[endOffset:headerSizeV2])
	writeFile(t, vfs.Default, path, data)
	j, got = openT(t, opts, acked[39].End)
	defer j.Close()
	checkRecs(t, got, acked[40:])
	checkLogged(t, lb, "WARN", path, acked[len(acked)-1].End.Offset)
}
