package main

// `magnetar mirror`: copies topics from a Kafka cluster into Magnetar over
// the Kafka protocol (franz-go on both sides).
//
// Delivery is at least once. The copy's position is the offsets of a
// consumer group on the SOURCE cluster (mirror-group). The loop keeps one
// invariant:
//
//	a source offset is committed only after every record before it has
//	been acknowledged by Magnetar (acks=all, idempotent producer).
//
// Each pass polls a batch (rebalances are held off while it is in hand:
// BlockRebalanceOnPoll), produces it to the same topic and partition on
// Magnetar, flushes, and only then commits the batch's offsets at the
// source and lets a rebalance through. A crash between the flush and the
// commit duplicates at most that batch on restart; nothing acknowledged by
// the source group is ever missing from Magnetar.
//
// Records keep their partition, key, value, headers and timestamp, and are
// produced in source order; so when a target partition starts empty and its
// source partition starts at offset 0 with contiguous offsets (no
// compaction, no transaction markers), target offsets equal source offsets.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var mirrorSettings = []setting{
	{"mirror-from", "", "host:port", "bootstrap address of the source Kafka cluster (host:port, comma-separated for several); also --from"},
	{"mirror-topics", "", "regex", "topics to copy: a regular expression (Go RE2) that must match the whole topic name; names starting with __ are never copied; also --topics"},
	{"kafka-bootstrap", "localhost:9092", "host:port", "Magnetar's Kafka listener, where the topics are copied to"},
	{"mirror-group", "magnetar-mirror", "group", "consumer group on the source cluster whose committed offsets are how far the copy has come"},
	{"mirror-once", "false", "bool", "stop, with exit code 0, once caught up with the source's end offsets as they were at start"},
}

const (
	mirrorProgressInterval = 5 * time.Second  // between progress lines
	mirrorTopicRefresh     = 10 * time.Second // between looks for new source topics
)

func newMirrorCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mirror",
		Short: "Copy topics from a Kafka cluster into Magnetar, continuously",
		Example: `  magnetar mirror --from old-kafka:9092 --topics 'orders|payments'
  magnetar mirror --from old-kafka:9092 --topics 'billing\..*' --kafka-bootstrap magnetar-1:9092
  magnetar mirror --from old-kafka:9092 --topics '.*' --mirror-once`,
		Long: `Copy topics from a Kafka cluster into Magnetar, continuously.

Consumes the topics of --from whose whole name matches --topics (a regular
expression; topics created later that match are picked up within about 10 s;
names starting with __ never are) in consumer group --mirror-group on the source cluster,
starting from the earliest offset where the group has none, and produces each
record to the topic of the same name and the same partition on Magnetar's
Kafka listener --kafka-bootstrap, with its key, value, headers and timestamp.
A missing topic is created with the source's partition count; an existing
one with another count is an error.

Delivery is at least once: the group's offsets are committed at the source
only after Magnetar acknowledged the records (acks all, idempotent
producer), so a restart goes on where the last run stopped. Only records
acknowledged but not yet committed when a run died are copied twice; a
SIGINT or SIGTERM finishes and commits the batch in hand, then exits 0.
When a target partition is empty and its source partition starts at offset
0, the copies keep the source's offsets.

Every 5 s, and at the end, a line on stderr: records and MB (10^6 bytes of
keys and values) copied, the rate, and per topic the lag (source end offset
minus the group's committed offset). With --mirror-once the command stops
once it has caught up with the source's end offsets as they were at start.
` + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveMirror(a.vals)
			if err != nil {
				return err
			}
			ctx, stop := a.perfSignals()
			defer stop()
			return runtimeError(runMirror(ctx, cfg, a.stderr, a.logger))
		},
	}
	a.addSettings(cmd, mirrorSettings)
	cmd.Flags().SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		switch name {
		case "from":
			name = "mirror-from"
		case "topics":
			name = "mirror-topics"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

// mirrorConfig is the checked configuration of `magnetar mirror`.
type mirrorConfig struct {
	From     []string       // source bootstrap addresses
	Topics   *regexp.Regexp // anchored: matches whole names
	Target   []string       // Magnetar's Kafka listener
	Group    string
	Once     bool
	Interval time.Duration // between progress lines
}

func resolveMirror(sv *settingValues) (mirrorConfig, error) {
	cfg := mirrorConfig{Interval: mirrorProgressInterval}
	var err error
	s := func(name string) setting { return lookupSetting(mirrorSettings, name) }
	required := func(parse func(string) ([]string, error)) func(string) ([]string, error) {
		return func(v string) ([]string, error) {
			if v == "" {
				return nil, errors.New("required")
			}
			return parse(v)
		}
	}
	if cfg.From, err = check(sv, s("mirror-from"), required(parseBootstrap)); err != nil {
		return cfg, err
	}
	if cfg.Topics, err = check(sv, s("mirror-topics"), parseMirrorTopics); err != nil {
		return cfg, err
	}
	if cfg.Target, err = check(sv, s("kafka-bootstrap"), parseBootstrap); err != nil {
		return cfg, err
	}
	if cfg.Group, err = check(sv, s("mirror-group"), parseKafkaGroup); err != nil {
		return cfg, err
	}
	if cfg.Once, err = check(sv, s("mirror-once"), parseBool); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseMirrorTopics compiles a topic regex so that it matches whole names,
// as Kafka's own tools do (franz-go alone matches anywhere in a name).
func parseMirrorTopics(s string) (*regexp.Regexp, error) {
	if s == "" {
		return nil, errors.New("required: a regular expression of the topics to copy")
	}
	if _, err := regexp.Compile(s); err != nil {
		return nil, fmt.Errorf("not a regular expression: %w", err)
	}
	return regexp.MustCompile("^(?:" + s + ")$"), nil
}

func parseKafkaGroup(s string) (string, error) {
	if s == "" || len(s) > 249 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", errors.New("want a group name of 1 to 249 characters without spaces or control characters")
	}
	return s, nil
}

// checkMirrorReachable dials addrs and succeeds if any answers; what
// names the side for the message.
func checkMirrorReachable(what string, addrs []string) error {
	var err error
	for _, addr := range addrs {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, clientConnectTimeout); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("cannot reach %s at %s: %v", what, strings.Join(addrs, ","), connectCause(err))
}

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

// mirror is one run's state. The copy loop owns positions; topics and
// the counters are shared with the progress reporter.
type mirror struct {
	cfg  mirrorConfig
	log  *slog.Logger
	sadm *kadm.Client // source, without a group
	tadm *kadm.Client // target
	dst  *kgo.Client  // target producer

	outMu sync.Mutex // one line at a time from the loop and the reporter
	out   io.Writer

	mu     sync.Mutex
	topics map[string]int // mirrored topics and their partition counts

	records, bytes atomic.Int64

	// offsetWarned: partitions whose target offsets were seen to differ
	// from the source's (warned once each); guarded by mu.
	offsetWarned map[topicPartition]bool
}

// runMirror copies until ctx ends or, with cfg.Once, until caught up.
// Progress lines go to out.
func runMirror(ctx context.Context, cfg mirrorConfig, out io.Writer, log *slog.Logger) error {
	if err := checkMirrorReachable("the source Kafka cluster (--from)", cfg.From); err != nil {
		return err
	}
	if err := checkMirrorReachable("Magnetar's Kafka listener (--kafka-bootstrap)", cfg.Target); err != nil {
		return err
	}
	common := []kgo.Opt{kgo.DialTimeout(clientConnectTimeout), kgo.RequestTimeoutOverhead(clientOperationTimeout),
		kgo.RetryTimeout(clientOperationTimeout), kgo.WithLogger(kgoLogger{log.With("component", "kafka-client")})}
	srcAdmin, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.From...)}, common...)...)
	if err != nil {
		return fmt.Errorf("source client: %w", err)
	}
	defer srcAdmin.Close()
	// franz-go's producer is idempotent with acks all by default. No
	// RecordDeliveryTimeout: franz-go measures it from the record's
	// timestamp, which here is the source's, often long past; a batch is
	// bounded by the context of its produce and flush instead.
	dst, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Target...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5 * time.Millisecond)}, common...)...)
	if err != nil {
		return fmt.Errorf("target client: %w", err)
	}
	defer dst.Close()
	m := &mirror{cfg: cfg, log: log, out: out, sadm: kadm.NewClient(srcAdmin), tadm: kadm.NewClient(dst), dst: dst,
		topics: map[string]int{}, offsetWarned: map[topicPartition]bool{}}
	return m.run(ctx)
}

