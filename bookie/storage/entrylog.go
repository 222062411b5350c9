package storage

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// Entry-log file format. These constants are an on-disk format.
//
//	file:   header record*
//	header: magic u32 = 0x4d474c47 ("MGLG") | version u32 = 1
//	record: length u32 | entry (length bytes, bookie/entry format)
//
// Big-endian. The entry carries its own CRC-32C, so a record needs no
// other checksum; the length prefix lets a scan walk the file and lets a
// read check that the index and the file agree. The index points at the
// entry bytes, just after the length prefix.
const (
	logMagic         = 0x4d474c47
	logVersion       = 1
	logHeaderSize    = 8
	recordPrefixSize = 4
	logSuffix        = ".log"
)

// writebackBytes: each time this many more bytes of a log reach its file,
// the applier asks the kernel to start writing them back (writeback:
// SyncTo, which on Linux is sync_file_range; no durability). Entry-log
// pages then go to the disk steadily, beside the journal, instead of
// piling up as gigabytes of dirty pages that the kernel flushes in a burst
// or the next checkpoint's fsync has to write at once, stalling journal
// fsyncs behind them; and since SyncTo first waits for the writeback it
// asked for last time, an applier faster than the disk is held back there
// rather than the journal.
const writebackBytes = 512 << 10

// writeCategory tags entry-log writes for vfs disk-health accounting.
const writeCategory vfs.DiskWriteCategory = "magnetar-entrylog"

// errLogGone: the entry log was removed (by GC) between an index lookup
// and the read; the caller looks the entry up again.
var errLogGone = errors.New("storage: entry log removed")

// location is where an entry lives: log id, offset of the entry bytes
// (after the record's length prefix) and entry size.
type location struct {
	log    uint64
	offset int64
	size   uint32
}

func logFileName(id uint64) string { return fmt.Sprintf("%016x%s", id, logSuffix) }

func parseLogFileName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, logSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

// logWriter is an entry log being written (the current log) or a finished
// one whose bytes are all written to the file but not yet fsynced.
type logWriter struct {
	id      uint64
	path    string
	f       vfs.File
	direct  *directLog // writes with O_DIRECT (directwrite.go); nil: through f
	buf     []byte     // records not yet written; buf[0] is at file offset written
	written int64
	// tail: with direct writes, the first tail bytes of buf are in the
	// file already, or in inflight's write (the last partial block
	// written, written again by the next flush).
	tail int
	// inflight: with direct writes, the write under way (or done and not
	// yet collected), whose bytes precede buf's tail; spare: the buffer
	// the next flush switches to (directwrite.go).
	inflight *logWrite
	spare    []byte
	ledgers  map[int64]int64 // record bytes per ledger, for the log's metadata
	// writeback is the offset up to which writeback was last asked for
	// (writebackBytes). Guarded by entryLogs.mu.
	writeback int64
}

func (w *logWriter) size() int64 { return w.written + int64(len(w.buf)) }

// held returns the memory holding the record that starts at offset start,
// and start's index in it: the buffer from written on, before it the
// buffer of the write under way (direct writes); ok is false if the
// record is only in the file. Called under entryLogs.mu.
func (w *logWriter) held(start int64) (buf []byte, from int64, ok bool) {
	switch {
	case start >= w.written:
		return w.buf, start - w.written, true
	case w.inflight != nil && start >= w.inflight.off:
		return w.inflight.buf, start - w.inflight.off, true
	}
	return nil, 0, false
}

// close closes the log's descriptors.
func (w *logWriter) close() error {
	err := w.f.Close()
	if w.direct != nil {
		err = errors.Join(err, w.direct.close())
		w.direct = nil
	}
	w.f = nil
	return err
}

func (w *logWriter) meta() logMeta {
	return logMeta{validLength: w.size(), ledgers: w.ledgers}
}

// logReader is a shared read handle of one entry log.
type logReader struct {
	f       vfs.File
	refs    int
	removed bool

	// direct is the log opened for O_DIRECT reads (diskReads), opened
	// at the first such read; nil if it could not be.
	directOnce sync.Once
	direct     *os.File
}

