package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/ledger"
)

// Topic metrics for Prometheus: Pulsar's topic-level metrics under
// Magnetar's prefix (docs/admin.md, "Metrics", has the table).
//
//	magnetar_topic_in_messages_total      pulsar_in_messages_total
//	magnetar_topic_in_bytes_total         pulsar_in_bytes_total
//	magnetar_topic_out_messages_total     pulsar_out_messages_total
//	magnetar_topic_out_bytes_total        pulsar_out_bytes_total
//	magnetar_topic_rate_in                pulsar_rate_in
//	magnetar_topic_rate_out               pulsar_rate_out
//	magnetar_topic_throughput_in          pulsar_throughput_in
//	magnetar_topic_throughput_out         pulsar_throughput_out
//	magnetar_topic_storage_size           pulsar_storage_size
//	magnetar_topic_msg_backlog            pulsar_msg_backlog
//	magnetar_topic_subscriptions_count    pulsar_subscriptions_count
//	magnetar_topic_producers_count        pulsar_producers_count
//	magnetar_topic_consumers_count        pulsar_consumers_count
//	magnetar_subscription_msg_backlog     pulsar_subscription_back_log
//
// Labels take Pulsar's values: tenant ("public"), namespace
// ("public/default"), topic (the full name of the topic or partition,
// "persistent://public/default/t-partition-0") and subscription.
//
// Cardinality: at most MetricsConfig.MaxTopics topics have series of
// their own. The others are added up per namespace under
// topic="_other" (and have no per-subscription series). A topic keeps
// its own series from the first scrape that gives it a slot until it is
// unloaded, so its counters do not jump between series; free slots go
// to the newly seen topics in name order.
//
// Counters are the topics' publish and dispatch counters (those of the
// admin stats); like Pulsar's they restart from zero when a topic is
// loaded again (and a subscription's share of out_* when it is
// reopened), which rate() treats as a counter reset. The rate gauges are
// the admin stats' rates: the change over the interval since the last
// sample, whoever took it.

// DefaultMetricsMaxTopics is the default MetricsConfig.MaxTopics.
const DefaultMetricsMaxTopics = 1000

// OtherTopicsLabel is the topic label of the per-namespace aggregate of
// topics beyond MetricsConfig.MaxTopics.
const OtherTopicsLabel = "_other"

// DefaultMetricsBacklogTimeout is the default MetricsConfig.BacklogTimeout.
const DefaultMetricsBacklogTimeout = 2 * time.Second

// MetricsConfig configures a MetricsCollector.
type MetricsConfig struct {
	// MaxTopics bounds the topics exported with their own topic label
	// (≥ 0; 0 exports namespace aggregates only).
	MaxTopics int
	// BacklogTimeout bounds the time one scrape spends counting backlogs
	// (which may read entry headers from the bookies). A subscription
	// whose backlog is not counted in time reports the value of its last
	// count, or no backlog series if there was none. Default 2s.
	BacklogTimeout time.Duration
}

// MetricsCollector is a prometheus.Collector of the broker's loaded
// topics. It takes the broker's lock only to copy the topic list, and
// each topic's and subscription's only to copy their members; it never
// waits on publishes or dispatches.
type MetricsCollector struct {
	b   *Broker
	cfg MetricsConfig

	// mu serialises Collect: it guards named and backlogs.
	mu sync.Mutex
	// named holds the topics with series of their own (by full name).
	// Invariant: len(named) ≤ cfg.MaxTopics, and every name in it was
	// loaded at the last Collect.
	named map[string]bool
	// backlogs is the last backlog counted per cursor, for subscriptions
	// whose count times out; only cursors seen at the last Collect.
	backlogs map[*ledger.Cursor]ledger.Backlog
}

// NewMetricsCollector returns a collector of b's topic metrics; register
// it with a prometheus.Registerer.
func NewMetricsCollector(b *Broker, cfg MetricsConfig) (*MetricsCollector, error) {
	if b == nil {
		return nil, errors.New("broker: NewMetricsCollector: nil broker")
	}
	if cfg.MaxTopics < 0 {
		return nil, fmt.Errorf("broker: MetricsConfig.MaxTopics %d: want ≥ 0", cfg.MaxTopics)
	}
	if cfg.BacklogTimeout == 0 {
		cfg.BacklogTimeout = DefaultMetricsBacklogTimeout
	}
	if cfg.BacklogTimeout < 0 {
		return nil, fmt.Errorf("broker: MetricsConfig.BacklogTimeout %v: want > 0", cfg.BacklogTimeout)
	}
	return &MetricsCollector{b: b, cfg: cfg, named: map[string]bool{}, backlogs: map[*ledger.Cursor]ledger.Backlog{}}, nil
}

