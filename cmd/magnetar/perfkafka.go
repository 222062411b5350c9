package main

// `magnetar perf kafka`: Kafka protocol load through franz-go against a
// Kafka broker (Magnetar's Kafka listener) and, with perf-kafka-kfake, the
// same load in the same run against franz-go's in-process fake cluster
// (kfake, in memory, no fsync), printed side by side.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

var perfKafkaSettings = []setting{
	{"perf-kafka-bootstrap", "127.0.0.1:9092", "host:port", "Kafka bootstrap address of the broker under test (host:port, comma-separated for several)"},
	{"perf-kafka-topic", "perf-kafka", "topic", "Kafka topic; created with perf-kafka-partitions partitions if missing"},
	{"perf-kafka-partitions", "4", "count", "partitions of the topic: it is created with them, and an existing topic with another count is an error"},
	{"perf-kafka-loads", "produce,consume,latency", "list", "loads to run, in this order: produce (closed loop), consume (cold, then warm, of what produce wrote), latency (open loop at perf-kafka-rate)"},
	{"perf-message-size", "1024", "bytes", "payload bytes per record"},
	{"perf-duration", "10s", "duration", "how long the produce load and the latency load each run"},
	{"perf-warmup", "1s", "duration", "first part of the produce and latency loads, left out of their summaries"},
	{"perf-kafka-rate", "5000", "records/s", "latency load: open loop at this many records/s, no linger; 0: closed loop with no linger"},
	{"perf-kafka-max-buffered", "10000", "count", "most records produced and not yet acknowledged at once (also the client's MaxBufferedRecords)"},
	{"perf-kafka-delivery-timeout", "30s", "duration", "a record not acknowledged this long after it was produced fails (Kafka's delivery.timeout.ms), so a broker refusing every batch with a retriable error ends the load with an error (a few seconds after this) rather than keeping it retrying"},
	{"perf-kafka-acks", "all", "acks", "produce acks: all (with the idempotent producer) or leader (idempotence off)"},
	{"perf-kafka-compression", "none", "codec", "batch compression: none, gzip, snappy, lz4 or zstd"},
	{"perf-kafka-kfake", "false", "bool", "also run the loads against an in-process kfake cluster and print both with the ratios"},
	{"data-dir", "", "dir", "directory in which the disk baseline writes its scratch file; put it on the broker's journal disk (default: the system temp directory)"},
	{"perf-disk-duration", "5s", "duration", "after the loads, measure the disk's fsync'd sequential write bandwidth at 1 MiB writes for this long; 0 skips it"},
}

// perfKafkaLoads are the loads in the order they run.
var perfKafkaLoads = []string{"produce", "consume", "latency"}

var kafkaCompression = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

var kafkaAcks = map[string]bool{"all": true, "leader": true}

// diskBaselineBlock is the write size of perf kafka's disk baseline.
const diskBaselineBlock = 1 << 20

func newPerfKafkaCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "Measure Kafka protocol produce and consume throughput and latency, beside kfake and the disk",
		Example: `  magnetar perf kafka --perf-kafka-bootstrap 127.0.0.1:9092 --perf-kafka-kfake
  magnetar perf kafka --perf-kafka-loads latency --perf-kafka-rate 20000
  magnetar perf kafka --perf-kafka-acks leader --perf-kafka-compression lz4 --perf-disk-duration 0`,
		Long: `Measure Kafka protocol produce and consume throughput and latency, beside
kfake and the disk.

Connects to perf-kafka-bootstrap with franz-go, creates perf-kafka-topic
with perf-kafka-partitions partitions if it is missing (an existing topic
with another partition count is an error), then runs perf-kafka-loads:

  produce  closed loop for perf-duration: up to perf-kafka-max-buffered
           records unacknowledged, franz-go's default producer (idempotent
           with acks all, 10 ms linger); records/s, MB/s, latency from the
           send to the acknowledgement.
  consume  reads what the produce load wrote (without it, the whole topic)
           with a direct partition consumer (no consumer group), from the
           offsets each partition had before the load (0 on a new topic) to
           those after: "cold" right after produce, then "warm" a second
           time; records/s and MB/s from the start of the read to its last
           record.
  latency  open loop at perf-kafka-rate records/s with no linger for
           perf-duration; latency runs from when a record was due, so a
           stall counts against every record it delays.

With perf-kafka-kfake, the same loads then run against an in-process kfake
cluster (one broker, in memory, no fsync) with the topic seeded, and the
results table gives both and magnetar ÷ kfake (for latencies, below 1 is
better). The column "magnetar" is whatever perf-kafka-bootstrap points at.

Then, unless perf-disk-duration is 0, the disk under data-dir: sequential
1 MiB writes each followed by fdatasync, and the ratio of the produce
load's MB/s to its bandwidth.

Progress lines every second on stdout, then a summary per load and the
results table. MB is 10^6 bytes of payload. Logs, the client's among them
(warnings and errors only), go to stderr. Exits 1 if any produce failed or a
consume did not read all it should. SIGINT or SIGTERM ends the run early
with what was measured; a second signal exits at once.
` + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolvePerfKafka(a.vals)
			if err != nil {
				return err
			}
			ctx, stop := a.perfSignals()
			defer stop()
			return runtimeError(runPerfKafka(ctx, a.stdout, cfg, a.logger))
		},
	}
	a.addSettings(cmd, perfKafkaSettings)
	return cmd
}

