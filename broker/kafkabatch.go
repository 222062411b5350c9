package broker

// Kafka record batches (magic 2) and legacy message sets (magic 0 and 1).
//
// Record batch v2, big-endian; batchLength counts the bytes after itself and
// the CRC-32C (Castagnoli) covers attributes through the end, so baseOffset
// can be rewritten without recomputing it:
//
//	 0 baseOffset i64             27 firstTimestamp i64
//	 8 batchLength i32            35 maxTimestamp i64
//	12 partitionLeaderEpoch i32   43 producerId i64
//	16 magic i8 (2)               51 producerEpoch i16
//	17 crc u32                    53 baseSequence i32
//	21 attributes i16             57 records count i32
//	23 lastOffsetDelta i32        61 records (compressed as one block if any codec)
//
// attributes: bits 0-2 codec (KafkaCodec), bit 3 timestamp type (1: log
// append time, every record's timestamp is maxTimestamp), bit 4
// transactional, bit 5 control. Each record (varints zigzag-encoded):
//
//	length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//	keyLen varint (-1 null) | key | valueLen varint (-1 null) | value |
//	headers varint | { keyLen varint | key | valueLen varint (-1 null) | value }*
//
// Legacy message set: repeated messages
//
//	offset i64 | size i32 | crc u32 | magic i8 | attributes i8 |
//	[timestamp i64, magic 1 only] | keyLen i32 (-1 null) | key | valueLen i32 (-1 null) | value
//
// with an IEEE CRC-32 over magic through the end. A compressed message
// (attributes bits 0-2) wraps a compressed inner message set in its value.
// These are wire (and, for batches, stored) formats.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// ErrCorruptBatch reports Kafka batch bytes that fail validation: a bad
// checksum, lengths or counts that do not add up, undecodable compression.
// The message says what was wrong and at which byte.
var ErrCorruptBatch = errors.New("broker: corrupt Kafka record batch")

// ErrUnsupportedBatch reports well-formed input this package does not
// convert: an unknown magic or codec (also wrapping ErrUnknownCodec), a
// control batch, an encrypted, chunked or marker Pulsar entry.
var ErrUnsupportedBatch = errors.New("broker: unsupported Kafka record batch")

// Record batch layout; wire format.
const (
	batchLengthOff = 8
	batchMagicOff  = 16
	batchCRCOff    = 17
	batchAttrOff   = 21
	batchHeaderLen = 61
	// batchLength of a batch with no records section.
	batchMinLength = batchHeaderLen - 12

	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20

	// Smallest record: every field a one-byte varint or i8.
	minRecordLen = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// RecordBatch is the header of a record batch v2.
type RecordBatch struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	FirstTimestamp       int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	NumRecords           int32
}

// Compression is the codec of the records section.
func (h *RecordBatch) Compression() KafkaCodec { return KafkaCodec(h.Attributes & attrCodecMask) }

// LogAppendTime says whether every record's timestamp is MaxTimestamp.
func (h *RecordBatch) LogAppendTime() bool { return h.Attributes&attrLogAppendTime != 0 }

// Transactional says whether the batch belongs to a transaction.
func (h *RecordBatch) Transactional() bool { return h.Attributes&attrTransactional != 0 }

// Control says whether the batch holds control records (transaction markers).
func (h *RecordBatch) Control() bool { return h.Attributes&attrControl != 0 }

// decodeHeader decodes the first batchHeaderLen bytes of b; the caller
// checks the length.
func decodeHeader(b []byte) RecordBatch {
	be := binary.BigEndian
	return RecordBatch{
		BaseOffset:           int64(be.Uint64(b[0:])),
		BatchLength:          int32(be.Uint32(b[8:])),
		PartitionLeaderEpoch: int32(be.Uint32(b[12:])),
		Magic:                int8(b[16]),
		CRC:                  be.Uint32(b[17:]),
		Attributes:           int16(be.Uint16(b[21:])),
		LastOffsetDelta:      int32(be.Uint32(b[23:])),
		FirstTimestamp:       int64(be.Uint64(b[27:])),
		MaxTimestamp:         int64(be.Uint64(b[35:])),
		ProducerID:           int64(be.Uint64(b[43:])),
		ProducerEpoch:        int16(be.Uint16(b[51:])),
		BaseSequence:         int32(be.Uint32(b[53:])),
		NumRecords:           int32(be.Uint32(b[57:])),
	}
}

