package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// The durable no-op Kafka broker serves franz-go (idempotent, acks all)
// through topic creation, metadata, produce, list offsets and fetch; a
// record is acknowledged only once it is in the store's file; offsets
// count records per partition; a fetch sends produced batches again at
// the offsets asked for, cut at the partition's end; a request it does
// not serve closes the connection with a log line naming it.
func TestNoopKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "store")
	const size = 1 << 20
	store, err := openNoopStore(ctx, slog.Default(), vfs.Default, path, size, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var logs syncBuffer
	s, err := startNoopKafka(slog.New(slog.NewTextHandler(&logs, nil)), store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 3, -1, nil, "t"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v, %v", err, resp.Err)
	}
	if resp, err := adm.CreateTopic(ctx, 3, -1, nil, "t"); err == nil && resp.Err == nil {
		t.Error("a topic created twice")
	}

	const perPartition = 50
	for i := range 3 * perPartition {
		value := []byte(fmt.Sprintf("record %04d;", i))
		r := &kgo.Record{Topic: "t", Partition: int32(i % 3), Value: value}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if want := int64(i / 3); r.Offset != want {
			t.Fatalf("record %d to partition %d at offset %d, want %d", i, r.Partition, r.Offset, want)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, value) {
			t.Fatalf("record %d acknowledged before it was in the file", i)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "t")
	if err != nil || ends.Error() != nil {
		t.Fatalf("list end offsets: %v, %v", err, ends.Error())
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != perPartition {
			t.Errorf("partition %d ends at %d, want %d", o.Partition, o.Offset, perPartition)
		}
	})
	if details, err := adm.ListTopics(ctx, "missing"); err != nil || details["missing"].Err == nil {
		t.Errorf("an unknown topic: %v, %+v", err, details["missing"])
	}

	// A consumer reads every offset of each partition once, in order,
	// each record one produced to the partition (its first batch, the
	// only sample of so little).
	for p := range int32(3) {
		cons, err := kgo.NewClient(kgo.SeedBrokers(s.Addr()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {p: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Fatal(err)
		}
		var offsets []int64
		for len(offsets) < perPartition {
			fs := cons.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatalf("partition %d: fetch: %v", p, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				offsets = append(offsets, r.Offset)
				if want := fmt.Sprintf("record %04d;", p); string(r.Value) != want {
					t.Errorf("partition %d offset %d: %q, want %q", p, r.Offset, r.Value, want)
				}
			})
		}
		cons.Close()
		for i, o := range offsets {
			if o != int64(i) {
				t.Fatalf("partition %d: offsets %v, want 0..%d", p, offsets, perPartition-1)
			}
		}
	}

	// A batch of 4 records, then one of 2: the fetch sends the first
	// (the sample) twice, the second time cut to 2 records; an offset
	// past the end is out of range.
	if resp, err := adm.CreateTopic(ctx, 1, -1, nil, "u"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v, %v", err, resp.Err)
	}
	var recs []broker.Record
	for i := range 4 {
		recs = append(recs, broker.Record{OffsetDelta: int32(i), Value: []byte(fmt.Sprintf("u%d", i))})
	}
	// First a produce without records: nothing stored, nothing sampled.
	for _, batch := range [][]byte{nil, broker.AppendRecordBatch(nil, broker.RecordBatch{ProducerID: -1, BaseSequence: -1}, recs),
		broker.AppendRecordBatch(nil, broker.RecordBatch{ProducerID: -1, BaseSequence: -1}, recs[:2])} {
		pr := kmsg.NewPtrProduceRequest()
		pr.Acks, pr.TimeoutMillis = -1, 10000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic = "u"
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Records = batch
		pt.Partitions = append(pt.Partitions, pp)
		pr.Topics = append(pr.Topics, pt)
		if _, err := pr.RequestWith(ctx, cl); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	fetch := func(offset int64) kmsg.FetchResponseTopicPartition {
		fr := kmsg.NewPtrFetchRequest()
		fr.MaxBytes, fr.MaxWaitMillis = 1<<20, 10
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "u"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.FetchOffset, fp.PartitionMaxBytes = offset, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
		fr.Topics = append(fr.Topics, ft)
		resp, err := fr.RequestWith(ctx, cl.Broker(0))
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch at %d: %v, %+v", offset, err, resp)
		}
		return resp.Topics[0].Partitions[0]
	}
	part := fetch(0)
	if part.ErrorCode != 0 || part.HighWatermark != 6 {
		t.Fatalf("fetch at 0: error %d, high watermark %d; want 0 and 6", part.ErrorCode, part.HighWatermark)
	}
	var got []string
	for b := part.RecordBatches; len(b) > 0; {
		size := 12 + int(int32(binary.BigEndian.Uint32(b[8:])))
		h, rs, err := broker.ReadRecords(b[:size], 1<<20)
		if err != nil {
			t.Fatalf("a batch served: %v", err)
		}
		for _, r := range rs {
			got = append(got, fmt.Sprintf("%d:%s", h.BaseOffset+int64(r.OffsetDelta), r.Value))
		}
		b = b[size:]
	}
	if want := "0:u0 1:u1 2:u2 3:u3 4:u0 5:u1"; strings.Join(got, " ") != want {
		t.Errorf("fetched %q, want %q", strings.Join(got, " "), want)
	}
	if part := fetch(7); part.ErrorCode != 1 {
		t.Errorf("fetch past the end: error %d, want 1 (OFFSET_OUT_OF_RANGE)", part.ErrorCode)
	}

	// A request it does not serve closes the connection, with a log line.
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := binary.BigEndian.AppendUint16(nil, 16) // ListGroups
	req = binary.BigEndian.AppendUint16(req, 0)
	req = binary.BigEndian.AppendUint32(req, 7)
	req = binary.BigEndian.AppendUint16(req, 0xffff) // no client id
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(req))), req...)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("a ListGroups answered with %d bytes, want the connection closed", n)
	}
	// The broker logs before it closes the connection.
	if !strings.Contains(logs.String(), "does not serve API key 16 version 0") {
		t.Errorf("no log line naming the ListGroups:\n%s", logs.String())
	}
}

