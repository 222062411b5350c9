package kafka_test

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// partitionCount is topic's partition count from Metadata, or its error.
// It asks with a new client: kadm answers from the client's metadata
// cache, which would not see a change made a moment ago.
func partitionCount(t testing.TB, srv *harness.Server, topic string) (int, error) {
	t.Helper()
	md, err := newAdmin(t, srv).Metadata(testCtx(t), topic)
	if err != nil {
		t.Fatalf("Metadata(%s): %v", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok {
		t.Fatalf("Metadata(%s): topic missing from the answer %v", topic, md.Topics.Names())
	}
	return len(td.Partitions), td.Err
}

// TestFranzAdminTopics: CreateTopics, ListTopics, Metadata, DeleteTopics
// and CreatePartitions through kadm.
func TestFranzAdminTopics(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	ctx := testCtx(t)
	a, b := harness.Name(t), harness.Name(t)

	resp, err := adm.CreateTopics(ctx, 2, 1, nil, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a, b} {
		if r := resp[name]; r.Err != nil || r.NumPartitions != 2 || r.ID == (kadm.TopicID{}) {
			t.Fatalf("CreateTopics %s: err %v (%s), %d partitions, id %v; want 2 partitions and an id", name, r.Err, r.ErrMessage, r.NumPartitions, r.ID)
		}
	}

	t.Run("already exists", func(t *testing.T) {
		r, err := adm.CreateTopic(ctx, 3, 1, nil, a)
		if !errors.Is(err, kerr.TopicAlreadyExists) || !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			t.Fatalf("creating %s again: %v / %v, want TOPIC_ALREADY_EXISTS", a, err, r.Err)
		}
		if n, err := partitionCount(t, srv, a); err != nil || n != 2 {
			t.Fatalf("%s after the refused create: %d partitions, %v; want 2", a, n, err)
		}
	})

	t.Run("invalid name", func(t *testing.T) {
		_, err := adm.CreateTopic(ctx, 1, 1, nil, "bad name!")
		if !errors.Is(err, kerr.InvalidTopicException) {
			t.Fatalf("creating \"bad name!\": %v, want INVALID_TOPIC_EXCEPTION", err)
		}
	})

	t.Run("list and metadata", func(t *testing.T) {
		tds, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{a, b} {
			td, ok := tds[name]
			if !ok || td.Err != nil || len(td.Partitions) != 2 {
				t.Fatalf("ListTopics: %s present %v, err %v, %d partitions; want present with 2", name, ok, td.Err, len(td.Partitions))
			}
			if got := td.Partitions.Numbers(); !slices.Equal(got, []int32{0, 1}) {
				t.Fatalf("ListTopics %s partitions %v, want [0 1]", name, got)
			}
			if td.ID != resp[name].ID {
				t.Fatalf("ListTopics %s id %v, CreateTopics said %v", name, td.ID, resp[name].ID)
			}
			for _, p := range td.Partitions {
				if p.Leader != 0 || !slices.Equal(p.Replicas, []int32{0}) || !slices.Equal(p.ISR, []int32{0}) || p.Err != nil {
					t.Fatalf("%s partition %d: leader %d replicas %v isr %v err %v; want broker 0 alone", name, p.Partition, p.Leader, p.Replicas, p.ISR, p.Err)
				}
			}
		}
		for _, name := range tds.Names() {
			if name == "bad name!" {
				t.Fatal("the refused topic \"bad name!\" is listed")
			}
		}
	})

	t.Run("create partitions", func(t *testing.T) {
		r, err := adm.UpdatePartitions(ctx, 4, a)
		if err != nil || r[a].Err != nil {
			t.Fatalf("UpdatePartitions(%s, 4): %v / %v (%s)", a, err, r[a].Err, r[a].ErrMessage)
		}
		if n, err := partitionCount(t, srv, a); err != nil || n != 4 {
			t.Fatalf("%s after growing: %d partitions, %v; want 4", a, n, err)
		}
		// The new partitions take records.
		p := franzClient(t, srv, kgo.DefaultProduceTopic(a), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := p.ProduceSync(ctx, &kgo.Record{Partition: 3, Value: []byte("p3")}).FirstErr(); err != nil {
			t.Fatalf("producing to new partition 3: %v", err)
		}
		if got := endOffsets(t, srv, a); len(got) != 4 || got[3] != 1 || got[0] != 0 {
			t.Fatalf("end offsets %v, want 4 partitions with 1 record in partition 3", got)
		}
		// Shrinking is refused.
		if r, err := adm.CreatePartitions(ctx, 0, a); err == nil && r[a].Err == nil {
			t.Fatalf("adding 0 partitions to %s succeeded", a)
		}

		// A non-partitioned topic (auto-created by a produce, as this
		// server is configured) cannot be given partitions.
		np := harness.Name(t)
		q := franzClient(t, srv, kgo.DefaultProduceTopic(np), kgo.AllowAutoTopicCreation())
		if err := q.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		r, err = adm.UpdatePartitions(ctx, 2, np)
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(r[np].Err, kerr.InvalidPartitions) {
			t.Fatalf("UpdatePartitions(non-partitioned %s, 2): %v (%s), want INVALID_PARTITIONS", np, r[np].Err, r[np].ErrMessage)
		}
		if n, err := partitionCount(t, srv, np); err != nil || n != 1 {
			t.Fatalf("%s after the refused grow: %d partitions, %v; want 1", np, n, err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		r, err := adm.DeleteTopics(ctx, b)
		if err != nil || r[b].Err != nil {
			t.Fatalf("DeleteTopics(%s): %v / %v (%s)", b, err, r[b].Err, r[b].ErrMessage)
		}
		if _, err := partitionCount(t, srv, b); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("Metadata of deleted %s: %v, want UNKNOWN_TOPIC_OR_PARTITION", b, err)
		}
		tds, err := newAdmin(t, srv).ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tds.Has(b) {
			t.Fatalf("ListTopics still lists deleted %s", b)
		}
		// A producer that does not allow auto-creation is refused and
		// does not bring the topic back.
		p := franzClient(t, srv, kgo.DefaultProduceTopic(b), kgo.UnknownTopicRetries(1))
		if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("producing to deleted %s: %v, want UNKNOWN_TOPIC_OR_PARTITION", b, err)
		}
		if _, err := partitionCount(t, srv, b); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("Metadata of deleted %s after a produce: %v, want UNKNOWN_TOPIC_OR_PARTITION", b, err)
		}
		r, err = adm.DeleteTopics(ctx, b)
		if err != nil || !errors.Is(r[b].Err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("deleting %s again: %v / %v, want UNKNOWN_TOPIC_OR_PARTITION", b, err, r[b].Err)
		}
	})
}

// describeConfigs returns topic's configs by name.
func describeConfigs(t testing.TB, adm *kadm.Client, topic string) map[string]kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(testCtx(t), topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs(%s): %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("DescribeTopicConfigs(%s): %v / %v (%s)", topic, err, rc.Err, rc.ErrMessage)
	}
	out := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		out[c.Key] = c
	}
	return out
}

