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

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
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
// returns the state of the files still on disk afterwards.
func (r *replayer) replayFiles(nums []uint64, from Position, fn func(Position, byte, []byte) error) ([]fileState, error) {
	var kept []fileState
	for i, num := range nums {
		start := int64(0) // from the first record
		if num == from.File {
			start = from.Offset
		}
		st, removed, err := r.replayFile(num, start, num < from.File, i == len(nums)-1, fn)
		if err != nil {
			return nil, err
		}
		if !removed {
			kept = append(kept, st)
		}
	}
	return kept, nil
}

// replayFile replays file num from offset start (its first record if start
// is inside the header); with skip, it only learns where the file's records
// end (by its header or its size). last says whether it is the newest file, whose damage is a torn tail
// to cut rather than corruption. It reports whether it removed the file (a
// last file too short for a header, or renamed for reuse before its header
// was rewritten).
func (r *replayer) replayFile(num uint64, start int64, skip, last bool, fn func(Position, byte, []byte) error) (st fileState, removed bool, err error) {
	st.num = num
	path := r.fs.PathJoin(r.dir, fileName(num))
	f, err := r.fs.Open(path)
	if err != nil {
		return st, false, fmt.Errorf("journal: open %s: %w", path, err)
	}
	res, err := r.scan(f, path, num, start, skip, last, fn)
	f.Close() // read-only: nothing to lose
	st.end, st.reusable = res.end, res.reusable
	switch {
	case err != nil:
		return st, false, err
	case res.remove:
		if err := r.fs.Remove(path); err != nil {
			return st, false, fmt.Errorf("journal: remove torn %s: %w", path, err)
		}
		return st, true, fsutil.SyncDir(r.fs, r.dir)
	case res.cut:
		return st, false, r.truncate(path, res.end)
	}
	return st, false, nil
}

// scanResult is what scan found in a file.
type scanResult struct {
	end      int64 // where the file's records end
	reusable bool  // in the current format
	cut      bool  // the last file: cut it at end
	remove   bool  // the last file: remove it
}

// scan does the reading for replayFile.
func (r *replayer) scan(f vfs.File, path string, num uint64, start int64, skip, last bool, fn func(Position, byte, []byte) error) (scanResult, error) {
	var res scanResult
	fi, err := f.Stat()
	if err != nil {
		return res, fmt.Errorf("journal: stat %s: %w", path, err)
	}
	size := fi.Size()

	var b [headerSizeV2]byte
	n, err := f.ReadAt(b[:min(size, int64(len(b)))], 0)
	if err != nil && err != io.EOF {
		return res, fmt.Errorf("journal: read %s: %w", path, err)
	}
	h, reason := parseFileHeader(b[:n], num)
	if reason != "" {
		cerr := &CorruptionError{File: path, Offset: 0, Reason: reason}
		// In the last file, a header cut short is a crash before the header
		// was synced, and a header naming another file a crash between a
		// reused file's rename and its new header: either way no record was
		// acknowledged in it.
		short := size < headerSizeV1 || h.version == formatV2 && size < headerSizeV2
		if last && (short || h.version == formatV2 && h.num != num) {
			r.log.Warn("journal: removing torn last file", "file", path, "offset", 0, "cut_bytes", size, "err", cerr)
			res.remove = true
			return res, nil
		}
		r.log.Error("journal: bad file header, skipping the whole file", "file", path, "offset", 0, "skipped_bytes", size, "err", cerr)
		res.end = size
		return res, nil
	}
	res.reusable = h.version == formatV2
	limit := size
	if h.end != 0 {
		if h.end > size {
			r.log.Error("journal: file shorter than its records' end, reading what there is",
				"file", path, "offset", size, "end", h.end)
		} else {
			limit = h.end
		}
	}
	if skip {
		// Before the replay's start: only Release reads end, and only for
		// files at or after a checkpoint, so the size does for files
		// without one.
		res.end = limit
		return res, nil
	}
	salt := h.salt()
	off := max(start, h.size())
	if off < limit {
		r.br.Reset(io.NewSectionReader(f, off, limit-off))
	}
	for off < limit {
		typ, body, reason, err := r.next(limit-off, salt)
		if err != nil {
			return res, fmt.Errorf("journal: read %s at offset %d: %w", path, off, err)
		}
		if reason != "" {
			cerr := &CorruptionError{File: path, Offset: off, Reason: reason}
			res.end = off
			if !last || h.end != 0 {
				r.log.Error("journal: corrupt record, skipping the rest of the file",
					"file", path, "offset", off, "skipped_bytes", limit-off, "err", cerr)
				return res, nil
			}
			res.cut = true
			if reason == zeroedHeader {
				zeros, err := r.zerosToEnd(limit - off - recordHeaderSize)
				if err != nil {
					return res, fmt.Errorf("journal: read %s at offset %d: %w", path, off, err)
				}
				if zeros {
					// The zeros written ahead of the records, or the
					// padding of the last direct write: the end of the
					// records, not damage.
					r.log.Info("journal: the last file's records end where zeros begin, cutting the zeros off",
						"file", path, "offset", off, "cut_bytes", size-off)
					return res, nil
				}
			}
			r.log.Warn("journal: torn tail, cutting it off",
				"file", path, "offset", off, "cut_bytes", size-off, "reused_file", h.version == formatV2, "err", cerr)
			return res, nil
		}
		off += recordSize(len(body))
		r.records++
		r.bytes += int64(len(body))
		if fn != nil {
			if err := fn(Position{File: num, Offset: off}, typ, body); err != nil {
				return res, err
			}
		}
	}
	res.end = off
	return res, nil
}

// next reads the record at the reader's position, with remaining bytes left
// in the file, whose checksums are salted with salt. A damaged record yields a reason and no error; err is for I/O
// errors only. body is valid until the next call.
func (r *replayer) next(remaining int64, salt uint32) (typ byte, body []byte, reason string, err error) {
	if remaining < recordHeaderSize {
		return 0, nil, fmt.Sprintf("incomplete record header: %d of %d bytes", remaining, recordHeaderSize), nil
	}
	var h [recordHeaderSize]byte
	if _, err := io.ReadFull(r.br, h[:]); err != nil {
		return 0, nil, "", unexpectedEOF(err)
	}
	if h == [recordHeaderSize]byte{} {
		return 0, nil, zeroedHeader, nil
	}
	crc := binary.BigEndian.Uint32(h[0:]) ^ salt
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

// zeroedHeader is next's reason for a record header of zeros.
const zeroedHeader = "zeroed record header"

// zerosToEnd reports whether the next n bytes of the reader are all zeros.
func (r *replayer) zerosToEnd(n int64) (bool, error) {
	for n > 0 {
		b, err := r.br.Peek(int(min(n, int64(r.br.Size()))))
		if err != nil {
			return false, unexpectedEOF(err)
		}
		for _, c := range b {
			if c != 0 {
				return false, nil
			}
		}
		r.br.Discard(len(b))
		n -= int64(len(b))
	}
	return true, nil
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
	return fsutil.SyncDir(r.fs, r.dir)
}
