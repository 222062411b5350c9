package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/meta/local"
)

func testLogger() *slog.Logger {
	if os.Getenv("KAFKA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type testServer struct {
	addr   string
	broker *broker.Broker
	meta   *local.Store
	bookie *bookietest.Bookie
	srv    *Server
}

func startServer(t testing.TB, tweak func(*Config)) *testServer {
	t.Helper()
	return startServerOn(t, brokertest.Options{Bootstrap: true}, tweak)
}

// startServerOn is startServer on a broker started with o.
func startServerOn(t testing.TB, o brokertest.Options, tweak func(*Config)) *testServer {
	t.Helper()
	stack := brokertest.Start(t, o)
	b := stack.Broker
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(ln.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):])
	cfg := Config{Broker: b, AdvertisedHost: "127.0.0.1", AdvertisedPort: int32(port), MaxRequestSize: 1 << 20,
		MaxMessageSize: 64 << 10, Logger: testLogger()}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := NewServer(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &testServer{addr: ln.Addr().String(), broker: b, meta: stack.Meta, bookie: stack.Bookie, srv: srv}
}

// client speaks the Kafka framing over one connection.
type client struct {
	t    testing.TB
	nc   net.Conn
	corr int32
}

func (s *testServer) dial(t testing.TB) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	return &client{t: t, nc: nc}
}

// encode frames req (at its version) with header v1 or v2.
func encode(req kmsg.Request, corr int32) []byte {
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// send writes req and returns its correlation id.
func (c *client) send(req kmsg.Request) int32 {
	c.t.Helper()
	c.corr++
	if _, err := c.nc.Write(encode(req, c.corr)); err != nil {
		c.t.Fatal(err)
	}
	return c.corr
}

// read reads one response into resp (its version set by the caller),
// returning the correlation id.
func (c *client) read(resp kmsg.Response) int32 {
	c.t.Helper()
	corr, body, err := readFrame(c.nc)
	if err != nil {
		c.t.Fatalf("reading a response: %v", err)
	}
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		if body, err = SkipTags(body); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("decoding %T: %v", resp, err)
	}
	return corr
}

func readFrame(r io.Reader) (int32, []byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return 0, nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(buf)), buf[4:], nil
}

// roundTrip sends req and reads its response.
func roundTrip[R kmsg.Response](c *client, req kmsg.Request) R {
	c.t.Helper()
	corr := c.send(req)
	resp := req.ResponseKind().(R)
	if got := c.read(resp); got != corr {
		c.t.Fatalf("response correlation id %d, want %d", got, corr)
	}
	return resp
}

// expectClosed checks the server closes the connection.
func (c *client) expectClosed() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	_, err := c.nc.Read(b[:])
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		c.t.Fatalf("connection not closed: read returned %v", err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestApiVersionsServedAndUnsupportedVersion(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	for v := int16(0); v <= apis[apiVersionsKey].max; v++ {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "test", "1"
		resp := roundTrip[*kmsg.ApiVersionsResponse](c, req)
		if resp.ErrorCode != 0 || len(resp.ApiKeys) != len(apis) {
			t.Fatalf("v%d: error %d, %d api keys, want 0 and %d", v, resp.ErrorCode, len(resp.ApiKeys), len(apis))
		}
		for _, k := range resp.ApiKeys {
			if a := apis[k.ApiKey]; k.MinVersion != a.min || k.MaxVersion != a.max {
				t.Fatalf("v%d: key %d advertised %d..%d, want %d..%d", v, k.ApiKey, k.MinVersion, k.MaxVersion, a.min, a.max)
			}
		}
	}
	// A later ApiVersions than served: answered at v0 with
	// UNSUPPORTED_VERSION and our table, and the connection stays up.
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = apis[apiVersionsKey].max + 1
	corr := c.send(req)
	resp := kmsg.NewPtrApiVersionsResponse() // v0
	if got := c.read(resp); got != corr {
		t.Fatalf("correlation %d, want %d", got, corr)
	}
	if resp.ErrorCode != errUnsupportedVersion || len(resp.ApiKeys) != len(apis) {
		t.Fatalf("error %d with %d keys, want %d with %d", resp.ErrorCode, len(resp.ApiKeys), errUnsupportedVersion, len(apis))
	}
	req.Version = 3
	if r := roundTrip[*kmsg.ApiVersionsResponse](c, req); r.ErrorCode != 0 {
		t.Fatalf("retry at v3: error %d", r.ErrorCode)
	}
}

// produceReq is a Produce of one batch of records to topic/partition.
func produceReq(version int16, acks int16, topic string, partition int32, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = version, acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func batchOf(h broker.RecordBatch, values ...string) []byte {
	recs := make([]broker.Record, len(values))
	for i, v := range values {
		recs[i] = broker.Record{OffsetDelta: int32(i), Key: []byte("k"), Value: []byte(v)}
	}
	return broker.AppendRecordBatch(nil, h, recs)
}

func plainBatch(values ...string) []byte {
	return batchOf(broker.RecordBatch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, FirstTimestamp: 1, MaxTimestamp: 1}, values...)
}

func idempotentBatch(id int64, epoch int16, seq int32, values ...string) []byte {
	return batchOf(broker.RecordBatch{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq, FirstTimestamp: 1, MaxTimestamp: 1}, values...)
}

func createTopic(t testing.TB, c *client, topic string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Version = 4
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	resp := roundTrip[*kmsg.CreateTopicsResponse](c, req)
	if resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics %s: error %d %v", topic, resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage)
	}
}