// The no-op broker's samples take no batch that claims no records, a
// tail that cannot be cut is not sent, and a fetch waiting for the store
// to write an earlier response ends with an error once the store is
// closed.
func TestNoopKafkaFetchEdges(t *testing.T) {
	var s noopSamples
	bad := broker.AppendRecordBatch(nil, broker.RecordBatch{}, []broker.Record{{Value: []byte("v")}})
	binary.BigEndian.PutUint32(bad[23:], 0xfffffffe) // lastOffsetDelta -2
	s.add(bad)
	s.add(nil)
	if len(s.batches) != 0 {
		t.Fatalf("sampled %d batches claiming no records", len(s.batches))
	}
	garbage := bytes.Repeat([]byte{0xee}, 100)
	s.batches = []noopBatch{{b: garbage, n: 5}}
	if pieces, size := s.fetch(0, 2, 1<<20, true); len(pieces) != 0 || size != 0 {
		t.Fatalf("an undecodable tail sent: %d pieces, %d bytes", len(pieces), size)
	}
	if pieces, size := s.fetch(0, 10, 1<<20, true); len(pieces) != 4 || size != 200 {
		t.Fatalf("two whole samples: %d pieces, %d bytes; want 4, 200", len(pieces), size)
	}

	ctx := context.Background()
	store, err := openNoopStore(ctx, slog.Default(), vfs.Default, filepath.Join(t.TempDir(), "store"), 1<<20, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	k := &noopKafka{store: store, topics: map[string][]int64{}, samples: map[string][]noopSamples{}}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &noopConn{c: a}
	c.queued()
	q := kmsg.NewPtrFetchRequest()
	q.Version = 4
	p := q.ResponseKind().(*kmsg.FetchResponse)
	p.SetVersion(4)
	done := make(chan error, 1)
	go func() { done <- k.fetch(c, 1, q, p) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("fetch waiting for a closed store: %v, want its error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a fetch waits for a closed store forever")
	}
}

// A no-op fetch's response goes out only after the connection's earlier
// replies, waiting in the store, are written.
func TestNoopKafkaFetchAfterReplies(t *testing.T) {
	store, err := openNoopStore(context.Background(), slog.Default(), vfs.Default, filepath.Join(t.TempDir(), "store"), 1<<20, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k := &noopKafka{store: store, topics: map[string][]int64{}, samples: map[string][]noopSamples{}}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	waiting := make(chan struct{})
	c := &noopConn{c: a, testHookAwait: func() { close(waiting) }}
	c.queued() // as the store does for a reply it holds
	q := kmsg.NewPtrFetchRequest()
	q.Version, q.MinBytes = 4, 0
	p := q.ResponseKind().(*kmsg.FetchResponse)
	p.SetVersion(4)
	done := make(chan error, 1)
	go func() { done <- k.fetch(c, 7, q, p) }()
	// The pipe holds nothing: a fetch writing its response before it
	// waits blocks in that write, never reaches the wait, and fails here.
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("the fetch returned (%v) without waiting for the reply in the store", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch did not wait for the reply in the store: its response went out first")
	}
	c.replied()
	var size [4]byte
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(b, size[:]); err != nil {
		t.Fatalf("no response once the earlier reply was written: %v", err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(b, frame); err != nil {
		t.Fatal(err)
	}
	if corr := int32(binary.BigEndian.Uint32(frame)); corr != 7 {
		t.Fatalf("response with correlation id %d, want 7", corr)
	}
	if err := <-done; err != nil {
		t.Fatalf("fetch: %v", err)
	}
}

// `magnetar perf noop-broker`, as perf all starts it: a child process that
// says when it is ready, serves its protocol with its store in the
// directory given (with perf-noop-entry-log, and an entry log written
// after it), and on SIGTERM exits cleanly and removes them. Without a
// store it serves Pulsar only, and no entry log.
func TestPerfNoopBroker(t *testing.T) {
	clearEnv(t)
	exe := magnetarBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	var logs syncBuffer
	c, err := startChild(ctx, exe, []string{"perf", "noop-broker", "--perf-noop-protocol", "kafka", "--perf-noop-store-dir", dir,
		"--perf-noop-entry-log", "--log-format", "json"}, goDefaultFree, "durable no-op kafka", "magnetar perf noop-broker ready", &logs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "noop-store")); err != nil {
		t.Errorf("no store file while it runs: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ready.Addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 1, -1, nil, "t"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v, %v", err, resp.Err)
	}
	value := []byte("a value to find in the entry log")
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: value}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.Close()
	for {
		data, err := os.ReadFile(filepath.Join(dir, "noop-entrylog"))
		if err == nil && bytes.Contains(data, value) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the record never reached the entry log (%v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, name := range []string{"noop-store", "noop-entrylog"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s after exit: %v, want it removed", name, err)
		}
	}

	cmd := exec.Command(exe, "perf", "noop-broker", "--perf-noop-protocol", "kafka")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != exitUsage || !strings.Contains(string(out), "the Kafka no-op broker needs a store") {
		t.Errorf("kafka without a store: exit %d, %v: %s", code, err, out)
	}
	cmd = exec.Command(exe, "perf", "noop-broker", "--perf-noop-entry-log")
	out, err = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != exitUsage || !strings.Contains(string(out), "perf-noop-entry-log: needs perf-noop-store-dir") {
		t.Errorf("an entry log without a store: exit %d, %v: %s", code, err, out)
	}
}

// perf all's kfake peer runs as a child process: it gets ready, serves a
// Kafka client (a record produced is fetched back) and stops on signal.
func TestPerfKFakeBroker(t *testing.T) {
	clearEnv(t)
	exe := magnetarBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs syncBuffer
	c, err := startChild(ctx, exe, []string{"perf", "kfake-broker", "--log-format", "json"}, lazyFree, "kfake", "magnetar perf kfake-broker ready", &logs)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ready.Addr), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "t"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v, %v", err, resp.Err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("kfake")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	fs := cl.PollRecords(ctx, 1)
	if err := fs.Err0(); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "kfake" {
		t.Fatalf("fetched %v, want the record produced", recs)
	}
	cl.Close()
	if err := c.stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, logs.String())
	}
}

