package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// Format says what an entry's payload holds.
type Format uint8

const (
	// FormatPulsar: a Pulsar MessageMetadata and payload (possibly a batch),
	// as the producer sent it.
	FormatPulsar Format = 1
	// FormatKafka: a Kafka record batch (v2), as the producer sent it.
	FormatKafka Format = 2
)

func (f Format) String() string {
	switch f {
	case FormatPulsar:
		return "pulsar"
	case FormatKafka:
		return "kafka"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// Header is what the managed ledger writes in front of every entry's
// payload. It makes the message index continuous: the Kafka offset of an
// entry's first message, how many messages it holds, and when the broker
// published it.
//
//	+----------+------------+-----------+----------+------------------+--------------+--------------------+
//	| magic u8 | version u8 | format u8 | zero u8  | first offset i64 | messages u32 | publish time i64   |
//	| 0xE7     | 1          |           |          |                  |              | (ms since epoch)   |
//	+----------+------------+-----------+----------+------------------+--------------+--------------------+
//
// Big-endian, 24 bytes, then the payload. These constants are an on-disk
// (on-bookie) format.
type Header struct {
	Format      Format
	FirstOffset int64 // index of the entry's first message in the managed ledger
	Messages    int32 // number of messages in the entry (≥ 1)
	PublishTime int64 // broker publish time, milliseconds since the Unix epoch
}

const (
	headerMagic   = 0xE7
	headerVersion = 1
	// HeaderSize is the encoded size of a Header.
	HeaderSize = 24
)

// MaxPayloadSize is the largest payload Append stores: what a bookie
// entry holds after its own header and the managed ledger's.
const MaxPayloadSize = entry.MaxSize - entry.HeaderSize - HeaderSize

// ErrBadHeader reports entry bytes that do not start with a valid header.
var ErrBadHeader = errors.New("ledger: bad entry header")

// NextOffset is the offset of the first message after the entry.
func (h Header) NextOffset() int64 { return h.FirstOffset + int64(h.Messages) }

// AppendHeader appends the encoded header to dst.
func AppendHeader(dst []byte, h Header) []byte {
	dst = append(dst, headerMagic, headerVersion, byte(h.Format), 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.FirstOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.Messages))
	return binary.BigEndian.AppendUint64(dst, uint64(h.PublishTime))
}

// ParseHeader decodes the header at the start of b and returns it with the
// payload that follows (a sub-slice of b).
func ParseHeader(b []byte) (Header, []byte, error) {
	if len(b) < HeaderSize {
		return Header{}, nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrBadHeader, len(b), HeaderSize)
	}
	if b[0] != headerMagic || b[1] != headerVersion {
		return Header{}, nil, fmt.Errorf("%w: magic %#x version %d", ErrBadHeader, b[0], b[1])
	}
	h := Header{
		Format:      Format(b[2]),
		FirstOffset: int64(binary.BigEndian.Uint64(b[4:])),
		Messages:    int32(binary.BigEndian.Uint32(b[12:])),
		PublishTime: int64(binary.BigEndian.Uint64(b[16:])),
	}
	if h.Format != FormatPulsar && h.Format != FormatKafka {
		return Header{}, nil, fmt.Errorf("%w: unknown format %d", ErrBadHeader, b[2])
	}
	if h.Messages < 1 || h.FirstOffset < 0 {
		return Header{}, nil, fmt.Errorf("%w: %d messages from offset %d", ErrBadHeader, h.Messages, h.FirstOffset)
	}
	return h, b[HeaderSize:], nil
}
