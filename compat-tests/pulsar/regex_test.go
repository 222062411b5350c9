package pulsar_test

import (
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestRegexSubscription: a TopicsPattern consumer subscribes to every
// matching topic of the namespace (found with GetTopicsOfNamespace), not
// to others, and picks up a matching topic created after it started.
func TestRegexSubscription(t *testing.T) {
	c := sharedClient(t)
	base := topicName(t)
	other := topicName(t) + "-other"
	for _, suffix := range []string{"-a", "-b", "-c"} {
		p := createProducer(t, c, pulsar.ProducerOptions{Topic: base + suffix, DisableBatching: true})
		send(t, p, &pulsar.ProducerMessage{Payload: []byte("hello" + suffix)})
	}
	po := createProducer(t, c, pulsar.ProducerOptions{Topic: other, DisableBatching: true})
	send(t, po, &pulsar.ProducerMessage{Payload: []byte("not for the pattern")})

	pattern := base + "-.*"
	match := regexp.MustCompile("^" + pattern + "$")
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		TopicsPattern:               pattern,
		SubscriptionName:            "regex",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		AutoDiscoveryPeriod:         500 * time.Millisecond,
	})

	check := func(msg pulsar.Message) string {
		t.Helper()
		if !match.MatchString(msg.Topic()) {
			t.Fatalf("got %q from %s, which does not match %s", msg.Payload(), msg.Topic(), pattern)
		}
		ackMsg(t, cons, msg)
		return string(msg.Payload())
	}
	var got []string
	for range 3 {
		got = append(got, check(receive(t, cons)))
	}
	slices.Sort(got)
	if want := []string{"hello-a", "hello-b", "hello-c"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}

	// A topic created now is discovered within a few discovery periods.
	pd := createProducer(t, c, pulsar.ProducerOptions{Topic: base + "-d", DisableBatching: true})
	send(t, pd, &pulsar.ProducerMessage{Payload: []byte("hello-d")})
	if got := check(receive(t, cons)); got != "hello-d" {
		t.Fatalf("got %q, want hello-d from the new topic", got)
	}

	// Still nothing from the non-matching topic: a sentinel on a matching
	// one is the next message.
	pa := createProducer(t, c, pulsar.ProducerOptions{Topic: base + "-a", DisableBatching: true})
	expectNothingMore(t, cons, pa)
}