func produce(t testing.TB, c *client, topic string, batch []byte) kmsg.ProduceResponseTopicPartition {
	t.Helper()
	resp := roundTrip[*kmsg.ProduceResponse](c, produceReq(9, -1, topic, 0, batch))
	return resp.Topics[0].Partitions[0]
}

func fetchReq(topic string, offset int64, wait time.Duration) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version, req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 11, -1, int32(wait/time.Millisecond), 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes = offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

func TestProduceFetchAndOffsets(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "pf", 1)
	for i, vs := range [][]string{{"a", "b"}, {"c"}, {"d", "e", "f"}} {
		p := produce(t, c, "pf", plainBatch(vs...))
		if want := []int64{0, 2, 3}[i]; p.ErrorCode != 0 || p.BaseOffset != want {
			t.Fatalf("batch %d: error %d base offset %d, want 0 and %d", i, p.ErrorCode, p.BaseOffset, want)
		}
	}
	// Fetch from the middle of the second batch's successor: the batch
	// holding offset 4 starts at 3, with its base offset rewritten.
	resp := roundTrip[*kmsg.FetchResponse](c, fetchReq("pf", 4, 0))
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 || p.HighWatermark != 6 {
		t.Fatalf("fetch: error %d high watermark %d", p.ErrorCode, p.HighWatermark)
	}
	bs, err := broker.SplitRecordBatches(p.RecordBatches)
	if err != nil || len(bs) != 1 || bs[0].Header.BaseOffset != 3 || bs[0].Header.NumRecords != 3 {
		t.Fatalf("fetched batches %+v, err %v: want one batch at base offset 3 with 3 records", bs, err)
	}
	// What Kafka fetches served counts in the topic's out stats: the two
	// messages from offset 4 on.
	pn, _ := broker.ParseTopicName("pf-partition-0")
	st, err := s.broker.TopicStats(context.Background(), pn)
	if err != nil || st.MsgOutCounter != 2 || st.BytesOutCounter != int64(len(p.RecordBatches)) {
		t.Fatalf("topic stats after a fetch: out %d msgs %d bytes (%v), want 2 and %d", st.MsgOutCounter, st.BytesOutCounter, err, len(p.RecordBatches))
	}
	// Out of range.
	resp = roundTrip[*kmsg.FetchResponse](c, fetchReq("pf", 7, 0))
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != errOffsetOutOfRange {
		t.Fatalf("fetch past the end: error %d, want %d", code, errOffsetOutOfRange)
	}
	// ListOffsets.
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.Version = 4
	for _, ts := range []int64{earliestTimestamp, latestTimestamp} {
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = "pf"
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp = ts
		lt.Partitions = append(lt.Partitions, lp)
		lreq.Topics = []kmsg.ListOffsetsRequestTopic{lt}
		lresp := roundTrip[*kmsg.ListOffsetsResponse](c, lreq)
		want := map[int64]int64{earliestTimestamp: 0, latestTimestamp: 6}[ts]
		if got := lresp.Topics[0].Partitions[0]; got.ErrorCode != 0 || got.Offset != want {
			t.Fatalf("ListOffsets %d: error %d offset %d, want %d", ts, got.ErrorCode, got.Offset, want)
		}
	}
}