// close closes the handles.
func (r *logReader) close() {
	r.f.Close()
	if r.direct != nil {
		r.direct.Close()
	}
}

// directFile is log id (of l) opened for O_DIRECT reads, or nil if it
// cannot be: not an operating-system file, or O_DIRECT refused, which
// turns disk reads off for good (logged once).
func (r *logReader) directFile(l *entryLogs, id uint64) *os.File {
	r.directOnce.Do(func() {
		if r.f.Fd() == vfs.InvalidFd {
			l.disk.turnOff("the storage's files are not operating-system files")
			return
		}
		f, err := openDirectRead(l.path(id))
		if err != nil {
			l.disk.turnOff(err.Error())
			return
		}
		r.direct = f
	})
	return r.direct
}

// entryLogs owns the entry-log files: the current log (buffered appends),
// finished logs awaiting fsync, and read handles.
//
// Invariants:
//   - Every record that starts before written is wholly in the file, and
//     the buffer holds every byte from written on, so a read is served
//     from one or the other. With direct writes, the records from the
//     in-flight write's offset to written are wholly in its buffer
//     instead, until the write is collected (and the buffer may start in
//     the middle of a record, one the file or the write holds whole).
//   - Logs are only appended to while current; a new process always
//     starts a new log, so a possibly torn tail is never appended to.
//   - A finished log leaves pending only once it is fsynced; sync hands
//     its metadata to the caller, which records it in the index. Metadata
//     in the index therefore means the log is complete and durable.
//   - After the first write or fsync failure (err), every append and sync
//     fails: what reached the disk is unknown (an fsync error may drop
//     dirty pages), so the storage goes read-only and leaves it to journal
//     replay after a restart.
type entryLogs struct {
	fs      vfs.FS
	dir     string
	maxSize int64
	bufSize int
	log     *slog.Logger

	mu       sync.Mutex
	cur      *logWriter
	pending  []*logWriter
	nextID   uint64
	dirDirty bool // a log was created since the directory was last fsynced
	err      error
	// directIO: logs created from now on are written with O_DIRECT
	// (directwrite.go).
	directIO bool
	// wbLog, wbTo: writeback of wbLog up to wbTo is due (writeback).
	wbLog *logWriter
	wbTo  int64

	// syncMu: one sync at a time; a finished log's file is closed only
	// under it (by sync), so writeback holds it too.
	syncMu sync.Mutex

	readersMu sync.Mutex
	readers   map[uint64]*logReader

	// drop, if set, drops the page-cache pages of older written bytes
	// (Options.EntryLogPageCacheKeep). Used under syncMu.
	drop *dropBehind
	// disk, set with drop or directIO, reads the bytes dropped from the
	// page cache, or written with O_DIRECT, from the disk (diskread.go).
	disk *diskReads

	// rotated gets a value (if it has room) each time a log is finished:
	// the storage checkpoints then (Open's checkpoint loop).
	rotated chan struct{}
}

