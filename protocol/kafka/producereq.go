package kafka

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/ledger"
)

// A Produce request (v3+) is decoded as it arrives, not read whole and
// then parsed: each partition's records are read into a buffer of their
// own with ledger.AppendRoom free bytes in front, where the managed ledger
// writes its headers (AppendInPlace). Read whole, the records sat between
// other fields of the request, and storing them cost a copy of every
// byte: a tenth of the broker's CPU under a 1-partition produce.
//
// The decoding is kmsg's (ProduceRequest.ReadFrom) field for field, with
// the same bounds: no array or buffer larger than what is left of the
// request, whose size the caller has checked against max-request-size.

// produceFirstStreamed is the first Produce version decoded as it
// arrives: v0–v2 carry message sets, which are converted (copied) anyway.
const produceFirstStreamed = 3

// smallString is the longest string read straight out of the read
// buffer (names, ids); longer ones go through a buffer of their own.
const smallString = 256

// errShortRequest is a field that runs past the end of its request.
var errShortRequest = errors.New("a field runs past the end of the request")

// requestReader reads one request's fields from the connection, never
// past the request's end. Its first error sticks; every read after it
// returns zero values.
type requestReader struct {
	r    *bufio.Reader
	left int // bytes of the request not read yet
	err  error
}

// fail records err (the first one wins).
func (rr *requestReader) fail(err error) {
	if rr.err == nil {
		rr.err = err
	}
}

// readErr records a read error of the connection.
func (rr *requestReader) readErr(err error) {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	rr.fail(fmt.Errorf("truncated request: %w", err))
}

// small returns the next n bytes (n at most the read buffer's size) from
// the read buffer, valid until the next read, or nil after an error.
func (rr *requestReader) small(n int) []byte {
	if rr.err != nil {
		return nil
	}
	if n > rr.left {
		rr.fail(errShortRequest)
		return nil
	}
	b, err := rr.r.Peek(n)
	if err != nil {
		rr.readErr(err)
		return nil
	}
	rr.r.Discard(n) // cannot fail after Peek(n)
	rr.left -= n
	return b
}

func (rr *requestReader) int16() int16 {
	if b := rr.small(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (rr *requestReader) int32() int32 {
	if b := rr.small(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

// uvarint reads an unsigned varint of at most 5 bytes (a uint32), as
// Kafka's compact lengths and tags are.
func (rr *requestReader) uvarint() uint32 {
	var v uint32
	for i := 0; i < 5; i++ {
		b := rr.small(1)
		if b == nil {
			return 0
		}
		c := b[0]
		v |= uint32(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v
		}
	}
	rr.fail(errors.New("a varint longer than 5 bytes"))
	return 0
}

// length reads a length or count: an int32, or in a flexible version an
// uvarint of length+1. Any negative is null (-1), as kmsg reads it.
func (rr *requestReader) length(flexible bool) int {
	var n int64
	if flexible {
		n = int64(rr.uvarint()) - 1
	} else {
		n = int64(rr.int32())
	}
	return int(max(n, -1))
}

// count reads an array's length and checks that as many elements of at
// least minSize bytes fit in what is left. A null array counts 0.
func (rr *requestReader) count(flexible bool, minSize int) int {
	n := rr.length(flexible)
	if rr.err == nil && n > 0 && n > rr.left/minSize {
		rr.fail(fmt.Errorf("an array of %d elements in the %d bytes left: %w", n, rr.left, errShortRequest))
		return 0
	}
	return max(n, 0)
}

// bytes reads n bytes into a new buffer after room free bytes: the
// buffer is room+n bytes long.
func (rr *requestReader) bytes(n, room int) []byte {
	if rr.err != nil {
		return nil
	}
	if n > rr.left {
		rr.fail(fmt.Errorf("%d bytes in the %d left: %w", n, rr.left, errShortRequest))
		return nil
	}
	// Not zeroed (makeNoZero): the read fills b[room:], and the caller
	// owns filling b[:room] before the buffer is used.
	b := makeNoZero(room + n)
	if _, err := io.ReadFull(rr.r, b[room:]); err != nil {
		rr.readErr(err)
		return nil
	}
	rr.left -= n
	return b
}

// string reads a nullable string: int16 length, or in a flexible version
// a compact one; a negative length is null.
func (rr *requestReader) string(flexible bool) (s string, ok bool) {
	var n int
	if flexible {
		n = rr.length(true)
	} else {
		n = int(rr.int16())
	}
	if n < 0 || rr.err != nil {
		return "", false
	}
	if n <= smallString {
		return string(rr.small(n)), rr.err == nil
	}
	return string(rr.bytes(n, 0)), rr.err == nil
}

// tags reads a tagged-field section into t.
func (rr *requestReader) tags(t *kmsg.Tags) {
	for n := rr.uvarint(); n > 0 && rr.err == nil; n-- {
		key := rr.uvarint()
		size := int(rr.uvarint())
		if rr.err == nil {
			t.Set(key, rr.bytes(size, 0))
		}
	}
}

// skip drops what is left of the request.
func (rr *requestReader) skip() {
	if rr.err == nil && rr.left > 0 {
		n, err := rr.r.Discard(rr.left)
		rr.left -= n
		if err != nil {
			rr.fail(fmt.Errorf("truncated request: %w", err))
		}
	}
}

// readProduce decodes the rest of a Produce request of version (at least
// produceFirstStreamed), left bytes after its correlation id: the client
// id, the header's tags, then the body into req. It returns each
// partition's records with ledger.AppendRoom free bytes in front (by
// topic, then partition; nil for null records), req's Records being
// their tails.
func readProduce(r *bufio.Reader, left int, version int16) (clientID string, req *kmsg.ProduceRequest, framed [][][]byte, err error) {
	rr := &requestReader{r: r, left: left}
	// The header's client id is a plain nullable string in every version.
	clientID, _ = rr.string(false)
	req = kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	flexible := req.IsFlexible()
	if flexible {
		var headerTags kmsg.Tags
		rr.tags(&headerTags)
	}
	if id, ok := rr.string(flexible); ok {
		req.TransactionID = &id
	}
	req.Acks = rr.int16()
	req.TimeoutMillis = rr.int32()
	if n := rr.count(flexible, 2); n > 0 {
		req.Topics = make([]kmsg.ProduceRequestTopic, n)
		framed = make([][][]byte, n)
	}
	for i := range req.Topics {
		t := &req.Topics[i]
		t.Topic, _ = rr.string(flexible)
		if n := rr.count(flexible, 6); n > 0 {
			t.Partitions = make([]kmsg.ProduceRequestTopicPartition, n)
			framed[i] = make([][]byte, n)
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			p.Partition = rr.int32()
			if n := rr.length(flexible); n >= 0 {
				if b := rr.bytes(n, ledger.AppendRoom); b != nil {
					framed[i][j] = b
					p.Records = b[ledger.AppendRoom:]
				}
			}
			if flexible {
				rr.tags(&p.UnknownTags)
			}
		}
		if flexible {
			rr.tags(&t.UnknownTags)
		}
	}
	if flexible {
		rr.tags(&req.UnknownTags)
	}
	// kmsg leaves bytes after the last field unread; so does this.
	rr.skip()
	if rr.err != nil {
		return "", nil, nil, rr.err
	}
	return clientID, req, framed, nil
}
