package journal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// replayer reads journal files for Open, reusing its buffers across records
// and files.
type replayer struct {
	fs   vfs.FS
	dir  string
	log  *slog.Logger
	br   *bufio.Reader
	body []byte

	records, bytes int64 // replayed so far
}

func newReplayer(fs vfs.FS, dir string, log *slog.Logger) *replayer {
	return &replayer{fs: fs, dir: dir, log: log, br: bufio.NewReaderSize(nil, 256<<10)}
}

// replayFiles replays the files nums (ascending) from position from and
// returns the numbers of the files still on disk afterwards.
func (r *replayer) replayFiles(nums []uint64, from Position, fn func(Position, byte, []byte) error) ([]uint64, error) {
	kept := nums[:0:0]
	for i, num := range nums {
		if num < from.File {
			kept = append(kept, num)
			continue
		}
		start := int64(fileHeaderSize)
		if num == from.File {
			start = max(start, from.Offset)
		}
		removed, err := r.replayFile(num, start, i == len(nums)-1, fn)
		if err != nil {
			return nil, err
		}
		if !removed {
			kept = append(kept, num)
		}
	}
	return kept, nil
}

// replayFile replays file num from offset start. last says whether it is the
// newest file, whose damage is a torn tail to cut rather than corruption. It
// reports whether it removed the file (a last file too short for a header).
func (r *replayer) replayFile(num uint64, start int64, last bool, fn func(Position, byte, []byte) error) (removed bool, err error) {
	path := r.fs.PathJoin(r.dir, fileName(num))
	f, err := r.fs.Open(path)
	if err != nil {
		return false, fmt.Errorf("journal: open %s: %w", path, err)
	}
	cut, remove, err := r.scan(f, path, num, start, last, fn)
	f.Close() // read-only: nothing to lose
	switch {
	case err != nil:
		return false, err
	case remove:
		if err := r.fs.Remove(path); err != nil {
			return false, fmt.Errorf("journal: remove torn %s: %w", path, err)
		}
		return true, syncDir(r.fs, r.dir)
	case cut >= 0:
		return false, r.truncate(path, cut)
	}
	return false, nil
}

// scan does the reading for replayFile. In the last file it returns where to
// cut a torn tail (cut >= 0), or that the file is to be removed; otherwise
// cut is -1.
func (r *replayer) scan(f vfs.File, path string, num uint64, start int64, last bool, fn func(Position, byte, []byte) error) (cut int64, remove bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return -1, false, fmt.Errorf("journal: stat %s: %w", path, err)
	}
	size := fi.Size()

	var hdr [fileHeaderSize]byte
	if n, err := f.ReadAt(hdr[:], 0); n < len(hdr) && err != nil && err != io.EOF {
		return -1, false, fmt.Errorf("journal: read %s: %w", path, err)
	}
	if reason := checkFileHeader(hdr[:min(size, int64(len(hdr)))]); reason != "" {
		cerr := &CorruptionError{File: path, Offset: 0, Reason: reason}
		if last && size < fileHeaderSize {
			// Created by a run that crashed before the header was synced:
			// no record can have been acknowledged in it.
			r.log.Warn("journal: removing torn last file", "file", path, "offset", 0, "cut_bytes", size, "err", cerr)
			return -1, true, nil
		}
		r.log.Error("journal: bad file header, skipping the whole file", "file", path, "offset", 0, "skipped_bytes", size, "err", cerr)
		return -1, false, nil
	}

	off := start
	if off < size {
		r.br.Reset(io.NewSectionReader(f, off, size-off))
	}
	for off < size {
		typ, body, reason, err := r.next(size - off)
		if err != nil {
			return -1, false, fmt.Errorf("journal: read %s at offset %d: %w", path, off, err)
		}
		if reason != "" {
			cerr := &CorruptionError{File: path, Offset: off, Reason: reason}
			if !last {
				r.log.Error("journal: corrupt record, skipping the rest of the file",
					"file", path, "offset", off, "skipped_bytes", size-off, "err", cerr)
				return -1, false, nil
			}
			r.log.Warn("journal: torn tail, cutting it off",
				"file", path, "offset", off, "cut_bytes", size-off, "err", cerr)
			return off, false, nil
		}
		off += recordSize(len(body))
		r.records++
		r.bytes += int64(len(body))
		if fn != nil {
			if err := fn(Position{File: num, Offset: off}, typ, body); err != nil {
				return -1, false, err
			}
		}
	}
	return -1, false, nil
}

// next reads the record at the reader's position, with remaining bytes left
// in the file. A damaged record yields a reason and no error; err is for I/O
// errors only. body is valid until the next call.
func (r *replayer) next(remaining int64) (typ byte, body []byte, reason string, err error) {
	if remaining < recordHeaderSize {
		return 0, nil, fmt.Sprintf("incomplete record header: %d of %d bytes", remaining, recordHeaderSize), nil
	}
	var h [recordHeaderSize]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return 0, nil, "", unexpectedEOF(err)
	}
	if h == [recordHeaderSize]byte{} {
		return 0, nil, "zeroed record header", nil
	}
	crc := binary.BigEndian.Uint32(h[0:])
	length := binary.BigEndian.Uint32(h[4:])
	typ = h[8]
	switch {
	case length > MaxRecordSize:
		return 0, nil, fmt.Sprintf("impossible record length %d (limit %d)", length, MaxRecordSize), nil
	case typ == 0:
		return 0, nil, "record type 0", nil
	case int64(length) > remaining-recordHeaderSize:
		return 0, nil, fmt.Sprintf("incomplete record: body of %d bytes, %d left in file", length, remaining-recordHeaderSize), nil
	}
	if cap(r.body) < int(length) {
		r.body = make([]byte, length)
	}
	body = r.body[:length]
	if _, err := io.ReadFull(r.br, body); err != nil {
		return 0, nil, "", unexpectedEOF(err)
	}
	got := crc32.Update(crc32.Checksum(h[4:], castagnoli), castagnoli, body)
	if got != crc {
		return 0, nil, fmt.Sprintf("checksum mismatch: computed %08x, stored %08x", got, crc), nil
	}
	return typ, body, "", nil
}

// unexpectedEOF turns EOF inside bytes the file's size promised into an error
// (the file shrank under us); other errors pass through.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// truncate cuts file path at size and makes that durable. vfs.File has no
// Truncate; files that have one (vfs.Default's) are truncated in place, others
// are rewritten: the prefix is copied to path+tmpSuffix, synced, and renamed
// over path.
func (r *replayer) truncate(path string, size int64) error {
	f, err := r.fs.OpenReadWrite(path, writeCategory)
	if err != nil {
		return fmt.Errorf("journal: open %s to cut its tail: %w", path, err)
	}
	if t, ok := f.(interface{ Truncate(int64) error }); ok {
		err = t.Truncate(size)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("journal: cut tail of %s at %d: %w", path, size, err)
		}
		return nil
	}
	defer f.Close()

	tmp := path + tmpSuffix
	t, err := r.fs.Create(tmp, writeCategory)
	if err != nil {
		return fmt.Errorf("journal: cut tail of %s: %w", path, err)
	}
	_, err = io.Copy(t, io.NewSectionReader(f, 0, size))
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.fs.Rename(tmp, path)
	}
	if err != nil {
		_ = r.fs.Remove(tmp)
		return fmt.Errorf("journal: cut tail of %s at %d: %w", path, size, err)
	}
	return syncDir(r.fs, r.dir)
}