func (m *mirror) run(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, clientOperationTimeout)
	listed, err := m.sadm.ListTopics(opCtx)
	cancel()
	if err != nil {
		return kafkaError("source: list topics", err)
	}
	var names []string
	for name, td := range listed {
		if td.Err == nil && m.wanted(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := m.ensureTopic(ctx, name, len(listed[name].Partitions)); err != nil {
			return err
		}
	}
	if len(names) == 0 {
		m.printf("mirror: no topic of %s matches %s yet\n", strings.Join(m.cfg.From, ","), m.pattern())
		if m.cfg.Once {
			return nil
		}
	}

	// With --mirror-once: the end offsets to reach, and where the group is.
	var want map[topicPartition]int64
	have := map[topicPartition]int64{}
	if m.cfg.Once {
		if want, have, err = m.startPositions(ctx, names); err != nil {
			return err
		}
	}
	caughtUp := func() bool {
		for tp, end := range want {
			if have[tp] < end {
				return false
			}
		}
		return true
	}

	start := time.Now()
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		m.reportProgress(stopProgress, start)
	}()
	finish := func() {
		close(stopProgress)
		<-progressDone
		m.printProgress(context.Background(), time.Since(start), m.records.Load())
	}
	if m.cfg.Once && caughtUp() {
		finish()
		return nil
	}

	src, err := kgo.NewClient(kgo.SeedBrokers(m.cfg.From...), kgo.DialTimeout(clientConnectTimeout),
		kgo.RequestTimeoutOverhead(clientOperationTimeout), kgo.RetryTimeout(clientOperationTimeout),
		kgo.WithLogger(kgoLogger{m.log.With("component", "kafka-client")}),
		kgo.ConsumerGroup(m.cfg.Group), kgo.ConsumeTopics(m.cfg.Topics.String()), kgo.ConsumeRegex(),
		kgo.ConsumeExcludeTopics("^__.*"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		// Topics created at the source later are found on a metadata
		// refresh; without this, up to 5 minutes later.
		kgo.MetadataMaxAge(mirrorTopicRefresh))
	if err != nil {
		finish()
		return fmt.Errorf("source consumer: %w", err)
	}
	err = m.copyLoop(ctx, src, have, caughtUp)
	src.Close() // leaves the group
	finish()
	return err
}

// copyLoop polls, produces, flushes and commits until ctx ends, an error,
// or caughtUp with --mirror-once. have is updated with the next source
// offset of each partition copied and committed.
func (m *mirror) copyLoop(ctx context.Context, src *kgo.Client, have map[topicPartition]int64, caughtUp func() bool) error {
	for {
		if m.cfg.Once && caughtUp() {
			return nil
		}
		fs := src.PollFetches(ctx)
		var ferr error
		fs.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, context.Canceled), errors.Is(err, kgo.ErrClientClosed):
			case errors.As(err, new(*kgo.ErrDataLoss)):
				m.log.Warn("source: data loss", "topic", topic, "partition", p, "err", err)
			case ferr == nil:
				ferr = kafkaError(fmt.Sprintf("source: fetch %s partition %d", topic, p), err)
			}
		})
		if ferr != nil {
			src.AllowRebalance()
			return ferr
		}
		// The batch in hand is finished even after a signal, so that
		// what Magnetar acknowledged is committed.
		err := m.copyBatch(src, fs.Records(), have)
		src.AllowRebalance()
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// copyBatch produces recs to Magnetar, waits for their acknowledgement and
// then commits them at the source.
func (m *mirror) copyBatch(src *kgo.Client, recs []*kgo.Record, have map[topicPartition]int64) error {
	if len(recs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*clientOperationTimeout)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
	)
	for _, r := range recs {
		if err := m.ensureKnown(ctx, r.Topic); err != nil {
			return err
		}
		srcOffset := r.Offset
		out := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value,
			Headers: r.Headers, Timestamp: r.Timestamp}
		m.dst.Produce(ctx, out, func(out *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = kafkaError(fmt.Sprintf("target: produce to %s partition %d", out.Topic, out.Partition), err)
				}
				mu.Unlock()
				return
			}
			m.records.Add(1)
			m.bytes.Add(int64(len(out.Key) + len(out.Value)))
			if out.Offset != srcOffset {
				m.warnOffsets(out, srcOffset)
			}
		})
	}
	if err := m.dst.Flush(ctx); err != nil {
		return kafkaError("target: flush", err)
	}
	mu.Lock()
	err := firstErr
	mu.Unlock()
	if err != nil {
		return err // nothing of this batch is committed
	}
	if err := src.CommitUncommittedOffsets(ctx); err != nil {
		return kafkaError("source: commit the group's offsets", err)
	}
	for _, r := range recs {
		tp := topicPartition{r.Topic, r.Partition}
		have[tp] = max(have[tp], r.Offset+1)
	}
	return nil
}

