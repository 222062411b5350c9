package storage

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// Direct entry-log writes (Options.EntryLogDirectIO, design note 0010).
// The write buffer reaches the file with O_DIRECT: the entry logs' bytes
// take no page-cache pages on the way to the disk. Writing through
// the page cache costs the kernel's work per dirty page (allocation,
// accounting, writeback); on the benchmark machine that is 1.6–1.8 ms of
// CPU per MB written, against 0.1 with O_DIRECT, and it was the
// standalone's largest produce cost. Reads still go through the page
// cache (a log's read handle is a plain one): a consumer catching up gets
// the kernel's read-ahead, and the pages it reads stay cached for the
// next.
//
// O_DIRECT needs offsets, lengths and memory aligned to the logical block
// size (diskBlock, 4 KiB, covers every common disk), so the buffer is
// aligned, each flush writes it from the start of the block holding the
// log's end, padded with zeros to a block boundary, and the bytes of the
// last partial block are copied to the front of the next buffer for the
// next flush to write again, with what follows them. The write runs in a
// goroutine while the next buffer fills, one at a time (logWrite). A
// log's file is therefore up to a block longer than its records until the
// next flush, and a log cut by a
// crash ends in zeros, which a scan reads as a torn tail (as after any
// crash; the journal replays what the log lacks). fsync is still needed:
// O_DIRECT bypasses the page cache, not the device's write cache.
//
// Where O_DIRECT cannot be used (the storage is not on operating-system
// files, or the file system refuses it at open or at a write), the logs
// are written through the page cache, after one warning.

// directLog is an entry log's descriptor for aligned writes at offsets.
type directLog struct {
	f *os.File
	// direct: f was opened with O_DIRECT (false after a refused write
	// reopened it without).
	direct bool
}

// openDirectLog opens the entry log at path, just created as f, for
// direct writes; nil and why if it cannot be.
func openDirectLog(f vfs.File, path string) (*directLog, error) {
	if f.Fd() == vfs.InvalidFd {
		return nil, errors.New("the storage's files are not operating-system files")
	}
	d, err := openDirectWrite(path)
	if err != nil {
		return nil, err
	}
	return &directLog{f: d, direct: true}, nil
}

// writeAt writes b at off. An O_DIRECT write the file system refuses
// (EINVAL) is written again through the page cache, on a descriptor
// reopened without O_DIRECT; refused is then true.
func (d *directLog) writeAt(path string, b []byte, off int64) (refused bool, err error) {
	if !d.direct {
		_, err = d.f.WriteAt(b, off)
		return false, err
	}
	if _, err = directWriteAt(d.f, b, off); err == nil || !errors.Is(err, syscall.EINVAL) {
		return false, err
	}
	f, oerr := os.OpenFile(path, os.O_WRONLY, 0)
	if oerr != nil {
		return true, errors.Join(err, oerr)
	}
	d.f.Close()
	d.f, d.direct = f, false
	_, err = d.f.WriteAt(b, off)
	return true, err
}

func (d *directLog) close() error { return d.f.Close() }

// directWriteAt makes the O_DIRECT writes (tests check them).
var directWriteAt = (*os.File).WriteAt

// directBuffer returns an aligned write buffer of capacity bufSize plus a
// block (room for the padding), holding b's bytes.
func directBuffer(bufSize int, b []byte) []byte {
	buf := fsutil.AlignedBuffer(max(bufSize, len(b))+diskBlock, diskBlock)
	return buf[:copy(buf, b)]
}

// aligned reports whether b starts at a multiple of diskBlock and has room
// for n bytes.
func aligned(b []byte, n int) bool {
	return cap(b) >= n && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%diskBlock == 0
}

// logWrite is a direct flush under way: buf (the bytes it holds, without
// the padding) written at off, by a goroutine of its own; done is closed
// when the write has returned, with refused and err.
type logWrite struct {
	buf     []byte
	off     int64
	done    chan struct{}
	refused bool
	err     error
	path    string
}

