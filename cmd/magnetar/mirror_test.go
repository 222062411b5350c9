package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// mirrorRecord is what a copy must keep of a record.
type mirrorRecord struct {
	Offset    int64
	Key       string
	KeyNil    bool
	Value     string
	Headers   string
	Timestamp int64 // ms
}

func (r mirrorRecord) String() string {
	return fmt.Sprintf("@%d key=%q(nil %v) value=%q headers=%s ts=%d", r.Offset, r.Key, r.KeyNil, r.Value, r.Headers, r.Timestamp)
}

func testKafkaClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTestTopic(t *testing.T, adm *kadm.Client, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	if _, err := awaitPartitionOffsets(ctx, adm, topic); err != nil {
		t.Fatal(err)
	}
}

// produceTestRecords produces n records to topic's partition p; every
// third has no key and no headers, the others a key and two headers.
// Timestamps are distinct and far from now, so a copy that restamps
// records shows.
func produceTestRecords(t *testing.T, cl *kgo.Client, topic string, p int32, n int, tag string) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: p, Value: fmt.Appendf(nil, "%s value %s/%d #%d", tag, topic, p, i),
			Timestamp: time.UnixMilli(1_600_000_000_000 + int64(p)*1_000_000 + int64(i)*1000 + int64(len(tag)))}
		if i%3 != 2 {
			r.Key = fmt.Appendf(nil, "%s-key-%d", tag, i)
			r.Headers = []kgo.RecordHeader{{Key: "trace", Value: fmt.Appendf(nil, "t-%d", i)}, {Key: "src", Value: []byte(tag)}}
		}
		recs = append(recs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, p, err)
	}
}

// readTestTopic reads every record of topic at addr, by partition, up to
// the end offsets it has now.
func readTestTopic(t *testing.T, addr, topic string) map[int32][]mirrorRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(testKafkaClient(t, addr))
	ends, err := partitionOffsets(ctx, adm, topic, adm.ListEndOffsets)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32][]mirrorRecord{}
	parts := map[int32]kgo.Offset{}
	for p, end := range ends {
		got[p] = []mirrorRecord{}
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(parts) == 0 {
		return got
	}
	cl := testKafkaClient(t, addr, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
	done := func() bool {
		for p, end := range ends {
			if n := len(got[p]); n > 0 && got[p][n-1].Offset >= end-1 || end == 0 {
				continue
			}
			return false
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read %s at %s: %v (have %v of %v)", topic, addr, err, got, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			var hs []string
			for _, h := range r.Headers {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
			got[r.Partition] = append(got[r.Partition], mirrorRecord{Offset: r.Offset, Key: string(r.Key), KeyNil: r.Key == nil,
				Value: string(r.Value), Headers: strings.Join(hs, ","), Timestamp: r.Timestamp.UnixMilli()})
		})
	}
	return got
}

// checkMirrored checks that target holds exactly the source's records of
// topics, at the same partitions and offsets, and none of absent.
func checkMirrored(t *testing.T, source, target string, topics map[string]int, absent []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := kadm.NewClient(testKafkaClient(t, target)).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for topic, n := range topics {
		if td, ok := listed[topic]; !ok || len(td.Partitions) != n {
			t.Errorf("target topic %s: listed %v, %d partitions; want %d", topic, ok, len(td.Partitions), n)
			continue
		}
		want, got := readTestTopic(t, source, topic), readTestTopic(t, target, topic)
		for p := range int32(n) {
			if !slices.Equal(got[p], want[p]) {
				t.Errorf("%s partition %d on the target:\n%v\nwant (the source's):\n%v", topic, p, got[p], want[p])
			}
		}
	}
	for _, topic := range absent {
		if _, ok := listed[topic]; ok {
			t.Errorf("topic %s was copied; it does not match", topic)
		}
	}
}

// TestMirror copies topics between two real standalones: by regex, at
// the same partitions and offsets with keys, headers and timestamps; a
// second run copies only what is new; a continuous run stopped by
// SIGTERM resumes without loss or duplicates.
func TestMirror(t *testing.T) {
	_, srcReady := startStandaloneProc(t)
	_, dstReady := startStandaloneProc(t)
	source, target := srcReady.KafkaAdvertised, dstReady.KafkaAdvertised
	cl := testKafkaClient(t, source)
	adm := kadm.NewClient(cl)

	t.Run("once", func(t *testing.T) {
		for topic, n := range map[string]int32{"mir-a": 1, "mir-b": 3, "other": 2, "xmir-c": 1} {
			createTestTopic(t, adm, topic, n)
		}
		produceTestRecords(t, cl, "mir-a", 0, 7, "one")
		produceTestRecords(t, cl, "mir-b", 0, 4, "one")
		produceTestRecords(t, cl, "mir-b", 2, 5, "one") // partition 1 stays empty
		produceTestRecords(t, cl, "other", 1, 3, "one")
		produceTestRecords(t, cl, "xmir-c", 0, 2, "one") // matches only unanchored
		args := []string{"mirror", "--from", source, "--topics", "mir-.*", "--kafka-bootstrap", target,
			"--mirror-group", "once-group", "--mirror-once"}
		_, stderr, code := runBinary(t, "", args...)
		if code != 0 || !strings.Contains(stderr, "mirror: 16 records (") || !strings.Contains(stderr, "lag: mir-a 0, mir-b 0\n") {
			t.Fatalf("first run: exit %d, stderr:\n%s\nwant 0, 16 records copied, no lag", code, stderr)
		}
		topics := map[string]int{"mir-a": 1, "mir-b": 3}
		checkMirrored(t, source, target, topics, []string{"other", "xmir-c"})

		produceTestRecords(t, cl, "mir-a", 0, 2, "two")
		produceTestRecords(t, cl, "mir-b", 1, 3, "two")
		produceTestRecords(t, cl, "mir-b", 2, 1, "two")
		_, stderr, code = runBinary(t, "", args...)
		if code != 0 || !strings.Contains(stderr, "mirror: 6 records (") || !strings.Contains(stderr, "lag: mir-a 0, mir-b 0\n") {
			t.Fatalf("second run: exit %d, stderr:\n%s\nwant 0, 6 records copied, no lag", code, stderr)
		}
		checkMirrored(t, source, target, topics, []string{"other", "xmir-c"})

		// Caught up already: nothing to copy.
		_, stderr, code = runBinary(t, "", args...)
		if code != 0 || !strings.Contains(stderr, "mirror: 0 records (") {
			t.Fatalf("third run: exit %d, stderr:\n%s\nwant 0, 0 records copied", code, stderr)
		}
	})

	t.Run("continuous", func(t *testing.T) {
		createTestTopic(t, adm, "res-a", 2)
		produceTestRecords(t, cl, "res-a", 0, 5, "one")
		args := []string{"mirror", "--from", source, "--topics", "res-.*", "--kafka-bootstrap", target,
			"--mirror-group", "res-group"}
		p := startMagnetar(t, args...)
		p.waitLine("mirror: topic res-a (2 partitions): created on Magnetar", 30*time.Second)
		// A topic created while the mirror runs is picked up.
		createTestTopic(t, adm, "res-b", 1)
		produceTestRecords(t, cl, "res-a", 1, 4, "one")
		produceTestRecords(t, cl, "res-b", 0, 3, "one")
		tadm := kadm.NewClient(testKafkaClient(t, target))
		eventually(t, 60*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for topic, want := range map[string]int64{"res-a": 9, "res-b": 3} {
				ends, err := partitionOffsets(ctx, tadm, topic, tadm.ListEndOffsets)
				if err != nil {
					return err
				}
				var n int64
				for _, e := range ends {
					n += e
				}
				if n != want {
					return fmt.Errorf("target %s has %d records, want %d", topic, n, want)
				}
			}
			return nil
		})
		p.signal(syscall.SIGTERM)
		if code := p.wait(30 * time.Second); code != 0 {
			t.Fatalf("mirror exited %d after SIGTERM:\n%s", code, p.output())
		}
		if out := p.output(); !strings.Contains(out, "mirror: 12 records (") {
			t.Errorf("no final line with 12 records copied:\n%s", out)
		}
		// Resumed from the committed offsets: only the new records.
		produceTestRecords(t, cl, "res-a", 0, 2, "two")
		_, stderr, code := runBinary(t, "", append(args, "--mirror-once")...)
		if code != 0 || !strings.Contains(stderr, "mirror: 2 records (") || !strings.Contains(stderr, "lag: res-a 0, res-b 0\n") {
			t.Fatalf("resumed run: exit %d, stderr:\n%s\nwant 0, 2 records copied, no lag", code, stderr)
		}
		checkMirrored(t, source, target, map[string]int{"res-a": 2, "res-b": 1}, nil)
	})
}