// perfKafkaConfig is the checked configuration of `magnetar perf kafka`.
type perfKafkaConfig struct {
	Bootstrap   []string
	Topic       string
	Partitions  int
	Loads       []string // a subsequence of perfKafkaLoads
	RecordSize  int
	Duration    time.Duration
	Warmup      time.Duration
	Rate        float64 // latency load; 0: closed loop
	MaxBuffered int
	// DeliveryTimeout fails a record not acknowledged this long after
	// it was produced.
	DeliveryTimeout time.Duration
	Acks            string // a key of kafkaAcks
	Compression     string // a key of kafkaCompression
	KFake           bool
	DataDir         string        // disk baseline's parent directory; "" is os.TempDir()
	DiskDuration    time.Duration // 0: no disk baseline
	Interval        time.Duration // between progress lines
}

func resolvePerfKafka(sv *settingValues) (perfKafkaConfig, error) {
	var cfg perfKafkaConfig
	var err error
	s := func(name string) setting { return lookupSetting(perfKafkaSettings, name) }
	if cfg.Bootstrap, err = check(sv, s("perf-kafka-bootstrap"), parseBootstrap); err != nil {
		return cfg, err
	}
	if cfg.Topic, err = check(sv, s("perf-kafka-topic"), parseKafkaTopic); err != nil {
		return cfg, err
	}
	if cfg.Loads, err = check(sv, s("perf-kafka-loads"), parseKafkaLoads); err != nil {
		return cfg, err
	}
	for _, c := range []struct {
		name  string
		limit int
		dst   *int
	}{
		{"perf-kafka-partitions", 10_000, &cfg.Partitions},
		{"perf-message-size", 1 << 20, &cfg.RecordSize},
		{"perf-kafka-max-buffered", 1_000_000, &cfg.MaxBuffered},
	} {
		if *c.dst, err = check(sv, s(c.name), parseCount(c.limit)); err != nil {
			return cfg, err
		}
	}
	if cfg.Duration, err = check(sv, s("perf-duration"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.Warmup, err = check(sv, s("perf-warmup"), parseNonNegativeDuration); err != nil {
		return cfg, err
	}
	if cfg.Warmup >= cfg.Duration {
		return cfg, fmt.Errorf("perf-warmup %s, perf-duration %s: the warm-up must be shorter than the run", cfg.Warmup, cfg.Duration)
	}
	if cfg.Rate, err = check(sv, s("perf-kafka-rate"), parseRateOf("records")); err != nil {
		return cfg, err
	}
	if cfg.DeliveryTimeout, err = check(sv, s("perf-kafka-delivery-timeout"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.Acks, err = check(sv, s("perf-kafka-acks"), parseChoice(kafkaAcks)); err != nil {
		return cfg, err
	}
	if cfg.Compression, err = check(sv, s("perf-kafka-compression"), parseChoice(kafkaCompression)); err != nil {
		return cfg, err
	}
	if cfg.KFake, err = check(sv, s("perf-kafka-kfake"), parseBool); err != nil {
		return cfg, err
	}
	if cfg.DataDir, err = check(sv, s("data-dir"), func(v string) (string, error) { return v, nil }); err != nil {
		return cfg, err
	}
	if cfg.DiskDuration, err = check(sv, s("perf-disk-duration"), parseNonNegativeDuration); err != nil {
		return cfg, err
	}
	cfg.Interval = time.Second
	return cfg, nil
}

func parseBootstrap(s string) ([]string, error) {
	var addrs []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, errors.New("want host:port, or several separated by commas")
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

func parseKafkaTopic(s string) (string, error) {
	if s == "" || len(s) > 249 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", errors.New("want a topic name of 1 to 249 characters without spaces or control characters")
	}
	return s, nil
}

func parseKafkaLoads(s string) ([]string, error) {
	want := map[string]bool{}
	for l := range strings.SplitSeq(strings.ToLower(s), ",") {
		l = strings.TrimSpace(l)
		if !slices.Contains(perfKafkaLoads, l) {
			return nil, fmt.Errorf("want a comma-separated list of %s", strings.Join(perfKafkaLoads, ", "))
		}
		want[l] = true
	}
	var loads []string
	for _, l := range perfKafkaLoads {
		if want[l] {
			loads = append(loads, l)
		}
	}
	return loads, nil
}

func (cfg perfKafkaConfig) describe() string {
	latency := fmt.Sprintf("latency open loop at %g records/s", cfg.Rate)
	if cfg.Rate == 0 {
		latency = "latency closed loop"
	}
	kfake := ""
	if cfg.KFake {
		kfake = "; the same against an in-process kfake"
	}
	return fmt.Sprintf("topic %s (%d partitions) at %s; loads %s; %d-byte records, %s each after a %s warm-up, up to %d unacknowledged, acks %s, compression %s, %s%s",
		cfg.Topic, cfg.Partitions, strings.Join(cfg.Bootstrap, ","), strings.Join(cfg.Loads, ","),
		cfg.RecordSize, cfg.Duration, cfg.Warmup, cfg.MaxBuffered, cfg.Acks, cfg.Compression, latency, kfake)
}

// kafkaFigures are the results of the loads against one cluster; a load
// not run is nil.
type kafkaFigures struct {
	Produce, Cold, Warm, Latency *pulsarResult
}

// runPerfKafka runs `magnetar perf kafka` as cfg says, printing to out
// and logging to log. The error says what failed (a produce, a consume
// that fell short, setup); what was measured is printed either way.
func runPerfKafka(ctx context.Context, out io.Writer, cfg perfKafkaConfig, log *slog.Logger) error {
	fmt.Fprintf(out, "magnetar perf kafka: %s\n", cfg.describe())
	target, err := runKafkaLoads(ctx, out, "magnetar", cfg.Bootstrap, cfg, log)
	if ctx.Err() != nil {
		err = nil // interrupted: report what there is
	}
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("magnetar: %w", err))
	}
	var fake *kafkaFigures
	if cfg.KFake && ctx.Err() == nil {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(cfg.Partitions), cfg.Topic))
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("kfake: %w", err))...)
		}
		fake, err = runKafkaLoads(ctx, out, "kfake", c.ListenAddrs(), cfg, log)
		c.Close()
		if err != nil && ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("kfake: %w", err))
		}
	}
	printKafkaResults(out, cfg, target, fake)

	if target.Produce == nil || target.Produce.Messages == 0 || cfg.DiskDuration == 0 || ctx.Err() != nil {
		fmt.Fprintln(out, "disk baseline: skipped")
		return errors.Join(errs...)
	}
	dir, err := scratchDir(cfg.DataDir, "magnetar-perf-kafka-")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer os.RemoveAll(dir)
	bw, err := measureSyncedWrites(ctx, vfs.Default, dir, diskBaselineBlock, cfg.DiskDuration)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("disk baseline: %w", err))...)
	}
	fmt.Fprintf(out, "disk: sequential %s writes + fdatasync in %s for %.1fs: %.2f MB/s, %.0f syncs/s, p99 %.3f ms\n",
		kib(bw.Block), dir, bw.Elapsed.Seconds(), bw.MBps(), perSecond(bw.Writes, bw.Elapsed), ms(bw.Latency.Quantile(0.99)))
	got := mbps(target.Produce.Bytes, target.Produce.Elapsed)
	fmt.Fprintf(out, "ratio: magnetar produce %.2f MB/s ÷ disk %.2f MB/s at %s = %.2f\n", got, bw.MBps(), kib(bw.Block), ratio(got, bw.MBps()))
	return errors.Join(errs...)
}