// failure is the write's error, for the storage's failure.
func (lw *logWrite) failure() error {
	return fmt.Errorf("storage: write entry log %s: %w", lw.path, lw.err)
}

// flushDirectLocked starts writing w's buffer at w.written (a block
// boundary), padded with zeros to the next one, and returns without
// waiting for the disk: the applier goes on filling a second buffer while
// the first is written. The write before it, if any, is collected first,
// so one write is under way at a time and they reach the file in order.
// The new buffer starts with the last partial block's bytes, w.written
// moving to the block's start; the bytes before it are read from the
// write's buffer until the write is collected (entryLogs.read). The
// write before is done by then, as a rule: append and sync wait for it
// without the lock first (awaitWriteLocked). Only a rotation, or a
// checkpoint the applier keeps overtaking, waits for it holding
// entryLogs.mu.
func (l *entryLogs) flushDirectLocked(w *logWriter) error {
	if err := l.collectWriteLocked(w); err != nil {
		return err
	}
	n := len(w.buf)
	padded := (n + diskBlock - 1) &^ (diskBlock - 1)
	if !aligned(w.buf, padded) { // an entry larger than the buffer grew it
		w.buf = directBuffer(l.bufSize, w.buf)
	}
	clear(w.buf[n:padded])
	lw := &logWrite{buf: w.buf[:n], off: w.written, done: make(chan struct{}), path: w.path}
	go func(d *directLog, b []byte) {
		lw.refused, lw.err = d.writeAt(lw.path, b, lw.off)
		close(lw.done)
	}(w.direct, w.buf[:padded])
	w.inflight = lw

	last := n &^ (diskBlock - 1)
	next := w.spare
	if next == nil {
		next = directBuffer(l.bufSize, nil)
	}
	w.spare = nil
	w.buf = next[:copy(next[:cap(next)], lw.buf[last:n])]
	w.tail = len(w.buf)
	w.written += int64(last)
	return nil
}

// awaitWriteLocked waits for w's write under way, if it is not done yet,
// with l.mu released, and reports whether it did: the caller, about to
// flush (which collects the write), then looks at everything again. So
// the applier a whole buffer ahead of the disk, or a checkpoint, waits for
// the disk without holding up the reads and the other appender (GC).
func (l *entryLogs) awaitWriteLocked(w *logWriter) bool {
	lw := w.inflight
	if lw == nil {
		return false
	}
	select {
	case <-lw.done:
		return false
	default:
	}
	l.mu.Unlock()
	if awaitingWrite != nil {
		awaitingWrite()
	}
	<-lw.done
	l.mu.Lock()
	return true
}

// awaitingWrite, if set, is called by awaitWriteLocked before it waits
// (tests).
var awaitingWrite func()

// collectWriteLocked waits for w's write under way, if any, and takes its
// buffer back as the spare. A failed write stays in place, so reads keep
// being served from its buffer, and fails the storage.
func (l *entryLogs) collectWriteLocked(w *logWriter) error {
	lw := w.inflight
	if lw == nil {
		return nil
	}
	<-lw.done
	if lw.refused {
		l.directRefused(fmt.Sprintf("O_DIRECT write of %s: refused", w.path))
	}
	if lw.err != nil {
		return l.failLocked(lw.failure())
	}
	w.inflight = nil
	// Its whole blocks are final in the file: the next flush starts at
	// the last one's end.
	l.disk.setMark(w.id, lw.off+int64(len(lw.buf)&^(diskBlock-1)))
	if cap(lw.buf) < 2*(l.bufSize+diskBlock) { // not one an outsize entry grew
		w.spare = lw.buf[:0]
	}
	return nil
}

// directRefused turns direct writes off for the logs created from now on,
// saying why in a warning the first time.
func (l *entryLogs) directRefused(why string) {
	if l.directIO {
		l.directIO = false
		l.log.Warn("storage: entry logs are written through the page cache, since O_DIRECT cannot be used", "reason", why)
	}
}
