package storage

import (
	"errors"
	"log/slog"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// Chunked reads from the disk of entry-log bytes the page cache no longer
// holds (design note 0010). With EntryLogPageCacheKeep, dropBehind drops
// written pages behind the writer; a consumer catching up then reads them
// back. Read through the page cache, each read takes fresh page-cache
// pages again, which on a virtual machine whose host backs memory lazily
// costs as much as the write saved. So reads below a log's dropped mark
// bypass the page cache: the chunk holding the entry is read with
// O_DIRECT into one of diskChunks buffers of our own, reused least
// recently used first, and the entry is copied out of it. Reads of
// neighbouring entries (a catch-up reader's next entry, or another
// partition's, interleaved in the same log) are then served from the
// chunk: one disk read per chunk. A chunk read from a few times reads the
// next ones in the background, as the kernel reads ahead through the page
// cache. Large entries are read on their own (readSpan), and so is a
// small one alone among them (aloneLocked): the chunks are for runs of
// small entries.
//
// Where O_DIRECT cannot be used (the file system refuses it at open or at
// a read, or the storage is not on operating-system files), reads go
// through the page cache as before, after one warning.

const (
	// diskChunkSize is the bytes read from the disk at once, at
	// multiples of it in the log.
	diskChunkSize = 1 << 20
	// diskChunks is how many chunks are held (64 MiB, allocated as
	// used): consumers of a log's partitions read it at places as far
	// apart as their fetches' read-ahead, and each chunk holds entries of
	// all of them.
	diskChunks = 64
	// diskSpanMin: entries of this many bytes or more are read on their
	// own (readSpan), not through the chunks.
	diskSpanMin = 64 << 10
	// diskPrefetch is how many chunks after one read from are read in
	// the background, once diskPrefetchAfter reads were served from it:
	// a reader going through a run of small entries reads on, but a few
	// small entries among large ones (the chunk loaded for them) are no
	// run, and their next chunks would be read for nothing.
	diskPrefetch      = 2
	diskPrefetchAfter = 4
	// diskBlock: O_DIRECT offsets, lengths and buffers are multiples of
	// the logical block size; 4 KiB covers every disk in use.
	diskBlock = 4096
)

// diskReads holds the chunks and each log's dropped mark. Safe for
// concurrent use; a nil *diskReads reads nothing from the disk.
type diskReads struct {
	log  *slog.Logger
	mu   sync.Mutex
	off  bool      // O_DIRECT refused: read through the page cache
	cond sync.Cond // a chunk finished loading or was released
	// marks[log]: bytes of log below this offset are read from the disk
	// (math.MaxInt64: all of them): dropped from the page cache
	// (dropBehind), or written with O_DIRECT and final in the file
	// (direct writes: the write holding them has returned, and no later
	// flush writes over them).
	marks  map[uint64]int64
	chunks [diskChunks]diskChunk
	index  map[chunkKey]*diskChunk // the occupied chunks
	tick   uint64                  // for least-recently-used eviction
	// lately: chunks a small entry was read from on its own, most
	// recent at latelyNext-1 (aloneLocked).
	lately     [diskChunks]chunkKey
	latelyNext int
	// reads counts chunks read from the disk (tests).
	reads int
	// spanReads counts entries read on their own (tests).
	spanReads atomic.Int64
}

// chunkKey names a chunk: the bytes of log from start, a multiple of
// diskChunkSize.
type chunkKey struct {
	log   uint64
	start int64
}

// diskChunk is the first n bytes of the chunk key, in buf.
type diskChunk struct {
	key      chunkKey
	n        int
	buf      []byte // diskChunkSize bytes at a diskBlock-aligned address; nil until first used
	loading  bool
	refs     int    // readers copying out of buf
	used     uint64 // d.tick when last used
	uses     int    // reads served since it was read (diskPrefetchAfter)
	mark     int64  // the log's mark when the read started
	occupied bool   // key is in the index
}

func newDiskReads(log *slog.Logger) *diskReads {
	d := &diskReads{log: log, marks: map[uint64]int64{}, index: map[chunkKey]*diskChunk{}}
	d.cond.L = &d.mu
	for i := range d.lately {
		d.lately[i] = chunkKey{log: math.MaxUint64} // no log's
	}
	return d
}

// setMark records that log's bytes below to are to be read from the disk.
func (d *diskReads) setMark(log uint64, to int64) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.marks[log] = max(d.marks[log], to)
	d.mu.Unlock()
}

