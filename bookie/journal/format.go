package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/magnetar-io/magnetar/bookie/internal/crc32c"
)

// On-disk format. Changing any of these constants changes the format: add a
// version and keep reading the old ones.
const (
	// fileMagic opens every journal file.
	fileMagic = "MGJNL"
	// formatV1 files have an 8-byte header and unsalted record checksums.
	// They are still read; new files are written as formatV2.
	formatV1 = 1
	// formatV2 files have a 24-byte header holding the file's number and,
	// once the file is finished, where its records end; record checksums
	// are salted with the file's number (fileSalt), so that records left
	// over from an earlier use of a recycled file never read as its own.
	formatV2 = 2
	// headerSizeV1 and headerSizeV2 are the header sizes of the versions.
	headerSizeV1 = 5 + 1 + 2      // len(fileMagic), version, reserved
	headerSizeV2 = 5 + 1 + 2 + 16 // ... then number u64, end u64
	// fileHeaderSize is the header size of the files this version writes.
	fileHeaderSize = headerSizeV2
	// recordHeaderSize is crc u32, length u32 and type u8.
	recordHeaderSize = 4 + 4 + 1
	// fileSuffix ends every journal file name; the stem is the file number
	// as 16 lowercase hex digits, so names sort like numbers.
	fileSuffix = ".jnl"
	// freeSuffix ends the name of a released file kept for reuse
	// (<number>.jnl.free): not a journal file, never replayed.
	freeSuffix = ".free"
)

// MaxRecordSize bounds a record's body. It is part of the on-disk format: a
// record header claiming more is corruption.
const MaxRecordSize = 8 << 20

// tmpSuffix marks the copy made while cutting a torn tail on a filesystem
// whose files cannot be truncated in place. A leftover one is removed by Open.
const tmpSuffix = ".tmp"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileHeader is a journal file's header.
type fileHeader struct {
	version byte
	// num is the file's number (formatV2): a file whose name says another
	// number was renamed for reuse before its header was rewritten.
	num uint64
	// end is where the file's records end (formatV2), written when the
	// writer moves on to the next file; 0 while the file is being written
	// (and in a file a crash left as the current one).
	end int64
}

// size is the header's encoded size.
func (h fileHeader) size() int64 {
	if h.version == formatV1 {
		return headerSizeV1
	}
	return headerSizeV2
}

// salt is what the record checksums of the file are XORed with.
func (h fileHeader) salt() uint32 {
	if h.version == formatV1 {
		return 0
	}
	return fileSalt(h.num)
}

// encode returns the header as written (formatV2 only: version 1 files are
// never written).
func (h fileHeader) encode() [headerSizeV2]byte {
	var b [headerSizeV2]byte
	copy(b[:], fileMagic)
	b[len(fileMagic)] = formatV2
	binary.BigEndian.PutUint64(b[8:], h.num)
	binary.BigEndian.PutUint64(b[16:], uint64(h.end))
	return b
}

// endOffset is the offset of the end field in a formatV2 header.
const endOffset = 16

// parseFileHeader decodes the header at the start of file num's first bytes
// b (up to headerSizeV2 of them; fewer when the file is shorter). It returns
// why b is not a valid header of file num, or "".
func parseFileHeader(b []byte, num uint64) (fileHeader, string) {
	var h fileHeader
	if len(b) < headerSizeV1 {
		return h, fmt.Sprintf("file header: %d bytes, want %d", len(b), headerSizeV1)
	}
	if string(b[:len(fileMagic)]) != fileMagic {
		return h, fmt.Sprintf("file header: bad magic %q", b[:len(fileMagic)])
	}
	h.version = b[len(fileMagic)]
	if b[len(fileMagic)+1] != 0 || b[len(fileMagic)+2] != 0 {
		return h, "file header: reserved bytes are not zero"
	}
	switch h.version {
	case formatV1:
		return h, ""
	case formatV2:
	default:
		return h, fmt.Sprintf("file header: unknown format version %d", h.version)
	}
	if len(b) < headerSizeV2 {
		return h, fmt.Sprintf("file header: %d bytes, want %d", len(b), headerSizeV2)
	}
	h.num = binary.BigEndian.Uint64(b[8:])
	h.end = int64(binary.BigEndian.Uint64(b[endOffset:]))
	switch {
	case h.num != num:
		return h, fmt.Sprintf("file header: says file %d (a file renamed for reuse before its header was rewritten)", h.num)
	case h.end != 0 && h.end < headerSizeV2:
		return h, fmt.Sprintf("file header: records end at %d, inside the header", h.end)
	}
	return h, ""
}

// fileSalt is the value record checksums in file num are XORed with:
// CRC-32C of the number's 8 big-endian bytes. It differs between any two
// numbers less than 2^32 apart (a CRC is injective on 32-bit differences),
// so a record written into a file under one number fails the checksum when
// the file is reused under another.
func fileSalt(num uint64) uint32 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], num)
	return crc32.Checksum(b[:], castagnoli)
}

// appendRecord appends the encoded record, as a formatV1 file holds it, to
// dst.
func appendRecord(dst []byte, typ byte, body []byte) []byte {
	return appendRecordCRC(dst, recordCRC(typ, body), typ, body)
}

// recordCRC is a record's unsalted checksum: CRC-32C over length, type and
// body; the crc field holds it XORed with the file's salt (fileHeader.salt).
// Append computes it on the appender's goroutine, so that the writer only
// salts and copies.
func recordCRC(typ byte, body []byte) uint32 {
	return crc32.Update(headerCRC(typ, len(body)), castagnoli, body)
}

// headerCRC is the CRC-32C of a record's length and type fields, computed
// a byte at a time: passed to crc32.Update, a 5-byte array on the stack
// escapes to the heap, one allocation per record.
func headerCRC(typ byte, n int) uint32 {
	crc := ^uint32(0)
	for _, b := range [...]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), typ} {
		crc = castagnoli[byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// recordCRCKnown is recordCRC from the CRC-32C of body[from:], tailCRC,
// without reading those bytes.
func recordCRCKnown(typ byte, body []byte, from int, tailCRC uint32) uint32 {
	head := crc32.Update(headerCRC(typ, len(body)), castagnoli, body[:from])
	return crc32c.Combine(head, tailCRC, len(body)-from)
}

// appendRecordCRC appends the record with its crc field (recordCRC, salted)
// to dst.
func appendRecordCRC(dst []byte, crc uint32, typ byte, body []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, crc)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	dst = append(dst, typ)
	return append(dst, body...)
}

// recordSize is the encoded size of a record with a body of n bytes.
func recordSize(n int) int64 { return int64(recordHeaderSize + n) }

// fileName is the base name of journal file num.
func fileName(num uint64) string {
	return fmt.Sprintf("%016x%s", num, fileSuffix)
}

// freeName is the base name of released file num kept for reuse.
func freeName(num uint64) string { return fileName(num) + freeSuffix }

// parseFreeName returns the number of a free file's name.
func parseFreeName(name string) (uint64, bool) {
	stem, ok := strings.CutSuffix(name, freeSuffix)
	if !ok {
		return 0, false
	}
	return parseFileName(stem)
}

// parseFileName returns the number of a journal file name. Only the exact
// form fileName produces is accepted, so one number has one name.
func parseFileName(name string) (uint64, bool) {
	const stem = 16
	if len(name) != stem+len(fileSuffix) || name[stem:] != fileSuffix {
		return 0, false
	}
	num, err := strconv.ParseUint(name[:stem], 16, 64)
	if err != nil || fileName(num) != name {
		return 0, false
	}
	return num, true
}
