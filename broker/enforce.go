package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// Enforcement of namespace policies on loaded topics (see
// docs/design/0005-admin.md):
//
//   - retention_policies: the topic's managed ledger keeps acknowledged
//     data for the namespace's retention time and size
//     (ledger.WithRetention when the topic loads, then
//     ManagedLedger.SetRetention); unset, the ledger factory's retention
//     applies. Applied when a topic loads, right after every policy change
//     (policiesChanged, from UpdateNamespacePolicies) and on every
//     enforcement tick (which also covers a topic that loaded while the
//     policy changed).
//   - backlog_quota_map: every BacklogQuotaCheckInterval and when a
//     producer is created (quota.go).
//   - message_ttl_in_seconds: every MessageExpiryCheckInterval (the
//     enforcement tick), each durable subscription of a loaded topic has
//     the entries published more than the TTL ago acknowledged for it
//     (its mark-delete position moves forward, never back). 0 disables
//     it, as in Pulsar.
//
// The tick reads the time from Config.Clock (publish times come from the
// ledger factory's clock), so tests drive it with a fake clock and call
// enforceOnce directly.

// enforcer runs the periodic checks.
type enforcer struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startEnforcing starts the periodic checks: enforceOnce every
// MessageExpiryCheckInterval, enforceQuotasOnce every
// BacklogQuotaCheckInterval (none for a negative interval).
func (b *Broker) startEnforcing() *enforcer {
	e := &enforcer{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, l := range []struct {
		d time.Duration
		f func(context.Context)
	}{{b.cfg.MessageExpiryCheckInterval, b.enforceOnce}, {b.cfg.BacklogQuotaCheckInterval, b.enforceQuotasOnce}} {
		if l.d > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e.loop(l.d, l.f)
			}()
		}
	}
	go func() {
		wg.Wait()
		close(e.done)
	}()
	return e
}

