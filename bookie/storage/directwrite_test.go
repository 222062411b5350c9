package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// checkedDirectWrites makes every O_DIRECT entry-log write check the
// alignment O_DIRECT needs (file systems differ in how strictly they
// enforce it) for the rest of the test, counting the writes.
func checkedDirectWrites(t *testing.T) *directWriteLog {
	t.Helper()
	rec := &directWriteLog{}
	old := directWriteAt
	directWriteAt = func(f *os.File, b []byte, off int64) (int, error) {
		rec.mu.Lock()
		rec.writes++
		rec.mu.Unlock()
		if off%diskBlock != 0 || len(b)%diskBlock != 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%diskBlock != 0 {
			rec.mu.Lock()
			rec.unaligned++
			rec.mu.Unlock()
			return 0, fmt.Errorf("unaligned O_DIRECT write: %d bytes at %d", len(b), off)
		}
		if rec.refuse {
			return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.EINVAL}
		}
		return old(f, b, off)
	}
	t.Cleanup(func() { directWriteAt = old })
	return rec
}

// directOptions are options of a storage on disk, in a test directory,
// writing its entry logs with O_DIRECT through a write buffer of bufSize,
// a new log past maxSize.
func directOptions(t *testing.T, bufSize int, maxSize int64) Options {
	opts := testOptions(vfs.Default)
	opts.Dir = t.TempDir()
	opts.EntryLogDirectIO = true
	opts.WriteBufferSize = bufSize
	opts.EntryLogMaxSize = maxSize
	return opts
}

type directWriteLog struct {
	mu        sync.Mutex
	writes    int
	unaligned int
	refuse    bool // fail as a file system refusing O_DIRECT writes does
}

// openedDirect reports whether f's descriptor has O_DIRECT set, from
// /proc/self/fdinfo.
func openedDirect(t *testing.T, f *os.File) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	if err != nil {
		t.Fatalf("fdinfo: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo flags %q: %v", v, err)
			}
			return flags&syscall.O_DIRECT != 0
		}
	}
	t.Fatalf("fdinfo of fd %d has no flags", f.Fd())
	return false
}

