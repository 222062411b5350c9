package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
)

// ListOffsets: v0–v11.
//
// Timestamp -1 is the latest offset (the high watermark), -2 the earliest
// still stored, -3 (v7+) the offset of the last record and its timestamp
// (records are in time order as the broker stamps them). Any other
// timestamp T finds, from the managed ledger's in-memory time index, the
// first entry the broker published at or after T and answers its first
// offset with that publish time; none is offset -1. v0 answers in its
// old-style list of offsets.

const (
	latestTimestamp   = -1
	earliestTimestamp = -2
	maxTimestamp      = -3
)

func handleListOffsets(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	for _, rt := range req.Topics {
		t := kmsg.NewListOffsetsResponseTopic()
		t.Topic = rt.Topic
		name, nameErr := c.s.b.KafkaTopicName(rt.Topic)
		for _, rp := range rt.Partitions {
			p := kmsg.NewListOffsetsResponseTopicPartition()
			p.Partition = rp.Partition
			err := nameErr
			if err == nil {
				var tp *broker.Topic
				if tp, err = c.s.b.KafkaPartition(ctx, name, rp.Partition); err == nil {
					p.Offset, p.Timestamp, err = listOffset(ctx, tp.ManagedLedger(), rp.Timestamp)
				}
			}
			if err != nil {
				p.ErrorCode = errCode(err)
				if p.ErrorCode == errUnknownServer {
					c.log.Warn("ListOffsets failed", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				}
			} else {
				p.LeaderEpoch = 0
				if req.Version == 0 && p.Offset >= 0 && rp.MaxNumOffsets > 0 {
					p.OldStyleOffsets = []int64{p.Offset}
				}
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}

func listOffset(ctx context.Context, ml *ledger.ManagedLedger, ts int64) (offset, timestamp int64, err error) {
	switch ts {
	case latestTimestamp:
		return ml.NextOffset(), -1, nil
	case earliestTimestamp:
		return ml.FirstOffset(), -1, nil
	case maxTimestamp:
		last := ml.LastConfirmed()
		if last.Entry < 0 || ml.NextOffset() == ml.FirstOffset() {
			return -1, -1, nil
		}
		es, err := ml.Read(ctx, last, 1)
		if err != nil || len(es) == 0 {
			return -1, -1, err
		}
		return es[0].Header.NextOffset() - 1, es[0].Header.PublishTime, nil
	}
	if ts < 0 {
		return -1, -1, fmt.Errorf("%w: timestamp %d (-1 latest, -2 earliest, -3 max timestamp)", broker.ErrInvalidRequest, ts)
	}
	e, err := ml.FindTime(ctx, time.UnixMilli(ts))
	if errors.Is(err, ledger.ErrOffsetOutOfRange) {
		return -1, -1, nil
	}
	if err != nil {
		return -1, -1, err
	}
	if e.Header.FirstOffset < ml.FirstOffset() {
		return ml.FirstOffset(), e.Header.PublishTime, nil
	}
	return e.Header.FirstOffset, e.Header.PublishTime, nil
}