// runKafkaLoads runs cfg.Loads against the cluster at seeds, called name
// in the output. The figures hold every load that ran, even on error.
func runKafkaLoads(ctx context.Context, out io.Writer, name string, seeds []string, cfg perfKafkaConfig, log *slog.Logger) (*kafkaFigures, error) {
	figs := &kafkaFigures{}
	base := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.WithLogger(kgoLogger{log.With("component", "kafka-client", "cluster", name)})}
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return figs, fmt.Errorf("kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	if err := ensureKafkaTopic(ctx, out, adm, name, cfg.Topic, cfg.Partitions); err != nil {
		return figs, err
	}
	from, err := awaitPartitionOffsets(ctx, adm, cfg.Topic)
	if err != nil {
		return figs, err
	}
	var errs []error
	if slices.Contains(cfg.Loads, "produce") {
		fmt.Fprintf(out, "\n== produce: %s\n", name)
		opts := append(slices.Clone(base), kafkaProducerOpts(cfg)...)
		figs.Produce, err = runKafkaProduce(ctx, out, opts, cfg, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("produce: %w", err))
		}
	} else if from, err = partitionOffsets(ctx, adm, cfg.Topic, adm.ListStartOffsets); err != nil {
		return figs, err
	}
	if slices.Contains(cfg.Loads, "consume") && ctx.Err() == nil {
		to, err := partitionOffsets(ctx, adm, cfg.Topic, adm.ListEndOffsets)
		if err != nil {
			return figs, err
		}
		for _, run := range []struct {
			what string
			dst  **pulsarResult
		}{{"cold", &figs.Cold}, {"warm", &figs.Warm}} {
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(out, "\n== consume %s: %s\n", run.what, name)
			*run.dst, err = runKafkaConsume(ctx, out, base, cfg, from, to)
			if err != nil {
				errs = append(errs, fmt.Errorf("consume %s: %w", run.what, err))
			}
		}
	}
	if slices.Contains(cfg.Loads, "latency") && ctx.Err() == nil {
		fmt.Fprintf(out, "\n== latency: %s\n", name)
		opts := append(slices.Clone(base), kafkaProducerOpts(cfg)...)
		opts = append(opts, kgo.ProducerLinger(0))
		figs.Latency, err = runKafkaProduce(ctx, out, opts, cfg, cfg.Rate)
		if err != nil {
			errs = append(errs, fmt.Errorf("latency: %w", err))
		}
	}
	return figs, errors.Join(errs...)
}