func TestLongPollWokenByProduceAndPipelinedOrder(t *testing.T) {
	s := startServer(t, nil)
	setup := s.dial(t)
	createTopic(t, setup, "lp", 1)
	c := s.dial(t)
	// A fetch that waits, then a Metadata pipelined behind it: the
	// metadata answer must come after the fetch's.
	fetchCorr := c.send(fetchReq("lp", 0, 20*time.Second))
	mreq := kmsg.NewPtrMetadataRequest()
	mreq.Version = 9
	metaCorr := c.send(mreq)
	start := time.Now()
	if p := produce(t, setup, "lp", plainBatch("x")); p.ErrorCode != 0 {
		t.Fatalf("produce: error %d", p.ErrorCode)
	}
	fresp := kmsg.NewPtrFetchResponse()
	fresp.Version = 11
	if got := c.read(fresp); got != fetchCorr {
		t.Fatalf("first response has correlation id %d, want the fetch's %d", got, fetchCorr)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Fatalf("the fetch waited %v: it was not woken by the produce", waited)
	}
	if bs, err := broker.SplitRecordBatches(fresp.Topics[0].Partitions[0].RecordBatches); err != nil || len(bs) != 1 {
		t.Fatalf("fetch after wake-up: %d batches, %v", len(bs), err)
	}
	mresp := kmsg.NewPtrMetadataResponse()
	mresp.Version = 9
	if got := c.read(mresp); got != metaCorr {
		t.Fatalf("second response has correlation id %d, want %d", got, metaCorr)
	}
}

func TestAcksZeroGetsNoResponse(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "a0", 1)
	c.send(produceReq(9, 0, "a0", 0, plainBatch("x")))
	// The next response is ApiVersions', not the produce's.
	req := kmsg.NewPtrApiVersionsRequest()
	corr := c.send(req)
	resp := kmsg.NewPtrApiVersionsResponse()
	if got := c.read(resp); got != corr {
		t.Fatalf("got correlation id %d, want %d (acks=0 must not be answered)", got, corr)
	}
}

func TestCorruptBatchStoresNothing(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "bad", 1)
	b := plainBatch("a", "b")
	b[len(b)-1] ^= 0xff // breaks the CRC
	if p := produce(t, c, "bad", b); p.ErrorCode != errCorruptMessage {
		t.Fatalf("corrupt batch: error %d, want CORRUPT_MESSAGE (%d)", p.ErrorCode, errCorruptMessage)
	}
	big := plainBatch(string(make([]byte, 70<<10)))
	if p := produce(t, c, "bad", big); p.ErrorCode != errMessageTooLarge {
		t.Fatalf("oversized batch: error %d, want MESSAGE_TOO_LARGE (%d)", p.ErrorCode, errMessageTooLarge)
	}
	if p := produce(t, c, "bad", plainBatch("ok")); p.ErrorCode != 0 || p.BaseOffset != 0 {
		t.Fatalf("good batch after bad ones: error %d offset %d, want offset 0 (nothing stored before)", p.ErrorCode, p.BaseOffset)
	}
	if p := produce(t, c, "no-such/ns/x", plainBatch("x")); p.ErrorCode != errUnknownTopicOrPartition {
		t.Fatalf("topic in a missing namespace: error %d, want %d", p.ErrorCode, errUnknownTopicOrPartition)
	}
	if p := produce(t, c, "bad name!", plainBatch("x")); p.ErrorCode != errInvalidTopic {
		t.Fatalf("invalid topic name: error %d, want %d", p.ErrorCode, errInvalidTopic)
	}
}