// RecordsMagic returns the magic byte of the first batch or message in a
// records field (2: record batches; 0, 1: a legacy message set), or -1 if
// records is too short to have one.
func RecordsMagic(records []byte) int8 {
	if len(records) <= batchMagicOff {
		return -1
	}
	return int8(records[batchMagicOff])
}

// RawBatch is one record batch of a records field.
type RawBatch struct {
	Header RecordBatch
	Bytes  []byte // the whole batch; aliases the input
}

// SplitRecordBatches splits a Produce request's records field into its
// batches, validating each header: magic 2 (else ErrUnsupportedBatch; a
// legacy message set goes through MessageSetToBatch), batchLength within
// the input, the CRC, at least one record and lastOffsetDelta = count-1 (as
// every producer sends). Records themselves are not decoded. Other
// failures wrap ErrCorruptBatch.
func SplitRecordBatches(records []byte) ([]RawBatch, error) {
	var out []RawBatch
	for off := 0; off < len(records); {
		h, n, err := checkBatch(records[off:], off)
		if err != nil {
			return nil, err
		}
		if h.NumRecords < 1 || h.LastOffsetDelta != h.NumRecords-1 {
			return nil, fmt.Errorf("%w: batch at byte %d: %d records, lastOffsetDelta %d",
				ErrCorruptBatch, off, h.NumRecords, h.LastOffsetDelta)
		}
		out = append(out, RawBatch{Header: h, Bytes: records[off : off+n : off+n]})
		off += n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no record batch", ErrCorruptBatch)
	}
	return out, nil
}

// checkBatch validates the header, length and CRC of the batch starting b
// (at byte pos of its input, for messages) and returns its size.
func checkBatch(b []byte, pos int) (RecordBatch, int, error) {
	if len(b) <= batchMagicOff {
		return RecordBatch{}, 0, fmt.Errorf("%w: %d bytes at byte %d, short of a batch header",
			ErrCorruptBatch, len(b), pos)
	}
	if m := b[batchMagicOff]; m != 2 {
		return RecordBatch{}, 0, fmt.Errorf("%w: magic %d at byte %d", ErrUnsupportedBatch, int8(m), pos+batchMagicOff)
	}
	if len(b) < batchHeaderLen {
		return RecordBatch{}, 0, fmt.Errorf("%w: %d bytes at byte %d, short of a batch header",
			ErrCorruptBatch, len(b), pos)
	}
	h := decodeHeader(b)
	if h.BatchLength < batchMinLength || int64(h.BatchLength) > int64(len(b)-12) {
		return RecordBatch{}, 0, fmt.Errorf("%w: batchLength %d at byte %d, %d bytes follow",
			ErrCorruptBatch, h.BatchLength, pos+batchLengthOff, len(b)-12)
	}
	n := 12 + int(h.BatchLength)
	if c := crc32.Checksum(b[batchAttrOff:n], castagnoli); c != h.CRC {
		return RecordBatch{}, 0, fmt.Errorf("%w: batch at byte %d: crc %#08x, computed %#08x",
			ErrCorruptBatch, pos, h.CRC, c)
	}
	return h, n, nil
}

// Record is one record of a batch. A nil Key or Value is null; a non-nil
// empty one is empty. Slices alias the batch (or its decompressed records).
type Record struct {
	Attributes     int8
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte
	Value          []byte
	Headers        []RecordHeader
}

// RecordHeader is a record header; a nil Value is null.
type RecordHeader struct {
	Key   string
	Value []byte
}

// ReadRecords validates one record batch (header and CRC as
// SplitRecordBatches, except the count rules) and decodes its records,
// decompressing them into at most limit bytes. Errors wrap ErrCorruptBatch,
// ErrUnsupportedBatch or ErrTooLarge.
func ReadRecords(batch []byte, limit int) (RecordBatch, []Record, error) {
	var recs []Record
	h, err := readRecords(batch, limit, -1, func(_ *RecordBatch, r Record) bool {
		recs = append(recs, r)
		return true
	})
	return h, recs, err
}

// FirstRecordKey returns the key of the first record of a batch (nil:
// null), what Key_Shared routes a Kafka-produced entry by. limit bounds
// decompression as in ReadRecords.
func FirstRecordKey(batch []byte, limit int) ([]byte, error) {
	var key []byte
	_, err := readRecords(batch, limit, 1, func(_ *RecordBatch, r Record) bool {
		key = r.Key
		return false
	})
	return key, err
}

