package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// enforcingBroker is a bootstrapped test broker whose decisions use the
// stack's fake clock (the one giving publish times), enforcing policies
// every interval (negative: never; tests then call enforceOnce).
func enforcingBroker(t *testing.T, interval time.Duration, tweak ...func(*Config)) *testStack {
	t.Helper()
	var stp atomic.Pointer[testStack]
	start := newFakeClock().Now()
	st := bootstrapped(t, append([]func(*Config){func(c *Config) {
		c.MessageExpiryCheckInterval = interval
		c.BacklogQuotaCheckInterval = -1
		c.Clock = func() time.Time {
			if st := stp.Load(); st != nil {
				return st.clock.Now()
			}
			return start
		}
	}}, tweak...)...)
	stp.Store(st)
	return st
}

func mustNamespace(t *testing.T, st *testStack, ns string) {
	t.Helper()
	if err := st.b.CreateNamespace(testCtx(t), DefaultTenant, ns, nil); err != nil {
		t.Fatalf("CreateNamespace %s: %v", ns, err)
	}
}

func wantRetention(t *testing.T, tp *Topic, rt time.Duration, rs int64) {
	t.Helper()
	if gotT, gotS := tp.ManagedLedger().Retention(); gotT != rt || gotS != rs {
		t.Fatalf("%s: retention %v %d, want %v %d", tp.Name(), gotT, gotS, rt, rs)
	}
}

// A namespace's retention reaches its topics' managed ledgers: when a
// topic loads (before its first trim), and in place when it changes
// (starting a trim). Unset, the ledger factory's retention applies.
func TestNamespaceRetention(t *testing.T) {
	ctx := testCtx(t)
	st := enforcingBroker(t, -1)
	mustNamespace(t, st, "ret")
	if err := st.b.SetRetention(ctx, DefaultTenant, "ret", &RetentionPolicies{RetentionTimeInMinutes: 60, RetentionSizeInMB: -1}); err != nil {
		t.Fatal(err)
	}
	name := "persistent://public/ret/t"
	tp := st.mustTopic(t, name)
	wantRetention(t, tp, time.Hour, -1)
	wantRetention(t, st.mustTopic(t, "persistent://public/default/other"), -1, -1) // the factory's

	// Three entries, acknowledged by the only subscription.
	p, _ := mustProducer(t, tp, "p")
	publishAll(t, p, singles(0, 3, nil))
	subscribe(t, tp, SubscribeOptions{Subscription: "s", Durable: true, Initial: InitialEarliest, Sink: newConsumerSink("c", nil)})
	if err := st.b.SkipMessages(ctx, mustParse(t, name), "s", -1); err != nil {
		t.Fatal(err)
	}
	// Unloading closes the ledger they are in; loading again starts a
	// new one and trims with the namespace's retention from the start:
	// the acknowledged ledger is kept for an hour (the factory would keep
	// it forever).
	if err := st.b.UnloadTopic(ctx, mustParse(t, name)); err != nil {
		t.Fatal(err)
	}
	tp = st.mustTopic(t, name)
	wantRetention(t, tp, time.Hour, -1)
	ml := tp.ManagedLedger()
	if n, err := ml.TrimConsumed(ctx); err != nil || n != 0 {
		t.Fatalf("TrimConsumed within the retention time: %d, %v", n, err)
	}
	if got := ml.Ledgers(); len(got) != 2 || got[0].Entries != 3 {
		t.Fatalf("ledgers %+v, want the acknowledged one and the new one", got)
	}
	// A background trim (after a cursor's position is persisted) may run
	// at the advanced time before this one does; trims run one at a time,
	// so once this one returns the acknowledged ledger is gone either way.
	st.clock.Advance(61 * time.Minute)
	if n, err := ml.TrimConsumed(ctx); err != nil || n > 1 {
		t.Fatalf("TrimConsumed past the retention time: %d, %v", n, err)
	}
	if got := ml.Ledgers(); len(got) != 1 || got[0].Entries != 0 {
		t.Fatalf("ledgers %+v past the retention time, want the acknowledged one trimmed", got)
	}

	// A change applies in place (the topic stays loaded) and trims at once.
	p, _ = mustProducer(t, tp, "p")
	publishAll(t, p, singles(3, 2, nil))
	if err := st.b.SkipMessages(ctx, mustParse(t, name), "s", -1); err != nil {
		t.Fatal(err)
	}
	if err := st.b.UnloadTopic(ctx, mustParse(t, name)); err != nil {
		t.Fatal(err)
	}
	tp = st.mustTopic(t, name)
	ml = tp.ManagedLedger()
	if got := ml.Ledgers(); len(got) != 2 {
		t.Fatalf("ledgers %+v, want the acknowledged one and the new one", got)
	}
	if err := st.b.SetRetention(ctx, DefaultTenant, "ret", &RetentionPolicies{}); err != nil { // 0, 0: keep nothing
		t.Fatal(err)
	}
	wantRetention(t, tp, 0, 0)
	waitFor(t, 10*time.Second, func() bool { return len(ml.Ledgers()) == 1 }, "the acknowledged ledger to be trimmed")
	if cur, err := st.b.Topic(ctx, mustParse(t, name), false); err != nil || cur != tp {
		t.Fatalf("the topic was reloaded by a retention change (%v)", err)
	}
	if err := st.b.SetRetention(ctx, DefaultTenant, "ret", &RetentionPolicies{RetentionTimeInMinutes: -1, RetentionSizeInMB: 100}); err != nil {
		t.Fatal(err)
	}
	wantRetention(t, tp, -1, 100<<20)
	if err := st.b.SetRetention(ctx, DefaultTenant, "ret", nil); err != nil {
		t.Fatal(err)
	}
	wantRetention(t, tp, -1, -1) // the factory's again
}

