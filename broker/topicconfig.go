package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// TopicConfig is what a topic (a partitioned topic and all its
// partitions, or a non-partitioned topic) sets for itself, overriding its
// namespace's policies: the Kafka topic configs that have a meaning here.
// Stored as JSON at /admin/topic-config/<tenant>/<ns>/<topic>; unset
// fields fall back to the namespace.
type TopicConfig struct {
	// RetentionMs and RetentionBytes: how long and how much acknowledged
	// data is kept (-1: no limit). As in Pulsar, data a subscription (or
	// Kafka group) has not acknowledged is kept regardless.
	RetentionMs    *int64 `json:"retention.ms,omitempty"`
	RetentionBytes *int64 `json:"retention.bytes,omitempty"`
	// MaxMessageBytes is the largest record batch Kafka producers may send
	// to the topic; it replaces the broker's max-message-size (as in
	// Kafka), within ledger.MaxPayloadSize.
	MaxMessageBytes *int32 `json:"max.message.bytes,omitempty"`
}

func topicConfigPath(t TopicName) string {
	return meta.Join(meta.TopicConfigRoot, t.Base().metaPath())
}

// TopicConfig returns t's own settings (zero if none).
func (b *Broker) TopicConfig(ctx context.Context, t TopicName) (TopicConfig, error) {
	c, _, _, err := b.topicConfig(ctx, t)
	return c, err
}

func (b *Broker) topicConfig(ctx context.Context, t TopicName) (c TopicConfig, v meta.Version, exists bool, err error) {
	data, st, err := b.cfg.Meta.Get(ctx, topicConfigPath(t))
	if errors.Is(err, meta.ErrNotFound) {
		return c, 0, false, nil
	}
	if err != nil {
		return c, 0, false, err
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, 0, false, fmt.Errorf("broker: topic config of %s: %w", t.Base(), err)
	}
	return c, st.Version, true, nil
}

// UpdateTopicConfig changes t's own settings with f (retried on a
// concurrent change) and applies them to its loaded partitions.
func (b *Broker) UpdateTopicConfig(ctx context.Context, t TopicName, f func(*TopicConfig) error) error {
	for {
		c, v, exists, err := b.topicConfig(ctx, t)
		if err != nil {
			return err
		}
		if err := f(&c); err != nil {
			return err
		}
		if !exists {
			err = b.createJSON(ctx, topicConfigPath(t), c)
			if errors.Is(err, meta.ErrExists) {
				continue
			}
		} else {
			err = b.setJSON(ctx, topicConfigPath(t), c, v)
			if errors.Is(err, meta.ErrBadVersion) {
				continue
			}
		}
		if err != nil {
			return err
		}
		for _, tp := range b.loadedTopicsIn("") {
			if tp.name.Base() == t.Base() {
				tp.config.Store(&c)
				if p, err := b.topicPolicies(ctx, tp.name); err == nil {
					tp.applyRetention(p.RetentionPolicies)
				}
			}
		}
		return nil
	}
}

// deleteTopicConfig removes t's own settings (the topic is deleted).
func (b *Broker) deleteTopicConfig(ctx context.Context, t TopicName) error {
	err := b.cfg.Meta.Delete(ctx, topicConfigPath(t), meta.AnyVersion)
	if errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	return err
}

// ownRetention is the retention t's config sets, merged with its
// namespace's r for what it leaves unset — or, with no namespace policy,
// no limit (Kafka's default for the one not set): ok=false if it sets
// none.
func ownRetention(c *TopicConfig, r *RetentionPolicies) (time.Duration, int64, bool) {
	if c == nil || (c.RetentionMs == nil && c.RetentionBytes == nil) {
		return 0, 0, false
	}
	rt, rs := time.Duration(-1), int64(-1)
	if r != nil {
		rt, rs = retentionLimits(*r)
	}
	if c.RetentionMs != nil {
		rt = time.Duration(*c.RetentionMs) * time.Millisecond
		if *c.RetentionMs < 0 {
			rt = -1
		}
	}
	if c.RetentionBytes != nil {
		rs = *c.RetentionBytes
		if rs < 0 {
			rs = -1
		}
	}
	return rt, rs, true
}

// MaxMessageBytes is the topic's own limit on a batch's size, 0 if none.
func (t *Topic) MaxMessageBytes() int {
	if c := t.config.Load(); c != nil && c.MaxMessageBytes != nil {
		return int(*c.MaxMessageBytes)
	}
	return 0
}