// openEntryLogs starts a new current log with id firstID. direct writes
// the logs with O_DIRECT (directwrite.go). Otherwise keep > 0 keeps only
// the newest keep bytes written in the page cache (dropBehind) and reads
// older ones from the disk (diskReads).
func openEntryLogs(fs vfs.FS, dir string, maxSize int64, bufSize int, direct bool, keep int64, firstID uint64, log *slog.Logger) (*entryLogs, error) {
	l := &entryLogs{
		fs:       fs,
		dir:      dir,
		maxSize:  maxSize,
		bufSize:  bufSize,
		log:      log,
		nextID:   firstID,
		readers:  make(map[uint64]*logReader),
		directIO: direct,
		rotated:  make(chan struct{}, 1),
	}
	switch {
	case direct:
		l.disk = newDiskReads(log)
	case keep > 0:
		l.disk = newDiskReads(log)
		l.drop = newDropBehind(fs, keep, l.disk)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w, err := l.createLocked()
	if err != nil {
		return nil, err
	}
	l.cur = w
	return l, nil
}

// listLogs returns the ids of the entry logs in dir, ascending.
func listLogs(fs vfs.FS, dir string) ([]uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, n := range names {
		if id, ok := parseLogFileName(n); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

func (l *entryLogs) path(id uint64) string { return l.fs.PathJoin(l.dir, logFileName(id)) }

func (l *entryLogs) createLocked() (*logWriter, error) {
	id := l.nextID
	path := l.path(id)
	f, err := l.fs.Create(path, writeCategory)
	if err != nil {
		return nil, fmt.Errorf("storage: create entry log: %w", err)
	}
	l.nextID++
	l.dirDirty = true
	w := &logWriter{id: id, path: path, f: f, ledgers: make(map[int64]int64)}
	if l.directIO {
		if w.direct, err = openDirectLog(f, path); err != nil {
			l.directRefused(err.Error())
		}
	}
	if w.direct != nil {
		w.buf = directBuffer(l.bufSize, nil)
	} else {
		w.buf = make([]byte, 0, l.bufSize)
	}
	w.buf = binary.BigEndian.AppendUint32(w.buf, logMagic)
	w.buf = binary.BigEndian.AppendUint32(w.buf, logVersion)
	return w, nil
}

func (l *entryLogs) failLocked(err error) error {
	if l.err == nil {
		l.err = err
	}
	return l.err
}

// append adds a record for e (an entry of ledger) to the current log and
// returns where the entry is. e is copied.
func (l *entryLogs) append(ledger int64, e []byte) (location, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.err != nil {
			return location{}, l.err
		}
		if l.cur == nil {
			return location{}, ErrClosed
		}
		// An append that flushes while the write before is under way
		// waits for it without the lock, then looks again.
		if len(l.cur.buf)+recordPrefixSize+len(e) < l.bufSize || !l.awaitWriteLocked(l.cur) {
			break
		}
	}
	w := l.cur
	if len(w.buf) > 0 && len(w.buf)+recordPrefixSize+len(e) > l.bufSize {
		if err := l.flushLocked(w); err != nil {
			return location{}, err
		}
	}
	loc := location{log: w.id, offset: w.size() + recordPrefixSize, size: uint32(len(e))}
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(e)))
	w.buf = append(w.buf, e...)
	w.ledgers[ledger] += int64(recordPrefixSize + len(e))
	if len(w.buf) >= l.bufSize {
		if err := l.flushLocked(w); err != nil {
			return location{}, err
		}
	}
	if w.direct == nil && w.written-w.writeback >= writebackBytes {
		w.writeback = w.written
		l.wbLog, l.wbTo = w, w.written
	}
	if w.size() >= l.maxSize {
		if err := l.rotateLocked(); err != nil {
			return location{}, err
		}
	}
	return loc, nil
}

// writeback asks the kernel to start writing back the log bytes written
// since the last request, if writebackBytes of them are due (the applier
// calls it after a batch, holding no lock). SyncTo first waits for the
// writeback asked for last time. It is a hint, skipped while a sync runs
// (which writes the logs out anyway); but an error is a write failure like
// any other.
func (l *entryLogs) writeback() error {
	l.mu.Lock()
	w, to := l.wbLog, l.wbTo
	l.wbLog = nil
	l.mu.Unlock()
	if w == nil || !l.syncMu.TryLock() {
		return nil
	}
	defer l.syncMu.Unlock()
	if w.f == nil { // finished and closed by a sync meanwhile
		return nil
	}
	if _, err := w.f.SyncTo(to); err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.failLocked(fmt.Errorf("storage: start writeback of entry log %s: %w", w.path, err))
	}
	if l.drop != nil {
		l.drop.written(w.id, w.path, to)
	}
	return nil
}

