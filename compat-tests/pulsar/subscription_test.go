package pulsar_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestExclusiveRefusesSecondConsumer: a second consumer on an Exclusive
// subscription is refused with ConsumerBusy; another subscription on the
// same topic is not affected, and once the first consumer closes the
// subscription takes a new one.
func TestExclusiveRefusesSecondConsumer(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	first := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "excl", Type: pulsar.Exclusive})

	second, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "excl", Type: pulsar.Exclusive})
	if err == nil {
		second.Close()
		t.Fatal("a second consumer on an Exclusive subscription was accepted; want ConsumerBusy")
	}
	if !strings.Contains(err.Error(), "ConsumerBusy") {
		t.Errorf("second consumer refused with %q; want a ConsumerBusy error", err)
	}
	// A shared consumer cannot join an exclusive subscription either.
	if other, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "excl", Type: pulsar.Shared}); err == nil {
		other.Close()
		t.Error("a Shared consumer joined an Exclusive subscription with a connected consumer")
	}

	subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "other", Type: pulsar.Exclusive})

	first.Close()
	subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "excl", Type: pulsar.Exclusive})
}

// TestSharedSubscription: two consumers of a Shared subscription split the
// messages between them; every message is delivered exactly once.
func TestSharedSubscription(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	ch := make(chan pulsar.ConsumerMessage, 200)
	for _, name := range []string{"c1", "c2"} {
		// Small receiver queues keep one consumer from taking everything.
		subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", Type: pulsar.Shared,
			Name: name, MessageChannel: ch, ReceiverQueueSize: 5})
	}
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 100
	sendN(t, p, "m", n)

	seen := map[string]string{} // payload -> consumer
	count := map[string]int{}
	for range n {
		cm := receiveFromChan(t, ch)
		payload, name := string(cm.Payload()), cm.Consumer.Name()
		if prev, dup := seen[payload]; dup {
			t.Fatalf("%s delivered twice: to %s and to %s", payload, prev, name)
		}
		seen[payload] = name
		count[name]++
		if err := cm.Consumer.Ack(cm.Message); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range payloads("m", 0, n) {
		if _, ok := seen[want]; !ok {
			t.Errorf("%s not delivered", want)
		}
	}
	t.Logf("messages per consumer: %v", count)
	if count["c1"] == 0 || count["c2"] == 0 {
		t.Errorf("messages per consumer %v; a Shared subscription should spread them over both", count)
	}
}

// TestFailoverSubscription: only one consumer of a Failover subscription
// receives messages; when it closes, the other takes over and gets what
// was not acknowledged, in order.
func TestFailoverSubscription(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	ch := make(chan pulsar.ConsumerMessage, 100)
	consumers := map[string]pulsar.Consumer{}
	for _, name := range []string{"c1", "c2"} {
		consumers[name] = subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "failover",
			Type: pulsar.Failover, Name: name, MessageChannel: ch})
	}
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 10
	sendN(t, p, "m", n)

	var active string
	var got []string
	for i := range n {
		cm := receiveFromChan(t, ch)
		name := cm.Consumer.Name()
		if active == "" {
			active = name
		} else if name != active {
			t.Fatalf("message %q went to %s, but %s is the active consumer", cm.Payload(), name, active)
		}
		got = append(got, string(cm.Payload()))
		if i < n/2 {
			if err := cm.Consumer.Ack(cm.Message); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := payloads("m", 0, n); !slices.Equal(got, want) {
		t.Fatalf("active consumer got %v, want %v", got, want)
	}

	// The active consumer leaves with half its messages unacknowledged.
	consumers[active].Close()
	var standby string
	for name := range consumers {
		if name != active {
			standby = name
		}
	}
	got = nil
	for range n - n/2 {
		cm := receiveFromChan(t, ch)
		if name := cm.Consumer.Name(); name != standby {
			t.Fatalf("after %s closed, %q went to %s, want %s", active, cm.Payload(), name, standby)
		}
		got = append(got, string(cm.Payload()))
		if err := cm.Consumer.Ack(cm.Message); err != nil {
			t.Fatal(err)
		}
	}
	if want := payloads("m", n/2, n); !slices.Equal(got, want) {
		t.Fatalf("after failover %s got %v, want the unacknowledged %v", standby, got, want)
	}
	expectNothingMore(t, consumers[standby], p)
}

// TestKeySharedSubscription: with three consumers on a Key_Shared
// subscription, all messages of a key go to one consumer, in order, and
// the keys are spread over more than one consumer.
func TestKeySharedSubscription(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			c := sharedClient(t)
			topic := topicName(t)
			ch := make(chan pulsar.ConsumerMessage, 500)
			for _, name := range []string{"c1", "c2", "c3"} {
				subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "keyshared",
					Type: pulsar.KeyShared, Name: name, MessageChannel: ch, ReceiverQueueSize: 20})
			}
			opts := pulsar.ProducerOptions{Topic: topic, DisableBatching: !batched}
			if batched {
				// A Key_Shared subscription needs batches of one key each.
				opts.BatcherBuilderType = pulsar.KeyBasedBatchBuilder
			}
			p := createProducer(t, c, opts)

			const keys, perKey = 12, 10
			var sent []*pulsar.ProducerMessage
			for i := range perKey {
				for k := range keys {
					sent = append(sent, &pulsar.ProducerMessage{
						Key:     fmt.Sprintf("key-%d", k),
						Payload: fmt.Appendf(nil, "key-%d/%d", k, i),
					})
				}
			}
			if batched {
				sendAll(t, p, sent)
			} else {
				for _, m := range sent {
					send(t, p, m)
				}
			}

			owner := map[string]string{} // key -> consumer
			nextSeq := map[string]int{}  // key -> next expected index
			perConsumer := map[string]int{}
			for range len(sent) {
				cm := receiveFromChan(t, ch)
				key, name := cm.Key(), cm.Consumer.Name()
				if o, ok := owner[key]; ok && o != name {
					t.Fatalf("key %s went to %s and to %s", key, o, name)
				}
				owner[key] = name
				perConsumer[name]++
				want := fmt.Sprintf("%s/%d", key, nextSeq[key])
				if string(cm.Payload()) != want {
					t.Fatalf("consumer %s got %q, want %q next for key %s (order per key)", name, cm.Payload(), want, key)
				}
				nextSeq[key]++
				if err := cm.Consumer.Ack(cm.Message); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("messages per consumer: %v; key owners: %v", perConsumer, owner)
			if len(perConsumer) < 2 {
				t.Errorf("all %d keys went to one consumer (%v); Key_Shared should spread keys over the consumers", keys, perConsumer)
			}
		})
	}
}

// TestSharedConsumerClosesWithUnacked: messages a Shared consumer received
// but did not acknowledge go to the other consumer when it closes; those
// it acknowledged do not.
func TestSharedConsumerClosesWithUnacked(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	c1 := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", Type: pulsar.Shared, Name: "c1"})
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n, acked = 10, 4
	sendN(t, p, "m", n)
	for i := range n {
		msg := receive(t, c1)
		if got, want := string(msg.Payload()), fmt.Sprintf("m-%d", i); got != want {
			t.Fatalf("c1 got %q, want %q", got, want)
		}
		if i < acked {
			ackMsg(t, c1, msg)
		}
	}

	c2 := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "shared", Type: pulsar.Shared, Name: "c2"})
	c1.Close()
	got := receivePayloads(t, c2, n-acked, true)
	slices.Sort(got)
	want := payloads("m", acked, n)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("c2 got %v after c1 closed, want the unacknowledged %v", got, want)
	}
	expectNothingMore(t, c2, p)
}
