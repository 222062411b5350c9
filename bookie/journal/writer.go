package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

const writeCategory vfs.DiskWriteCategory = "journal"

// run is the writer goroutine: it alone writes and rotates files; the
// syncer goroutine (syncer.go) makes what it wrote durable and calls the
// done callbacks. While the syncer syncs, the next group gathers in the
// queue and is written, which is where batching comes from under load;
// the appenders have computed its checksums meanwhile, so the writer only
// gathers, copies and writes.
func (j *Journal) run() {
	defer close(j.stopped)
	go j.syncLoop()
	for j.gather() {
		j.commit()
	}
	j.sync.stop()
	if j.w.err == nil {
		j.w.err = j.sync.failure()
	}
}

// gather moves the next group from the queue into j.w.group. It returns
// false once the journal is closed and nothing is left to write.
//
// A group closes when it reaches MaxGroupBytes; or, by default, when the
// queue is empty; or, with NoFlushWhenQueueEmpty, when MaxGroupWait has passed
// since the writer took its first record, or on Close.
func (j *Journal) gather() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.mu.n == 0 {
		// Blocked appenders started before Close: wait for them.
		if j.mu.closed && j.mu.blocked == 0 {
			return false
		}
		j.waitLocked(0)
	}
	j.takeLocked()
	if !j.opts.NoFlushWhenQueueEmpty {
		return true
	}
	deadline := time.Now().Add(j.opts.MaxGroupWait)
	for j.w.bytes < j.opts.MaxGroupBytes && !j.mu.closed {
		if j.mu.n > 0 {
			j.takeLocked()
			continue
		}
		d := time.Until(deadline)
		if d <= 0 {
			break
		}
		j.waitLocked(d)
	}
	return true
}

// takeLocked moves records from the head of the queue into the group until
// the queue is empty or the group is full.
func (j *Journal) takeLocked() {
	ring := j.mu.ring
	for j.mu.n > 0 && j.w.bytes < j.opts.MaxGroupBytes {
		r := &ring[j.mu.head]
		j.w.group = append(j.w.group, *r)
		j.w.bytes += int(recordSize(len(r.body)))
		*r = request{} // drop the references for the GC
		j.mu.head++
		if j.mu.head == len(ring) {
			j.mu.head = 0
		}
		j.mu.n--
	}
	if j.mu.blocked > 0 {
		j.notFull.Broadcast()
	}
}

// waitLocked releases mu until an Append or Close signals, or d passes if
// d > 0.
func (j *Journal) waitLocked(d time.Duration) {
	j.mu.writerIdle = true
	j.mu.Unlock()
	if d > 0 {
		j.w.timer.Reset(d)
		select {
		case <-j.wake:
		case <-j.w.timer.C:
		}
		j.w.timer.Stop()
	} else {
		<-j.wake
	}
	j.mu.Lock()
	j.mu.writerIdle = false
}

// commit writes the group with one Write and hands it to the syncer,
// which syncs it and calls its done callbacks. Groups are written and
// handed over in queue order, and the syncer calls callbacks in that
// order, each after an fsync covering its record. No lock is held.
func (j *Journal) commit() {
	g := j.w.group
	start := j.w.size
	if j.w.err == nil {
		if err := j.sync.failure(); err != nil {
			j.w.err = err // logged by the syncer
		}
	}
	w := written{group: g, file: j.w.file, fill: j.w.fill, num: j.w.num, path: j.w.path, start: start, err: j.w.err}
	if j.w.err == nil {
		// With direct I/O the buffer starts with the tail block's bytes
		// written before (pre of them); the records follow.
		var buf []byte
		if j.w.direct != nil {
			buf = j.w.direct.group(j.w.bytes)
		} else {
			buf = slices.Grow(j.w.buf[:0], j.w.bytes)
		}
		pre := len(buf)
		for i := range g {
			buf = appendRecordCRC(buf, g[i].crc^j.w.salt, g[i].typ, g[i].body)
		}
		if j.w.direct == nil {
			j.w.buf = buf
		}
		w.began = time.Now()
		small, err := j.write(buf, start-int64(pre))
		if err != nil {
			j.fail(err, start)
			w.err = j.w.err
		} else {
			w.bytes, w.small = len(buf)-pre, small
			j.w.size += int64(len(buf) - pre)
			j.groups.Add(1)
			j.records.Add(int64(len(g)))
		}
	}
	j.w.group = j.sync.handOver(w)
	j.w.bytes = 0
	if j.w.err == nil && j.w.size > j.opts.MaxFileSize {
		// Every record of the file is synced before it is finished.
		if err := j.sync.drain(); err != nil {
			j.w.err = err
			return
		}
		j.rotate()
	}
}