func (m *mirror) warnOffsets(out *kgo.Record, srcOffset int64) {
	tp := topicPartition{out.Topic, out.Partition}
	m.mu.Lock()
	warned := m.offsetWarned[tp]
	m.offsetWarned[tp] = true
	m.mu.Unlock()
	if !warned {
		m.log.Warn("target offsets differ from the source's (the target partition was not empty, or source offsets have gaps)",
			"topic", out.Topic, "partition", out.Partition, "source-offset", srcOffset, "target-offset", out.Offset)
	}
}

func (m *mirror) printf(format string, args ...any) {
	m.outMu.Lock()
	defer m.outMu.Unlock()
	fmt.Fprintf(m.out, format, args...)
}

func (m *mirror) wanted(topic string) bool {
	return !strings.HasPrefix(topic, "__") && m.cfg.Topics.MatchString(topic)
}

// pattern is the topics regex as given.
func (m *mirror) pattern() string {
	s := m.cfg.Topics.String()
	return s[len("^(?:") : len(s)-len(")$")]
}

// ensureKnown ensures a topic first seen in a fetch (created at the source
// after the start) exists on Magnetar.
func (m *mirror) ensureKnown(ctx context.Context, topic string) error {
	m.mu.Lock()
	_, ok := m.topics[topic]
	m.mu.Unlock()
	if ok {
		return nil
	}
	details, err := m.sadm.ListTopics(ctx, topic)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		return kafkaError("source: topic "+topic, err)
	}
	return m.ensureTopic(ctx, topic, len(details[topic].Partitions))
}

// ensureTopic creates topic on Magnetar with partitions partitions unless
// it exists with as many, and waits until every partition has a leader.
func (m *mirror) ensureTopic(ctx context.Context, topic string, partitions int) error {
	check := func() (bool, error) {
		details, err := m.tadm.ListTopics(ctx, topic)
		if err != nil {
			return false, kafkaError("target: topic "+topic, err)
		}
		td, ok := details[topic]
		switch {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			return false, nil
		case td.Err != nil:
			return false, kafkaError("target: topic "+topic, td.Err)
		case len(td.Partitions) != partitions:
			return false, fmt.Errorf("topic %s exists on Magnetar with %d partitions, but has %d at the source: records keep their partition, so the counts must match (delete it, or change its partition count)",
				topic, len(td.Partitions), partitions)
		}
		return true, nil
	}
	exists, err := check()
	if err != nil {
		return err
	}
	verb := "exists"
	if !exists {
		resp, err := m.tadm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists): // created meanwhile
			if ok, err := check(); !ok {
				return errors.Join(err, fmt.Errorf("topic %s: created meanwhile, but not found", topic))
			}
		case err != nil:
			return kafkaError(fmt.Sprintf("target: create topic %s with %d partitions", topic, partitions), err)
		default:
			verb = "created"
		}
	}
	if _, err := awaitPartitionOffsets(ctx, m.tadm, topic); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	m.mu.Lock()
	m.topics[topic] = partitions
	m.mu.Unlock()
	m.printf("mirror: topic %s (%d partitions): %s on Magnetar\n", topic, partitions, verb)
	return nil
}

