package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// The Append functions encode into dst's spare capacity (growing it when
// needed) and return the extended slice, so a connection can reuse one
// buffer for all its writes. On error they return dst unchanged in length.
// Commands and metadata are checked as the reader checks them: required
// fields set, and the sub-message named by the command's type present.

// AppendCommand appends a simple command frame: [totalSize][commandSize][command].
func AppendCommand(dst []byte, cmd *pulsarpb.BaseCommand) ([]byte, error) {
	start := len(dst)
	dst, err := appendHeadAndCommand(dst, cmd)
	if err != nil {
		return dst[:start], err
	}
	return finishFrame(dst, start)
}

// AppendPayloadCommand appends a payload command frame (SEND, or MESSAGE
// without broker entry metadata) whose headers and payload it encodes from
// metadata and payload, computing the checksum.
func AppendPayloadCommand(dst []byte, cmd *pulsarpb.BaseCommand, metadata *msgpb.MessageMetadata, payload []byte) ([]byte, error) {
	start := len(dst)
	dst, err := appendHeadAndCommand(dst, cmd)
	if err == nil {
		dst, err = AppendHeadersAndPayload(dst, metadata, payload)
	}
	if err != nil {
		return dst[:start], err
	}
	return finishFrame(dst, start)
}

// AppendMessage appends a payload command frame whose headers and payload are
// given already encoded (a stored entry) and are copied verbatim: nothing is
// re-encoded and the checksum is not recomputed. When brokerEntryMetadata is
// non-nil (an encoded BrokerEntryMetadata, possibly empty), a 0x0e02 block
// carrying it precedes the headers and payload; send it only to clients that
// announced supports_broker_entry_metadata.
func AppendMessage(dst []byte, cmd *pulsarpb.BaseCommand, brokerEntryMetadata, headersAndPayload []byte) ([]byte, error) {
	start := len(dst)
	dst, err := appendHeadAndCommand(dst, cmd)
	if err != nil {
		return dst[:start], err
	}
	if brokerEntryMetadata != nil {
		if uint64(len(brokerEntryMetadata)) > math.MaxUint32 {
			return dst[:start], fmt.Errorf("frame: broker entry metadata of %d bytes", len(brokerEntryMetadata))
		}
		dst = binary.BigEndian.AppendUint16(dst, MagicBrokerEntryMetadata)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(brokerEntryMetadata)))
		dst = append(dst, brokerEntryMetadata...)
	}
	dst = append(dst, headersAndPayload...)
	return finishFrame(dst, start)
}

// AppendHeadersAndPayload appends a headers-and-payload block with its
// checksum: [0x0e01][checksum][metadataSize][metadata][payload]. This is the
// form in which a message is stored and dispatched.
func AppendHeadersAndPayload(dst []byte, metadata *msgpb.MessageMetadata, payload []byte) ([]byte, error) {
	if metadata == nil {
		return dst, errors.New("frame: nil message metadata")
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, MagicChecksum)
	dst = append(dst, 0, 0, 0, 0) // checksum, set below
	mdStart := len(dst)
	dst = append(dst, 0, 0, 0, 0) // metadata size, set below
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, metadata)
	if err != nil {
		return dst[:start], fmt.Errorf("frame: encoding message metadata: %w", err)
	}
	binary.BigEndian.PutUint32(dst[mdStart:], uint32(len(dst)-mdStart-sizeLen))
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[start+magicLen:], crc32.Checksum(dst[mdStart:], castagnoli))
	return dst, nil
}

// appendHeadAndCommand appends [totalSize placeholder][commandSize][command].
func appendHeadAndCommand(dst []byte, cmd *pulsarpb.BaseCommand) ([]byte, error) {
	if cmd == nil {
		return dst, errors.New("frame: nil command")
	}
	if err := checkCommand(cmd); err != nil {
		return dst, fmt.Errorf("frame: %w", err)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // totalSize, commandSize
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, cmd)
	if err != nil {
		return dst, fmt.Errorf("frame: encoding %v command: %w", cmd.GetType(), err)
	}
	binary.BigEndian.PutUint32(dst[start+sizeLen:], uint32(len(dst)-start-2*sizeLen))
	return dst, nil
}

// finishFrame sets the totalSize of the frame that starts at dst[start].
func finishFrame(dst []byte, start int) ([]byte, error) {
	total := len(dst) - start - sizeLen
	if uint64(total) > math.MaxUint32 {
		return dst[:start], fmt.Errorf("frame: frame of %d bytes", total)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	return dst, nil
}
