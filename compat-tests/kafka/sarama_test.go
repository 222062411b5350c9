package kafka_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// The messages every client's compatibility test produces and reads back:
// keys (some nil), headers (some none), tombstones (nil value) and
// compressible values, so that a codec has something to compress.

// compatMsg is one message of compatMessages; nil Key and Value are null.
type compatMsg struct {
	Key, Value []byte
	Headers    []compatHeader
}

type compatHeader struct{ Key, Value string }

// compatCount is how many messages each codec's run produces: enough for
// a multi-record compressed batch, small enough to keep the package fast.
const compatCount = 20

// largeValueSize is the large message's value: under the server's default
// 5 MiB limit on a record batch, over every client's 1 MiB default.
const largeValueSize = 4 << 20

// compatMessages returns compatCount messages tagged with tag: message 3
// and 13 have a nil key, 7 and 17 a nil value (tombstones), every fourth
// has no headers.
func compatMessages(tag string) []compatMsg {
	msgs := make([]compatMsg, compatCount)
	for i := range msgs {
		m := compatMsg{
			Key:   fmt.Appendf(nil, "key-%d", i%5),
			Value: fmt.Appendf(nil, "%s value %d %s", tag, i, bytes.Repeat([]byte("abcdefgh"), 16)),
		}
		switch i % 10 {
		case 3:
			m.Key = nil
		case 7:
			m.Value = nil
		}
		if i%4 != 0 {
			m.Headers = []compatHeader{{"h-index", fmt.Sprint(i)}, {"h-tag", tag}}
		}
		msgs[i] = m
	}
	return msgs
}

// checkCompatMsg compares one message read back with what was produced;
// nil and empty differ (null key or value vs zero length).
func checkCompatMsg(t testing.TB, i int, want compatMsg, key, value []byte, headers []compatHeader) {
	t.Helper()
	if !bytes.Equal(key, want.Key) || (key == nil) != (want.Key == nil) {
		t.Errorf("message %d: key %q (nil %v), want %q (nil %v)", i, key, key == nil, want.Key, want.Key == nil)
	}
	if !bytes.Equal(value, want.Value) || (value == nil) != (want.Value == nil) {
		t.Errorf("message %d: value %.40q (nil %v), want %.40q (nil %v)", i, value, value == nil, want.Value, want.Value == nil)
	}
	if !slices.Equal(headers, want.Headers) {
		t.Errorf("message %d: headers %q, want %q", i, headers, want.Headers)
	}
}

func compatRandom(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// saramaConfig is sarama's default configuration (its default protocol
// version, V2_8_0_0 in v1.61.1, which covers zstd) with bounded timeouts
// and acks from all replicas.
func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "magnetar-compat-sarama"
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Net.ReadTimeout = opTimeout
	cfg.Net.WriteTimeout = opTimeout
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Timeout = opTimeout
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

func saramaClient(t testing.TB, srv *harness.Server, cfg *sarama.Config) sarama.Client {
	t.Helper()
	cl, err := sarama.NewClient([]string{srv.KafkaAddr()}, cfg)
	if err != nil {
		t.Fatalf("sarama.NewClient: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func saramaProducerMessages(topic string, msgs []compatMsg) []*sarama.ProducerMessage {
	out := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		pm := &sarama.ProducerMessage{Topic: topic, Partition: 0}
		if m.Key != nil {
			pm.Key = sarama.ByteEncoder(m.Key)
		}
		if m.Value != nil {
			pm.Value = sarama.ByteEncoder(m.Value)
		}
		for _, h := range m.Headers {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: []byte(h.Value)})
		}
		out[i] = pm
	}
	return out
}

