package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/admin/config"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// Namespace policies set through pulsaradmin are enforced on topics used
// through pulsar-client-go.

// consumeAcked receives n messages on a new durable subscription sub
// (from the earliest), acknowledges them and closes the consumer.
func consumeAcked(t *testing.T, c pulsar.Client, topic, sub string, n int) {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: sub,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		msg, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: message %d: %v", topic, i, err)
		}
		if err := cons.Ack(msg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNamespaceRetentionEnforced: acknowledged messages stay readable
// from the earliest position in a namespace with a retention policy; in a
// namespace without one (the broker's default: keep nothing) they are
// gone once their ledger is closed (here by an unload).
func TestNamespaceRetentionEnforced(t *testing.T) {
	a := adminClient(t)
	tn := newTenant(t)
	keep, none := tn+"/keep", tn+"/none"
	for _, ns := range []string{keep, none} {
		if err := a.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Namespaces().SetRetention(keep, utils.NewRetentionPolicies(60, -1)); err != nil {
		t.Fatal(err)
	}
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	topics := map[string]string{keep: "persistent://" + keep + "/" + name(t), none: "persistent://" + none + "/" + name(t)}
	for _, topic := range topics {
		consumeAcked(t, c, topic, "sub", 0) // the subscription exists before the messages
		sendSeqs(t, c, topic, "p-"+name(t), 0, 1, 2)
		consumeAcked(t, c, topic, "sub", 3)
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Topics().Unload(*tn); err != nil {
			t.Fatalf("Unload(%s): %v", topic, err)
		}
	}
	harness.WaitFor(t, 30*time.Second, func() bool { return len(receiveAll(t, c, topics[none])) == 0 },
		"the acknowledged messages of the namespace without retention to be trimmed")
	for range 2 { // the second read comes after the first trim of the loaded topic
		if got := receiveAll(t, c, topics[keep]); len(got) != 3 {
			t.Fatalf("%s (retention 60 min): a reader from the earliest got %v, want the 3 acknowledged messages", topics[keep], got)
		}
	}
}

// TestNamespaceMessageTTLEnforced: with a message TTL, unacknowledged
// messages expire: the subscription's backlog drops to 0 and a consumer
// gets none of them; without one they stay. Its own server checks
// expiry every second.
func TestNamespaceMessageTTLEnforced(t *testing.T) {
	srv := harness.Start(t, harness.WithArgs("--message-expiry-check-interval", "1s"))
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: srv.HTTPURL()})
	if err != nil {
		t.Fatal(err)
	}
	tn := name(t)
	if err := a.Tenants().Create(utils.TenantData{Name: tn, AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	ttl, none := tn+"/ttl", tn+"/none"
	for _, ns := range []string{ttl, none} {
		if err := a.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Namespaces().SetNamespaceMessageTTL(ttl, 2); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Namespaces().GetNamespaceMessageTTL(ttl); err != nil || got != 2 {
		t.Fatalf("GetNamespaceMessageTTL = %d, %v", got, err)
	}
	c := harness.NewClient(t, srv.PulsarURL())
	backlog := func(topic string) int64 {
		t.Helper()
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			t.Fatal(err)
		}
		st, err := a.Topics().GetStats(*tn)
		if err != nil {
			t.Fatalf("GetStats(%s): %v", topic, err)
		}
		return st.Subscriptions["sub"].MsgBacklog
	}
	topics := map[string]string{ttl: "persistent://" + ttl + "/" + name(t), none: "persistent://" + none + "/" + name(t)}
	for _, topic := range topics {
		consumeAcked(t, c, topic, "sub", 0)
		sendSeqs(t, c, topic, "p-"+name(t), 0, 1, 2, 3, 4)
		if b := backlog(topic); b != 5 {
			t.Fatalf("%s: backlog %d after publishing, want 5", topic, b)
		}
	}
	harness.WaitFor(t, 30*time.Second, func() bool { return backlog(topics[ttl]) == 0 },
		"the messages past the TTL to expire (backlog 0)")
	if b := backlog(topics[none]); b != 5 {
		t.Fatalf("%s (no TTL): backlog %d, want 5", topics[none], b)
	}
	for ns, want := range map[string]int{ttl: 0, none: 5} {
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topics[ns], SubscriptionName: "sub"})
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			msg, err := cons.Receive(ctx)
			cancel()
			if err != nil {
				break
			}
			got++
			cons.Ack(msg)
		}
		cons.Close()
		if got != want {
			t.Errorf("%s: consumer received %d messages, want %d", topics[ns], got, want)
		}
	}
}