// flushLocked writes w's buffer to its file; with direct writes it starts
// the write (flushDirectLocked), and an error may be the write before's.
// On failure the buffer is kept, so reads keep being served from it.
func (l *entryLogs) flushLocked(w *logWriter) error {
	if len(w.buf) == w.tail {
		return nil
	}
	if w.direct != nil {
		return l.flushDirectLocked(w)
	}
	// vfs.File.Write may scribble on its argument (MemFS does under the race
	// detector); the buffer is dropped right after, so that is fine.
	if _, err := w.f.Write(w.buf); err != nil {
		return l.failLocked(fmt.Errorf("storage: write entry log %s: %w", w.path, err))
	}
	w.written += int64(len(w.buf))
	w.buf = w.buf[:0]
	return nil
}

// rotateLocked finishes the current log (written, not yet synced) and
// starts the next one.
func (l *entryLogs) rotateLocked() error {
	old := l.cur
	if err := l.flushLocked(old); err != nil {
		return err
	}
	// A finished log is read from its file alone.
	if err := l.collectWriteLocked(old); err != nil {
		return err
	}
	w, err := l.createLocked()
	if err != nil {
		return l.failLocked(err)
	}
	// Written out (with direct writes, its last block too); the next log
	// has its own buffer.
	old.written, old.buf, old.tail, old.spare = old.size(), nil, 0, nil
	if l.directIO || old.direct != nil {
		l.disk.setMark(old.id, math.MaxInt64) // all of it is final in the file
	}
	l.pending = append(l.pending, old)
	l.cur = w
	select {
	case l.rotated <- struct{}{}:
	default:
	}
	return nil
}

// rotate finishes the current log now (tests use it to get finished logs).
func (l *entryLogs) rotate() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.cur == nil {
		return ErrClosed
	}
	return l.rotateLocked()
}

// sync makes every record appended so far durable: it writes the current
// log's buffer, fsyncs the current log and every finished log not yet
// synced, and the directory if logs were created. It returns the finished
// logs it synced: they are no longer tracked here, and the caller must
// record their metadata.
func (l *entryLogs) sync() ([]*logWriter, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()

	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	var files []*logWriter
	var write *logWrite
	// Flushing collects the write before, which is waited for without the
	// lock first; a few times at most, as the applier may start another
	// meanwhile (then the flush waits holding the lock).
	for range 3 {
		if l.cur == nil || !l.awaitWriteLocked(l.cur) {
			break
		}
	}
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	if l.cur != nil {
		if err := l.flushLocked(l.cur); err != nil {
			l.mu.Unlock()
			return nil, err
		}
		files = append(files, l.cur)
		write = l.cur.inflight
	}
	finished := slices.Clone(l.pending)
	files = append(files, finished...)
	dirDirty := l.dirDirty
	l.dirDirty = false
	l.mu.Unlock()

	// Wait and fsync outside mu: appends continue meanwhile. Once the
	// current log's last write is done, so are all before it (a flush
	// starts only after the one before it). Its file is only closed by
	// close(), after the last sync.
	if write != nil {
		<-write.done
		if write.err != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			return nil, l.failLocked(write.failure())
		}
	}
	for _, w := range files {
		if err := w.f.Sync(); err != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			return nil, l.failLocked(fmt.Errorf("storage: fsync entry log %s: %w", w.path, err))
		}
	}
	if dirDirty {
		if err := syncDir(l.fs, l.dir); err != nil {
			l.mu.Lock()
			defer l.mu.Unlock()
			return nil, l.failLocked(fmt.Errorf("storage: fsync entry-log directory: %w", err))
		}
	}

	l.mu.Lock()
	// Only rotation touched pending meanwhile, by appending.
	l.pending = slices.Delete(l.pending, 0, len(finished))
	l.mu.Unlock()
	for _, w := range finished {
		w.close()
	}
	return finished, nil
}

