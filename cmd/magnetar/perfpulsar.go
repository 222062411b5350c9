package main

// `magnetar perf produce` and `magnetar perf consume`: Pulsar protocol
// load through the official Go client (github.com/apache/pulsar-client-go),
// in the manner of pulsar-perf, against any broker that speaks the protocol.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/broker"
)

// perfPulsarSettings are the settings `magnetar perf produce` and
// `magnetar perf consume` share.
var perfPulsarSettings = []setting{
	{"perf-service-url", "pulsar://127.0.0.1:6650", "url", "Pulsar service URL of the broker (pulsar://host:port)"},
	{"perf-topic", "persistent://public/default/perf", "topic", "topic; with perf-topics above 1, the prefix of the topics <perf-topic>-0, <perf-topic>-1, ..."},
	{"perf-topics", "1", "count", "topics to use"},
	{"perf-partitions", "0", "count", "partitions each topic must have (0: non-partitioned); perf cannot create partitioned topics: create them with magnetar admin topics create-partitioned, or run the broker with --auto-topic-creation partitioned --auto-topic-partitions N"},
	{"perf-duration", "10s", "duration", "how long to run; 0 runs until SIGINT or SIGTERM"},
	{"perf-warmup", "1s", "duration", "first part of the run, left out of the summary"},
}

var perfProduceSettings = slices.Concat(perfPulsarSettings, []setting{
	{"perf-rate", "0", "msg/s", "open loop: publish at this steady rate in all (across topics and producers), each message's latency counted from when it was due; 0 (the default): closed loop, as fast as perf-max-pending allows"},
	{"perf-max-pending", "1000", "count", "most messages published and not yet acknowledged at once, in all"},
	{"perf-message-size", "1024", "bytes", "payload bytes per message"},
	{"perf-producers", "1", "count", "producers per topic"},
	{"perf-batching", "true", "bool", "let the client batch messages"},
	{"perf-batch-max-messages", "1000", "count", "most messages in a batch"},
	{"perf-batch-max-size", "4194304", "bytes", "most payload bytes in a batch (pulsar-perf's default; pulsar-client-go's own is 131072)"},
	{"perf-batch-max-delay", "1ms", "duration", "longest a message waits for its batch to fill"},
	{"perf-compression", "none", "codec", "batch compression: none, lz4, zlib or zstd"},
})

var perfConsumeSettings = slices.Concat(perfPulsarSettings, []setting{
	{"perf-subscription", "perf", "name", "subscription name"},
	{"perf-subscription-type", "exclusive", "type", "subscription type: exclusive, shared, failover or key_shared"},
	{"perf-subscription-position", "latest", "position", "where a new subscription starts: latest or earliest"},
	{"perf-consumers", "1", "count", "consumers per topic (exclusive subscriptions admit one)"},
	{"perf-ack-every", "1", "count", "1: acknowledge each message; N > 1: acknowledge cumulatively every N messages (exclusive and failover only)"},
})

const perfPulsarHelp = `
Progress lines, every second, on stdout: the time since the start, the
messages so far (total), the interval's msg/s, MB/s and latency
p50/p99/p99.9/max in ms, and the errors so far. Then a summary of the run
after perf-warmup. MB is 10^6 bytes of payload. Logs, the client's among
them (warnings and errors only), go to stderr.

SIGINT or SIGTERM ends the run early; the summary is still printed. A
second signal exits at once.

Partitioned topics: perf does not create them. Create one with
magnetar admin topics create-partitioned TOPIC -p N, or run the broker with
--auto-topic-creation partitioned --auto-topic-partitions N, which creates
a missing topic with N partitions on first use; pass
--perf-partitions N to run on it. Perf prints the partitions it finds and
fails if they are not perf-partitions.
`

func newPerfProduceCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Publish to Pulsar topics and measure throughput and publish latency",
		Example: `  magnetar perf produce --perf-rate 20000 --perf-duration 30s     # open loop, 1 KiB messages
  magnetar perf produce --perf-topics 4 --perf-compression lz4     # as fast as 1000 pending allow
  magnetar perf produce --perf-service-url pulsar://broker:6650 --perf-batching=false`,
		Long: `Publish to Pulsar topics and measure throughput and publish latency.

Connects to perf-service-url with the Pulsar Go client and creates
perf-producers producers on each of perf-topics topics; publishes
perf-message-size messages round robin over them for perf-duration: closed
loop (up to perf-max-pending unacknowledged), or open loop at perf-rate.
Publish latency runs from the send (closed loop) or from when the message
was due (open loop, so a stall counts against every message it delays) to
the broker's acknowledgement. In an open loop the summary also gives the
send lag: how late the sends were against their due times (the generator
and the client's queue), which the latency includes.

Exits 1 if any send failed.
` + perfPulsarHelp + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolvePerfProduce(a.vals)
			if err != nil {
				return err
			}
			return runtimeError(a.perfProduce(cfg))
		},
	}
	a.addSettings(cmd, perfProduceSettings)
	return cmd
}

func newPerfConsumeCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Consume from Pulsar topics and measure throughput and end-to-end latency",
		Example: `  magnetar perf consume --perf-duration 0                          # until Ctrl-C
  magnetar perf consume --perf-subscription-type shared --perf-consumers 2 --perf-subscription-position earliest`,
		Long: `Consume from Pulsar topics and measure throughput and end-to-end latency.

Connects to perf-service-url with the Pulsar Go client, subscribes
perf-consumers consumers to each of perf-topics topics, and receives and
acknowledges messages for perf-duration. End-to-end latency is the time of
receipt minus the message's publish time, which the producing client sets
in milliseconds when it starts the message's batch: so it includes the
batching delay, has a resolution of 1 ms, and compares two clocks unless
producer and consumer share a machine.
` + perfPulsarHelp + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolvePerfConsume(a.vals)
			if err != nil {
				return err
			}
			return runtimeError(a.perfConsume(cfg))
		},
	}
	a.addSettings(cmd, perfConsumeSettings)
	return cmd
}

// perfPulsarConfig is the checked configuration both commands share.
type perfPulsarConfig struct {
	ServiceURL string
	Topics     []string // fully qualified
	Partitions int      // each topic's; 0: non-partitioned
	Duration   time.Duration
	Warmup     time.Duration
}

// perfProduceConfig is the checked configuration of `magnetar perf produce`.
type perfProduceConfig struct {
	perfPulsarConfig
	Rate             float64 // msg/s in all; 0: closed loop
	MaxPending       int
	MessageSize      int
	Producers        int // per topic
	Batching         bool
	BatchMaxMessages int
	BatchMaxSize     int // bytes
	BatchMaxDelay    time.Duration
	Compression      string
}

// perfConsumeConfig is the checked configuration of `magnetar perf consume`.
type perfConsumeConfig struct {
	perfPulsarConfig
	Subscription string
	Type         string // a key of subscriptionTypes
	Position     string // a key of subscriptionPositions
	Consumers    int    // per topic
	AckEvery     int    // 1: individual acks; above: cumulative
}

var compressionTypes = map[string]pulsar.CompressionType{
	"none": pulsar.NoCompression, "lz4": pulsar.LZ4, "zlib": pulsar.ZLib, "zstd": pulsar.ZSTD,
}

var subscriptionTypes = map[string]pulsar.SubscriptionType{
	"exclusive": pulsar.Exclusive, "shared": pulsar.Shared, "failover": pulsar.Failover, "key_shared": pulsar.KeyShared,
}

var subscriptionPositions = map[string]pulsar.SubscriptionInitialPosition{
	"latest": pulsar.SubscriptionPositionLatest, "earliest": pulsar.SubscriptionPositionEarliest,
}

// maxPerfMessageSize is Pulsar's default maxMessageSize (5 MiB); a
// broker refuses larger messages unless configured otherwise.
const maxPerfMessageSize = 5 << 20

// maxPerfBatchSize: a batch is one message to the broker, so it too stays
// within maxPerfMessageSize.
const maxPerfBatchSize = maxPerfMessageSize

func resolvePerfPulsar(sv *settingValues, list []setting) (perfPulsarConfig, error) {
	var cfg perfPulsarConfig
	var err error
	s := func(name string) setting { return lookupSetting(list, name) }
	if cfg.ServiceURL, err = check(sv, s("perf-service-url"), parseServiceURL); err != nil {
		return cfg, err
	}
	topic, err := check(sv, s("perf-topic"), parsePerfTopic)
	if err != nil {
		return cfg, err
	}
	n, err := check(sv, s("perf-topics"), parseCount(10_000))
	if err != nil {
		return cfg, err
	}
	if cfg.Topics = []string{topic}; n > 1 {
		cfg.Topics = cfg.Topics[:0]
		for i := range n {
			cfg.Topics = append(cfg.Topics, fmt.Sprintf("%s-%d", topic, i))
		}
	}
	if cfg.Partitions, err = check(sv, s("perf-partitions"), parseIntRange(0, 100_000)); err != nil {
		return cfg, err
	}
	if cfg.Duration, err = check(sv, s("perf-duration"), parseNonNegativeDuration); err != nil {
		return cfg, err
	}
	if cfg.Warmup, err = check(sv, s("perf-warmup"), parseNonNegativeDuration); err != nil {
		return cfg, err
	}
	if cfg.Duration > 0 && cfg.Warmup >= cfg.Duration {
		return cfg, fmt.Errorf("perf-warmup %s, perf-duration %s: the warm-up must be shorter than the run", cfg.Warmup, cfg.Duration)
	}
	return cfg, nil
}