// TestNamespaceBacklogQuotaEnforced: over a destination_storage quota, a
// new producer is refused with ProducerBlockedQuotaExceededError
// (producer_request_hold) or ...Exception (producer_exception), and
// consumer_backlog_eviction drops the oldest backlog. Its own server
// checks quotas every second.
func TestNamespaceBacklogQuotaEnforced(t *testing.T) {
	srv := harness.Start(t, harness.WithArgs("--backlog-quota-check-interval", "1s"))
	a, err := pulsaradmin.NewClient(&config.Config{WebServiceURL: srv.HTTPURL()})
	if err != nil {
		t.Fatal(err)
	}
	tn := name(t)
	if err := a.Tenants().Create(utils.TenantData{Name: tn, AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	c := harness.NewClient(t, srv.PulsarURL())
	backlog := func(topic string) int64 {
		t.Helper()
		tn, err := utils.GetTopicName(topic)
		if err != nil {
			t.Fatal(err)
		}
		st, err := a.Topics().GetStats(*tn)
		if err != nil {
			t.Fatalf("GetStats(%s): %v", topic, err)
		}
		return st.Subscriptions["sub"].MsgBacklog
	}
	for _, tc := range []struct {
		policy  utils.RetentionPolicy
		refusal string // in the CreateProducer error; "" for none
	}{
		{utils.ProducerRequestHold, "ProducerBlockedQuotaExceededError"},
		{utils.ProducerException, "ProducerBlockedQuotaExceededException"},
		{utils.ConsumerBacklogEviction, ""},
	} {
		ns := tn + "/" + strings.ReplaceAll(string(tc.policy), "_", "-")
		if err := a.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatal(err)
		}
		topic := "persistent://" + ns + "/" + name(t)
		consumeAcked(t, c, topic, "sub", 0)
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 { // ~ 20 × 250 bytes of backlog
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(strings.Repeat("x", 200))})
			cancel()
			if err != nil {
				t.Fatalf("%s: send %d: %v", tc.policy, i, err)
			}
		}
		p.Close()
		// The quota comes after the backlog, so that no check disconnects
		// the producer while it sends.
		if err := a.Namespaces().SetBacklogQuota(ns, utils.NewBacklogQuota(2048, -1, tc.policy), utils.DestinationStorage); err != nil {
			t.Fatal(err)
		}
		if tc.refusal == "" {
			harness.WaitFor(t, 30*time.Second, func() bool { b := backlog(topic); return b > 0 && b < 20 },
				"the oldest backlog to be evicted")
			p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err != nil {
				t.Fatalf("%s: producer refused: %v", tc.policy, err)
			}
			p.Close()
			continue
		}
		_, err = c.CreateProducer(pulsar.ProducerOptions{Topic: topic, SendTimeout: 5 * time.Second})
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Fatalf("%s: CreateProducer over the quota: %v, want %s", tc.policy, err, tc.refusal)
		}
		if b := backlog(topic); b != 20 {
			t.Fatalf("%s: backlog %d, want 20 (nothing evicted)", tc.policy, b)
		}
		// Once the backlog is consumed, producers are accepted again.
		consumeAcked(t, c, topic, "sub", 20)
		harness.WaitFor(t, 30*time.Second, func() bool {
			p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
			if err == nil {
				p.Close()
			}
			return err == nil
		}, "a producer to be accepted after the backlog was consumed")
	}
}