// startPositions returns, for --mirror-once, the source's end offsets of
// every partition of topics, and where the group is in each (its committed
// offset, or the partition's start offset where it has none).
func (m *mirror) startPositions(ctx context.Context, topics []string) (want, have map[topicPartition]int64, err error) {
	want, have = map[topicPartition]int64{}, map[topicPartition]int64{}
	if len(topics) == 0 {
		return want, have, nil
	}
	ctx, cancel := context.WithTimeout(ctx, clientOperationTimeout)
	defer cancel()
	ends, starts, committed, err := m.offsets(ctx, topics)
	if err != nil {
		return nil, nil, err
	}
	ends.Each(func(o kadm.ListedOffset) {
		tp := topicPartition{o.Topic, o.Partition}
		want[tp] = o.Offset
		have[tp] = position(o.Topic, o.Partition, starts, committed)
	})
	return want, have, nil
}

// offsets lists the source's end and start offsets of topics and the
// group's committed offsets.
func (m *mirror) offsets(ctx context.Context, topics []string) (ends, starts kadm.ListedOffsets, committed kadm.OffsetResponses, err error) {
	if ends, err = m.sadm.ListEndOffsets(ctx, topics...); err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, nil, kafkaError("source: list end offsets", err)
	}
	if starts, err = m.sadm.ListStartOffsets(ctx, topics...); err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, nil, kafkaError("source: list start offsets", err)
	}
	committed, err = m.sadm.FetchOffsets(ctx, m.cfg.Group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil, nil, kafkaError("source: fetch the offsets of group "+m.cfg.Group, err)
	}
	return ends, starts, committed, nil
}

// position is where the group goes on in a partition: its committed
// offset, or the start offset where it has none.
func position(topic string, p int32, starts kadm.ListedOffsets, committed kadm.OffsetResponses) int64 {
	if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
		return c.At
	}
	if s, ok := starts.Lookup(topic, p); ok {
		return s.Offset
	}
	return 0
}

// reportProgress prints a progress line every interval until stop closes.
func (m *mirror) reportProgress(stop <-chan struct{}, start time.Time) {
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	last, lastN := start, int64(0)
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			n := m.records.Load()
			ctx, cancel := context.WithTimeout(context.Background(), clientOperationTimeout)
			m.printProgressRate(ctx, n, float64(n-lastN)/now.Sub(last).Seconds())
			cancel()
			last, lastN = now, n
		}
	}
}

// printProgress prints the final line, with the rate over the whole run.
func (m *mirror) printProgress(ctx context.Context, elapsed time.Duration, n int64) {
	ctx, cancel := context.WithTimeout(ctx, clientOperationTimeout)
	defer cancel()
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	m.printProgressRate(ctx, n, rate)
}

// printProgressRate prints "mirror: 12,345 records (12.3 MB) copied,
// 2,468 rec/s; lag: orders 0, payments 120".
func (m *mirror) printProgressRate(ctx context.Context, n int64, rate float64) {
	m.mu.Lock()
	topics := make([]string, 0, len(m.topics))
	for t := range m.topics {
		topics = append(topics, t)
	}
	m.mu.Unlock()
	slices.Sort(topics)
	lag := "none"
	if len(topics) > 0 {
		lag = m.lagText(ctx, topics)
	}
	m.printf("mirror: %s records (%.1f MB) copied, %s rec/s; lag: %s\n",
		thousands(n), float64(m.bytes.Load())/1e6, thousands(int64(rate+0.5)), lag)
}

// lagText is the source end offset minus the group's position, summed over
// each topic's partitions.
func (m *mirror) lagText(ctx context.Context, topics []string) string {
	ends, starts, committed, err := m.offsets(ctx, topics)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	lags := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		lags[o.Topic] += max(0, o.Offset-position(o.Topic, o.Partition, starts, committed))
	})
	parts := make([]string, len(topics))
	for i, t := range topics {
		parts[i] = t + " " + thousands(lags[t])
	}
	return strings.Join(parts, ", ")
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