// ensureKafkaTopic creates topic with partitions partitions if it does
// not exist, and fails if it exists with another count.
func ensureKafkaTopic(ctx context.Context, out io.Writer, adm *kadm.Client, name, topic string, partitions int) error {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("topic %s: metadata: %w", topic, err)
	}
	td, ok := details[topic]
	switch {
	case ok && td.Err == nil:
		if n := len(td.Partitions); n != partitions {
			return fmt.Errorf("topic %s exists with %d partitions, want perf-kafka-partitions %d: pass --perf-kafka-partitions %d or use another perf-kafka-topic", topic, n, partitions, n)
		}
		fmt.Fprintf(out, "%s: topic %s: %d partitions\n", name, topic, partitions)
		return nil
	case ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("topic %s: metadata: %w", topic, td.Err)
	}
	resp, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("topic %s: create with %d partitions: %w", topic, partitions, err)
	}
	fmt.Fprintf(out, "%s: topic %s: created with %d partitions\n", name, topic, partitions)
	return nil
}

// partitionOffsets returns the offsets list gives for each partition of
// topic (ListStartOffsets or ListEndOffsets).
func partitionOffsets(ctx context.Context, adm *kadm.Client, topic string, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
	listed, err := list(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("topic %s: list offsets: %w", topic, err)
	}
	offsets := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { offsets[o.Partition] = o.Offset })
	return offsets, nil
}