// checkConfig fails t unless config name of cs has value and source.
func checkConfig(t testing.TB, cs map[string]kadm.Config, name, value string, source kmsg.ConfigSource) {
	t.Helper()
	c, ok := cs[name]
	if !ok {
		t.Errorf("config %s not described", name)
		return
	}
	if c.Value == nil || *c.Value != value || c.Source != source {
		v := "<nil>"
		if c.Value != nil {
			v = *c.Value
		}
		t.Errorf("config %s = %s (source %v), want %s (source %v)", name, v, c.Source, value, source)
	}
}

// TestFranzAdminConfigs: the topic configs the broker supports can be
// described, set, replaced and deleted; unsupported ones are refused;
// max.message.bytes is enforced on produce. A topic a Kafka client creates
// gets Kafka's retention.ms (7 days) as its own config when its namespace
// has no retention policy (as here); deleted, a config shows the
// namespace's (or broker's) value, as for a topic created by Pulsar.
func TestFranzAdminConfigs(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	ctx := testCtx(t)

	// The defaults: the configs of a topic a Pulsar producer created.
	pulsarMade := harness.Name(t)
	pc, err := harness.NewClient(t, srv.PulsarURL()).CreateProducer(pulsar.ProducerOptions{Topic: pulsarTopic(pulsarMade)})
	if err != nil {
		t.Fatalf("CreateProducer(%s): %v", pulsarMade, err)
	}
	pc.Close()
	defaults := describeConfigs(t, adm, pulsarMade)
	if len(defaults) != 4 {
		t.Errorf("configs described: %v, want cleanup.policy, max.message.bytes, retention.bytes, retention.ms", defaults)
	}
	checkConfig(t, defaults, "cleanup.policy", "delete", kmsg.ConfigSourceDefaultConfig)
	checkConfig(t, defaults, "max.message.bytes", strconv.Itoa(5<<20), kmsg.ConfigSourceDefaultConfig)
	for _, name := range []string{"retention.ms", "retention.bytes"} {
		if c := defaults[name]; c.Source != kmsg.ConfigSourceDefaultConfig || c.Value == nil {
			t.Fatalf("default %s: value %v source %v, want a value from DEFAULT_CONFIG", name, c.Value, c.Source)
		}
	}
	defaultValue := func(name string) string { return *defaults[name].Value }

	topic := harness.Name(t)
	createTopic(t, adm, topic, 1)
	created := describeConfigs(t, adm, topic)
	checkConfig(t, created, "retention.ms", "604800000", kmsg.ConfigSourceDynamicTopicConfig)
	for _, name := range []string{"cleanup.policy", "max.message.bytes", "retention.bytes"} {
		checkConfig(t, created, name, defaultValue(name), kmsg.ConfigSourceDefaultConfig)
	}

	alter := func(cs ...kadm.AlterConfig) error {
		t.Helper()
		r, err := adm.AlterTopicConfigs(ctx, cs, topic)
		if err != nil {
			t.Fatalf("IncrementalAlterConfigs: %v", err)
		}
		res, err := r.On(topic, nil)
		if err != nil {
			t.Fatalf("IncrementalAlterConfigs: %v", err)
		}
		return res.Err
	}

	t.Run("incremental", func(t *testing.T) {
		err := alter(
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("1048576")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("2048")},
		)
		if err != nil {
			t.Fatalf("setting configs: %v", err)
		}
		cs := describeConfigs(t, adm, topic)
		checkConfig(t, cs, "retention.ms", "3600000", kmsg.ConfigSourceDynamicTopicConfig)
		checkConfig(t, cs, "retention.bytes", "1048576", kmsg.ConfigSourceDynamicTopicConfig)
		checkConfig(t, cs, "max.message.bytes", "2048", kmsg.ConfigSourceDynamicTopicConfig)

		// The lowered limit refuses a 10 KiB (incompressible) record.
		p := franzClient(t, srv, kgo.DefaultProduceTopic(topic))
		if err := p.ProduceSync(ctx, &kgo.Record{Value: randomBytes(t, 10<<10)}).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("producing 10 KiB with max.message.bytes=2048: %v, want MESSAGE_TOO_LARGE", err)
		}
		if got := endOffsets(t, srv, topic); got[0] != 0 {
			t.Fatalf("end offset %d after the refused record, want 0", got[0])
		}

		// Deleting one returns it to its default; the others stay.
		if err := alter(kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "max.message.bytes"}); err != nil {
			t.Fatalf("deleting max.message.bytes: %v", err)
		}
		cs = describeConfigs(t, adm, topic)
		checkConfig(t, cs, "max.message.bytes", defaultValue("max.message.bytes"), kmsg.ConfigSourceDefaultConfig)
		checkConfig(t, cs, "retention.ms", "3600000", kmsg.ConfigSourceDynamicTopicConfig)
		q := franzClient(t, srv, kgo.DefaultProduceTopic(topic))
		if err := q.ProduceSync(ctx, &kgo.Record{Value: randomBytes(t, 10<<10)}).FirstErr(); err != nil {
			t.Fatalf("producing 10 KiB after max.message.bytes is deleted: %v", err)
		}
	})

	t.Run("replace", func(t *testing.T) {
		// AlterConfigs (non-incremental) replaces the whole set.
		r, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kadm.StringPtr("-1")}}, topic)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := r.On(topic, nil); err != nil || res.Err != nil {
			t.Fatalf("AlterConfigs: %v / %v (%s)", err, res.Err, res.ErrMessage)
		}
		cs := describeConfigs(t, adm, topic)
		checkConfig(t, cs, "retention.bytes", "-1", kmsg.ConfigSourceDynamicTopicConfig)
		checkConfig(t, cs, "retention.ms", defaultValue("retention.ms"), kmsg.ConfigSourceDefaultConfig)
		checkConfig(t, cs, "max.message.bytes", defaultValue("max.message.bytes"), kmsg.ConfigSourceDefaultConfig)

		if err := alter(kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.bytes"}); err != nil {
			t.Fatalf("deleting retention.bytes: %v", err)
		}
		cs = describeConfigs(t, adm, topic)
		for _, name := range []string{"retention.ms", "retention.bytes", "max.message.bytes", "cleanup.policy"} {
			checkConfig(t, cs, name, defaultValue(name), kmsg.ConfigSourceDefaultConfig)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, c := range []kadm.AlterConfig{
			{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("1048576")},
			{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")},
			{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("soon")},
			{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("10")},
		} {
			if err := alter(c); !errors.Is(err, kerr.InvalidConfig) {
				t.Errorf("setting %s=%s: %v, want INVALID_CONFIG", c.Name, *c.Value, err)
			}
		}
		// One bad config in a request refuses all of it.
		err := alter(
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1000")},
			kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("1048576")},
		)
		if !errors.Is(err, kerr.InvalidConfig) {
			t.Errorf("setting retention.ms with segment.bytes: %v, want INVALID_CONFIG", err)
		}
		if err := alter(kadm.AlterConfig{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")}); err != nil {
			t.Errorf("setting cleanup.policy=delete: %v", err)
		}
		cs := describeConfigs(t, adm, topic)
		for _, name := range []string{"retention.ms", "retention.bytes", "max.message.bytes", "cleanup.policy"} {
			checkConfig(t, cs, name, defaultValue(name), kmsg.ConfigSourceDefaultConfig)
		}
	})

	t.Run("unknown topic", func(t *testing.T) {
		missing := harness.Name(t)
		rcs, err := adm.DescribeTopicConfigs(ctx, missing)
		if err == nil {
			if rc, _ := rcs.On(missing, nil); !errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
				t.Errorf("DescribeTopicConfigs(missing %s): %v, want UNKNOWN_TOPIC_OR_PARTITION", missing, rc.Err)
			}
		} else if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("DescribeTopicConfigs(missing %s): %v, want UNKNOWN_TOPIC_OR_PARTITION", missing, err)
		}
	})

	t.Run("at creation", func(t *testing.T) {
		name := harness.Name(t)
		r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kadm.StringPtr("60000")}, name)
		if err != nil {
			t.Fatalf("CreateTopic with retention.ms: %v (%s)", err, r.ErrMessage)
		}
		checkConfig(t, describeConfigs(t, adm, name), "retention.ms", "60000", kmsg.ConfigSourceDynamicTopicConfig)
		bad := harness.Name(t)
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, bad); !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("CreateTopic with cleanup.policy=compact: %v, want INVALID_CONFIG", err)
		}
		if _, err := partitionCount(t, srv, bad); !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("topic refused at creation: Metadata says %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
	})
}

