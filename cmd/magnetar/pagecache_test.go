package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// With --entry-log-page-cache-keep, a Kafka consumer reading from the
// start gets every record back, and what the bookie dropped from the page
// cache is read from the disk (the process's read_bytes grows by about the
// bytes dropped) without a warning that O_DIRECT cannot be used.
func TestPageCacheKeepEndToEnd(t *testing.T) {
	clearEnv(t)
	const keep = 2 << 20
	// A small entry cache, so that the consumer's reads reach the bookie.
	p, ready := startStandaloneProc(t, "--entry-log-page-cache-keep", fmt.Sprint(keep), "--entry-cache-size", "1048576")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const partitions, perPartition, size = 4, 800, 8 << 10 // 25 MiB
	cl, err := kgo.NewClient(kgo.SeedBrokers(ready.KafkaAdvertised), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, partitions, -1, nil, "keep"); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v, %v", err, resp.Err)
	}
	value := func(p int32, i int) []byte {
		v := make([]byte, size)
		for j := 0; j+8 <= size; j += 8 {
			binary.BigEndian.PutUint64(v[j:], uint64(p)<<48|uint64(i)<<16|uint64(j))
		}
		return v
	}
	for i := range perPartition {
		for p := range int32(partitions) {
			cl.Produce(ctx, &kgo.Record{Topic: "keep", Partition: p, Value: value(p, i)}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before := readBytes(t, p.cmd.Process.Pid)

	offsets := map[string]map[int32]kgo.Offset{"keep": {}}
	for p := range int32(partitions) {
		offsets["keep"][p] = kgo.NewOffset().AtStart()
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(ready.KafkaAdvertised), kgo.ConsumePartitions(offsets))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := map[int32]int{}
	for got := 0; got < partitions*perPartition; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", got, partitions*perPartition, err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			i := next[r.Partition]
			if r.Offset != int64(i) || string(r.Value) != string(value(r.Partition, i)) {
				t.Fatalf("partition %d: record at offset %d (want %d) has the wrong value", r.Partition, r.Offset, i)
			}
			next[r.Partition]++
			got++
		})
	}
	read := readBytes(t, p.cmd.Process.Pid) - before
	written := int64(partitions * perPartition * size)
	if read < (written-keep)/2 {
		t.Errorf("the standalone read %d bytes from the disk while %d were consumed with only the newest %d kept in the page cache; want most of the rest from the disk", read, written, keep)
	}
	if out := p.output(); strings.Contains(out, "O_DIRECT cannot be used") {
		t.Errorf("the standalone could not use O_DIRECT (is TMPDIR on tmpfs?):\n%s", out)
	}
}

// readBytes is the bytes process pid has read from storage (read_bytes of
// /proc/<pid>/io).
func readBytes(t *testing.T, pid int) int64 {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/io", pid)
	n, err := strconv.ParseInt(procField(path, "read_bytes"), 10, 64)
	if err != nil {
		t.Fatalf("%s: read_bytes: %v", path, err)
	}
	return n
}
