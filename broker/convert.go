package broker

// Conversion between stored Kafka record batches and Pulsar entries, so that
// each protocol's consumers read what the other's producers wrote.
//
// Kafka batch -> Pulsar entry (KafkaToPulsar): one batched Pulsar message
// per batch, num_messages_in_batch always set (even to 1), so that batch
// index i is the record at offsetDelta i:
//
//	MessageMetadata        producer_name "kafka", sequence_id 0, publish_time,
//	                       num_messages_in_batch N, compression NONE
//	SingleMessageMetadata  partition_key  the key; base64 with partition_key_b64_encoded
//	                                      unless valid UTF-8; absent for a null key
//	                       properties     the headers, in order (a null value becomes "")
//	                       event_time     the record timestamp, if > 0
//	                       null_value     set for a null value (payload_size 0)
//	                       sequence_id    offsetDelta
//
// Pulsar entry -> Kafka batch (AppendPulsarAsKafka): the inverse, one
// uncompressed batch per entry whose record i is the entry's message i:
// key from partition_key (null if absent or null_partition_key), value
// from the payload (null if null_value), headers from properties,
// timestamp event_time if set, else the message's publish_time.
//
// A round trip keeps keys, values (null included), headers and timestamps
// in order, except that a null header value comes back empty and a
// timestamp <= 0 comes back as the publish time.

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

// kafkaProducerName is the producer_name of entries converted from Kafka.
const kafkaProducerName = "kafka"

// KafkaToPulsar converts a stored record batch v2 (any codec) into a Pulsar
// entry payload as ParseEntry reads it, checksum included. maxSize bounds
// the decompressed records; publishTime (ms) is the entry's publish_time.
// A control batch gives ErrUnsupportedBatch; other errors wrap
// ErrCorruptBatch or ErrTooLarge.
func KafkaToPulsar(batch []byte, publishTime int64, maxSize int) ([]byte, error) {
	if len(batch) >= batchHeaderLen && batch[batchMagicOff] == 2 {
		if h := decodeHeader(batch); h.Control() {
			return nil, fmt.Errorf("%w: control batch", ErrUnsupportedBatch)
		}
	}
	var (
		payload []byte
		n       int32
		smd     msgpb.SingleMessageMetadata
		props   []*msgpb.KeyValue
		merr    error
	)
	_, err := readRecords(batch, maxSize, -1, func(h *RecordBatch, r Record) bool {
		smd.Reset()
		props = props[:0]
		for _, hd := range r.Headers {
			props = append(props, &msgpb.KeyValue{Key: proto.String(hd.Key), Value: proto.String(string(hd.Value))})
		}
		smd.Properties = props
		if r.Key != nil {
			if utf8.Valid(r.Key) {
				smd.PartitionKey = proto.String(string(r.Key))
			} else {
				smd.PartitionKey = proto.String(base64.StdEncoding.EncodeToString(r.Key))
				smd.PartitionKeyB64Encoded = proto.Bool(true)
			}
		}
		smd.PayloadSize = proto.Int32(int32(len(r.Value)))
		if r.Value == nil {
			smd.NullValue = proto.Bool(true)
		}
		if ts := recordTime(h, &r); ts > 0 {
			smd.EventTime = proto.Uint64(uint64(ts))
		}
		smd.SequenceId = proto.Uint64(uint64(r.OffsetDelta))
		at := len(payload)
		payload = append(payload, 0, 0, 0, 0)
		if payload, merr = (proto.MarshalOptions{}).MarshalAppend(payload, &smd); merr != nil {
			return false
		}
		binary.BigEndian.PutUint32(payload[at:], uint32(len(payload)-at-4))
		payload = append(payload, r.Value...)
		n++
		return true
	})
	if err == nil {
		err = merr
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		// Producers never send one; a Pulsar batch cannot be empty.
		return nil, fmt.Errorf("%w: no records", ErrCorruptBatch)
	}
	md := &msgpb.MessageMetadata{
		ProducerName:       proto.String(kafkaProducerName),
		SequenceId:         proto.Uint64(0),
		PublishTime:        proto.Uint64(uint64(max(publishTime, 0))),
		NumMessagesInBatch: proto.Int32(n),
		Compression:        msgpb.CompressionType_NONE.Enum(),
	}
	mb, err := proto.Marshal(md)
	if err != nil {
		return nil, err
	}
	out := make([]byte, checksumLen+4, checksumLen+4+len(mb)+len(payload))
	binary.BigEndian.PutUint16(out, checksumMagic)
	binary.BigEndian.PutUint32(out[checksumLen:], uint32(len(mb)))
	out = append(append(out, mb...), payload...)
	binary.BigEndian.PutUint32(out[2:], crc32.Checksum(out[checksumLen:], castagnoli))
	return out, nil
}

// recordTime is the timestamp of record r of the batch with header h.
func recordTime(h *RecordBatch, r *Record) int64 {
	if h.LogAppendTime() {
		return h.MaxTimestamp
	}
	return h.FirstTimestamp + r.TimestampDelta
}

