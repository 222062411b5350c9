package kafka_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// segmentio/kafka-go has two stacks: Writer and Reader (its newer
// protocol package, Transport) and the low-level Conn (its older request
// code, which hard-codes some API versions). Both are tested, each with
// every codec; the Reader reads one partition, without a GroupID.

var kafkaGoCodecs = []struct {
	name  string
	codec compress.Compression
}{
	{"none", 0},
	{"gzip", compress.Gzip},
	{"snappy", compress.Snappy},
	{"lz4", compress.Lz4},
	{"zstd", compress.Zstd},
}

func kafkaGoMessages(msgs []compatMsg) []kafka.Message {
	out := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		km := kafka.Message{Key: m.Key, Value: m.Value}
		for _, h := range m.Headers {
			km.Headers = append(km.Headers, kafka.Header{Key: h.Key, Value: []byte(h.Value)})
		}
		out[i] = km
	}
	return out
}

func kafkaGoHeaders(hs []kafka.Header) []compatHeader {
	var out []compatHeader
	for _, h := range hs {
		out = append(out, compatHeader{h.Key, string(h.Value)})
	}
	return out
}

func kafkaGoWriter(t testing.TB, srv *harness.Server, topic string, codec compress.Compression) *kafka.Writer {
	w := &kafka.Writer{
		Addr:                   kafka.TCP(srv.KafkaAddr()),
		Topic:                  topic,
		Balancer:               kafka.BalancerFunc(func(kafka.Message, ...int) int { return 0 }),
		RequiredAcks:           kafka.RequireAll,
		Compression:            kafka.Compression(codec),
		AllowAutoTopicCreation: true,
		BatchSize:              compatCount,
		BatchTimeout:           10 * time.Millisecond,
		BatchBytes:             5 << 20,
		WriteTimeout:           opTimeout,
		ReadTimeout:            opTimeout,
		MaxAttempts:            5,
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// kafkaGoRead reads want from partition of topic with a Reader (no
// GroupID) from the first offset, checking contents and offsets 0, 1, ...
func kafkaGoRead(t testing.TB, ctx context.Context, srv *harness.Server, topic string, partition int, want []compatMsg) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:   []string{srv.KafkaAddr()},
		Topic:     topic,
		Partition: partition,
		MinBytes:  1,
		MaxBytes:  10 << 20,
		MaxWait:   500 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(kafka.FirstOffset); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for i := range want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("ReadMessage %d: %v", i, err)
		}
		if m.Offset != int64(i) || m.Partition != partition || m.Topic != topic {
			t.Fatalf("message %d at %s/%d offset %d, want %s/%d offset %d", i, m.Topic, m.Partition, m.Offset, topic, partition, i)
		}
		checkCompatMsg(t, i, want[i], m.Key, m.Value, kafkaGoHeaders(m.Headers))
	}
}

// TestKafkaGoWriterReader: Writer (one batch per codec) and a
// partition Reader.
func TestKafkaGoWriterReader(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	for _, c := range kafkaGoCodecs {
		t.Run(c.name, func(t *testing.T) {
			topic := harness.Name(t)
			msgs := compatMessages(c.name)
			w := kafkaGoWriter(t, srv, topic, c.codec)
			// The first write may meet a topic being auto-created
			// (UNKNOWN_TOPIC_OR_PARTITION, retried by the Writer).
			if err := w.WriteMessages(ctx, kafkaGoMessages(msgs)...); err != nil {
				t.Fatalf("WriteMessages: %v", err)
			}
			if st := w.Stats(); st.Messages != compatCount || st.Errors != 0 {
				t.Errorf("writer stats: %d messages, %d errors; want %d, 0", st.Messages, st.Errors, compatCount)
			}
			kafkaGoRead(t, ctx, srv, topic, 0, msgs)
		})
	}
}

// TestKafkaGoLargeMessage: a 4 MiB value (over kafka-go's 1 MiB default
// BatchBytes, which the writer raises), read by a Reader.
func TestKafkaGoLargeMessage(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	msgs := []compatMsg{
		{Key: []byte("small-before"), Value: []byte("v0")},
		{Key: []byte("large"), Value: compatRandom(t, largeValueSize), Headers: []compatHeader{{"size", "4MiB"}}},
		{Key: []byte("small-after"), Value: []byte("v2")},
	}
	w := kafkaGoWriter(t, srv, topic, 0)
	for i, m := range kafkaGoMessages(msgs) {
		if err := w.WriteMessages(ctx, m); err != nil {
			t.Fatalf("WriteMessages %d: %v", i, err)
		}
	}
	kafkaGoRead(t, ctx, srv, topic, 0, msgs)
}

// kafkaGoController dials the cluster's controller, which kafka-go sends
// CreateTopics and DeleteTopics to.
func kafkaGoController(t testing.TB, ctx context.Context, srv *harness.Server) *kafka.Conn {
	t.Helper()
	conn, err := kafka.DialContext(ctx, "tcp", srv.KafkaAddr())
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	ctrl, err := conn.Controller()
	if err != nil {
		t.Fatalf("Controller: %v", err)
	}
	cc, err := kafka.DialContext(ctx, "tcp", net.JoinHostPort(ctrl.Host, strconv.Itoa(ctrl.Port)))
	if err != nil {
		t.Fatalf("dial controller %+v: %v", ctrl, err)
	}
	t.Cleanup(func() { cc.Close() })
	cc.SetDeadline(time.Now().Add(opTimeout))
	return cc
}

