package main

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker"
)

// registerMetrics registers the broker's topic metrics (magnetar_topic_*,
// magnetar_subscription_*) with reg, if not nil; close unregisters them.
func (b *brokerStack) registerMetrics(cfg brokerConfig, reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	mc, err := broker.NewMetricsCollector(b.broker, broker.MetricsConfig{MaxTopics: cfg.MetricsMaxTopics})
	if err != nil {
		return err
	}
	if err := reg.Register(mc); err != nil {
		return fmt.Errorf("broker: registering topic metrics: %w", err)
	}
	b.metrics, b.reg = mc, reg
	return nil
}

// latencyBuckets are the buckets of the latency histograms, in seconds:
// 0.1 ms to about 1.8 s, each 1.25 times the one before, fine enough for a
// p99 read off the buckets to be within 25%.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 1.25, 45)

// newLatencyHistogram registers a latency histogram (seconds) with reg.
func newLatencyHistogram(reg prometheus.Registerer, name, help string) (prometheus.Histogram, error) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	if err := reg.Register(h); err != nil {
		return nil, fmt.Errorf("registering %s: %w", name, err)
	}
	return h, nil
}

// Latency metrics.
const (
	addLatencyMetric     = "magnetar_ledger_add_entry_latency_seconds"
	syncLatencyMetric    = "magnetar_bookie_journal_sync_latency_seconds"
	kafkaLatencyMetric   = "magnetar_kafka_request_latency_seconds"
	publishLatencyMetric = "magnetar_pulsar_publish_latency_seconds"
)

// protocolLatency is the protocol servers' latency histograms registered
// with reg (kafka.Config.RequestLatency, pulsar.Config.PublishLatency),
// or nils without reg.
func protocolLatency(reg prometheus.Registerer) (prometheus.ObserverVec, prometheus.Observer, error) {
	if reg == nil {
		return nil, nil, nil
	}
	requests := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: kafkaLatencyMetric,
		Help:    "Latency of Kafka requests in the broker, by API, from the request read to its response written (Kafka's RequestMetrics TotalTimeMs; a Fetch's includes its wait for data).",
		Buckets: latencyBuckets}, []string{"request"})
	if err := reg.Register(requests); err != nil {
		return nil, nil, fmt.Errorf("registering %s: %w", kafkaLatencyMetric, err)
	}
	publish, err := newLatencyHistogram(reg, publishLatencyMetric,
		"Latency of Pulsar publishes in the broker, from a SEND read to its receipt being queued (Pulsar's pulsar_broker_publish_latency).")
	if err != nil {
		return nil, nil, err
	}
	return requests, publish, nil
}

// addLatency is the managed ledgers' append latency histogram
// (ledger.Config.AddLatency) registered with reg, or nil without reg.
func addLatency(reg prometheus.Registerer) (prometheus.Observer, error) {
	if reg == nil {
		return nil, nil
	}
	return newLatencyHistogram(reg, addLatencyMetric,
		"Latency of managed-ledger appends, from the append to its confirmation by the bookies (Pulsar's pulsar_storage_write_latency).")
}

// journalSyncLatency returns a journal.Options.OnSync that observes each
// journal fsync, from the first write it covers to its end, into a
// histogram registered with reg.
func journalSyncLatency(reg prometheus.Registerer) (func(time.Duration, int, int), error) {
	h, err := newLatencyHistogram(reg, syncLatencyMetric,
		"Latency of the in-process bookie's journal group commits: from the first write an fsync covers to the end of the fsync.")
	if err != nil {
		return nil, err
	}
	return func(d time.Duration, _, _ int) { h.Observe(d.Seconds()) }, nil
}
