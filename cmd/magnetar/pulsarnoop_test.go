package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The no-op broker acknowledges what pulsar-client-go publishes, with and
// without batching, refuses anything else by name, and drops a connection
// that sends garbage with a log line, serving the others on.
func TestNoopPulsar(t *testing.T) {
	var logs bytes.Buffer
	s, err := startNoopPulsar(slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	client, err := newBenchPulsarClient(slog.Default(), s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, batching := range []bool{false, true} {
		p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "noop-test", DisableBatching: !batching})
		if err != nil {
			t.Fatal(err)
		}
		var ids []pulsar.MessageID
		for i := range 100 {
			id, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte{byte(i)}})
			if err != nil {
				t.Fatalf("batching %t: send %d: %v", batching, i, err)
			}
			ids = append(ids, id)
		}
		if ids[0].EntryID() == ids[99].EntryID() {
			t.Errorf("batching %t: every send got entry %d", batching, ids[0].EntryID())
		}
		p.Close()
	}

	_, err = client.Subscribe(pulsar.ConsumerOptions{Topic: "noop-test", SubscriptionName: "s"})
	if err == nil || !strings.Contains(err.Error(), "SUBSCRIBE") {
		t.Errorf("subscribe: %v, want an error naming SUBSCRIBE", err)
	}

	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL(), "pulsar://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("garbage answered with %d bytes, want the connection closed", n)
	}
	if p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "noop-after"}); err != nil {
		t.Errorf("after a bad connection: %v", err)
	} else {
		p.Close()
	}
	s.Close()
	if !strings.Contains(logs.String(), "no-op Pulsar broker: connection closed") {
		t.Errorf("no log line for the garbage connection:\n%s", logs.String())
	}
}