func TestIdempotentProducerSequences(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "idem", 1)
	ireq := kmsg.NewPtrInitProducerIDRequest()
	ireq.Version = 4
	ireq.ProducerID, ireq.ProducerEpoch = -1, -1
	iresp := roundTrip[*kmsg.InitProducerIDResponse](c, ireq)
	if iresp.ErrorCode != 0 || iresp.ProducerID < 1 || iresp.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId: %+v", iresp)
	}
	id := iresp.ProducerID
	steps := []struct {
		epoch      int16
		seq        int32
		values     []string
		code       int16
		baseOffset int64
	}{
		{0, 0, []string{"a", "b"}, 0, 0},
		{0, 2, []string{"c"}, 0, 2},
		{0, 0, []string{"a", "b"}, 0, 0},                  // a retry: its original offset
		{0, 2, []string{"c"}, 0, 2},                       // again
		{0, 5, []string{"x"}, errOutOfOrderSequence, 0},   // a gap
		{0, 3, []string{"d"}, 0, 3},                       // the next one
		{1, 4, []string{"e"}, errOutOfOrderSequence, 0},   // a new epoch starts at 0
		{1, 0, []string{"e"}, 0, 4},                       // it does
		{0, 4, []string{"z"}, errInvalidProducerEpoch, 0}, // the old epoch is fenced
	}
	for i, st := range steps {
		p := produce(t, c, "idem", idempotentBatch(id, st.epoch, st.seq, st.values...))
		if p.ErrorCode != st.code || (st.code == 0 && p.BaseOffset != st.baseOffset) {
			t.Fatalf("step %d (epoch %d seq %d): error %d offset %d, want error %d offset %d",
				i, st.epoch, st.seq, p.ErrorCode, p.BaseOffset, st.code, st.baseOffset)
		}
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.Version = 1
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "idem"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = latestTimestamp
	lt.Partitions = append(lt.Partitions, lp)
	lreq.Topics = append(lreq.Topics, lt)
	if got := roundTrip[*kmsg.ListOffsetsResponse](c, lreq).Topics[0].Partitions[0].Offset; got != 5 {
		t.Fatalf("%d records stored, want 5 (no duplicates)", got)
	}
	// A transactional id is refused.
	ireq.TransactionalID = kmsg.StringPtr("tx")
	if r := roundTrip[*kmsg.InitProducerIDResponse](c, ireq); r.ErrorCode != errTransactionalIDAuth {
		t.Fatalf("transactional InitProducerId: error %d, want %d", r.ErrorCode, errTransactionalIDAuth)
	}
}

func TestBadRequestsCloseTheConnectionOnly(t *testing.T) {
	s := startServer(t, nil)
	valid := encode(kmsg.NewPtrMetadataRequest(), 1)
	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"oversized", binary.BigEndian.AppendUint32(nil, 2<<20)},
		{"negative size", binary.BigEndian.AppendUint32(nil, 0xffffffff)},
		{"too short", frame([]byte{0, 3, 0})},
		{"truncated", valid[:len(valid)-2]},
		{"unknown api", frame([]byte{0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0, 0})},
		{"unsupported version", frame([]byte{0, 3, 0x7f, 0, 0, 0, 0, 1, 0, 0})},
		{"client id past the end", frame([]byte{0, 3, 0, 1, 0, 0, 0, 1, 0x7f, 0})},
		{"garbage body", frame(append([]byte{0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0x13))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := s.dial(t)
			if _, err := c.nc.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if tc.name == "truncated" {
				c.nc.(*net.TCPConn).CloseWrite()
			}
			c.expectClosed()
			// The broker still serves.
			ok := s.dial(t)
			if r := roundTrip[*kmsg.MetadataResponse](ok, kmsg.NewPtrMetadataRequest()); len(r.Brokers) != 1 {
				t.Fatalf("after %s: metadata lists %d brokers", tc.name, len(r.Brokers))
			}
		})
	}
}