var (
	topicLabels = []string{"tenant", "namespace", "topic"}
	subLabels   = []string{"tenant", "namespace", "topic", "subscription"}

	descInMsgs   = prometheus.NewDesc("magnetar_topic_in_messages_total", "Messages published to the topic (Pulsar's pulsar_in_messages_total).", topicLabels, nil)
	descInBytes  = prometheus.NewDesc("magnetar_topic_in_bytes_total", "Bytes published to the topic, as entries (Pulsar's pulsar_in_bytes_total).", topicLabels, nil)
	descOutMsgs  = prometheus.NewDesc("magnetar_topic_out_messages_total", "Messages dispatched to the topic's consumers (Pulsar's pulsar_out_messages_total).", topicLabels, nil)
	descOutBytes = prometheus.NewDesc("magnetar_topic_out_bytes_total", "Bytes dispatched to the topic's consumers (Pulsar's pulsar_out_bytes_total).", topicLabels, nil)
	descRateIn   = prometheus.NewDesc("magnetar_topic_rate_in", "Messages per second published over the last sampling interval (Pulsar's pulsar_rate_in).", topicLabels, nil)
	descRateOut  = prometheus.NewDesc("magnetar_topic_rate_out", "Messages per second dispatched over the last sampling interval (Pulsar's pulsar_rate_out).", topicLabels, nil)
	descThruIn   = prometheus.NewDesc("magnetar_topic_throughput_in", "Bytes per second published over the last sampling interval (Pulsar's pulsar_throughput_in).", topicLabels, nil)
	descThruOut  = prometheus.NewDesc("magnetar_topic_throughput_out", "Bytes per second dispatched over the last sampling interval (Pulsar's pulsar_throughput_out).", topicLabels, nil)
	descStorage  = prometheus.NewDesc("magnetar_topic_storage_size", "Bytes of the topic's stored entries, headers included (Pulsar's pulsar_storage_size).", topicLabels, nil)
	descBacklog  = prometheus.NewDesc("magnetar_topic_msg_backlog", "Messages not yet acknowledged, summed over the topic's subscriptions (Pulsar's pulsar_msg_backlog).", topicLabels, nil)
	descSubs     = prometheus.NewDesc("magnetar_topic_subscriptions_count", "Subscriptions of the topic (Pulsar's pulsar_subscriptions_count).", topicLabels, nil)
	descProds    = prometheus.NewDesc("magnetar_topic_producers_count", "Producers connected to the topic (Pulsar's pulsar_producers_count).", topicLabels, nil)
	descCons     = prometheus.NewDesc("magnetar_topic_consumers_count", "Consumers connected to the topic (Pulsar's pulsar_consumers_count).", topicLabels, nil)
	descSubBack  = prometheus.NewDesc("magnetar_subscription_msg_backlog", "Messages of the topic not yet acknowledged by the subscription (Pulsar's pulsar_subscription_back_log).", subLabels, nil)
	descTopics   = prometheus.NewDesc("magnetar_topics_loaded", "Topics (and partitions) loaded on this broker, including those aggregated under topic=\"_other\".", nil, nil)
)

// Describe sends the descriptors of every metric the collector exports.
func (m *MetricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInMsgs, descInBytes, descOutMsgs, descOutBytes, descRateIn, descRateOut,
		descThruIn, descThruOut, descStorage, descBacklog, descSubs, descProds, descCons, descSubBack, descTopics} {
		ch <- d
	}
}

// topicSample is one topic's values at a scrape (or the sum of several).
type topicSample struct {
	inMsgs, inBytes, outMsgs, outBytes float64
	rateIn, rateOut, thruIn, thruOut   float64
	storage, backlog                   float64
	subs, producers, consumers         float64
	subBacklogs                        map[string]float64 // by subscription; counted ones only
}

func (s *topicSample) add(o *topicSample) {
	s.inMsgs += o.inMsgs
	s.inBytes += o.inBytes
	s.outMsgs += o.outMsgs
	s.outBytes += o.outBytes
	s.rateIn += o.rateIn
	s.rateOut += o.rateOut
	s.thruIn += o.thruIn
	s.thruOut += o.thruOut
	s.storage += o.storage
	s.backlog += o.backlog
	s.subs += o.subs
	s.producers += o.producers
	s.consumers += o.consumers
}

// loadedTopics copies the list of loaded topics; loads in progress are
// left out.
func (b *Broker) loadedTopics() []*Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*Topic, 0, len(b.topics))
	for _, tl := range b.topics {
		select {
		case <-tl.done:
			if tl.t != nil {
				out = append(out, tl.t)
			}
		default:
		}
	}
	return out
}