// AppendPulsarAsKafka appends to dst a Pulsar entry payload (batched or
// not, any compression, checksum verified if present) converted into one
// uncompressed record batch v2 at baseOffset, and returns the record count:
// the entry's message count. publishTime (ms) stands in for a missing
// publish_time. maxSize bounds the decompressed payload. Encrypted,
// chunked and marker entries and unknown codecs give ErrUnsupportedBatch;
// other errors wrap ErrBadEntry or ErrTooLarge. On error dst is returned unchanged.
func AppendPulsarAsKafka(dst, entry []byte, baseOffset, publishTime int64, maxSize int) ([]byte, int32, error) {
	if len(entry) >= checksumLen && binary.BigEndian.Uint16(entry) == checksumMagic {
		if want, got := binary.BigEndian.Uint32(entry[2:]), crc32.Checksum(entry[checksumLen:], castagnoli); want != got {
			return dst, 0, fmt.Errorf("%w: checksum %#08x, computed %#08x", ErrBadEntry, want, got)
		}
	}
	md, payload, err := ParseEntry(entry)
	if err != nil {
		return dst, 0, err
	}
	switch {
	case len(md.GetEncryptionKeys()) > 0:
		return dst, 0, fmt.Errorf("%w: encrypted Pulsar entry", ErrUnsupportedBatch)
	case md.GetNumChunksFromMsg() > 1:
		return dst, 0, fmt.Errorf("%w: chunk %d of a chunked Pulsar message", ErrUnsupportedBatch, md.GetChunkId())
	case md.GetMarkerType() != 0:
		return dst, 0, fmt.Errorf("%w: Pulsar marker %d", ErrUnsupportedBatch, md.GetMarkerType())
	}
	data, err := DecompressPulsar(md.GetCompression(), payload, md.GetUncompressedSize(), maxSize)
	if err != nil {
		if errors.Is(err, ErrUnknownCodec) {
			return dst, 0, fmt.Errorf("%w: %w", ErrUnsupportedBatch, err)
		}
		if errors.Is(err, ErrTooLarge) {
			return dst, 0, err
		}
		return dst, 0, fmt.Errorf("%w: payload: %w", ErrBadEntry, err)
	}
	if data == nil {
		data = []byte{} // values are slices of data; nil would read as null
	}
	defTime := publishTime
	if pt := md.GetPublishTime(); pt > 0 && pt <= math.MaxInt64 {
		defTime = int64(pt)
	}

	start := len(dst)
	out := append(dst, make([]byte, batchHeaderLen)...)
	h := RecordBatch{BaseOffset: baseOffset, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	var r Record
	add := func(i int32, key, value []byte, props []*msgpb.KeyValue, eventTime uint64) {
		ts := defTime
		if eventTime > 0 && eventTime <= math.MaxInt64 {
			ts = int64(eventTime)
		}
		if i == 0 {
			h.FirstTimestamp, h.MaxTimestamp = ts, ts
		}
		h.MaxTimestamp = max(h.MaxTimestamp, ts)
		r = Record{TimestampDelta: ts - h.FirstTimestamp, OffsetDelta: i, Key: key, Value: value, Headers: r.Headers[:0]}
		for _, p := range props {
			r.Headers = append(r.Headers, RecordHeader{Key: p.GetKey(), Value: []byte(p.GetValue())})
		}
		out = appendRecord(out, &r)
	}

	if md.NumMessagesInBatch == nil {
		key, err := pulsarKey(md.PartitionKey, md.GetPartitionKeyB64Encoded(), md.GetNullPartitionKey())
		if err != nil {
			return dst, 0, err
		}
		value := data
		if md.GetNullValue() {
			value = nil
		}
		add(0, key, value, md.GetProperties(), md.GetEventTime())
		h.NumRecords = 1
		return finishBatch(out, start, h), 1, nil
	}

	// Each message takes at least a size and a payload_size field.
	const minMessage = 4 + 2
	n := md.GetNumMessagesInBatch()
	if n < 1 || int64(n)*minMessage > int64(len(data)) {
		return dst, 0, fmt.Errorf("%w: %d messages in a %d-byte batch", ErrBadEntry, n, len(data))
	}
	var smd msgpb.SingleMessageMetadata
	off := 0
	for i := int32(0); i < n; i++ {
		if len(data)-off < 4 {
			return dst, 0, fmt.Errorf("%w: message %d: truncated at byte %d of the batch", ErrBadEntry, i, off)
		}
		sz := binary.BigEndian.Uint32(data[off:])
		off += 4
		if uint64(sz) > uint64(len(data)-off) {
			return dst, 0, fmt.Errorf("%w: message %d: metadata size %d at byte %d past the end", ErrBadEntry, i, sz, off-4)
		}
		smd.Reset()
		if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(data[off:off+int(sz)], &smd); err != nil {
			return dst, 0, fmt.Errorf("%w: message %d: metadata at byte %d: %v", ErrBadEntry, i, off, err)
		}
		off += int(sz)
		ps := smd.GetPayloadSize()
		if ps < 0 || int64(ps) > int64(len(data)-off) {
			return dst, 0, fmt.Errorf("%w: message %d: payload_size %d at byte %d past the end", ErrBadEntry, i, ps, off)
		}
		key, err := pulsarKey(smd.PartitionKey, smd.GetPartitionKeyB64Encoded(), smd.GetNullPartitionKey())
		if err != nil {
			return dst, 0, fmt.Errorf("message %d: %w", i, err)
		}
		value := data[off : off+int(ps) : off+int(ps)]
		off += int(ps)
		if smd.GetNullValue() {
			value = nil
		}
		add(i, key, value, smd.GetProperties(), smd.GetEventTime())
	}
	if off != len(data) {
		return dst, 0, fmt.Errorf("%w: %d bytes after %d messages", ErrBadEntry, len(data)-off, n)
	}
	h.NumRecords = n
	h.LastOffsetDelta = n - 1
	return finishBatch(out, start, h), n, nil
}

// pulsarKey is the Kafka key of a Pulsar message's partition key.
func pulsarKey(pk *string, b64, null bool) ([]byte, error) {
	switch {
	case pk == nil || null:
		return nil, nil
	case b64:
		k, err := base64.StdEncoding.DecodeString(*pk)
		if err != nil {
			return nil, fmt.Errorf("%w: partition key: %v", ErrBadEntry, err)
		}
		return k, nil
	}
	return []byte(*pk), nil
}
