package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// AutoTopicCreation says what happens when a client uses a topic that
// does not exist.
type AutoTopicCreation int

const (
	// AutoCreateNonPartitioned creates a non-partitioned topic (Pulsar's
	// default).
	AutoCreateNonPartitioned AutoTopicCreation = iota
	// AutoCreatePartitioned creates a partitioned topic with
	// Config.AutoTopicPartitions partitions.
	AutoCreatePartitioned
	// AutoCreateOff refuses: the topic must be created first.
	AutoCreateOff
)

// ParseAutoTopicCreation parses "non-partitioned", "partitioned" or "off".
func ParseAutoTopicCreation(s string) (AutoTopicCreation, error) {
	switch strings.ToLower(s) {
	case "non-partitioned", "nonpartitioned":
		return AutoCreateNonPartitioned, nil
	case "partitioned":
		return AutoCreatePartitioned, nil
	case "off", "false", "none":
		return AutoCreateOff, nil
	}
	return 0, fmt.Errorf("auto topic creation %q: want non-partitioned, partitioned or off", s)
}

func (a AutoTopicCreation) String() string {
	switch a {
	case AutoCreateNonPartitioned:
		return "non-partitioned"
	case AutoCreatePartitioned:
		return "partitioned"
	case AutoCreateOff:
		return "off"
	}
	return fmt.Sprintf("AutoTopicCreation(%d)", int(a))
}

// Defaults for Config fields left zero.
const (
	DefaultAutoTopicPartitions         = 1
	DefaultMaxUnackedPerConsumer       = 50_000
	DefaultDedupSnapshotInterval       = 1000
	DefaultMaxPendingPublishesPerTopic = 0 // unbounded: producers bound themselves
	DefaultMessageExpiryCheckInterval  = time.Minute
	DefaultBacklogQuotaCheckInterval   = time.Minute
	DefaultOwnershipLossTimeout        = 30 * time.Second
	DefaultLoadReportInterval          = 10 * time.Second
	DefaultLoadShedInterval            = time.Minute
	DefaultLoadShedThreshold           = 1.5
)