func TestMetadataAutoCreatesAndReportsPartitions(t *testing.T) {
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "three", 3)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	for _, name := range []string{"three", "auto", "public/default/three", "bad name!"} {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, mt)
	}
	req.AllowAutoTopicCreation = true
	resp := roundTrip[*kmsg.MetadataResponse](c, req)
	want := []struct {
		code  int16
		parts int
	}{{0, 3}, {0, 1}, {0, 3}, {errInvalidTopic, 0}}
	for i, w := range want {
		got := resp.Topics[i]
		if got.ErrorCode != w.code || len(got.Partitions) != w.parts {
			t.Fatalf("topic %s: error %d, %d partitions; want %d, %d", *got.Topic, got.ErrorCode, len(got.Partitions), w.code, w.parts)
		}
		if w.code == 0 && (got.TopicID == [16]byte{} || got.Partitions[0].Leader != resp.Brokers[0].NodeID) {
			t.Fatalf("topic %s: id %x leader %d", *got.Topic, got.TopicID, got.Partitions[0].Leader)
		}
	}
	// Without auto-creation a missing topic is unknown.
	req.AllowAutoTopicCreation = false
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("missing")
	req.Topics = []kmsg.MetadataRequestTopic{mt}
	if got := roundTrip[*kmsg.MetadataResponse](c, req).Topics[0].ErrorCode; got != errUnknownTopicOrPartition {
		t.Fatalf("missing topic without auto-creation: error %d", got)
	}
	// All topics of the Kafka namespace.
	req.Topics = nil
	all := roundTrip[*kmsg.MetadataResponse](c, req)
	names := map[string]bool{}
	for _, t := range all.Topics {
		names[*t.Topic] = true
	}
	if !names["three"] || !names["auto"] || len(names) != 2 {
		t.Fatalf("all topics: %v, want three and auto", names)
	}
}

// A request naming many partitions not loaded yet loads them in parallel;
// a request pipelined behind it is still appended after it, and a commit
// on every partition in one request stores every offset.
func TestManyNewPartitionsInOneRequest(t *testing.T) {
	const n = 40
	s := startServer(t, nil)
	c := s.dial(t)
	createTopic(t, c, "many", n)
	req := produceReq(9, -1, "many", 0, plainBatch("first"))
	for p := int32(1); p < n; p++ {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = p, plainBatch(fmt.Sprint("p", p))
		req.Topics[0].Partitions = append(req.Topics[0].Partitions, rp)
	}
	first := c.send(req)
	second := c.send(produceReq(9, -1, "many", 0, plainBatch("second")))
	var r1, r2 kmsg.ProduceResponse
	r1.Version, r2.Version = 9, 9
	if got := c.read(&r1); got != first {
		t.Fatalf("response to %d first, want %d", got, first)
	}
	if got := c.read(&r2); got != second {
		t.Fatalf("response to %d second, want %d", got, second)
	}
	for _, p := range r1.Topics[0].Partitions {
		if p.ErrorCode != 0 || p.BaseOffset != 0 {
			t.Fatalf("partition %d: error %d, base offset %d; want 0, 0", p.Partition, p.ErrorCode, p.BaseOffset)
		}
	}
	if p := r2.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.BaseOffset != 1 {
		t.Fatalf("pipelined produce: error %d, base offset %d; want 0, 1 (after the first request)", p.ErrorCode, p.BaseOffset)
	}

	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation = 8, "many-group", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "many"
	for p := int32(0); p < n; p++ {
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset = p, int64(p%2)+1
		ct.Partitions = append(ct.Partitions, cp)
	}
	commit.Topics = append(commit.Topics, ct)
	cr := roundTrip[*kmsg.OffsetCommitResponse](c, commit)
	for i, p := range cr.Topics[0].Partitions {
		if p.Partition != int32(i) || p.ErrorCode != 0 {
			t.Fatalf("commit answer %d: partition %d, error %d", i, p.Partition, p.ErrorCode)
		}
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version, fetch.Group = 7, "many-group"
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic = "many"
	for p := int32(0); p < n; p++ {
		ft.Partitions = append(ft.Partitions, p)
	}
	fetch.Topics = append(fetch.Topics, ft)
	fr := roundTrip[*kmsg.OffsetFetchResponse](c, fetch)
	for _, p := range fr.Topics[0].Partitions {
		if want := int64(p.Partition%2) + 1; p.ErrorCode != 0 || p.Offset != want {
			t.Fatalf("partition %d: committed offset %d (error %d), want %d", p.Partition, p.Offset, p.ErrorCode, want)
		}
	}
}
