package kafka

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/ledger"
)

// testProduceRequest is a Produce request of version with every kind of
// field: a transactional id (v3+), two topics, records that are batches,
// empty or null, and unknown tags where the version has tags.
func testProduceRequest(version int16) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, -1, 30000
	req.TransactionID = kmsg.StringPtr("txn")
	for i, name := range []string{"first", "second"} {
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = name
		for j, recs := range [][]byte{plainBatch("a", "b"), nil, {}, plainBatch("c")} {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition, rp.Records = int32(10*i+j), recs
			if req.IsFlexible() {
				rp.UnknownTags.Set(uint32(j+1), []byte{byte(j)})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if req.IsFlexible() {
			rt.UnknownTags.Set(7, []byte("topic tag"))
		}
		req.Topics = append(req.Topics, rt)
	}
	if req.IsFlexible() {
		req.UnknownTags.Set(3, []byte("request tag"))
	}
	return req
}

// withHeaderTag is encode(req, corr) of a flexible request with a tag in
// the request header's tagged fields, which the decoder skips.
func withHeaderTag(req kmsg.Request, corr int32) []byte {
	b := encode(req, corr)
	// encode's header up to its tags, then one tag (0) of 2 bytes in
	// place of encode's empty tags (a 0 count).
	const tags = 4 + 8 + 2 + len("test")
	out := append(append(b[:tags:tags], 1, 0, 2, 'h', 't'), b[tags+1:]...)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	return out
}

func testConn() *conn { return &conn{s: &Server{cfg: Config{MaxRequestSize: 1 << 20}}} }

// TestReadProduceMatchesKmsg: a Produce request of every streamed version
// decodes as it arrives to what kmsg reads from the whole request, each
// partition's records behind ledger.AppendRoom free bytes of their own
// buffer; the next request in the stream is read after it.
func TestReadProduceMatchesKmsg(t *testing.T) {
	for v := int16(produceFirstStreamed); v <= apis[produceKey].max; v++ {
		req := testProduceRequest(v)
		wire := encode(req, 5)
		if req.IsFlexible() {
			wire = withHeaderTag(req, 5)
		}
		next := encode(kmsg.NewPtrMetadataRequest(), 6)
		c := testConn()
		br := bufio.NewReader(bytes.NewReader(append(append([]byte(nil), wire...), next...)))
		sl, got, err := c.readRequest(br)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if sl.key != produceKey || sl.version != v || sl.correlation != 5 || sl.clientID != "test" {
			t.Fatalf("v%d: slot %+v", v, sl)
		}
		want := kmsg.NewPtrProduceRequest()
		want.Version = v
		_, body, _ := SplitClientID(wire[12:])
		if req.IsFlexible() {
			body = body[5:] // the header's tags
		}
		if err := want.ReadFrom(body); err != nil {
			t.Fatalf("v%d: kmsg: %v", v, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("v%d: decoded\n%+v\nkmsg reads\n%+v", v, got, want)
		}
		pr := got.(*kmsg.ProduceRequest)
		for i, rt := range pr.Topics {
			for j, rp := range rt.Partitions {
				f := sl.framed[i][j]
				if rp.Records == nil {
					if f != nil {
						t.Fatalf("v%d: null records of %s/%d framed", v, rt.Topic, rp.Partition)
					}
					continue
				}
				if len(f) != ledger.AppendRoom+len(rp.Records) || (len(rp.Records) > 0 && &f[ledger.AppendRoom] != &rp.Records[0]) {
					t.Fatalf("v%d: records of %s/%d are not framed's tail (%d bytes framed, %d records)", v, rt.Topic, rp.Partition, len(f), len(rp.Records))
				}
			}
		}
		sl, _, err = c.readRequest(br)
		if err != nil || sl.key != 3 || sl.correlation != 6 {
			t.Fatalf("v%d: the next request: %+v, %v", v, sl, err)
		}
	}
}

// TestReadProduceBadInput: a Produce request cut short at any byte, one
// whose fields run past its announced size, one announcing more elements
// than its bytes can hold, and one with bytes after its last field.
func TestReadProduceBadInput(t *testing.T) {
	for _, v := range []int16{produceFirstStreamed, 8, 9, apis[produceKey].max} {
		wire := encode(testProduceRequest(v), 1)
		// Cut short: the stream ends inside the request.
		for n := range len(wire) {
			_, _, err := testConn().readRequest(bufio.NewReader(bytes.NewReader(wire[:n])))
			switch {
			case n == 0 && err != io.EOF:
				t.Fatalf("v%d: empty stream: %v, want io.EOF", v, err)
			case n > 0 && n < 4 && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("v%d: %d bytes: %v, want io.ErrUnexpectedEOF", v, n, err)
			case n >= 4 && !errors.Is(err, errBadRequest):
				t.Fatalf("v%d: cut at %d of %d bytes: %v, want a bad request", v, n, len(wire), err)
			}
		}
		// Announced shorter than it is: a field runs past the end.
		for _, size := range []int{8, 20, len(wire) - 10} {
			b := append([]byte(nil), wire...)
			binary.BigEndian.PutUint32(b, uint32(size))
			_, _, err := testConn().readRequest(bufio.NewReader(bytes.NewReader(b)))
			if !errors.Is(err, errBadRequest) || !errors.Is(err, errShortRequest) {
				t.Fatalf("v%d: announced %d bytes: %v, want a field past the end", v, size, err)
			}
		}
		// Bytes after the last field are ignored, as kmsg ignores them,
		// and the next request is read after them.
		b := append(append([]byte(nil), wire...), 1, 2, 3)
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		br := bufio.NewReader(bytes.NewReader(append(b, encode(kmsg.NewPtrMetadataRequest(), 2)...)))
		c := testConn()
		if _, req, err := c.readRequest(br); err != nil || len(req.(*kmsg.ProduceRequest).Topics) != 2 {
			t.Fatalf("v%d: with trailing bytes: %v", v, err)
		}
		if sl, _, err := c.readRequest(br); err != nil || sl.key != 3 || sl.correlation != 2 {
			t.Fatalf("v%d: the request after one with trailing bytes: %+v, %v", v, sl, err)
		}
	}
	// Two billion topics in a few bytes: refused before any allocation.
	huge := kmsg.NewPtrProduceRequest()
	huge.Version = 8
	b := encode(huge, 1)
	binary.BigEndian.PutUint32(b[len(b)-4:], 1<<31-1)
	if _, _, err := testConn().readRequest(bufio.NewReader(bytes.NewReader(b))); !errors.Is(err, errShortRequest) {
		t.Fatalf("2^31-1 topics in %d bytes: %v, want refused", len(b), err)
	}
}
