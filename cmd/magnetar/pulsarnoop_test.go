package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The no-op broker acknowledges what pulsar-client-go publishes, with and
// without batching, refuses anything else by name, and drops a connection
// that sends garbage with a log line, serving the others on.
func TestNoopPulsar(t *testing.T) {
	var logs bytes.Buffer
	s, err := startNoopPulsar(slog.New(slog.NewTextHandler(&logs, nil)), nil)
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

// With a store, the no-op broker acknowledges a message only after it has
// written it to its file (written over as a ring: the file is smaller
// than what is sent), and a store that cannot write fails the sends.
func TestNoopPulsarDurable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const size = 64 << 10
	store, err := openNoopStore(ctx, slog.Default(), vfs.Default, path, size, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != size {
		t.Fatalf("store file: %v, %v; want %d bytes written beforehand", fi, err, size)
	}
	s, err := startNoopPulsar(slog.Default(), store)
	if err != nil {
		t.Fatal(err)
	}
	client, err := newBenchPulsarClient(slog.Default(), s.URL())
	if err != nil {
		t.Fatal(err)
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "noop-durable", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // 200 KB through a 64 KiB file
		payload := bytes.Repeat([]byte(fmt.Sprintf("message %04d;", i)), 77)
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, payload) {
			t.Fatalf("message %d acknowledged before it was in the file", i)
		}
		if len(data) != size {
			t.Fatalf("message %d: the file grew to %d bytes, want it written over (%d)", i, len(data), size)
		}
	}
	p.Close()
	client.Close()
	s.Close()
	store.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("store file after Close: %v, want it removed", err)
	}

	// A store whose writes fail: the send gets no receipt, the connection
	// is closed with a log line naming the failure.
	var logs syncBuffer
	store, err = openNoopStore(ctx, slog.New(slog.NewTextHandler(&logs, nil)), failingWritesFS{vfs.Default}, path, size, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s, err = startNoopPulsar(slog.Default(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	client, err = newBenchPulsarClient(slog.Default(), s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err = client.CreateProducer(pulsar.ProducerOptions{Topic: "noop-durable", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendCtx, sendCancel := context.WithTimeout(ctx, 5*time.Second)
	defer sendCancel()
	if _, err := p.Send(sendCtx, &pulsar.ProducerMessage{Payload: []byte("lost")}); err == nil {
		t.Error("a send acknowledged by a store that cannot write")
	}
	// The store logs its failure before it closes the connections.
	if !strings.Contains(logs.String(), "injected write failure") {
		t.Errorf("no log line naming the store's failure:\n%s", logs.String())
	}
}

// failingWritesFS opens files for reading and writing whose writes fail.
type failingWritesFS struct{ vfs.FS }

func (fs failingWritesFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	if err != nil {
		return nil, err
	}
	return failingWrites{f}, nil
}

type failingWrites struct{ vfs.File }

func (failingWrites) WriteAt([]byte, int64) (int, error) {
	return 0, errors.New("injected write failure")
}
