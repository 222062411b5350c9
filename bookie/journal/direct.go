package journal

import (
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/internal/fsutil"
)

// Direct I/O. Records are written with O_DIRECT where the file system
// allows it (Options.BufferedIO turns it off): the journal is read only by
// recovery, so copying its records into the page cache only costs, and on
// the benchmark machine (a virtual machine whose memory is handed back to
// the host when free) each new page-cache page costs more than the disk
// write itself. There, 1 MiB writes each followed by fdatasync reached
// 183–280 MB/s at 2.2–4.3 ms of CPU per MB through the page cache, and
// 800–830 MB/s at 0.4–0.5 ms per MB with O_DIRECT (docs/BENCHMARKS.md).
// fdatasync still follows every group: O_DIRECT bypasses the page cache,
// not the device's write cache, and it also makes a new file's size
// durable.
//
// O_DIRECT needs file offsets, lengths and memory aligned to the device's
// logical block size; directAlign (4 KiB) is a multiple of every common
// one. A group is written from the start of the block holding the file's
// end, so the writer keeps that block's bytes so far (the tail: the file
// header at first, then the end of the last group) at the front of its
// aligned buffer, appends the group's records after them, and pads the
// write with zeros to a block boundary. The next group rewrites the tail
// block with the same leading bytes, so a torn rewrite leaves earlier
// records as they were; the zeros after the last record read as a zeroed
// record header, which recovery treats as the end of the records (cut off
// after a crash; a closed or rotated file's header says where its records
// end). The file header and its end field are still written
// through the page cache (vfs), and synced, before or after all direct
// writes to their block, so each write sees the other's bytes. A file
// system that takes O_DIRECT at open but refuses the write (EINVAL) gets
// that group, and every later one, through the page cache (writeAndSync).
const directAlign = 4096

// directMinGroup: groups smaller than this are written through the page
// cache (whole blocks all the same, so that no write has to read a block
// first). Measured on the benchmark machine at 5,000 and 20,000 adds/s,
// where groups are 1–100 KiB, O_DIRECT gave journal syncs a longer tail
// (p99 2.2–5.8 ms against 1.4–3.8) and publishes a much longer one; large
// groups, where the page cache's cost per byte tells, gain the most.
const directMinGroup = 128 << 10

// directFile is the O_DIRECT descriptor of the current journal file and
// the aligned buffer its groups are assembled in.
type directFile struct {
	f        *os.File
	buffered vfs.File // the same file, for groups under directMinGroup
	// buf is aligned to directAlign; buf[:tail] are the bytes of the
	// file's last partial block so far, which start at a multiple of
	// directAlign.
	buf  []byte
	tail int
	// writeDirect writes with O_DIRECT (tests replace it).
	writeDirect func(b []byte, off int64) error
}

// newDirectFile opens path for direct writes; header is the file's header,
// which is all the file holds so far.
func newDirectFile(path string, buffered vfs.File, header []byte) (*directFile, error) {
	f, err := openDirect(path)
	if err != nil {
		return nil, err
	}
	d := &directFile{f: f, buffered: buffered, buf: alignedBuffer(256 << 10)}
	d.writeDirect = func(b []byte, off int64) error { return writeAll(f, b, off) }
	d.tail = copy(d.buf, header)
	return d, nil
}

// group returns a buffer holding the tail with room for n more bytes and
// the padding after them: the caller appends the group's records to it
// (without reallocating).
func (d *directFile) group(n int) []byte {
	if need := alignUp(d.tail+n) + directAlign; cap(d.buf) < need {
		b := alignedBuffer(max(need, 2*cap(d.buf)))
		copy(b, d.buf[:d.tail])
		d.buf = b
	}
	return d.buf[:d.tail]
}

// write writes b (a buffer from group, with the records appended) at off,
// the offset of the tail's first byte, padded with zeros to a block
// boundary; then keeps the new tail. It reports whether it wrote (or
// tried to write) with O_DIRECT.
func (d *directFile) write(b []byte, off int64) (direct bool, err error) {
	if &b[:1][0] != &d.buf[:1][0] {
		return false, fmt.Errorf("journal: direct write of a buffer not from group")
	}
	end := len(b)
	padded := alignUp(end)
	clear(d.buf[end:padded])
	direct = end-d.tail >= directMinGroup
	if direct {
		err = d.writeDirect(d.buf[:padded], off)
	} else {
		err = writeFull(d.buffered, d.buf[:padded], off)
	}
	if err != nil {
		return direct, err
	}
	last := end - end%directAlign
	d.tail = copy(d.buf, d.buf[last:end])
	return direct, nil
}

// writeAll writes b at offset off of f.
func writeAll(f *os.File, b []byte, off int64) error {
	n, err := f.WriteAt(b, off)
	if err != nil {
		return fmt.Errorf("direct write of %d bytes (%d written): %w", len(b), n, err)
	}
	return nil
}

func (d *directFile) Close() error { return d.f.Close() }

func alignUp(n int) int { return (n + directAlign - 1) &^ (directAlign - 1) }

// alignedBuffer returns at least n bytes, whole blocks, whose first byte's
// address is a multiple of directAlign.
func alignedBuffer(n int) []byte { return fsutil.AlignedBuffer(n, directAlign) }
