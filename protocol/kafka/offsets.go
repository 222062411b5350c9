package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/broker/kafkagroup"
)

// OffsetCommit: v0–v9. OffsetFetch: v0–v9 (v8+: several groups at once).
// OffsetDelete: v0.
//
// A group's committed offset on a partition is the position of the
// durable cursor (subscription) of the group's name on that partition
// (broker/kafkaoffsets.go): committing moves it, a Pulsar consumer
// acknowledging on that subscription moves what OffsetFetch answers, and
// group lag shows as the subscription's backlog. Whether a commit may go
// ahead is the coordinator's call (generation and member checks; a commit
// with no member and generation -1 is a simple consumer's, allowed while
// the group has no members). Metadata strings are limited to 4096 bytes
// (Kafka's offset.metadata.max.bytes).

const (
	maxOffsetMetadata          = 4096
	errOffsetMetadataTooLarge  = 12
	errGroupSubscribedToTopic  = 86
	errInvalidGroupID          = kafkagroup.ErrInvalidGroupID
	errUnstableOffsetCommit    = 88
	errCoordinatorNotAvailable = 15
)

func handleOffsetCommit(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	generation, member := req.Generation, req.MemberID
	if req.Version == 0 {
		generation, member = -1, ""
	}
	g := c.s.groups
	code := int16(errInvalidGroupID)
	if req.Group != "" {
		code = g.coordinateReq(c, req.Group)
	}
	if code == 0 {
		g.mu.Lock()
		code = g.c.CheckCommit(c.s.cfg.Clock(), req.Group, member, strOr(req.InstanceID), generation)
		if code == 0 && g.c.Group(req.Group) != nil && len(g.topics[req.Group]) == 0 && len(g.c.Group(req.Group).Members) == 0 {
			g.markDirty(req.Group) // a simple consumer's group: remembered
		}
		g.mu.Unlock()
	}
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetCommitResponseTopic()
		t.Topic = rt.Topic
		name, nameErr := c.s.b.KafkaTopicName(rt.Topic)
		t.Partitions = make([]kmsg.OffsetCommitResponseTopicPartition, len(rt.Partitions))
		// Partitions commit in parallel: a group's first commit on each
		// creates its cursor, a metadata-store write apiece.
		forEachLimited(len(rt.Partitions), func(i int) {
			rp := &rt.Partitions[i]
			p := kmsg.NewOffsetCommitResponseTopicPartition()
			p.Partition = rp.Partition
			switch {
			case code != 0:
				p.ErrorCode = code
			case nameErr != nil:
				p.ErrorCode = errCode(nameErr)
			case rp.Metadata != nil && len(*rp.Metadata) > maxOffsetMetadata:
				p.ErrorCode = errOffsetMetadataTooLarge
			default:
				p.ErrorCode = c.s.commit(ctx, req.Group, name, rp.Partition, rp.Offset, strOr(rp.Metadata))
			}
			t.Partitions[i] = p
		})
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}

func (s *Server) commit(ctx context.Context, group string, t broker.TopicName, partition int32, offset int64, metadata string) int16 {
	tp, err := s.b.KafkaPartition(ctx, t, partition)
	if owner, pt, ok := elsewhere(err); ok {
		err = s.b.CommitKafkaOffsetAt(ctx, owner, pt, group, offset, metadata)
	} else if err == nil {
		err = tp.CommitKafkaOffset(ctx, group, offset, metadata)
	}
	if err != nil {
		if errors.Is(err, broker.ErrInvalidGroup) {
			return errInvalidGroupID
		}
		code := errCode(err)
		if code == errUnknownServer {
			s.log.Warn("OffsetCommit failed", "group", group, "topic", t.String(), "partition", partition, "err", err)
		}
		return code
	}
	g := s.groups
	g.mu.Lock()
	if g.topics[group] == nil {
		g.topics[group] = map[string]bool{}
	}
	if !g.topics[group][t.String()] {
		g.topics[group][t.String()] = true
		g.markDirty(group)
	}
	g.mu.Unlock()
	return 0
}

