package pulsar_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// readAll reads until HasNext says the reader is at the end of the topic.
func readAll(t *testing.T, r pulsar.Reader) []string {
	t.Helper()
	var got []string
	for r.HasNext() {
		got = append(got, string(next(t, r).Payload()))
		if len(got) > 1000 {
			t.Fatal("HasNext still true after 1000 messages")
		}
	}
	return got
}

// TestReader: readers start where they are told — the earliest message,
// the end of the topic, or a given message id (exclusive by default,
// inclusive with StartMessageIDInclusive) — and HasNext is true exactly
// while messages remain.
func TestReader(t *testing.T) {
	c := sharedClient(t)

	// A topic with 10 single messages.
	topic := topicName(t)
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	ids := sendN(t, p, "m", 10)

	cases := []struct {
		name      string
		start     pulsar.MessageID
		inclusive bool
		want      []string
	}{
		{"Earliest", pulsar.EarliestMessageID(), false, payloads("m", 0, 10)},
		{"EarliestInclusive", pulsar.EarliestMessageID(), true, payloads("m", 0, 10)},
		{"FromID", ids[4], false, payloads("m", 5, 10)},
		{"FromIDInclusive", ids[4], true, payloads("m", 4, 10)},
		{"FromFirstIDInclusive", ids[0], true, payloads("m", 0, 10)},
		{"FromLastID", ids[9], false, nil},
		{"Latest", pulsar.LatestMessageID(), false, nil},
		{"LatestInclusive", pulsar.LatestMessageID(), true, payloads("m", 9, 10)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := createReader(t, c, pulsar.ReaderOptions{Topic: topic, StartMessageID: tc.start, StartMessageIDInclusive: tc.inclusive})
			if got := readAll(t, r); !slices.Equal(got, tc.want) {
				t.Errorf("read %v, want %v", got, tc.want)
			}
		})
	}

	// A reader at the end sees what is published after it started.
	t.Run("LatestThenNew", func(t *testing.T) {
		r := createReader(t, c, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.LatestMessageID()})
		if r.HasNext() {
			t.Fatal("HasNext true on a reader at the end of the topic")
		}
		p2 := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		send(t, p2, &pulsar.ProducerMessage{Payload: []byte("after")})
		if got := string(next(t, r).Payload()); got != "after" {
			t.Fatalf("reader at Latest got %q, want %q", got, "after")
		}
	})
}

// TestReaderBatch: reader start ids inside a batch: the reader starts
// after (or, inclusive, at) that message of the batch, and HasNext stays
// true until the last message of the batch is read (the broker's last
// message id carries the batch index of the batch's last message).
func TestReaderBatch(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	p := batchProducer(t, c, topic, 10)
	ids := sendBatch(t, p, "m", 10)
	if !sameEntry(ids[0], ids[9]) {
		t.Fatalf("the 10 messages were not sent as one batch: %s .. %s", idString(ids[0]), idString(ids[9]))
	}
	for _, tc := range []struct {
		start     int
		inclusive bool
		want      []string
	}{
		{3, false, payloads("m", 4, 10)},
		{3, true, payloads("m", 3, 10)},
		{9, true, payloads("m", 9, 10)},
		{9, false, nil},
	} {
		t.Run(fmt.Sprintf("from=%d/inclusive=%v", tc.start, tc.inclusive), func(t *testing.T) {
			r := createReader(t, c, pulsar.ReaderOptions{Topic: topic, StartMessageID: ids[tc.start], StartMessageIDInclusive: tc.inclusive})
			if got := readAll(t, r); !slices.Equal(got, tc.want) {
				t.Errorf("read %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("Earliest", func(t *testing.T) {
		r := createReader(t, c, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		got := readAll(t, r)
		if want := payloads("m", 0, 10); !slices.Equal(got, want) {
			t.Errorf("read %v, want %v", got, want)
		}
	})
}

// TestReaderEmptyTopic: on a topic without messages HasNext is false and
// the first message published is then read.
func TestReaderEmptyTopic(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	r := createReader(t, c, pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if r.HasNext() {
		t.Fatal("HasNext true on an empty topic")
	}
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("first")})
	if got := string(next(t, r).Payload()); got != "first" {
		t.Fatalf("got %q, want %q", got, "first")
	}
	start := time.Now()
	if r.HasNext() {
		t.Fatal("HasNext true after reading the only message")
	}
	t.Logf("HasNext at the end took %v", time.Since(start))
}