// TestFranzAdminCluster: Metadata and DescribeCluster show one broker, at
// the advertised Kafka address, which is the controller.
func TestFranzAdminCluster(t *testing.T) {
	srv := shared.Server(t)
	cl := franzClient(t, srv)
	adm := kadm.NewClient(cl)
	ctx := testCtx(t)
	host, portStr, _ := net.SplitHostPort(srv.KafkaAddr())
	port, _ := strconv.Atoi(portStr)

	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Host != host || md.Brokers[0].Port != int32(port) || md.Controller != md.Brokers[0].NodeID {
		t.Fatalf("BrokerMetadata: brokers %+v controller %d; want one broker at %s, the controller", md.Brokers, md.Controller, srv.KafkaAddr())
	}
	if md.Cluster == "" {
		t.Error("BrokerMetadata: empty cluster id")
	}

	resp, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != md.Brokers[0].NodeID || resp.Brokers[0].Host != host ||
		resp.Brokers[0].Port != int32(port) || resp.ClusterID != md.Cluster || resp.ControllerID != md.Controller {
		t.Fatalf("DescribeCluster: brokers %+v cluster %q controller %d; want node %d at %s, cluster %q, controller %d",
			resp.Brokers, resp.ClusterID, resp.ControllerID, md.Brokers[0].NodeID, srv.KafkaAddr(), md.Cluster, md.Controller)
	}
}