// Messages published more than the namespace's TTL ago are acknowledged
// for every durable subscription: never delivered, out of the backlog.
// A subscription already past them does not move back.
func TestMessageTTL(t *testing.T) {
	ctx := testCtx(t)
	st := enforcingBroker(t, 5*time.Millisecond)
	mustNamespace(t, st, "ttl")
	ttl := 60
	if err := st.b.SetMessageTTL(ctx, DefaultTenant, "ttl", &ttl); err != nil {
		t.Fatal(err)
	}
	name := "persistent://public/ttl/t"
	tp := st.mustTopic(t, name)
	p, _ := mustProducer(t, tp, "p")
	// No permits yet: nothing is delivered.
	c, sink := subscribe(t, tp, SubscribeOptions{Subscription: "s", Type: SubShared, ConsumerName: "c", Durable: true, Initial: InitialEarliest})
	subscribe(t, tp, SubscribeOptions{Subscription: "done", Durable: true, Initial: InitialEarliest, Sink: newConsumerSink("d", nil)})
	old := publishAll(t, p, singles(0, 3, nil))
	st.clock.Advance(30 * time.Second)
	young := publishAll(t, p, singles(3, 2, nil))
	if err := st.b.SkipMessages(ctx, mustParse(t, name), "done", -1); err != nil {
		t.Fatal(err)
	}
	st.b.enforceOnce(ctx)
	if md := c.Subscription().Cursor().MarkDeletePosition(); !md.Before(old[0].ID.Position) {
		t.Fatalf("expired before the TTL: mark-delete %v", md)
	}

	st.clock.Advance(40 * time.Second) // the first 3 are 70 s old, the others 40 s
	cur := c.Subscription().Cursor()
	waitFor(t, 10*time.Second, func() bool { return cur.MarkDeletePosition() == old[2].ID.Position },
		"the periodic check to expire the old messages (mark-delete %v)", cur.MarkDeletePosition())
	b, err := cur.Backlog(ctx)
	if err != nil || b.Messages != 2 {
		t.Fatalf("backlog %+v, %v; want 2 messages", b, err)
	}
	c.Flow(100)
	ds := sink.waitCount(t, 2)
	time.Sleep(quiet)
	if got := seqsOf(t, sink.deliveries()); len(got) != 2 || got[0] != 3 || got[1] != 4 {
		t.Fatalf("delivered sequence ids %v (%v), want the 2 young ones", got, positionsOf(ds))
	}
	doneSub, err := tp.subscription(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if md := doneSub.Cursor().MarkDeletePosition(); md != young[1].ID.Position {
		t.Fatalf("a subscription past the expired messages moved to %v", md)
	}

	// Later, the delivered but unacknowledged ones expire too.
	st.clock.Advance(time.Minute)
	waitFor(t, 10*time.Second, func() bool { return cur.MarkDeletePosition() == young[1].ID.Position },
		"every message to expire (mark-delete %v)", cur.MarkDeletePosition())
	if b, err := cur.Backlog(ctx); err != nil || b.Messages != 0 {
		t.Fatalf("backlog %+v, %v; want none", b, err)
	}
	stats, err := st.b.TopicStats(ctx, mustParse(t, name))
	if err != nil {
		t.Fatal(err)
	}
	if s := stats.Subscriptions["s"]; s.MsgBacklog != 0 {
		t.Fatalf("stats: backlog %d after expiry", s.MsgBacklog)
	}
}

// Without a TTL (or with 0, which disables it, as in Pulsar) nothing
// expires.
func TestNoMessageTTL(t *testing.T) {
	ctx := testCtx(t)
	st := enforcingBroker(t, -1)
	mustNamespace(t, st, "zero")
	zero := 0
	if err := st.b.SetMessageTTL(ctx, DefaultTenant, "zero", &zero); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"persistent://public/default/t", "persistent://public/zero/t"} {
		tp := st.mustTopic(t, name)
		p, _ := mustProducer(t, tp, "p")
		publishAll(t, p, singles(0, 3, nil))
		c, _ := subscribe(t, tp, SubscribeOptions{Subscription: "s", Durable: true, Initial: InitialEarliest, Sink: newConsumerSink("c", nil)})
		st.clock.Advance(24 * time.Hour)
		st.b.enforceOnce(ctx)
		if md := c.Subscription().Cursor().MarkDeletePosition(); md.Entry >= 0 && md.Ledger == tp.ManagedLedger().LastConfirmed().Ledger {
			t.Fatalf("%s: messages expired without a TTL (mark-delete %v)", name, md)
		}
		if b, err := c.Subscription().Cursor().Backlog(ctx); err != nil || b.Messages != 3 {
			t.Fatalf("%s: backlog %+v, %v", name, b, err)
		}
	}
}