// awaitPartitionOffsets returns the end offsets of topic's partitions
// once every partition has a leader that answers for it, which may take a
// moment after the topic's creation; it gives up after 30 s.
func awaitPartitionOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	retry := time.NewTicker(50 * time.Millisecond)
	defer retry.Stop()
	for {
		offsets, err := partitionOffsets(ctx, adm, topic, adm.ListEndOffsets)
		if err == nil || !(errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.LeaderNotAvailable) || errors.Is(err, kerr.NotLeaderForPartition)) {
			return offsets, err
		}
		select {
		case <-retry.C:
		case <-ctx.Done():
			return nil, err
		}
	}
}

// kafkaProducerOpts are the producer options both produce loads share.
// Records are produced only while one of MaxBuffered slots is free, so
// Produce never blocks on the client's buffer.
func kafkaProducerOpts(cfg perfKafkaConfig) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.MaxBufferedRecords(cfg.MaxBuffered),
		kgo.ProducerBatchCompression(kafkaCompression[cfg.Compression]),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
	}
	if cfg.Acks == "leader" {
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	}
	return opts
}

// kafkaSender adapts a franz-go client to the produce load of perf
// produce (runProduce): each message's payload is one record's value.
// Each slot keeps its record and promise, so a send allocates nothing of
// the load's own, and the record's timestamp is the load's send time, so
// the client reads no clock for it (nor does the promise read it: franz-go
// truncates it to the millisecond before sending).
type kafkaSender struct {
	cl    *kgo.Client
	spare []kafkaSlot // allocated, not yet a slot's: slots' records sit side by side
}

// newKafkaSender is a sender producing through cl.
func newKafkaSender(cl *kgo.Client) *kafkaSender { return &kafkaSender{cl: cl} }

// kafkaSlot is a slot's record and the promise that finishes the slot.
type kafkaSlot struct {
	rec     kgo.Record
	promise func(*kgo.Record, error)
}

// init makes ks slot s's: its promise finishes s.
func (ks *kafkaSlot) init(s *sendSlot) {
	ks.promise = func(_ *kgo.Record, err error) { s.finish(err) }
}

// send is called by the load's one sending goroutine.
func (k *kafkaSender) send(s *sendSlot) {
	ks, _ := s.state.(*kafkaSlot)
	if ks == nil {
		if len(k.spare) == 0 {
			k.spare = make([]kafkaSlot, 256)
		}
		ks, k.spare = &k.spare[0], k.spare[1:]
		ks.init(s)
		s.state = ks
	}
	// franz-go does not touch a record after calling its promise, and
	// sets what it sends of it but the key, value, headers and
	// timestamp: the record needs only its new timestamp.
	ks.rec.Value, ks.rec.Timestamp = s.payload, s.sent
	k.cl.Produce(context.Background(), &ks.rec, ks.promise)
}

const kafkaProgressHeader = "     time       total   records/s      MB/s    p50 ms    p99 ms  p99.9 ms    max ms    errors"

// runKafkaProduce produces records for cfg.Duration: closed loop with
// rate 0, else open loop at rate. A failed record is an error; the run
// goes on and the result counts it.
func runKafkaProduce(ctx context.Context, out io.Writer, opts []kgo.Opt, cfg perfKafkaConfig, rate float64) (*pulsarResult, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	fmt.Fprintln(out, kafkaProgressHeader)
	res := runProduce(ctx, []asyncSender{newKafkaSender(cl)}, produceLoad{
		MessageSize: cfg.RecordSize,
		Duration:    cfg.Duration,
		Warmup:      cfg.Warmup,
		Rate:        rate,
		MaxPending:  cfg.MaxBuffered,
		Interval:    cfg.Interval,
	}, func(iv pulsarInterval) { printPulsarInterval(out, iv) })
	printKafkaSummary(out, res, cfg.Warmup, true)
	if rate > 0 {
		fmt.Fprintf(out, "send lag: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
			ms(res.SendLag.Quantile(0.5)), ms(res.SendLag.Quantile(0.99)), ms(res.SendLag.Max()))
	}
	fmt.Fprintf(out, "produced: %d records, %d acknowledged, %d failed\n", res.Sent, res.Total, res.Failed)
	switch {
	case res.Failed > 0 && errors.Is(res.FirstErr, kgo.ErrRecordTimeout):
		return res, fmt.Errorf("%d of %d records failed: not acknowledged within perf-kafka-delivery-timeout (%s); the broker's log says why: %w",
			res.Failed, res.Sent, cfg.DeliveryTimeout, res.FirstErr)
	case res.Failed > 0:
		return res, fmt.Errorf("%d of %d records failed; the first: %w", res.Failed, res.Sent, res.FirstErr)
	}
	return res, nil
}