// finish ends appends: the current log becomes a finished one, for the
// last sync to return. Later appends fail with ErrClosed.
func (l *entryLogs) finish() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.cur == nil {
		return nil
	}
	if err := l.flushLocked(l.cur); err != nil {
		return err
	}
	if err := l.collectWriteLocked(l.cur); err != nil {
		return err
	}
	l.pending = append(l.pending, l.cur)
	l.cur = nil
	return nil
}

// currentID is the id of the log appends go to.
func (l *entryLogs) currentID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return 0
	}
	return l.cur.id
}

// failure is the first write or fsync failure, or nil.
func (l *entryLogs) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// read returns the entry at loc in a buffer of its own, from
// entry.NewReadBuf (the caller may Recycle it). An entry still in the
// write buffer is checked against its record's length prefix; one read
// from the file is read without it (the caller verifies the entry's
// checksum and header, which catch an index pointing anywhere else). A
// missing log is errLogGone; bytes missing or disagreeing with the index
// are a *CorruptionError. If summed, sum is the entry's checksum computed
// as it was read (entry.VerifySum).
func (l *entryLogs) read(loc location) (e []byte, sum uint32, summed bool, err error) {
	e = entry.NewReadBuf(int(loc.size))
	start := loc.offset - recordPrefixSize

	l.mu.Lock()
	if w := l.cur; w != nil && w.id == loc.log {
		if buf, from, ok := w.held(start); ok {
			if from+recordPrefixSize+int64(len(e)) > int64(len(buf)) {
				l.mu.Unlock()
				return nil, 0, false, corruptf(w.path, start, "record of %d bytes past the end of the log (%d bytes)", recordPrefixSize+len(e), w.size())
			}
			if got := binary.BigEndian.Uint32(buf[from:]); got != loc.size {
				l.mu.Unlock()
				return nil, 0, false, corruptf(w.path, start, "record length %d, index says %d", got, loc.size)
			}
			copy(e, buf[from+recordPrefixSize:])
			l.mu.Unlock()
			return e, 0, false, nil
		}
	}
	l.mu.Unlock()
	r, err := l.acquire(loc.log)
	if err != nil {
		return nil, 0, false, err
	}
	if l.disk.wanted(loc.log, loc.offset, int64(len(e))) {
		if f := r.directFile(l, loc.log); f != nil {
			if ok, sum, summed := l.disk.read(loc.log, loc.offset, e, f.ReadAt); ok {
				l.release(loc.log, r)
				return e, sum, summed, nil
			}
		}
	}
	n, err := r.f.ReadAt(e, loc.offset)
	l.release(loc.log, r)
	if n < len(e) {
		if err == nil || err == io.EOF {
			return nil, 0, false, corruptf(l.path(loc.log), start, "short log: read %d of the entry's %d bytes at %d", n, len(e), loc.offset)
		}
		return nil, 0, false, fmt.Errorf("storage: read entry log %s at %d: %w", l.path(loc.log), start, err)
	}
	return e, 0, false, nil
}

func (l *entryLogs) acquire(id uint64) (*logReader, error) {
	l.readersMu.Lock()
	defer l.readersMu.Unlock()
	if r := l.readers[id]; r != nil {
		r.refs++
		return r, nil
	}
	f, err := l.fs.Open(l.path(id))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errLogGone
		}
		return nil, fmt.Errorf("storage: open entry log: %w", err)
	}
	r := &logReader{f: f, refs: 1}
	l.readers[id] = r
	return r, nil
}

func (l *entryLogs) release(id uint64, r *logReader) {
	l.readersMu.Lock()
	defer l.readersMu.Unlock()
	r.refs--
	if r.refs == 0 && r.removed {
		r.close()
	}
}

