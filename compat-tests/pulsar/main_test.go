// Package pulsar_test runs Apache Pulsar's Go client, unmodified, against
// a real magnetar standalone server. Tests share one server (started on
// first use) unless they restart or reconfigure it; each uses its own
// topics and subscriptions, named after the test.
package pulsar_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

var shared = harness.NewShared()

// partitionedShared auto-creates topics as partitioned topics of
// sharedPartitions partitions (the admin API that creates them
// explicitly comes later).
var partitionedShared = harness.NewShared(harness.WithArgs("--auto-topic-creation", "partitioned",
	"--auto-topic-partitions", strconv.Itoa(sharedPartitions)))

const sharedPartitions = 3

func TestMain(m *testing.M) { os.Exit(harness.RunShared(m, shared, partitionedShared)) }

// Bounds on single operations: a broken server fails a test in this time
// instead of hanging it.
const (
	receiveTimeout = 15 * time.Second
	sendTimeout    = 15 * time.Second
)

// topicName is a fresh persistent topic in public/default named after t.
func topicName(t testing.TB) string {
	return "persistent://public/default/" + harness.Name(t)
}

// newClient returns a client of srv. It first checks that something
// listens on the Pulsar port: without that, every client operation would
// retry for the whole operation timeout before failing.
func newClient(t testing.TB, srv *harness.Server) pulsar.Client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", srv.PulsarAddr(), 5*time.Second)
	if err != nil {
		t.Fatalf("magnetar does not accept connections on its Pulsar port %s: %v", srv.PulsarAddr(), err)
	}
	conn.Close()
	return harness.NewClient(t, srv.PulsarURL())
}

// sharedClient is a client of the package's shared server.
func sharedClient(t testing.TB) pulsar.Client {
	t.Helper()
	return newClient(t, shared.Server(t))
}

func createProducer(t testing.TB, c pulsar.Client, opts pulsar.ProducerOptions) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("CreateProducer(topic %s, name %q): %v", opts.Topic, opts.Name, err)
	}
	t.Cleanup(p.Close)
	return p
}

func subscribe(t testing.TB, c pulsar.Client, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("Subscribe(topic %s%v%s, subscription %q): %v", opts.Topic, opts.Topics, opts.TopicsPattern, opts.SubscriptionName, err)
	}
	t.Cleanup(cons.Close)
	return cons
}

func createReader(t testing.TB, c pulsar.Client, opts pulsar.ReaderOptions) pulsar.Reader {
	t.Helper()
	r, err := c.CreateReader(opts)
	if err != nil {
		t.Fatalf("CreateReader(topic %s, start %v, inclusive %v): %v", opts.Topic, opts.StartMessageID, opts.StartMessageIDInclusive, err)
	}
	t.Cleanup(r.Close)
	return r
}

func send(t testing.TB, p pulsar.Producer, msg *pulsar.ProducerMessage) pulsar.MessageID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	id, err := p.Send(ctx, msg)
	if err != nil {
		t.Fatalf("Send(%q) on %s: %v", abbrev(msg.Payload), p.Topic(), err)
	}
	return id
}

// sendN sends prefix-0 .. prefix-(n-1) synchronously and returns their ids.
func sendN(t testing.TB, p pulsar.Producer, prefix string, n int) []pulsar.MessageID {
	t.Helper()
	ids := make([]pulsar.MessageID, n)
	for i := range n {
		ids[i] = send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	return ids
}

// sendBatch sends prefix-0 .. prefix-(n-1) with SendAsync, flushes, and
// returns their ids in order. With a batching producer whose
// BatchingMaxMessages is at least n and a long BatchingMaxPublishDelay,
// they form one batch.
func sendBatch(t testing.TB, p pulsar.Producer, prefix string, n int) []pulsar.MessageID {
	t.Helper()
	msgs := make([]*pulsar.ProducerMessage, n)
	for i := range n {
		msgs[i] = &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s-%d", prefix, i)}
	}
	return sendAll(t, p, msgs)
}

// receive returns the consumer's next message, failing t if none comes
// within receiveTimeout.
func receive(t testing.TB, c pulsar.Consumer) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), receiveTimeout)
	defer cancel()
	msg, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive on subscription %q: %v (no message within %v)", c.Subscription(), err, receiveTimeout)
	}
	return msg
}