// forget drops log's mark and chunks (the log was removed).
func (d *diskReads) forget(log uint64) {
	if d == nil {
		return
	}
	d.mu.Lock()
	delete(d.marks, log)
	for i := range d.chunks {
		if c := &d.chunks[i]; c.occupied && c.key.log == log && !c.loading && c.refs == 0 {
			delete(d.index, c.key)
			c.occupied = false
		}
	}
	d.mu.Unlock()
}

// wanted reports whether [off, off+n) of log is to be read from the disk:
// it is below the log's mark.
func (d *diskReads) wanted(log uint64, off, n int64) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.off && off+n <= d.marks[log]
}

// turnOff stops reads from the disk for good (O_DIRECT cannot be used),
// saying why in a warning the first time.
func (d *diskReads) turnOff(why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.turnOffLocked(why)
}

func (d *diskReads) turnOffLocked(why string) {
	if !d.off {
		d.off = true
		d.log.Warn("storage: entry-log bytes dropped from the page cache are read back through it, since O_DIRECT cannot be used", "reason", why)
	}
}

// read copies [off, off+len(e)) of log into e from the disk: an entry of
// diskSpanMin bytes or more with an O_DIRECT read of its own (readSpan),
// a smaller one from the chunks holding it, held or read with readAt (an
// O_DIRECT read of the log into an aligned buffer, returning the bytes
// read), unless it is alone in a chunk not held (aloneLocked): then on
// its own too. ok is false if the bytes are not all read (past the end of the
// file, or a read error): the caller reads them through the page cache
// instead, which reports what is wrong. A read on its own copies e out a
// piece at a time, checksumming each piece as it lands: if summed, sum is
// the checksum of the entry in e (entry.CopyChecksum), for
// entry.VerifySum.
func (d *diskReads) read(log uint64, off int64, e []byte, readAt func(buf []byte, off int64) (int, error)) (ok bool, sum uint32, summed bool) {
	if len(e) >= diskSpanMin {
		return d.readSpan(off, e, readAt)
	}
	end := off + int64(len(e))
	d.mu.Lock()
	if d.aloneLocked(chunkKey{log, off &^ (diskChunkSize - 1)}) {
		d.mu.Unlock()
		return d.readSpan(off, e, readAt)
	}
	defer d.mu.Unlock()
	for pos := off; pos < end; {
		start := pos &^ (diskChunkSize - 1)
		to := min(end, start+diskChunkSize)
		c := d.chunkLocked(chunkKey{log, start}, to-start, readAt)
		if c == nil {
			return false, 0, false
		}
		d.mu.Unlock()
		copy(e[pos-off:], c.buf[pos-start:to-start])
		d.mu.Lock()
		c.refs--
		d.cond.Broadcast()
		pos = to
	}
	return true, 0, false
}

// aloneLocked reports whether a small entry in the chunk at key is to be
// read on its own: the chunk is not held, and no small entry was read
// from it lately (it is then remembered). Among large entries (Kafka
// batches of hundreds of KiB, read as spans) a small one is alone, and
// loading its chunk and prefetching the next ones would read megabytes
// that the spans read again; the second small entry read from a chunk
// shows a run of them, which the chunk and its prefetch serve.
func (d *diskReads) aloneLocked(key chunkKey) bool {
	if d.index[key] != nil {
		return false
	}
	for _, k := range d.lately {
		if k == key {
			return false
		}
	}
	d.lately[d.latelyNext] = key
	d.latelyNext = (d.latelyNext + 1) % len(d.lately)
	return true
}