// Config configures a Broker. It is validated once, by New.
type Config struct {
	// Meta is the metadata store. Required.
	Meta meta.Store
	// Ledgers opens the managed ledgers of topics. Required. Not closed by
	// the broker.
	Ledgers *ledger.Factory
	// Name names this broker in broker-assigned producer names
	// ("<Name>-<n>"). Default "standalone".
	Name string
	// Cluster is the name of the cluster this broker belongs to (default
	// "standalone"); ServiceURL ("http://host:port") and BrokerServiceURL
	// ("pulsar://host:port") are recorded in its cluster data by Bootstrap.
	Cluster          string
	ServiceURL       string
	BrokerServiceURL string

	AutoTopicCreation   AutoTopicCreation
	AutoTopicPartitions int // default 1

	// Deduplication enables message deduplication by producer name and
	// sequence id on every topic.
	Deduplication bool
	// DedupSnapshotInterval: the producers' last sequence ids are stored
	// every this many entries (default 1000); on load, the entries after
	// the snapshot are read to recover the rest.
	DedupSnapshotInterval int

	// MaxUnackedPerConsumer: a Shared or Key_Shared consumer holding this
	// many unacknowledged messages gets no more until it acknowledges
	// (default 50,000; negative: no limit).
	MaxUnackedPerConsumer int

	// SchemaCompatibility is the compatibility strategy of topic schemas
	// (default FULL); SchemaValidationEnforced refuses producers without
	// a schema on topics that have one.
	SchemaCompatibility      CompatibilityStrategy
	SchemaValidationEnforced bool

	// MessageExpiryCheckInterval: how often the namespace policies are
	// enforced on loaded topics (enforce.go): messages past the message
	// TTL are expired, retention re-applied. Default 1 min; negative:
	// never (retention still applies at load and on policy changes).
	MessageExpiryCheckInterval time.Duration
	// BacklogQuotaCheckInterval: how often backlog quotas are checked and
	// applied on loaded topics (quota.go); they are also checked when a
	// producer is created. Default 1 min; negative: only then.
	BacklogQuotaCheckInterval time.Duration

	// KafkaTenant and KafkaNamespace hold the topics Kafka clients name
	// without a tenant and namespace ("foo" is
	// persistent://KafkaTenant/KafkaNamespace/foo). Default public/default.
	KafkaTenant    string
	KafkaNamespace string

	// Advertised is how clients reach this broker (ID, PulsarURL, WebURL,
	// Kafka host and port); lookups answer with it and it is registered
	// under /brokers. ID defaults to Name. NodeID and Instance are set by
	// the broker.
	Advertised BrokerInfo
	// Version is recorded in the broker's registration.
	Version string
	// OwnershipLossTimeout: a broker cut off from the metadata store this
	// long gives up its bundles (closes their topics), as its session may
	// have expired and another broker may own them. Default 30 s; set it
	// to the store's session timeout.
	OwnershipLossTimeout time.Duration
	// LoadReportInterval: how often the broker's load is written into its
	// registration (default 10 s). LoadShedInterval: how often it checks
	// whether to shed a bundle (default 1 min; negative: never);
	// LoadShedThreshold: how far above the cluster's average it must be
	// (default 1.5). See load.go.
	LoadReportInterval time.Duration
	LoadShedInterval   time.Duration
	LoadShedThreshold  float64

	// Clock gives the time of broker-side decisions. Default time.Now.
	Clock  func() time.Time
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Meta == nil:
		return c, errors.New("broker: Config.Meta is required")
	case c.Ledgers == nil:
		return c, errors.New("broker: Config.Ledgers is required")
	}
	if c.Name == "" {
		c.Name = "standalone"
	}
	if c.Cluster == "" {
		c.Cluster = "standalone"
	}
	if err := checkNamePart(c.Cluster); err != nil {
		return c, fmt.Errorf("broker: Cluster %q %s", c.Cluster, err)
	}
	if c.AutoTopicPartitions == 0 {
		c.AutoTopicPartitions = DefaultAutoTopicPartitions
	}
	if c.AutoTopicPartitions < 1 {
		return c, fmt.Errorf("broker: AutoTopicPartitions %d: want ≥ 1", c.AutoTopicPartitions)
	}
	if c.DedupSnapshotInterval == 0 {
		c.DedupSnapshotInterval = DefaultDedupSnapshotInterval
	}
	if c.DedupSnapshotInterval < 1 {
		return c, fmt.Errorf("broker: DedupSnapshotInterval %d: want ≥ 1", c.DedupSnapshotInterval)
	}
	if c.MaxUnackedPerConsumer == 0 {
		c.MaxUnackedPerConsumer = DefaultMaxUnackedPerConsumer
	}
	if c.MessageExpiryCheckInterval == 0 {
		c.MessageExpiryCheckInterval = DefaultMessageExpiryCheckInterval
	}
	if c.BacklogQuotaCheckInterval == 0 {
		c.BacklogQuotaCheckInterval = DefaultBacklogQuotaCheckInterval
	}
	if c.KafkaTenant == "" {
		c.KafkaTenant = DefaultTenant
	}
	if c.KafkaNamespace == "" {
		c.KafkaNamespace = DefaultNamespace
	}
	for _, v := range []string{c.KafkaTenant, c.KafkaNamespace} {
		if err := checkNamePart(v); err != nil {
			return c, fmt.Errorf("broker: Kafka tenant/namespace %q %s", v, err)
		}
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.OwnershipLossTimeout <= 0 {
		c.OwnershipLossTimeout = DefaultOwnershipLossTimeout
	}
	if c.LoadReportInterval <= 0 {
		c.LoadReportInterval = DefaultLoadReportInterval
	}
	if c.LoadShedInterval == 0 {
		c.LoadShedInterval = DefaultLoadShedInterval
	}
	if c.LoadShedThreshold == 0 {
		c.LoadShedThreshold = DefaultLoadShedThreshold
	}
	if c.LoadShedThreshold < 1 {
		return c, fmt.Errorf("broker: LoadShedThreshold %v: want ≥ 1", c.LoadShedThreshold)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Errors the broker returns (wrapped, naming the topic or subscription);
// the protocols map them to their error codes.
var (
	ErrTopicNotFound        = errors.New("topic not found")
	ErrProducerBusy         = errors.New("producer busy")
	ErrConsumerBusy         = errors.New("consumer busy")
	ErrSubscriptionNotFound = errors.New("subscription not found")
	ErrSubscriptionBusy     = errors.New("subscription busy")
	ErrSubscriptionType     = errors.New("subscription type mismatch")
	ErrInvalidRequest       = errors.New("invalid request")
	ErrDuplicateUnknown     = errors.New("duplicate of a message still being stored")
	ErrTopicClosed          = errors.New("topic closed")
	ErrBrokerClosed         = errors.New("broker closed")
	ErrTopicTerminated      = errors.New("topic terminated")

	// Administration (tenants, namespaces, clusters, topics).
	ErrClusterNotFound    = errors.New("cluster not found")
	ErrTenantNotFound     = errors.New("tenant not found")
	ErrNamespaceNotFound  = errors.New("namespace not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrNotEmpty           = errors.New("not empty")
	ErrPreconditionFailed = errors.New("precondition failed")
)

// Broker holds the topics this broker serves. Topics are loaded on first
// use and stay loaded until Close.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	schemas *SchemaRegistry

	producerSeq atomic.Int64
	kafkaIDs    kafkaProducerIDs
	kafkaNames  kafkaNameCache // KafkaTopicName's
	consumerSeq atomic.Uint64

	enforce *enforcer  // periodic enforcement of namespace policies (enforce.go)
	own     *ownership // bundle ownership (ownership.go)

	mu     sync.Mutex
	topics map[string]*topicLoad
	closed bool
}

// topicLoad is a topic being loaded or loaded; done closes when t or err
// is set.
type topicLoad struct {
	done chan struct{}
	t    *Topic
	err  error
}

// New returns a broker.
func New(cfg Config) (*Broker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	schemas, err := NewSchemaRegistry(SchemaRegistryConfig{Meta: cfg.Meta, Strategy: cfg.SchemaCompatibility,
		ValidationEnforced: cfg.SchemaValidationEnforced, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, log: cfg.Logger, schemas: schemas, topics: map[string]*topicLoad{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.startOwnership(ctx); err != nil {
		return nil, err
	}
	b.enforce = b.startEnforcing()
	return b, nil
}

// Schemas returns the schema registry.
func (b *Broker) Schemas() *SchemaRegistry { return b.schemas }

// Name is the broker's name.
func (b *Broker) Name() string { return b.cfg.Name }

// partitionedPath is the metadata node holding the partition count of a
// partitioned topic.
func partitionedPath(t TopicName) string {
	return meta.Join(meta.PartitionedTopicsRoot, t.Base().metaPath())
}

type storedPartitions struct {
	Partitions int `json:"partitions"`
}

// Partitions returns the partition count of t's base topic: 0 if it is
// not partitioned. With auto-creation of partitioned topics, a topic that
// does not exist yet is created partitioned. (A partition's own name is
// never partitioned: Partitions of "x-partition-1" is 0.)
func (b *Broker) Partitions(ctx context.Context, t TopicName) (int, error) {
	if t.IsPartition() {
		return 0, nil
	}
	n, err := b.storedPartitions(ctx, t)
	if err != nil || n > 0 {
		return n, err
	}
	exists, err := b.topicExists(ctx, t)
	if err != nil || exists {
		return 0, err
	}
	mode, parts, err := b.autoCreation(ctx, t)
	if err != nil || mode != AutoCreatePartitioned {
		return 0, err
	}
	if err := b.CreatePartitionedTopic(ctx, t, parts); err != nil && !errors.Is(err, meta.ErrExists) {
		return 0, err
	}
	return b.storedPartitions(ctx, t)
}

func (b *Broker) storedPartitions(ctx context.Context, t TopicName) (int, error) {
	v, _, err := b.cfg.Meta.Get(ctx, partitionedPath(t))
	if errors.Is(err, meta.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var sp storedPartitions
	if err := json.Unmarshal(v, &sp); err != nil {
		return 0, fmt.Errorf("broker: partitioned topic %s: bad metadata: %w", t, err)
	}
	return sp.Partitions, nil
}

// CreatePartitionedTopic records t as a partitioned topic with n
// partitions (meta.ErrExists if it already is one).
func (b *Broker) CreatePartitionedTopic(ctx context.Context, t TopicName, n int) error {
	if t.IsPartition() || n < 1 {
		return fmt.Errorf("%w: partitioned topic %s with %d partitions", ErrInvalidRequest, t, n)
	}
	if err := b.CheckNamespace(ctx, t); err != nil {
		return err
	}
	p := partitionedPath(t)
	if err := meta.EnsurePath(ctx, b.cfg.Meta, meta.Parent(p)); err != nil {
		return err
	}
	v, _ := json.Marshal(storedPartitions{Partitions: n})
	_, err := b.cfg.Meta.Create(ctx, p, v, 0)
	if err == nil {
		b.log.Info("partitioned topic created", "topic", t.String(), "partitions", n)
	}
	return err
}

// topicExists says whether t has a managed ledger.
func (b *Broker) topicExists(ctx context.Context, t TopicName) (bool, error) {
	p, err := ledger.Path(t.ManagedLedgerName())
	if err != nil {
		return false, err
	}
	_, ok, err := b.cfg.Meta.Exists(ctx, p)
	return ok, err
}

// Topic returns the loaded topic t, loading it if needed. A topic that
// does not exist is created if create is true and auto-creation allows
// it (a partition of a partitioned topic always may be); otherwise
// ErrTopicNotFound. A partitioned topic's base name has no managed ledger:
// use its partitions.
func (b *Broker) Topic(ctx context.Context, t TopicName, create bool) (*Topic, error) {
	key := t.String()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrBrokerClosed
	}
	tl, ok := b.topics[key]
	if !ok {
		tl = &topicLoad{done: make(chan struct{})}
		b.topics[key] = tl
		b.mu.Unlock()
		tl.t, tl.err = b.loadTopic(ctx, t, create)
		b.mu.Lock()
		if tl.err != nil {
			delete(b.topics, key)
		}
		close(tl.done)
		b.mu.Unlock()
		return tl.t, tl.err
	}
	b.mu.Unlock()
	select {
	case <-tl.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if tl.err != nil {
		// The loader failed (maybe for its own reasons, such as create=false):
		// try again as this caller.
		return b.Topic(ctx, t, create)
	}
	return tl.t, nil
}

func (b *Broker) loadTopic(ctx context.Context, t TopicName, create bool) (*Topic, error) {
	if !t.IsPartition() {
		n, err := b.storedPartitions(ctx, t)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("%w: %s is a partitioned topic: use its partitions", ErrInvalidRequest, t)
		}
	}
	exists, err := b.topicExists(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := b.ensureOwned(ctx, t); err != nil {
		return nil, err
	}
	if !exists {
		mode, _, err := b.autoCreation(ctx, t)
		if err != nil {
			return nil, err
		}
		allowed := create && (t.IsPartition() || mode != AutoCreateOff)
		if t.IsPartition() {
			n, err := b.storedPartitions(ctx, t.Base())
			if err != nil {
				return nil, err
			}
			allowed = create && t.Partition < n
		}
		if !allowed {
			return nil, fmt.Errorf("%w: %s", ErrTopicNotFound, t)
		}
	}
	ml, err := b.cfg.Ledgers.Open(ctx, t.ManagedLedgerName(), b.openOptions(ctx, t)...)
	if err != nil {
		return nil, fmt.Errorf("broker: topic %s: %w", t, err)
	}
	tp := newTopic(b, t, ml)
	if err := tp.load(ctx); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ml.Close(cctx)
		return nil, err
	}
	if !b.ownsTopic(t) {
		// The bundle was given up while the topic loaded.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tp.Close(cctx)
		return nil, fmt.Errorf("%w: %s", ErrBundleUnloading, t)
	}
	b.log.Info("topic loaded", "topic", t.String(), "created", !exists)
	return tp, nil
}

// forget drops a closed topic, so that the next use loads it again.
func (b *Broker) forget(t *Topic) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tl, ok := b.topics[t.name.String()]; ok && tl.t == t {
		delete(b.topics, t.name.String())
	}
}

// TopicsOfNamespace returns the names of the topics in tenant/namespace:
// non-partitioned topics and every partition of partitioned topics (as
// Pulsar lists them).
func (b *Broker) TopicsOfNamespace(ctx context.Context, tenant, namespace string) ([]string, error) {
	ns := TopicName{Tenant: tenant, Namespace: namespace, Local: "x", Partition: -1}
	if err := checkNamePart(tenant); err != nil {
		return nil, fmt.Errorf("%w: tenant %s", ErrInvalidRequest, err)
	}
	if err := checkNamePart(namespace); err != nil {
		return nil, fmt.Errorf("%w: namespace %s", ErrInvalidRequest, err)
	}
	rel := tenant + "/" + namespace + "/persistent"
	seen := map[string]bool{}
	var out []string
	add := func(local string) {
		t := ns
		t.Local = local
		if pt, err := ParseTopicName(t.String()); err == nil && !seen[pt.String()] {
			seen[pt.String()] = true
			out = append(out, pt.String())
		}
	}
	names, err := b.children(ctx, meta.Join(meta.ManagedLedgersRoot, rel))
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		add(n)
	}
	parted, err := b.children(ctx, meta.Join(meta.PartitionedTopicsRoot, rel))
	if err != nil {
		return nil, err
	}
	for _, n := range parted {
		t := ns
		t.Local = n
		cnt, err := b.storedPartitions(ctx, t)
		if err != nil {
			return nil, err
		}
		for i := range cnt {
			add(t.PartitionName(i).LocalName())
		}
	}
	sort.Strings(out)
	return out, nil
}

func (b *Broker) children(ctx context.Context, p string) ([]string, error) {
	names, err := b.cfg.Meta.Children(ctx, p)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, nil
	}
	return names, err
}

// Close closes every topic: producers and consumers are disconnected,
// cursors and managed ledgers closed.
func (b *Broker) Close(ctx context.Context) error {
	b.stopEnforcing()
	// Bundles are handed over first: their topics close and other brokers
	// may take them; what is left (loads in progress) closes below.
	ownErr := b.own.close(ctx)
	b.mu.Lock()
	b.closed = true
	loads := make([]*topicLoad, 0, len(b.topics))
	for _, tl := range b.topics {
		loads = append(loads, tl)
	}
	b.mu.Unlock()
	var errs []error
	for _, tl := range loads {
		select {
		case <-tl.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if tl.t != nil {
			if err := tl.t.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(append(errs, ownErr)...)
}

// nextProducerName is a broker-assigned producer name, unique in this
// broker's life and across restarts as long as names differ.
func (b *Broker) nextProducerName() string {
	return fmt.Sprintf("%s-%d-%d", b.cfg.Name, b.cfg.Clock().UnixMilli(), b.producerSeq.Add(1))
}
