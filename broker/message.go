package broker

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/ledger"
)

// The payload of a Pulsar-format entry (ledger.FormatPulsar) is what the
// producer sent after the SEND command, byte for byte:
//
//	+--------------+-------------+-----------------+-----------------+---------+
//	| magic 0x0e01 | crc32c u32  | metadata size   | MessageMetadata | payload |
//	| (optional)   | (optional)  | u32             | (protobuf)      |         |
//	+--------------+-------------+-----------------+-----------------+---------+
//
// Big-endian. The checksum (CRC-32C over everything after it) is verified
// when the message is received, kept as sent and verified again by the
// consumer's client; the magic and checksum are absent only if the client
// sent none. A batch is one entry: num_messages_in_batch in the metadata,
// the single-message metadata inside the (possibly compressed) payload.
// These constants are a stored format.
const (
	checksumMagic = 0x0e01
	checksumLen   = 2 + 4
)

// ErrBadEntry reports stored entry bytes that do not parse.
var ErrBadEntry = errors.New("broker: malformed Pulsar entry")

// ParseEntry returns the metadata and payload of a Pulsar-format entry
// payload (headers and payload as sent). payload aliases b.
func ParseEntry(b []byte) (*msgpb.MessageMetadata, []byte, error) {
	if len(b) >= checksumLen && binary.BigEndian.Uint16(b) == checksumMagic {
		b = b[checksumLen:]
	}
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: %d bytes, no metadata size", ErrBadEntry, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, fmt.Errorf("%w: metadata size %d past the end (%d bytes)", ErrBadEntry, n, len(b)-4)
	}
	md := new(msgpb.MessageMetadata)
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(b[4:4+n], md); err != nil {
		return nil, nil, fmt.Errorf("%w: metadata: %v", ErrBadEntry, err)
	}
	return md, b[4+n:], nil
}

// MessageID addresses one message: the entry holding it and its index in
// the entry's batch (-1: not a batch, or the whole entry). Partition is
// the partition of a partitioned topic (-1: not a partition).
type MessageID struct {
	Position   ledger.Position
	BatchIndex int32
	Partition  int32
}

// Earliest and latest positions as clients send them (pulsar-client-go's
// EarliestMessageID and LatestMessageID).
const (
	earliestLedger = -1
	latestLedger   = int64(^uint64(0) >> 1)
)

// IsEarliest says whether id is the "earliest" marker.
func (id MessageID) IsEarliest() bool { return id.Position.Ledger < 0 }

// IsLatest says whether id is the "latest" marker.
func (id MessageID) IsLatest() bool { return id.Position.Ledger == latestLedger }

// entryKey is the key Key_Shared routes an entry by: its ordering key, or
// else its partition key; a batch is routed by the batch's key (clients
// batch by key for Key_Shared).
func entryKey(md *msgpb.MessageMetadata) []byte {
	if k := md.GetOrderingKey(); len(k) > 0 {
		return k
	}
	return []byte(md.GetPartitionKey())
}

// PulsarPayload is an entry as Pulsar consumers receive it (headers and
// payload, as ParseEntry reads them): a Pulsar entry's stored bytes, or a
// Kafka record batch converted to a batch of as many messages (maxSize
// bounds the decompressed records).
func PulsarPayload(e ledger.Entry, maxSize int) ([]byte, error) {
	if e.Header.Format == ledger.FormatKafka {
		return KafkaToPulsar(e.Payload, e.Header.PublishTime, maxSize)
	}
	return e.Payload, nil
}