const kafkaConsumeHeader = "     time       total   records/s      MB/s    errors"

// runKafkaConsume reads each partition of cfg.Topic from from[p] up to
// to[p] with a direct partition consumer and times it. It stops early if
// ctx ends or the read takes more than 10 × perf-duration + 10 s; reading
// less than all is an error.
func runKafkaConsume(ctx context.Context, out io.Writer, base []kgo.Opt, cfg perfKafkaConfig, from, to map[int32]int64) (*pulsarResult, error) {
	assign := map[int32]kgo.Offset{}
	var want int64
	for p, end := range to {
		if start := from[p]; end > start {
			assign[p] = kgo.NewOffset().At(start)
			want += end - start
		}
	}
	if len(assign) == 0 {
		fmt.Fprintln(out, "nothing to read")
		return &pulsarResult{}, nil
	}
	cpu0 := processCPU()
	opts := append(slices.Clone(base), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: assign}))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*cfg.Duration+10*time.Second)
	defer cancel()

	fmt.Fprintln(out, kafkaConsumeHeader)
	m := newPulsarMeter(time.Now(), 0)
	finish := reportEvery(m, cfg.Interval, func(iv pulsarInterval) {
		fmt.Fprintf(out, "%8.2fs %11d %11.0f %9.2f %9d\n", iv.At.Seconds(), iv.Total,
			perSecond(iv.Messages, iv.Length), mbps(iv.Bytes, iv.Length), iv.Failed)
	})
	// Invariant: left holds the partitions not yet read up to to[p].
	left := keySet(assign)
	for len(left) > 0 {
		fs := cl.PollFetches(lctx)
		if lctx.Err() != nil {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			m.fail(fmt.Errorf("topic %s partition %d: %w", t, p, err))
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			now := time.Now()
			for _, r := range ftp.Records {
				m.done(now, 0, len(r.Value))
				if r.Offset+1 >= to[r.Partition] {
					delete(left, r.Partition)
				}
			}
		})
	}
	finish()
	res := m.result()
	res.CPU = processCPU() - cpu0
	fmt.Fprintf(out, "summary: %d records, %.2f MB in %.2fs: %.0f records/s, %.2f MB/s\n",
		res.Messages, float64(res.Bytes)/1e6, res.Elapsed.Seconds(), perSecond(res.Messages, res.Elapsed), mbps(res.Bytes, res.Elapsed))
	if len(left) > 0 && ctx.Err() == nil {
		return res, fmt.Errorf("read %d of %d records before the deadline (%d fetch errors; the first: %v)", res.Total, want, res.Failed, res.FirstErr)
	}
	return res, nil
}

// processCPU is the CPU time (user and system) this process has used;
// zero if the system does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// keySet returns the set of m's keys.
func keySet[V any](m map[int32]V) map[int32]bool {
	s := make(map[int32]bool, len(m))
	for k := range m {
		s[k] = true
	}
	return s
}

func printKafkaSummary(w io.Writer, res *pulsarResult, warmup time.Duration, latency bool) {
	fmt.Fprintf(w, "summary: %d records, %.2f MB in %.2fs: %.0f records/s, %.2f MB/s (after the %s warm-up)\n",
		res.Messages, float64(res.Bytes)/1e6, res.Elapsed.Seconds(),
		perSecond(res.Messages, res.Elapsed), mbps(res.Bytes, res.Elapsed), warmup)
	if latency {
		h := &res.Latency
		fmt.Fprintf(w, "latency: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms, mean %.3f ms\n",
			ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()), ms(h.Mean()))
	}
}

// kafkaFigure is one row of the results table.
type kafkaFigure struct {
	load, figure string
	value        func(*kafkaFigures) (float64, bool) // false: the load did not run
	format       string
}