// readSpan reads e at off with one O_DIRECT read of the blocks holding
// it, into a recycled aligned buffer, and copies it out, checksumming it
// on the way (entry.CopyChecksum: the bytes the disk put in memory are
// read once, where a copy then a check read them twice). A large entry is
// read whole by whoever wants it: through the chunks, the entries of
// several partitions interleaved in a log would each hold a chunk for
// their reader, and catching-up readers far apart (each with its reads
// ahead) would evict one another's chunks before they are used.
func (d *diskReads) readSpan(off int64, e []byte, readAt func(buf []byte, off int64) (int, error)) (ok bool, sum uint32, summed bool) {
	from := off &^ (diskBlock - 1)
	to := (off + int64(len(e)) + diskBlock - 1) &^ (diskBlock - 1)
	buf := getSpanBuf(int(to - from))
	defer putSpanBuf(buf)
	n, err := readAt(buf, from)
	d.spanReads.Add(1)
	if errors.Is(err, syscall.EINVAL) { // O_DIRECT refused at the read
		d.turnOff("O_DIRECT read: " + err.Error())
	}
	if int64(n) < off-from+int64(len(e)) {
		return false, 0, false
	}
	return true, entry.CopyChecksum(e, buf[off-from:]), true
}

// Span buffers are whole huge pages (fsutil.HugeBuffer): the disk read
// into them twice as fast on the benchmark machine, where it was the
// limit of a consumer catching up. They are mapped outside Go's heap and
// kept for reuse by size, up to spanKeep bytes; more are unmapped when
// given back. Where huge pages cannot be mapped, a buffer comes from one
// sync.Pool per power of two from 2^spanMinShift bytes, each buffer
// diskBlock-aligned, on Go's heap.
const (
	spanMinShift = 16
	spanMaxShift = 26 // an entry of entry.MaxSize and two blocks fit
	// spanKeep bounds the huge span buffers kept for reuse: read-aheads
	// of consumers catching up read tens of entries at once.
	spanKeep = 64 << 20
)

var spanBufs [spanMaxShift - spanMinShift + 1]sync.Pool

// hugeSpans are the huge span buffers not in use, by size, and their
// bytes.
var hugeSpans = struct {
	sync.Mutex
	free map[int][][]byte
	kept int
}{free: map[int][][]byte{}}

// spanClass is the pool index of buffers holding n bytes, and their size;
// -1 when n is too large to pool.
func spanClass(n int) (int, int) {
	k := max(bits.Len(uint(n-1)), spanMinShift)
	if k > spanMaxShift {
		return -1, n
	}
	return k - spanMinShift, 1 << k
}

// getSpanBuf returns an aligned buffer of n bytes, n a multiple of
// diskBlock, recycled where one was put back: whole huge pages where they
// can be mapped.
func getSpanBuf(n int) []byte {
	size := (n + fsutil.HugePageSize - 1) &^ (fsutil.HugePageSize - 1)
	hugeSpans.Lock()
	if free := hugeSpans.free[size]; len(free) > 0 {
		b := free[len(free)-1]
		hugeSpans.free[size] = free[:len(free)-1]
		hugeSpans.kept -= size
		hugeSpans.Unlock()
		return b[:n]
	}
	hugeSpans.Unlock()
	if b := fsutil.HugeBuffer(n); b != nil {
		return b[:n]
	}
	i, size := spanClass(n)
	if i >= 0 {
		if p, ok := spanBufs[i].Get().(*[]byte); ok {
			return (*p)[:n]
		}
	}
	return fsutil.AlignedBuffer(size, diskBlock)[:n]
}

// putSpanBuf gives b, from getSpanBuf, back.
func putSpanBuf(b []byte) {
	if fsutil.IsHugeBuffer(b) {
		b = b[:cap(b)]
		hugeSpans.Lock()
		if hugeSpans.kept+len(b) <= spanKeep {
			hugeSpans.free[len(b)] = append(hugeSpans.free[len(b)], b)
			hugeSpans.kept += len(b)
			b = nil
		}
		hugeSpans.Unlock()
		if b != nil {
			fsutil.FreeHugeBuffer(b)
		}
		return
	}
	if i, size := spanClass(cap(b)); i >= 0 && size == cap(b) {
		b = b[:0]
		spanBufs[i].Put(&b)
	}
}