// fetchOffsets answers one group's OffsetFetch: the partitions asked, or
// (topics nil) every partition of the topics the group committed on.
func (s *Server) fetchOffsets(ctx context.Context, group string, topics []kmsg.OffsetFetchRequestTopic) ([]kmsg.OffsetFetchResponseTopic, int16) {
	if code := s.groups.coordinate(ctx, group); code != 0 {
		return nil, code
	}
	if topics == nil {
		s.groups.mu.Lock()
		list := s.groups.topicList(group)
		s.groups.mu.Unlock()
		for _, full := range list {
			t, err := broker.ParseTopicName(full)
			if err != nil {
				continue
			}
			n, err := s.b.KafkaPartitions(ctx, t, false)
			if err != nil {
				continue
			}
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic = s.b.KafkaName(t)
			for i := range n {
				rt.Partitions = append(rt.Partitions, int32(i))
			}
			topics = append(topics, rt)
		}
	}
	var out []kmsg.OffsetFetchResponseTopic
	for _, rt := range topics {
		t := kmsg.NewOffsetFetchResponseTopic()
		t.Topic = rt.Topic
		name, nameErr := s.b.KafkaTopicName(rt.Topic)
		for _, part := range rt.Partitions {
			p := kmsg.NewOffsetFetchResponseTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = part, -1, -1
			empty := ""
			p.Metadata = &empty
			if nameErr != nil {
				p.ErrorCode = errCode(nameErr)
				t.Partitions = append(t.Partitions, p)
				continue
			}
			tp, err := s.b.KafkaPartition(ctx, name, part)
			var o broker.KafkaOffset
			if owner, pt, ok := elsewhere(err); ok {
				o, err = s.b.KafkaCommittedOffsetAt(ctx, owner, pt, group)
			} else if err == nil {
				o.Offset, o.Metadata, o.Committed, err = tp.KafkaCommittedOffset(ctx, group)
			}
			if errors.Is(err, broker.ErrTopicNotFound) {
				t.Partitions = append(t.Partitions, p) // no offset: -1, as Kafka answers
				continue
			}
			if err == nil {
				p.Offset = o.Offset
				if o.Committed {
					p.Metadata = &o.Metadata
				}
			}
			if err != nil {
				if errors.Is(err, broker.ErrInvalidGroup) {
					return nil, errInvalidGroupID
				}
				p.ErrorCode = errCode(err)
				s.log.Warn("OffsetFetch failed", "group", group, "topic", rt.Topic, "partition", part, "err", err)
			}
			t.Partitions = append(t.Partitions, p)
		}
		out = append(out, t)
	}
	return out, 0
}

func handleOffsetFetch(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	if req.Version < 8 {
		topics := req.Topics
		if req.Version < 2 && topics == nil {
			topics = []kmsg.OffsetFetchRequestTopic{}
		}
		resp.Topics, resp.ErrorCode = c.s.fetchOffsets(ctx, req.Group, topics)
		sl.finish(resp)
		return
	}
	for _, rg := range req.Groups {
		g := kmsg.NewOffsetFetchResponseGroup()
		g.Group = rg.Group
		var topics []kmsg.OffsetFetchRequestTopic
		if rg.Topics != nil {
			topics = []kmsg.OffsetFetchRequestTopic{}
			for _, t := range rg.Topics {
				rt := kmsg.NewOffsetFetchRequestTopic()
				rt.Topic, rt.Partitions = t.Topic, t.Partitions
				topics = append(topics, rt)
			}
		}
		ts, code := c.s.fetchOffsets(ctx, rg.Group, topics)
		g.ErrorCode = code
		for _, t := range ts {
			gt := kmsg.NewOffsetFetchResponseGroupTopic()
			gt.Topic = t.Topic
			for _, p := range t.Partitions {
				gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
				gt.Partitions = append(gt.Partitions, gp)
			}
			g.Topics = append(g.Topics, gt)
		}
		resp.Groups = append(resp.Groups, g)
	}
	sl.finish(resp)
}

func handleOffsetDelete(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	g := c.s.groups
	if resp.ErrorCode = g.coordinateReq(c, req.Group); resp.ErrorCode != 0 {
		sl.finish(resp)
		return
	}
	g.mu.Lock()
	gr := g.c.Group(req.Group)
	busy := gr != nil && len(gr.Members) > 0
	g.mu.Unlock()
	if gr == nil {
		resp.ErrorCode = kafkagroup.ErrGroupIDNotFound
		sl.finish(resp)
		return
	}
	for _, rt := range req.Topics {
		t := kmsg.NewOffsetDeleteResponseTopic()
		t.Topic = rt.Topic
		name, nameErr := c.s.b.KafkaTopicName(rt.Topic)
		for _, rp := range rt.Partitions {
			p := kmsg.NewOffsetDeleteResponseTopicPartition()
			p.Partition = rp.Partition
			switch {
			case nameErr != nil:
				p.ErrorCode = errCode(nameErr)
			case busy:
				// Members may be consuming it: Kafka checks their
				// subscriptions; we refuse while the group has members.
				p.ErrorCode = errGroupSubscribedToTopic
			default:
				if err := c.s.deleteGroupOffsets(ctx, name, req.Group, []int32{rp.Partition}); err != nil {
					p.ErrorCode = errCode(err)
				}
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}
