package kafka_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// What one protocol writes, the other reads: franz-go and pulsar-client-go
// on the same topics. A Kafka topic "foo" is persistent://public/default/foo.
//
// pulsar-client-go v0.19.0 ignores partition_key_b64_encoded and
// null_value: a binary Kafka key shows as its base64 text in Key(), a null
// value as an empty Payload(). It has no way to send a null value, so null
// values are only checked from Kafka to Pulsar.

const interopReceiveTimeout = 15 * time.Second

func pulsarTopic(kafkaTopic string) string { return "persistent://public/default/" + kafkaTopic }

func interopSubscribe(t testing.TB, c pulsar.Client, topic string) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            "interop",
		Type:                        pulsar.Exclusive,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	if err != nil {
		t.Fatalf("Subscribe(%s): %v", topic, err)
	}
	t.Cleanup(cons.Close)
	return cons
}

// interopReceive receives n messages, acknowledging each.
func interopReceive(t testing.TB, cons pulsar.Consumer, n int) []pulsar.Message {
	t.Helper()
	var msgs []pulsar.Message
	for len(msgs) < n {
		ctx, cancel := context.WithTimeout(context.Background(), interopReceiveTimeout)
		msg, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Receive after %d of %d messages: %v", len(msgs), n, err)
		}
		if err := cons.Ack(msg); err != nil {
			t.Fatalf("Ack: %v", err)
		}
		msgs = append(msgs, msg)
	}
	return msgs
}

func idOf(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d(batch %d of %d)", id.LedgerID(), id.EntryID(), id.PartitionIdx(), id.BatchIdx(), id.BatchSize())
}

// produceBatches produces each group of records as one record batch: the
// producer lingers for a minute, so a batch closes only on Flush. Each
// group has a producer of its own: in one CI run a record produced right
// after an earlier Flush returned was sent alone (franz-go's sink,
// apparently still draining from that flush, did not linger), splitting
// its group in two batches.
func produceBatches(t testing.TB, srv *harness.Server, topic string, groups ...[]*kgo.Record) {
	t.Helper()
	ctx := testCtx(t)
	for gi, g := range groups {
		p := franzClient(t, srv, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(time.Minute))
		errs := make(chan error, len(g))
		for _, r := range g {
			p.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatalf("flush of group %d: %v", gi, err)
		}
		for range g {
			if err := <-errs; err != nil {
				t.Fatalf("produce in group %d: %v", gi, err)
			}
		}
		p.Close()
	}
}