// write writes buf at offset off of the current file (off is the file's
// end, or with direct I/O the start of its tail block, whose bytes so far
// begin buf), for the syncer to make durable. It reports whether it wrote
// through the page cache (small). A short write is a failure even without
// an error: the file now ends mid-group.
func (j *Journal) write(buf []byte, off int64) (small bool, err error) {
	if z := j.w.fill; z != nil {
		to := off + int64(len(buf))
		if j.w.direct != nil {
			to = off + int64(alignUp(len(buf))) // written padded
		}
		z.claim(off, to)
	}
	written, small := false, true
	if d := j.w.direct; d != nil {
		direct, err := d.write(buf, off)
		switch {
		case direct && errors.Is(err, syscall.EINVAL):
			// O_DIRECT taken at open, refused for the write, before any
			// byte moved: this group and all later ones, in this file
			// and the next, go through the page cache. (buf starts at
			// off with the bytes already there: written again as they
			// are.)
			j.log.Warn("journal: the file system refused an O_DIRECT write; writing through the page cache from now on",
				"file", j.w.path, "offset", off, "err", err)
			j.direct, j.w.direct = false, nil
			j.stopFiller() // it writes through d
			if cerr := d.Close(); cerr != nil {
				j.log.Warn("journal: close the direct descriptor", "file", j.w.path, "err", cerr)
			}
		case err != nil:
			return small, err
		default:
			written = true
			if direct {
				j.directGroups.Add(1)
				small = false
			}
		}
	}
	if !written {
		if err := writeFull(j.w.file, buf, off); err != nil {
			return small, err
		}
	}
	return small, nil
}

// writeFull writes b at offset off of f: at the end of a new file, or over
// the old data of a reused one.
func writeFull(f vfs.File, b []byte, off int64) error {
	n, err := f.WriteAt(b, off)
	if err != nil {
		return fmt.Errorf("write of %d bytes (%d written): %w", len(b), n, err)
	}
	if n != len(b) {
		return fmt.Errorf("write of %d bytes: %d written: %w", len(b), n, io.ErrShortWrite)
	}
	return nil
}

// fail puts the journal in the failed state: this and every later record
// gets the error. Nothing is retried: after a failed fsync the kernel may
// have dropped the dirty pages, so no later success could be trusted.
func (j *Journal) fail(err error, off int64) {
	j.w.err = fmt.Errorf("%w: %s at offset %d: %w", ErrFailed, j.w.path, off, err)
	j.log.Error("journal: write failed, refusing all further records",
		"file", j.w.path, "offset", off, "err", err)
}

// rotate moves appends to a new file after the current one passed
// MaxFileSize. The current file's header gets its end, synced, before the
// next file exists: recovery reads a finished file's records up to it and
// never into a reused file's old data after it.
func (j *Journal) rotate() {
	j.stopFiller()
	old, oldPath, oldDirect := j.w.file, j.w.path, j.w.direct
	if err := j.finishFile(); err != nil {
		j.fail(fmt.Errorf("finish the file before rotation: %w", err), j.w.size)
		return
	}
	if err := j.startFile(j.w.num + 1); err != nil {
		j.fail(err, j.w.size)
		return
	}
	if err := old.Close(); err != nil {
		// Everything in it was synced; nothing is lost.
		j.log.Warn("journal: close rotated file", "file", oldPath, "err", err)
	}
	if oldDirect != nil {
		if err := oldDirect.Close(); err != nil {
			j.log.Warn("journal: close rotated file's direct descriptor", "file", oldPath, "err", err)
		}
	}
}