func resolvePerfProduce(sv *settingValues) (perfProduceConfig, error) {
	var cfg perfProduceConfig
	var err error
	if cfg.perfPulsarConfig, err = resolvePerfPulsar(sv, perfProduceSettings); err != nil {
		return cfg, err
	}
	s := func(name string) setting { return lookupSetting(perfProduceSettings, name) }
	if cfg.Rate, err = check(sv, s("perf-rate"), parseRateOf("messages")); err != nil {
		return cfg, err
	}
	for _, c := range []struct {
		name  string
		limit int
		dst   *int
	}{
		{"perf-max-pending", 1_000_000, &cfg.MaxPending},
		{"perf-message-size", maxPerfMessageSize, &cfg.MessageSize},
		{"perf-producers", 1000, &cfg.Producers},
		{"perf-batch-max-messages", 1_000_000, &cfg.BatchMaxMessages},
		{"perf-batch-max-size", maxPerfBatchSize, &cfg.BatchMaxSize},
	} {
		if *c.dst, err = check(sv, s(c.name), parseCount(c.limit)); err != nil {
			return cfg, err
		}
	}
	if cfg.Batching, err = check(sv, s("perf-batching"), parseBool); err != nil {
		return cfg, err
	}
	if cfg.BatchMaxDelay, err = check(sv, s("perf-batch-max-delay"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	cfg.Compression, err = check(sv, s("perf-compression"), parseChoice(compressionTypes))
	return cfg, err
}

func resolvePerfConsume(sv *settingValues) (perfConsumeConfig, error) {
	var cfg perfConsumeConfig
	var err error
	if cfg.perfPulsarConfig, err = resolvePerfPulsar(sv, perfConsumeSettings); err != nil {
		return cfg, err
	}
	s := func(name string) setting { return lookupSetting(perfConsumeSettings, name) }
	if cfg.Subscription, err = check(sv, s("perf-subscription"), parseSubscriptionName); err != nil {
		return cfg, err
	}
	if cfg.Type, err = check(sv, s("perf-subscription-type"), parseChoice(subscriptionTypes)); err != nil {
		return cfg, err
	}
	if cfg.Position, err = check(sv, s("perf-subscription-position"), parseChoice(subscriptionPositions)); err != nil {
		return cfg, err
	}
	if cfg.Consumers, err = check(sv, s("perf-consumers"), parseCount(1000)); err != nil {
		return cfg, err
	}
	if cfg.AckEvery, err = check(sv, s("perf-ack-every"), parseCount(1_000_000)); err != nil {
		return cfg, err
	}
	if cfg.Type == "exclusive" && cfg.Consumers > 1 {
		return cfg, fmt.Errorf("perf-consumers %d: an exclusive subscription admits one consumer per topic; use perf-subscription-type shared, failover or key_shared", cfg.Consumers)
	}
	if cfg.AckEvery > 1 && (cfg.Type == "shared" || cfg.Type == "key_shared") {
		return cfg, fmt.Errorf("perf-ack-every %d: cumulative acknowledgement is not allowed on %s subscriptions", cfg.AckEvery, cfg.Type)
	}
	return cfg, nil
}

func parseServiceURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "pulsar" && u.Scheme != "pulsar+ssl") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", errors.New("want pulsar://host:port (or pulsar+ssl://host:port)")
	}
	return s, nil
}

// parsePerfTopic returns the fully qualified name of a (non-partition)
// topic, as the broker would read it.
func parsePerfTopic(s string) (string, error) {
	t, err := broker.ParseTopicName(s)
	if err != nil {
		return "", err
	}
	if t.IsPartition() {
		return "", errors.New("want a topic, not one partition of it")
	}
	return t.String(), nil
}

func parseSubscriptionName(s string) (string, error) {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == '/' }) {
		return "", errors.New("want a name without / or control characters")
	}
	return s, nil
}

// parseChoice returns a parser of the keys of m (case-insensitive).
func parseChoice[V any](m map[string]V) func(string) (string, error) {
	return func(s string) (string, error) {
		if _, ok := m[strings.ToLower(s)]; ok {
			return strings.ToLower(s), nil
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return "", fmt.Errorf("want one of %s", strings.Join(keys, ", "))
	}
}

func (cfg perfPulsarConfig) describe() string {
	topics := cfg.Topics[0]
	if len(cfg.Topics) > 1 {
		topics = fmt.Sprintf("%d topics %s .. %s", len(cfg.Topics), cfg.Topics[0], cfg.Topics[len(cfg.Topics)-1])
	}
	if cfg.Partitions > 0 {
		topics += fmt.Sprintf(" (%d partitions each)", cfg.Partitions)
	}
	how := "until SIGINT or SIGTERM"
	if cfg.Duration > 0 {
		how = "for " + cfg.Duration.String()
	}
	return fmt.Sprintf("%s at %s, %s, the first %s warm-up", topics, cfg.ServiceURL, how, cfg.Warmup)
}

func (cfg perfProduceConfig) describe() string {
	mode := fmt.Sprintf("closed loop, up to %d pending", cfg.MaxPending)
	if cfg.Rate > 0 {
		mode = fmt.Sprintf("open loop at %g msg/s (up to %d pending)", cfg.Rate, cfg.MaxPending)
	}
	batching := "batching off"
	if cfg.Batching {
		batching = fmt.Sprintf("batching up to %d messages, %d bytes or %s", cfg.BatchMaxMessages, cfg.BatchMaxSize, cfg.BatchMaxDelay)
	}
	return fmt.Sprintf("%s; %d producer(s) per topic, %d-byte messages, %s, %s, compression %s",
		cfg.perfPulsarConfig.describe(), cfg.Producers, cfg.MessageSize, mode, batching, cfg.Compression)
}

func (cfg perfConsumeConfig) describe() string {
	ack := "each message acknowledged"
	if cfg.AckEvery > 1 {
		ack = fmt.Sprintf("cumulative acknowledgement every %d messages", cfg.AckEvery)
	}
	return fmt.Sprintf("%s; subscription %q (%s, from %s), %d consumer(s) per topic, %s",
		cfg.perfPulsarConfig.describe(), cfg.Subscription, cfg.Type, cfg.Position, cfg.Consumers, ack)
}

// perfSignals returns a context that the first SIGINT or SIGTERM cancels;
// after it, a second signal has its default effect (the process exits).
func (a *app) perfSignals() (context.Context, func()) {
	sigs, stopSignals := a.notify()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case sig := <-sigs:
			a.logger.Info("signal: ending the run early", "signal", sig.String())
			stopSignals()
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); stopSignals() }
}