// readRecords decodes the records of batch in order and calls fn on each
// (with the batch header) until fn returns false. Unless it stops early, the records section must
// hold exactly the header's count of records. If stopAfter > 0, it stops
// after that many records.
func readRecords(batch []byte, limit, stopAfter int, fn func(*RecordBatch, Record) bool) (RecordBatch, error) {
	h, n, err := checkBatch(batch, 0)
	if err != nil {
		return h, err
	}
	if n != len(batch) {
		return h, fmt.Errorf("%w: %d bytes after the batch", ErrCorruptBatch, len(batch)-n)
	}
	data := batch[batchHeaderLen:n]
	if c := h.Compression(); c != KafkaNone {
		if data, err = DecompressKafka(c, data, limit); err != nil {
			if errors.Is(err, ErrUnknownCodec) {
				return h, fmt.Errorf("%w: %w", ErrUnsupportedBatch, err)
			}
			if errors.Is(err, ErrTooLarge) {
				return h, err
			}
			return h, fmt.Errorf("%w: records: %w", ErrCorruptBatch, err)
		}
	}
	// Every record takes at least minRecordLen bytes, so a count beyond
	// that is corrupt; checking first bounds the work on hostile counts.
	if h.NumRecords < 0 || int64(h.NumRecords)*minRecordLen > int64(len(data)) {
		return h, fmt.Errorf("%w: %d records in %d bytes", ErrCorruptBatch, h.NumRecords, len(data))
	}
	d := recordDecoder{b: data}
	for i := int32(0); i < h.NumRecords; i++ {
		r, err := d.record()
		if err != nil {
			return h, fmt.Errorf("%w: record %d: %v", ErrCorruptBatch, i, err)
		}
		if !fn(&h, r) || (stopAfter > 0 && int(i+1) >= stopAfter) {
			return h, nil
		}
	}
	if d.off != len(d.b) {
		return h, fmt.Errorf("%w: %d bytes after %d records", ErrCorruptBatch, len(d.b)-d.off, h.NumRecords)
	}
	return h, nil
}

// recordDecoder reads records from b; errors name the byte offset in the
// (decompressed) records section.
type recordDecoder struct {
	b   []byte
	off int
}

func (d *recordDecoder) varlong() (int64, error) {
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		return 0, fmt.Errorf("bad varint at byte %d", d.off)
	}
	d.off += n
	return v, nil
}

func (d *recordDecoder) varint() (int32, error) {
	at := d.off
	v, err := d.varlong()
	if err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
		err = fmt.Errorf("varint %d out of range at byte %d", v, at)
	}
	return int32(v), err
}

// bytes reads a varint length and that many bytes; -1 is null (nil).
func (d *recordDecoder) bytes(end int) ([]byte, error) {
	at := d.off
	n, err := d.varint()
	if err != nil || n == -1 {
		return nil, err
	}
	if n < 0 || int64(n) > int64(end-d.off) {
		return nil, fmt.Errorf("length %d at byte %d past the record's end", n, at)
	}
	v := d.b[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return v, nil
}

func (d *recordDecoder) record() (Record, error) {
	var r Record
	at := d.off
	n, err := d.varint()
	if err != nil {
		return r, err
	}
	if n < minRecordLen-1 || int64(n) > int64(len(d.b)-d.off) {
		return r, fmt.Errorf("length %d at byte %d, %d bytes follow", n, at, len(d.b)-d.off)
	}
	end := d.off + int(n)
	// Bound reads by the record's end: fields must not run past it.
	rest := d.b
	d.b = d.b[:end]
	defer func() { d.b = rest }()
	r.Attributes = int8(d.b[d.off])
	d.off++
	if r.TimestampDelta, err = d.varlong(); err != nil {
		return r, err
	}
	if r.OffsetDelta, err = d.varint(); err != nil {
		return r, err
	}
	if r.Key, err = d.bytes(end); err != nil {
		return r, err
	}
	if r.Value, err = d.bytes(end); err != nil {
		return r, err
	}
	nh, err := d.varint()
	if err != nil {
		return r, err
	}
	// A header takes at least two bytes.
	if nh < 0 || int64(nh)*2 > int64(end-d.off) {
		return r, fmt.Errorf("%d headers in %d bytes at byte %d", nh, end-d.off, d.off)
	}
	if nh > 0 {
		r.Headers = make([]RecordHeader, nh)
	}
	for i := range r.Headers {
		k, err := d.bytes(end)
		if err != nil {
			return r, err
		}
		if k == nil {
			return r, fmt.Errorf("null header key at byte %d", d.off)
		}
		r.Headers[i].Key = string(k)
		if r.Headers[i].Value, err = d.bytes(end); err != nil {
			return r, err
		}
	}
	if d.off != end {
		return r, fmt.Errorf("record at byte %d: %d bytes left over", at, end-d.off)
	}
	return r, nil
}

// AppendRecordBatch appends an uncompressed record batch v2 holding recs
// with h's header fields. It computes batchLength, magic, CRC, count and
// lastOffsetDelta (the last record's offsetDelta), and clears the codec
// bits; recs must not be empty.
func AppendRecordBatch(dst []byte, h RecordBatch, recs []Record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, batchHeaderLen)...)
	for i := range recs {
		dst = appendRecord(dst, &recs[i])
	}
	h.Magic = 2
	h.Attributes &^= attrCodecMask
	h.NumRecords = int32(len(recs))
	if len(recs) > 0 {
		h.LastOffsetDelta = recs[len(recs)-1].OffsetDelta
	}
	return finishBatch(dst, start, h)
}

