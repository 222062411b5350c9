package pulsar_test

import (
	"slices"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestInitialPosition: a new subscription at Earliest starts with the
// first message on the topic; one at Latest starts with the first message
// published after it was created.
func TestInitialPosition(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	sendN(t, p, "old", 5)

	earliest := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "earliest",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	latest := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "latest",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest})
	sendN(t, p, "new", 3)

	if got, want := receivePayloads(t, earliest, 8, true), append(payloads("old", 0, 5), payloads("new", 0, 3)...); !slices.Equal(got, want) {
		t.Errorf("Earliest subscription got %v, want %v", got, want)
	}
	if got, want := receivePayloads(t, latest, 3, true), payloads("new", 0, 3); !slices.Equal(got, want) {
		t.Errorf("Latest subscription got %v, want %v", got, want)
	}

	// The initial position applies only when the subscription is created:
	// reconnecting at Earliest does not rewind the existing one.
	latest.Close()
	again := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "latest",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	expectNothingMore(t, again, p)
}
