package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/protocol/kafka"
	"github.com/magnetar-io/magnetar/protocol/pulsar"
	"github.com/magnetar-io/magnetar/protocol/pulsar/frame"
)

// brokerSettings tune the broker (topics, messages, subscriptions);
// `magnetar standalone` runs one.
var brokerSettings = []setting{
	{"auto-topic-creation", "non-partitioned", "mode", "what a client's first use of a missing topic creates: non-partitioned, partitioned (with auto-topic-partitions partitions) or off (refused with TopicNotFound)"},
	{"auto-topic-partitions", "1", "count", "partitions of topics auto-created as partitioned"},
	{"broker-deduplication-enabled", "false", "bool", "drop messages a producer sends again (same producer name and sequence id), also across broker restarts"},
	{"schema-compatibility", "FULL", "strategy", "how a new schema version must relate to the topic's existing ones: ALWAYS_COMPATIBLE, ALWAYS_INCOMPATIBLE, BACKWARD, FORWARD, FULL, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE or FULL_TRANSITIVE"},
	{"schema-validation-enforced", "false", "bool", "refuse producers without a schema on topics that have one"},
	{"max-message-size", strconv.Itoa(frame.DefaultMaxMessageSize), "bytes", "largest message (or batch) a client may send; announced to Pulsar clients; Kafka record batches above it get MESSAGE_TOO_LARGE"},
	{"kafka-max-request-size", strconv.Itoa(kafka.DefaultMaxRequestSize), "bytes", "largest Kafka request accepted; a larger one closes the connection (Kafka's socket.request.max.bytes)"},
	{"kafka-read-ahead-size", strconv.Itoa(kafka.DefaultReadAheadSize), "bytes", "memory for entries read ahead of Kafka consumers that are behind (read while the client decodes the last fetch), shared by all partitions; 0: no read-ahead"},
	{"kafka-group-initial-rebalance-delay", "3s", "duration", "how long a Kafka consumer group that was empty waits for more members before its first assignment (Kafka's group.initial.rebalance.delay.ms); 0: no wait"},
	{"kafka-namespace", "public/default", "tenant/namespace", "where the topics Kafka clients name without a tenant and namespace live (\"foo\" is persistent://public/default/foo)"},
	{"entry-cache-size", "268435456", "bytes", "memory for recently written entries, shared by all topics; tailing consumers read from it"},
	{"max-unacked-messages-per-consumer", "50000", "count", "a Shared or Key_Shared consumer holding this many unacknowledged messages gets no more until it acknowledges"},
	{"message-expiry-check-interval", "1m", "duration", "how often namespace policies are enforced on loaded topics: messages older than the namespace's message TTL are expired (acknowledged for every subscription)"},
	{"backlog-quota-check-interval", "1m", "duration", "how often namespace backlog quotas are checked and applied on loaded topics (they are also checked when a producer is created)"},
	{"metrics-max-topics", strconv.Itoa(broker.DefaultMetricsMaxTopics), "count", "topics exported on /metrics with their own topic label; the others are added up per namespace under topic=\"_other\" (0: namespace totals only)"},
}

// brokerConfig is the checked broker configuration.
type brokerConfig struct {
	AutoTopicCreation   broker.AutoTopicCreation
	AutoTopicPartitions int
	Deduplication       bool
	SchemaCompatibility broker.CompatibilityStrategy
	SchemaValidation    bool
	MaxMessageSize      int
	KafkaMaxRequestSize int
	KafkaReadAheadSize  int64
	KafkaTenant         string
	KafkaNamespace      string
	// KafkaGroupInitialRebalanceDelay: negative for none.
	KafkaGroupInitialRebalanceDelay time.Duration
	EntryCacheSize                  int64
	MaxUnackedPerConsumer           int
	MessageExpiryCheck              time.Duration
	BacklogQuotaCheck               time.Duration
	MetricsMaxTopics                int
	// ServiceURL is the advertised URL of the http listener (not a
	// setting: the caller fills it in), recorded in the cluster's data.
	ServiceURL string
	// Cluster is the cluster's name ("" : standalone's); EnsembleSize,
	// WriteQuorum and AckQuorum those of new ledgers (0: 1/1/1). Set by
	// magnetar broker; standalone leaves them.
	Cluster                              string
	EnsembleSize, WriteQuorum, AckQuorum int
	// OwnershipLossTimeout: how long a broker cut off from ZooKeeper keeps
	// its bundles (the session timeout; 0: the broker's default).
	OwnershipLossTimeout time.Duration
	// Load reports and shedding (magnetar broker's settings; 0: defaults).
	LoadReportInterval, LoadShedInterval time.Duration
	LoadShedThreshold                    float64
}

