package kafka_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// newAdmin is a kadm client of srv (no auto topic creation).
func newAdmin(t testing.TB, srv *harness.Server) *kadm.Client {
	t.Helper()
	return kadm.NewClient(franzClient(t, srv))
}

// createTopic creates topic with the given partitions through kadm.
func createTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	resp, err := adm.CreateTopic(testCtx(t), partitions, 1, nil, topic)
	if err != nil || resp.Err != nil {
		t.Fatalf("CreateTopic(%s, %d partitions): %v / %v (%s)", topic, partitions, err, resp.Err, resp.ErrMessage)
	}
	if resp.NumPartitions != partitions {
		t.Fatalf("CreateTopic(%s): %d partitions, want %d", topic, resp.NumPartitions, partitions)
	}
}

// consumeFranz reads n records of topic (all partitions, from the start)
// with a fresh franz-go client, in the order they arrive, and fails t if
// more than n arrive in the fetches that brought them.
func consumeFranz(t testing.TB, srv *harness.Server, topic string, n int, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	c := franzClient(t, srv, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := c.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("consuming %s after %d of %d records: %v", topic, len(recs), n, err)
		}
		recs = append(recs, fs.Records()...)
	}
	if len(recs) != n {
		t.Fatalf("consumed %d records of %s, want %d", len(recs), topic, n)
	}
	return recs
}

// produceAll produces rs asynchronously (so that they batch) and waits
// for every one to be acknowledged.
func produceAll(t testing.TB, cl *kgo.Client, rs []*kgo.Record) {
	t.Helper()
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	for i, r := range rs {
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("produce record %d of %d: %v", i, len(rs), err)
		}
	}
}

// endOffsets lists topic's end offsets by partition, with a new client
// (kadm lists a topic's partitions from the client's metadata cache).
func endOffsets(t testing.TB, srv *harness.Server, topic string) map[int32]int64 {
	t.Helper()
	l, err := newAdmin(t, srv).ListEndOffsets(testCtx(t), topic)
	if err != nil {
		t.Fatalf("ListEndOffsets(%s): %v", topic, err)
	}
	return offsetsOf(t, l, topic)
}

func offsetsOf(t testing.TB, l kadm.ListedOffsets, topic string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	for p, o := range l[topic] {
		if o.Err != nil {
			t.Fatalf("listed offset of %s/%d: %v", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestFranzCompression: every codec franz-go offers produces batches the
// broker stores and serves back record for record, to Kafka and Pulsar
// consumers.
func TestFranzCompression(t *testing.T) {
	srv := shared.Server(t)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	}
	for _, tc := range codecs {
		t.Run(tc.name, func(t *testing.T) {
			topic := harness.Name(t)
			createTopic(t, newAdmin(t, srv), topic, 1)
			p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(tc.codec),
				kgo.ProducerLinger(50*time.Millisecond))
			const n = 50
			var rs []*kgo.Record
			for i := range n {
				// Repetitive values, so that every codec really compresses.
				rs = append(rs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: bytes.Repeat(fmt.Appendf(nil, "%s-value-%d;", tc.name, i), 20)})
			}
			produceAll(t, p, rs)
			got := consumeFranz(t, srv, topic, n)
			for i, r := range got {
				if r.Offset != int64(i) || !bytes.Equal(r.Key, rs[i].Key) || !bytes.Equal(r.Value, rs[i].Value) {
					t.Fatalf("record %d: offset %d key %q value %.40q…, want offset %d key %q value %.40q…",
						i, r.Offset, r.Key, r.Value, i, rs[i].Key, rs[i].Value)
				}
			}
			// A Pulsar consumer reads the compressed batches too.
			msgs := interopReceive(t, interopSubscribe(t, harness.NewClient(t, srv.PulsarURL()), pulsarTopic(topic)), n)
			for i, m := range msgs {
				if m.Key() != string(rs[i].Key) || !bytes.Equal(m.Payload(), rs[i].Value) {
					t.Fatalf("Pulsar message %d: key %q payload %.40q…, want key %q payload %.40q…", i, m.Key(), m.Payload(), rs[i].Key, rs[i].Value)
				}
			}
		})
	}
}

// TestFranzRecordFields: keys (null, empty, binary), headers (repeated
// keys, empty values), null and empty values and timestamps come back as
// produced.
func TestFranzRecordFields(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	createTopic(t, newAdmin(t, srv), topic, 1)
	ts := time.UnixMilli(1_700_000_000_123)
	rs := []*kgo.Record{
		{Key: nil, Value: []byte("null key")},
		{Key: []byte{}, Value: []byte("empty key")},
		{Key: []byte{0xff, 0x00, 0xfe, 0x80}, Value: []byte("binary key")},
		{Key: []byte("h"), Value: []byte("headers"), Headers: []kgo.RecordHeader{
			{Key: "a", Value: []byte("1")}, {Key: "empty", Value: []byte{}}, {Key: "a", Value: []byte("2")}, {Key: "bin", Value: []byte{0, 0xff}},
		}},
		{Key: []byte("tomb"), Value: nil},
		{Key: []byte("empty"), Value: []byte{}},
		{Key: []byte("ts"), Value: []byte("timestamp"), Timestamp: ts},
	}
	p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(50*time.Millisecond))
	produceAll(t, p, rs)
	got := consumeFranz(t, srv, topic, len(rs))
	for i, r := range got {
		want := rs[i]
		if r.Offset != int64(i) {
			t.Errorf("record %d: offset %d", i, r.Offset)
		}
		if (r.Key == nil) != (want.Key == nil) || !bytes.Equal(r.Key, want.Key) {
			t.Errorf("record %d: key %#v, want %#v", i, r.Key, want.Key)
		}
		if (r.Value == nil) != (want.Value == nil) || !bytes.Equal(r.Value, want.Value) {
			t.Errorf("record %d: value %#v, want %#v", i, r.Value, want.Value)
		}
		if !slices.EqualFunc(r.Headers, want.Headers, func(a, b kgo.RecordHeader) bool {
			return a.Key == b.Key && bytes.Equal(a.Value, b.Value)
		}) {
			t.Errorf("record %d: headers %v, want %v", i, r.Headers, want.Headers)
		}
		if r.Timestamp.UnixMilli() != want.Timestamp.UnixMilli() { // franz-go stamps unset timestamps at Produce
			t.Errorf("record %d: timestamp %v, want %v as produced", i, r.Timestamp, want.Timestamp)
		}
	}
	if !got[len(got)-1].Timestamp.Equal(ts) {
		t.Errorf("explicit timestamp came back as %v, want %v", got[len(got)-1].Timestamp, ts)
	}
}