// With EntryLogDirectIO, on the operating system's file system the entry
// logs are written with O_DIRECT: every write aligned, entries of every size (smaller
// than a block, straddling blocks, larger than the write buffer) read back
// from the buffer before a flush, from the file after, and after a reopen;
// the files a whole number of blocks.
func TestDirectEntryLogWrites(t *testing.T) {
	rec := checkedDirectWrites(t)
	opts := directOptions(t, 64<<10, 1<<20)
	s := openT(t, opts)
	s.logs.mu.Lock()
	direct := s.logs.cur.direct
	s.logs.mu.Unlock()
	if direct == nil || !openedDirect(t, direct.f) {
		t.Fatal("the current entry log is not written with O_DIRECT")
	}
	rng := rngFor(1)
	sizes := map[int64]int{}
	const n = 400
	for e := range int64(n) {
		size := 1 + rng.IntN(5000)
		switch e % 50 {
		case 7:
			size = 100 << 10 // larger than the write buffer
		case 8:
			size = 4096 - 24
		}
		sizes[e] = size
		mustAdd(t, s, 1, e, e-1, size)
		if e%40 == 0 {
			// Some in the buffer, some flushed, some in the rewritten
			// tail block.
			for r := max(0, e-5); r <= e; r++ {
				checkEntry(t, s, 1, r, sizes[r])
			}
		}
		if e == n/2 {
			if err := s.Checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for e := range int64(n) {
		checkEntry(t, s, 1, e, sizes[e])
	}
	closeT(t, s)
	if rec.unaligned > 0 || rec.writes == 0 {
		t.Fatalf("%d O_DIRECT writes, %d unaligned", rec.writes, rec.unaligned)
	}
	logs, _ := filepath.Glob(filepath.Join(opts.Dir, "entrylogs", "*"+logSuffix))
	if len(logs) < 2 {
		t.Fatalf("%d entry logs, want several (rotation)", len(logs))
	}
	for _, p := range logs {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size()%diskBlock != 0 {
			t.Errorf("%s: %d bytes, not a whole number of blocks", p, fi.Size())
		}
	}
	s = openT(t, opts)
	defer closeT(t, s)
	for e := range int64(n) {
		checkEntry(t, s, 1, e, sizes[e])
	}
}

// A log written with O_DIRECT ends in the zeros padding its last block: a
// scan up to the log's valid length finds every record and nothing wrong;
// a scan of the whole file (a log left by a crash, without metadata) finds
// every record and then a torn tail, as after any crash.
func TestDirectEntryLogPadding(t *testing.T) {
	checkedDirectWrites(t)
	dir := t.TempDir()
	l, err := openEntryLogs(vfs.Default, dir, 1<<30, 16<<10, true, 0, 1, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	var locs []location
	for i := range 50 {
		e := mkEntry(3, int64(i), int64(i)-1, 100+i*37)
		loc, err := l.append(3, e)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	if _, err := l.sync(); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	valid := l.cur.size()
	l.mu.Unlock()
	size, err := l.fileSize(1)
	if err != nil {
		t.Fatal(err)
	}
	if size%diskBlock != 0 || size < valid || size >= valid+diskBlock {
		t.Fatalf("file of %d bytes for %d valid: want the next block boundary", size, valid)
	}
	count := func(limit int64) (int, int64, error) {
		var got int
		end, bad, err := l.scan(1, limit, func(loc location, _ []byte) error {
			if loc != locs[got] {
				return fmt.Errorf("record %d at %+v, appended at %+v", got, loc, locs[got])
			}
			got++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, end, bad
	}
	if got, end, bad := count(valid); got != len(locs) || end != valid || bad != nil {
		t.Fatalf("scan to the valid length: %d records to %d, %v; want %d to %d, nothing wrong", got, end, bad, len(locs), valid)
	}
	got, end, bad := count(-1)
	var ce *CorruptionError
	if got != len(locs) || end != valid || !errors.As(bad, &ce) {
		t.Fatalf("scan of the whole file: %d records to %d, %v; want %d to %d, then a torn tail", got, end, bad, len(locs), valid)
	}
}

// A file system that takes O_DIRECT at open but refuses the writes: the
// write is made through the page cache instead, with one warning, the
// logs created after it are written through the page cache, and nothing
// is lost.
func TestDirectEntryLogWriteRefused(t *testing.T) {
	rec := checkedDirectWrites(t)
	rec.refuse = true
	logger, warnings := directWarnings(t)
	opts := directOptions(t, 16<<10, 64<<10)
	opts.Logger = logger
	s := openT(t, opts)
	const n = 200
	for e := range int64(n) {
		mustAdd(t, s, 1, e, e-1, 1000)
	}
	for e := range int64(n) {
		checkEntry(t, s, 1, e, 1000)
	}
	s.logs.mu.Lock()
	cur, directIO := s.logs.cur, s.logs.directIO
	s.logs.mu.Unlock()
	if directIO || cur.direct != nil && cur.direct.direct {
		t.Fatal("still writing with O_DIRECT after the file system refused it")
	}
	closeT(t, s)
	warnings(1)
	opts.Logger = discardLogger
	s = openT(t, opts)
	defer closeT(t, s)
	for e := range int64(n) {
		checkEntry(t, s, 1, e, 1000)
	}
}

// Where the storage's files are not the operating system's (an in-memory
// file system), the logs are written through it, after one warning.
func TestDirectEntryLogNotOSFiles(t *testing.T) {
	logger, warnings := directWarnings(t)
	opts := testOptions(vfs.NewMem())
	opts.EntryLogDirectIO = true
	opts.EntryLogMaxSize = 16 << 10
	opts.Logger = logger
	s := openT(t, opts)
	defer closeT(t, s)
	for e := range int64(100) {
		mustAdd(t, s, 1, e, e-1, 1000)
	}
	for e := range int64(100) {
		checkEntry(t, s, 1, e, 1000)
	}
	warnings(1)
}

// Reads of a log being written with O_DIRECT, its last block rewritten by
// every flush, concurrently with the writes: every entry reads back whole.
// The newest are read through the page cache (the kernel drops cached
// pages a direct write overwrites); those in whole blocks already written
// are read from the disk, small ones through diskReads' chunks and large
// ones on their own, and the padding past a flush's last whole block,
// written over by the next flush, is never served from a chunk.
func TestDirectEntryLogConcurrentReads(t *testing.T) {
	checkedDirectWrites(t)
	opts := directOptions(t, 8<<10, 4<<20)
	s := openT(t, opts)
	defer closeT(t, s)
	const n = 2000
	sizeOf := func(e int64) int {
		if e%50 == 3 {
			return 80 << 10 // read on its own (diskSpanMin)
		}
		return 700
	}
	var added atomic.Int64
	done := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rngFor(r + 10)
			for {
				select {
				case <-done:
					return
				default:
				}
				top := added.Load()
				if top == 0 {
					continue
				}
				// The newest entries most: those in the block being rewritten.
				e := max(0, top-1-int64(rng.IntN(min(int(top), 20))))
				if rng.IntN(4) == 0 {
					e = int64(rng.IntN(int(top)))
				}
				got, err := s.ReadEntry(1, e)
				if err == nil && !bytes.Equal(got, mkEntry(1, e, e-1, sizeOf(e))) {
					err = fmt.Errorf("entry %d read back different", e)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for e := range int64(n) {
		mustAdd(t, s, 1, e, e-1, sizeOf(e))
		added.Store(e + 1)
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Once more, all of them: what is written is read from the disk.
	for e := range int64(n) {
		checkEntry(t, s, 1, e, sizeOf(e))
	}
	d := s.logs.disk
	d.mu.Lock()
	chunks := d.reads
	d.mu.Unlock()
	if chunks == 0 || d.spanReads.Load() == 0 {
		t.Fatalf("%d chunk reads and %d span reads from the disk, want some of each", chunks, d.spanReads.Load())
	}
}

// heldDirectWrites holds every O_DIRECT entry-log write until the test
// sends on the returned channel (or closes it: all go through), failing
// each with fail if set; started receives each write's offset as it starts.
func heldDirectWrites(t *testing.T, fail error) (release chan struct{}, started chan int64) {
	t.Helper()
	release, started = make(chan struct{}), make(chan int64, 100)
	old := directWriteAt
	directWriteAt = func(f *os.File, b []byte, off int64) (int, error) {
		started <- off
		<-release
		if fail != nil {
			return 0, fail
		}
		return old(f, b, off)
	}
	t.Cleanup(func() { directWriteAt = old })
	return release, started
}

// A direct flush does not wait for the disk: while a write is under way
// the applier fills the other buffer, entries in the write's buffer and
// in the new one read back, a second flush waits for the first, and a
// checkpoint returns only once the writes are done.
func TestDirectEntryLogWriteInFlight(t *testing.T) {
	release, started := heldDirectWrites(t, nil)
	opts := directOptions(t, 16<<10, 1<<30)
	s := openT(t, opts)
	defer func() {
		close(release)
		closeT(t, s)
	}()
	const size = 3000
	// Six entries fill the first buffer past 16 KiB: the sixth's add
	// starts a write and returns while it is held.
	added := make(chan error, 1)
	go func() {
		for e := range int64(6) {
			if err := add(t, s, mkEntry(1, e, e-1, size)); err != nil {
				added <- err
				return
			}
		}
		added <- s.awaitApplied()
	}()
	select {
	case err := <-added:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("adding waits for the O_DIRECT write")
	}
	select {
	case off := <-started:
		if off != 0 {
			t.Fatalf("first write at %d, want 0", off)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no O_DIRECT write started after a full buffer")
	}
	s.logs.mu.Lock()
	inflight := s.logs.cur.inflight
	s.logs.mu.Unlock()
	if inflight == nil {
		t.Fatal("no write under way after a full buffer")
	}
	for e := range int64(6) {
		checkEntry(t, s, 1, e, size)
	}
	// More entries go to the new buffer meanwhile.
	for e := int64(6); e < 9; e++ {
		mustAdd(t, s, 1, e, e-1, size)
	}
	for e := range int64(9) {
		checkEntry(t, s, 1, e, size)
	}
	// A checkpoint flushes the rest and must wait for both writes.
	checkpointed := make(chan error, 1)
	go func() { checkpointed <- s.Checkpoint() }()
	select {
	case err := <-checkpointed:
		t.Fatalf("checkpoint returned (%v) while the write was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	release <- struct{}{} // the first write
	select {
	case off := <-started:
		if off == 0 || off%diskBlock != 0 {
			t.Fatalf("second write at %d, want a later block boundary", off)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpoint's flush did not start its write")
	}
	select {
	case err := <-checkpointed:
		t.Fatalf("checkpoint returned (%v) while its own write was held", err)
	case <-time.After(200 * time.Millisecond):
	}
	release <- struct{}{}
	if err := <-checkpointed; err != nil {
		t.Fatal(err)
	}
	for e := range int64(9) {
		checkEntry(t, s, 1, e, size)
	}
}

// A direct write failing while under way fails the storage, as a failed
// write always does: the next add and the next checkpoint say why, and
// what was added before reads back from memory.
func TestDirectEntryLogWriteInFlightFails(t *testing.T) {
	release, started := heldDirectWrites(t, syscall.EIO)
	opts := directOptions(t, 16<<10, 1<<30)
	s := openT(t, opts)
	defer s.Close() // fails: the storage failed
	const size = 3000
	for e := range int64(6) {
		mustAdd(t, s, 1, e, e-1, size)
	}
	<-started
	close(release)
	for e := range int64(6) {
		checkEntry(t, s, 1, e, size)
	}
	err := s.Checkpoint()
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "write entry log") {
		t.Fatalf("checkpoint after a failed write: %v, want the write's EIO", err)
	}
	if _, err := s.logs.append(1, mkEntry(1, 6, 5, size)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after a failed write: %v, want the write's EIO", err)
	}
	for e := range int64(6) {
		checkEntry(t, s, 1, e, size)
	}
}

// An append that must flush while the write before is under way (the
// applier a buffer ahead of the disk), and a sync in the same place, wait
// for the write without entryLogs.mu: entries in the write's buffer, in
// the current buffer and in the file read back meanwhile.
func TestDirectEntryLogAwaitWriteUnlocked(t *testing.T) {
	release, started := heldDirectWrites(t, nil)
	awaiting := make(chan struct{}, 10)
	awaitingWrite = func() { awaiting <- struct{}{} }
	t.Cleanup(func() { awaitingWrite = nil })
	l, err := openEntryLogs(vfs.Default, t.TempDir(), 1<<30, 16<<10, true, 0, 1, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		l.close()
	}()
	const size = 3000
	var locs []location
	appendEntry := func(e int64) (location, error) {
		return l.append(1, mkEntry(1, e, e-1, size))
	}
	wait := func(what string, c <-chan struct{}) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	readAll := func(what string) {
		t.Helper()
		read := make(chan error, 1)
		go func() {
			for i, loc := range locs {
				e, _, _, err := l.read(loc)
				if err == nil && !bytes.Equal(e, mkEntry(1, int64(i), int64(i)-1, size)) {
					err = errors.New("not the entry appended")
				}
				if err != nil {
					read <- fmt.Errorf("entry %d: %w", i, err)
					return
				}
			}
			read <- nil
		}()
		select {
		case err := <-read:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: reads wait for the held write", what)
		}
	}
	// Entries 0–4 fill the first buffer; entry 5's append starts its
	// write (held), and entries 5–8 go to the second buffer.
	for e := range int64(9) {
		loc, err := appendEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	if off := <-started; off != 0 {
		t.Fatalf("first write at %d, want 0", off)
	}
	// Entry 9 does not fit: its append flushes, so waits for the write.
	type appendResult struct {
		loc location
		err error
	}
	appended := make(chan appendResult, 1)
	go func() {
		loc, err := appendEntry(9)
		appended <- appendResult{loc, err}
	}()
	wait("the append to wait for the write", awaiting)
	select {
	case r := <-appended:
		t.Fatalf("append returned (%v) before the write before it was done", r.err)
	default:
	}
	readAll("while an append waits")
	release <- struct{}{} // the first write
	select {
	case r := <-appended:
		if r.err != nil {
			t.Fatal(r.err)
		}
		locs = append(locs, r.loc)
	case <-time.After(10 * time.Second):
		t.Fatal("the append did not go on once the write was done")
	}
	if off := <-started; off == 0 || off%diskBlock != 0 {
		t.Fatalf("second write at %d, want a later block boundary", off)
	}
	// A sync with the second write under way waits for it the same way.
	synced := make(chan error, 1)
	go func() {
		_, err := l.sync()
		synced <- err
	}()
	wait("the sync to wait for the write", awaiting)
	readAll("while a sync waits")
	release <- struct{}{} // the second write
	<-started             // the sync's flush
	release <- struct{}{}
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sync did not return once its writes were done")
	}
	readAll("after the sync")
}