// remove deletes a finished log. Reads in progress finish on their open
// handle; later ones get errLogGone. With no read in progress the log is
// deleted gradually (fsutil.Gradual: a 1 GiB log freed at once stalls every
// fsync, the journal's among them), at once if stop is closed meanwhile.
func (l *entryLogs) remove(id uint64, stop <-chan struct{}) error {
	gradual := true
	l.readersMu.Lock()
	if r := l.readers[id]; r != nil {
		delete(l.readers, id)
		r.removed = true
		if r.refs == 0 {
			r.close()
		} else {
			gradual = false // its cuts would show in the reads
		}
	}
	l.readersMu.Unlock()
	l.disk.forget(id)
	var err error
	if gradual {
		var stopped bool
		if stopped, err = logDeletion.DeleteGradually(l.fs, l.path(id), stop); stopped {
			err = l.fs.Remove(l.path(id))
		}
	} else {
		err = l.fs.Remove(l.path(id))
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// logDeletion is how dead logs are deleted (a variable for tests).
var logDeletion = fsutil.Gradual{}

// fileSize is the size of log id on disk.
func (l *entryLogs) fileSize(id uint64) (int64, error) {
	fi, err := l.fs.Stat(l.path(id))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// scan reads the records of a finished log from the start up to limit
// (the file's size if limit < 0), calling fn with each record's location
// and entry (verified; valid only during the call). It returns the offset
// where it stopped and, if that is before limit, bad: a *CorruptionError
// describing what it found there (a torn or corrupt record, or a file
// shorter than limit). err is an I/O error or fn's error.
func (l *entryLogs) scan(id uint64, limit int64, fn func(loc location, e []byte) error) (end int64, bad, err error) {
	path := l.path(id)
	f, err := l.fs.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, nil, err
	}
	size := fi.Size()
	if limit < 0 {
		limit = size
	}
	stop := min(limit, size)
	br := bufio.NewReaderSize(f, 1<<20)
	var hdr [logHeaderSize]byte
	if stop < logHeaderSize {
		return 0, corruptf(path, 0, "log of %d bytes has no header", size), nil
	}
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return 0, nil, err
	}
	if m, v := binary.BigEndian.Uint32(hdr[:]), binary.BigEndian.Uint32(hdr[4:]); m != logMagic || v != logVersion {
		return 0, corruptf(path, 0, "bad header: magic %08x version %d", m, v), nil
	}
	off := int64(logHeaderSize)
	buf := make([]byte, 0, 64<<10)
	for off < stop {
		var pfx [recordPrefixSize]byte
		if stop-off < recordPrefixSize {
			return off, corruptf(path, off, "torn record prefix"), nil
		}
		if _, err := io.ReadFull(br, pfx[:]); err != nil {
			return off, nil, err
		}
		n := int64(binary.BigEndian.Uint32(pfx[:]))
		if n < entry.HeaderSize || n > entry.MaxSize {
			return off, corruptf(path, off, "bad record length %d", n), nil
		}
		if off+recordPrefixSize+n > stop {
			return off, corruptf(path, off, "record of %d bytes past the end (%d)", n, stop), nil
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return off, nil, err
		}
		if _, err := entry.Verify(buf); err != nil {
			return off, corruptf(path, off, "%w", err), nil
		}
		if err := fn(location{log: id, offset: off + recordPrefixSize, size: uint32(n)}, buf); err != nil {
			return off, nil, err
		}
		off += recordPrefixSize + n
	}
	if off < limit {
		return off, corruptf(path, off, "log is %d bytes, expected %d", size, limit), nil
	}
	return off, nil, nil
}

// close closes every file. Call after the last sync.
func (l *entryLogs) close() error {
	l.mu.Lock()
	var err error
	if l.cur != nil {
		if w := l.cur.inflight; w != nil {
			<-w.done
		}
		err = l.cur.close()
		l.cur = nil
	}
	for _, w := range l.pending {
		if w.f != nil {
			w.close()
		}
	}
	l.pending = nil
	if l.err == nil {
		l.err = ErrClosed
	}
	l.mu.Unlock()
	if l.drop != nil {
		l.syncMu.Lock()
		l.drop.close()
		l.syncMu.Unlock()
	}

	l.readersMu.Lock()
	for id, r := range l.readers {
		delete(l.readers, id)
		r.removed = true
		if r.refs == 0 {
			r.close()
		}
	}
	l.readersMu.Unlock()
	return err
}