// finishBatch fills in the header of the batch at dst[start:], whose
// records follow the header, setting batchLength and the CRC.
func finishBatch(dst []byte, start int, h RecordBatch) []byte {
	b := dst[start:]
	be := binary.BigEndian
	be.PutUint64(b[0:], uint64(h.BaseOffset))
	be.PutUint32(b[8:], uint32(len(b)-12))
	be.PutUint32(b[12:], uint32(h.PartitionLeaderEpoch))
	b[16] = 2
	be.PutUint16(b[21:], uint16(h.Attributes))
	be.PutUint32(b[23:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[27:], uint64(h.FirstTimestamp))
	be.PutUint64(b[35:], uint64(h.MaxTimestamp))
	be.PutUint64(b[43:], uint64(h.ProducerID))
	be.PutUint16(b[51:], uint16(h.ProducerEpoch))
	be.PutUint32(b[53:], uint32(h.BaseSequence))
	be.PutUint32(b[57:], uint32(h.NumRecords))
	be.PutUint32(b[17:], crc32.Checksum(b[batchAttrOff:], castagnoli))
	return dst
}

func varintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutVarint(buf[:], v)
}

func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	return append(binary.AppendVarint(dst, int64(len(b))), b...)
}

func appendRecord(dst []byte, r *Record) []byte {
	n := 1 + varintLen(r.TimestampDelta) + varintLen(int64(r.OffsetDelta)) +
		bytesLen(r.Key) + bytesLen(r.Value) + varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesLen(h.Value)
	}
	dst = binary.AppendVarint(dst, int64(n))
	dst = append(dst, byte(r.Attributes))
	dst = binary.AppendVarint(dst, r.TimestampDelta)
	dst = binary.AppendVarint(dst, int64(r.OffsetDelta))
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

// AppendWithBaseOffset appends batch to dst with its baseOffset set to base.
// The CRC does not cover baseOffset, so it stays valid. batch must be at
// least a batch header long (as from SplitRecordBatches).
func AppendWithBaseOffset(dst, batch []byte, base int64) []byte {
	start := len(dst)
	dst = append(dst, batch...)
	binary.BigEndian.PutUint64(dst[start:], uint64(base))
	return dst
}

// Legacy message layout; wire format.
const (
	legacyLogOverhead = 8 + 4 // offset, size
	legacyV0Min       = 4 + 1 + 1 + 4 + 4
	legacyV1Min       = legacyV0Min + 8
	// Bound on what the compressed wrappers of one message set inflate to.
	maxMessageSetInflate = 64 << 20
)