// newPulsarClient returns a client of url that logs to the app's logger
// at warn level and above, and registers its metrics nowhere global.
func (a *app) newPulsarClient(url string, memoryLimit int64) (pulsar.Client, error) {
	log := slog.New(minLevelHandler{Handler: a.logger.Handler(), min: slog.LevelWarn}).With("component", "pulsar-client")
	// Parts of the client log to logrus's standard logger directly.
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.WarnLevel)
	logrus.StandardLogger().ReplaceHooks(logrus.LevelHooks{})
	logrus.AddHook(logrusToSlog{log})
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               url,
		Logger:            pulsarlog.NewLoggerWithSlog(log),
		MetricsRegisterer: prometheus.NewRegistry(),
		MemoryLimitBytes:  memoryLimit,
	})
	if err != nil {
		return nil, fmt.Errorf("pulsar client: %w", err)
	}
	return c, nil
}

// minLevelHandler passes on the records of min and above only.
type minLevelHandler struct {
	slog.Handler
	min slog.Level
}

func (h minLevelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevelHandler{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h minLevelHandler) WithGroup(name string) slog.Handler {
	return minLevelHandler{Handler: h.Handler.WithGroup(name), min: h.min}
}

// logrusToSlog is a logrus hook that passes records on to a slog logger.
type logrusToSlog struct{ log *slog.Logger }

func (h logrusToSlog) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (h logrusToSlog) Fire(e *logrus.Entry) error {
	level := slog.LevelWarn
	if e.Level <= logrus.ErrorLevel {
		level = slog.LevelError
	}
	args := make([]any, 0, 2*len(e.Data))
	for k, v := range e.Data {
		args = append(args, k, v)
	}
	h.log.Log(context.Background(), level, e.Message, args...)
	return nil
}

// checkPartitions prints the partitions of each topic (creating it if the
// broker auto-creates partitioned topics) and fails unless there are
// cfg.Partitions.
func checkPartitions(out io.Writer, c pulsar.Client, cfg perfPulsarConfig) error {
	for _, t := range cfg.Topics {
		names, err := c.TopicPartitions(t)
		if err != nil {
			return fmt.Errorf("topic %s: partitioned metadata: %w", t, err)
		}
		n := 0
		if len(names) != 1 || names[0] != t {
			n = len(names)
		}
		switch {
		case n == cfg.Partitions && n == 0:
			fmt.Fprintf(out, "topic %s: non-partitioned\n", t)
			continue
		case n == cfg.Partitions:
			fmt.Fprintf(out, "topic %s: %d partitions\n", t, n)
			continue
		case n == 0:
			return fmt.Errorf("topic %s is not partitioned, want perf-partitions %d: perf cannot create partitioned topics; create it with magnetar admin topics create-partitioned %s -p %d, or run the broker with --auto-topic-creation partitioned --auto-topic-partitions %d and use a topic that does not exist yet",
				t, cfg.Partitions, t, cfg.Partitions, cfg.Partitions)
		case cfg.Partitions == 0:
			return fmt.Errorf("topic %s has %d partitions: pass --perf-partitions %d to run on it", t, n, n)
		default:
			return fmt.Errorf("topic %s has %d partitions, want perf-partitions %d", t, n, cfg.Partitions)
		}
	}
	return nil
}

// perfProduce runs `magnetar perf produce`. Results go to stdout, logs to
// stderr.
func (a *app) perfProduce(cfg perfProduceConfig) error {
	ctx, stop := a.perfSignals()
	defer stop()
	out := a.stdout
	fmt.Fprintf(out, "magnetar perf produce: %s\n", cfg.describe())
	// The load bounds the memory in flight itself (perf-max-pending).
	client, err := a.newPulsarClient(cfg.ServiceURL, -1)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := checkPartitions(out, client, cfg.perfPulsarConfig); err != nil {
		return err
	}
	var producers []pulsar.Producer
	defer func() {
		for _, p := range producers {
			p.Close()
		}
	}()
	for _, t := range cfg.Topics {
		for range cfg.Producers {
			p, err := client.CreateProducer(pulsar.ProducerOptions{
				Topic:                   t,
				MaxPendingMessages:      cfg.MaxPending,
				DisableBatching:         !cfg.Batching,
				BatchingMaxMessages:     uint(cfg.BatchMaxMessages),
				BatchingMaxSize:         uint(cfg.BatchMaxSize),
				BatchingMaxPublishDelay: cfg.BatchMaxDelay,
				CompressionType:         compressionTypes[cfg.Compression],
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted during setup
				}
				return fmt.Errorf("topic %s: create producer: %w", t, err)
			}
			producers = append(producers, p)
		}
	}
	fmt.Fprintln(out, pulsarProgressHeader)
	res := runProduce(ctx, pulsarSenders(producers...), produceLoad{
		MessageSize: cfg.MessageSize,
		Duration:    cfg.Duration,
		Warmup:      cfg.Warmup,
		Rate:        cfg.Rate,
		MaxPending:  cfg.MaxPending,
		Interval:    time.Second,
	}, func(iv pulsarInterval) { printPulsarInterval(out, iv) })
	printPulsarSummary(out, res, cfg.Warmup)
	if cfg.Rate > 0 {
		fmt.Fprintf(out, "send lag: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
			ms(res.SendLag.Quantile(0.5)), ms(res.SendLag.Quantile(0.99)), ms(res.SendLag.Max()))
	}
	fmt.Fprintf(out, "sent: %d messages, %d acknowledged, %d failed\n", res.Sent, res.Total, res.Failed)
	if res.Failed > 0 {
		return fmt.Errorf("%d of %d sends failed; the first: %w", res.Failed, res.Sent, res.FirstErr)
	}
	return nil
}

// perfConsume runs `magnetar perf consume`. Results go to stdout, logs to
// stderr.
func (a *app) perfConsume(cfg perfConsumeConfig) error {
	ctx, stop := a.perfSignals()
	defer stop()
	out := a.stdout
	fmt.Fprintf(out, "magnetar perf consume: %s\n", cfg.describe())
	client, err := a.newPulsarClient(cfg.ServiceURL, 0)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := checkPartitions(out, client, cfg.perfPulsarConfig); err != nil {
		return err
	}
	msgs := make(chan pulsar.ConsumerMessage, 1000)
	var consumers []pulsar.Consumer
	defer func() {
		for _, c := range consumers {
			c.Close()
		}
	}()
	for _, t := range cfg.Topics {
		for range cfg.Consumers {
			c, err := client.Subscribe(pulsar.ConsumerOptions{
				Topic:                       t,
				SubscriptionName:            cfg.Subscription,
				Type:                        subscriptionTypes[cfg.Type],
				SubscriptionInitialPosition: subscriptionPositions[cfg.Position],
				MessageChannel:              msgs,
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("topic %s: subscribe %q: %w", t, cfg.Subscription, err)
			}
			consumers = append(consumers, c)
		}
	}
	fmt.Fprintf(out, "subscribed: %d consumer(s)\n", len(consumers))
	fmt.Fprintln(out, pulsarProgressHeader)
	res := runConsume(ctx, msgs, consumeLoad{
		Duration: cfg.Duration,
		Warmup:   cfg.Warmup,
		AckEvery: cfg.AckEvery,
		Interval: time.Second,
	}, func(iv pulsarInterval) { printPulsarInterval(out, iv) })
	printPulsarSummary(out, res, cfg.Warmup)
	fmt.Fprintf(out, "received: %d messages, %d acknowledgements failed\n", res.Total, res.Failed)
	if res.Failed > 0 {
		return fmt.Errorf("%d acknowledgements failed; the first: %w", res.Failed, res.FirstErr)
	}
	return nil
}

// pulsarInterval is one progress report: the messages completed in an
// interval, and the totals so far.
type pulsarInterval struct {
	At, Length    time.Duration // end of the interval since the start, and its length
	Messages      int64
	Bytes         int64
	Latency       *latencyHist
	Failures      int64 // in the interval
	Total, Failed int64 // since the start
}

// pulsarResult sums up a run.
type pulsarResult struct {
	Total    int64 // messages completed (acknowledged sends, or received), warm-up included
	Failed   int64 // failed sends, or failed acknowledgements
	FirstErr error
	// After the warm-up: messages, their bytes and latency, and the time
	// from the end of the warm-up to the last completion.
	Messages int64
	Bytes    int64
	Elapsed  time.Duration
	Latency  latencyHist
	SendLag  latencyHist // produce only: how late each send was against its due time
	Sent     int64       // produce only: sends made
	// CPU is this process's CPU time (user and system) over the whole run,
	// for Kafka consume loads and perf all's batched Pulsar produce: the
	// client's own cost when the broker is another process. BrokerCPU is
	// that broker process's over the same run, when perf all started it
	// (0: not measured).
	CPU       time.Duration
	BrokerCPU time.Duration
}

// pulsarMeter tallies the messages of a run as they complete, for the
// progress reports and, from warmEnd on, for the summary. Its methods are
// safe for concurrent use.
type pulsarMeter struct {
	start, warmEnd time.Time

	mu       sync.Mutex
	cur      pulsarInterval // Latency is never nil
	res      pulsarResult
	lastDone time.Time
}

func newPulsarMeter(start time.Time, warmup time.Duration) *pulsarMeter {
	return &pulsarMeter{start: start, warmEnd: start.Add(warmup), cur: pulsarInterval{Latency: new(latencyHist)}}
}

// done records a message of size bytes completed at now with latency lat.
func (m *pulsarMeter) done(now time.Time, lat time.Duration, size int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur.Messages++
	m.cur.Bytes += int64(size)
	m.cur.Latency.Record(lat)
	m.res.Total++
	if !now.Before(m.warmEnd) {
		m.res.Messages++
		m.res.Bytes += int64(size)
		m.res.Latency.Record(lat)
		m.lastDone = now
	}
}

// fail records a failed message.
func (m *pulsarMeter) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur.Failures++
	if m.res.Failed++; m.res.FirstErr == nil {
		m.res.FirstErr = err
	}
}

// interval returns the messages completed since the last call, up to now.
func (m *pulsarMeter) interval(now, last time.Time) pulsarInterval {
	m.mu.Lock()
	defer m.mu.Unlock()
	iv := m.cur
	iv.At, iv.Length = now.Sub(m.start), now.Sub(last)
	iv.Total, iv.Failed = m.res.Total, m.res.Failed
	m.cur = pulsarInterval{Latency: new(latencyHist)}
	return iv
}

// result returns the summary.
func (m *pulsarMeter) result() *pulsarResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	res := m.res
	if res.Messages > 0 {
		res.Elapsed = m.lastDone.Sub(m.warmEnd)
	}
	return &res
}

