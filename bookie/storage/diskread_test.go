package storage

import (
	"bytes"
	"errors"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// fakeLog is a log's bytes for diskReads.read, counting the chunk reads
// and checking their alignment as O_DIRECT would.
type fakeLog struct {
	data  []byte
	reads atomic.Int64
	bytes atomic.Int64 // asked for by the reads
	fail  atomic.Bool
	inval atomic.Bool // fail as a file system refusing O_DIRECT reads does

	mu   sync.Mutex
	offs map[int64]int // chunk reads per offset
}

// readsAt is the number of chunk reads at off.
func (f *fakeLog) readsAt(off int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offs[off]
}

func (f *fakeLog) readAt(buf []byte, off int64) (int, error) {
	f.reads.Add(1)
	f.bytes.Add(int64(len(buf)))
	f.mu.Lock()
	if f.offs == nil {
		f.offs = map[int64]int{}
	}
	f.offs[off]++
	f.mu.Unlock()
	if off%diskBlock != 0 || len(buf)%diskBlock != 0 {
		return 0, errors.New("unaligned O_DIRECT read")
	}
	if f.fail.Load() {
		return 0, errors.New("disk error")
	}
	if f.inval.Load() {
		return 0, &os.PathError{Op: "read", Path: "log", Err: syscall.EINVAL}
	}
	if off >= int64(len(f.data)) {
		return 0, nil
	}
	return copy(buf, f.data[off:]), nil
}

func newFakeLog(n int) *fakeLog {
	f := &fakeLog{data: make([]byte, n)}
	for i := range f.data {
		f.data[i] = byte(i*7 + i>>12)
	}
	return f
}

func TestDiskReads(t *testing.T) {
	const size = 5<<20 + 1234
	lg := newFakeLog(size)
	d := newDiskReads(discardLogger)
	if d.wanted(1, 0, 100) {
		t.Fatal("wanted before anything was dropped")
	}
	d.setMark(1, 4<<20)
	for _, tc := range []struct {
		off, n int64
		want   bool
	}{
		{0, 100, true},
		{4<<20 - 100, 100, true},
		{4<<20 - 100, 101, false},      // past the dropped mark
		{100, diskChunkSize, true},     // across two chunks
		{100, diskChunkSize + 1, true}, // larger than a chunk: read on its own
	} {
		if got := d.wanted(1, tc.off, tc.n); got != tc.want {
			t.Errorf("wanted [%d, +%d) = %t, want %t", tc.off, tc.n, got, tc.want)
		}
	}
	if d.wanted(2, 0, 100) {
		t.Error("wanted from a log nothing of which was dropped")
	}
	var nilReads *diskReads
	if nilReads.wanted(1, 0, 1) {
		t.Error("a nil diskReads wants reads")
	}

	read := func(off, n int64) bool {
		t.Helper()
		e := make([]byte, n)
		ok := readOK(d, 1, off, e, lg.readAt)
		if ok && !bytes.Equal(e, lg.data[off:off+n]) {
			t.Fatalf("read [%d, +%d): wrong bytes", off, n)
		}
		return ok
	}
	// Sequential 16 KiB entries: the first read on its own (aloneLocked),
	// then one chunk read per MiB.
	const entry = 16<<10 + 4
	var off int64
	for ; off+entry <= 4<<20; off += entry {
		if !read(off, entry) {
			t.Fatalf("read [%d, +%d) failed", off, entry)
		}
	}
	if got, spans := lg.reads.Load(), d.spanReads.Load(); got != 5 || spans != 1 {
		t.Errorf("%d reads (%d on their own) for 4 MiB read sequentially, want 5 (1): the first entry, then 4 chunks", got, spans)
	}
	// Read again in reverse: the last diskChunks chunks are held.
	before := lg.reads.Load()
	for off -= entry; off >= 0; off -= entry {
		read(off, entry)
	}
	if got := lg.reads.Load() - before; got != 0 {
		t.Errorf("%d chunk reads for 4 MiB held in %d chunks", got, diskChunks)
	}
	// Past the end of the file: not served, so read through the page
	// cache, which says what is wrong.
	d.setMark(1, 1<<40)
	if read(size-10, 20) {
		t.Error("a read past the end of the log was served")
	}
	if read(size+diskBlock, 10) {
		t.Error("a read wholly past the end of the log was served")
	}
	// A chunk read short is read again once the log has grown.
	lg.data = append(lg.data, make([]byte, 1<<20)...)
	before5 := lg.readsAt(5 << 20)
	if !read(size-10, 20) {
		t.Error("a read of what the log has since grown by was not served")
	}
	if got := lg.readsAt(5<<20) - before5; got != 1 {
		t.Errorf("%d reads of the chunk after the log grew, want 1", got)
	}
	// A failed chunk read is not served, nor kept.
	other := newFakeLog(1 << 20)
	other.fail.Store(true)
	d.setMark(2, 1<<20)
	e := make([]byte, 100)
	if readOK(d, 2, 1000, e, other.readAt) {
		t.Error("a read whose chunk read failed was served")
	}
	other.fail.Store(false)
	if !readOK(d, 2, 1000, e, other.readAt) || !bytes.Equal(e, other.data[1000:1100]) {
		t.Error("a read after a failed chunk read was not served, or wrong")
	}
	if got := other.reads.Load(); got != 2 {
		t.Errorf("%d chunk reads, want 2 (the failed one, then the one served)", got)
	}
	// A removed log's chunks go.
	d.forget(1)
	if d.wanted(1, 0, 1) {
		t.Error("wanted from a forgotten log")
	}
	// A chunk still being read (a prefetch) goes when its read ends,
	// which broadcasts d.cond.
	d.mu.Lock()
	for {
		loading := false
		for i := range d.chunks {
			if c := &d.chunks[i]; c.occupied && c.key.log == 1 {
				if !c.loading {
					start, n := c.key.start, c.n
					d.mu.Unlock()
					t.Fatalf("chunk of forgotten log 1 kept: [%d, +%d)", start, n)
				}
				loading = true
			}
		}
		if !loading {
			break
		}
		d.cond.Wait()
	}
	d.mu.Unlock()
}

// An entry of diskSpanMin bytes or more is read on its own: one aligned
// read of the blocks holding it, none through the chunks, whatever its
// size and alignment; a smaller one goes through the chunks. A span read
// short (past the end of the file) or failing is not served.
func TestDiskReadsSpan(t *testing.T) {
	const size = 8 << 20
	lg := newFakeLog(size)
	d := newDiskReads(discardLogger)
	d.setMark(1, 6<<20)
	for _, tc := range []struct {
		off, n int64
	}{
		{0, diskSpanMin},
		{diskBlock + 17, diskSpanMin + diskBlock + 1}, // unaligned at both ends
		{3<<20 - 5, 2<<20 + 3},                        // larger than a chunk, across three
		{6<<20 - diskSpanMin, diskSpanMin},            // up to the mark
	} {
		if !d.wanted(1, tc.off, tc.n) {
			t.Fatalf("[%d, +%d) below the mark not wanted", tc.off, tc.n)
		}
		reads, spans, chunks := lg.reads.Load(), d.spanReads.Load(), d.reads
		e := make([]byte, tc.n)
		ok, sum, summed := d.read(1, tc.off, e, lg.readAt)
		if !ok {
			t.Fatalf("span read [%d, +%d) failed", tc.off, tc.n)
		}
		if !bytes.Equal(e, lg.data[tc.off:tc.off+tc.n]) {
			t.Fatalf("span read [%d, +%d): wrong bytes", tc.off, tc.n)
		}
		// The sum of the bytes as an entry's (the stored checksum's four
		// bytes left out), taken as they were copied.
		castagnoli := crc32.MakeTable(crc32.Castagnoli)
		want := crc32.Update(crc32.Checksum(e[:32], castagnoli), castagnoli, e[entry.HeaderSize:])
		if !summed || sum != want {
			t.Fatalf("span read [%d, +%d): sum %08x (summed %t), want %08x", tc.off, tc.n, sum, summed, want)
		}
		if r, sp, c := lg.reads.Load()-reads, d.spanReads.Load()-spans, d.reads-chunks; r != 1 || sp != 1 || c != 0 {
			t.Fatalf("[%d, +%d): %d reads, %d span reads, %d chunk reads; want 1, 1, 0", tc.off, tc.n, r, sp, c)
		}
	}
	// Just under diskSpanMin, twice in one chunk: the first alone, the
	// second through the chunk.
	e := make([]byte, diskSpanMin-1)
	for i, off := range []int{100, 100 + diskSpanMin} {
		spans, chunks := d.spanReads.Load(), d.reads
		if !readOK(d, 1, int64(off), e, lg.readAt) || !bytes.Equal(e, lg.data[off:off+len(e)]) {
			t.Fatalf("a read just under diskSpanMin at %d failed or is wrong", off)
		}
		if sp, c := d.spanReads.Load()-spans, d.reads-chunks; (sp == 1) != (i == 0) || (c > 0) != (i == 1) {
			t.Fatalf("small entry %d of a chunk: %d span reads, %d chunk reads", i+1, sp, c)
		}
	}
	d.setMark(1, 1<<40)
	if readOK(d, 1, size-diskSpanMin+1, make([]byte, diskSpanMin), lg.readAt) {
		t.Error("a span read past the end of the log was served")
	}
	lg.fail.Store(true)
	if readOK(d, 1, 0, make([]byte, diskSpanMin), lg.readAt) {
		t.Error("a failed span read was served")
	}
}

// A small entry alone among large ones, as a Kafka batch cut short is
// among full ones in a log, is read on its own: loading its chunk and
// prefetching the next would read megabytes of large entries, which are
// read again as spans. A second small entry read from the same chunk
// loads it.
func TestDiskReadsSmallAlone(t *testing.T) {
	const size = 16 << 20
	lg := newFakeLog(size)
	d := newDiskReads(discardLogger)
	d.setMark(1, size)
	// 600 KiB entries, every fourth followed by a 10 KiB one: the whole
	// log read once, in order.
	var want int64
	small := 0
	for off, i := int64(0), 0; ; i++ {
		n := int64(600 << 10)
		if i%2 == 1 {
			n = 10<<10 + 7
		}
		if i%2 == 1 && i%8 != 7 {
			continue // large ones between the small
		}
		if off+n > size {
			break
		}
		e := make([]byte, n)
		if !readOK(d, 1, off, e, lg.readAt) || !bytes.Equal(e, lg.data[off:off+n]) {
			t.Fatalf("read [%d, +%d) failed or is wrong", off, n)
		}
		if n < diskSpanMin {
			small++
		}
		want += (off+n+diskBlock-1)&^(diskBlock-1) - off&^(diskBlock-1)
		off += n
	}
	if small < 4 {
		t.Fatalf("only %d small entries read; the test reads too little", small)
	}
	if d.reads != 0 || lg.bytes.Load() != want {
		t.Fatalf("%d chunk reads, %d bytes read; want none, and %d bytes (each entry's blocks once)", d.reads, lg.bytes.Load(), want)
	}
	// Two small entries in one chunk: the second loads it.
	e := make([]byte, 100)
	for i, off := range []int64{15 << 20, 15<<20 + 4096} {
		before := d.reads
		if !readOK(d, 1, off, e, lg.readAt) || !bytes.Equal(e, lg.data[off:off+100]) {
			t.Fatalf("read at %d failed or is wrong", off)
		}
		if loaded := d.reads > before; loaded != (i == 1) {
			t.Fatalf("small entry %d of chunk 15: chunk loaded %t", i+1, loaded)
		}
	}
}

// Span buffers are whole huge pages, 2 MiB-aligned, reused once given
// back, within spanKeep; where huge pages cannot be mapped (not Linux),
// heap buffers in powers of two from 64 KiB, aligned, recycled by size
// class, larger ones not pooled.
func TestSpanBufs(t *testing.T) {
	for _, tc := range []struct{ n, class, size int }{
		{diskBlock, 0, 1 << 16},
		{1 << 16, 0, 1 << 16},
		{1<<16 + diskBlock, 1, 1 << 17},
		{1 << 26, spanMaxShift - spanMinShift, 1 << 26},
		{1<<26 + diskBlock, -1, 1<<26 + diskBlock},
	} {
		if c, size := spanClass(tc.n); c != tc.class || size != tc.size {
			t.Errorf("spanClass(%d) = %d, %d; want %d, %d", tc.n, c, size, tc.class, tc.size)
		}
	}
	huge := runtime.GOOS == "linux"
	align, size := uintptr(diskBlock), 1<<16
	if huge {
		align, size = fsutil.HugePageSize, fsutil.HugePageSize
	}
	b := getSpanBuf(3 * diskBlock)
	if len(b) != 3*diskBlock || cap(b) != size || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%align != 0 || fsutil.IsHugeBuffer(b) != huge {
		t.Fatalf("getSpanBuf(%d): len %d, cap %d, huge %t, or not %d-aligned", 3*diskBlock, len(b), cap(b), fsutil.IsHugeBuffer(b), align)
	}
	for i := range b {
		b[i] = byte(i)
	}
	putSpanBuf(b)
	if huge {
		again := getSpanBuf(5 * diskBlock)
		if unsafe.SliceData(again) != unsafe.SliceData(b) {
			t.Error("a huge span buffer given back was not reused")
		}
		putSpanBuf(again)
	}
	big := getSpanBuf(1<<26 + diskBlock)
	if len(big) != 1<<26+diskBlock || uintptr(unsafe.Pointer(unsafe.SliceData(big)))%align != 0 {
		t.Fatal("a large span buffer is the wrong size or unaligned")
	}
	big[len(big)-1] = 1
	putSpanBuf(big) // more than spanKeep: unmapped (or, on the heap, not pooled)
	if fsutil.IsHugeBuffer(big) {
		t.Error("a huge span buffer larger than spanKeep was kept")
	}
}

// A chunk trusts only the bytes below its log's mark when its read
// started: past it, a direct write's padding may since have been written
// over. A read of bytes the mark has since passed reads the chunk again.
func TestDiskReadsChunkTrustsItsMark(t *testing.T) {
	lg := newFakeLog(1 << 20)
	d := newDiskReads(discardLogger)
	d.setMark(1, 2*diskBlock)
	e := make([]byte, 100)
	if !readOK(d, 1, 0, e, lg.readAt) {
		t.Fatal("read below the mark failed")
	}
	// The block after the mark was padding when the chunk was read; a
	// flush writes entries over it and the mark moves on.
	for i := 2 * diskBlock; i < 3*diskBlock; i++ {
		lg.data[i] ^= 0xff
	}
	d.setMark(1, 3*diskBlock)
	off := int64(2*diskBlock + 10)
	if !d.wanted(1, off, 100) {
		t.Fatal("bytes below the new mark not wanted")
	}
	if !readOK(d, 1, off, e, lg.readAt) {
		t.Fatal("read below the new mark failed")
	}
	if !bytes.Equal(e, lg.data[off:off+100]) {
		t.Fatal("bytes past the mark when the chunk was read were served from it, not read again")
	}
	if got := lg.readsAt(0); got != 2 {
		t.Fatalf("chunk 0 read %d times, want 2 (again once the mark passed its end)", got)
	}
}

// The diskPrefetchAfter-th read from a chunk starts reads of the next
// diskPrefetch ones, wholly dropped, in the background; a reader going on
// finds them read.
func TestDiskReadsPrefetch(t *testing.T) {
	lg := newFakeLog(8 << 20)
	d := newDiskReads(discardLogger)
	d.setMark(1, 3<<20+diskChunkSize/2) // chunks 0 to 2 wholly dropped, 3 partly
	e := make([]byte, 100)
	// The first entry is read alone, the second loads the chunk; the
	// chunk's diskPrefetchAfter-th read prefetches.
	for i := range diskPrefetchAfter + 1 {
		if i == diskPrefetchAfter {
			d.mu.Lock()
			loads := d.reads // a prefetch counts when it starts
			d.mu.Unlock()
			if loads != 1 {
				t.Fatalf("%d chunk loads after %d reads from chunk 0, want 1 (no prefetch yet)", loads, i-1)
			}
		}
		if !readOK(d, 1, int64(10+200*i), e, lg.readAt) {
			t.Fatal("read of chunk 0 failed")
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for lg.readsAt(1<<20) == 0 || lg.readsAt(2<<20) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("chunks 1 and 2 read %d and %d times after chunk 0 was read, want once each", lg.readsAt(1<<20), lg.readsAt(2<<20))
		}
		time.Sleep(time.Millisecond)
	}
	for _, off := range []int64{1<<20 + 10, 2<<20 + 10} {
		if !readOK(d, 1, off, e, lg.readAt) || !bytes.Equal(e, lg.data[off:off+100]) {
			t.Fatalf("read at %d failed or wrong", off)
		}
	}
	if r1, r2, r3 := lg.readsAt(1<<20), lg.readsAt(2<<20), lg.readsAt(3<<20); r1 != 1 || r2 != 1 || r3 != 0 {
		t.Fatalf("chunks 1, 2, 3 read %d, %d, %d times; want 1, 1 and none (3 is not wholly dropped)", r1, r2, r3)
	}
}

// A file system that opens files with O_DIRECT but refuses the reads
// (EINVAL) turns disk reads off, with one warning.
func TestDiskReadsRefused(t *testing.T) {
	logger, warnings := directWarnings(t)
	d := newDiskReads(logger)
	lg := newFakeLog(4 << 20)
	lg.inval.Store(true)
	d.setMark(1, 4<<20)
	e := make([]byte, 100)
	if readOK(d, 1, 0, e, lg.readAt) {
		t.Fatal("a read refused with EINVAL was served")
	}
	if d.wanted(1, 0, 100) {
		t.Fatal("disk reads still wanted after EINVAL")
	}
	warnings(1)
}

// directWarnings is a logger, and a check that it logged want warnings
// that O_DIRECT cannot be used.
func directWarnings(t *testing.T) (*slog.Logger, func(want int)) {
	var logged bytes.Buffer
	return slog.New(slog.NewTextHandler(&logged, nil)), func(want int) {
		t.Helper()
		if got := strings.Count(logged.String(), "O_DIRECT cannot be used"); got != want {
			t.Fatalf("%d warnings that O_DIRECT cannot be used, want %d; log:\n%s", got, want, logged.String())
		}
	}
}

// Many readers at once over more places than there are chunks: every
// read gets its own bytes (run with -race).
func TestDiskReadsConcurrent(t *testing.T) {
	logs := []*fakeLog{newFakeLog(24 << 20), newFakeLog(24 << 20)}
	d := newDiskReads(discardLogger)
	for id := range logs {
		d.setMark(uint64(id), 1<<40)
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				id := r.IntN(len(logs))
				n := 1 + r.Int64N(64<<10)
				off := r.Int64N(int64(len(logs[id].data)) - n)
				e := make([]byte, n)
				if !readOK(d, uint64(id), off, e, logs[id].readAt) || !bytes.Equal(e, logs[id].data[off:off+n]) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of 4800 concurrent reads failed or got wrong bytes", n)
	}
	for _, c := range d.chunks {
		if c.refs != 0 || c.loading {
			t.Fatalf("chunk left in use: %d refs, loading %t", c.refs, c.loading)
		}
	}
}

// Where O_DIRECT cannot be used (here: files in memory), dropped bytes
// are read through the file as before, after one warning.
func TestDiskReadsFallBack(t *testing.T) {
	logger, warnings := directWarnings(t)
	s := openT(t, Options{FS: vfs.NewMem(), Dir: "/data", CheckpointInterval: -1, GCInterval: -1, Logger: logger,
		EntryLogPageCacheKeep: MinEntryLogPageCacheKeep})
	defer closeT(t, s)
	const size, n = 16 << 10, 512 // 8 MiB
	for i := range int64(n) {
		mustAdd(t, s, 1, i, i-1, size)
	}
	for i := range int64(n) {
		checkEntry(t, s, 1, i, size)
	}
	s.logs.disk.mu.Lock()
	off, reads := s.logs.disk.off, s.logs.disk.reads
	s.logs.disk.mu.Unlock()
	if !off || reads != 0 {
		t.Fatalf("disk reads off %t after %d chunk reads, want off after none", off, reads)
	}
	warnings(1)
}

// readOK is d.read's ok.
func readOK(d *diskReads, log uint64, off int64, e []byte, readAt func(buf []byte, off int64) (int, error)) bool {
	ok, _, _ := d.read(log, off, e, readAt)
	return ok
}

// A large entry read from the disk on its own is checked as it is copied
// out (entry.CopyChecksum, entry.VerifySum): read back whole, and a byte
// changed in the file is a CorruptionError for its checksum.
func TestDiskSpanReadChecked(t *testing.T) {
	s := openT(t, directOptions(t, 256<<10, 64<<20))
	defer closeT(t, s)
	const size, n = 100 << 10, 8
	for e := range int64(2 * n) { // the last ones in the write buffer
		mustAdd(t, s, 1, e, e-1, size)
	}
	if err := s.Checkpoint(); err != nil { // the log's writes are in the file
		t.Fatal(err)
	}
	spans := s.logs.disk.spanReads.Load()
	for e := range int64(n) {
		checkEntry(t, s, 1, e, size)
	}
	if got := s.logs.disk.spanReads.Load() - spans; got != n {
		t.Fatalf("%d of %d entries of %d bytes read from the disk on their own: the test reads nothing it means to", got, n, size)
	}

	loc, ok, err := s.idx.location(1, 3)
	if err != nil || !ok {
		t.Fatalf("location of entry 3: %v, %v", ok, err)
	}
	f, err := os.OpenFile(s.logs.path(loc.log), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	at := loc.offset + entry.HeaderSize + size/2
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	spans = s.logs.disk.spanReads.Load()
	_, err = s.ReadEntry(1, 3)
	var ce *CorruptionError
	if !errors.As(err, &ce) || !errors.Is(err, entry.ErrChecksum) {
		t.Fatalf("read of the changed entry: %v, want a CorruptionError for its checksum", err)
	}
	if s.logs.disk.spanReads.Load() == spans {
		t.Fatal("the changed entry was not read from the disk on its own")
	}
	checkEntry(t, s, 1, 4, size)
}
