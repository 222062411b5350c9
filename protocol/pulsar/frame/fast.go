package frame

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/magnetar-io/magnetar/protocol/pulsar/pulsarpb"
)

// Fast paths for the commands of every published message: SEND in,
// SEND_RECEIPT out, and the one metadata field a SEND needs. Generic
// protobuf decoding and encoding (reflection over the generated types,
// an allocation per optional field) cost a broker publishing unbatched
// messages a fifth of its CPU. The fast paths take only the plain forms
// and leave anything else to the generic code, so their results are the
// generic code's by construction; tests and FuzzFastPaths compare the two.

// sendCommand holds a decoded SEND with its fields in one allocation.
type sendCommand struct {
	base                 pulsarpb.BaseCommand
	send                 pulsarpb.CommandSend
	typ                  pulsarpb.BaseCommand_Type
	producerID, sequence uint64
	txnLeast, txnMost    uint64
	highest              uint64
	numMessages          int32
	isChunk, marker      bool
}

// decodeSend decodes b into c as a BaseCommand holding a SEND whose fields
// are all plain (no message_id, no unknown fields, nothing repeated), and
// returns c's command. ok is false for anything else, which the caller
// decodes generically; c may have changed.
func decodeSend(b []byte, c *sendCommand) (_ *pulsarpb.BaseCommand, ok bool) {
	var sendBytes []byte
	sawType, sawSend := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType && !sawType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v != uint64(pulsarpb.BaseCommand_SEND) {
				return nil, false
			}
			b, sawType = b[n:], true
		case num == protowire.Number(pulsarpb.BaseCommand_SEND) && typ == protowire.BytesType && !sawSend:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, false
			}
			b, sendBytes, sawSend = b[n:], v, true
		default:
			return nil, false
		}
	}
	if !sawType || !sawSend {
		return nil, false
	}
	*c = sendCommand{}
	var seen uint16 // bit i: field i seen
	for b := sendBytes; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num < 1 || num > 8 || typ != protowire.VarintType || seen&(1<<num) != 0 {
			return nil, false
		}
		seen |= 1 << num
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return nil, false
		}
		b = b[n:]
		s := &c.send
		switch num {
		case 1:
			c.producerID, s.ProducerId = v, &c.producerID
		case 2:
			c.sequence, s.SequenceId = v, &c.sequence
		case 3:
			c.numMessages, s.NumMessages = int32(v), &c.numMessages
		case 4:
			c.txnLeast, s.TxnidLeastBits = v, &c.txnLeast
		case 5:
			c.txnMost, s.TxnidMostBits = v, &c.txnMost
		case 6:
			c.highest, s.HighestSequenceId = v, &c.highest
		case 7:
			c.isChunk, s.IsChunk = protowire.DecodeBool(v), &c.isChunk
		case 8:
			c.marker, s.Marker = protowire.DecodeBool(v), &c.marker
		}
	}
	if seen&(1<<1) == 0 || seen&(1<<2) == 0 {
		return nil, false // required fields missing: the generic path says so
	}
	c.typ = pulsarpb.BaseCommand_SEND
	c.base.Type, c.base.Send = &c.typ, &c.send
	return &c.base, true
}

// Receipt is what a SEND_RECEIPT carries.
type Receipt struct {
	ProducerID, SequenceID uint64
	// HighestSequenceID is sent when HasHighest is set.
	HighestSequenceID uint64
	HasHighest        bool
	Ledger, Entry     uint64
	// Partition is sent when it is not negative.
	Partition int32
}

