package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// Backlog quotas (backlog_quota_map), enforced as Pulsar's
// BacklogQuotaManager does:
//
//   - destination_storage is over when the backlog of the slowest durable
//     subscription exceeds limitSize bytes (negative: no limit);
//     message_age when its oldest unacknowledged entry was published more
//     than limitTime seconds ago (≤ 0: no limit).
//   - producer_request_hold and producer_exception: the topic's producers
//     are disconnected (on each enforcement tick while over), and new
//     producers are refused — with ErrProducerBlockedQuotaExceeded (hold:
//     Pulsar clients keep retrying) or ErrProducerBlockedQuotaException
//     (exception: they fail).
//   - consumer_backlog_eviction: on each tick, the subscriptions over the
//     size quota have their oldest backlog acknowledged until it is at
//     most 90% of limitSize; those over the age quota have the entries
//     older than limitTime acknowledged (as message TTL does). Producers
//     are not refused.
//
// The dedup cursor is no subscription: it counts for neither.

// Errors of producers refused by a backlog quota (wrapped, naming the
// topic); the Pulsar protocol answers ProducerBlockedQuotaExceededError
// and ProducerBlockedQuotaExceededException.
var (
	ErrProducerBlockedQuotaExceeded  = errors.New("producer blocked: backlog quota exceeded (producer_request_hold)")
	ErrProducerBlockedQuotaException = errors.New("producer refused: backlog quota exceeded (producer_exception)")
)

// evictionTarget is the fraction of limitSize consumer_backlog_eviction
// brings a backlog down to (Pulsar's).
const evictionTarget = 0.9

// overQuota returns the backlog quota t is over, if any: destination_storage
// is checked first.
func (t *Topic) overQuota(ctx context.Context, quotas map[string]BacklogQuota) (string, BacklogQuota, bool, error) {
	if len(quotas) == 0 {
		return "", BacklogQuota{}, false, nil
	}
	if q, ok := quotas[BacklogQuotaDestinationStorage]; ok && q.LimitSize >= 0 {
		for _, s := range t.durableSubscriptions() {
			b, err := s.Backlog(ctx)
			if err != nil {
				return "", q, false, err
			}
			if b.Bytes > q.LimitSize {
				return BacklogQuotaDestinationStorage, q, true, nil
			}
		}
	}
	if q, ok := quotas[BacklogQuotaMessageAge]; ok && q.LimitTime > 0 {
		cutoff := t.b.cfg.Clock().Add(-time.Duration(q.LimitTime) * time.Second).UnixMilli()
		for _, c := range t.durableSubscriptions() {
			pub, ok, err := t.oldestUnacked(ctx, c)
			if err != nil {
				return "", q, false, err
			}
			if ok && pub < cutoff {
				return BacklogQuotaMessageAge, q, true, nil
			}
		}
	}
	return "", BacklogQuota{}, false, nil
}

// durableSubscriptions returns the cursors of t's durable subscriptions.
func (t *Topic) durableSubscriptions() []*ledger.Cursor {
	var out []*ledger.Cursor
	for _, c := range t.ml.Cursors() {
		if !isInternalCursor(c.Name()) {
			out = append(out, c)
		}
	}
	return out
}

// oldestUnacked returns the publish time (ms) of the first entry after
// c's mark-delete position; ok=false if c has no backlog.
func (t *Topic) oldestUnacked(ctx context.Context, c *ledger.Cursor) (int64, bool, error) {
	md := c.MarkDeletePosition()
	if !md.Before(t.ml.LastConfirmed()) {
		return 0, false, nil
	}
	es, err := t.ml.Read(ctx, t.ml.Next(md), 1)
	if errors.Is(err, ledger.ErrOffsetOutOfRange) || (err == nil && len(es) == 0) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return es[0].Header.PublishTime, true, nil
}

