package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// Kafka consumer groups in a cluster. A group's coordinator is the owner
// of the bundle of the group's partition of Kafka's offsets topic,
// persistent://<kafka tenant>/<kafka ns>/__consumer_offsets-partition-<n>
// with n = Murmur3(group) mod KafkaOffsetsPartitions, as Kafka places a
// group on a partition of __consumer_offsets: groups move between brokers
// with bundles, and the topic itself never exists (Kafka clients cannot
// name it). A group's committed offsets are cursors of the partitions it
// consumes, which other brokers may own: the coordinator reads and moves
// them through the owner's REST API
// (/admin/v2/persistent/.../kafka-offsets/{group}, protocol/admin).

// KafkaOffsetsPartitions is the number of partitions groups are spread
// over (Kafka's offsets.topic.num.partitions).
const KafkaOffsetsPartitions = 50

// KafkaGroupTopic is the name whose bundle places group.
func (b *Broker) KafkaGroupTopic(group string) TopicName {
	return TopicName{Tenant: b.cfg.KafkaTenant, Namespace: b.cfg.KafkaNamespace, Local: "__consumer_offsets",
		Partition: int(murmur3([]byte(group)) % KafkaOffsetsPartitions)}
}

// KafkaGroupRecord returns the stored record of group, if any.
func (b *Broker) KafkaGroupRecord(ctx context.Context, group string) ([]byte, bool, error) {
	p, err := kafkaGroupPath(group)
	if err != nil {
		return nil, false, err
	}
	v, _, err := b.cfg.Meta.Get(ctx, p)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// KafkaOffset is a committed offset as the REST API carries it.
type KafkaOffset struct {
	Offset    int64  `json:"offset"`
	Metadata  string `json:"metadata"`
	Committed bool   `json:"committed"`
}

var peerClient = &http.Client{Timeout: 30 * time.Second}

// kafkaOffsetURL is the owner's REST path of group's offset on partition t.
func kafkaOffsetURL(owner BrokerInfo, t TopicName, group string) string {
	return strings.TrimSuffix(owner.WebURL, "/") + "/admin/v2/persistent/" + t.Tenant + "/" + t.Namespace + "/" +
		url.PathEscape(t.LocalName()) + "/kafka-offsets/" + url.PathEscape(group)
}

// peerCall makes a REST call of another broker (redirects to a newer
// owner are followed) and decodes a JSON answer into out.
func peerCall(ctx context.Context, method, u string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := peerClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: asking the owner: %v", ErrBundleUnloading, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode < 300:
		if out != nil && len(data) > 0 {
			return json.Unmarshal(data, out)
		}
		return nil
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrTopicNotFound, data)
	case resp.StatusCode == http.StatusBadRequest:
		return fmt.Errorf("%w: %s", ErrInvalidGroup, data)
	case resp.StatusCode == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: %s", ErrBundleUnloading, data)
	}
	return fmt.Errorf("broker: %s %s: %s %s", method, u, resp.Status, data)
}

// CommitKafkaOffsetAt commits group's offset on partition t at its owner.
func (b *Broker) CommitKafkaOffsetAt(ctx context.Context, owner BrokerInfo, t TopicName, group string, offset int64, metadata string) error {
	return peerCall(ctx, http.MethodPut, kafkaOffsetURL(owner, t, group), KafkaOffset{Offset: offset, Metadata: metadata}, nil)
}

// KafkaCommittedOffsetAt reads group's offset on partition t from its
// owner.
func (b *Broker) KafkaCommittedOffsetAt(ctx context.Context, owner BrokerInfo, t TopicName, group string) (KafkaOffset, error) {
	var o KafkaOffset
	err := peerCall(ctx, http.MethodGet, kafkaOffsetURL(owner, t, group), nil, &o)
	return o, err
}

// DeleteKafkaOffsetAt deletes group's offset (subscription) on partition t
// at its owner.
func (b *Broker) DeleteKafkaOffsetAt(ctx context.Context, owner BrokerInfo, t TopicName, group string) error {
	return peerCall(ctx, http.MethodDelete, kafkaOffsetURL(owner, t, group), nil, nil)
}
