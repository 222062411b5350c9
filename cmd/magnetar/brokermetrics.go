package main

import (
	"fmt"

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