// TestKafkaGoConn: the low-level Conn. CreateTopics (to the controller)
// makes a 2-partition topic, ReadPartitions sees it; on partition 1,
// WriteCompressedMessages with each codec, ReadFirstOffset and
// ReadLastOffset, and ReadBatch from offset 0 reading everything back;
// then DeleteTopics.
func TestKafkaGoConn(t *testing.T) {
	srv := shared.Server(t)
	ctx := testCtx(t)
	topic := harness.Name(t)
	ctrl := kafkaGoController(t, ctx, srv)
	if err := ctrl.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	// Conn.CreateTopics treats TOPIC_ALREADY_EXISTS as success; the
	// newer Client reports it per topic.
	if err := ctrl.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}); err != nil {
		t.Errorf("Conn.CreateTopics again: %v, want nil", err)
	}
	cl := &kafka.Client{Addr: kafka.TCP(srv.KafkaAddr()), Timeout: opTimeout}
	resp, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 2, ReplicationFactor: 1}}})
	if err != nil {
		t.Errorf("Client.CreateTopics again: %v", err)
	} else if !errors.Is(resp.Errors[topic], kafka.TopicAlreadyExists) {
		t.Errorf("Client.CreateTopics again: topic error %v, want %v", resp.Errors[topic], kafka.TopicAlreadyExists)
	}
	parts, err := ctrl.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("ReadPartitions: %v", err)
	}
	var ids []int
	for _, p := range parts {
		if p.Topic != topic || p.Leader.Port == 0 {
			t.Errorf("partition %+v", p)
		}
		ids = append(ids, p.ID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []int{0, 1}) {
		t.Fatalf("ReadPartitions: ids %v, want [0 1]", ids)
	}

	conn, err := kafka.DialLeader(ctx, "tcp", srv.KafkaAddr(), topic, 1)
	if err != nil {
		t.Fatalf("DialLeader: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(opTimeout))
	var all []compatMsg
	for _, c := range kafkaGoCodecs {
		msgs := compatMessages(c.name)
		var codec kafka.CompressionCodec
		if c.codec != 0 {
			codec = c.codec.Codec()
		}
		_, part, first, _, err := conn.WriteCompressedMessagesAt(codec, kafkaGoMessages(msgs)...)
		if err != nil {
			t.Fatalf("WriteCompressedMessages %s: %v", c.name, err)
		}
		if part != 1 || first != int64(len(all)) {
			t.Errorf("%s: written at partition %d offset %d, want 1/%d", c.name, part, first, len(all))
		}
		all = append(all, msgs...)
	}
	if first, err := conn.ReadFirstOffset(); err != nil || first != 0 {
		t.Errorf("ReadFirstOffset = %d, %v; want 0", first, err)
	}
	if last, err := conn.ReadLastOffset(); err != nil || last != int64(len(all)) {
		t.Errorf("ReadLastOffset = %d, %v; want %d", last, err, len(all))
	}
	if _, err := conn.Seek(0, kafka.SeekAbsolute); err != nil {
		t.Fatal(err)
	}
	read := 0
	for read < len(all) {
		b := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 10 << 20, MaxWait: time.Second})
		if hwm := b.HighWaterMark(); hwm != int64(len(all)) {
			t.Errorf("batch high water mark %d, want %d", hwm, len(all))
		}
		n := 0
		for {
			m, err := b.ReadMessage()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("batch ReadMessage at %d: %v", read, err)
				}
				break
			}
			if m.Offset != int64(read) || m.Partition != 1 {
				t.Fatalf("message %d at partition %d offset %d", read, m.Partition, m.Offset)
			}
			checkCompatMsg(t, read, all[read], m.Key, m.Value, kafkaGoHeaders(m.Headers))
			read++
			n++
		}
		if err := b.Close(); err != nil {
			t.Fatalf("batch Close after %d messages: %v", read, err)
		}
		if n == 0 {
			t.Fatalf("empty batch at offset %d of %d", read, len(all))
		}
	}
	// Partition 0 stayed empty.
	conn0, err := kafka.DialLeader(ctx, "tcp", srv.KafkaAddr(), topic, 0)
	if err != nil {
		t.Fatalf("DialLeader partition 0: %v", err)
	}
	defer conn0.Close()
	conn0.SetDeadline(time.Now().Add(opTimeout))
	if first, last, err := conn0.ReadOffsets(); err != nil || first != 0 || last != 0 {
		t.Errorf("partition 0 ReadOffsets = %d, %d, %v; want 0, 0", first, last, err)
	}

	if err := ctrl.DeleteTopics(topic); err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	// ReadPartitions of all topics: naming it would auto-create it again
	// (Metadata v1).
	harness.WaitFor(t, opTimeout, func() bool {
		parts, err := ctrl.ReadPartitions()
		return err == nil && !slices.ContainsFunc(parts, func(p kafka.Partition) bool { return p.Topic == topic })
	}, "the deleted topic to leave ReadPartitions")
}