func throughputRows(load string, pick func(*kafkaFigures) *pulsarResult) []kafkaFigure {
	get := func(f func(*pulsarResult) float64) func(*kafkaFigures) (float64, bool) {
		return func(k *kafkaFigures) (float64, bool) {
			if k == nil || pick(k) == nil {
				return 0, false
			}
			return f(pick(k)), true
		}
	}
	return []kafkaFigure{
		{load, "records/s", get(func(r *pulsarResult) float64 { return perSecond(r.Messages, r.Elapsed) }), "%.0f"},
		{load, "MB/s", get(func(r *pulsarResult) float64 { return mbps(r.Bytes, r.Elapsed) }), "%.2f"},
	}
}

func latencyRows(load string, pick func(*kafkaFigures) *pulsarResult, qs ...float64) []kafkaFigure {
	var rows []kafkaFigure
	for _, q := range qs {
		rows = append(rows, kafkaFigure{load, "p" + strconv.FormatFloat(q*100, 'f', -1, 64) + " ms",
			func(k *kafkaFigures) (float64, bool) {
				if k == nil || pick(k) == nil {
					return 0, false
				}
				return ms(pick(k).Latency.Quantile(q)), true
			}, "%.3f"})
	}
	return rows
}

var kafkaResultRows = slices.Concat(
	throughputRows("produce", func(k *kafkaFigures) *pulsarResult { return k.Produce }),
	latencyRows("produce", func(k *kafkaFigures) *pulsarResult { return k.Produce }, 0.5, 0.99),
	throughputRows("consume cold", func(k *kafkaFigures) *pulsarResult { return k.Cold }),
	throughputRows("consume warm", func(k *kafkaFigures) *pulsarResult { return k.Warm }),
	latencyRows("latency", func(k *kafkaFigures) *pulsarResult { return k.Latency }, 0.5, 0.99, 0.999),
)

// printKafkaResults prints the results table: target's figures and, if
// fake is not nil, kfake's and target ÷ kfake; then the goals.
func printKafkaResults(w io.Writer, cfg perfKafkaConfig, target, fake *kafkaFigures) {
	fmt.Fprintf(w, "\nresults: %d-byte records, %d partitions, acks %s; MB is 10^6 bytes of payload", cfg.RecordSize, cfg.Partitions, cfg.Acks)
	if fake != nil {
		fmt.Fprint(w, "; ratio is magnetar ÷ kfake")
	}
	fmt.Fprintln(w)
	if fake == nil {
		fmt.Fprintf(w, "%-14s %-10s %12s\n", "load", "figure", "magnetar")
	} else {
		fmt.Fprintf(w, "%-14s %-10s %12s %12s %8s\n", "load", "figure", "magnetar", "kfake", "ratio")
	}
	for _, row := range kafkaResultRows {
		t, ok := row.value(target)
		if !ok {
			continue
		}
		line := fmt.Sprintf("%-14s %-10s %12s", row.load, row.figure, fmt.Sprintf(row.format, t))
		if f, ok := row.value(fake); ok {
			line += fmt.Sprintf(" %12s %8.2f", fmt.Sprintf(row.format, f), ratio(t, f))
		}
		fmt.Fprintln(w, line)
	}
	if fake == nil {
		return
	}
	for _, g := range []struct {
		what string
		pick func(*kafkaFigures) *pulsarResult
		goal string
		met  func(float64) bool
	}{
		{"produce", func(k *kafkaFigures) *pulsarResult { return k.Produce }, "≥ 1", func(r float64) bool { return r >= 1 }},
		{"consume cold", func(k *kafkaFigures) *pulsarResult { return k.Cold }, "> 1", func(r float64) bool { return r > 1 }},
		{"consume warm", func(k *kafkaFigures) *pulsarResult { return k.Warm }, "> 1", func(r float64) bool { return r > 1 }},
	} {
		t, f := g.pick(target), g.pick(fake)
		if t == nil || f == nil {
			continue
		}
		r := ratio(mbps(t.Bytes, t.Elapsed), mbps(f.Bytes, f.Elapsed))
		verdict := "not met"
		if g.met(r) {
			verdict = "met"
		}
		fmt.Fprintf(w, "goal: %s MB/s magnetar ÷ kfake = %.2f (goal %s): %s\n", g.what, r, g.goal, verdict)
	}
}

// kgoLogger passes franz-go's warnings and errors on to a slog logger.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	l.log.Log(context.Background(), lv, msg, keyvals...)
}