// receivePayloads receives n messages, acking each if ack is set, and
// returns their payloads in order.
func receivePayloads(t testing.TB, c pulsar.Consumer, n int, ack bool) []string {
	t.Helper()
	got := make([]string, 0, n)
	for len(got) < n {
		msg := receive(t, c)
		got = append(got, string(msg.Payload()))
		if ack {
			ackMsg(t, c, msg)
		}
	}
	return got
}

func ackMsg(t testing.TB, c pulsar.Consumer, msg pulsar.Message) {
	t.Helper()
	if err := c.Ack(msg); err != nil {
		t.Fatalf("Ack(%v): %v", msg.ID(), err)
	}
}

// receiveFromChan receives from a MessageChannel shared by several
// consumers.
func receiveFromChan(t testing.TB, ch <-chan pulsar.ConsumerMessage) pulsar.ConsumerMessage {
	t.Helper()
	select {
	case cm := <-ch:
		return cm
	case <-time.After(receiveTimeout):
		t.Fatalf("no message on the consumers' channel within %v", receiveTimeout)
		return pulsar.ConsumerMessage{}
	}
}

// next returns the reader's next message, failing t if none comes within
// receiveTimeout.
func next(t testing.TB, r pulsar.Reader) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), receiveTimeout)
	defer cancel()
	msg, err := r.Next(ctx)
	if err != nil {
		t.Fatalf("Reader.Next on %s: %v (no message within %v)", r.Topic(), err, receiveTimeout)
	}
	return msg
}

// expectNothingMore proves that c has nothing left to deliver: p sends a
// sentinel, which must be the next message c receives (and is acked).
// Unlike waiting for a Receive to time out, this is fast and certain once
// the broker dispatches in order.
func expectNothingMore(t testing.TB, c pulsar.Consumer, p pulsar.Producer) {
	t.Helper()
	sentinel := "sentinel-" + harness.Name(t)
	send(t, p, &pulsar.ProducerMessage{Payload: []byte(sentinel)})
	msg := receive(t, c)
	if got := string(msg.Payload()); got != sentinel {
		t.Fatalf("subscription %q delivered %q (id %v, redelivery count %d) before the sentinel; want nothing more",
			c.Subscription(), abbrev(msg.Payload()), msg.ID(), msg.RedeliveryCount())
	}
	ackMsg(t, c, msg)
}

// compareIDs orders message ids by ledger, entry and batch index.
func compareIDs(a, b pulsar.MessageID) int {
	switch {
	case a.LedgerID() != b.LedgerID():
		return cmpInt(a.LedgerID(), b.LedgerID())
	case a.EntryID() != b.EntryID():
		return cmpInt(a.EntryID(), b.EntryID())
	default:
		return cmpInt(int64(a.BatchIdx()), int64(b.BatchIdx()))
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sameEntry reports whether a and b address the same stored entry.
func sameEntry(a, b pulsar.MessageID) bool {
	return a.LedgerID() == b.LedgerID() && a.EntryID() == b.EntryID()
}

// idString shows an id as ledger:entry:batchIdx.
func idString(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
}

func payloads(prefix string, from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprintf("%s-%d", prefix, i))
	}
	return s
}

// abbrev shortens a payload for messages.
func abbrev(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// sendAll sends msgs with SendAsync, flushes, and waits for every
// callback; it returns the ids in order.
func sendAll(t testing.TB, p pulsar.Producer, msgs []*pulsar.ProducerMessage) []pulsar.MessageID {
	t.Helper()
	ids := make([]pulsar.MessageID, len(msgs))
	errs := make(chan error, len(msgs))
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	for i, m := range msgs {
		p.SendAsync(ctx, m, func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			ids[i] = id
			errs <- err
		})
	}
	if err := p.FlushWithCtx(ctx); err != nil {
		t.Fatalf("Flush on %s: %v", p.Topic(), err)
	}
	for range msgs {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("SendAsync on %s: %v", p.Topic(), err)
			}
		case <-ctx.Done():
			t.Fatalf("SendAsync on %s: callbacks not called within %v", p.Topic(), sendTimeout)
		}
	}
	return ids
}
