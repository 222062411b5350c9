package pulsar_test

import (
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestNegativeAck: a negatively acknowledged message is redelivered after
// the nack delay (CommandRedeliverUnacknowledgedMessages), with its
// redelivery count incremented each time; acknowledged ones are not.
func TestNegativeAck(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		NackRedeliveryDelay: 200 * time.Millisecond})
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendN(t, p, "m", 3)

	var got []string
	for range 3 {
		msg := receive(t, cons)
		got = append(got, string(msg.Payload()))
		if string(msg.Payload()) == "m-1" {
			cons.Nack(msg)
		} else {
			ackMsg(t, cons, msg)
		}
	}
	if want := payloads("m", 0, 3); !slices.Equal(got, want) {
		t.Fatalf("first delivery %v, want %v", got, want)
	}

	for want := uint32(1); want <= 2; want++ {
		msg := receive(t, cons)
		if string(msg.Payload()) != "m-1" {
			t.Fatalf("got %q, want the nacked m-1 again", msg.Payload())
		}
		if msg.RedeliveryCount() != want {
			t.Errorf("redelivery %d of m-1 has RedeliveryCount %d", want, msg.RedeliveryCount())
		}
		if want == 1 {
			cons.Nack(msg)
		} else {
			ackMsg(t, cons, msg)
		}
	}
	expectNothingMore(t, cons, p)
}
