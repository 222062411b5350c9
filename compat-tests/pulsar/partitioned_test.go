package pulsar_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// partitionOf returns the partition index in a partition's topic name
// (…-partition-N), or -1.
func partitionOf(topic string) int {
	i := strings.LastIndex(topic, "-partition-")
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(topic[i+len("-partition-"):])
	if err != nil {
		return -1
	}
	return n
}

// partitionedRun sends msgs through a producer with opts on a new topic of
// 3 partitions, then checks that one consumer on the partitioned topic
// gets every message, each from the partition the producer was told. It
// returns the partition of each message, in send order.
func partitionedRun(t *testing.T, opts pulsar.ProducerOptions, msgs []*pulsar.ProducerMessage) []int {
	t.Helper()
	srv := partitionedShared.Server(t)
	c := newClient(t, srv)
	topic := topicName(t)
	const partitions = sharedPartitions
	if got, err := c.TopicPartitions(topic); err != nil || len(got) != partitions {
		t.Fatalf("TopicPartitions(%s) = %v, %v; want %d partitions (auto-created)", topic, got, err, partitions)
	}
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
	opts.Topic = topic
	p := createProducer(t, c, opts)

	ids := make([]pulsar.MessageID, len(msgs))
	if opts.DisableBatching {
		for i, m := range msgs {
			ids[i] = send(t, p, m)
		}
	} else {
		ids = sendAll(t, p, msgs)
	}
	sentTo := map[string]int{}
	parts := make([]int, len(msgs))
	for i, id := range ids {
		if id.PartitionIdx() < 0 || id.PartitionIdx() >= partitions {
			t.Fatalf("message %d sent to partition %d of %d", i, id.PartitionIdx(), partitions)
		}
		parts[i] = int(id.PartitionIdx())
		sentTo[string(msgs[i].Payload)] = parts[i]
	}

	for range msgs {
		msg := receive(t, cons)
		payload := string(msg.Payload())
		want, ok := sentTo[payload]
		if !ok {
			t.Fatalf("unexpected or duplicate message %q from %s", payload, msg.Topic())
		}
		delete(sentTo, payload)
		if got := partitionOf(msg.Topic()); got != want {
			t.Errorf("%q came from %s, but was sent to partition %d", payload, msg.Topic(), want)
		}
		if msg.ID().PartitionIdx() != int32(want) {
			t.Errorf("%q has id %s in partition %d, want %d", payload, idString(msg.ID()), msg.ID().PartitionIdx(), want)
		}
		if !strings.HasPrefix(msg.Topic(), topic+"-partition-") {
			t.Errorf("message topic %q is not a partition of %s", msg.Topic(), topic)
		}
		ackMsg(t, cons, msg)
	}
	return parts
}

func plainMessages(n int) []*pulsar.ProducerMessage {
	msgs := make([]*pulsar.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)}
	}
	return msgs
}

func countPerPartition(parts []int) map[int]int {
	m := map[int]int{}
	for _, p := range parts {
		m[p]++
	}
	return m
}

// TestPartitionedRoundRobin: without keys and without batching the default
// router sends messages to the partitions in turn.
func TestPartitionedRoundRobin(t *testing.T) {
	parts := partitionedRun(t, pulsar.ProducerOptions{DisableBatching: true}, plainMessages(30))
	for i := 1; i < len(parts); i++ {
		if parts[i] != (parts[i-1]+1)%3 {
			t.Fatalf("partitions in send order %v, want round robin", parts)
		}
	}
	if got := countPerPartition(parts); len(got) != 3 || got[0] != 10 || got[1] != 10 || got[2] != 10 {
		t.Errorf("messages per partition %v, want 10 each", got)
	}
}

// TestPartitionedSinglePartition: the single-partition router sends every
// unkeyed message to the same partition.
func TestPartitionedSinglePartition(t *testing.T) {
	parts := partitionedRun(t, pulsar.ProducerOptions{MessageRouter: pulsar.NewSinglePartitionRouter()}, plainMessages(20))
	if got := countPerPartition(parts); len(got) != 1 {
		t.Errorf("messages per partition %v, want all in one", got)
	}
}

// TestPartitionedCustomRouter: a MessageRouter picks the partition of each
// message; it is told the topic has 3 partitions.
func TestPartitionedCustomRouter(t *testing.T) {
	var mu sync.Mutex
	seenPartitions := map[uint32]bool{}
	router := func(m *pulsar.ProducerMessage, md pulsar.TopicMetadata) int {
		mu.Lock()
		seenPartitions[md.NumPartitions()] = true
		mu.Unlock()
		n, _ := strconv.Atoi(m.Properties["partition"])
		return n
	}
	msgs := make([]*pulsar.ProducerMessage, 12)
	want := make([]int, len(msgs))
	for i := range msgs {
		want[i] = (i * 2) % 3
		msgs[i] = &pulsar.ProducerMessage{
			Payload:    fmt.Appendf(nil, "m-%d", i),
			Properties: map[string]string{"partition": strconv.Itoa(want[i])},
		}
	}
	parts := partitionedRun(t, pulsar.ProducerOptions{MessageRouter: router, DisableBatching: true}, msgs)
	for i := range parts {
		if parts[i] != want[i] {
			t.Errorf("message %d went to partition %d, the router chose %d", i, parts[i], want[i])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seenPartitions) != 1 || !seenPartitions[3] {
		t.Errorf("router saw partition counts %v, want only 3", seenPartitions)
	}
}

// TestPartitionedKeys: with the default router, messages with the same key
// go to the same partition.
func TestPartitionedKeys(t *testing.T) {
	msgs := make([]*pulsar.ProducerMessage, 30)
	for i := range msgs {
		msgs[i] = &pulsar.ProducerMessage{Key: fmt.Sprintf("key-%d", i%5), Payload: fmt.Appendf(nil, "m-%d", i)}
	}
	parts := partitionedRun(t, pulsar.ProducerOptions{DisableBatching: true}, msgs)
	byKey := map[string]int{}
	for i, m := range msgs {
		if p, ok := byKey[m.Key]; ok && p != parts[i] {
			t.Errorf("key %s went to partitions %d and %d", m.Key, p, parts[i])
		}
		byKey[m.Key] = parts[i]
	}
}
