package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// With --entry-log-direct-io=false --entry-log-page-cache-keep, the entry
// logs are written through the page cache (none open with O_DIRECT), a
// Kafka consumer reading from the start gets every record back, and what
// the bookie dropped from the page cache is read from the disk (the
// process's read_bytes grows by about the bytes dropped) without a warning
// that O_DIRECT cannot be used.
func TestPageCacheKeepEndToEnd(t *testing.T) {
	clearEnv(t)
	const keep = 2 << 20
	// A small entry cache, so that the consumer's reads reach the bookie.
	p, ready := startStandaloneProc(t, "--entry-log-direct-io=false", "--entry-log-page-cache-keep", fmt.Sprint(keep), "--entry-cache-size", "1048576")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	load := entryLogLoad{topic: "keep", partitions: 4, perPartition: 800, size: 8 << 10} // 25 MiB
	load.produce(ctx, t, ready.KafkaAdvertised)
	if n := directEntryLogs(t, p.cmd.Process.Pid); n != 0 {
		t.Errorf("%d entry logs open with O_DIRECT with --entry-log-direct-io=false", n)
	}
	before := readBytes(t, p.cmd.Process.Pid)
	load.consume(ctx, t, ready.KafkaAdvertised)
	read := readBytes(t, p.cmd.Process.Pid) - before
	if written := load.bytes(); read < (written-keep)/2 {
		t.Errorf("the standalone read %d bytes from the disk while %d were consumed with only the newest %d kept in the page cache; want most of the rest from the disk", read, written, keep)
	}
	if out := p.output(); strings.Contains(out, "O_DIRECT cannot be used") {
		t.Errorf("the standalone could not use O_DIRECT (is TMPDIR on tmpfs?):\n%s", out)
	}
}

// By default (entry-log-direct-io), the standalone's entry logs are open
// with O_DIRECT, and a Kafka consumer reading from the start gets every
// record back.
func TestEntryLogDirectIOEndToEnd(t *testing.T) {
	clearEnv(t)
	p, ready := startStandaloneProc(t, "--entry-cache-size", "1048576")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	load := entryLogLoad{topic: "direct", partitions: 4, perPartition: 800, size: 8 << 10}
	load.produce(ctx, t, ready.KafkaAdvertised)
	if n := directEntryLogs(t, p.cmd.Process.Pid); n == 0 {
		t.Error("no entry log of the standalone is open with O_DIRECT")
	}
	load.consume(ctx, t, ready.KafkaAdvertised)
	if out := p.output(); strings.Contains(out, "O_DIRECT cannot be used") {
		t.Errorf("the standalone could not use O_DIRECT (is TMPDIR on tmpfs?):\n%s", out)
	}
}

// directEntryLogs is how many entry logs (*.log under an entrylogs
// directory) process pid has open with O_DIRECT (/proc/<pid>/fdinfo).
func directEntryLogs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil || !strings.HasSuffix(target, ".log") || filepath.Base(filepath.Dir(target)) != "entrylogs" {
			continue
		}
		flags, err := strconv.ParseUint(procField(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()), "flags"), 8, 64)
		if err != nil {
			t.Fatalf("fdinfo of %s: %v", target, err)
		}
		if flags&syscall.O_DIRECT != 0 {
			n++
		}
	}
	return n
}

// entryLogLoad is records produced to a Kafka topic, partitions ×
// perPartition of size bytes each, every value pseudo-random from its
// partition and offset (so that a compressing client stores them whole).
type entryLogLoad struct {
	topic                    string
	partitions, perPartition int
	size                     int
}

func (l entryLogLoad) bytes() int64 { return int64(l.partitions * l.perPartition * l.size) }

func (l entryLogLoad) value(p int32, i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(p), uint64(i)))
	v := make([]byte, l.size)
	for j := 0; j+8 <= l.size; j += 8 {
		binary.BigEndian.PutUint64(v[j:], rng.Uint64())
	}
	return v
}

// produce creates the topic and produces every record to it (acks all).
func (l entryLogLoad) produce(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(l.partitions), -1, nil, l.topic); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v, %v", err, resp.Err)
	}
	for i := range l.perPartition {
		for p := range int32(l.partitions) {
			cl.Produce(ctx, &kgo.Record{Topic: l.topic, Partition: p, Value: l.value(p, i)}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// consume reads every partition from the start and checks every record.
func (l entryLogLoad) consume(ctx context.Context, t *testing.T, addr string) {
	t.Helper()
	offsets := map[string]map[int32]kgo.Offset{l.topic: {}}
	for p := range int32(l.partitions) {
		offsets[l.topic][p] = kgo.NewOffset().AtStart()
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(offsets))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := map[int32]int{}
	total := l.partitions * l.perPartition
	for got := 0; got < total; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", got, total, err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			i := next[r.Partition]
			if r.Offset != int64(i) || string(r.Value) != string(l.value(r.Partition, i)) {
				t.Fatalf("partition %d: record at offset %d (want %d) has the wrong value", r.Partition, r.Offset, i)
			}
			next[r.Partition]++
			got++
		})
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
