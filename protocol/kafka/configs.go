package kafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
)

// DescribeConfigs: v0–v4. AlterConfigs: v0–v2. IncrementalAlterConfigs:
// v0–v1.
//
// Topic configs with a meaning here are kept as the topic's own settings
// (broker.TopicConfig), overriding its namespace's policies:
//
//	retention.ms, retention.bytes  how long / how much acknowledged data is
//	                               kept (-1: no limit); what a subscription
//	                               or group has not consumed is always kept
//	max.message.bytes              largest record batch producers may send
//	                               (replaces the broker's limit, as in Kafka)
//	cleanup.policy                 "delete" only: topics are not compacted
//
// Unset, a config shows its effective value from the namespace (or the
// broker) as a default. Other names are refused with INVALID_CONFIG, so
// nothing is silently ignored. AlterConfigs replaces the whole set;
// IncrementalAlterConfigs sets or deletes single configs. Broker resources
// are described read-only.

const (
	resourceTopic  = 2
	resourceBroker = 4

	sourceTopic   = 1 // DYNAMIC_TOPIC_CONFIG
	sourceStatic  = 4 // STATIC_BROKER_CONFIG
	sourceDefault = 5 // DEFAULT_CONFIG

	opSet      = 0
	opDelete   = 1
	opAppend   = 2
	opSubtract = 3
)

var topicConfigNames = []string{"cleanup.policy", "max.message.bytes", "retention.bytes", "retention.ms"}

type configChange struct {
	name  string
	value *string
	op    int8
}

func checkConfigChanges(cs []configChange) *kafkaError {
	for _, c := range cs {
		if err := checkConfig(c); err != nil {
			return &kafkaError{errInvalidConfig, err.Error()}
		}
	}
	return nil
}

func checkConfig(c configChange) error {
	if c.op != opSet && c.op != opDelete {
		return fmt.Errorf("config %s: only SET and DELETE are supported", c.name)
	}
	v := ""
	if c.value != nil {
		v = *c.value
	}
	if c.op == opSet && c.value == nil {
		return fmt.Errorf("config %s: no value", c.name)
	}
	switch c.name {
	case "retention.ms", "retention.bytes":
		if c.op == opSet {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < -1 {
				return fmt.Errorf("config %s=%q: want a number ≥ -1", c.name, v)
			}
		}
	case "max.message.bytes":
		if c.op == opSet {
			if n, err := strconv.ParseInt(v, 10, 32); err != nil || n < 1024 || n > ledger.MaxPayloadSize {
				return fmt.Errorf("config %s=%q: want a number from 1024 to %d (the largest entry)", c.name, v, ledger.MaxPayloadSize)
			}
		}
	case "cleanup.policy":
		if c.op == opSet && v != "delete" {
			return fmt.Errorf("config cleanup.policy=%q: only \"delete\" is supported (topics are not compacted)", v)
		}
	default:
		return fmt.Errorf("config %q is not supported; topic configs are %v", c.name, topicConfigNames)
	}
	return nil
}

// applyConfig applies a checked change to c.
func applyConfig(c *broker.TopicConfig, ch configChange) {
	set := ch.op == opSet
	switch ch.name {
	case "retention.ms", "retention.bytes":
		p := &c.RetentionMs
		if ch.name == "retention.bytes" {
			p = &c.RetentionBytes
		}
		*p = nil
		if set {
			n, _ := strconv.ParseInt(*ch.value, 10, 64)
			*p = &n
		}
	case "max.message.bytes":
		c.MaxMessageBytes = nil
		if set {
			n, _ := strconv.ParseInt(*ch.value, 10, 32)
			n32 := int32(n)
			c.MaxMessageBytes = &n32
		}
	}
}

// kafkaDefaultRetentionMs is Kafka's retention.ms default (7 days).
const kafkaDefaultRetentionMs = 7 * 24 * 60 * 60 * 1000

