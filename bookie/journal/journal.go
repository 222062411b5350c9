// Package journal is the bookie's write-ahead log. An add is acknowledged only
// after its journal record is fsync'd; group commit gathers concurrent appends
// into one write, and one fsync covers every group written while the one
// before it ran (syncer.go).
//
// # Files (on-disk format)
//
// A journal is a directory of files named <number>.jnl, the number being 16
// lowercase hex digits, increasing. Each run of the journal writes to a new
// file and never to one from an earlier run, whose tail may be torn. Every
// file starts with a header, followed by records back to back:
//
//	file header, version 2 (24 bytes):
//	+---------------+------------+------------------+-----------+-----------+
//	| magic "MGJNL" | version u8 | reserved 2 bytes | number    | end       |
//	| 5 bytes       | = 2        | = 0              | u64       | u64       |
//	+---------------+------------+------------------+-----------+-----------+
//
//	record (9-byte header + body):
//	+---------+------------+---------+-------------------+
//	| crc u32 | length u32 | type u8 | body (length)     |
//	+---------+------------+---------+-------------------+
//
// Integers are big-endian. number is the file's own number. end is 0 while
// the file is written; when the writer moves on to the next file it writes
// there the offset where the file's records end, and syncs it, before the
// next file exists. crc is CRC-32C (Castagnoli) over length, type and body,
// XORed with the file's salt: CRC-32C of number's 8 bytes. type is the
// caller's record type and is never 0, so a zeroed region never reads as a
// record; the writer relies on that when it pads a group written in whole
// 4 KiB blocks with zeros (direct.go), which the next group writes over.
// length is at most MaxRecordSize. Version 1 files (an 8-byte
// header: magic, version 1, reserved; unsalted checksums; no end) are still
// read. These constants (fileMagic, formatV1, formatV2, the header sizes,
// recordHeaderSize, MaxRecordSize) are an on-disk format.
//
// # Reuse of released files
//
// Release renames the files a checkpoint no longer needs to
// <number>.jnl.free instead of deleting them, and a new file reuses one:
// its header is rewritten and synced, then it is renamed to its new number
// and written over from the start. Overwriting blocks a file already has
// makes each group's fdatasync flush data only, no file-size or block
// allocation metadata (measured on ext4: 0.20 ms instead of 0.32 ms for a
// 20 KiB group, see docs/BENCHMARKS.md), and nothing is deleted on the
// write path. Records left from the file's earlier use fail the checksum
// under the new salt, and the end field says where the file's own records
// stop, so they are never replayed. At most Options.RecycledFiles free files
// are kept; others are deleted in the background a few MiB at a time, each
// step synced: deleting a 512 MiB file at once holds up the filesystem's
// journal commit (with online discard, for over 100 ms) and every fsync
// waiting on it, the journal's own among them.
//
// A Position is (file number, byte offset). Append reports a record's end
// position, the offset just after it; a checkpoint that covers every record
// up to an end position passes it to Open (replay from there) and to Release
// (let go of the files it covers).
//
// # Recovery
//
// Open reads the files in order. A file's records stop at its header's end
// when set; the bytes after it are a reused file's old data and are ignored.
// Otherwise the first damaged record of a file (cut short, checksum
// mismatch, type 0, length over MaxRecordSize, or an all-zero header) ends
// that file. In the last file that is the torn tail of a crash (or a reused
// file's old data): it is logged at warn level and cut off (the file is
// truncated, so later runs do not see it again). Zeros running from a
// record header to the end of the last file are no damage but the zeros
// written ahead of the records (prealloc.go) or a direct write's padding
// (direct.go): logged at info level and cut off the same way. In an earlier file it is
// corruption: it is logged at error level, the rest of that file is skipped,
// and replay goes on with the next file. Neither is fatal.
//
// The directory also holds a LOCK file: one Journal uses a directory at a
// time.
package journal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// Errors passed to done callbacks and returned by Close. They are wrapped:
// check with errors.Is.
var (
	// ErrClosed: the journal was closed before the append.
	ErrClosed = errors.New("journal: closed")
	// ErrTooLarge: the body exceeds MaxRecordSize.
	ErrTooLarge = errors.New("journal: record too large")
	// ErrFailed: a write, fsync or file creation failed earlier; the journal
	// accepts nothing more. The error also wraps the underlying I/O error.
	ErrFailed = errors.New("journal: failed")
	// ErrInvalidType: the record type is 0, which the format reserves.
	ErrInvalidType = errors.New("journal: record type 0 is reserved")
)