// reportEvery calls report with m's interval every d until the returned
// function is called; that reports the rest (if any messages or errors
// came in it) and returns once report has returned. report runs on one
// goroutine, one call at a time.
func reportEvery(m *pulsarMeter, d time.Duration, report func(pulsarInterval)) (finish func()) {
	done := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		t := time.NewTicker(d)
		defer t.Stop()
		last := m.start
		for {
			select {
			case now := <-t.C:
				report(m.interval(now, last))
				last = now
			case <-done:
				iv := m.interval(time.Now(), last)
				if iv.Messages > 0 || iv.Failures > 0 {
					report(iv)
				}
				return
			}
		}
	}()
	return func() {
		close(done)
		<-reported
	}
}

// asyncSender is what the produce load needs of a producer: sends that
// do not wait. send sends s.payload and calls s.finish exactly once, on
// any goroutine, when the message is acknowledged or failed; from then
// on the payload and the slot are the load's again.
type asyncSender interface {
	send(s *sendSlot)
}

// sendSlot is one message in flight. The produce load has MaxPending of
// them, in one array, and reuses each for message after message, so that
// a send costs the load no allocation. A sender may keep its own
// per-slot state in state (the Kafka sender keeps the record and its
// promise there).
type sendSlot struct {
	payload []byte
	due     time.Time // when the message was to go (open loop), or went
	sent    time.Time // when it went
	pool    *slotPool
	index   int // in the load's array
	state   any
}