// kafkaDefaults gives a topic a Kafka client just created Kafka's default
// retention.ms, unless the request set one or its namespace has a
// retention policy: Kafka users expect their data kept for a week with
// no consumer group, where Pulsar's default keeps only what a
// subscription still needs.
func (s *Server) kafkaDefaults(ctx context.Context, t broker.TopicName, given []configChange) {
	for _, c := range given {
		if c.name == "retention.ms" {
			return
		}
	}
	if p, err := s.b.NamespacePolicies(ctx, t.Tenant, t.Namespace); err == nil && p.RetentionPolicies != nil {
		return
	}
	err := s.b.UpdateTopicConfig(ctx, t, func(c *broker.TopicConfig) error {
		if c.RetentionMs == nil {
			ms := int64(kafkaDefaultRetentionMs)
			c.RetentionMs = &ms
		}
		return nil
	})
	if err != nil {
		s.log.Warn("Kafka's default retention not set on a new topic", "topic", t.String(), "err", err)
	}
}

func (s *Server) alterTopicConfig(ctx context.Context, t broker.TopicName, cs []configChange) *kafkaError {
	err := s.b.UpdateTopicConfig(ctx, t, func(c *broker.TopicConfig) error {
		for _, ch := range cs {
			applyConfig(c, ch)
		}
		return nil
	})
	if err != nil {
		return kerrOf(err)
	}
	return nil
}

// existingTopic resolves a config resource's topic, which must exist.
func (s *Server) existingTopic(ctx context.Context, name string) (broker.TopicName, *kafkaError) {
	t, err := s.b.KafkaTopicName(name)
	if err != nil {
		return t, kerrOf(err)
	}
	if _, err := s.b.KafkaPartitions(ctx, t, false); err != nil {
		return t, kerrOf(err)
	}
	return t, nil
}

func handleDescribeConfigs(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.DescribeConfigsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	for _, rr := range req.Resources {
		r := kmsg.NewDescribeConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		var entries []configEntry
		switch rr.ResourceType {
		case resourceTopic:
			t, kerr := c.s.existingTopic(ctx, rr.ResourceName)
			if kerr == nil {
				var err error
				if entries, err = c.s.topicConfigs(ctx, t); err != nil {
					kerr = kerrOf(err)
				}
			}
			if kerr != nil {
				r.ErrorCode, r.ErrorMessage = kerr.code, &kerr.msg
			}
		case resourceBroker:
			entries = c.s.brokerConfigs()
		default:
			r.ErrorCode, r.ErrorMessage = errInvalidRequest, strPtr("only topic and broker configs are described")
		}
		want := map[string]bool{}
		for _, n := range rr.ConfigNames {
			want[n] = true
		}
		for _, e := range entries {
			if len(want) > 0 && !want[e.name] {
				continue
			}
			rc := kmsg.NewDescribeConfigsResponseResourceConfig()
			rc.Name, rc.Value = e.name, strPtr(e.value)
			rc.Source = kmsg.ConfigSource(e.source)
			rc.IsDefault = e.source == sourceDefault
			rc.ReadOnly = rr.ResourceType == resourceBroker
			rc.ConfigType = kmsg.ConfigType(e.typ)
			r.Configs = append(r.Configs, rc)
		}
		resp.Resources = append(resp.Resources, r)
	}
	sl.finish(resp)
}

type configEntry struct {
	name, value string
	source      int8
	typ         int8 // kmsg.ConfigType: 2 INT, 5 LONG, 7 LIST
}