// saramaProduce sends msgs to partition 0 of topic in one SendMessages
// call (so they share batches) and checks the offsets they were given:
// first, first+1, ... in order.
func saramaProduce(t testing.TB, cl sarama.Client, topic string, first int64, msgs []compatMsg) {
	t.Helper()
	p, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		t.Fatalf("NewSyncProducer: %v", err)
	}
	defer p.Close()
	pms := saramaProducerMessages(topic, msgs)
	if err := p.SendMessages(pms); err != nil {
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			t.Fatalf("SendMessages: %v; first: %v", err, perrs[0].Err)
		}
		t.Fatalf("SendMessages: %v", err)
	}
	for i, pm := range pms {
		if pm.Partition != 0 || pm.Offset != first+int64(i) {
			t.Errorf("message %d stored at partition %d offset %d, want 0/%d", i, pm.Partition, pm.Offset, first+int64(i))
		}
	}
}

// saramaConsume reads want from partition of topic, from its first
// offset, with a partition consumer (no consumer group), and checks
// contents and offsets 0, 1, ...
func saramaConsume(t testing.TB, cl sarama.Client, topic string, partition int32, want []compatMsg) {
	t.Helper()
	c, err := sarama.NewConsumerFromClient(cl)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, partition, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("ConsumePartition(%s, %d): %v", topic, partition, err)
	}
	defer pc.Close()
	timeout := time.After(opTimeout)
	for i := range want {
		select {
		case m := <-pc.Messages():
			if m.Offset != int64(i) || m.Partition != partition {
				t.Fatalf("message %d at partition %d offset %d, want %d/%d", i, m.Partition, m.Offset, partition, i)
			}
			var hs []compatHeader
			for _, h := range m.Headers {
				hs = append(hs, compatHeader{string(h.Key), string(h.Value)})
			}
			checkCompatMsg(t, i, want[i], m.Key, m.Value, hs)
		case err := <-pc.Errors():
			t.Fatalf("consuming message %d: %v", i, err)
		case <-timeout:
			t.Fatalf("consumed %d of %d messages in %v", i, len(want), opTimeout)
		}
	}
	if hwm := pc.HighWaterMarkOffset(); hwm != int64(len(want)) {
		t.Errorf("high water mark %d, want %d", hwm, len(want))
	}
}

var saramaCodecs = []struct {
	name  string
	codec sarama.CompressionCodec
}{
	{"none", sarama.CompressionNone},
	{"gzip", sarama.CompressionGZIP},
	{"snappy", sarama.CompressionSnappy},
	{"lz4", sarama.CompressionLZ4},
	{"zstd", sarama.CompressionZSTD},
}

// TestSaramaProduceConsume: sarama's SyncProducer and partition consumer
// with its default protocol version, for each codec it has.
func TestSaramaProduceConsume(t *testing.T) {
	srv := shared.Server(t)
	for _, c := range saramaCodecs {
		t.Run(c.name, func(t *testing.T) {
			topic := harness.Name(t)
			cfg := saramaConfig()
			cfg.Producer.Compression = c.codec
			cl := saramaClient(t, srv, cfg)
			msgs := compatMessages(c.name)
			saramaProduce(t, cl, topic, 0, msgs)
			saramaConsume(t, cl, topic, 0, msgs)
		})
	}
}

// TestSaramaIdempotent: sarama's idempotent producer (InitProducerId,
// sequence numbers) with the settings it requires.
func TestSaramaIdempotent(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	cfg := saramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Compression = sarama.CompressionZSTD
	cl := saramaClient(t, srv, cfg)
	msgs := compatMessages("idempotent")
	saramaProduce(t, cl, topic, 0, msgs[:10])
	saramaProduce(t, cl, topic, 10, msgs[10:])
	saramaConsume(t, cl, topic, 0, msgs)
}

// TestSaramaLargeMessage: a 4 MiB value (incompressible), which needs
// Producer.MaxMessageBytes raised; the consumer's fetch size (1 MiB by
// default) is smaller than the batch.
func TestSaramaLargeMessage(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	cfg := saramaConfig()
	cfg.Producer.MaxMessageBytes = 5 << 20
	cl := saramaClient(t, srv, cfg)
	msgs := []compatMsg{
		{Key: []byte("small-before"), Value: []byte("v0")},
		{Key: []byte("large"), Value: compatRandom(t, largeValueSize), Headers: []compatHeader{{"size", "4MiB"}}},
		{Key: []byte("small-after"), Value: []byte("v2")},
	}
	for i, m := range msgs {
		saramaProduce(t, cl, topic, int64(i), []compatMsg{m})
	}
	saramaConsume(t, cl, topic, 0, msgs)
}