// slotPool is where finished slots go back to, and where the load's
// sending goroutine takes them from: all the free ones at once, and when
// none is free it sleeps until enough are (wait). So a closed loop with
// every slot in flight wakes once per batch of acknowledgements, not once
// per message: a channel of slots woke the sender for each record, a
// futex wake and a context switch per record, and made the Kafka load
// spend more CPU than the broker it measured.
//
// The free slots are a set of indexes, which the loop takes in the
// array's order (slotSet.pop), not in the order they finished: with
// several partitions, records come back a partition's batch at a time,
// and reusing slots in that order shuffled them a little more on every
// round, until each send, each acknowledgement and the client's own
// per-record work reached a slot at random in megabytes of them, a cache
// miss apiece (on 4 partitions a quarter of the Kafka client's CPU, not
// seen on 1 partition, where records come back in the order they went).
type slotPool struct {
	m *pulsarMeter

	mu   sync.Mutex
	free slotSet       // given back
	need int           // how many free slots wake the sender; 0: it is not waiting
	wake chan struct{} // capacity 1
}

// slotSet is a set of slot indexes, one bit each.
type slotSet struct {
	bits []uint64
	n    int // bits set
	w    int // pop's place: the words before it are zero
}

func newSlotSet(slots int) slotSet {
	return slotSet{bits: make([]uint64, (slots+63)/64)}
}

