package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId: v0–v5. DescribeProducers: v0.
//
// An idempotent producer gets a new producer id, unique in the cluster
// (a counter in the metadata store), at epoch 0. A producer that asks to
// bump its epoch (v3+: its current id and epoch, after a sequence error)
// keeps its id at the next epoch, which resets its sequences on every
// partition. Transactional ids are refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
// until transactions exist. DescribeProducers lists the idempotent
// producers each partition remembers.

func handleInitProducerID(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	switch {
	case req.TransactionalID != nil:
		resp.ErrorCode = errTransactionalIDAuth
		c.log.Info("InitProducerId with a transactional id refused: transactions are not supported yet", "transactional-id", *req.TransactionalID)
	case req.Version >= 3 && req.ProducerID >= 0 && req.ProducerEpoch >= 0:
		if req.ProducerEpoch == 32767 {
			resp.ErrorCode = errInvalidProducerEpoch
			break
		}
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1
	default:
		ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
		id, err := c.s.b.NextKafkaProducerID(ctx)
		cancel()
		if err != nil {
			c.log.Warn("InitProducerId: no producer id", "err", err)
			resp.ErrorCode = errUnknownServer
			break
		}
		resp.ProducerID, resp.ProducerEpoch = id, 0
	}
	sl.finish(resp)
}

func handleDescribeProducers(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	for _, rt := range req.Topics {
		t := kmsg.NewDescribeProducersResponseTopic()
		t.Topic = rt.Topic
		name, nameErr := c.s.b.KafkaTopicName(rt.Topic)
		for _, part := range rt.Partitions {
			p := kmsg.NewDescribeProducersResponseTopicPartition()
			p.Partition = part
			err := nameErr
			if err == nil {
				tp, perr := c.s.b.KafkaPartition(ctx, name, part)
				if err = perr; err == nil {
					for _, info := range tp.KafkaProducers() {
						ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
						ap.ProducerID, ap.ProducerEpoch = info.ProducerID, int32(info.Epoch)
						ap.LastSequence, ap.LastTimestamp = info.LastSequence, info.LastUsed.UnixMilli()
						ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = -1, -1
						p.ActiveProducers = append(p.ActiveProducers, ap)
					}
				}
			}
			if err != nil {
				p.ErrorCode, p.ErrorMessage = errCode(err), errMessage(err)
			}
			t.Partitions = append(t.Partitions, p)
		}
		resp.Topics = append(resp.Topics, t)
	}
	sl.finish(resp)
}