// chunkLocked returns the chunk at key holding at least its first need
// bytes, with a reference the caller drops; it waits for a chunk being
// read, and reads one (again, if it was read short before the file grew)
// into the least recently used buffer. nil: the chunk read failed or is
// short of need. Its diskPrefetchAfter-th use starts reads of the next ones
// (prefetchLocked).
func (d *diskReads) chunkLocked(key chunkKey, need int64, readAt func(buf []byte, off int64) (int, error)) *diskChunk {
	for {
		c := d.index[key]
		switch {
		case c != nil && c.loading:
			d.cond.Wait()
			continue
		case c != nil && int64(c.n) >= need:
			d.useLocked(c, readAt)
			return c
		case c != nil && c.refs > 0: // short, and in use: read it again once free
			d.cond.Wait()
			continue
		case c == nil:
			if c = d.victimLocked(); c == nil { // every chunk in use
				d.cond.Wait()
				continue
			}
		}
		d.startLoadLocked(c, key)
		d.mu.Unlock()
		n, err := readAt(c.buf, key.start)
		d.mu.Lock()
		if !d.endLoadLocked(c, n, err) || int64(c.n) < need { // c.n: the bytes trusted
			return nil
		}
		d.useLocked(c, readAt)
		return c
	}
}

// useLocked takes a reference to c for a read; the diskPrefetchAfter-th
// one prefetches.
func (d *diskReads) useLocked(c *diskChunk, readAt func(buf []byte, off int64) (int, error)) {
	c.refs++
	d.tick++
	c.used = d.tick
	if c.uses++; c.uses == diskPrefetchAfter {
		d.prefetchLocked(c.key, readAt)
	}
}

// prefetchLocked starts reading the diskPrefetch chunks after key, those
// wholly dropped and not held, in the background: a consumer catching up
// reads on, and finds them read (the kernel's read-ahead does the same
// for reads through the page cache).
func (d *diskReads) prefetchLocked(key chunkKey, readAt func(buf []byte, off int64) (int, error)) {
	for i := range int64(diskPrefetch) {
		next := chunkKey{key.log, key.start + (i+1)*diskChunkSize}
		if next.start+diskChunkSize > d.marks[key.log] || d.index[next] != nil {
			continue
		}
		c := d.victimLocked()
		if c == nil {
			return
		}
		d.startLoadLocked(c, next)
		go func() {
			n, err := readAt(c.buf, next.start)
			d.mu.Lock()
			d.endLoadLocked(c, n, err)
			d.mu.Unlock()
		}()
	}
}

// startLoadLocked makes c the chunk at key, being read.
func (d *diskReads) startLoadLocked(c *diskChunk, key chunkKey) {
	if c.occupied {
		delete(d.index, c.key)
	}
	if c.buf == nil {
		c.buf = fsutil.AlignedBuffer(diskChunkSize, diskBlock)
	}
	c.key, c.n, c.loading, c.occupied, c.uses = key, 0, true, true, 0
	c.mark = d.marks[key.log]
	d.index[key] = c
	d.reads++
}

// endLoadLocked records the read of c: n bytes, or none and a failure,
// which frees it (false), as does its log's removal while it was read
// (forget leaves a chunk being read to this).
func (d *diskReads) endLoadLocked(c *diskChunk, n int, err error) bool {
	c.loading = false
	d.cond.Broadcast()
	if errors.Is(err, syscall.EINVAL) { // O_DIRECT refused at the read
		d.turnOffLocked("O_DIRECT read: " + err.Error())
	}
	_, kept := d.marks[c.key.log] // forget dropped it meanwhile: the log is gone
	// Bytes past the mark when the read started may have been written
	// over since (a direct write's padding): they are not trusted.
	n = int(min(int64(n), max(0, c.mark-c.key.start)))
	if n <= 0 || !kept {
		delete(d.index, c.key)
		c.occupied = false
		return false
	}
	c.n = n
	return true
}

// victimLocked is the least recently used chunk nobody is using, or nil.
func (d *diskReads) victimLocked() *diskChunk {
	var v *diskChunk
	oldest := uint64(math.MaxUint64)
	for i := range d.chunks {
		c := &d.chunks[i]
		if !c.occupied {
			return c
		}
		if !c.loading && c.refs == 0 && c.used < oldest {
			v, oldest = c, c.used
		}
	}
	return v
}