// finishFile writes the current file's end into its header and syncs the
// file (its data too, for NoSync).
func (j *Journal) finishFile() error {
	var end [8]byte
	binary.BigEndian.PutUint64(end[:], uint64(j.w.size))
	if err := writeFull(j.w.file, end[:], endOffset); err != nil {
		return err
	}
	if err := j.w.file.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	j.files.Lock()
	j.files.list[len(j.files.list)-1].end = j.w.size
	j.files.Unlock()
	return nil
}

// startFile makes file num the current file: a free file reused, or a new
// one. Its header, and the directory entry, are durable before any record
// goes into it. A reused file gets its new header before its new name, so
// that under its new name it never shows its old one.
func (j *Journal) startFile(num uint64) error {
	path := j.fs.PathJoin(j.opts.Dir, fileName(num))
	f, err := j.openFile(num, path)
	if err != nil {
		return err
	}
	j.w.file, j.w.num, j.w.path, j.w.size = f, num, path, int64(fileHeaderSize)
	j.w.salt = fileSalt(num)
	j.w.direct = nil
	if j.direct {
		hdr := fileHeader{version: formatV2, num: num}.encode()
		if d, err := newDirectFile(path, f, hdr[:]); err != nil {
			// Not fatal: the page cache does the job, slower. Refused
			// by the file system: for good; anything else (out of file
			// descriptors): for this file.
			if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
				j.direct = false
			}
			j.log.Warn("journal: direct I/O (O_DIRECT) not available, writing through the page cache",
				"file", path, "for_good", !j.direct, "err", err)
		} else {
			j.w.direct = d
		}
	}
	j.startFiller()
	j.files.Lock()
	j.files.list = append(j.files.list, fileState{num: num, reusable: true})
	j.files.Unlock()
	return nil
}

// startFiller starts the current file's zero filler (prealloc.go), unless
// groups are not synced (nothing to gain) or the file's size is unknown.
func (j *Journal) startFiller() {
	j.w.fill = nil
	if j.opts.NoSync || j.opts.ZeroAhead == 0 {
		return
	}
	fi, err := j.w.file.Stat()
	if err != nil {
		j.log.Warn("journal: stat the new file; no zeros written ahead in it", "file", j.w.path, "err", err)
		return
	}
	f := j.w.file
	write := func(b []byte, off int64) error { return writeFull(f, b, off) }
	if d := j.w.direct; d != nil {
		write = func(b []byte, off int64) error { return writeAll(d.f, b, off) }
	}
	j.w.fill = newZeroFiller(j.log, j.w.path, fi.Size(), j.w.size, j.opts.ZeroAhead, write, f.SyncData, &j.zeroFills)
}

// stopFiller stops the current file's zero filler, if any.
func (j *Journal) stopFiller() {
	if j.w.fill != nil {
		j.w.fill.close()
		j.w.fill = nil
	}
}

// openFile reuses a free file as file num at path, or creates it.
func (j *Journal) openFile(num uint64, path string) (vfs.File, error) {
	hdr := fileHeader{version: formatV2, num: num}.encode()
	if free, ok := j.takeFree(); ok {
		freePath := j.fs.PathJoin(j.opts.Dir, freeName(free))
		f, err := j.fs.OpenReadWrite(freePath, writeCategory)
		if err == nil {
			err = writeFull(f, hdr[:], 0)
			if err == nil {
				err = f.Sync()
			}
			if err == nil {
				err = j.fs.Rename(freePath, path)
			}
			if err == nil {
				err = fsutil.SyncDir(j.fs, j.opts.Dir)
			}
			if err == nil {
				return f, nil
			}
			f.Close()
		}
		// The free file is garbage now; a new file does the job.
		j.log.Warn("journal: reuse of a free file failed, creating a new one", "file", freePath, "err", err)
		_ = j.fs.Remove(freePath)
		_ = j.fs.Remove(path)
	}
	f, err := j.fs.Create(path, writeCategory)
	if err != nil {
		return nil, fmt.Errorf("journal: create %s: %w", path, err)
	}
	err = writeFull(f, hdr[:], 0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = fsutil.SyncDir(j.fs, j.opts.Dir)
	}
	if err != nil {
		f.Close()
		_ = j.fs.Remove(path) // best effort: recovery copes with a bad file too
		return nil, fmt.Errorf("journal: start %s: %w", path, err)
	}
	return f, nil
}