// loop calls f every d until stopped.
func (e *enforcer) loop(d time.Duration, f func(context.Context)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
		go func() { // a Close meanwhile ends the tick's work
			select {
			case <-e.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		f(ctx)
		cancel()
	}
}

// stopEnforcing stops the periodic checks and waits for a running one.
func (b *Broker) stopEnforcing() {
	e := b.enforce
	if e == nil {
		return
	}
	e.once.Do(func() { close(e.stop) })
	<-e.done
}

// loadedTopicsIn returns the loaded topics whose names start with prefix
// ("" for all).
func (b *Broker) loadedTopicsIn(prefix string) []*Topic {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*Topic
	for key, tl := range b.topics {
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		select {
		case <-tl.done:
			if tl.t != nil {
				out = append(out, tl.t)
			}
		default: // loading: it applies the policies it reads
		}
	}
	return out
}

func namespacePrefix(tenant, ns string) string { return "persistent://" + tenant + "/" + ns + "/" }

// enforceOnce applies retention and expires messages past their TTL on
// every loaded topic. Failures are logged; the next tick tries again.
func (b *Broker) enforceOnce(ctx context.Context) {
	policies := map[string]*Policies{} // by namespace; nil: none readable
	for _, t := range b.loadedTopicsIn("") {
		ns := t.name.NamespaceName()
		p, ok := policies[ns]
		if !ok {
			if tp, err := b.topicPolicies(ctx, t.name); err == nil {
				p = &tp
			} else if !errors.Is(err, ErrNamespaceNotFound) {
				t.log.Warn("namespace policies not read: not enforced this time", "err", err)
			}
			policies[ns] = p
		}
		if p == nil {
			continue
		}
		t.applyRetention(p.RetentionPolicies)
		if ttl := p.MessageTTLInSeconds; ttl != nil && *ttl > 0 {
			if err := t.expireMessages(ctx, time.Duration(*ttl)*time.Second); err != nil && ctx.Err() == nil {
				t.log.Warn("expiring messages past their TTL failed", "err", err)
			}
		}
	}
}

// policiesChanged brings the loaded topics of tenant/ns in line with
// their namespace's new policies p (those applied in place).
func (b *Broker) policiesChanged(tenant, ns string, p Policies) {
	for _, t := range b.loadedTopicsIn(namespacePrefix(tenant, ns)) {
		t.applyRetention(p.RetentionPolicies)
	}
}

// openOptions are the options of a topic's managed ledger: its
// namespace's replication (persistence policies) and retention, applied
// before its first ledger and its first trim. None if the
// policies cannot be read (a topic stored before its namespace keeps the
// broker's defaults; otherwise the next enforcement tick applies them).
func (b *Broker) openOptions(ctx context.Context, t TopicName) []ledger.OpenOption {
	p, err := b.topicPolicies(ctx, t)
	if err != nil {
		return nil
	}
	var opts []ledger.OpenOption
	if pp := p.Persistence; pp != nil {
		opts = append(opts, ledger.WithQuorums(pp.BookkeeperEnsemble, pp.BookkeeperWriteQuorum, pp.BookkeeperAckQuorum))
	}
	c, err := b.TopicConfig(ctx, t)
	if rt, rs, ok := ownRetention(&c, p.RetentionPolicies); err == nil && ok {
		return append(opts, ledger.WithRetention(rt, rs))
	}
	if p.RetentionPolicies == nil {
		return opts
	}
	rt, rs := retentionLimits(*p.RetentionPolicies)
	return append(opts, ledger.WithRetention(rt, rs))
}

// applyRetention gives the topic's managed ledger the retention r (nil:
// the ledger factory's). Setting the same retention again does nothing.
func (t *Topic) applyRetention(r *RetentionPolicies) {
	if rt, rs, ok := ownRetention(t.config.Load(), r); ok {
		t.ml.SetRetention(rt, rs)
		return
	}
	if r == nil {
		t.ml.ResetRetention()
		return
	}
	rt, rs := retentionLimits(*r)
	t.ml.SetRetention(rt, rs)
}

// retentionLimits converts a retention policy to the managed ledger's
// limits: -1 (no limit) stays negative, 0 keeps nothing.
func retentionLimits(r RetentionPolicies) (time.Duration, int64) {
	rt, rs := time.Duration(-1), int64(-1)
	if r.RetentionTimeInMinutes >= 0 {
		rt = time.Duration(r.RetentionTimeInMinutes) * time.Minute
	}
	if r.RetentionSizeInMB >= 0 {
		rs = r.RetentionSizeInMB << 20
	}
	return rt, rs
}

// expireMessages acknowledges, for every durable subscription, the
// entries published more than ttl ago (by Config.Clock): its mark-delete
// position moves to the last such entry, unless it is already there or
// past it.
func (t *Topic) expireMessages(ctx context.Context, ttl time.Duration) error {
	last := t.ml.LastConfirmed()
	if last.Entry < 0 {
		return nil
	}
	upTo := last // every entry is older than the cut-off
	info, err := t.ml.FindTime(ctx, t.b.cfg.Clock().Add(-ttl))
	switch {
	case err == nil:
		// The entry before the first one young enough; entry -1 of a
		// ledger is the position before its first entry.
		upTo = ledger.Position{Ledger: info.Position.Ledger, Entry: info.Position.Entry - 1}
	case !errors.Is(err, ledger.ErrOffsetOutOfRange):
		return err
	}
	var errs []error
	for _, c := range t.ml.Cursors() {
		if isInternalCursor(c.Name()) || !c.MarkDeletePosition().Before(upTo) {
			continue
		}
		s, err := t.subscription(ctx, c.Name())
		if err != nil {
			if !errors.Is(err, ErrSubscriptionNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		moved, err := s.expire(upTo)
		if err != nil {
			errs = append(errs, fmt.Errorf("subscription %s: %w", s.name, err))
		} else if moved {
			s.log.Info("messages expired (TTL)", "ttl", ttl, "markDelete", upTo)
		}
	}
	return errors.Join(errs...)
}

// expire acknowledges every entry up to upTo, and forgets what the
// dispatcher holds of them (consumers never get them). It reports whether
// the mark-delete position moved.
func (s *Subscription) expire(upTo ledger.Position) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.cursor.MarkDeletePosition().Before(upTo) {
		return false, nil
	}
	if err := s.cursor.MarkDelete(upTo, nil); err != nil {
		return false, err
	}
	s.forgetSkippedLocked(func(p ledger.Position) bool { return p.Compare(upTo) <= 0 })
	return true, nil
}