// checkProducerQuota refuses a new producer while t is over a backlog
// quota whose policy holds or refuses producers.
func (t *Topic) checkProducerQuota(ctx context.Context) error {
	p, err := t.b.topicPolicies(ctx, t.name)
	if err != nil || len(p.BacklogQuotaMap) == 0 {
		return nil // no policies, no quota (a missing namespace is reported elsewhere)
	}
	typ, q, over, err := t.overQuota(ctx, p.BacklogQuotaMap)
	if err != nil || !over {
		return err
	}
	switch q.Policy {
	case BacklogPolicyProducerRequestHold:
		return fmt.Errorf("%w: %s is over its %s quota", ErrProducerBlockedQuotaExceeded, t.name, typ)
	case BacklogPolicyProducerException:
		return fmt.Errorf("%w: %s is over its %s quota", ErrProducerBlockedQuotaException, t.name, typ)
	}
	return nil
}

// enforceBacklogQuotas applies the quota t is over, if any (see above).
func (t *Topic) enforceBacklogQuotas(ctx context.Context, quotas map[string]BacklogQuota) error {
	typ, q, over, err := t.overQuota(ctx, quotas)
	if err != nil || !over {
		if err == nil {
			t.kafkaBlocked.Store(nil)
		}
		return err
	}
	switch q.Policy {
	case BacklogPolicyProducerRequestHold, BacklogPolicyProducerException:
		// Kafka producers have no session to close: their appends are
		// refused until a tick finds the topic under its quota again.
		sentinel := ErrProducerBlockedQuotaExceeded
		if q.Policy == BacklogPolicyProducerException {
			sentinel = ErrProducerBlockedQuotaException
		}
		blocked := fmt.Errorf("%w: %s is over its %s quota", sentinel, t.name, typ)
		t.kafkaBlocked.Store(&blocked)
		t.mu.Lock()
		producers := make([]*Producer, 0, len(t.producers))
		for _, p := range t.producers {
			producers = append(producers, p)
		}
		t.mu.Unlock()
		for _, p := range producers {
			p.disconnect()
		}
		if len(producers) > 0 {
			t.log.Info("backlog quota exceeded: producers disconnected", "quota", typ, "policy", q.Policy, "producers", len(producers))
		}
		return nil
	case BacklogPolicyConsumerBacklogEviction:
		if typ == BacklogQuotaMessageAge {
			return t.expireMessages(ctx, time.Duration(q.LimitTime)*time.Second)
		}
		return t.evictBySize(ctx, int64(evictionTarget*float64(q.LimitSize)))
	}
	return nil
}

// evictBySize acknowledges, for each durable subscription whose backlog
// is over target bytes, its oldest unacknowledged entries until the rest
// fits.
func (t *Topic) evictBySize(ctx context.Context, target int64) error {
	var errs []error
	for _, c := range t.durableSubscriptions() {
		b, err := c.Backlog(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if b.Bytes <= target {
			continue
		}
		s, err := t.subscription(ctx, c.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		excess := b.Bytes - target
		var upTo ledger.Position
		found := false
		err = s.scanUnacked(ctx, func(e ledger.Entry) bool {
			excess -= int64(ledger.HeaderSize + len(e.Payload))
			upTo, found = e.Position, true
			return excess > 0
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found {
			continue
		}
		if moved, err := s.expire(upTo); err != nil {
			errs = append(errs, err)
		} else if moved {
			s.log.Info("backlog evicted (backlog quota)", "markDelete", upTo, "targetBytes", target)
		}
	}
	return errors.Join(errs...)
}

// enforceQuotasOnce applies the backlog quotas of every loaded topic's
// namespace. Failures are logged; the next tick tries again.
func (b *Broker) enforceQuotasOnce(ctx context.Context) {
	quotas := map[string]map[string]BacklogQuota{} // by namespace
	for _, t := range b.loadedTopicsIn("") {
		ns := t.name.NamespaceName()
		q, ok := quotas[ns]
		if !ok {
			if p, err := b.topicPolicies(ctx, t.name); err == nil {
				q = p.BacklogQuotaMap
			} else if !errors.Is(err, ErrNamespaceNotFound) {
				t.log.Warn("namespace policies not read: backlog quotas not enforced this time", "err", err)
			}
			quotas[ns] = q
		}
		if err := t.enforceBacklogQuotas(ctx, q); err != nil && ctx.Err() == nil {
			t.log.Warn("enforcing the backlog quota failed", "err", err)
		}
	}
}