// TestFranzLargeRecords: a record batch under the broker's 5 MiB limit is
// stored and fetched whole (past the consumer's 1 MiB partition fetch
// size); one over it is refused with MESSAGE_TOO_LARGE and stores nothing.
func TestFranzLargeRecords(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	t.Run("under", func(t *testing.T) {
		topic := harness.Name(t)
		createTopic(t, adm, topic, 1)
		p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(6<<20))
		big := randomBytes(t, 4<<20)
		ctx := testCtx(t)
		if err := p.ProduceSync(ctx, &kgo.Record{Value: big}, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
			t.Fatalf("producing a 4 MiB record: %v", err)
		}
		got := consumeFranz(t, srv, topic, 2)
		if !bytes.Equal(got[0].Value, big) || got[0].Offset != 0 {
			t.Fatalf("record 0: %d bytes at offset %d, want the 4 MiB value at 0", len(got[0].Value), got[0].Offset)
		}
		if string(got[1].Value) != "after" || got[1].Offset != 1 {
			t.Fatalf("record 1: %q at %d, want \"after\" at 1", got[1].Value, got[1].Offset)
		}
	})
	t.Run("over", func(t *testing.T) {
		topic := harness.Name(t)
		createTopic(t, adm, topic, 1)
		p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchMaxBytes(7<<20))
		err := p.ProduceSync(testCtx(t), &kgo.Record{Value: randomBytes(t, 6<<20)}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("producing a 6 MiB record: %v, want MESSAGE_TOO_LARGE", err)
		}
		if got := endOffsets(t, srv, topic); got[0] != 0 || len(got) != 1 {
			t.Fatalf("end offsets after the refused record: %v, want {0: 0}", got)
		}
		// The partition still takes records, from offset 0.
		q := franzClient(t, srv, kgo.DefaultProduceTopic(topic))
		if err := q.ProduceSync(testCtx(t), &kgo.Record{Value: []byte("small")}).FirstErr(); err != nil {
			t.Fatalf("producing after the refused record: %v", err)
		}
		if got := consumeFranz(t, srv, topic, 1); got[0].Offset != 0 || string(got[0].Value) != "small" {
			t.Fatalf("got %q at %d, want \"small\" at 0", got[0].Value, got[0].Offset)
		}
	})
}

// TestFranzPartitionsOrder: records lingered into batches over a
// 3-partition topic keep their order per partition, at consecutive
// offsets from 0.
func TestFranzPartitionsOrder(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	adm := newAdmin(t, srv)
	createTopic(t, adm, topic, 3)
	p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(20*time.Millisecond))
	const perPartition = 300
	var rs []*kgo.Record
	for i := range 3 * perPartition {
		rs = append(rs, &kgo.Record{Partition: int32(i % 3), Value: fmt.Appendf(nil, "p%d-%d", i%3, i/3)})
	}
	produceAll(t, p, rs)
	for i, r := range rs {
		if want := int64(i / 3); r.Offset != want {
			t.Fatalf("record %q acknowledged at offset %d, want %d", r.Value, r.Offset, want)
		}
	}
	if got := endOffsets(t, srv, topic); len(got) != 3 || got[0] != perPartition || got[1] != perPartition || got[2] != perPartition {
		t.Fatalf("end offsets %v, want %d for each of 3 partitions", got, perPartition)
	}
	next := map[int32]int64{}
	for _, r := range consumeFranz(t, srv, topic, len(rs)) {
		o := next[r.Partition]
		if want := fmt.Sprintf("p%d-%d", r.Partition, o); r.Offset != o || string(r.Value) != want {
			t.Fatalf("partition %d: %q at offset %d, want %q at %d", r.Partition, r.Value, r.Offset, want, o)
		}
		next[r.Partition]++
	}
}

