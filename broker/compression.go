package broker

// Codecs for the payloads the broker converts between Kafka and Pulsar.
//
// Kafka (record batch attributes bits 0-2; a whole batch's records section
// is compressed as one block, a legacy wrapper message's value is a
// compressed inner message set):
//
//	1 gzip    gzip stream (possibly multi-member)
//	2 snappy  raw snappy block, or xerial framing:
//	          "\x82SNAPPY\x00" | version u32 | compat u32 | { len u32 | raw block }*
//	3 lz4     LZ4 frame format (not a raw block)
//	4 zstd    zstd frame(s)
//
// Pulsar (MessageMetadata.compression; uncompressed_size gives the size):
//
//	LZ4 raw LZ4 block, ZLIB zlib stream, ZSTD zstd frame, SNAPPY raw snappy block.
//
// Big-endian throughout. These are wire formats.
//
// Decompression never produces more than a caller-given limit: beyond it the
// call fails with ErrTooLarge before allocating more than about the limit.
// Other decompression failures are reported as plain errors; the callers in
// this package classify them (ErrCorruptBatch, ErrBadEntry).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

// KafkaCodec is a Kafka compression codec (record batch attributes bits
// 0-2, legacy message attributes bits 0-2). Wire format.
type KafkaCodec int8

// Kafka codecs.
const (
	KafkaNone   KafkaCodec = 0
	KafkaGzip   KafkaCodec = 1
	KafkaSnappy KafkaCodec = 2
	KafkaLZ4    KafkaCodec = 3
	KafkaZstd   KafkaCodec = 4
)

func (c KafkaCodec) String() string {
	switch c {
	case KafkaNone:
		return "none"
	case KafkaGzip:
		return "gzip"
	case KafkaSnappy:
		return "snappy"
	case KafkaLZ4:
		return "lz4"
	case KafkaZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", int8(c))
}

// ErrTooLarge reports data that decompresses to more than the caller's limit.
var ErrTooLarge = errors.New("broker: decompressed size exceeds the limit")

// ErrUnknownCodec reports a compression codec this package does not know.
var ErrUnknownCodec = errors.New("broker: unknown compression codec")

// xerialMagic starts xerial-framed snappy (snappy-java's SnappyOutputStream),
// followed by two u32s: version and minimum compatible version.
var xerialMagic = []byte("\x82SNAPPY\x00")

const xerialHeaderLen = 8 + 4 + 4

// DecompressKafka decompresses a Kafka-compressed block into a new slice of
// at most limit bytes. KafkaNone returns src itself.
func DecompressKafka(c KafkaCodec, src []byte, limit int) ([]byte, error) {
	switch c {
	case KafkaNone:
		if len(src) > limit {
			return nil, fmt.Errorf("%w: %d > %d bytes", ErrTooLarge, len(src), limit)
		}
		return src, nil
	case KafkaGzip:
		r, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return readLimited(r, limit, "gzip")
	case KafkaSnappy:
		if bytes.HasPrefix(src, xerialMagic) {
			return decodeXerial(src, limit)
		}
		return decodeSnappy(nil, src, limit)
	case KafkaLZ4:
		r := lz4Readers.Get().(*lz4.Reader)
		defer lz4Readers.Put(r)
		r.Reset(bytes.NewReader(src))
		return readLimited(r, limit, "lz4")
	case KafkaZstd:
		return decodeZstd(src, limit)
	}
	return nil, fmt.Errorf("%w: kafka %v", ErrUnknownCodec, c)
}

// AppendCompressKafka appends src compressed with c to dst (lz4: a frame;
// snappy: a raw block, which every client accepts).
func AppendCompressKafka(dst []byte, c KafkaCodec, src []byte) ([]byte, error) {
	switch c {
	case KafkaNone:
		return append(dst, src...), nil
	case KafkaGzip:
		buf := bytes.NewBuffer(dst)
		w := gzip.NewWriter(buf)
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case KafkaSnappy:
		return append(dst, snappy.Encode(nil, src)...), nil
	case KafkaLZ4:
		buf := bytes.NewBuffer(dst)
		w := lz4.NewWriter(buf)
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case KafkaZstd:
		return zstdEncoder().EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("%w: kafka %v", ErrUnknownCodec, c)
}

// DecompressPulsar decompresses a Pulsar payload whose metadata says
// uncompressed_size = size into a new slice of at most limit bytes; the
// result must be exactly size bytes. NONE returns src itself.
func DecompressPulsar(c msgpb.CompressionType, src []byte, size uint32, limit int) ([]byte, error) {
	if uint64(size) > uint64(limit) {
		return nil, fmt.Errorf("%w: uncompressed_size %d > %d", ErrTooLarge, size, limit)
	}
	var out []byte
	var err error
	switch c {
	case msgpb.CompressionType_NONE:
		if len(src) > limit {
			return nil, fmt.Errorf("%w: %d > %d bytes", ErrTooLarge, len(src), limit)
		}
		return src, nil
	case msgpb.CompressionType_LZ4:
		out = make([]byte, size)
		var n int
		if n, err = lz4.UncompressBlock(src, out); err == nil && n != int(size) {
			err = fmt.Errorf("lz4 block: %d bytes, want %d", n, size)
		}
	case msgpb.CompressionType_ZLIB:
		var r io.ReadCloser
		if r, err = zlib.NewReader(bytes.NewReader(src)); err != nil {
			return nil, fmt.Errorf("zlib: %w", err)
		}
		out, err = readLimited(r, int(size), "zlib")
	case msgpb.CompressionType_ZSTD:
		out, err = decodeZstd(src, int(size))
	case msgpb.CompressionType_SNAPPY:
		out, err = decodeSnappy(nil, src, int(size))
	default:
		return nil, fmt.Errorf("%w: pulsar %v", ErrUnknownCodec, c)
	}
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			// More than uncompressed_size: the metadata is wrong, not the limit.
			return nil, fmt.Errorf("%v: decompresses past uncompressed_size %d", c, size)
		}
		return nil, err
	}
	if len(out) != int(size) {
		return nil, fmt.Errorf("%v: %d bytes, uncompressed_size %d", c, len(out), size)
	}
	return out, nil
}

