package pulsar_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// batchProducer makes a producer whose batches close at maxMessages or on
// Flush, never by time during a test.
func batchProducer(t *testing.T, c pulsar.Client, topic string, maxMessages uint) pulsar.Producer {
	return createProducer(t, c, pulsar.ProducerOptions{
		Topic:                   topic,
		BatchingMaxMessages:     maxMessages,
		BatchingMaxPublishDelay: time.Hour,
	})
}

// TestBatching: with batching on, messages are stored as batches (several
// messages share an entry, with batch indexes in send order) and each can
// be acknowledged on its own; with batching off each message is its own
// entry. Either way all arrive in order and, once all are acknowledged,
// none is delivered again.
func TestBatching(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		c := sharedClient(t)
		topic := topicName(t)
		cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
		p := batchProducer(t, c, topic, 10)
		const n = 25
		ids := sendBatch(t, p, "m", n) // batches of 10, 10 and 5
		for i, id := range ids {
			wantBatch := int32(i % 10)
			if id.BatchIdx() != wantBatch || !sameEntry(id, ids[i/10*10]) {
				t.Fatalf("send id of message %d is %s; want batch index %d in the entry of message %d (%s)",
					i, idString(id), wantBatch, i/10*10, idString(ids[i/10*10]))
			}
		}
		for i := range n {
			msg := receive(t, cons)
			if got, want := string(msg.Payload()), fmt.Sprintf("m-%d", i); got != want {
				t.Fatalf("message %d: %q, want %q", i, got, want)
			}
			if compareIDs(msg.ID(), ids[i]) != 0 {
				t.Errorf("message %d: id %s, want %s as the producer was told", i, idString(msg.ID()), idString(ids[i]))
			}
			if size, want := msg.ID().BatchSize(), int32(min(10, n-i/10*10)); size != want {
				t.Errorf("message %d: batch size %d, want %d", i, size, want)
			}
			ackMsg(t, cons, msg)
		}
		cons.Close()
		expectNothingMore(t, subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"}), p)
	})

	t.Run("off", func(t *testing.T) {
		c := sharedClient(t)
		topic := topicName(t)
		cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
		p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		const n = 10
		ids := sendN(t, p, "m", n)
		for i := 1; i < n; i++ {
			if sameEntry(ids[i-1], ids[i]) {
				t.Fatalf("messages %d and %d share entry %s with batching off", i-1, i, idString(ids[i]))
			}
		}
		for i := range n {
			msg := receive(t, cons)
			if got, want := string(msg.Payload()), fmt.Sprintf("m-%d", i); got != want {
				t.Fatalf("message %d: %q, want %q", i, got, want)
			}
			if !sameEntry(msg.ID(), ids[i]) {
				t.Errorf("message %d: id %s, want entry %s", i, idString(msg.ID()), idString(ids[i]))
			}
			ackMsg(t, cons, msg)
		}
		cons.Close()
		expectNothingMore(t, subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"}), p)
	})
}

// TestBatchPartialAckRedeliversBatch: without batch-index acknowledgment
// the client acknowledges a batch only once all its messages are acked, so
// after a reconnect the whole batch, acked messages included, comes back.
func TestBatchPartialAckRedeliversBatch(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"}
	cons := subscribe(t, c, opts)
	p := batchProducer(t, c, topic, 10)
	sendBatch(t, p, "m", 10)
	for i := range 10 {
		msg := receive(t, cons)
		if i < 5 {
			ackMsg(t, cons, msg)
		}
	}
	cons.Close()

	cons = subscribe(t, c, opts)
	if got, want := receivePayloads(t, cons, 10, true), payloads("m", 0, 10); !slices.Equal(got, want) {
		t.Fatalf("after reconnect got %v, want the whole batch %v", got, want)
	}
	cons.Close()
	expectNothingMore(t, subscribe(t, c, opts), p)
}

// TestBatchIndexAck: with EnableBatchIndexAcknowledgment the consumer
// acknowledges single messages of a batch (CommandAck with an ack set);
// after a reconnect only the unacknowledged messages of the batch are
// delivered (the broker sends the entry with the ack set in
// CommandMessage, and the client skips the acked indexes).
func TestBatchIndexAck(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", EnableBatchIndexAcknowledgment: true}
	cons := subscribe(t, c, opts)
	p := batchProducer(t, c, topic, 10)
	ids := sendBatch(t, p, "m", 10)
	if !sameEntry(ids[0], ids[9]) {
		t.Fatalf("the 10 messages were not sent as one batch: ids %s .. %s", idString(ids[0]), idString(ids[9]))
	}
	for i := range 10 {
		msg := receive(t, cons)
		if got, want := string(msg.Payload()), fmt.Sprintf("m-%d", i); got != want {
			t.Fatalf("message %d: %q, want %q", i, got, want)
		}
		if i%2 == 0 {
			ackMsg(t, cons, msg)
		}
	}
	cons.Close() // flushes the pending acks before closing

	cons = subscribe(t, c, opts)
	got := receivePayloads(t, cons, 5, false)
	if want := []string{"m-1", "m-3", "m-5", "m-7", "m-9"}; !slices.Equal(got, want) {
		t.Fatalf("after reconnect got %v, want only the unacknowledged %v", got, want)
	}
	// Acking the rest completes the batch; nothing is left.
	cons.Close()
	cons = subscribe(t, c, opts)
	for _, msg := range []string{"m-1", "m-3", "m-5", "m-7", "m-9"} {
		m := receive(t, cons)
		if string(m.Payload()) != msg {
			t.Fatalf("second reconnect: got %q, want %q", m.Payload(), msg)
		}
		ackMsg(t, cons, m)
	}
	cons.Close()
	expectNothingMore(t, subscribe(t, c, opts), p)
}