// topicConfigs are t's effective configs.
func (s *Server) topicConfigs(ctx context.Context, t broker.TopicName) ([]configEntry, error) {
	own, err := s.b.TopicConfig(ctx, t)
	if err != nil {
		return nil, err
	}
	nsMs, nsBytes := int64(0), int64(0) // the broker's default: keep nothing acknowledged
	if p, err := s.b.NamespacePolicies(ctx, t.Tenant, t.Namespace); err == nil && p.RetentionPolicies != nil {
		r := p.RetentionPolicies
		nsMs, nsBytes = -1, -1
		if r.RetentionTimeInMinutes >= 0 {
			nsMs = int64(r.RetentionTimeInMinutes) * 60_000
		}
		if r.RetentionSizeInMB >= 0 {
			nsBytes = r.RetentionSizeInMB << 20
		}
	}
	entry := func(name string, v *int64, def int64, typ int8) configEntry {
		if v != nil {
			return configEntry{name, strconv.FormatInt(*v, 10), sourceTopic, typ}
		}
		return configEntry{name, strconv.FormatInt(def, 10), sourceDefault, typ}
	}
	var maxBytes *int64
	if own.MaxMessageBytes != nil {
		n := int64(*own.MaxMessageBytes)
		maxBytes = &n
	}
	return []configEntry{
		{"cleanup.policy", "delete", sourceDefault, 7},
		entry("max.message.bytes", maxBytes, int64(s.cfg.MaxMessageSize), 2),
		entry("retention.bytes", own.RetentionBytes, nsBytes, 5),
		entry("retention.ms", own.RetentionMs, nsMs, 5),
	}, nil
}

func (s *Server) brokerConfigs() []configEntry {
	return []configEntry{
		{"auto.create.topics.enable", "true", sourceStatic, 1},
		{"message.max.bytes", strconv.Itoa(s.cfg.MaxMessageSize), sourceStatic, 2},
		{"num.partitions", strconv.Itoa(s.b.DefaultPartitions()), sourceStatic, 2},
		{"socket.request.max.bytes", strconv.Itoa(s.cfg.MaxRequestSize), sourceStatic, 2},
	}
}

func handleAlterConfigs(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.AlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
	for _, rr := range req.Resources {
		r := kmsg.NewAlterConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		// A full replacement: every supported config not given is deleted.
		given := map[string]bool{}
		var cs []configChange
		for _, rc := range rr.Configs {
			given[rc.Name] = true
			cs = append(cs, configChange{name: rc.Name, value: rc.Value, op: opSet})
		}
		for _, n := range topicConfigNames {
			if !given[n] {
				cs = append(cs, configChange{name: n, op: opDelete})
			}
		}
		if kerr := c.s.alterConfigs(c, rr.ResourceType, rr.ResourceName, cs, req.ValidateOnly); kerr != nil {
			r.ErrorCode, r.ErrorMessage = kerr.code, &kerr.msg
		}
		resp.Resources = append(resp.Resources, r)
	}
	sl.finish(resp)
}

func handleIncrementalAlterConfigs(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.IncrementalAlterConfigsRequest)
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		r := kmsg.NewIncrementalAlterConfigsResponseResource()
		r.ResourceType, r.ResourceName = rr.ResourceType, rr.ResourceName
		var cs []configChange
		for _, rc := range rr.Configs {
			cs = append(cs, configChange{name: rc.Name, value: rc.Value, op: int8(rc.Op)})
		}
		if kerr := c.s.alterConfigs(c, rr.ResourceType, rr.ResourceName, cs, req.ValidateOnly); kerr != nil {
			r.ErrorCode, r.ErrorMessage = kerr.code, &kerr.msg
		}
		resp.Resources = append(resp.Resources, r)
	}
	sl.finish(resp)
}

func (s *Server) alterConfigs(c *conn, typ kmsg.ConfigResourceType, name string, cs []configChange, validateOnly bool) *kafkaError {
	if typ != resourceTopic {
		return &kafkaError{errInvalidRequest, "only topic configs can be altered; the broker is configured by its settings"}
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	t, kerr := s.existingTopic(ctx, name)
	if kerr != nil {
		return kerr
	}
	if kerr := checkConfigChanges(cs); kerr != nil {
		return kerr
	}
	if validateOnly {
		return nil
	}
	if kerr := s.alterTopicConfig(ctx, t, cs); kerr != nil {
		return kerr
	}
	c.log.Info("topic configs altered by a Kafka client", "topic", t.String())
	return nil
}