// MessageSetToBatch converts a legacy message set (magic 0 or 1, compressed
// wrappers included) into one uncompressed record batch v2 with baseOffset
// 0, no producer (id -1, epoch -1, sequence -1) and create-time timestamps:
// a magic 1 message's own, now for magic 0. It returns the batch and its
// record count. Each message's CRC is verified. Compressed wrappers may
// inflate to maxMessageSetInflate bytes in all and must not nest. Errors
// wrap ErrCorruptBatch, ErrUnsupportedBatch or ErrTooLarge.
func MessageSetToBatch(set []byte, now int64) ([]byte, int32, error) {
	var recs []Record
	var ts []int64
	budget := maxMessageSetInflate
	add := func(key, value []byte, t int64) {
		recs = append(recs, Record{OffsetDelta: int32(len(recs)), Key: key, Value: value})
		ts = append(ts, t)
	}
	err := walkMessageSet(set, now, func(codec KafkaCodec, key, value []byte, t int64, pos int) error {
		if codec == KafkaNone {
			add(key, value, t)
			return nil
		}
		inner, err := DecompressKafka(codec, value, budget)
		if err != nil {
			if errors.Is(err, ErrUnknownCodec) {
				return fmt.Errorf("%w: message at byte %d: %w", ErrUnsupportedBatch, pos, err)
			}
			if errors.Is(err, ErrTooLarge) {
				return fmt.Errorf("message at byte %d: %w", pos, err)
			}
			return fmt.Errorf("%w: message at byte %d: %w", ErrCorruptBatch, pos, err)
		}
		budget -= len(inner)
		return walkMessageSet(inner, now, func(c KafkaCodec, k, v []byte, t int64, ipos int) error {
			if c != KafkaNone {
				return fmt.Errorf("%w: nested %v message at byte %d of the message at byte %d",
					ErrUnsupportedBatch, c, ipos, pos)
			}
			add(k, v, t)
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	if len(recs) == 0 {
		return nil, 0, fmt.Errorf("%w: empty message set", ErrCorruptBatch)
	}
	if len(recs) > math.MaxInt32 {
		return nil, 0, fmt.Errorf("%w: %d messages", ErrUnsupportedBatch, len(recs))
	}
	h := RecordBatch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1,
		FirstTimestamp: ts[0], MaxTimestamp: ts[0]}
	for i, t := range ts {
		recs[i].TimestampDelta = t - ts[0]
		h.MaxTimestamp = max(h.MaxTimestamp, t)
	}
	return AppendRecordBatch(nil, h, recs), int32(len(recs)), nil
}

// walkMessageSet calls fn on each message of a legacy message set with its
// codec, key, value, timestamp (now for magic 0) and byte position.
func walkMessageSet(set []byte, now int64, fn func(c KafkaCodec, key, value []byte, ts int64, pos int) error) error {
	be := binary.BigEndian
	for off := 0; off < len(set); {
		if len(set)-off < legacyLogOverhead+legacyV0Min {
			return fmt.Errorf("%w: %d bytes at byte %d, short of a message", ErrCorruptBatch, len(set)-off, off)
		}
		size := int32(be.Uint32(set[off+8:]))
		m := set[off+legacyLogOverhead:]
		magic := int8(m[4])
		minSize := legacyV0Min
		switch magic {
		case 0:
		case 1:
			minSize = legacyV1Min
		default:
			return fmt.Errorf("%w: magic %d at byte %d", ErrUnsupportedBatch, magic, off+legacyLogOverhead+4)
		}
		if size < int32(minSize) || int64(size) > int64(len(m)) {
			return fmt.Errorf("%w: message size %d at byte %d, %d bytes follow", ErrCorruptBatch, size, off+8, len(m))
		}
		m = m[:size]
		if c := crc32.ChecksumIEEE(m[4:]); c != be.Uint32(m) {
			return fmt.Errorf("%w: message at byte %d: crc %#08x, computed %#08x", ErrCorruptBatch, off, be.Uint32(m), c)
		}
		codec := KafkaCodec(m[5] & attrCodecMask)
		p, ts := 6, now
		if magic == 1 {
			ts = int64(be.Uint64(m[p:]))
			p += 8
		}
		key, p, err := legacyBytes(m, p)
		if err != nil {
			return fmt.Errorf("%w: message at byte %d: key: %v", ErrCorruptBatch, off, err)
		}
		value, p, err := legacyBytes(m, p)
		if err != nil {
			return fmt.Errorf("%w: message at byte %d: value: %v", ErrCorruptBatch, off, err)
		}
		if p != len(m) {
			return fmt.Errorf("%w: message at byte %d: %d bytes left over", ErrCorruptBatch, off, len(m)-p)
		}
		if err := fn(codec, key, value, ts, off); err != nil {
			return err
		}
		off += legacyLogOverhead + int(size)
	}
	return nil
}

// legacyBytes reads an i32-length-prefixed byte string (-1: nil) at m[p:].
func legacyBytes(m []byte, p int) ([]byte, int, error) {
	if len(m)-p < 4 {
		return nil, p, fmt.Errorf("no length at byte %d", p)
	}
	n := int32(binary.BigEndian.Uint32(m[p:]))
	p += 4
	if n == -1 {
		return nil, p, nil
	}
	if n < 0 || int64(n) > int64(len(m)-p) {
		return nil, p, fmt.Errorf("length %d at byte %d past the end", n, p-4)
	}
	return m[p : p+int(n) : p+int(n)], p + int(n), nil
}
