package pulsar_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestSeekByID: after consuming and acknowledging everything, Seek to a
// message id rewinds the subscription: the next message is that one with
// StartMessageIDInclusive, the one after it without.
func TestSeekByID(t *testing.T) {
	for _, inclusive := range []bool{true, false} {
		t.Run(fmt.Sprintf("inclusive=%v", inclusive), func(t *testing.T) {
			c := sharedClient(t)
			topic := topicName(t)
			cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", StartMessageIDInclusive: inclusive})
			p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
			ids := sendN(t, p, "m", 10)
			receivePayloads(t, cons, 10, true)

			if err := cons.Seek(ids[4]); err != nil {
				t.Fatalf("Seek(%s): %v", idString(ids[4]), err)
			}
			from := 5
			if inclusive {
				from = 4
			}
			if got, want := receivePayloads(t, cons, 10-from, true), payloads("m", from, 10); !slices.Equal(got, want) {
				t.Fatalf("after Seek(id of m-4) got %v, want %v", got, want)
			}
			expectNothingMore(t, cons, p)
		})
	}
}

// TestSeekByTime: SeekByTime rewinds the subscription to the first
// message published at or after the given time.
func TestSeekByTime(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	// Acks with a response: grouped acks go out on a timer, and one sent
	// by the timer just as SeekByTime flushes the others can reach the
	// broker after the SEEK, acknowledging again what the seek rewound to
	// (seen once in 100 runs). The test is about the seek.
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", AckWithResponse: true})
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendN(t, p, "before", 5)
	msgs := make([]pulsar.Message, 0, 5)
	for range 5 {
		msg := receive(t, cons)
		msgs = append(msgs, msg)
		ackMsg(t, cons, msg)
	}
	// The broker seeks by its own publish time (sent to the client as
	// broker entry metadata), as Pulsar does when brokers stamp entries:
	// the producer's publish time is earlier and need not be monotonic.
	// Times have millisecond precision: the seek time is strictly after
	// the last "before" message, and every "after" message is published
	// at or after it.
	last := msgs[4].BrokerPublishTime()
	if last == nil {
		t.Fatal("message without a broker publish time (broker entry metadata)")
	}
	seekTime := last.Add(time.Millisecond)
	for time.Now().Before(seekTime.Add(time.Millisecond)) {
		time.Sleep(time.Millisecond)
	}
	sendN(t, p, "after", 5)
	if got, want := receivePayloads(t, cons, 5, true), payloads("after", 0, 5); !slices.Equal(got, want) {
		t.Fatalf("before the seek got %v, want %v", got, want)
	}

	if err := cons.SeekByTime(seekTime); err != nil {
		t.Fatalf("SeekByTime(%v): %v", seekTime, err)
	}
	if got, want := receivePayloads(t, cons, 5, true), payloads("after", 0, 5); !slices.Equal(got, want) {
		t.Fatalf("after SeekByTime(%v) got %v, want %v", seekTime, got, want)
	}
	expectNothingMore(t, cons, p)

	// A time before everything rewinds to the start.
	if err := cons.SeekByTime(msgs[0].PublishTime().Add(-time.Hour)); err != nil {
		t.Fatalf("SeekByTime(an hour before): %v", err)
	}
	if got := string(receive(t, cons).Payload()); got != "before-0" {
		t.Fatalf("after SeekByTime(an hour before the first message) got %q, want before-0", got)
	}
}

// TestGetLastMessageID: GetLastMessageIDs (CommandGetLastMessageId) names
// the last message on the topic: no entry (-1) on an empty topic, the last
// single message's id, and for a batch the batch index of its last
// message. Reader.GetLastMessageID agrees.
func TestGetLastMessageID(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
	lastID := func() pulsar.MessageID {
		t.Helper()
		ids, err := cons.GetLastMessageIDs()
		if err != nil {
			t.Fatalf("GetLastMessageIDs: %v", err)
		}
		if len(ids) != 1 {
			t.Fatalf("GetLastMessageIDs returned %d ids for a non-partitioned topic", len(ids))
		}
		if ids[0].Topic() != topic {
			t.Errorf("GetLastMessageIDs topic %q, want %q", ids[0].Topic(), topic)
		}
		return ids[0]
	}

	if id := lastID(); id.EntryID() != -1 {
		t.Errorf("last message id of an empty topic is %s; want entry id -1 (no message)", idString(id))
	}

	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ids := sendN(t, p, "m", 5)
	if id := lastID(); !sameEntry(id, ids[4]) {
		t.Errorf("last message id %s, want %s (the last sent)", idString(id), idString(ids[4]))
	}

	bp := batchProducer(t, c, topic, 10)
	bids := sendBatch(t, bp, "b", 10)
	id := lastID()
	if !sameEntry(id, bids[9]) || id.BatchIdx() != 9 {
		t.Errorf("last message id %s after a batch of 10, want %s with batch index 9", idString(id), idString(bids[9]))
	}

	r := createReader(t, c, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	rid, err := r.GetLastMessageID()
	if err != nil {
		t.Fatalf("Reader.GetLastMessageID: %v", err)
	}
	if compareIDs(rid, id) != 0 {
		t.Errorf("Reader.GetLastMessageID %s, consumer's %s", idString(rid), idString(id))
	}
}