// TestInteropKafkaToPulsar: records produced by franz-go in batches reach
// a Pulsar consumer in order, each batch as one entry whose batch indexes
// are the records, with keys, headers, timestamps and values mapped.
func TestInteropKafkaToPulsar(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	ts := func(i int) time.Time { return time.UnixMilli(1_700_000_000_000 + int64(i)*1000) }
	binKey := []byte{0xff, 0xfe, 0x00, 0x01}
	groups := [][]*kgo.Record{
		{
			{Key: []byte("k0"), Value: []byte("v0"), Timestamp: ts(0), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("0")}, {Key: "e", Value: []byte{}}}},
			{Key: []byte("k1"), Value: []byte("v1"), Timestamp: ts(1)},
			{Key: nil, Value: []byte("v2"), Timestamp: ts(2), Headers: []kgo.RecordHeader{{Key: "null", Value: nil}}},
			{Key: binKey, Value: []byte("v3"), Timestamp: ts(3)},
			{Key: []byte("k4"), Value: []byte("v4"), Timestamp: ts(4), Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("x")}, {Key: "b", Value: []byte("y")}}},
		},
		{
			{Key: []byte("k5"), Value: nil, Timestamp: ts(5)}, // tombstone
			{Key: []byte("k6"), Value: []byte{}, Timestamp: ts(6)},
			{Key: []byte("k7"), Value: bytes.Repeat([]byte("v7"), 1000), Timestamp: ts(7)},
		},
	}
	produceBatches(t, srv, topic, groups...)
	var rs []*kgo.Record
	for _, g := range groups {
		rs = append(rs, g...)
	}

	c := harness.NewClient(t, srv.PulsarURL())
	msgs := interopReceive(t, interopSubscribe(t, c, pulsarTopic(topic)), len(rs))
	for i, msg := range msgs {
		r := rs[i]
		wantKey := string(r.Key)
		if bytes.Equal(r.Key, binKey) {
			wantKey = base64.StdEncoding.EncodeToString(binKey) // partition_key_b64_encoded, not decoded by the client
		}
		if msg.Key() != wantKey {
			t.Errorf("message %d: key %q, want %q", i, msg.Key(), wantKey)
		}
		wantProps := map[string]string{}
		for _, h := range r.Headers {
			wantProps[h.Key] = string(h.Value) // a null header value becomes ""
		}
		if got := msg.Properties(); !maps.Equal(got, wantProps) {
			t.Errorf("message %d: properties %v, want %v", i, got, wantProps)
		}
		if got := msg.EventTime().UnixMilli(); got != r.Timestamp.UnixMilli() {
			t.Errorf("message %d: event time %d, want the record timestamp %d", i, got, r.Timestamp.UnixMilli())
		}
		if !bytes.Equal(msg.Payload(), r.Value) {
			t.Errorf("message %d: payload %.20q (%d bytes), want %.20q (%d bytes)", i, msg.Payload(), len(msg.Payload()), r.Value, len(r.Value))
		}
		if msg.ProducerName() != "kafka" {
			t.Errorf("message %d: producer name %q, want \"kafka\"", i, msg.ProducerName())
		}
	}
	// Each Kafka batch is one entry; its records are batch indexes 0..n-1.
	at := 0
	for gi, g := range groups {
		first := msgs[at].ID()
		for j := range g {
			id := msgs[at+j].ID()
			if id.LedgerID() != first.LedgerID() || id.EntryID() != first.EntryID() || id.BatchIdx() != int32(j) || id.BatchSize() != int32(len(g)) {
				t.Errorf("batch %d record %d: id %s, want entry %d:%d batch index %d of %d", gi, j, idOf(id), first.LedgerID(), first.EntryID(), j, len(g))
			}
		}
		if gi > 0 && msgs[at-1].ID().EntryID() == first.EntryID() && msgs[at-1].ID().LedgerID() == first.LedgerID() {
			t.Errorf("batches %d and %d share entry %s", gi-1, gi, idOf(first))
		}
		at += len(g)
	}
	// A null value is an empty payload to pulsar-client-go (it ignores
	// null_value); Kafka reads it back as null.
	if got := consumeFranz(t, srv, topic, len(rs)); got[5].Value != nil || got[6].Value == nil {
		t.Errorf("Kafka reads values %#v and %#v, want nil (tombstone) and empty", got[5].Value, got[6].Value)
	}
}

