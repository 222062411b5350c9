package pulsar_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// TestDeduplication: with deduplication enabled, a producer that
// reconnects under the same name and resends sequence ids already stored
// gets them acknowledged but not stored again, and the broker tells it the
// last stored sequence id so that new messages continue after it.
func TestDeduplication(t *testing.T) {
	srv := harness.Start(t, harness.WithArgs("--broker-deduplication-enabled=true"))
	c := newClient(t, srv)
	topic := topicName(t)
	name := "dedup-" + harness.Name(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})

	sendSeq := func(p pulsar.Producer, seq int64) pulsar.MessageID {
		t.Helper()
		return send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "seq-%d", seq), SequenceID: &seq})
	}

	p1 := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	for seq := range int64(10) {
		sendSeq(p1, seq)
	}
	if got := p1.LastSequenceID(); got != 9 {
		t.Errorf("LastSequenceID after sending 0..9 = %d, want 9", got)
	}
	p1.Close()

	// The same producer, reconnected, resends its last three messages and
	// then new ones.
	p2 := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	for seq := int64(7); seq < 10; seq++ {
		id := sendSeq(p2, seq)
		t.Logf("duplicate seq %d acknowledged with id %s", seq, idString(id))
	}
	// A duplicate of an older message is dropped too.
	sendSeq(p2, 3)
	for seq := int64(10); seq < 12; seq++ {
		sendSeq(p2, seq)
	}
	if got := p2.LastSequenceID(); got != 11 {
		t.Errorf("LastSequenceID after sending up to 11 = %d, want 11", got)
	}
	p2.Close()

	// A reconnected producer that does not set sequence ids continues
	// after the last stored one: the broker reports it in ProducerSuccess.
	// (pulsar-client-go's LastSequenceID() is -1 until a receipt comes, so
	// it is checked after one send.)
	p3 := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	send(t, p3, &pulsar.ProducerMessage{Payload: []byte("seq-12")})
	if got := p3.LastSequenceID(); got != 12 {
		t.Errorf("a reconnected producer's first message got sequence id %d, want 12 (last stored 11, + 1)", got)
	}

	if got, want := receivePayloads(t, cons, 13, true), payloads("seq", 0, 13); !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want each sequence id once: %v", got, want)
	}
	expectNothingMore(t, cons, p3)
}