// AppendSendReceipt appends a SEND_RECEIPT frame, byte for byte what
// AppendCommand makes of the same command.
func AppendSendReceipt(dst []byte, r Receipt) []byte {
	var id [3 * 11]byte
	msgID := protowire.AppendTag(id[:0], 1, protowire.VarintType)
	msgID = protowire.AppendVarint(msgID, r.Ledger)
	msgID = protowire.AppendTag(msgID, 2, protowire.VarintType)
	msgID = protowire.AppendVarint(msgID, r.Entry)
	if r.Partition >= 0 {
		msgID = protowire.AppendTag(msgID, 3, protowire.VarintType)
		msgID = protowire.AppendVarint(msgID, uint64(r.Partition))
	}
	var rc [4*11 + 2 + len(id)]byte
	receipt := protowire.AppendTag(rc[:0], 1, protowire.VarintType)
	receipt = protowire.AppendVarint(receipt, r.ProducerID)
	receipt = protowire.AppendTag(receipt, 2, protowire.VarintType)
	receipt = protowire.AppendVarint(receipt, r.SequenceID)
	receipt = protowire.AppendTag(receipt, 3, protowire.BytesType)
	receipt = protowire.AppendBytes(receipt, msgID)
	if r.HasHighest {
		receipt = protowire.AppendTag(receipt, 4, protowire.VarintType)
		receipt = protowire.AppendVarint(receipt, r.HighestSequenceID)
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // totalSize, commandSize
	dst = protowire.AppendTag(dst, 1, protowire.VarintType)
	dst = protowire.AppendVarint(dst, uint64(pulsarpb.BaseCommand_SEND_RECEIPT))
	dst = protowire.AppendTag(dst, protowire.Number(pulsarpb.BaseCommand_SEND_RECEIPT), protowire.BytesType)
	dst = protowire.AppendBytes(dst, receipt)
	cmdLen := len(dst) - start - 2*sizeLen
	binary.BigEndian.PutUint32(dst[start:], uint32(cmdLen+sizeLen))
	binary.BigEndian.PutUint32(dst[start+sizeLen:], uint32(cmdLen))
	return dst
}

// Fields of MessageMetadata the scan of MessagesInBatch leaves to the
// generic parser, which checks their contents: the messages properties and
// encryption_keys (their required fields), and the packed form of the
// repeated compacted_batch_indexes (its varints).
const (
	metadataProperties     = 4
	metadataEncryptionKeys = 13
	metadataCompacted      = 31
	metadataNumInBatch     = 11
)

// MessagesInBatch returns the num_messages_in_batch of a headers-and-payload
// block (its default, 1, when not set) and whether it is set, checking the block as
// ParseHeadersAndPayload does (errors wrap ErrMalformed) without decoding
// the whole metadata.
func MessagesInBatch(b []byte) (n int32, set bool, err error) {
	full := b
	if hasChecksum(b) {
		if len(b) < magicLen+checksumLen {
			return 0, false, fmt.Errorf("%w: checksum cut off (%d bytes after the command)", ErrMalformed, len(b))
		}
		b = b[magicLen+checksumLen:]
	}
	if len(b) < sizeLen {
		return parsedMessagesInBatch(full)
	}
	size := binary.BigEndian.Uint32(b)
	if uint64(size) > uint64(len(b)-sizeLen) {
		return parsedMessagesInBatch(full)
	}
	md := b[sizeLen : sizeLen+int(size)]
	n = 1
	var required uint8 // bit i: required field i seen
	for len(md) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(md)
		if tagLen < 0 || num > protowire.MaxValidNumber {
			// ConsumeTag takes numbers up to 2^31-1; protobuf refuses
			// those past 2^29-1: the parse gives its error.
			return parsedMessagesInBatch(full)
		}
		md = md[tagLen:]
		if num == metadataProperties || num == metadataEncryptionKeys || num == metadataCompacted {
			return parsedMessagesInBatch(full)
		}
		if num == metadataNumInBatch && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(md)
			if m < 0 {
				return parsedMessagesInBatch(full)
			}
			n, set = int32(v), true
		}
		switch {
		case num == 1 && typ == protowire.BytesType,
			(num == 2 || num == 3) && typ == protowire.VarintType:
			required |= 1 << num
		}
		m := protowire.ConsumeFieldValue(num, typ, md)
		if m < 0 {
			return parsedMessagesInBatch(full)
		}
		md = md[m:]
	}
	if required != 1<<1|1<<2|1<<3 {
		return parsedMessagesInBatch(full)
	}
	return n, set, nil
}

// parsedMessagesInBatch answers MessagesInBatch with the full parse (and
// its error).
func parsedMessagesInBatch(b []byte) (int32, bool, error) {
	md, _, err := ParseHeadersAndPayload(b)
	if err != nil {
		return 0, false, err
	}
	return md.GetNumMessagesInBatch(), md.NumMessagesInBatch != nil, nil
}
