package journal

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// appendConcurrently appends n records of varied sizes from four
// goroutines at once, so that groups of several records form, and returns
// them acknowledged.
func appendConcurrently(t *testing.T, j *Journal, n int) []rec {
	t.Helper()
	var (
		mu    sync.Mutex
		acked []rec
		wg    sync.WaitGroup
		errs  = make(chan error, 4)
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 4 {
				body := testBody(g, i, 10+(g*977+i*131)%3000)
				r := appendWait(t, j, testType(g, i), body)
				if r.Err != nil {
					errs <- r.Err
					return
				}
				mu.Lock()
				acked = append(acked, rec{r.End, testType(g, i), body})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sortRecs(acked)
	return acked
}

// New files get zeros written ahead of their records while groups are
// small, and those zeros never land on a record: with fills of two blocks,
// fills and groups meet all the time, and every record acknowledged
// replays after a crash (the files copied while the journal is open) and
// after a close, with no warning: the zeros read as the end of the
// records. Both with O_DIRECT and through the page cache.
func TestZeroAhead(t *testing.T) {
	anyRateGetsZeros(t) // the appends here may go faster than bulkRate
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprintf("buffered=%t", buffered), func(t *testing.T) {
			dir := directDir(t)
			opts := Options{Dir: dir, ZeroAhead: 8 << 10, BufferedIO: buffered, Logger: discardLogger}
			j, _ := openT(t, opts, Position{})
			if !buffered && j.w.direct == nil {
				t.Fatalf("the journal in %s writes through the page cache: O_DIRECT was refused there", dir)
			}
			acked := appendConcurrently(t, j, 2000)
			waitWriterIdle(t, j)
			if j.zeroFills.Load() == 0 {
				t.Fatal("no zeros written ahead of the records")
			}
			last := acked[len(acked)-1].End
			path := filepath.Join(dir, fileName(last.File))
			if size := fileSize(t, vfs.Default, path); size <= last.Offset {
				t.Errorf("file is %d bytes for records ending at %d: want zeros after them", size, last.Offset)
			}

			j = checkCrashAndClose(t, j, opts, acked, last)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Groups written with O_DIRECT (directMinGroup or more) extend the file
// themselves: no zeros are written ahead of them. Without fsyncs (NoSync)
// there is nothing to gain: no filler; nor, unless asked, on file systems
// other than the operating system's.
func TestZeroAheadNotCalledFor(t *testing.T) {
	t.Run("large groups", func(t *testing.T) {
		j, _ := openT(t, Options{Dir: directDir(t), Logger: discardLogger}, Position{})
		defer j.Close()
		for i := range 8 {
			if r := appendWait(t, j, 1, testBody(0, i, directMinGroup+100)); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		if got := j.directGroups.Load(); got != 8 {
			t.Fatalf("%d groups written with O_DIRECT, want 8", got)
		}
		if got := j.zeroFills.Load(); got != 0 {
			t.Errorf("%d fills of zeros after large groups only, want 0", got)
		}
	})
	t.Run("other file systems by default", func(t *testing.T) {
		// In memory, or a wrapper (tests, storage without fsyncs): an
		// fsync there costs nothing to save, and pebble's in-memory
		// files grow a byte at a time.
		for _, fs := range []vfs.FS{vfs.NewMem(), zeroFailFS{vfs.Default}} {
			j, _ := openT(t, Options{FS: fs, Dir: t.TempDir(), Logger: discardLogger}, Position{})
			appendConcurrently(t, j, 200)
			if j.w.fill != nil || j.zeroFills.Load() != 0 {
				t.Errorf("%T: zeros written ahead by default", fs)
			}
			j.Close()
		}
	})
	t.Run("NoSync", func(t *testing.T) {
		j, _ := openT(t, Options{Dir: t.TempDir(), NoSync: true, Logger: discardLogger}, Position{})
		defer j.Close()
		appendConcurrently(t, j, 200)
		if j.w.fill != nil {
			t.Errorf("a zero filler with NoSync")
		}
	})
}

// A filler whose write fails says so once and stops; the journal goes on,
// and every record replays.
func TestZeroAheadFailure(t *testing.T) {
	dir := t.TempDir()
	log, lb := newLogger()
	opts := Options{FS: zeroFailFS{vfs.Default}, Dir: dir, ZeroAhead: 8 << 10, Logger: log}
	j, _ := openT(t, opts, Position{})
	acked := appendConcurrently(t, j, 400)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	warns := lb.lines("WARN")
	if len(warns) != 1 || !strings.Contains(warns[0], "writing zeros ahead of the records failed") || !strings.Contains(warns[0], "injected: zeros") {
		t.Fatalf("want one warning about the zeros:\n%s", lb)
	}
	if got := j.zeroFills.Load(); got != 0 {
		t.Errorf("%d fills counted, want 0", got)
	}
	opts.Logger = discardLogger
	j, got := openT(t, opts, Position{})
	defer j.Close()
	checkRecs(t, got, acked)
}

// zeroFailFS fails writes of ZeroAhead-sized blocks of zeros, which only
// the filler writes.
type zeroFailFS struct{ vfs.FS }

func (fs zeroFailFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil {
		return nil, err
	}
	return zeroFailFile{f}, nil
}

type zeroFailFile struct{ vfs.File }

func (f zeroFailFile) WriteAt(p []byte, off int64) (int, error) {
	if len(p) == 8<<10 && !strings.ContainsFunc(string(p), func(r rune) bool { return r != 0 }) {
		return 0, errors.New("injected: zeros")
	}
	return f.File.WriteAt(p, off)
}

// A group that reaches into a fill in progress waits for it: the zeros
// never land on its records. The fill is held until the test lets it go.
func TestZeroAheadWriterWaits(t *testing.T) {
	anyRateGetsZeros(t)
	fs := &zeroGateFS{FS: vfs.Default, entered: make(chan struct{}), release: make(chan struct{})}
	opts := Options{FS: fs, Dir: t.TempDir(), ZeroAhead: 8 << 10, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})
	r1 := appendWait(t, j, 1, testBody(0, 0, 100))
	if r1.Err != nil {
		t.Fatal(r1.Err)
	}
	recv(t, fs.entered, "a fill of zeros after a small group")

	// 10 KB from the end of the first record: into the fill's range.
	done := make(chan result, 1)
	body := testBody(0, 1, 10_000)
	j.Append(1, body, func(end Position, err error) { done <- result{end, err} })
	select {
	case r := <-done:
		t.Fatalf("a group written over a fill in progress (done: %v, %v)", r.End, r.Err)
	case <-time.After(100 * time.Millisecond):
	}
	close(fs.release)
	r2 := recv(t, done, "the group after the fill")
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, got := openT(t, opts, Position{})
	defer j.Close()
	checkRecs(t, got, []rec{{r1.End, 1, testBody(0, 0, 100)}, {r2.End, 1, body}})
}

// zeroGateFS holds the first write of a block of zeros of 8 KiB (the
// filler's) until release is closed, after closing entered.
type zeroGateFS struct {
	vfs.FS
	once             sync.Once
	entered, release chan struct{}
}

func (fs *zeroGateFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil {
		return nil, err
	}
	return zeroGateFile{f, fs}, nil
}

type zeroGateFile struct {
	vfs.File
	fs *zeroGateFS
}

func (f zeroGateFile) WriteAt(p []byte, off int64) (int, error) {
	if len(p) == 8<<10 && !strings.ContainsFunc(string(p), func(r rune) bool { return r != 0 }) {
		f.fs.once.Do(func() {
			close(f.fs.entered)
			<-f.fs.release
		})
	}
	return f.File.WriteAt(p, off)
}

// A reused file whose size is not a whole number of blocks (its old
// records were written through the page cache) gets its zeros from the
// next block boundary on, so that O_DIRECT takes them: no warning, and
// the new records replay.
func TestZeroAheadReusedFile(t *testing.T) {
	anyRateGetsZeros(t)
	dir := directDir(t)
	old := Options{Dir: dir, MaxFileSize: 10_000, BufferedIO: true, ZeroAhead: -1, Logger: discardLogger}
	j, _ := openT(t, old, Position{})
	var last Position
	for i := range 30 {
		r := appendWait(t, j, 1, testBody(0, i, 999))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		last = r.End
	}
	if err := j.Release(last); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	free := freeFiles(t, dir)
	if len(free) == 0 {
		t.Fatal("no free file to reuse")
	}
	if size := fileSize(t, vfs.Default, filepath.Join(dir, freeName(free[len(free)-1]))); size%directAlign == 0 {
		t.Fatalf("free file of %d bytes: want a size that is not whole blocks", size)
	}

	log, lb := newLogger()
	opts := Options{Dir: dir, ZeroAhead: 8 << 10, Logger: log}
	j, _ = openT(t, opts, last)
	if j.w.direct == nil {
		t.Fatalf("the journal in %s writes through the page cache: O_DIRECT was refused there", dir)
	}
	var acked []rec
	for i := range 40 {
		body := testBody(1, i, 300)
		r := appendWait(t, j, 2, body)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		acked = append(acked, rec{r.End, 2, body})
	}
	waitWriterIdle(t, j)
	if len(freeFiles(t, dir)) >= len(free) {
		t.Fatal("no free file was reused")
	}
	if j.zeroFills.Load() == 0 {
		t.Error("no zeros written ahead in the reused file")
	}
	checkQuiet(t, lb)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Logger = discardLogger
	j, got := openT(t, opts, last)
	defer j.Close()
	checkRecs(t, got, acked)
}

// anyRateGetsZeros lets fillers started during the test fill whatever the
// writer's rate.
func anyRateGetsZeros(t *testing.T) {
	old := bulkRate
	bulkRate = math.Inf(1)
	t.Cleanup(func() { bulkRate = old })
}

// A writer going faster than bulkRate gets no zeros ahead: they would be
// written over within milliseconds, more bytes for the disk. Once it is
// slower over a whole rateWindow, the filler fills again, past its end.
func TestZeroAheadSkipsFastWriter(t *testing.T) {
	var fills atomic.Int64
	wrote := make(chan int64, 16)
	write := func(b []byte, off int64) error { wrote <- off; return nil }
	const chunk = 64 << 10
	z := newZeroFiller(discardLogger, "test.jnl", 0, 0, chunk, write, func() error { return nil }, &fills)
	defer z.close()

	// 100 MiB at once: far faster than bulkRate, however slow the machine.
	end := int64(100 << 20)
	z.claim(0, end)
	z.ahead()
	time.Sleep(2 * rateWindow)
	z.ahead() // ends the fast window
	time.Sleep(rateWindow / 2)
	if got := fills.Load(); got != 0 {
		t.Fatalf("%d fills for a writer at 100 MiB in an instant, want 0", got)
	}
	// The writer slows down: 4 KiB at a time, a window apart.
	deadline := time.Now().Add(10 * time.Second)
	for {
		z.claim(end, end+4096)
		end += 4096
		z.ahead()
		select {
		case off := <-wrote:
			if off < 100<<20 || off > end || off%4096 != 0 {
				t.Errorf("zeros at %d: want at the writer's end (%d at most), on a block", off, end)
			}
			return
		case <-time.After(rateWindow + rateWindow/2):
		}
		if time.Now().After(deadline) {
			t.Fatal("no zeros for a slow writer")
		}
	}
}