// The periodic checks stop with the broker.
func TestEnforcementStops(t *testing.T) {
	st := enforcingBroker(t, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.b.enforce.done:
	default:
		t.Fatal("enforcement still running after Close")
	}
}

// Over a destination_storage quota with producer_request_hold or
// producer_exception, the topic's producers are disconnected by the
// periodic check and new ones refused (with the error telling the two
// apart); once the backlog shrinks, producers are accepted again.
func TestBacklogQuotaProducers(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   error
	}{
		{BacklogPolicyProducerRequestHold, ErrProducerBlockedQuotaExceeded},
		{BacklogPolicyProducerException, ErrProducerBlockedQuotaException},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			ctx := testCtx(t)
			st := enforcingBroker(t, -1, func(c *Config) { c.BacklogQuotaCheckInterval = 5 * time.Millisecond })
			mustNamespace(t, st, "q")
			name := "persistent://public/q/t"
			tp := st.mustTopic(t, name)
			c, _ := subscribe(t, tp, SubscribeOptions{Subscription: "s", Durable: true, Initial: InitialEarliest, Sink: newConsumerSink("c", nil)})
			p, ps := mustProducer(t, tp, "p")
			publishAll(t, p, singles(0, 10, nil))
			// The quota comes after the backlog, so that no check
			// disconnects the producer while it publishes.
			if err := st.b.SetBacklogQuota(ctx, DefaultTenant, "q", BacklogQuotaDestinationStorage,
				&BacklogQuota{LimitSize: 300, LimitTime: -1, Policy: tc.policy}); err != nil {
				t.Fatal(err)
			}
			if b, err := c.Subscription().Cursor().Backlog(ctx); err != nil || b.Bytes <= 300 {
				t.Fatalf("backlog %+v, %v: want over 300 bytes", b, err)
			}
			waitFor(t, 10*time.Second, func() bool { return ps.closedCount() > 0 }, "the producer to be disconnected")
			if _, err := tp.AddProducer(ctx, ProducerOptions{Name: "p2", Sink: &producerSink{}}); !errors.Is(err, tc.want) {
				t.Fatalf("new producer over the quota: %v, want %v", err, tc.want)
			}
			if err := st.b.SkipMessages(ctx, mustParse(t, name), "s", -1); err != nil {
				t.Fatal(err)
			}
			mustProducer(t, tp, "p3")
		})
	}
}

