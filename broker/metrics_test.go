package broker

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta/local"
)

// gathered is one scrape: series by metric name, each as its labels
// ("k=v,k=v", sorted) and value.
type gathered map[string]map[string]float64

func gather(t testing.TB, g prometheus.Gatherer) gathered {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return toGathered(mfs)
}

func toGathered(mfs []*dto.MetricFamily) gathered {
	out := gathered{}
	for _, mf := range mfs {
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			series[strings.Join(ls, ",")] = metricValue(m)
		}
		out[mf.GetName()] = series
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// topicKey is the label set of a topic series.
func topicKey(ns, topic string) string {
	return fmt.Sprintf("namespace=%s,tenant=%s,topic=%s", ns, strings.Split(ns, "/")[0], topic)
}

// subKey is the label set of a subscription series.
func subKey(ns, topic, sub string) string {
	return fmt.Sprintf("namespace=%s,subscription=%s,tenant=%s,topic=%s", ns, sub, strings.Split(ns, "/")[0], topic)
}

// value returns the series of name with labels, failing if it is absent.
func (g gathered) value(t testing.TB, name, labels string) float64 {
	t.Helper()
	v, ok := g[name][labels]
	if !ok {
		t.Fatalf("no series %s{%s}; have %v", name, labels, g[name])
	}
	return v
}

func newMetricsRegistry(t testing.TB, b *Broker, cfg MetricsConfig) *prometheus.Registry {
	t.Helper()
	mc, err := NewMetricsCollector(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(mc); err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestTopicMetrics(t *testing.T) {
	st := newTestBroker(t)
	reg := newMetricsRegistry(t, st.b, MetricsConfig{MaxTopics: 10})
	const name = "persistent://public/default/metered"
	tp := st.mustTopic(t, name)
	p, _ := mustProducer(t, tp, "p1")

	ca, sa := subscribe(t, tp, SubscribeOptions{Subscription: "sub-a", ConsumerName: "ca", Durable: true, Initial: InitialEarliest})
	subscribe(t, tp, SubscribeOptions{Subscription: "sub-b", ConsumerName: "cb", Type: SubShared, Durable: true, Initial: InitialEarliest})

	ms := singles(0, 5, nil)
	var inBytes float64
	for _, m := range ms {
		inBytes += float64(len(m.request(t, p.Name()).Data))
	}
	publishAll(t, p, ms)
	ca.Flow(100)
	ds := sa.waitCount(t, 5)
	var outBytes float64
	for _, d := range ds {
		outBytes += float64(len(d.Entry.Payload))
	}
	ackAll(t, ca, ds[:2])

	key := topicKey("public/default", name)
	var g, first gathered // first: the scrape that sampled the rates first
	waitFor(t, 10*time.Second, func() bool {
		g = gather(t, reg)
		if first == nil {
			first = g
		}
		return g["magnetar_subscription_msg_backlog"][subKey("public/default", name, "sub-a")] == 3
	}, "sub-a's backlog to be 3 after 2 of 5 acknowledged")
	for _, c := range []struct {
		metric string
		want   float64
	}{
		{"magnetar_topic_in_messages_total", 5},
		{"magnetar_topic_in_bytes_total", inBytes},
		{"magnetar_topic_out_messages_total", 5},
		{"magnetar_topic_out_bytes_total", outBytes},
		{"magnetar_topic_storage_size", float64(tp.ml.TotalSize())},
		{"magnetar_topic_msg_backlog", 3 + 5},
		{"magnetar_topic_subscriptions_count", 2},
		{"magnetar_topic_producers_count", 1},
		{"magnetar_topic_consumers_count", 2},
	} {
		if got := g.value(t, c.metric, key); got != c.want {
			t.Errorf("%s = %v; want %v", c.metric, got, c.want)
		}
	}
	if got := g.value(t, "magnetar_subscription_msg_backlog", subKey("public/default", name, "sub-b")); got != 5 {
		t.Errorf("sub-b's backlog %v; want 5 (nothing delivered)", got)
	}
	if s := g.value(t, "magnetar_topic_storage_size", key); s <= inBytes {
		t.Errorf("storage size %v; want more than the %v bytes published (headers included)", s, inBytes)
	}
	for _, m := range []string{"magnetar_topic_rate_in", "magnetar_topic_throughput_in", "magnetar_topic_rate_out", "magnetar_topic_throughput_out"} {
		if v := first.value(t, m, key); v <= 0 {
			t.Errorf("%s = %v; want > 0 at the first scrape after traffic", m, v)
		}
	}
	if got := g.value(t, "magnetar_topics_loaded", ""); got != 1 {
		t.Errorf("magnetar_topics_loaded = %v; want 1", got)
	}

	// Counters only grow while the topic is loaded.
	publishAll(t, p, singles(5, 3, nil))
	g = gather(t, reg)
	if got := g.value(t, "magnetar_topic_in_messages_total", key); got != 8 {
		t.Errorf("after 3 more: in_messages_total %v; want 8", got)
	}
}

func TestTopicMetricsCardinalityCap(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	if err := st.b.CreateNamespace(ctx, "public", "second", nil); err != nil {
		t.Fatal(err)
	}
	reg := newMetricsRegistry(t, st.b, MetricsConfig{MaxTopics: 2})
	nsOnly := newMetricsRegistry(t, st.b, MetricsConfig{MaxTopics: 0})

	// Topic i gets i+1 messages.
	names := []string{
		"persistent://public/default/t0",
		"persistent://public/default/t1",
		"persistent://public/default/t2",
		"persistent://public/second/t3",
		"persistent://public/second/t4",
	}
	for i, n := range names {
		p, _ := mustProducer(t, st.mustTopic(t, n), "p")
		publishAll(t, p, singles(0, i+1, nil))
	}
	check := func(g gathered, want map[string]float64) {
		t.Helper()
		got := g["magnetar_topic_in_messages_total"]
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("in_messages_total series:\n got %v\nwant %v", got, want)
		}
	}
	// The first two names get their own series; the rest are added up
	// per namespace.
	check(gather(t, reg), map[string]float64{
		topicKey("public/default", names[0]):         1,
		topicKey("public/default", names[1]):         2,
		topicKey("public/default", OtherTopicsLabel): 3,
		topicKey("public/second", OtherTopicsLabel):  4 + 5,
	})
	g := gather(t, reg)
	if got := g.value(t, "magnetar_topic_producers_count", topicKey("public/second", OtherTopicsLabel)); got != 2 {
		t.Errorf("producers of public/second/_other: %v; want 2", got)
	}
	if got := g.value(t, "magnetar_topics_loaded", ""); got != 5 {
		t.Errorf("magnetar_topics_loaded = %v; want 5", got)
	}
	// MaxTopics 0: namespace aggregates only.
	check(gather(t, nsOnly), map[string]float64{
		topicKey("public/default", OtherTopicsLabel): 1 + 2 + 3,
		topicKey("public/second", OtherTopicsLabel):  4 + 5,
	})

	// A new topic that sorts first does not take a slot from a topic
	// that has one...
	pa, _ := mustProducer(t, st.mustTopic(t, "persistent://public/default/a"), "p")
	publishAll(t, pa, singles(0, 10, nil))
	check(gather(t, reg), map[string]float64{
		topicKey("public/default", names[0]):         1,
		topicKey("public/default", names[1]):         2,
		topicKey("public/default", OtherTopicsLabel): 10 + 3,
		topicKey("public/second", OtherTopicsLabel):  4 + 5,
	})
	// ...until a slot is freed by an unload.
	if err := st.mustTopic(t, names[1]).Close(ctx); err != nil {
		t.Fatal(err)
	}
	check(gather(t, reg), map[string]float64{
		topicKey("public/default", "persistent://public/default/a"): 10,
		topicKey("public/default", names[0]):                        1,
		topicKey("public/default", OtherTopicsLabel):                3,
		topicKey("public/second", OtherTopicsLabel):                 4 + 5,
	})
}

func TestNewMetricsCollectorChecksConfig(t *testing.T) {
	st := newTestBroker(t)
	if _, err := NewMetricsCollector(st.b, MetricsConfig{MaxTopics: -1}); err == nil {
		t.Error("MaxTopics -1 accepted")
	}
	if _, err := NewMetricsCollector(nil, MetricsConfig{}); err == nil {
		t.Error("nil broker accepted")
	}
}

// gatedStorage holds the completions of AddEntry while hold is set.
type gatedStorage struct {
	*storage.Storage
	mu   sync.Mutex
	hold bool
	held []func()
}

func (g *gatedStorage) AddEntry(e []byte, recovery bool, done func(error)) {
	g.Storage.AddEntry(e, recovery, func(err error) {
		g.mu.Lock()
		if g.hold {
			g.held = append(g.held, func() { done(err) })
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		done(err)
	})
}

func (g *gatedStorage) heldCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

func (g *gatedStorage) release() {
	g.mu.Lock()
	held := g.held
	g.held, g.hold = nil, false
	g.mu.Unlock()
	for _, f := range held {
		f()
	}
}

// A scrape while an append is at the bookie, unanswered, completes and
// does not count the message yet.
func TestTopicMetricsDoNotWaitForPublishes(t *testing.T) {
	store, err := local.Open(t.TempDir(), local.Options{NoSync: true, Logger: brokerTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	gate := &gatedStorage{}
	bk, err := bookietest.Start(store, bookietest.Options{Dir: "/b1", NoSync: true, Logger: brokerTestLogger(),
		Wrap: func(s *storage.Storage) bookie.Storage { gate.Storage = s; return gate }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bk.Stop)
	st := (&testCluster{store: store, bookie: bk}).newStack(t)
	t.Cleanup(gate.release) // before the stack closes (cleanups run last first)
	reg := newMetricsRegistry(t, st.b, MetricsConfig{MaxTopics: 10})
	const name = "persistent://public/default/inflight"
	tp := st.mustTopic(t, name)
	p, _ := mustProducer(t, tp, "p1")
	subscribe(t, tp, SubscribeOptions{Subscription: "s", ConsumerName: "c", Durable: true, Initial: InitialEarliest})
	mustPublish(t, p, msg{seq: 0})

	gate.mu.Lock()
	gate.hold = true
	gate.mu.Unlock()
	result := make(chan PublishResult, 1)
	p.Publish(msg{seq: 1}.request(t, p.Name()), func(r PublishResult) { result <- r })
	waitFor(t, 10*time.Second, func() bool { return gate.heldCount() > 0 }, "the append to reach the bookie")

	type scrape struct {
		mfs []*dto.MetricFamily
		err error
	}
	scraped := make(chan scrape, 1)
	go func() {
		mfs, err := reg.Gather()
		scraped <- scrape{mfs, err}
	}()
	key := topicKey("public/default", name)
	select {
	case sc := <-scraped:
		if sc.err != nil {
			t.Fatalf("gather: %v", sc.err)
		}
		g := toGathered(sc.mfs)
		if got := g.value(t, "magnetar_topic_in_messages_total", key); got != 1 {
			t.Errorf("in_messages_total with one publish in flight: %v; want 1", got)
		}
		if got := g.value(t, "magnetar_subscription_msg_backlog", subKey("public/default", name, "s")); got != 1 {
			t.Errorf("backlog with one publish in flight: %v; want 1", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("scrape blocked while a publish was in flight")
	}
	select {
	case r := <-result:
		t.Fatalf("publish completed while its append was held: %+v", r)
	default:
	}

	gate.release()
	if r := <-result; r.Err != nil {
		t.Fatalf("publish after release: %v", r.Err)
	}
	if got := gather(t, reg).value(t, "magnetar_topic_in_messages_total", key); got != 2 {
		t.Errorf("in_messages_total after the append completed: %v; want 2", got)
	}
}