// TestInteropPulsarToKafka: messages produced by pulsar-client-go, batched
// or not, compressed, reach a franz-go consumer at offsets 0..n-1 with
// their keys, properties as headers, payloads, and event time (else
// publish time) as timestamp.
func TestInteropPulsarToKafka(t *testing.T) {
	srv := shared.Server(t)
	for _, tc := range []struct {
		name string
		opts pulsar.ProducerOptions
	}{
		{"batched-lz4", pulsar.ProducerOptions{BatchingMaxMessages: 4, BatchingMaxPublishDelay: time.Hour, CompressionType: pulsar.LZ4}},
		{"batched-zstd", pulsar.ProducerOptions{BatchingMaxMessages: 3, BatchingMaxPublishDelay: time.Hour, CompressionType: pulsar.ZSTD}},
		{"unbatched-zstd", pulsar.ProducerOptions{DisableBatching: true, CompressionType: pulsar.ZSTD}},
		{"unbatched", pulsar.ProducerOptions{DisableBatching: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := harness.Name(t)
			c := harness.NewClient(t, srv.PulsarURL())
			opts := tc.opts
			opts.Topic = pulsarTopic(topic)
			p, err := c.CreateProducer(opts)
			if err != nil {
				t.Fatalf("CreateProducer: %v", err)
			}
			t.Cleanup(p.Close)
			const n = 10
			var sent []*pulsar.ProducerMessage
			for i := range n {
				m := &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d", tc.name, i)}
				if i%3 != 2 {
					m.Key = fmt.Sprint("key-", i%4)
				}
				if i%2 == 0 {
					m.Properties = map[string]string{"i": strconv.Itoa(i), "kind": "even"}
				}
				if i%4 != 3 {
					m.EventTime = time.UnixMilli(1_600_000_000_000 + int64(i))
				}
				sent = append(sent, m)
			}
			ctx := testCtx(t)
			errs := make(chan error, n)
			for _, m := range sent {
				p.SendAsync(ctx, m, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
			}
			if err := p.FlushWithCtx(ctx); err != nil {
				t.Fatalf("flush: %v", err)
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			// A Pulsar consumer tells the publish times.
			msgs := interopReceive(t, interopSubscribe(t, c, pulsarTopic(topic)), n)

			got := consumeFranz(t, srv, topic, n)
			for i, r := range got {
				m := sent[i]
				if r.Offset != int64(i) || r.Partition != 0 {
					t.Errorf("record %d: partition %d offset %d, want 0 and %d", i, r.Partition, r.Offset, i)
				}
				if !bytes.Equal(r.Value, m.Payload) {
					t.Errorf("record %d: value %q, want %q", i, r.Value, m.Payload)
				}
				if m.Key == "" {
					if r.Key != nil {
						t.Errorf("record %d: key %q, want null (no partition key)", i, r.Key)
					}
				} else if string(r.Key) != m.Key {
					t.Errorf("record %d: key %q, want %q", i, r.Key, m.Key)
				}
				headers := map[string]string{}
				for _, h := range r.Headers {
					headers[h.Key] = string(h.Value)
				}
				if len(headers) != len(r.Headers) || !maps.Equal(headers, m.Properties) {
					t.Errorf("record %d: headers %v, want %v", i, r.Headers, m.Properties)
				}
				want := msgs[i].PublishTime().UnixMilli()
				if !m.EventTime.IsZero() {
					want = m.EventTime.UnixMilli()
				}
				if r.Timestamp.UnixMilli() != want {
					t.Errorf("record %d: timestamp %d, want %d (event time %v, publish time %v)", i, r.Timestamp.UnixMilli(), want, m.EventTime, msgs[i].PublishTime())
				}
			}
			if end := endOffsets(t, srv, topic); len(end) != 1 || end[0] != n {
				t.Errorf("end offsets %v, want {0: %d}", end, n)
			}
			// A fetch from the middle of a Pulsar batch starts at that
			// message.
			fc := franzClient(t, srv, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(5)}}))
			fs := fc.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("fetch from offset 5: %v", err)
			}
			if rs := fs.Records(); len(rs) == 0 || rs[0].Offset != 5 || !bytes.Equal(rs[0].Value, sent[5].Payload) {
				t.Errorf("fetch from offset 5: first record %v, want offset 5 = %q", rs, sent[5].Payload)
			}
		})
	}
}

