package kafka_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// A Kafka consumer group G's committed offset on a partition is the
// Pulsar subscription G there: a group can move from Kafka consumers to
// Pulsar consumers and back without losing or repeating a record.

// createPulsarTopic creates a non-partitioned topic (one Kafka partition)
// through the admin REST API.
func createPulsarTopic(t testing.TB, srv *harness.Server, topic string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, srv.HTTPURL()+"/admin/v2/persistent/public/default/"+topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: opTimeout}).Do(req)
	if err != nil {
		t.Fatalf("PUT topic %s: %v", topic, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("PUT topic %s: %s", topic, resp.Status)
	}
}

// backlog is subscription sub's msgBacklog in topic's stats.
func backlog(t testing.TB, srv *harness.Server, topic, sub string) int64 {
	t.Helper()
	var st struct {
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}
	getJSON(t, srv.HTTPURL()+"/admin/v2/persistent/public/default/"+topic+"/stats", &st)
	s, ok := st.Subscriptions[sub]
	if !ok {
		t.Fatalf("stats of %s: no subscription %s", topic, sub)
	}
	return s.MsgBacklog
}

// checkLagIsBacklog checks that group's lag on topic (one partition: end
// offset − committed offset) is want and is the subscription's backlog.
func checkLagIsBacklog(t testing.TB, srv *harness.Server, adm *kadm.Client, group, topic string, want int64) {
	t.Helper()
	lag := endOffsets(t, srv, topic)[0] - committed(t, adm, group, topic)[0]
	if lag != want {
		t.Errorf("group %s's lag on %s is %d, want %d", group, topic, lag, want)
	}
	if bl := backlog(t, srv, topic, group); bl != lag {
		t.Errorf("subscription %s's backlog on %s is %d, the group's lag %d", group, topic, bl, lag)
	}
}

// TestGroupMigrationKafkaPulsarKafka: group G reads records 0..9 with
// franz-go and commits 10; a Pulsar consumer of subscription G (Failover)
// gets record 10 first and acknowledges 10..19 one by one, which makes
// G's committed offset 20; a Kafka consumer of G then resumes at 20. At
// each step the subscription's backlog is the group's lag.
func TestGroupMigrationKafkaPulsarKafka(t *testing.T) {
	srv := shared.Server(t)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createPulsarTopic(t, srv, topic)
	var vals []string
	for i := range 30 {
		vals = append(vals, fmt.Sprintf("m-%03d", i))
	}
	produceOneByOne(t, srv, topic, vals) // one record per entry: each its own Pulsar message

	commitTen(t, srv, adm, group, topic, vals)
	checkLagIsBacklog(t, srv, adm, group, topic, 20)

	// Pulsar takes over the group's position.
	pc := harness.NewClient(t, srv.PulsarURL())
	cons, err := pc.Subscribe(pulsar.ConsumerOptions{
		Topic:            pulsarTopic(topic),
		SubscriptionName: group,
		Type:             pulsar.Failover,
	})
	if err != nil {
		t.Fatalf("Subscribe(%s, %s): %v", topic, group, err)
	}
	defer cons.Close()
	for i := 10; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), interopReceiveTimeout)
		msg, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Pulsar Receive of record %d: %v", i, err)
		}
		if string(msg.Payload()) != vals[i] {
			t.Fatalf("Pulsar consumer of subscription %s got %q (%s), want %q", group, msg.Payload(), idOf(msg.ID()), vals[i])
		}
		if err := cons.Ack(msg); err != nil {
			t.Fatalf("Ack %s: %v", vals[i], err)
		}
	}
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 20})
	checkLagIsBacklog(t, srv, adm, group, topic, 10)
	cons.Close()

	// And Kafka takes it back.
	cl := franzClient(t, srv, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond))
	rs := consumeWith(t, cl, 10)
	checkContiguous(t, rs, vals, 20)
	if err := cl.CommitRecords(testCtx(t), rs...); err != nil {
		t.Fatalf("CommitRecords: %v", err)
	}
	cl.Close()
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 30})
	checkLagIsBacklog(t, srv, adm, group, topic, 0)
}
