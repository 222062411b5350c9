// Package frame reads and writes frames of the Pulsar binary protocol.
//
// # Wire format
//
// All integers are big-endian. A frame is two sizes and a command:
//
//	+-----------+-------------+------------------------------+
//	| totalSize | commandSize | command                      |
//	| uint32    | uint32      | BaseCommand, commandSize B   |
//	+-----------+-------------+------------------------------+
//	            |<---------- totalSize bytes ---------------- ...
//
// totalSize counts every byte after itself. A simple command ends the frame.
// A payload command (SEND from a producer, MESSAGE to a consumer) is followed
// by the message, optionally preceded by a broker entry metadata block that
// the broker sends only to clients whose CONNECT announced
// FeatureFlags.supports_broker_entry_metadata:
//
//	... command | 0x0e02 | bemSize | BrokerEntryMetadata |     optional
//	            | uint16 | uint32  | bemSize bytes       |
//
//	            | 0x0e01 | checksum | metadataSize | MessageMetadata | payload    |
//	            | uint16 | uint32   | uint32       | metadataSize B  | to the end |
//	                                |<-- CRC-32C (Castagnoli) of these bytes -->|
//
// The bytes from the 0x0e01 magic to the end of the frame are the message's
// "headers and payload": what a producer sent, what the broker stores as the
// entry, and what it later sends to consumers unchanged, without re-encoding
// or recomputing the checksum (AppendMessage). The payload is one message, or a
// batch when MessageMetadata.num_messages_in_batch is present.
//
// The magic and checksum are optional: producers older than protocol v6 send
// [metadataSize][MessageMetadata][payload] alone. As Pulsar's broker does, such
// a block is accepted and has nothing to verify (Frame.ChecksumOK reports
// true, Frame.HasChecksum false). Pulsar's Go client, however, rejects a
// MESSAGE without the checksum, so whatever the broker sends should carry one.
//
// The reader does not decide which commands may carry a message: whatever
// follows any command is returned (a leading 0x0e02 block split off), and the
// connection handler judges it, as Pulsar's handlers do. A SEND without
// headers and payload, or with broker entry metadata, is a client error.
//
// # Limits
//
// A frame whose totalSize exceeds the reader's maximum is refused
// (ErrFrameTooLarge). Pulsar sizes that maximum as the broker's max message size
// (announced to clients in CONNECTED.max_message_size) plus FramePadding for the
// command and headers; with Pulsar's defaults that is DefaultMaxFrameSize.
//
// # Errors
//
// Reading fails with ErrFrameTooLarge, with ErrMalformed for a frame that is
// structurally wrong (inconsistent sizes, a command that does not decode,
// misses a required field or lacks the sub-message its type names), or with
// the underlying I/O error (io.EOF at a frame boundary, io.ErrUnexpectedEOF
// inside a frame). A frame whose checksum does not match is not an error: it is
// returned, and Frame.ChecksumOK reports false, so that the broker can answer
// SEND_ERROR(ChecksumError) and keep the connection.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// Wire format constants.
const (
	// MagicChecksum starts the headers-and-payload block when it carries a checksum.
	MagicChecksum uint16 = 0x0e01
	// MagicBrokerEntryMetadata starts the optional broker entry metadata block.
	MagicBrokerEntryMetadata uint16 = 0x0e02
)

// Size limits, from Pulsar (Commands.DEFAULT_MAX_MESSAGE_SIZE and
// Commands.MESSAGE_SIZE_FRAME_PADDING; pulsar-client-go uses the same values).
const (
	// DefaultMaxMessageSize is Pulsar's default limit on a message's metadata
	// and payload. Clients use it when CONNECTED has no max_message_size.
	DefaultMaxMessageSize = 5 * 1024 * 1024
	// FramePadding is the room a frame has beyond the max message size, for
	// the command and the headers.
	FramePadding = 10 * 1024
	// DefaultMaxFrameSize is the largest totalSize accepted with Pulsar's
	// default max message size: 5 MiB + 10 KiB = 5253120 bytes.
	DefaultMaxFrameSize = DefaultMaxMessageSize + FramePadding
)

const (
	sizeLen     = 4 // a uint32 size field
	magicLen    = 2
	checksumLen = 4
)