// CorruptionError reports damaged journal data and where it was found. It is
// distinct from I/O errors: corruption found during recovery is logged and
// skipped (see the package comment), never fatal.
type CorruptionError struct {
	File   string // path of the journal file
	Offset int64  // byte offset of the damaged record or header
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("journal: corruption in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Options configure Open. Zero values take the defaults.
type Options struct {
	// FS is the filesystem; default vfs.Default.
	FS vfs.FS
	// Dir is the journal directory (required; created if missing).
	Dir string
	// MaxGroupBytes closes a group once its records reach this many bytes
	// (record headers included); default 512 KiB. One record larger than
	// this forms a group on its own.
	MaxGroupBytes int
	// MaxGroupWait is the longest a group gathers records after the writer
	// took its first one; default 1 ms. It only matters with
	// NoFlushWhenQueueEmpty.
	MaxGroupWait time.Duration
	// NoFlushWhenQueueEmpty keeps a group gathering, when no more appends are
	// queued, until it reaches MaxGroupBytes or MaxGroupWait has passed. The
	// default (false) flushes as soon as the queue is empty: lowest latency,
	// and under load groups still grow, since appends queue up while the
	// previous group is being synced.
	NoFlushWhenQueueEmpty bool
	// MaxFileSize starts a new journal file once the current one is larger;
	// default 512 MiB.
	MaxFileSize int64
	// RecycledFiles is how many released files are kept for reuse by later
	// files (see the package comment); default 8, negative for none.
	RecycledFiles int
	// BufferedIO writes records through the page cache. By default they
	// are written with O_DIRECT where the file system allows it (on Linux,
	// with the default FS; see direct.go), and through the page cache
	// where it does not (logged once).
	BufferedIO bool
	// ZeroAhead is how many bytes of zeros a goroutine keeps written and
	// synced past the records of a new file, one to two times it, while
	// groups are small: fsyncs after writes over blocks the file has are
	// quicker (prealloc.go). Rounded up to 4 KiB blocks; negative for
	// none. Default: 1 MiB on the operating system's file system
	// (vfs.Default), none on any other (in memory, or wrapped: test file
	// systems, storage without fsyncs), where it only costs.
	ZeroAhead int64
	// NoSync skips the per-group fsync: throughput tests only. A machine
	// crash or power loss then loses acknowledged records. (New files, the
	// directory, and a file being rotated away from are still synced.)
	NoSync bool
	// QueueSize is how many appends may wait for the writer before Append
	// blocks; default 10,000.
	QueueSize int
	// OnSync, if set, is called on the syncer goroutine after each
	// successful fsync (with NoSync, after each hand-over of written
	// groups), with the time from the start of the first write it covers
	// to its end and the records and bytes it covers: it must be quick (a
	// metric's Observe).
	OnSync func(d time.Duration, records, bytes int)
	// Logger gets recovery and failure reports; default slog.Default().
	Logger *slog.Logger
}

const (
	defaultMaxGroupBytes = 512 << 10
	defaultMaxGroupWait  = time.Millisecond
	defaultMaxFileSize   = 512 << 20
	defaultRecycledFiles = 8
	defaultQueueSize     = 10_000
	defaultZeroAhead     = 1 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("journal: Options.Dir is required")
	}
	if o.MaxGroupBytes < 0 || o.MaxGroupWait < 0 || o.MaxFileSize < 0 || o.QueueSize < 0 {
		return o, fmt.Errorf("journal: negative option (MaxGroupBytes %d, MaxGroupWait %v, MaxFileSize %d, QueueSize %d)",
			o.MaxGroupBytes, o.MaxGroupWait, o.MaxFileSize, o.QueueSize)
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.MaxGroupBytes == 0 {
		o.MaxGroupBytes = defaultMaxGroupBytes
	}
	if o.MaxGroupWait == 0 {
		o.MaxGroupWait = defaultMaxGroupWait
	}
	if o.MaxFileSize == 0 {
		o.MaxFileSize = defaultMaxFileSize
	}
	if o.QueueSize == 0 {
		o.QueueSize = defaultQueueSize
	}
	switch {
	case o.RecycledFiles == 0:
		o.RecycledFiles = defaultRecycledFiles
	case o.RecycledFiles < 0:
		o.RecycledFiles = 0
	}
	switch {
	case o.ZeroAhead == 0 && o.FS == vfs.Default:
		o.ZeroAhead = defaultZeroAhead
	case o.ZeroAhead <= 0:
		o.ZeroAhead = 0
	default: // whole blocks, for O_DIRECT
		o.ZeroAhead = int64(alignUp(int(o.ZeroAhead)))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Position is a place in the journal: a file number and a byte offset in it.
// Positions order by (File, Offset).
type Position struct {
	File   uint64
	Offset int64
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.File < q.File || p.File == q.File && p.Offset < q.Offset
}

// String formats p as file:offset, for logs.
func (p Position) String() string { return fmt.Sprintf("%d:%d", p.File, p.Offset) }

// request is one queued append.
type request struct {
	typ  byte
	crc  uint32 // recordCRC(typ, body)
	body []byte
	done func(Position, error)
}

// Journal is an open journal. Its methods are safe for concurrent use.
type Journal struct {
	opts Options
	fs   vfs.FS
	log  *slog.Logger
	lock io.Closer // the directory lock, held until Close

	// mu guards the queue between appenders and the writer. Invariant: the
	// queue is FIFO, the writer takes from its head only, and Append puts at
	// its tail under mu, so queue order is append order.
	mu struct {
		sync.Mutex
		ring       []request // circular queue of QueueSize slots
		head, n    int       // first queued slot, queued count
		blocked    int       // Appends waiting for a free slot
		closed     bool
		writerIdle bool // the writer waits on wake
	}
	notFull sync.Cond     // on mu: the writer freed slots
	wake    chan struct{} // cap 1: work (or Close) for an idle writer
	stopped chan struct{} // closed when the writer goroutine exits

	// sync hands written groups from the writer to the syncer goroutine
	// (syncer.go), which makes them durable and calls their callbacks.
	sync syncer

	// direct: records are written with O_DIRECT (Options.BufferedIO unset,
	// the default FS, and the file system allowed it so far). Owned by
	// the writer goroutine, like w.
	direct bool

	// w is owned by the writer goroutine: Open sets it up before starting
	// the writer, and Close reads it only after the writer stopped.
	w struct {
		file   vfs.File
		direct *directFile // the current file's O_DIRECT descriptor; nil: write through file
		fill   *zeroFiller // writes zeros ahead of the records; nil: none
		num    uint64      // current file number
		path   string      // current file path
		size   int64       // bytes written to the current file
		salt   uint32      // the current file's checksum salt
		err    error       // sticky: the first failure, wrapping ErrFailed
		group  []request
		bytes  int // encoded size of group
		buf    []byte
		timer  *time.Timer
	}

	// files lists the journal files on disk in ascending order; the last is
	// the current file, which Release never lets go of.
	files struct {
		sync.Mutex
		list []fileState
		free []uint64 // numbers of the free files kept for reuse
	}
	releaseMu sync.Mutex // serializes Release

	// The trimmer deletes free files beyond RecycledFiles, gradually.
	trim        chan struct{} // cap 1: Release freed files
	stopTrim    chan struct{} // closed by Close
	trimStopped chan struct{} // closed when the trimmer exits

	// Counters for tests and benchmarks.
	syncs   atomic.Int64 // group fsyncs
	groups  atomic.Int64 // groups written
	records atomic.Int64 // records written
	// directGroups counts groups written with O_DIRECT.
	directGroups atomic.Int64
	// zeroFills counts the zero filler's writes (prealloc.go).
	zeroFills atomic.Int64
}

// fileState is what the journal knows of one of its files.
type fileState struct {
	num uint64
	// end is where the file's records end; for the current file it is not
	// final (Release never asks).
	end int64
	// reusable: written in the current format, so its number salts its
	// checksums and it may be reused.
	reusable bool
}

// Open replays every record at or after from, calling replay for each in
// journal order, then starts a new journal file for appends. The zero
// Position means from the start of the oldest file; a from whose file no
// longer exists starts at the first file after it. Otherwise from must be a
// record boundary (an end position this journal reported, or a file start):
// the bytes at from are read as a record header.
//
// replay gets each record's end position, type and body; body is valid only
// during the call. An error returned by replay stops Open and is returned.
// replay may be nil. Damaged data is handled as the package comment says and
// does not make Open fail; I/O errors do.
func Open(opts Options, from Position, replay func(end Position, typ byte, body []byte) error) (*Journal, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	fs := o.FS
	if err := fs.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: create directory %s: %w", o.Dir, err)
	}
	// The directory's own entry must be durable too, or a crash could lose
	// the whole journal.
	if parent := fs.PathDir(o.Dir); parent != o.Dir {
		if err := fsutil.SyncDir(fs, parent); err != nil {
			return nil, err
		}
	}
	lock, err := fs.Lock(fs.PathJoin(o.Dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("journal: lock %s (in use by another journal?): %w", o.Dir, err)
	}
	j := &Journal{opts: o, fs: fs, log: o.Logger, lock: lock, direct: !o.BufferedIO && fs == vfs.Default}
	if err := j.recover(from, replay); err != nil {
		lock.Close()
		return nil, err
	}
	j.mu.ring = make([]request, o.QueueSize)
	j.notFull.L = &j.mu
	j.wake = make(chan struct{}, 1)
	j.stopped = make(chan struct{})
	j.sync.cond.L = &j.sync.mu
	j.sync.stopped = make(chan struct{})
	j.w.timer = time.NewTimer(time.Hour)
	j.w.timer.Stop()
	j.trim = make(chan struct{}, 1)
	j.stopTrim = make(chan struct{})
	j.trimStopped = make(chan struct{})
	go j.run()
	go j.trimmer()
	j.trim <- struct{}{} // free files beyond RecycledFiles from earlier runs
	return j, nil
}

// recover replays the existing files and creates the first file of this run.
func (j *Journal) recover(from Position, replay func(Position, byte, []byte) error) error {
	names, err := j.fs.List(j.opts.Dir)
	if err != nil {
		return fmt.Errorf("journal: list %s: %w", j.opts.Dir, err)
	}
	var nums []uint64
	for _, name := range names {
		if num, ok := parseFileName(name); ok {
			nums = append(nums, num)
		} else if num, ok := parseFreeName(name); ok {
			j.files.free = append(j.files.free, num)
		} else if stem, ok := strings.CutSuffix(name, tmpSuffix); ok {
			if _, ok := parseFileName(stem); ok {
				// From an interrupted cut of a torn tail: the original is
				// still there, and is cut again below.
				if err := j.fs.Remove(j.fs.PathJoin(j.opts.Dir, name)); err != nil {
					return fmt.Errorf("journal: remove leftover %s: %w", name, err)
				}
			}
		}
	}
	slices.Sort(nums)
	slices.Sort(j.files.free)
	// The new file's number is above every number seen or asked for, even
	// those of files recovery removes or freed, so positions only grow and
	// a free file's name never collides with a journal file's.
	next := from.File + 1
	if len(nums) > 0 {
		next = max(next, nums[len(nums)-1]+1)
	}
	if n := len(j.files.free); n > 0 {
		next = max(next, j.files.free[n-1]+1)
	}
	r := newReplayer(j.fs, j.opts.Dir, j.log)
	kept, err := r.replayFiles(nums, from, replay)
	if err != nil {
		return err
	}
	j.files.list = kept
	if err := j.startFile(next); err != nil {
		return err
	}
	j.log.Info("journal: opened", "dir", j.opts.Dir, "from", from, "replayed_records", r.records,
		"replayed_bytes", r.bytes, "files", len(kept), "free_files", len(j.files.free), "new_file", j.w.path)
	return nil
}

// Append queues a record of type typ (any byte but 0) with the given body.
//
// body is kept, not copied, until done is called: the caller must not modify
// it until then. done is called exactly once: with the record's end position
// once the record is durable (fsync'd, unless NoSync), or with an error. For a
// record refused at once (type 0, body over MaxRecordSize, journal closed)
// done is called before Append returns; otherwise it is called on the
// journal's syncer goroutine (syncer.go), and calls are in append order:
// records are written in queue order and one goroutine calls done for
// them after the fsync covering them. After a failure every queued and
// later record gets an error wrapping ErrFailed (in order, too).
//
// done must be quick and must not block: it holds up the next fsync, and
// the writer once it is maxWrittenAhead bytes ahead of the fsyncs (a
// consumer that falls behind may block it on purpose, as backpressure, as
// bookie/storage's applier queue does). It must not call Append or Close
// synchronously: Append blocks when the queue is full until the writer
// frees a slot, and the writer, when far enough ahead, when it moves to
// the next file and on Close, waits for the goroutine running done: both
// would deadlock. Hand such work to another goroutine. done may be nil.
//
// Append blocks while QueueSize appends are already waiting for the writer.
func (j *Journal) Append(typ byte, body []byte, done func(end Position, err error)) {
	j.append(typ, body, -1, 0, done)
}

// AppendKnown is Append for a body whose tail's CRC-32C the caller
// already has: tailCRC must be the CRC-32C of body[from:] (bookie/storage
// passes an add's payload checksum, from its verified entry). The
// record's checksum is then combined from it (crc32c.Combine) instead of
// read off those bytes again. A wrong tailCRC makes a record that replay
// refuses as corrupt.
func (j *Journal) AppendKnown(typ byte, body []byte, from int, tailCRC uint32, done func(end Position, err error)) {
	if from < 0 || from > len(body) {
		callDone(done, Position{}, fmt.Errorf("journal: AppendKnown: tail from %d of a %d-byte body", from, len(body)))
		return
	}
	j.append(typ, body, from, tailCRC, done)
}

// append is Append, with the CRC-32C of body[from:] known when from >= 0.
func (j *Journal) append(typ byte, body []byte, from int, tailCRC uint32, done func(end Position, err error)) {
	if typ == 0 {
		callDone(done, Position{}, ErrInvalidType)
		return
	}
	if len(body) > MaxRecordSize {
		callDone(done, Position{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(body), MaxRecordSize))
		return
	}
	// The checksum is computed here, concurrently with other appends and
	// with the syncer's fsync of earlier groups: the writer only copies.
	var crc uint32
	if from >= 0 {
		crc = recordCRCKnown(typ, body, from, tailCRC)
	} else {
		crc = recordCRC(typ, body)
	}
	j.mu.Lock()
	if j.mu.closed {
		j.mu.Unlock()
		callDone(done, Position{}, ErrClosed)
		return
	}
	// An Append blocked here when Close is called still gets queued: the
	// writer does not stop while appenders are blocked.
	for j.mu.n == len(j.mu.ring) {
		j.mu.blocked++
		j.notFull.Wait()
		j.mu.blocked--
	}
	i := j.mu.head + j.mu.n
	if i >= len(j.mu.ring) {
		i -= len(j.mu.ring)
	}
	j.mu.ring[i] = request{typ: typ, crc: crc, body: body, done: done}
	j.mu.n++
	wake := j.mu.writerIdle
	j.mu.writerIdle = false
	j.mu.Unlock()
	if wake {
		j.signal()
	}
}

func callDone(done func(Position, error), pos Position, err error) {
	if done != nil {
		done(pos, err)
	}
}

// signal wakes the writer if it waits. A token left over from an earlier
// signal only causes a spurious wakeup: the writer rechecks under mu.
func (j *Journal) signal() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Release lets go of the journal files that lie wholly before pos: a
// checkpoint covers every record before pos. A file ending exactly at pos
// counts as wholly before it. The current file is never let go of. Files
// are renamed for reuse (up to RecycledFiles are kept, the trimmer deletes
// the others gradually) or, in the old format, deleted. Release may be
// called after Close.
func (j *Journal) Release(pos Position) error {
	j.releaseMu.Lock()
	defer j.releaseMu.Unlock()

	j.files.Lock()
	var candidates []fileState
	if n := len(j.files.list); n > 1 {
		for _, f := range j.files.list[:n-1] {
			if f.num > pos.File || f.num == pos.File && pos.Offset < f.end {
				break
			}
			candidates = append(candidates, f)
		}
	}
	j.files.Unlock()

	var done int
	var freed []uint64
	var err error
	for _, f := range candidates {
		path := j.fs.PathJoin(j.opts.Dir, fileName(f.num))
		if f.reusable {
			err = j.fs.Rename(path, j.fs.PathJoin(j.opts.Dir, freeName(f.num)))
			if err == nil {
				freed = append(freed, f.num)
			}
		} else {
			err = j.fs.Remove(path)
		}
		if err != nil {
			err = fmt.Errorf("journal: release %s: %w", path, err)
			break
		}
		done++
	}
	if done == 0 {
		return err
	}
	j.files.Lock()
	j.files.list = j.files.list[done:] // candidates are a prefix of list
	j.files.free = append(j.files.free, freed...)
	j.files.Unlock()
	if serr := fsutil.SyncDir(j.fs, j.opts.Dir); serr != nil && err == nil {
		err = serr
	}
	if len(freed) > 0 {
		select {
		case j.trim <- struct{}{}:
		default:
		}
	}
	return err
}

// takeFree removes a free file from the pool for reuse; ok is false when
// there is none.
func (j *Journal) takeFree() (num uint64, ok bool) {
	j.files.Lock()
	defer j.files.Unlock()
	n := len(j.files.free)
	if n == 0 {
		return 0, false
	}
	num = j.files.free[n-1]
	j.files.free = j.files.free[:n-1]
	return num, true
}

// freeDeletion is how free files beyond RecycledFiles are deleted (a
// variable for tests).
var freeDeletion = fsutil.Gradual{}

// trimmer deletes the free files beyond RecycledFiles, oldest first, until
// Close. A deletion Close interrupts leaves the file free, shorter: the next
// Open trims it again, or a new file reuses it.
func (j *Journal) trimmer() {
	defer close(j.trimStopped)
	for {
		select {
		case <-j.stopTrim:
			return
		case <-j.trim:
		}
		for {
			j.files.Lock()
			var num uint64
			extra := len(j.files.free) > j.opts.RecycledFiles
			if extra {
				num = j.files.free[0]
				j.files.free = j.files.free[1:]
			}
			j.files.Unlock()
			if !extra {
				break
			}
			if !j.deleteGradually(j.fs.PathJoin(j.opts.Dir, freeName(num))) {
				j.files.Lock()
				j.files.free = append([]uint64{num}, j.files.free...)
				j.files.Unlock()
				return
			}
		}
	}
}

// deleteGradually deletes the free file at path (fsutil.Gradual). It
// returns false if Close interrupted it. Failures are logged: the file is
// only garbage, and the next Open tries again.
func (j *Journal) deleteGradually(path string) bool {
	stopped, err := freeDeletion.DeleteGradually(j.fs, path, j.stopTrim)
	switch {
	case stopped:
		return false
	case err != nil:
		j.log.Warn("journal: delete free file", "file", path, "err", err)
	default:
		if err := fsutil.SyncDir(j.fs, j.opts.Dir); err != nil {
			j.log.Warn("journal: sync directory", "dir", j.opts.Dir, "err", err)
		}
	}
	return true
}

// Close writes and syncs what is queued (calling the done callbacks), stops
// the writer and closes the current file. It returns the error that failed
// the journal, if any. Appends after Close fail with ErrClosed, and so does a
// second Close.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.mu.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.mu.closed = true
	j.mu.Unlock()
	j.signal()
	<-j.stopped
	close(j.stopTrim)
	<-j.trimStopped

	// The current file is finished like a rotated one: the next Open reads
	// its records up to the end written here, not into a reused file's old
	// data (which it would cut as a torn tail).
	j.stopFiller()
	err := j.w.err
	if err == nil {
		if ferr := j.finishFile(); ferr != nil {
			err = fmt.Errorf("journal: %s on close: %w", j.w.path, ferr)
		}
	}
	if cerr := j.w.file.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("journal: close %s: %w", j.w.path, cerr)
	}
	if j.w.direct != nil {
		if cerr := j.w.direct.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("journal: close %s: %w", j.w.path, cerr)
		}
	}
	if lerr := j.lock.Close(); lerr != nil && err == nil {
		err = fmt.Errorf("journal: unlock %s: %w", j.opts.Dir, lerr)
	}
	return err
}