// TestMirrorTopicPartitionMismatch: a target topic with another
// partition count is a clear error, exit 1.
func TestMirrorTopicPartitionMismatch(t *testing.T) {
	_, srcReady := startStandaloneProc(t)
	_, dstReady := startStandaloneProc(t)
	createTestTopic(t, kadm.NewClient(testKafkaClient(t, srcReady.KafkaAdvertised)), "mm", 2)
	createTestTopic(t, kadm.NewClient(testKafkaClient(t, dstReady.KafkaAdvertised)), "mm", 3)
	_, stderr, code := runBinary(t, "", "mirror", "--from", srcReady.KafkaAdvertised, "--topics", "mm",
		"--kafka-bootstrap", dstReady.KafkaAdvertised, "--mirror-once")
	if want := "topic mm exists on Magnetar with 3 partitions, but has 2 at the source"; code != exitRuntime || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant 1 and %q", code, stderr, want)
	}
}

// TestMirrorErrors: bad settings are usage errors (exit 2); an unreachable
// source or target fails at once (exit 1).
func TestMirrorErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	live := l.Addr().String()
	defer l.Close()
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l2.Addr().String()
	l2.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"mirror", "--from", live, "--topics", "("}, exitUsage, `invalid mirror-topics "(" (from flag --mirror-topics): not a regular expression`},
		{[]string{"mirror", "--topics", "a"}, exitUsage, `invalid mirror-from "" (from default): required`},
		{[]string{"mirror", "--from", live}, exitUsage, `invalid mirror-topics "" (from default): required`},
		{[]string{"mirror", "--from", "nohost", "--topics", "a"}, exitUsage, `invalid mirror-from "nohost"`},
		{[]string{"mirror", "--from", live, "--topics", "a", "--mirror-group", ""}, exitUsage, `invalid mirror-group ""`},
		{[]string{"mirror", "--from", dead, "--topics", "a", "--kafka-bootstrap", live}, exitRuntime,
			"cannot reach the source Kafka cluster (--from) at " + dead + ": connection refused"},
		{[]string{"mirror", "--from", live, "--topics", "a", "--kafka-bootstrap", dead}, exitRuntime,
			"cannot reach Magnetar's Kafka listener (--kafka-bootstrap) at " + dead + ": connection refused"},
	} {
		clearEnv(t)
		r := run(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
}

func TestMirrorThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
