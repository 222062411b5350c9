package journal

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestRotationAndRelease(t *testing.T) {
	mem := vfs.NewCrashableMem()
	// 10 records of 109 bytes pass 1000 bytes: each file holds 10 records.
	opts := Options{FS: mem, Dir: memDir, MaxFileSize: 1000, Logger: discardLogger}
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
