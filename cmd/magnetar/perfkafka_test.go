package main

import (
	"context"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestResolvePerfKafka(t *testing.T) {
	clearEnv(t)
	cfg, err := resolveWith(t, perfKafkaSettings, resolvePerfKafka)
	if err != nil {
		t.Fatal(err)
	}
	want := perfKafkaConfig{
		Bootstrap: []string{"127.0.0.1:9092"}, Topic: "perf-kafka", Partitions: 4,
		Loads: []string{"produce", "consume", "latency"}, RecordSize: 1024,
		Duration: 10 * time.Second, Warmup: time.Second, Rate: 5000, MaxBuffered: 10000,
		DeliveryTimeout: 30 * time.Second, Acks: "all", Compression: "none", DiskDuration: 5 * time.Second, Interval: time.Second,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", cfg, want)
	}

	t.Setenv("MAGNETAR_PERF_KAFKA_RATE", "0")
	cfg, err = resolveWith(t, perfKafkaSettings, resolvePerfKafka,
		"--perf-kafka-bootstrap", "a:1, b:2", "--perf-kafka-topic", "t", "--perf-kafka-partitions", "2",
		"--perf-kafka-loads", "latency,PRODUCE", "--perf-message-size", "100", "--perf-duration", "3s",
		"--perf-warmup", "0", "--perf-kafka-max-buffered", "5", "--perf-kafka-acks", "leader",
		"--perf-kafka-delivery-timeout", "2m",
		"--perf-kafka-compression", "ZSTD", "--perf-kafka-kfake=true", "--data-dir", "/d", "--perf-disk-duration", "0")
	if err != nil {
		t.Fatal(err)
	}
	want = perfKafkaConfig{
		Bootstrap: []string{"a:1", "b:2"}, Topic: "t", Partitions: 2, Loads: []string{"produce", "latency"},
		RecordSize: 100, Duration: 3 * time.Second, MaxBuffered: 5, DeliveryTimeout: 2 * time.Minute,
		Acks: "leader", Compression: "zstd",
		KFake: true, DataDir: "/d", Interval: time.Second,
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("flags:\n got %+v\nwant %+v", cfg, want)
	}
}

func TestPerfKafkaUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--perf-kafka-bootstrap", "nohost"}, `invalid perf-kafka-bootstrap "nohost" (from flag --perf-kafka-bootstrap): want host:port`},
		{[]string{"--perf-kafka-bootstrap", "a:1,"}, `invalid perf-kafka-bootstrap "a:1,"`},
		{[]string{"--perf-kafka-topic", "a b"}, `invalid perf-kafka-topic "a b"`},
		{[]string{"--perf-kafka-partitions", "0"}, `invalid perf-kafka-partitions "0"`},
		{[]string{"--perf-kafka-loads", "produce,fetch"}, "want a comma-separated list of produce, consume, latency"},
		{[]string{"--perf-kafka-acks", "none"}, "want one of all, leader"},
		{[]string{"--perf-kafka-compression", "brotli"}, "want one of gzip, lz4, none, snappy, zstd"},
		{[]string{"--perf-kafka-rate", "-5"}, `invalid perf-kafka-rate "-5"`},
		{[]string{"--perf-duration", "0"}, `invalid perf-duration "0"`},
		{[]string{"--perf-warmup", "10s"}, "the warm-up must be shorter than the run"},
	} {
		clearEnv(t)
		r := run(t, append([]string{"perf", "kafka"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
}

var (
	kafkaSummary  = regexp.MustCompile(`(?m)^summary: ([0-9]+) records, [0-9.]+ MB in [0-9.]+s: ([0-9]+) records/s, ([0-9.]+) MB/s`)
	kafkaProduced = regexp.MustCompile(`(?m)^produced: ([0-9]+) records, ([0-9]+) acknowledged, ([0-9]+) failed$`)
	kafkaProgress = regexp.MustCompile(`(?m)^ +[0-9.]+s +[0-9]+ +[0-9]+ +[0-9.]+`)
)

// kafkaSections splits a run's output at its "== load: cluster" headings.
func kafkaSections(t *testing.T, out string) map[string]string {
	t.Helper()
	sections := map[string]string{}
	parts := strings.Split(out, "\n== ")
	for _, p := range parts[1:] {
		head, body, _ := strings.Cut(p, "\n")
		sections[head] = body
	}
	return sections
}

// checkKafkaCluster checks the sections of one cluster: every load ran,
// with progress, a non-zero summary, and no failures; both consumes read
// exactly what the produce load acknowledged.
func checkKafkaCluster(t *testing.T, out, cluster string) {
	t.Helper()
	sections := kafkaSections(t, out)
	acked := -1
	for _, load := range []string{"produce", "consume cold", "consume warm", "latency"} {
		s, ok := sections[load+": "+cluster]
		if !ok {
			t.Errorf("no section %q in:\n%s", load+": "+cluster, out)
			continue
		}
		if !kafkaProgress.MatchString(s) {
			t.Errorf("%s %s: no progress line:\n%s", load, cluster, s)
		}
		m := kafkaSummary.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("%s %s: no summary:\n%s", load, cluster, s)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		rate, _ := strconv.Atoi(m[2])
		mb, _ := strconv.ParseFloat(m[3], 64)
		if n <= 0 || rate <= 0 || mb <= 0 {
			t.Errorf("%s %s: summary %q: want non-zero throughput", load, cluster, m[0])
		}
		if strings.HasPrefix(load, "consume") && n != acked {
			t.Errorf("%s %s: read %d records, the produce load had %d acknowledged", load, cluster, n, acked)
		}
		if strings.HasPrefix(load, "consume") {
			continue
		}
		p := kafkaProduced.FindStringSubmatch(s)
		if p == nil || p[3] != "0" {
			t.Errorf("%s %s: produced line %q, want one with 0 failed", load, cluster, p)
			continue
		}
		if load == "produce" {
			acked, _ = strconv.Atoi(p[2])
		}
	}
}

// startKFake starts a kfake cluster standing for the broker under test.
func startKFake(t *testing.T, opts ...kfake.Opt) string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// TestPerfKafka runs every load for about a second against a kfake
// cluster as the target: on its own through the core function (creating
// the topic), then through the command with the in-process kfake beside
// it and the disk baseline.
func TestPerfKafka(t *testing.T) {
	addr := startKFake(t)
	t.Run("target only", func(t *testing.T) {
		var out syncBuffer
		cfg := perfKafkaConfig{
			Bootstrap: []string{addr}, Topic: "perf-test", Partitions: 3, Loads: perfKafkaLoads,
			RecordSize: 512, Duration: time.Second, Warmup: 100 * time.Millisecond, Rate: 1000,
			MaxBuffered: 1000, Acks: "all", Compression: "none", Interval: 200 * time.Millisecond,
		}
		err := runPerfKafka(context.Background(), &out, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		s := out.String()
		if !strings.Contains(s, "magnetar: topic perf-test: created with 3 partitions") {
			t.Errorf("topic not created:\n%s", s)
		}
		checkKafkaCluster(t, s, "magnetar")
		for _, row := range []string{"produce", "consume cold", "consume warm", "latency"} {
			if !regexp.MustCompile(`(?m)^` + row + ` +[a-zA-Z0-9./ ]+ +[0-9.]+$`).MatchString(s) {
				t.Errorf("results lack a %s row with one figure:\n%s", row, s)
			}
		}
		if strings.Contains(s, "kfake") || strings.Contains(s, "ratio") {
			t.Errorf("kfake figures without perf-kafka-kfake:\n%s", s)
		}
		if !strings.Contains(s, "disk baseline: skipped") {
			t.Errorf("disk baseline ran with perf-disk-duration 0:\n%s", s)
		}
	})
	t.Run("with kfake", func(t *testing.T) {
		clearEnv(t)
		dataDir := t.TempDir()
		r := run(t, "perf", "kafka", "--perf-kafka-bootstrap", addr, "--perf-kafka-topic", "perf-test",
			"--perf-kafka-partitions", "3", "--perf-duration", "1s", "--perf-warmup", "100ms",
			"--perf-kafka-rate", "1000", "--perf-kafka-max-buffered", "1000", "--perf-kafka-kfake",
			"--data-dir", dataDir, "--perf-disk-duration", "200ms", "--log-level", "warn")
		if r.code != 0 {
			t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, r.stdout)
		}
		s := r.stdout
		if !strings.Contains(s, "magnetar: topic perf-test: 3 partitions") {
			t.Errorf("existing topic not found:\n%s", s)
		}
		checkKafkaCluster(t, s, "magnetar")
		checkKafkaCluster(t, s, "kfake")
		for _, row := range []string{"produce +records/s", "produce +MB/s", "produce +p50 ms", "produce +p99 ms",
			"consume cold +records/s", "consume cold +MB/s", "consume warm +records/s", "consume warm +MB/s",
			"latency +p50 ms", "latency +p99 ms", "latency +p99.9 ms"} {
			if !regexp.MustCompile(`(?m)^` + row + ` +[0-9.]+ +[0-9.]+ +[0-9]+\.[0-9]{2}$`).MatchString(s) {
				t.Errorf("results lack a %q row with magnetar, kfake and ratio:\n%s", row, s)
			}
		}
		for _, goal := range []string{"produce", "consume cold", "consume warm"} {
			if !regexp.MustCompile(`(?m)^goal: ` + goal + ` MB/s magnetar ÷ kfake = [0-9.]+ \(goal [≥>] 1\): (met|not met)$`).MatchString(s) {
				t.Errorf("no goal line for %s:\n%s", goal, s)
			}
		}
		for _, w := range []string{"disk: sequential 1024.0 KiB writes + fdatasync", "ratio: magnetar produce "} {
			if !strings.Contains(s, w) {
				t.Errorf("output lacks %q:\n%s", w, s)
			}
		}
		if left, _ := os.ReadDir(dataDir); len(left) != 0 {
			t.Errorf("disk baseline left %v in %s", left, dataDir)
		}
	})
	t.Run("topic with other partitions", func(t *testing.T) {
		clearEnv(t)
		r := run(t, "perf", "kafka", "--perf-kafka-bootstrap", addr, "--perf-kafka-topic", "perf-test",
			"--perf-kafka-partitions", "4", "--perf-duration", "1s", "--perf-warmup", "0", "--perf-disk-duration", "0", "--log-level", "warn")
		if want := "topic perf-test exists with 3 partitions, want perf-kafka-partitions 4"; r.code != exitRuntime || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, exitRuntime, want)
		}
	})
	t.Run("produce fails", func(t *testing.T) {
		// A record above the client's ProducerBatchMaxBytes (1,000,012)
		// fails without reaching the broker.
		clearEnv(t)
		r := run(t, "perf", "kafka", "--perf-kafka-bootstrap", addr, "--perf-kafka-topic", "perf-too-large",
			"--perf-kafka-loads", "produce", "--perf-message-size", "1048576", "--perf-duration", "200ms",
			"--perf-warmup", "0", "--perf-kafka-max-buffered", "10", "--perf-disk-duration", "0", "--log-level", "error")
		p := kafkaProduced.FindStringSubmatch(r.stdout)
		if r.code != exitRuntime || !strings.Contains(r.stderr, "records failed") || p == nil || p[2] != "0" || p[3] == "0" {
			t.Errorf("exit %d, stderr %q, produced %q; want exit %d, failed records", r.code, r.stderr, p, exitRuntime)
		}
	})
}

// TestPerfKafkaRefusedProduceEnds: a broker that refuses every batch with
// a retriable error (as Magnetar does when its bookies cannot take it)
// ends the produce load with an error once perf-kafka-delivery-timeout
// has passed, instead of retrying for ever.
func TestPerfKafkaRefusedProduceEnds(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "refused"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewProduceResponseTopic()
			t.Topic, t.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				p := kmsg.NewProduceResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, kerr.NotEnoughReplicas.Code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	cfg := perfKafkaConfig{
		Bootstrap: c.ListenAddrs(), Topic: "refused", Partitions: 1, Loads: []string{"produce"},
		RecordSize: 100, Duration: 300 * time.Millisecond, MaxBuffered: 100, Acks: "all", Compression: "none",
		DeliveryTimeout: time.Second, Interval: 100 * time.Millisecond,
	}
	var out syncBuffer
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- runPerfKafka(context.Background(), &out, cfg, slog.New(slog.DiscardHandler)) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not acknowledged within perf-kafka-delivery-timeout (1s)") {
			t.Errorf("error %v, want the records' timeout\n%s", err, out.String())
		}
		if el := time.Since(start); el < time.Second {
			t.Errorf("ended after %v, before the delivery timeout", el)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the load did not end within 30 s of a broker refusing every batch\n%s", out.String())
	}
}
