package kafka

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// Metadata: v0–v13. DescribeCluster: v0–v1.
//
// A partition is led by the broker that owns its bundle (broker
// ownership.go; standalone: this one), which is also its only replica and
// in-sync replica — replication happens below, in the bookies. A
// partition nobody owns yet is given to the broker the lookup chooses,
// which takes it when the client comes; one being handed over is
// LEADER_NOT_AVAILABLE (leader -1), and the client asks again. The
// brokers are the cluster's live brokers, each with its Kafka node id. Asking for all topics lists
// the topics of the Kafka namespace (Config.KafkaTenant/KafkaNamespace);
// topics elsewhere are reachable by their tenant/namespace/topic names.
// A topic that does not exist is created when the client allows it (v4+:
// AllowAutoTopicCreation; before: always) and the namespace's
// auto-creation policy does; otherwise UNKNOWN_TOPIC_OR_PARTITION. Topic
// ids are derived from the full topic name (stable, never zero).

func handleMetadata(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	resp.Brokers = c.s.brokerEntries(ctx)
	resp.ClusterID = &c.s.cfg.ClusterID
	resp.ControllerID = c.s.cfg.NodeID

	var names []string
	if req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0) {
		all, err := c.s.kafkaTopics(ctx)
		if err != nil {
			c.log.Warn("Metadata: listing topics failed", "err", err)
		}
		names = all
	} else {
		for _, t := range req.Topics {
			if t.Topic == nil {
				mt := kmsg.NewMetadataResponseTopic()
				mt.ErrorCode = errInvalidRequest
				mt.TopicID = t.TopicID
				resp.Topics = append(resp.Topics, mt) // lookups by topic id are not served
				continue
			}
			names = append(names, *t.Topic)
		}
	}
	create := req.Version < 4 || req.AllowAutoTopicCreation
	for _, name := range names {
		resp.Topics = append(resp.Topics, c.s.topicMetadata(ctx, name, create))
	}
	sl.finish(resp)
}

func (s *Server) brokerEntry() kmsg.MetadataResponseBroker {
	b := kmsg.NewMetadataResponseBroker()
	b.NodeID, b.Host, b.Port = s.cfg.NodeID, s.cfg.AdvertisedHost, s.cfg.AdvertisedPort
	return b
}

// brokerEntries lists this broker and the cluster's other live brokers
// that serve Kafka.
func (s *Server) brokerEntries(ctx context.Context) []kmsg.MetadataResponseBroker {
	out := []kmsg.MetadataResponseBroker{s.brokerEntry()}
	live, err := s.b.LiveBrokers(ctx)
	if err != nil {
		s.log.Warn("Metadata: listing the live brokers failed", "err", err)
	}
	for _, lb := range live {
		if lb.Info.NodeID == s.cfg.NodeID || lb.Info.KafkaHost == "" {
			continue
		}
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = lb.Info.NodeID, lb.Info.KafkaHost, lb.Info.KafkaPort
		out = append(out, b)
	}
	return out
}

// partitionLeader returns the Kafka node id of the broker serving t, or
// an error code (LEADER_NOT_AVAILABLE while it moves).
func (s *Server) partitionLeader(ctx context.Context, t broker.TopicName) (int32, int16) {
	l, err := s.b.LookupTopic(ctx, t, false)
	switch {
	case errors.Is(err, broker.ErrBundleUnloading), errors.Is(err, broker.ErrBrokerClosed):
		return -1, errLeaderNotAvailable
	case err != nil:
		s.log.Warn("Metadata: looking up a partition's owner failed", "topic", t.String(), "err", err)
		return -1, errLeaderNotAvailable
	case l.Self:
		return s.cfg.NodeID, 0
	case l.Owner.KafkaHost == "":
		return -1, errLeaderNotAvailable // its owner does not serve Kafka
	}
	return l.Owner.NodeID, 0
}

// offsetsTopic is Kafka's internal topic of group offsets. Clients expect
// it once groups are in use (regex consumers skip it as internal), so
// Metadata shows it, internal, with one partition, after the first
// FindCoordinator, as Kafka creates it then. It holds nothing: offsets
// are subscription positions. Other requests naming it are refused
// (INVALID_TOPIC_EXCEPTION): KafkaTopicName refuses the name.
const offsetsTopic = "__consumer_offsets"

func (s *Server) topicMetadata(ctx context.Context, name string, create bool) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic = &name
	if name == offsetsTopic {
		if !s.groups.used.Load() {
			mt.ErrorCode = errUnknownTopicOrPartition
			return mt
		}
		mt.IsInternal = true
		mt.TopicID = topicID(broker.TopicName{Tenant: "kafka", Namespace: "internal", Local: offsetsTopic})
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Leader, p.LeaderEpoch, p.Replicas, p.ISR = s.cfg.NodeID, 0, []int32{s.cfg.NodeID}, []int32{s.cfg.NodeID}
		mt.Partitions = append(mt.Partitions, p)
		return mt
	}
	t, err := s.b.KafkaTopicName(name)
	if err != nil {
		mt.ErrorCode = errCode(err)
		return mt
	}
	mt.TopicID = topicID(t)
	parts, err := s.b.KafkaPartitionNames(ctx, t, false)
	if errors.Is(err, broker.ErrTopicNotFound) && create {
		if parts, err = s.b.KafkaPartitionNames(ctx, t, true); err == nil {
			s.kafkaDefaults(ctx, t, nil)
		}
	}
	if err != nil {
		mt.ErrorCode = errCode(err)
		if mt.ErrorCode == errUnknownServer {
			s.log.Warn("Metadata failed", "topic", name, "err", err)
		}
		return mt
	}
	for i := range parts {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition = int32(i)
		p.Leader, p.ErrorCode = s.partitionLeader(ctx, parts[i])
		p.LeaderEpoch = 0
		if p.Leader >= 0 {
			p.Replicas = []int32{p.Leader}
			p.ISR = []int32{p.Leader}
		} else {
			p.Replicas, p.ISR = []int32{}, []int32{}
		}
		mt.Partitions = append(mt.Partitions, p)
	}
	return mt
}

// kafkaTopics lists the Kafka namespace's topics by their Kafka names.
func (s *Server) kafkaTopics(ctx context.Context) ([]string, error) {
	tenant, ns := s.b.KafkaNamespace()
	parted, err := s.b.PartitionedTopicsOfNamespace(ctx, tenant, ns)
	if err != nil {
		return nil, err
	}
	all, err := s.b.TopicsOfNamespace(ctx, tenant, ns)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, full := range append(parted, all...) {
		t, err := broker.ParseTopicName(full)
		if err != nil || t.IsPartition() {
			continue
		}
		names = append(names, s.b.KafkaName(t))
	}
	if s.groups.used.Load() {
		names = append(names, offsetsTopic)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// topicID derives a topic's Kafka id from its full name.
func topicID(t broker.TopicName) [16]byte {
	sum := sha256.Sum256([]byte(t.String()))
	var id [16]byte
	copy(id[:], sum[:16])
	if id == ([16]byte{}) {
		id[15] = 1
	}
	return id
}

func handleDescribeCluster(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.ClusterID = c.s.cfg.ClusterID
	resp.ControllerID = c.s.cfg.NodeID
	b := kmsg.NewDescribeClusterResponseBroker()
	b.NodeID, b.Host, b.Port = c.s.cfg.NodeID, c.s.cfg.AdvertisedHost, c.s.cfg.AdvertisedPort
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{b}
	sl.finish(resp)
}