// TestSaramaClusterAdmin: CreateTopic, ListTopics, DescribeConfig and
// DeleteTopic, and producing to and consuming from each partition of the
// created topic.
func TestSaramaClusterAdmin(t *testing.T) {
	srv := shared.Server(t)
	topic := harness.Name(t)
	cfg := saramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cl := saramaClient(t, srv, cfg)
	admin, err := sarama.NewClusterAdminFromClient(cl)
	if err != nil {
		t.Fatalf("NewClusterAdmin: %v", err)
	}
	// Not admin.Close: it closes the client, which cleanup closes.

	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false)
	var terr *sarama.TopicError
	if !errors.As(err, &terr) || terr.Err != sarama.ErrTopicAlreadyExists {
		t.Errorf("CreateTopic again: %v, want %v", err, sarama.ErrTopicAlreadyExists)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if d, ok := topics[topic]; !ok || d.NumPartitions != 3 {
		t.Fatalf("ListTopics: %s = %+v (listed %v), want 3 partitions", topic, d, ok)
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		t.Fatalf("DescribeConfig: %v", err)
	}
	configs := map[string]string{}
	for _, e := range entries {
		configs[e.Name] = e.Value
	}
	if got := configs["max.message.bytes"]; got != "5242880" {
		t.Errorf("DescribeConfig: max.message.bytes = %q, want the server's default 5242880; all: %v", got, configs)
	}

	// Each partition gets its own messages; offsets start at 0 in each.
	if err := cl.RefreshMetadata(topic); err != nil {
		t.Fatalf("RefreshMetadata: %v", err)
	}
	if ps, err := cl.Partitions(topic); err != nil || !slices.Equal(ps, []int32{0, 1, 2}) {
		t.Fatalf("Partitions(%s) = %v, %v; want [0 1 2]", topic, ps, err)
	}
	p, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for part := range int32(3) {
		for i := range int64(part) + 1 {
			_, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: part, Value: sarama.StringEncoder(fmt.Sprint("p", part, "-", i))})
			if err != nil || off != i {
				t.Fatalf("send to partition %d: offset %d, %v; want %d", part, off, err, i)
			}
		}
	}
	for part := range int32(3) {
		var want []compatMsg
		for i := range int(part) + 1 {
			want = append(want, compatMsg{Value: fmt.Append(nil, "p", part, "-", i)})
		}
		saramaConsume(t, cl, topic, part, want)
	}

	if err := admin.DeleteTopic(topic); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	harness.WaitFor(t, opTimeout, func() bool {
		topics, err := admin.ListTopics()
		_, listed := topics[topic]
		return err == nil && !listed
	}, "the deleted topic to leave ListTopics")
}

// TestSaramaProtocolVersions: sarama picks request versions from
// Config.Version rather than from ApiVersions; from 0.11 (record batches,
// Fetch v4 — the oldest the server serves) to its newest. gzip, which
// every version has.
func TestSaramaProtocolVersions(t *testing.T) {
	srv := shared.Server(t)
	for _, v := range []sarama.KafkaVersion{sarama.V0_11_0_0, sarama.V1_0_0_0, sarama.V2_0_0_0, sarama.V2_1_0_0, sarama.V3_0_0_0, sarama.MaxVersion} {
		t.Run(v.String(), func(t *testing.T) {
			topic := harness.Name(t)
			cfg := saramaConfig()
			cfg.Version = v
			cfg.Producer.Compression = sarama.CompressionGZIP
			cl := saramaClient(t, srv, cfg)
			msgs := compatMessages(v.String())
			saramaProduce(t, cl, topic, 0, msgs)
			saramaConsume(t, cl, topic, 0, msgs)
		})
	}
}