// TestInteropPartitioned: a 3-partition topic created through Kafka is a
// Pulsar partitioned topic of 3 partitions; a keyed Pulsar producer routes
// into them and Kafka reads each message in the partition Pulsar put it.
func TestInteropPartitioned(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	createTopic(t, newAdmin(t, srv), topic, 3)
	c := harness.NewClient(t, srv.PulsarURL())
	parts, err := c.TopicPartitions(pulsarTopic(topic))
	if err != nil {
		t.Fatalf("TopicPartitions: %v", err)
	}
	var want []string
	for i := range 3 {
		want = append(want, fmt.Sprintf("%s-partition-%d", pulsarTopic(topic), i))
	}
	if fmt.Sprint(parts) != fmt.Sprint(want) {
		t.Fatalf("TopicPartitions = %v, want %v", parts, want)
	}

	cons := interopSubscribe(t, c, pulsarTopic(topic))
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: pulsarTopic(topic), DisableBatching: true})
	if err != nil {
		t.Fatalf("CreateProducer: %v", err)
	}
	t.Cleanup(p.Close)
	const n, keys = 60, 12
	ctx := testCtx(t)
	for i := range n {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("key-", i%keys), Payload: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	// Where Pulsar put each message.
	partOf := map[string]int32{}
	for _, msg := range interopReceive(t, cons, n) {
		_, suffix, ok := strings.Cut(msg.Topic(), pulsarTopic(topic)+"-partition-")
		idx, err := strconv.Atoi(suffix)
		if !ok || err != nil {
			t.Fatalf("message from topic %q, want a partition of %s", msg.Topic(), pulsarTopic(topic))
		}
		partOf[string(msg.Payload())] = int32(idx)
	}
	used := map[int32]bool{}
	for _, q := range partOf {
		used[q] = true
	}
	if len(used) < 2 {
		t.Fatalf("%d keys all routed to partitions %v; want the keys spread", keys, used)
	}

	got := consumeFranz(t, srv, topic, n)
	next := map[int32]int64{}
	last := map[string]int{} // key -> last message number seen
	for _, r := range got {
		if q, ok := partOf[string(r.Value)]; !ok || q != r.Partition {
			t.Errorf("Kafka reads %q in partition %d; Pulsar had it in %d", r.Value, r.Partition, q)
		}
		if r.Offset != next[r.Partition] {
			t.Errorf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
		var i int
		fmt.Sscanf(string(r.Value), "m%d", &i)
		if want := fmt.Sprint("key-", i%keys); string(r.Key) != want {
			t.Errorf("%q: key %q, want %q", r.Value, r.Key, want)
		}
		if prev, ok := last[string(r.Key)]; ok && prev >= i {
			t.Errorf("key %s: %q after m%d", r.Key, r.Value, prev)
		}
		last[string(r.Key)] = i
	}
}

// TestInteropPositions: the message id of Kafka record k starts a Pulsar
// reader at record k (inclusive) or k+1; Kafka offset k is the same
// message.
func TestInteropPositions(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	var groups [][]*kgo.Record
	const n = 10
	for i := range n {
		if i == 0 || i == 3 || i == 6 { // batches of 3, 3 and 4 records
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)})
	}
	produceBatches(t, srv, topic, groups...)
	c := harness.NewClient(t, srv.PulsarURL())
	msgs := interopReceive(t, interopSubscribe(t, c, pulsarTopic(topic)), n)

	readFrom := func(t *testing.T, id pulsar.MessageID, inclusive bool) []string {
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: pulsarTopic(topic), StartMessageID: id, StartMessageIDInclusive: inclusive})
		if err != nil {
			t.Fatalf("CreateReader: %v", err)
		}
		defer r.Close()
		var got []string
		for r.HasNext() {
			ctx, cancel := context.WithTimeout(context.Background(), interopReceiveTimeout)
			m, err := r.Next(ctx)
			cancel()
			if err != nil {
				t.Fatalf("reader Next after %v: %v", got, err)
			}
			got = append(got, string(m.Payload()))
		}
		return got
	}
	records := func(from int) string {
		var s []string
		for i := from; i < n; i++ {
			s = append(s, fmt.Sprint("r", i))
		}
		return fmt.Sprint(s)
	}
	for _, k := range []int{0, 4, 5, 6, 9} {
		t.Run(fmt.Sprint("record ", k), func(t *testing.T) {
			id := msgs[k].ID()
			if got := readFrom(t, id, true); fmt.Sprint(got) != records(k) {
				t.Errorf("reader from %s inclusive: %v, want %s", idOf(id), got, records(k))
			}
			if got := readFrom(t, id, false); fmt.Sprint(got) != records(k+1) {
				t.Errorf("reader from %s exclusive: %v, want %s", idOf(id), got, records(k+1))
			}
			fc := franzClient(t, srv, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(int64(k))}}))
			fs := fc.PollFetches(testCtx(t))
			if err := fs.Err(); err != nil {
				t.Fatal(err)
			}
			rs := fs.Records()
			if len(rs) == 0 || rs[0].Offset != int64(k) || !bytes.Equal(rs[0].Value, msgs[k].Payload()) {
				t.Fatalf("Kafka fetch from offset %d: first record %v, want offset %d = %q", k, rs, k, msgs[k].Payload())
			}
		})
	}
}
