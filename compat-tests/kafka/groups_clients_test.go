package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// Consumer groups with sarama, segmentio/kafka-go, kcat (librdkafka) and
// kafkajs, on the shared server (Kafka's default initial rebalance delay):
// each consumes in a group, commits its own way, and a later member of
// the group resumes at the committed offsets, which kadm reads back.

// saramaGroupHandler records what its claims deliver and marks each
// message (committed by sarama's auto commit).
type saramaGroupHandler struct {
	name string
	into *consumption
}

func (saramaGroupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (saramaGroupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h saramaGroupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		h.into.addOne(h.name, msg.Partition, msg.Offset, string(msg.Value))
		sess.MarkMessage(msg, "")
	}
	return nil
}

// saramaMember runs a sarama ConsumerGroup member of group on topic until
// the returned stop is called (which closes it: it commits and leaves).
func saramaMember(t testing.TB, srv *harness.Server, name, group, topic string, into *consumption) (stop func()) {
	t.Helper()
	cfg := saramaConfig()
	cfg.ClientID = name
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{srv.KafkaAddr()}, group, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumerGroup(%s): %v", group, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var errs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, saramaGroupHandler{name, into}); err != nil {
				if !errors.Is(err, sarama.ErrClosedConsumerGroup) {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				return
			}
		}
	}()
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range cg.Errors() {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if err := cg.Close(); err != nil {
				t.Errorf("%s: Close: %v", name, err)
			}
			<-errsDone
			mu.Lock()
			defer mu.Unlock()
			for _, err := range errs {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestGroupSarama: two sarama ConsumerGroup members (its default protocol
// version, oldest offset first, MarkMessage with auto commit) consume a
// 2-partition topic once each; after they close, a new member resumes at
// the committed offsets.
func TestGroupSarama(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 2)
	first := produceValues(t, srv, topic, "a", 20, 2)
	got := newConsumption()
	stop1 := saramaMember(t, srv, "sarama-1", group, topic, got)
	stop2 := saramaMember(t, srv, "sarama-2", group, topic, got)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(first) }, "the first 20 records consumed")
	waitCommitted(t, adm, group, topic, uniform(2, 10))
	d := waitStable(t, adm, group, topic, 2, 2)
	if d.ProtocolType != "consumer" || d.Protocol != "range" {
		t.Errorf("group protocol %s/%s, want consumer/range (sarama's default)", d.ProtocolType, d.Protocol)
	}
	for _, m := range d.Members {
		if n := len(assignedOf(m, topic)); n != 1 {
			t.Errorf("member %s assigned %d partitions, want 1: %s", m.ClientID, n, describeMembers(d, topic))
		}
	}
	stop1()
	stop2()

	second := produceValues(t, srv, topic, "b", 10, 2)
	stop3 := saramaMember(t, srv, "sarama-3", group, topic, got)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(second) }, "the next 10 records consumed by the new member")
	waitCommitted(t, adm, group, topic, uniform(2, 15))
	stop3()

	got.mu.Lock()
	defer got.mu.Unlock()
	for _, v := range append(first, second...) {
		if got.count[v] != 1 {
			t.Errorf("%s consumed %d times, want once", v, got.count[v])
		}
	}
	for p, offs := range got.offsets["sarama-3"] {
		if want := []int64{10, 11, 12, 13, 14}; !slices.Equal(offs, want) {
			t.Errorf("the new member consumed partition %d offsets %v, want %v", p, offs, want)
		}
	}
}

// kafkaGoGroupRead reads n messages with a kafka-go Reader in group
// (CommitMessages after each, synchronous commits), closes it (leaving the
// group) and returns their offsets and values.
func kafkaGoGroupRead(t testing.TB, srv *harness.Server, group, topic string, n int) ([]int64, []string) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     []string{srv.KafkaAddr()},
		GroupID:     group,
		Topic:       topic,
		MaxWait:     500 * time.Millisecond,
		StartOffset: kafka.FirstOffset,
		Logger:      kafka.LoggerFunc(func(f string, a ...any) { t.Logf("kafka-go: "+f, a...) }),
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) { t.Logf("kafka-go error: "+f, a...) }),
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), groupWait)
	defer cancel()
	var offs []int64
	var vals []string
	for range n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("kafka-go FetchMessage in group %s after %d of %d: %v", group, len(offs), n, err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatalf("kafka-go CommitMessages at offset %d: %v", m.Offset, err)
		}
		offs = append(offs, m.Offset)
		vals = append(vals, string(m.Value))
	}
	if err := r.Close(); err != nil {
		t.Errorf("kafka-go Reader.Close: %v", err)
	}
	return offs, vals
}