// kafkaReadAhead is the Kafka server's ReadAheadSize: off (negative) for
// a setting of 0.
func (c brokerConfig) kafkaReadAhead() int64 {
	if c.KafkaReadAheadSize == 0 {
		return -1
	}
	return c.KafkaReadAheadSize
}

func resolveBroker(sv *settingValues, list []setting) (brokerConfig, error) {
	var cfg brokerConfig
	var err error
	s := func(name string) setting { return lookupSetting(list, name) }
	if cfg.AutoTopicCreation, err = check(sv, s("auto-topic-creation"), broker.ParseAutoTopicCreation); err != nil {
		return cfg, err
	}
	if cfg.AutoTopicPartitions, err = check(sv, s("auto-topic-partitions"), parseCount(100_000)); err != nil {
		return cfg, err
	}
	if cfg.Deduplication, err = check(sv, s("broker-deduplication-enabled"), parseBool); err != nil {
		return cfg, err
	}
	if cfg.SchemaCompatibility, err = check(sv, s("schema-compatibility"), broker.ParseCompatibilityStrategy); err != nil {
		return cfg, err
	}
	if cfg.SchemaValidation, err = check(sv, s("schema-validation-enforced"), parseBool); err != nil {
		return cfg, err
	}
	if cfg.MaxMessageSize, err = check(sv, s("max-message-size"), parseCount(1<<30)); err != nil {
		return cfg, err
	}
	if cfg.MaxMessageSize < 1024 {
		return cfg, fmt.Errorf("--max-message-size %d: must be at least 1024", cfg.MaxMessageSize)
	}
	if cfg.KafkaMaxRequestSize, err = check(sv, s("kafka-max-request-size"), parseCount(1<<31-1)); err != nil {
		return cfg, err
	}
	if cfg.KafkaMaxRequestSize < cfg.MaxMessageSize+1024 {
		return cfg, fmt.Errorf("--kafka-max-request-size %d: must be above --max-message-size (%d) by at least 1024", cfg.KafkaMaxRequestSize, cfg.MaxMessageSize)
	}
	readAhead, err := check(sv, s("kafka-read-ahead-size"), parseIntRange(0, 1<<40))
	if err != nil {
		return cfg, err
	}
	cfg.KafkaReadAheadSize = int64(readAhead)
	kns, err := check(sv, s("kafka-namespace"), parseNamespace)
	if err != nil {
		return cfg, err
	}
	cfg.KafkaTenant, cfg.KafkaNamespace = kns[0], kns[1]
	if cfg.KafkaGroupInitialRebalanceDelay, err = check(sv, s("kafka-group-initial-rebalance-delay"), parseDurationMin0); err != nil {
		return cfg, err
	}
	if cfg.KafkaGroupInitialRebalanceDelay == 0 {
		cfg.KafkaGroupInitialRebalanceDelay = -1 // none, as asked
	}
	if cfg.EntryCacheSize, err = check(sv, s("entry-cache-size"), parsePositiveInt); err != nil {
		return cfg, err
	}
	if cfg.MessageExpiryCheck, err = check(sv, s("message-expiry-check-interval"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.BacklogQuotaCheck, err = check(sv, s("backlog-quota-check-interval"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.MaxUnackedPerConsumer, err = check(sv, s("max-unacked-messages-per-consumer"), parseCount(1<<31-1)); err != nil {
		return cfg, err
	}
	cfg.MetricsMaxTopics, err = check(sv, s("metrics-max-topics"), parseIntRange(0, 1_000_000))
	return cfg, err
}

// brokerStack is a running broker: bookie client, managed ledgers,
// topics and the Pulsar protocol server.
type brokerStack struct {
	log     *slog.Logger
	bookies *client.Client
	cache   *ledger.Cache
	ledgers *ledger.Factory
	broker  *broker.Broker
	metrics *broker.MetricsCollector // registered with reg; nil until then
	reg     prometheus.Registerer
	pulsar  *pulsar.Server
	kafka   *kafka.Server
	served  chan error
}

// brokerListeners are the protocol listeners of a broker and the
// host:port each advertises.
type brokerListeners struct {
	pulsar, kafka                     net.Listener
	pulsarAdvertised, kafkaAdvertised string
	// localBookie returns the bookie at addr when it is in this process
	// (the standalone's), else nil; nil: every bookie over TCP.
	localBookie func(addr string) client.Local
}

// startBroker starts a broker over store, serving Pulsar and Kafka on
// their listeners. On error it closes what it opened; the caller closes
// the listeners.
func startBroker(cfg brokerConfig, name string, store meta.Store, ls brokerListeners,
	reg prometheus.Registerer, log *slog.Logger) (_ *brokerStack, err error) {
	pulsarLn, pulsarAdvertised := ls.pulsar, ls.pulsarAdvertised
	b := &brokerStack{log: log, served: make(chan error, 2)}
	defer func() {
		if err != nil {
			b.close(context.Background())
		}
	}()
	if b.bookies, err = client.New(client.Config{Meta: store, Local: ls.localBookie, Logger: log.With("component", "bookie-client")}); err != nil {
		return nil, fmt.Errorf("bookie client: %w", err)
	}
	if b.cache, err = ledger.NewCache(ledger.CacheConfig{MaxBytes: cfg.EntryCacheSize, Registerer: reg, Logger: log}); err != nil {
		return nil, err
	}
	lat, err := addLatency(reg)
	if err != nil {
		return nil, err
	}
	if b.ledgers, err = ledger.NewFactory(ledger.Config{Bookies: ledger.ClientBookies(b.bookies), Meta: store, Cache: b.cache,
		EnsembleSize: cfg.EnsembleSize, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum,
		AddLatency: lat, Logger: log}); err != nil {
		return nil, err
	}
	kafkaHost, kafkaPort, err := net.SplitHostPort(ls.kafkaAdvertised)
	if err != nil {
		return nil, fmt.Errorf("kafka advertised address %q: %w", ls.kafkaAdvertised, err)
	}
	port, err := strconv.Atoi(kafkaPort)
	if err != nil {
		return nil, fmt.Errorf("kafka advertised address %q: bad port", ls.kafkaAdvertised)
	}
	if b.broker, err = broker.New(broker.Config{Meta: store, Ledgers: b.ledgers, Name: name,
		Advertised: broker.BrokerInfo{ID: pulsarAdvertised, PulsarURL: "pulsar://" + pulsarAdvertised, WebURL: cfg.ServiceURL,
			KafkaHost: kafkaHost, KafkaPort: int32(port)},
		Version: currentBuild().Version, OwnershipLossTimeout: cfg.OwnershipLossTimeout,
		LoadReportInterval: cfg.LoadReportInterval, LoadShedInterval: cfg.LoadShedInterval, LoadShedThreshold: cfg.LoadShedThreshold,
		Cluster: cmp.Or(cfg.Cluster, standaloneCluster), ServiceURL: cfg.ServiceURL, BrokerServiceURL: "pulsar://" + pulsarAdvertised,
		AutoTopicCreation: cfg.AutoTopicCreation, AutoTopicPartitions: cfg.AutoTopicPartitions,
		Deduplication: cfg.Deduplication, MaxUnackedPerConsumer: cfg.MaxUnackedPerConsumer,
		SchemaCompatibility: cfg.SchemaCompatibility, SchemaValidationEnforced: cfg.SchemaValidation,
		MessageExpiryCheckInterval: cfg.MessageExpiryCheck, BacklogQuotaCheckInterval: cfg.BacklogQuotaCheck,
		KafkaTenant: cfg.KafkaTenant, KafkaNamespace: cfg.KafkaNamespace,
		Logger: log.With("component", "broker")}); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = b.broker.Bootstrap(bctx) // the cluster, tenant public, namespace public/default
	cancel()
	if err != nil {
		return nil, fmt.Errorf("broker: creating the cluster and public/default: %w", err)
	}
	if err = b.registerMetrics(cfg, reg); err != nil {
		return nil, err
	}
	kafkaLat, publishLat, err := protocolLatency(reg)
	if err != nil {
		return nil, err
	}
	if b.pulsar, err = pulsar.NewServer(pulsar.Config{Broker: b.broker, AdvertisedURL: "pulsar://" + pulsarAdvertised,
		MaxMessageSize: cfg.MaxMessageSize, ServerVersion: "magnetar " + currentBuild().Version,
		PublishLatency: publishLat, Logger: log.With("component", "pulsar")}); err != nil {
		return nil, err
	}
	kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
	defer kcancel()
	if b.kafka, err = kafka.NewServer(kctx, kafka.Config{Broker: b.broker, AdvertisedHost: kafkaHost, AdvertisedPort: int32(port),
		MaxRequestSize: cfg.KafkaMaxRequestSize, MaxMessageSize: cfg.MaxMessageSize,
		ReadAheadSize:         cfg.kafkaReadAhead(),
		InitialRebalanceDelay: cfg.KafkaGroupInitialRebalanceDelay,
		RequestLatency:        kafkaLat,
		Logger:                log.With("component", "kafka")}); err != nil {
		return nil, err
	}
	go func() { b.served <- b.pulsar.Serve(pulsarLn) }()
	go func() { b.served <- b.kafka.Serve(ls.kafka) }()
	return b, nil
}

// close stops serving and closes topics, managed ledgers and the bookie
// client, within ctx.
func (b *brokerStack) close(ctx context.Context) error {
	var errs []error
	// No new connections; topics close (producers and consumers are told,
	// appends in flight finish and their receipts are queued, cursors are
	// written); then connections close once their queues are written.
	if b.pulsar != nil {
		b.pulsar.StopAccepting()
	}
	if b.kafka != nil {
		b.kafka.StopAccepting()
	}
	if b.broker != nil {
		if err := b.broker.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("topics: %w", err))
		}
	}
	if b.pulsar != nil {
		if err := b.pulsar.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pulsar connections: %w", err))
		}
	}
	if b.kafka != nil {
		if err := b.kafka.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("kafka connections: %w", err))
		}
	}
	if b.ledgers != nil {
		if err := b.ledgers.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("managed ledgers: %w", err))
		}
	}
	if b.metrics != nil {
		b.reg.Unregister(b.metrics)
	}
	if b.cache != nil {
		b.cache.Close()
	}
	if b.bookies != nil {
		b.bookies.Close()
	}
	return errors.Join(errs...)
}

// parseNamespace parses tenant/namespace.
func parseNamespace(s string) ([2]string, error) {
	tenant, ns, ok := strings.Cut(s, "/")
	if !ok || tenant == "" || ns == "" || strings.Contains(ns, "/") {
		return [2]string{}, errors.New("want tenant/namespace")
	}
	if _, err := broker.ParseTopicName(tenant + "/" + ns + "/x"); err != nil {
		return [2]string{}, fmt.Errorf("not a valid tenant/namespace: %v", err)
	}
	return [2]string{tenant, ns}, nil
}

// parseDurationMin0 parses a duration of 0 or more.
func parseDurationMin0(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 3s or 0s")
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}
