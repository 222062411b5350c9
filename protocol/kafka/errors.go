package kafka

import (
	"context"
	"errors"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
)

// Kafka error codes (the protocol's numbering).
const (
	errUnknownServer            int16 = -1
	errOffsetOutOfRange         int16 = 1
	errCorruptMessage           int16 = 2
	errUnknownTopicOrPartition  int16 = 3
	errLeaderNotAvailable       int16 = 5
	errNotLeaderOrFollower      int16 = 6
	errRequestTimedOut          int16 = 7
	errMessageTooLarge          int16 = 10
	errInvalidTopic             int16 = 17
	errRecordListTooLarge       int16 = 18
	errNotEnoughReplicas        int16 = 19
	errInvalidRequiredAcks      int16 = 21
	errUnsupportedVersion       int16 = 35
	errTopicAlreadyExists       int16 = 36
	errInvalidPartitions        int16 = 37
	errInvalidReplicationFactor int16 = 38
	errInvalidConfig            int16 = 40
	errInvalidRequest           int16 = 42
	errPolicyViolation          int16 = 44
	errOutOfOrderSequence       int16 = 45
	errInvalidProducerEpoch     int16 = 47
	errInvalidTxnState          int16 = 48
	errTransactionalIDAuth      int16 = 53
	errKafkaStorage             int16 = 56
	errInvalidRecord            int16 = 87
	errThrottlingQuotaExceeded  int16 = 89
)

// errCode maps a broker error to the Kafka error code clients act on.
func errCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, broker.ErrInvalidKafkaTopic), errors.Is(err, broker.ErrInvalidTopicName):
		return errInvalidTopic
	case errors.Is(err, broker.ErrTopicNotFound), errors.Is(err, broker.ErrNamespaceNotFound),
		errors.Is(err, broker.ErrTenantNotFound):
		return errUnknownTopicOrPartition
	case errors.Is(err, broker.ErrCorruptBatch), errors.Is(err, broker.ErrUnsupportedBatch):
		return errCorruptMessage
	case errors.Is(err, broker.ErrOutOfOrderSequence):
		return errOutOfOrderSequence
	case errors.Is(err, broker.ErrProducerFenced):
		return errInvalidProducerEpoch
	case errors.Is(err, ledger.ErrOffsetOutOfRange):
		return errOffsetOutOfRange
	case errors.Is(err, broker.ErrAlreadyExists):
		return errTopicAlreadyExists
	case errors.Is(err, broker.ErrTopicClosed), errors.Is(err, broker.ErrBrokerClosed),
		errors.Is(err, ledger.ErrFenced), errors.Is(err, ledger.ErrClosed),
		errors.Is(err, broker.ErrNotOwner), errors.Is(err, broker.ErrBundleUnloading):
		// The partition is elsewhere or moving (another broker owns it,
		// it is being unloaded or closed, another owner fenced it): the
		// client refreshes its metadata and retries.
		return errNotLeaderOrFollower
	case errors.Is(err, broker.ErrTopicTerminated), errors.Is(err, broker.ErrProducerBlockedQuotaException):
		return errPolicyViolation
	case errors.Is(err, broker.ErrProducerBlockedQuotaExceeded):
		return errThrottlingQuotaExceeded // retriable: the producer holds and retries
	case errors.Is(err, broker.ErrInvalidRequest):
		return errInvalidRequest
	case errors.Is(err, context.DeadlineExceeded):
		return errRequestTimedOut
	case errors.Is(err, ledger.ErrCorrupt):
		return errKafkaStorage
	case errors.Is(err, ledger.ErrBookieReadOnly):
		// The bookie's disk failed or filled: Kafka's answer for a log
		// directory it cannot write. Retriable: the producer retries
		// (until its delivery timeout), the ledger moves to a writable
		// bookie if there is one.
		return errKafkaStorage
	case errors.Is(err, ledger.ErrNotEnoughBookies):
		// Too few writable bookies for the write quorum: Kafka's answer
		// when the in-sync replicas are too few. Retriable.
		return errNotEnoughReplicas
	}
	return errUnknownServer
}

func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