// CompressPulsar compresses src with c as a Pulsar producer would; the
// metadata's uncompressed_size must be len(src).
func CompressPulsar(c msgpb.CompressionType, src []byte) ([]byte, error) {
	switch c {
	case msgpb.CompressionType_NONE:
		return src, nil
	case msgpb.CompressionType_LZ4:
		dst := make([]byte, lz4.CompressBlockBound(len(src)))
		var comp lz4.Compressor
		n, err := comp.CompressBlock(src, dst)
		if err != nil {
			return nil, fmt.Errorf("lz4: %w", err)
		}
		return dst[:n], nil
	case msgpb.CompressionType_ZLIB:
		var buf bytes.Buffer
		w := zlib.NewWriter(&buf)
		if _, err := w.Write(src); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	case msgpb.CompressionType_ZSTD:
		return zstdEncoder().EncodeAll(src, nil), nil
	case msgpb.CompressionType_SNAPPY:
		return snappy.Encode(nil, src), nil
	}
	return nil, fmt.Errorf("%w: pulsar %v", ErrUnknownCodec, c)
}

// readLimited reads r to its end, failing once it passes limit bytes.
func readLimited(r io.Reader, limit int, what string) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("%w: %s data over %d bytes", ErrTooLarge, what, limit)
	}
	return out, nil
}

// decodeSnappy appends the raw snappy block src to dst, keeping len(dst)
// within limit.
func decodeSnappy(dst, src []byte, limit int) ([]byte, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	if n > limit-len(dst) {
		return nil, fmt.Errorf("%w: snappy data over %d bytes", ErrTooLarge, limit)
	}
	out, err := snappy.Decode(nil, src)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	return append(dst, out...), nil
}

func decodeXerial(src []byte, limit int) ([]byte, error) {
	if len(src) < xerialHeaderLen {
		return nil, fmt.Errorf("xerial snappy: %d-byte header", len(src))
	}
	out := []byte{}
	for off := xerialHeaderLen; off < len(src); {
		if len(src)-off < 4 {
			return nil, fmt.Errorf("xerial snappy: truncated chunk length at byte %d", off)
		}
		n := binary.BigEndian.Uint32(src[off:])
		off += 4
		if uint64(n) > uint64(len(src)-off) {
			return nil, fmt.Errorf("xerial snappy: chunk of %d bytes at byte %d past the end (%d)", n, off, len(src))
		}
		var err error
		if out, err = decodeSnappy(out, src[off:off+int(n)], limit); err != nil {
			return nil, err
		}
		off += int(n)
	}
	return out, nil
}

// zstdMaxWindow bounds the window a hostile frame can make a decoder
// allocate. Kafka and Pulsar clients use windows of at most 8 MiB at their
// default levels; the largest levels use up to 128 MiB and are refused.
const zstdMaxWindow = 32 << 20

// Decoders are pooled rather than shared: DecodeAll on a shared decoder
// cannot bound its output per call without preallocating the limit. With
// concurrency 1 a stream decoder runs synchronously (no goroutines to leak
// when the pool drops it).
var zstdDecoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
}}

func decodeZstd(src []byte, limit int) ([]byte, error) {
	d := zstdDecoders.Get().(*zstd.Decoder)
	defer zstdDecoders.Put(d)
	// A bytes.Reader, not a bytes.Buffer: the decoder would decode a
	// Buffer in one go, unbounded by our limit.
	if err := d.Reset(bytes.NewReader(src)); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	defer d.Reset(nil)
	return readLimited(d, limit, "zstd")
}

// zstdEncoder is shared: EncodeAll is safe for concurrent use, up to
// GOMAXPROCS calls at once (the default concurrency).
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err) // only for invalid options
	}
	return e
})

var lz4Readers = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
