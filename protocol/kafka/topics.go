package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
)

// CreateTopics: v0–v7. DeleteTopics: v0–v6. CreatePartitions: v0–v3.
//
// A Kafka topic of N partitions is created as a partitioned topic of N
// partitions (NumPartitions -1: the broker's auto-topic-partitions). The
// replication factor is accepted and not used: replication is the
// namespace's ensemble and quorums, in the bookies. Configs given at
// creation are applied as with IncrementalAlterConfigs (configs.go).
// Deleting a topic deletes it with its subscriptions, disconnecting its
// clients, as Kafka does. CreatePartitions grows a partitioned topic; a
// non-partitioned topic cannot become partitioned (INVALID_PARTITIONS).
// Lookups by topic id (DeleteTopics v6) are not served.

func handleCreateTopics(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	for _, rt := range req.Topics {
		t := kmsg.NewCreateTopicsResponseTopic()
		t.Topic = rt.Topic
		n, err := c.s.createTopic(ctx, rt, req.ValidateOnly)
		if err != nil {
			t.ErrorCode, t.ErrorMessage = err.code, &err.msg
			if err.code == errUnknownServer {
				c.log.Warn("CreateTopics failed", "topic", rt.Topic, "err", err.msg)
			}
		} else {
			t.NumPartitions, t.ReplicationFactor = int32(n), 1
			if name, err := c.s.b.KafkaTopicName(rt.Topic); err == nil {
				t.TopicID = topicID(name)
			}
		}
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}

// kafkaError is an error code with its message.
type kafkaError struct {
	code int16
	msg  string
}

func kerrOf(err error) *kafkaError {
	return &kafkaError{code: errCode(err), msg: err.Error()}
}

func (s *Server) createTopic(ctx context.Context, rt kmsg.CreateTopicsRequestTopic, validateOnly bool) (int, *kafkaError) {
	name, err := s.b.KafkaTopicName(rt.Topic)
	if err != nil {
		return 0, kerrOf(err)
	}
	n := int(rt.NumPartitions)
	if n == -1 {
		n = s.b.DefaultPartitions()
	}
	if len(rt.ReplicaAssignment) > 0 {
		n = len(rt.ReplicaAssignment)
	}
	if n < 1 {
		return 0, &kafkaError{errInvalidPartitions, fmt.Sprintf("%d partitions: want at least 1", rt.NumPartitions)}
	}
	if rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1 {
		return 0, &kafkaError{errInvalidReplicationFactor, fmt.Sprintf("replication factor %d", rt.ReplicationFactor)}
	}
	changes := make([]configChange, 0, len(rt.Configs))
	for _, cfg := range rt.Configs {
		changes = append(changes, configChange{name: cfg.Name, value: cfg.Value, op: opSet})
	}
	if err := checkConfigChanges(changes); err != nil {
		return 0, err
	}
	if n, err := s.b.KafkaPartitions(ctx, name, false); err == nil {
		return 0, &kafkaError{errTopicAlreadyExists, fmt.Sprintf("topic %s exists with %d partitions", rt.Topic, n)}
	} else if !errors.Is(err, broker.ErrTopicNotFound) {
		return 0, kerrOf(err)
	}
	if validateOnly {
		return n, nil
	}
	if err := s.b.CreatePartitioned(ctx, name, n); err != nil {
		if errors.Is(err, broker.ErrAlreadyExists) {
			return 0, &kafkaError{errTopicAlreadyExists, err.Error()}
		}
		return 0, kerrOf(err)
	}
	if len(changes) > 0 {
		if err := s.alterTopicConfig(ctx, name, changes); err != nil {
			return 0, err
		}
	}
	s.kafkaDefaults(ctx, name, changes)
	s.log.Info("topic created by a Kafka client", "topic", name.String(), "partitions", n)
	return n, nil
}

func handleDeleteTopics(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	names := req.TopicNames
	var ids [][16]byte
	if req.Version >= 6 {
		names = nil
		for _, t := range req.Topics {
			if t.Topic == nil {
				ids = append(ids, t.TopicID)
				continue
			}
			names = append(names, *t.Topic)
		}
	}
	for _, name := range names {
		t := kmsg.NewDeleteTopicsResponseTopic()
		t.Topic = &name
		if err := c.s.deleteTopic(ctx, name); err != nil {
			t.ErrorCode, t.ErrorMessage = errCode(err), errMessage(err)
			if t.ErrorCode == errUnknownServer {
				c.log.Warn("DeleteTopics failed", "topic", name, "err", err)
			}
		} else if tn, err := c.s.b.KafkaTopicName(name); err == nil {
			t.TopicID = topicID(tn)
		}
		resp.Topics = append(resp.Topics, t)
	}
	for _, id := range ids {
		t := kmsg.NewDeleteTopicsResponseTopic()
		t.TopicID, t.ErrorCode = id, errUnknownTopicID
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}

const errUnknownTopicID int16 = 100

func (s *Server) deleteTopic(ctx context.Context, topic string) error {
	name, err := s.b.KafkaTopicName(topic)
	if err != nil {
		return err
	}
	n, err := s.b.PartitionedMetadata(ctx, name)
	if err != nil {
		return err
	}
	if n > 0 {
		err = s.b.DeletePartitioned(ctx, name, true)
	} else {
		err = s.b.DeleteTopic(ctx, name, true)
	}
	if err == nil {
		s.log.Info("topic deleted by a Kafka client", "topic", name.String())
	}
	return err
}

func handleCreatePartitions(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	for _, rt := range req.Topics {
		t := kmsg.NewCreatePartitionsResponseTopic()
		t.Topic = rt.Topic
		if err := c.s.createPartitions(ctx, rt, req.ValidateOnly); err != nil {
			t.ErrorCode, t.ErrorMessage = err.code, &err.msg
		}
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}

func (s *Server) createPartitions(ctx context.Context, rt kmsg.CreatePartitionsRequestTopic, validateOnly bool) *kafkaError {
	name, err := s.b.KafkaTopicName(rt.Topic)
	if err != nil {
		return kerrOf(err)
	}
	n, err := s.b.PartitionedMetadata(ctx, name)
	if err != nil {
		return kerrOf(err)
	}
	if n == 0 {
		if _, err := s.b.KafkaPartitions(ctx, name, false); err != nil {
			return kerrOf(err)
		}
		return &kafkaError{errInvalidPartitions, fmt.Sprintf("topic %s is a non-partitioned topic; it cannot be given more partitions", rt.Topic)}
	}
	if int(rt.Count) <= n {
		return &kafkaError{errInvalidPartitions, fmt.Sprintf("topic %s has %d partitions; the count can only grow", rt.Topic, n)}
	}
	if validateOnly {
		return nil
	}
	if err := s.b.UpdatePartitions(ctx, name, int(rt.Count)); err != nil {
		return kerrOf(err)
	}
	return nil
}