// TestGroupKafkaGo: a kafka-go Reader with a GroupID reads and commits;
// a new Reader of the group resumes after what was committed.
func TestGroupKafkaGo(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 1)
	vals := produceValues(t, srv, topic, "k", 10, 1)
	offs, got := kafkaGoGroupRead(t, srv, group, topic, 10)
	if !slices.Equal(offs, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) || !slices.Equal(got, vals) {
		t.Fatalf("kafka-go group read offsets %v values %v, want 0..9 %v", offs, got, vals)
	}
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 10})

	more := produceValues(t, srv, topic, "l", 5, 1)
	offs, got = kafkaGoGroupRead(t, srv, group, topic, 5)
	if !slices.Equal(offs, []int64{10, 11, 12, 13, 14}) || !slices.Equal(got, more) {
		t.Fatalf("kafka-go resumed with offsets %v values %v, want 10..14 %v", offs, got, more)
	}
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 15})
}

// kcatGroupConsume runs kcat as a balanced consumer (-G) of group on
// topic for count messages, with librdkafka's auto commit every 100 ms
// (and a final commit on close).
func kcatGroupConsume(t testing.TB, srv *harness.Server, group, topic string, count int) []kcatRecord {
	t.Helper()
	out := runKcat(t, testCtx(t), srv, nil, "-G", group, topic, "-c", strconv.Itoa(count), "-J", "-q",
		"-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100")
	return parseKcatJSON(t, out)
}

// TestGroupKcat: kcat -G consumes 10 of 15 records and commits 10; a
// second run resumes at 10.
func TestGroupKcat(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 1)
	vals := produceValues(t, srv, topic, "c", 15, 1)
	check := func(recs []kcatRecord, from int) {
		t.Helper()
		for i, r := range recs {
			want := from + i
			if r.Topic != topic || r.Partition != 0 || r.Offset != int64(want) || r.Payload == nil || *r.Payload != vals[want] {
				t.Fatalf("kcat record %d: %s/%d@%d %v, want %s/0@%d %q", i, r.Topic, r.Partition, r.Offset, r.Payload, topic, want, vals[want])
			}
		}
	}
	recs := kcatGroupConsume(t, srv, group, topic, 10)
	if len(recs) != 10 {
		t.Fatalf("kcat -G -c 10 printed %d records", len(recs))
	}
	check(recs, 0)
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 10})

	recs = kcatGroupConsume(t, srv, group, topic, 5)
	if len(recs) != 5 {
		t.Fatalf("kcat -G -c 5 printed %d records", len(recs))
	}
	check(recs, 10)
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 15})
}

// kafkajsGroupResult is consume.js's output.
type kafkajsGroupResult struct {
	Messages []struct {
		Partition int32   `json:"partition"`
		Offset    string  `json:"offset"`
		Value     *string `json:"value"`
	} `json:"messages"`
	Committed []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    string `json:"offset"`
	} `json:"committed"`
}

// kafkajsGroupConsume runs consume.js: count messages of topic in group.
func kafkajsGroupConsume(t testing.TB, srv *harness.Server, group, topic string, count int) kafkajsGroupResult {
	t.Helper()
	in, err := json.Marshal(map[string]any{"topic": topic, "groupId": group, "count": count})
	if err != nil {
		t.Fatal(err)
	}
	var out kafkajsGroupResult
	runKafkajs(t, testCtx(t), srv, "consume.js", nil, in, &out)
	return out
}

// checkKafkajsGroup checks that res holds, on each of partitions, the
// records from..to-1 in order, where vals[i] went to partition
// i%partitions at offset i/partitions.
func checkKafkajsGroup(t testing.TB, res kafkajsGroupResult, vals []string, partitions int, from, to int64) {
	t.Helper()
	byPart := map[int32][]string{}
	for _, m := range res.Messages {
		off, err := strconv.ParseInt(m.Offset, 10, 64)
		if err != nil || m.Value == nil {
			t.Fatalf("kafkajs message %+v", m)
		}
		want := vals[off*int64(partitions)+int64(m.Partition)]
		if *m.Value != want {
			t.Errorf("kafkajs %d@%d: %q, want %q", m.Partition, off, *m.Value, want)
		}
		byPart[m.Partition] = append(byPart[m.Partition], fmt.Sprintf("%d:%s", off, *m.Value))
	}
	for p := range int32(partitions) {
		var want []string
		for off := from; off < to; off++ {
			want = append(want, fmt.Sprintf("%d:%s", off, vals[off*int64(partitions)+int64(p)]))
		}
		if !slices.Equal(byPart[p], want) {
			t.Errorf("kafkajs partition %d: %v, want %v", p, byPart[p], want)
		}
	}
}

// TestGroupKafkajs: a kafkajs group consumer reads 2 partitions from the
// beginning and commits; a second one resumes at the committed offsets.
func TestGroupKafkajs(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 2)
	vals := produceValues(t, srv, topic, "j", 20, 2)
	res := kafkajsGroupConsume(t, srv, group, topic, 20)
	checkKafkajsGroup(t, res, vals, 2, 0, 10)
	waitCommitted(t, adm, group, topic, uniform(2, 10))

	vals = append(vals, produceRange(t, srv, topic, "j", 20, 10, 2)...)
	res = kafkajsGroupConsume(t, srv, group, topic, 10)
	checkKafkajsGroup(t, res, vals, 2, 10, 15)
	waitCommitted(t, adm, group, topic, uniform(2, 15))
}