// The no-op broker samples a partition's produces without favouring large
// ones: the produce after each noopSampleEvery bytes, not the one crossing
// the mark (which is large far more often than produces are). Produces
// of 16 KiB and 1 MiB, half each at random, must give samples about half
// of each; picking the crossing produce gave only large ones.
func TestNoopKafkaSamplesUnbiased(t *testing.T) {
	batch := func(records int) []byte {
		recs := make([]broker.Record, records)
		for i := range recs {
			recs[i].Value = make([]byte, 1<<10)
		}
		return broker.AppendRecordBatch(nil, broker.RecordBatch{}, recs)
	}
	small, large := batch(16), batch(1024)
	rng := rand.New(rand.NewPCG(1, 2))
	var s noopSamples
	var samples, largeSamples int
	for samples < 400 {
		records := small
		if rng.IntN(2) == 0 {
			records = large
		}
		before := len(s.batches) + s.next
		s.add(records)
		if len(s.batches)+s.next == before {
			continue // not sampled
		}
		samples++
		if len(records) == len(large) {
			largeSamples++
		}
	}
	if frac := float64(largeSamples) / float64(samples); frac < 0.4 || frac > 0.6 {
		t.Fatalf("%d of %d samples are the 1 MiB produces (%.2f), want about half as produced", largeSamples, samples, frac)
	}
}