var (
	// ErrFrameTooLarge is returned (wrapped, with the size) for a frame whose
	// totalSize exceeds the reader's maximum. The stream cannot be read further.
	ErrFrameTooLarge = errors.New("frame: frame too large")
	// ErrMalformed is returned (wrapped, with what and where) for a frame or a
	// headers-and-payload block that is structurally wrong.
	ErrMalformed = errors.New("frame: malformed")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Frame is one decoded frame. A Frame and the slices in it belong to the
// caller: the Reader keeps no reference to them.
type Frame struct {
	// Cmd is the command. Its required fields are set, and so is the
	// sub-message that Cmd.Type names (Cmd.Send for SEND, ...).
	Cmd *pulsarpb.BaseCommand
	// BrokerEntryMetadata is the encoded BrokerEntryMetadata of the 0x0e02
	// block, or nil when the frame has none. A block of size 0 is a non-nil
	// empty slice.
	BrokerEntryMetadata []byte
	// HeadersAndPayload is everything after the command (and after the
	// broker entry metadata block), exactly as sent: normally from the 0x0e01
	// magic to the end of the frame. Nil when nothing follows the command, as
	// for every simple command.
	HeadersAndPayload []byte

	framed []byte // HeadersAndPayload with the Reader's room in front, if it has it
}

// WithRoom returns HeadersAndPayload with n free bytes in front of it, in
// one buffer, if the Reader left that room (Reader.SetRoom) and nothing
// came between (broker entry metadata); else nil. The free bytes are the
// caller's to write.
func (f *Frame) WithRoom(n int) []byte {
	if f.framed == nil || len(f.framed)-len(f.HeadersAndPayload) != n {
		return nil
	}
	return f.framed
}

// HasChecksum reports whether the headers and payload start with the
// checksum magic.
func (f *Frame) HasChecksum() bool {
	return hasChecksum(f.HeadersAndPayload)
}

// Checksum returns the CRC-32C the headers and payload carry, of the bytes
// after it (the metadata size, metadata and payload), and the offset of
// those bytes in HeadersAndPayload; ok is false when they carry none. It
// does not verify it (ChecksumOK does).
func (f *Frame) Checksum() (crc uint32, from int, ok bool) {
	b := f.HeadersAndPayload
	if !hasChecksum(b) || len(b) < magicLen+checksumLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(b[magicLen:]), magicLen + checksumLen, true
}

// ChecksumOK reports whether the headers and payload are intact: true when
// their checksum matches, or when there is nothing to verify (no payload, or
// a block without the checksum magic); false when the checksum does not match
// or the block is too short to hold one.
func (f *Frame) ChecksumOK() bool {
	b := f.HeadersAndPayload
	if !hasChecksum(b) {
		return true
	}
	if len(b) < magicLen+checksumLen {
		return false
	}
	want := binary.BigEndian.Uint32(b[magicLen:])
	return crc32.Checksum(b[magicLen+checksumLen:], castagnoli) == want
}

// Metadata parses the frame's headers and payload (see ParseHeadersAndPayload).
func (f *Frame) Metadata() (*msgpb.MessageMetadata, []byte, error) {
	if f.HeadersAndPayload == nil {
		return nil, nil, fmt.Errorf("%w: %v frame has no message", ErrMalformed, f.Cmd.GetType())
	}
	return ParseHeadersAndPayload(f.HeadersAndPayload)
}

// ParseHeadersAndPayload parses a headers-and-payload block, as found in a
// frame or stored in an entry: [0x0e01][checksum] (optional)
// [metadataSize][MessageMetadata][payload]. It does not verify the checksum.
// The returned payload aliases b. Errors wrap ErrMalformed.
func ParseHeadersAndPayload(b []byte) (*msgpb.MessageMetadata, []byte, error) {
	if hasChecksum(b) && len(b) < magicLen+checksumLen {
		return nil, nil, fmt.Errorf("%w: checksum cut off (%d bytes after the command)", ErrMalformed, len(b))
	}
	// The layout is the broker's stored entry format: one parser for both.
	md, payload, err := broker.ParseEntry(b)
	if err == nil {
		err = proto.CheckInitialized(md) // the wire requires what the store tolerates
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return md, payload, nil
}

func hasChecksum(b []byte) bool {
	return len(b) >= magicLen && binary.BigEndian.Uint16(b) == MagicChecksum
}

// checkCommand verifies that the sub-message named by cmd.Type is set. Its
// field number equals the type's value, for every type of the protocol.
func checkCommand(cmd *pulsarpb.BaseCommand) error {
	if cmd.Type == nil {
		return errors.New("command has no type")
	}
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(cmd.GetType()))
	if fd == nil || fd.Message() == nil {
		return fmt.Errorf("command type %v names no command field", cmd.GetType())
	}
	if !m.Has(fd) {
		return fmt.Errorf("%v command without its %s field", cmd.GetType(), fd.Name())
	}
	return nil
}

// RequestID is the request_id of cmd's sub-message, for error answers;
// false if it has none.
func RequestID(cmd *pulsarpb.BaseCommand) (uint64, bool) {
	var id uint64
	found := false
	cmd.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		sub := v.Message()
		if f := sub.Descriptor().Fields().ByName("request_id"); f != nil && sub.Has(f) {
			id, found = sub.Get(f).Uint(), true
			return false
		}
		return true
	})
	return id, found
}