// Collect sends the current values.
func (m *MetricsCollector) Collect(ch chan<- prometheus.Metric) {
	topics := m.b.loadedTopics()
	slices.SortFunc(topics, func(a, b *Topic) int {
		switch x, y := a.name.String(), b.name.String(); {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	ch <- prometheus.MustNewConstMetric(descTopics, prometheus.GaugeValue, float64(len(topics)))

	m.mu.Lock()
	defer m.mu.Unlock()
	m.assignSlots(topics)
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.BacklogTimeout)
	defer cancel()
	now := m.b.cfg.Clock()
	seen := map[*ledger.Cursor]bool{}
	others := map[string]*topicSample{} // by namespace ("tenant/ns")
	var otherOrder []TopicName
	for _, t := range topics {
		s := m.sample(ctx, t, now, seen)
		if m.named[t.name.String()] {
			m.send(ch, t.name, t.name.String(), s)
			for sub, bl := range s.subBacklogs {
				ch <- prometheus.MustNewConstMetric(descSubBack, prometheus.GaugeValue, bl,
					t.name.Tenant, t.name.NamespaceName(), t.name.String(), sub)
			}
			continue
		}
		ns := t.name.NamespaceName()
		agg := others[ns]
		if agg == nil {
			agg = &topicSample{}
			others[ns] = agg
			otherOrder = append(otherOrder, t.name)
		}
		agg.add(&s)
	}
	for _, tn := range otherOrder {
		m.send(ch, tn, OtherTopicsLabel, *others[tn.NamespaceName()])
	}
	for c := range m.backlogs {
		if !seen[c] {
			delete(m.backlogs, c)
		}
	}
}

// assignSlots updates named for the loaded topics (sorted by name):
// unloaded topics free their slots, which go to new topics in order.
// Called with m.mu held.
func (m *MetricsCollector) assignSlots(topics []*Topic) {
	loaded := make(map[string]bool, len(topics))
	for _, t := range topics {
		loaded[t.name.String()] = true
	}
	for n := range m.named {
		if !loaded[n] {
			delete(m.named, n)
		}
	}
	for _, t := range topics {
		if len(m.named) >= m.cfg.MaxTopics {
			break
		}
		m.named[t.name.String()] = true
	}
}

func (m *MetricsCollector) send(ch chan<- prometheus.Metric, tn TopicName, topic string, s topicSample) {
	labels := []string{tn.Tenant, tn.NamespaceName(), topic}
	for _, v := range []struct {
		d   *prometheus.Desc
		typ prometheus.ValueType
		val float64
	}{
		{descInMsgs, prometheus.CounterValue, s.inMsgs},
		{descInBytes, prometheus.CounterValue, s.inBytes},
		{descOutMsgs, prometheus.CounterValue, s.outMsgs},
		{descOutBytes, prometheus.CounterValue, s.outBytes},
		{descRateIn, prometheus.GaugeValue, s.rateIn},
		{descRateOut, prometheus.GaugeValue, s.rateOut},
		{descThruIn, prometheus.GaugeValue, s.thruIn},
		{descThruOut, prometheus.GaugeValue, s.thruOut},
		{descStorage, prometheus.GaugeValue, s.storage},
		{descBacklog, prometheus.GaugeValue, s.backlog},
		{descSubs, prometheus.GaugeValue, s.subs},
		{descProds, prometheus.GaugeValue, s.producers},
		{descCons, prometheus.GaugeValue, s.consumers},
	} {
		ch <- prometheus.MustNewConstMetric(v.d, v.typ, v.val, labels...)
	}
}

// sample reads t's values. Locks are held only to copy members; backlogs
// are counted within ctx, falling back to the last count. Called with
// m.mu held.
func (m *MetricsCollector) sample(ctx context.Context, t *Topic, now time.Time, seen map[*ledger.Cursor]bool) topicSample {
	s := topicSample{storage: float64(t.ml.TotalSize()), subBacklogs: map[string]float64{}}
	s.inMsgs, s.inBytes = float64(t.in.msgs.Load()), float64(t.in.bytes.Load())
	s.rateIn, s.thruIn = t.in.rates(now)

	t.mu.Lock()
	s.producers = float64(len(t.producers))
	subs := make([]*Subscription, 0, len(t.subs))
	for _, sub := range t.subs {
		subs = append(subs, sub)
	}
	t.mu.Unlock()

	// A subscription is an open Subscription or a durable cursor without
	// one (as in the admin stats); the dedup cursor is none.
	cursors := map[string]*ledger.Cursor{}
	for _, c := range t.ml.Cursors() {
		if !isInternalCursor(c.Name()) {
			cursors[c.Name()] = c
		}
	}
	for _, sub := range subs {
		cursors[sub.name] = sub.cursor
		sub.mu.Lock()
		s.consumers += float64(len(sub.consumers))
		sub.mu.Unlock()
		s.outMsgs += float64(sub.out.msgs.Load())
		s.outBytes += float64(sub.out.bytes.Load())
		mr, br := sub.out.rates(now)
		s.rateOut += mr
		s.thruOut += br
	}
	s.outMsgs += float64(t.kafkaOut.msgs.Load())
	s.outBytes += float64(t.kafkaOut.bytes.Load())
	kmr, kbr := t.kafkaOut.rates(now)
	s.rateOut += kmr
	s.thruOut += kbr
	s.subs = float64(len(cursors))
	for name, c := range cursors {
		seen[c] = true
		bl, err := c.Backlog(ctx)
		if err != nil {
			var ok bool
			if bl, ok = m.backlogs[c]; !ok {
				continue
			}
		} else {
			m.backlogs[c] = bl
		}
		s.subBacklogs[name] = float64(bl.Messages)
		s.backlog += float64(bl.Messages)
	}
	return s
}