func (f *slotSet) add(i int) {
	f.bits[i/64] |= 1 << (i % 64)
	f.n++
}

// pop removes and returns the lowest index in the set; false if empty.
func (f *slotSet) pop() (int, bool) {
	for ; f.w < len(f.bits); f.w++ {
		if b := f.bits[f.w]; b != 0 {
			f.bits[f.w] = b & (b - 1)
			f.n--
			return f.w*64 + bits.TrailingZeros64(b), true
		}
	}
	return 0, false
}

// finish records the message's outcome and gives the slot back.
func (s *sendSlot) finish(err error) {
	now := time.Now()
	p := s.pool
	if err != nil {
		p.m.fail(err)
	} else {
		p.m.done(now, now.Sub(s.due), len(s.payload))
	}
	p.mu.Lock()
	p.free.add(s.index)
	wake := p.need > 0 && p.free.n >= p.need
	if wake {
		p.need = 0
	}
	p.mu.Unlock()
	if wake {
		select {
		case p.wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// swap returns the free slots, taking mine (empty) as the pool's set for
// the next ones.
func (p *slotPool) swap(mine slotSet) slotSet {
	mine.w = 0
	p.mu.Lock()
	defer p.mu.Unlock()
	mine, p.free = p.free, mine
	return mine
}

// wait returns true once n slots are free, false if ctx ends first.
func (p *slotPool) wait(ctx context.Context, n int) bool {
	for {
		p.mu.Lock()
		if p.free.n >= n {
			p.need = 0
			p.mu.Unlock()
			return true
		}
		p.need = max(n, 1)
		p.mu.Unlock()
		select {
		case <-p.wake: // perhaps an old one: look again
		case <-ctx.Done():
			p.mu.Lock()
			p.need = 0
			p.mu.Unlock()
			return false
		}
	}
}

// pulsarSender sends through a Pulsar producer.
type pulsarSender struct{ p pulsar.Producer }

func (ps pulsarSender) send(s *sendSlot) {
	done, _ := s.state.(func(pulsar.MessageID, *pulsar.ProducerMessage, error))
	if done == nil {
		done = func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { s.finish(err) }
		s.state = done
	}
	ps.p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: s.payload}, done)
}

// pulsarSenders adapts producers to the produce load.
func pulsarSenders(producers ...pulsar.Producer) []asyncSender {
	senders := make([]asyncSender, len(producers))
	for i, p := range producers {
		senders[i] = pulsarSender{p}
	}
	return senders
}

// produceLoad describes the sends of a produce run.
type produceLoad struct {
	MessageSize int
	Duration    time.Duration // 0: until ctx ends
	Warmup      time.Duration
	// Rate > 0 is an open loop: message i is due at start + i/Rate and its
	// latency runs from then, not from when it could be sent (no
	// coordinated omission). Rate 0 is a closed loop: each message is sent
	// as soon as one of MaxPending slots is free, timed from the send.
	Rate       float64
	MaxPending int
	Interval   time.Duration // between progress reports
	// Stamp gives each message its own copy of the payload with its
	// first 8 bytes set to its send time (Unix nanoseconds, big-endian),
	// for end-to-end latency (sentAt reads it).
	Stamp bool
}

// slotBatch is how many acknowledgements wake a closed loop that has
// every slot in flight (closedLoopBatch).
const slotBatch = 64

// closedLoopBatch is how many of n slots a closed loop with every slot in
// flight waits for: slotBatch, but never more than a quarter of them, so
// that a small pipeline does not drain before the loop sends again.
func closedLoopBatch(n int) int { return max(1, min(slotBatch, n/4)) }

// runProduce sends messages round robin over senders as cfg says until
// cfg.Duration has passed or ctx ends, then waits for the sends
// outstanding (the client fails them after its send timeout). A failed
// send is counted and the run goes on. report is called as reportEvery
// says.
func runProduce(ctx context.Context, senders []asyncSender, cfg produceLoad, report func(pulsarInterval)) *pulsarResult {
	payload := make([]byte, cfg.MessageSize)
	rng := rand.New(rand.NewPCG(1, 2)) // incompressible, and the same every run
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	start := time.Now()
	lctx, stop := ctx, func() {}
	var end time.Time
	if cfg.Duration > 0 {
		end = start.Add(cfg.Duration)
		lctx, stop = context.WithDeadline(ctx, end)
	}
	defer stop()
	m := newPulsarMeter(start, cfg.Warmup)
	finish := reportEvery(m, cfg.Interval, report)
	var lag latencyHist // the send loop's own

	// Invariant: a slot is in the pool from its finish until the loop
	// takes it for a send; having every slot back therefore waits for
	// every send. The slots are one array, handed out in its order (see
	// slotPool), so the loop, the client and the acknowledgements walk
	// through memory rather than jumping about it.
	slots := make([]sendSlot, max(cfg.MaxPending, 1))
	pool := &slotPool{m: m, free: newSlotSet(len(slots)), wake: make(chan struct{}, 1)}
	stash := newSlotSet(len(slots)) // taken from the pool, not yet sent
	for i := range slots {
		s := &slots[i]
		s.payload, s.pool, s.index = payload, pool, i
		if cfg.Stamp {
			s.payload = slices.Clone(payload)
		}
		stash.add(i)
	}
	// A closed loop with every slot in flight waits for a batch of them;
	// an open loop sends a due message as soon as any slot is free.
	batch := 1
	if cfg.Rate == 0 {
		batch = closedLoopBatch(len(slots))
	}
	take := func() *sendSlot {
		for {
			if i, ok := stash.pop(); ok {
				return &slots[i]
			}
			if stash = pool.swap(stash); stash.n == 0 && !pool.wait(lctx, batch) {
				return nil
			}
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
send:
	for i := 0; lctx.Err() == nil; i++ {
		due := start
		if cfg.Rate > 0 {
			due = start.Add(time.Duration(float64(i) * float64(time.Second) / cfg.Rate))
			if !end.IsZero() && !due.Before(end) {
				break
			}
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-lctx.Done():
					break send
				}
			}
		}
		s := take()
		if s == nil {
			break send
		}
		now := time.Now()
		if cfg.Rate == 0 {
			due = now
		}
		lag.Record(now.Sub(due))
		s.due, s.sent = due, now
		if cfg.Stamp {
			binary.BigEndian.PutUint64(s.payload, uint64(now.UnixNano()))
		}
		senders[i%len(senders)].send(s)
	}
	timer.Stop()
	pool.wait(context.Background(), len(slots)-stash.n) // the sends outstanding
	finish()
	res := m.result()
	res.SendLag, res.Sent = lag, int64(lag.Count())
	return res
}

// consumeLoad describes a consume run.
type consumeLoad struct {
	Duration time.Duration // 0: until ctx ends
	Warmup   time.Duration
	AckEvery int           // 1: acknowledge each message; above: cumulatively every AckEvery per consumer
	Interval time.Duration // between progress reports
}

// runConsume receives from msgs until cfg.Duration has passed or ctx ends,
// timing each message from its publish time and acknowledging it.
func runConsume(ctx context.Context, msgs <-chan pulsar.ConsumerMessage, cfg consumeLoad, report func(pulsarInterval)) *pulsarResult {
	start := time.Now()
	lctx, stop := ctx, func() {}
	if cfg.Duration > 0 {
		lctx, stop = context.WithTimeout(ctx, cfg.Duration)
	}
	defer stop()
	m := newPulsarMeter(start, cfg.Warmup)
	finish := reportEvery(m, cfg.Interval, report)
	type unacked struct {
		n    int
		last pulsar.Message
	}
	pending := map[pulsar.Consumer]*unacked{} // cumulative acks only
	ack := func(c pulsar.Consumer, msg pulsar.Message) {
		var err error
		if cfg.AckEvery == 1 {
			err = c.Ack(msg)
		} else {
			err = c.AckCumulative(msg)
		}
		if err != nil {
			m.fail(err)
		}
	}
	for {
		var cm pulsar.ConsumerMessage
		select {
		case cm = <-msgs:
		case <-lctx.Done():
			for c, u := range pending {
				if u.n > 0 {
					ack(c, u.last)
				}
			}
			finish()
			return m.result()
		}
		now := time.Now()
		m.done(now, now.Sub(cm.PublishTime()), len(cm.Payload()))
		if cfg.AckEvery == 1 {
			ack(cm.Consumer, cm.Message)
			continue
		}
		u := pending[cm.Consumer]
		if u == nil {
			u = &unacked{}
			pending[cm.Consumer] = u
		}
		if u.n, u.last = u.n+1, cm.Message; u.n == cfg.AckEvery {
			ack(cm.Consumer, cm.Message)
			u.n, u.last = 0, nil
		}
	}
}

const pulsarProgressHeader = "     time       total       msg/s      MB/s    p50 ms    p99 ms  p99.9 ms    max ms    errors"

func printPulsarInterval(w io.Writer, iv pulsarInterval) {
	h := iv.Latency
	fmt.Fprintf(w, "%8.2fs %11d %11.0f %9.2f %9.3f %9.3f %9.3f %9.3f %9d\n", iv.At.Seconds(), iv.Total,
		perSecond(iv.Messages, iv.Length), mbps(iv.Bytes, iv.Length),
		ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()), iv.Failed)
}

func printPulsarSummary(w io.Writer, res *pulsarResult, warmup time.Duration) {
	fmt.Fprintf(w, "summary: %d messages, %.2f MB in %.2fs: %.0f msg/s, %.2f MB/s (after the %s warm-up)\n",
		res.Messages, float64(res.Bytes)/1e6, res.Elapsed.Seconds(),
		perSecond(res.Messages, res.Elapsed), mbps(res.Bytes, res.Elapsed), warmup)
	h := &res.Latency
	fmt.Fprintf(w, "latency: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms, mean %.3f ms\n",
		ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()), ms(h.Mean()))
}
