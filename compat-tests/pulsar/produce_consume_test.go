package pulsar_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestProduceConsume: messages sent with Send and with SendAsync arrive
// once, in order, with their payload, key, properties, event time, a
// publish time and the producer's name, under the ids the producer was
// given, which increase; acknowledged messages are not delivered again to
// the subscription.
func TestProduceConsume(t *testing.T) {
	for _, mode := range []string{"Send", "SendAsync"} {
		t.Run(mode, func(t *testing.T) {
			c := sharedClient(t)
			topic := topicName(t)
			const sub = "sub"
			cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
			p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: mode == "Send"})

			const n = 20
			eventBase := time.UnixMilli(1_700_000_000_000)
			msgs := make([]*pulsar.ProducerMessage, n)
			for i := range n {
				msgs[i] = &pulsar.ProducerMessage{
					Payload:    fmt.Appendf(nil, "payload-%d", i),
					Key:        fmt.Sprintf("key-%d", i%3),
					Properties: map[string]string{"i": strconv.Itoa(i), "mode": mode},
					EventTime:  eventBase.Add(time.Duration(i) * time.Millisecond),
				}
			}
			before := time.Now().Truncate(time.Millisecond)
			ids := make([]pulsar.MessageID, n)
			if mode == "Send" {
				for i, m := range msgs {
					ids[i] = send(t, p, m)
				}
			} else {
				var mu sync.Mutex
				var order []int
				errs := make(chan error, n)
				ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
				defer cancel()
				for i, m := range msgs {
					p.SendAsync(ctx, m, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						mu.Lock()
						ids[i] = id
						order = append(order, i)
						mu.Unlock()
						errs <- err
					})
				}
				if err := p.FlushWithCtx(ctx); err != nil {
					t.Fatalf("Flush: %v", err)
				}
				for range n {
					select {
					case err := <-errs:
						if err != nil {
							t.Fatalf("SendAsync callback: %v", err)
						}
					case <-ctx.Done():
						t.Fatalf("SendAsync callbacks not all called within %v", sendTimeout)
					}
				}
				for k, i := range order {
					if k != i {
						t.Fatalf("SendAsync callbacks ran in order %v, want send order", order)
					}
				}
			}
			for i := 1; i < n; i++ {
				if compareIDs(ids[i-1], ids[i]) >= 0 {
					t.Fatalf("send ids not increasing: message %d got %s, message %d got %s", i-1, idString(ids[i-1]), i, idString(ids[i]))
				}
			}

			var prev pulsar.MessageID
			for i := range n {
				msg := receive(t, cons)
				after := time.Now()
				want := msgs[i]
				if !bytes.Equal(msg.Payload(), want.Payload) {
					t.Fatalf("message %d: payload %q, want %q", i, msg.Payload(), want.Payload)
				}
				if msg.Key() != want.Key {
					t.Errorf("message %d: key %q, want %q", i, msg.Key(), want.Key)
				}
				if !maps.Equal(msg.Properties(), want.Properties) {
					t.Errorf("message %d: properties %v, want %v", i, msg.Properties(), want.Properties)
				}
				if !msg.EventTime().Equal(want.EventTime) {
					t.Errorf("message %d: event time %v, want %v", i, msg.EventTime(), want.EventTime)
				}
				if pt := msg.PublishTime(); pt.Before(before) || pt.After(after) {
					t.Errorf("message %d: publish time %v, want between %v and %v", i, pt, before, after)
				}
				if msg.ProducerName() != p.Name() {
					t.Errorf("message %d: producer name %q, want %q", i, msg.ProducerName(), p.Name())
				}
				if msg.Topic() != topic {
					t.Errorf("message %d: topic %q, want %q", i, msg.Topic(), topic)
				}
				if msg.RedeliveryCount() != 0 {
					t.Errorf("message %d: redelivery count %d on first delivery", i, msg.RedeliveryCount())
				}
				if compareIDs(msg.ID(), ids[i]) != 0 {
					t.Errorf("message %d: id %s, the producer was told %s", i, idString(msg.ID()), idString(ids[i]))
				}
				if prev != nil && compareIDs(prev, msg.ID()) >= 0 {
					t.Errorf("message %d: id %s not after the previous %s", i, idString(msg.ID()), idString(prev))
				}
				prev = msg.ID()
				ackMsg(t, cons, msg)
			}

			// Acks are durable: a new consumer on the subscription gets
			// nothing of what was acknowledged.
			cons.Close()
			cons2 := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub})
			expectNothingMore(t, cons2, p)
		})
	}
}

// TestLargeMessage: a 1 MiB message (well under Pulsar's 5 MiB default
// limit) goes through whole.
func TestLargeMessage(t *testing.T) {
	c := sharedClient(t)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
	p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	payload := make([]byte, 1<<20)
	for i := range payload {
		payload[i] = byte(i * 7 % 251)
	}
	send(t, p, &pulsar.ProducerMessage{Payload: payload})
	msg := receive(t, cons)
	if !bytes.Equal(msg.Payload(), payload) {
		t.Fatalf("received %d bytes, not the %d sent", len(msg.Payload()), len(payload))
	}
	ackMsg(t, cons, msg)
}
