package admin

import (
	"net/http"

	"github.com/magnetar-io/magnetar/broker"
)

// Kafka group offsets on one partition, for the coordinator of a group
// when another broker owns the partition (broker kafkapeers.go):
//
//	GET    /admin/v2/persistent/{tenant}/{ns}/{topic}/kafka-offsets/{group}  200 {"offset", "metadata", "committed"}
//	PUT    /admin/v2/persistent/{tenant}/{ns}/{topic}/kafka-offsets/{group}  body {"offset", "metadata"}: 204
//	DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/kafka-offsets/{group}  204
//
// {topic} is a partition (topic-partition-N) or a non-partitioned topic.
// The offset is the group's subscription on it, as OffsetCommit and
// OffsetFetch see it; a broker that does not own the topic redirects.

func init() { registrations = append(registrations, (*api).registerKafkaOffsets) }

func (a *api) registerKafkaOffsets(s *Server) {
	path := topicPath + "/kafka-offsets/{group}"
	load := func(r *http.Request) (*broker.Topic, string, error) {
		t, err := topicOf(r)
		if err != nil {
			return nil, "", err
		}
		tp, err := a.b.Topic(r.Context(), t, t.IsPartition())
		return tp, r.PathValue("group"), err
	}
	a.handle(s, "GET "+path, func(w http.ResponseWriter, r *http.Request) error {
		tp, group, err := load(r)
		if err != nil {
			return err
		}
		var o broker.KafkaOffset
		if o.Offset, o.Metadata, o.Committed, err = tp.KafkaCommittedOffset(r.Context(), group); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, o)
		return nil
	})
	a.handle(s, "PUT "+path, func(w http.ResponseWriter, r *http.Request) error {
		var o broker.KafkaOffset
		if err := readJSON(r, &o, true); err != nil {
			return err
		}
		tp, group, err := load(r)
		if err != nil {
			return err
		}
		if err := tp.CommitKafkaOffset(r.Context(), group, o.Offset, o.Metadata); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
	a.handle(s, "DELETE "+path, func(w http.ResponseWriter, r *http.Request) error {
		tp, group, err := load(r)
		if err != nil {
			return err
		}
		if err := tp.DeleteKafkaOffset(r.Context(), group); err != nil {
			return err
		}
		noContent(w)
		return nil
	})
}
