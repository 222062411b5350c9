// Package entry defines the ledger entry as a writer adds it, a bookie
// stores it and a reader verifies it. The writer computes the checksum once;
// the bookie verifies it on add and keeps the bytes as they are; the reader
// verifies it again, so corruption anywhere on the way is caught.
//
// # Format (wire and disk)
//
//	+------------+-----------+---------+------------+---------+---------+
//	| ledger u64 | entry u64 | lac i64 | length u64 | crc u32 | payload |
//	+------------+-----------+---------+------------+---------+---------+
//
// Big-endian. crc is CRC-32C (Castagnoli) over the 32 bytes before it and
// the payload. lac is the writer's last-add-confirmed when it sent the
// entry (-1 for none): bookies learn the LAC from it. length is the
// ledger's total payload bytes up to and including this entry. These
// constants are an on-disk and wire format.
package entry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/magnetar-io/magnetar/bookie/internal/crc32c"
)

// HeaderSize is the size of the header before the payload.
const HeaderSize = 8 + 8 + 8 + 8 + 4

// MaxSize bounds a whole entry (header and payload): larger entries are
// refused by writers and bookies alike. It leaves room for a Kafka topic
// whose max.message.bytes is above the broker's default message size
// (5 MiB): Kafka's own ceiling for such topics is the request size.
const MaxSize = 16 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChecksum reports an entry whose checksum does not match its bytes.
var ErrChecksum = errors.New("entry: checksum mismatch")

// ErrMalformed reports bytes too short or too long to be an entry.
var ErrMalformed = errors.New("entry: malformed")

// Header is the decoded header of an entry.
type Header struct {
	Ledger int64
	Entry  int64
	LAC    int64
	Length int64
}

// Encode appends the entry for h and payload to dst and returns it.
func Encode(dst []byte, h Header, payload []byte) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.Ledger))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.Entry))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.LAC))
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.Length))
	crc := crc32.Update(crc32.Checksum(dst[start:], castagnoli), castagnoli, payload)
	dst = binary.BigEndian.AppendUint32(dst, crc)
	return append(dst, payload...)
}

// EncodeInPlace writes the header of h and the checksum into the first
// HeaderSize bytes of buf, whose rest is the payload, and returns buf:
// Encode without copying the payload.
func EncodeInPlace(buf []byte, h Header) []byte {
	putHeader(buf, h)
	crc := crc32.Update(crc32.Checksum(buf[:32], castagnoli), castagnoli, buf[HeaderSize:])
	binary.BigEndian.PutUint32(buf[32:], crc)
	return buf
}

// EncodeInPlaceKnown is EncodeInPlace for a buf whose tail's CRC-32C the
// caller already has (from a checksum it verified): tailCRC must be the
// CRC-32C of buf[from:], from ≥ HeaderSize. The entry's checksum is then
// combined from it (crc32c.Combine) instead of read off the tail again.
// A wrong tailCRC makes an entry that bookies and readers refuse as
// corrupt. It panics if from is outside [HeaderSize, len(buf)].
func EncodeInPlaceKnown(buf []byte, h Header, from int, tailCRC uint32) []byte {
	if from < HeaderSize || from > len(buf) {
		panic(fmt.Sprintf("entry: EncodeInPlaceKnown: tail from %d of a %d-byte buffer", from, len(buf)))
	}
	putHeader(buf, h)
	head := crc32.Update(crc32.Checksum(buf[:32], castagnoli), castagnoli, buf[HeaderSize:from])
	binary.BigEndian.PutUint32(buf[32:], crc32c.Combine(head, tailCRC, len(buf)-from))
	return buf
}

// putHeader writes h into the first 32 bytes of buf (the checksum's
// place after them is the caller's).
func putHeader(buf []byte, h Header) {
	binary.BigEndian.PutUint64(buf[0:], uint64(h.Ledger))
	binary.BigEndian.PutUint64(buf[8:], uint64(h.Entry))
	binary.BigEndian.PutUint64(buf[16:], uint64(h.LAC))
	binary.BigEndian.PutUint64(buf[24:], uint64(h.Length))
}

// Parse decodes the header of b without verifying the checksum.
func Parse(b []byte) (Header, error) {
	if len(b) < HeaderSize || len(b) > MaxSize {
		return Header{}, fmt.Errorf("%w: %d bytes (header %d, limit %d)", ErrMalformed, len(b), HeaderSize, MaxSize)
	}
	return Header{
		Ledger: int64(binary.BigEndian.Uint64(b[0:])),
		Entry:  int64(binary.BigEndian.Uint64(b[8:])),
		LAC:    int64(binary.BigEndian.Uint64(b[16:])),
		Length: int64(binary.BigEndian.Uint64(b[24:])),
	}, nil
}

// Verify decodes the header of b and checks its checksum.
func Verify(b []byte) (Header, error) {
	h, err := Parse(b)
	if err != nil {
		return h, err
	}
	return h, checkSum(h, b, crc32.Update(crc32.Checksum(b[:32], castagnoli), castagnoli, b[HeaderSize:]))
}

// VerifySum is Verify with b's checksum computed already (by
// CopyChecksum): it decodes the header and compares sum with the
// checksum b carries.
func VerifySum(b []byte, sum uint32) (Header, error) {
	h, err := Parse(b)
	if err != nil {
		return h, err
	}
	return h, checkSum(h, b, sum)
}

// checkSum compares sum, computed over b, with the checksum b carries (h
// is its header, for the error).
func checkSum(h Header, b []byte, sum uint32) error {
	if want := binary.BigEndian.Uint32(b[32:]); sum != want {
		return fmt.Errorf("%w: ledger %d entry %d: computed %08x, stored %08x", ErrChecksum, h.Ledger, h.Entry, sum, want)
	}
	return nil
}

// copyPiece is how much CopyChecksum copies before it checksums it: the
// bytes are then in the CPU's nearest caches, where the checksum goes
// several times faster than over memory (design note 0010).
const copyPiece = 64 << 10

// CopyChecksum copies src into dst (as copy does) and returns the
// checksum of the entry dst then holds, as Verify computes it, for
// VerifySum: copying and checking a piece at a time reads the bytes from
// memory once. src of fewer than HeaderSize bytes is copied, and its sum
// is 0 (VerifySum then finds it malformed).
func CopyChecksum(dst, src []byte) uint32 {
	n := min(len(dst), len(src))
	if n < HeaderSize {
		copy(dst, src)
		return 0
	}
	copy(dst[:HeaderSize], src)
	sum := crc32.Checksum(dst[:32], castagnoli)
	for off := HeaderSize; off < n; off += copyPiece {
		end := min(off+copyPiece, n)
		copy(dst[off:end], src[off:end])
		sum = crc32.Update(sum, castagnoli, dst[off:end])
	}
	return sum
}

// PayloadChecksum returns the CRC-32C of b's payload alone (b[HeaderSize:])
// from the checksum b carries (crc32c.Combine takes the header's share
// off), without reading the payload: a few hundred operations whatever
// its size. b must have passed Verify, or the answer is as wrong as b's
// checksum.
func PayloadChecksum(b []byte) uint32 {
	return crc32c.Combine(crc32.Checksum(b[:32], castagnoli), binary.BigEndian.Uint32(b[32:]), len(b)-HeaderSize)
}

// Payload returns the payload of a parsed entry (a sub-slice of b).
func Payload(b []byte) []byte { return b[HeaderSize:] }