// consumer_backlog_eviction drops the oldest backlog of the subscriptions
// over the quota: by size down to 90% of it, by age the entries older
// than the limit. Producers go on.
func TestBacklogQuotaEviction(t *testing.T) {
	ctx := testCtx(t)
	st := enforcingBroker(t, -1, func(c *Config) { c.BacklogQuotaCheckInterval = -1 })
	mustNamespace(t, st, "size")
	mustNamespace(t, st, "age")

	tp := st.mustTopic(t, "persistent://public/size/t")
	slow, _ := subscribe(t, tp, SubscribeOptions{Subscription: "slow", Durable: true, Initial: InitialEarliest, Sink: newConsumerSink("c", nil)})
	p, ps := mustProducer(t, tp, "p")
	rs := publishAll(t, p, singles(0, 10, nil))
	b, err := slow.Subscription().Cursor().Backlog(ctx)
	if err != nil || b.Entries != 10 {
		t.Fatalf("backlog %+v, %v", b, err)
	}
	per := b.Bytes / 10
	limit := 5 * per // 90%: 4.5 entries' bytes, so 4 are kept
	if err := st.b.SetBacklogQuota(ctx, DefaultTenant, "size", BacklogQuotaDestinationStorage,
		&BacklogQuota{LimitSize: limit, LimitTime: -1, Policy: BacklogPolicyConsumerBacklogEviction}); err != nil {
		t.Fatal(err)
	}
	st.b.enforceQuotasOnce(ctx)
	if md := slow.Subscription().Cursor().MarkDeletePosition(); md != rs[5].ID.Position {
		t.Fatalf("mark-delete %v after eviction, want %v (the 4 newest entries kept)", md, rs[5].ID.Position)
	}
	if b, err := slow.Subscription().Cursor().Backlog(ctx); err != nil || b.Entries != 4 || b.Bytes > limit*9/10 {
		t.Fatalf("backlog after eviction %+v, %v", b, err)
	}
	if ps.closedCount() != 0 {
		t.Fatal("eviction disconnected the producer")
	}
	mustProducer(t, tp, "p2")

	tp = st.mustTopic(t, "persistent://public/age/t")
	aged, _ := subscribe(t, tp, SubscribeOptions{Subscription: "s", Durable: true, Initial: InitialEarliest, Sink: newConsumerSink("c", nil)})
	if err := st.b.SetBacklogQuota(ctx, DefaultTenant, "age", BacklogQuotaMessageAge,
		&BacklogQuota{LimitSize: -1, LimitTime: 60, Policy: BacklogPolicyConsumerBacklogEviction}); err != nil {
		t.Fatal(err)
	}
	p, _ = mustProducer(t, tp, "p")
	old := publishAll(t, p, singles(0, 3, nil))
	st.clock.Advance(30 * time.Second)
	publishAll(t, p, singles(3, 2, nil))
	st.b.enforceQuotasOnce(ctx)
	if md := aged.Subscription().Cursor().MarkDeletePosition(); !md.Before(old[0].ID.Position) {
		t.Fatalf("evicted before the age limit: mark-delete %v", md)
	}
	st.clock.Advance(40 * time.Second)
	st.b.enforceQuotasOnce(ctx)
	if md := aged.Subscription().Cursor().MarkDeletePosition(); md != old[2].ID.Position {
		t.Fatalf("mark-delete %v after age eviction, want %v", md, old[2].ID.Position)
	}
}
