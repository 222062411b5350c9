package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
)

// On-disk format. Changing any of these constants changes the format: bump
// formatVersion and keep reading the old one.
const (
	// fileMagic opens every journal file.
	fileMagic = "MGJNL"
	// formatVersion is the byte after the magic.
	formatVersion = 1
	// fileHeaderSize is magic, version and two reserved zero bytes.
	fileHeaderSize = 5 + 1 + 2 // len(fileMagic), version, reserved
	// recordHeaderSize is crc u32, length u32 and type u8.
	recordHeaderSize = 4 + 4 + 1
	// fileSuffix ends every journal file name; the stem is the file number
	// as 16 lowercase hex digits, so names sort like numbers.
	fileSuffix = ".jnl"
)

// MaxRecordSize bounds a record's body. It is part of the on-disk format: a
// record header claiming more is corruption.
const MaxRecordSize = 8 << 20

// tmpSuffix marks the copy made while cutting a torn tail on a filesystem
// whose files cannot be truncated in place. A leftover one is removed by Open.
const tmpSuffix = ".tmp"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileHeader returns the 8 bytes every journal file starts with.
func fileHeader() [fileHeaderSize]byte {
	var h [fileHeaderSize]byte
	copy(h[:], fileMagic)
	h[len(fileMagic)] = formatVersion
	return h
}

// checkFileHeader returns why h is not a valid file header, or "".
func checkFileHeader(h []byte) string {
	switch {
	case len(h) < fileHeaderSize:
		return fmt.Sprintf("file header: %d bytes, want %d", len(h), fileHeaderSize)
	case string(h[:len(fileMagic)]) != fileMagic:
		return fmt.Sprintf("file header: bad magic %q", h[:len(fileMagic)])
	case h[len(fileMagic)] != formatVersion:
		return fmt.Sprintf("file header: unknown format version %d", h[len(fileMagic)])
	case h[len(fileMagic)+1] != 0 || h[len(fileMagic)+2] != 0:
		return "file header: reserved bytes are not zero"
	}
	return ""
}

// appendRecord appends the encoded record to dst.
func appendRecord(dst []byte, typ byte, body []byte) []byte {
	return appendRecordCRC(dst, recordCRC(typ, body), typ, body)
}

// recordCRC is the crc field of a record: CRC-32C over length, type and
// body. Append computes it on the appender's goroutine, so that the writer
// only copies.
func recordCRC(typ byte, body []byte) uint32 {
	var h [recordHeaderSize - 4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(body)))
	h[4] = typ
	return crc32.Update(crc32.Update(0, castagnoli, h[:]), castagnoli, body)
}

// appendRecordCRC appends the record with its crc (recordCRC) to dst.
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