// TestFranzIdempotentConcurrent: several goroutines produce to one
// partition through one idempotent producer; every record is stored
// exactly once, at offsets 0..n-1, each goroutine's in its order.
func TestFranzIdempotentConcurrent(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	createTopic(t, newAdmin(t, srv), topic, 1)
	p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Millisecond))
	const goroutines, each = 8, 250
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for g := range goroutines {
		wg.Go(func() {
			var inner sync.WaitGroup
			for i := range each {
				inner.Add(1)
				p.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "g%d-%d", g, i)}, func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					inner.Done()
				})
			}
			inner.Wait()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d produce errors, first: %v", len(errs), errs[0])
	}
	const n = goroutines * each
	got := consumeFranz(t, srv, topic, n)
	seen := map[string]bool{}
	next := make([]int, goroutines)
	for i, r := range got {
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d: a gap or duplicate", i, r.Offset)
		}
		if seen[string(r.Value)] {
			t.Fatalf("duplicate %q at offset %d", r.Value, r.Offset)
		}
		seen[string(r.Value)] = true
		var g, k int
		if _, err := fmt.Sscanf(string(r.Value), "g%d-%d", &g, &k); err != nil || g >= goroutines || k != next[g] {
			t.Fatalf("offset %d: %q, want goroutine %d's record %d next", i, r.Value, g, next[g])
		}
		next[g]++
	}
	if end := endOffsets(t, srv, topic); end[0] != n {
		t.Fatalf("end offset %d, want %d", end[0], n)
	}
}

// TestFranzNonIdempotentAcks1: a producer without idempotence, acks=1,
// works.
func TestFranzNonIdempotentAcks1(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	createTopic(t, newAdmin(t, srv), topic, 1)
	p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()),
		kgo.ProducerLinger(20*time.Millisecond))
	const n = 40
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)})
	}
	produceAll(t, p, rs)
	for i, r := range consumeFranz(t, srv, topic, n) {
		if r.Offset != int64(i) || string(r.Value) != fmt.Sprint("v", i) {
			t.Fatalf("record %d: %q at %d", i, r.Value, r.Offset)
		}
	}
}

// TestFranzListOffsets: start and end offsets, and offsets by time: the
// first record published at or after T, the end offset if none is.
func TestFranzListOffsets(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	adm := newAdmin(t, srv)
	createTopic(t, adm, topic, 1)
	ctx := testCtx(t)

	list := func(name string, f func() (kadm.ListedOffsets, error)) map[int32]int64 {
		t.Helper()
		l, err := f()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return offsetsOf(t, l, topic)
	}
	start := func() map[int32]int64 {
		return list("ListStartOffsets", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) })
	}
	end := func() map[int32]int64 {
		return list("ListEndOffsets", func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, topic) })
	}
	after := func(ms int64) map[int32]int64 {
		return list(fmt.Sprint("ListOffsetsAfterMilli ", ms), func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, ms, topic) })
	}
	if s, e := start(), end(); s[0] != 0 || e[0] != 0 {
		t.Fatalf("empty topic: start %v end %v, want 0 and 0", s, e)
	}

	p := franzClient(t, srv, kgo.DefaultProduceTopic(topic))
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	// laterMilli is a millisecond after every publish so far (same clock
	// as the server's: loopback).
	laterMilli := func() int64 {
		now := time.Now().UnixMilli()
		harness.WaitFor(t, time.Second, func() bool { return time.Now().UnixMilli() > now }, "the clock to pass a millisecond")
		return time.Now().UnixMilli()
	}
	before := time.Now().UnixMilli() - 1
	produce(0, 5)
	t1 := laterMilli()
	produce(5, 12)
	t2 := laterMilli()

	if s, e := start(), end(); s[0] != 0 || e[0] != 12 {
		t.Fatalf("start %v end %v, want 0 and 12", s, e)
	}
	if got := after(before); got[0] != 0 {
		t.Errorf("offset after %d (before everything): %v, want 0", before, got)
	}
	if got := after(t1); got[0] != 5 {
		t.Errorf("offset after %d (between records 4 and 5): %v, want 5", t1, got)
	}
	if got := after(t2); got[0] != 12 {
		t.Errorf("offset after %d (after everything): %v, want the end offset 12", t2, got)
	}
	l, err := adm.ListOffsetsAfterMilli(ctx, t1, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o := l[topic][0]; o.Timestamp < t1 {
		t.Errorf("offset after %d: timestamp %d, want ≥ %d", t1, o.Timestamp, t1)
	}
}
