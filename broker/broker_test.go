package broker

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// hundred is 100 entries, every tenth a batch of 10 messages; sequence ids
// count messages, so they are continuous.
func hundred() []msg {
	var ms []msg
	seq := int64(0)
	for i := range 100 {
		m := msg{seq: seq, framed: i%3 == 0}
		if i%10 == 9 {
			m.batch = 10
		}
		ms = append(ms, m)
		seq += int64(m.messages())
	}
	return ms
}

func TestPublishOrderPositionsOffsets(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "publish")
	p, _ := mustProducer(t, tp, "p")
	ms := hundred()
	rs := publishAll(t, p, ms)
	offset := int64(0)
	for i, r := range rs {
		if i > 0 && !rs[i-1].ID.Position.Before(r.ID.Position) {
			t.Fatalf("entry %d at %v, not after entry %d at %v", i, r.ID.Position, i-1, rs[i-1].ID.Position)
		}
		if r.Offset != offset {
			t.Fatalf("entry %d: offset %d, want %d", i, r.Offset, offset)
		}
		if r.ID.BatchIndex != -1 || r.ID.Partition != -1 || r.Duplicate {
			t.Fatalf("entry %d: result %+v", i, r)
		}
		offset += int64(ms[i].messages())
	}
	ml := tp.ManagedLedger()
	if got := ml.NextOffset(); got != offset {
		t.Fatalf("NextOffset = %d, want %d", got, offset)
	}
	if got := ml.LastConfirmed(); got != rs[len(rs)-1].ID.Position {
		t.Fatalf("LastConfirmed = %v, want %v", got, rs[len(rs)-1].ID.Position)
	}
	// What is stored is what was sent, behind the ledger's header, in
	// place or copied.
	for _, i := range []int{8, 9} {
		es, err := ml.Read(testCtx(t), rs[i].ID.Position, 1)
		if err != nil || len(es) != 1 {
			t.Fatalf("read: %v, %d entries", err, len(es))
		}
		if want := ms[i].request(t, "p").Data; string(es[0].Payload) != string(want) {
			t.Fatalf("entry %d (framed %v): stored payload differs from the one sent", i, ms[i].framed)
		}
	}
	es, err := ml.Read(testCtx(t), rs[9].ID.Position, 1)
	if err != nil || len(es) != 1 {
		t.Fatalf("read: %v, %d entries", err, len(es))
	}
	if es[0].Header.Format != ledger.FormatPulsar || es[0].Header.Messages != 10 || es[0].Header.FirstOffset != rs[9].Offset {
		t.Fatalf("stored header %+v", es[0].Header)
	}
}

func TestLastMessageID(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "last")
	if id, ok, err := tp.LastMessageID(ctx); err != nil || ok {
		t.Fatalf("empty topic: LastMessageID = %+v, %v, %v; want ok=false", id, ok, err)
	}
	p, _ := mustProducer(t, tp, "p")
	r := mustPublish(t, p, msg{seq: 0})
	id, ok, err := tp.LastMessageID(ctx)
	if err != nil || !ok || id.Position != r.ID.Position || id.BatchIndex != -1 || id.Partition != -1 {
		t.Fatalf("after a single message: LastMessageID = %+v, %v, %v; want %v batch index -1", id, ok, err, r.ID.Position)
	}
	r = mustPublish(t, p, msg{seq: 1, batch: 5})
	id, ok, err = tp.LastMessageID(ctx)
	if err != nil || !ok || id.Position != r.ID.Position || id.BatchIndex != 4 {
		t.Fatalf("after a batch of 5: LastMessageID = %+v, %v, %v; want %v batch index 4", id, ok, err, r.ID.Position)
	}

	// On a partition, the id names the partition.
	if err := st.b.CreatePartitionedTopic(ctx, mustParse(t, "parted"), 2); err != nil {
		t.Fatal(err)
	}
	part := st.mustTopic(t, "parted-partition-1")
	pp, _ := mustProducer(t, part, "p")
	r = mustPublish(t, pp, msg{seq: 0})
	if r.ID.Partition != 1 {
		t.Fatalf("publish result on partition 1: %+v", r)
	}
	id, ok, err = part.LastMessageID(ctx)
	if err != nil || !ok || id.Partition != 1 || id.Position != r.ID.Position {
		t.Fatalf("partition 1: LastMessageID = %+v, %v, %v", id, ok, err)
	}
}

func TestProducerNames(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "names")

	// Broker-assigned names: non-empty, unique, "<broker name>-...".
	seen := map[string]bool{}
	for range 5 {
		p, _ := mustProducer(t, tp, "")
		if !strings.HasPrefix(p.Name(), "standalone-") || seen[p.Name()] {
			t.Fatalf("assigned producer name %q (seen before: %v)", p.Name(), seen[p.Name()])
		}
		seen[p.Name()] = true
	}

	// A name is one producer at a time.
	p, _ := mustProducer(t, tp, "x")
	if _, err := tp.AddProducer(ctx, ProducerOptions{Name: "x", Sink: &producerSink{}}); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("second producer named x: %v, want ErrProducerBusy", err)
	}
	p.Close()
	p.Close() // idempotent
	mustProducer(t, tp, "x")

	if _, err := tp.AddProducer(ctx, ProducerOptions{Name: "nosink"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("producer without a sink: %v, want ErrInvalidRequest", err)
	}

	// A closed producer cannot publish.
	if r := publish(t, p, msg{seq: 1}); !errors.Is(r.Err, ErrTopicClosed) {
		t.Fatalf("publish on a closed producer: %+v, want ErrTopicClosed", r)
	}
}

func TestProducerAccessModes(t *testing.T) {
	tests := []struct {
		name     string
		existing []AccessMode
		mode     AccessMode
		wantErr  error // nil: accepted
		fences   bool  // the existing producers are closed
	}{
		{name: "shared joins shared", existing: []AccessMode{AccessShared}, mode: AccessShared},
		{name: "exclusive on empty topic", mode: AccessExclusive},
		{name: "exclusive refused by shared", existing: []AccessMode{AccessShared}, mode: AccessExclusive, wantErr: ErrProducerBusy},
		{name: "shared refused by exclusive", existing: []AccessMode{AccessExclusive}, mode: AccessShared, wantErr: ErrProducerBusy},
		{name: "exclusive refused by exclusive", existing: []AccessMode{AccessExclusive}, mode: AccessExclusive, wantErr: ErrProducerBusy},
		{name: "shared refused by fencing producer", existing: []AccessMode{AccessExclusiveWithFencing}, mode: AccessShared, wantErr: ErrProducerBusy},
		{name: "fencing fences shared", existing: []AccessMode{AccessShared, AccessShared}, mode: AccessExclusiveWithFencing, fences: true},
		{name: "fencing fences exclusive", existing: []AccessMode{AccessExclusive}, mode: AccessExclusiveWithFencing, fences: true},
	}
	st := newTestBroker(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			tp := st.mustTopic(t, "access-"+string(rune('a'+i)))
			var olds []*Producer
			var sinks []*producerSink
			for _, m := range tt.existing {
				s := &producerSink{}
				p, err := tp.AddProducer(ctx, ProducerOptions{AccessMode: m, Sink: s})
				if err != nil {
					t.Fatal(err)
				}
				olds, sinks = append(olds, p), append(sinks, s)
			}
			s := &producerSink{}
			p, err := tp.AddProducer(ctx, ProducerOptions{Name: "new", AccessMode: tt.mode, Sink: s})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("AddProducer(%v): %v, want %v", tt.mode, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("AddProducer(%v): %v", tt.mode, err)
			}
			mustPublish(t, p, msg{seq: 0})
			for k, old := range olds {
				if got, want := sinks[k].closedCount(), map[bool]int{true: 1, false: 0}[tt.fences]; got != want {
					t.Fatalf("existing producer %d: Closed %d times, want %d", k, got, want)
				}
				r := publish(t, old, msg{seq: 100})
				if tt.fences && !errors.Is(r.Err, ErrTopicClosed) {
					t.Fatalf("fenced producer publishes: %+v", r)
				}
				if !tt.fences && r.Err != nil {
					t.Fatalf("existing producer %d: %v", k, r.Err)
				}
			}
		})
	}
}

func TestProducerWaitForExclusive(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "wait")
	first, err := tp.AddProducer(ctx, ProducerOptions{Name: "first", AccessMode: AccessExclusive, Sink: &producerSink{}})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		p   *Producer
		err error
	}
	got := make(chan result, 1)
	go func() {
		p, err := tp.AddProducer(ctx, ProducerOptions{Name: "waiter", AccessMode: AccessWaitForExclusive, Sink: &producerSink{}})
		got <- result{p, err}
	}()
	// Bounded: shows the waiter does not get in while first is there.
	select {
	case r := <-got:
		t.Fatalf("WaitForExclusive returned while an exclusive producer is connected: %+v", r)
	case <-time.After(quiet):
	}
	first.Close()
	var waiter *Producer
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("WaitForExclusive: %v", r.err)
		}
		waiter = r.p
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForExclusive did not return after the exclusive producer closed")
	}
	mustPublish(t, waiter, msg{seq: 0})
	if _, err := tp.AddProducer(ctx, ProducerOptions{Sink: &producerSink{}}); !errors.Is(err, ErrProducerBusy) {
		t.Fatalf("shared producer beside the one that waited: %v, want ErrProducerBusy", err)
	}

	// A waiter gives up when its context ends.
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		p, err := tp.AddProducer(cctx, ProducerOptions{Name: "impatient", AccessMode: AccessWaitForExclusive, Sink: &producerSink{}})
		got <- result{p, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("WaitForExclusive returned while an exclusive producer is connected: %+v", r)
	case <-time.After(quiet):
	}
	cancel()
	select {
	case r := <-got:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled WaitForExclusive: %+v, want context.Canceled", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForExclusive ignored its context")
	}
	// The one that gave up did not take the topic once it was free.
	waiter.Close()
	mustProducer(t, tp, "impatient")
	mustProducer(t, tp, "another shared one")

	// Waiting for shared producers to leave, too.
	tp2 := st.mustTopic(t, "wait-shared")
	a, _ := mustProducer(t, tp2, "a")
	b, _ := mustProducer(t, tp2, "b")
	go func() {
		p, err := tp2.AddProducer(ctx, ProducerOptions{Name: "waiter", AccessMode: AccessWaitForExclusive, Sink: &producerSink{}})
		got <- result{p, err}
	}()
	a.Close()
	select {
	case r := <-got:
		t.Fatalf("WaitForExclusive returned while a shared producer is connected: %+v", r)
	case <-time.After(quiet):
	}
	b.Close()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("WaitForExclusive did not return after the shared producers closed")
	}
}

func TestPartitionedAutoCreation(t *testing.T) {
	t.Run("partitioned", func(t *testing.T) {
		st := newTestBroker(t, func(c *Config) {
			c.AutoTopicCreation, c.AutoTopicPartitions = AutoCreatePartitioned, 3
		})
		ctx := testCtx(t)
		base := mustParse(t, "persistent://public/default/auto")
		for range 2 {
			if n, err := st.b.Partitions(ctx, base); err != nil || n != 3 {
				t.Fatalf("Partitions(new topic) = %d, %v; want 3", n, err)
			}
		}
		if n, err := st.b.Partitions(ctx, base.PartitionName(1)); err != nil || n != 0 {
			t.Fatalf("Partitions(a partition) = %d, %v; want 0", n, err)
		}
		if _, err := st.b.Topic(ctx, base, true); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("Topic(partitioned base) = %v, want ErrInvalidRequest", err)
		}
		tp, err := st.b.Topic(ctx, base.PartitionName(2), true)
		if err != nil {
			t.Fatalf("Topic(partition 2): %v", err)
		}
		if tp.Name() != base.PartitionName(2) {
			t.Fatalf("loaded %v", tp.Name())
		}
		if again, err := st.b.Topic(ctx, base.PartitionName(2), false); err != nil || again != tp {
			t.Fatalf("Topic(partition 2) again = %p, %v; want the loaded %p", again, err, tp)
		}
		if _, err := st.b.Topic(ctx, base.PartitionName(3), true); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("Topic(partition 3 of 3) = %v, want ErrTopicNotFound", err)
		}
		if err := st.b.CreatePartitionedTopic(ctx, base, 5); !errors.Is(err, meta.ErrExists) {
			t.Fatalf("CreatePartitionedTopic(existing) = %v, want meta.ErrExists", err)
		}
	})
	t.Run("off", func(t *testing.T) {
		st := newTestBroker(t, func(c *Config) { c.AutoTopicCreation = AutoCreateOff })
		ctx := testCtx(t)
		missing := mustParse(t, "missing")
		if _, err := st.b.Topic(ctx, missing, true); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("Topic(missing, create) = %v, want ErrTopicNotFound", err)
		}
		if n, err := st.b.Partitions(ctx, missing); err != nil || n != 0 {
			t.Fatalf("Partitions(missing) = %d, %v; want 0", n, err)
		}
		if _, err := st.b.Topic(ctx, missing, true); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("Topic(missing, create) after Partitions = %v, want ErrTopicNotFound", err)
		}
		// Created explicitly, its partitions load.
		p := mustParse(t, "made")
		if err := st.b.CreatePartitionedTopic(ctx, p, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := st.b.Topic(ctx, p.PartitionName(1), true); err != nil {
			t.Fatalf("Topic(partition 1 of a created topic): %v", err)
		}
		if _, err := st.b.Topic(ctx, p.PartitionName(2), true); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("Topic(partition 2 of 2) = %v, want ErrTopicNotFound", err)
		}
		for _, bad := range []struct {
			t TopicName
			n int
		}{{mustParse(t, "zero"), 0}, {p.PartitionName(0), 2}} {
			if err := st.b.CreatePartitionedTopic(ctx, bad.t, bad.n); !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("CreatePartitionedTopic(%v, %d) = %v, want ErrInvalidRequest", bad.t, bad.n, err)
			}
		}
	})
	t.Run("non-partitioned", func(t *testing.T) {
		st := newTestBroker(t)
		ctx := testCtx(t)
		n := mustParse(t, "plain")
		if _, err := st.b.Topic(ctx, n, false); !errors.Is(err, ErrTopicNotFound) {
			t.Fatalf("Topic(missing, no create) = %v, want ErrTopicNotFound", err)
		}
		tp, err := st.b.Topic(ctx, n, true)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := st.b.Topic(ctx, n, false); err != nil || again != tp {
			t.Fatalf("Topic(existing) = %p, %v; want %p", again, err, tp)
		}
		if k, err := st.b.Partitions(ctx, n); err != nil || k != 0 {
			t.Fatalf("Partitions(non-partitioned) = %d, %v", k, err)
		}
		// Closed, it loads again (same data).
		p, _ := mustProducer(t, tp, "p")
		r := mustPublish(t, p, msg{seq: 0})
		if err := tp.Close(ctx); err != nil {
			t.Fatal(err)
		}
		tp2, err := st.b.Topic(ctx, n, false)
		if err != nil || tp2 == tp {
			t.Fatalf("Topic after Close = %p, %v; want a new topic", tp2, err)
		}
		if id, ok, err := tp2.LastMessageID(ctx); err != nil || !ok || id.Position != r.ID.Position {
			t.Fatalf("reloaded topic: LastMessageID = %+v, %v, %v; want %v", id, ok, err, r.ID.Position)
		}
	})
}

func TestTopicsOfNamespace(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	st.mustTopic(t, "b")
	st.mustTopic(t, "public/default/a")
	if err := st.b.CreatePartitionedTopic(ctx, mustParse(t, "p"), 3); err != nil {
		t.Fatal(err)
	}
	st.mustTopic(t, "p-partition-1") // one partition loaded, the others not yet
	if err := st.b.CreatePartitionedTopic(ctx, mustParse(t, "q"), 1); err != nil {
		t.Fatal(err)
	}
	st.mustNamespace(t, "other/ns")
	st.mustTopic(t, "other/ns/x")

	got, err := st.b.TopicsOfNamespace(ctx, "public", "default")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"persistent://public/default/a",
		"persistent://public/default/b",
		"persistent://public/default/p-partition-0",
		"persistent://public/default/p-partition-1",
		"persistent://public/default/p-partition-2",
		"persistent://public/default/q-partition-0",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("TopicsOfNamespace(public/default) =\n%q\nwant\n%q", got, want)
	}
	if got, err := st.b.TopicsOfNamespace(ctx, "other", "ns"); err != nil || !slices.Equal(got, []string{"persistent://other/ns/x"}) {
		t.Fatalf("TopicsOfNamespace(other/ns) = %q, %v", got, err)
	}
	if got, err := st.b.TopicsOfNamespace(ctx, "nobody", "here"); err != nil || len(got) != 0 {
		t.Fatalf("TopicsOfNamespace(empty namespace) = %q, %v", got, err)
	}
	if _, err := st.b.TopicsOfNamespace(ctx, "bad/tenant", "ns"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("TopicsOfNamespace(bad tenant) = %v, want ErrInvalidRequest", err)
	}
}

func TestBrokerCloseDisconnectsEverything(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)

	// Warm up what stays after the broker closes (bookie connections,
	// the factory), so that the goroutine count compares the broker alone.
	warm := st.mustTopic(t, "warm-up")
	wp, _ := mustProducer(t, warm, "w")
	mustPublish(t, wp, msg{seq: 0})
	if err := warm.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	var csinks []*consumerSink
	var psinks []*producerSink
	var consumers []*Consumer
	var producers []*Producer
	for _, name := range []string{"close-a", "close-b"} {
		tp := st.mustTopic(t, name)
		p, ps := mustProducer(t, tp, "p")
		producers, psinks = append(producers, p), append(psinks, ps)
		mustPublish(t, p, msg{seq: 0})
		for _, o := range []SubscribeOptions{
			{Subscription: "excl", Type: SubExclusive, Durable: true, Initial: InitialEarliest},
			{Subscription: "shared", Type: SubShared, Durable: true, ConsumerName: "s1"},
			{Subscription: "shared", Type: SubShared, Durable: true, ConsumerName: "s2"},
			{Subscription: "fo", Type: SubFailover, Durable: true, ConsumerName: "f1"},
			{Subscription: "ks", Type: SubKeyShared, Durable: true, ConsumerName: "k1"},
			{Subscription: "reader", Type: SubExclusive, StartMessageID: &MessageID{Position: ledger.Position{Ledger: -1, Entry: -1}, BatchIndex: -1}},
		} {
			c, s := subscribe(t, tp, o)
			c.Flow(100)
			consumers, csinks = append(consumers, c), append(csinks, s)
		}
	}
	// Readers and the Exclusive consumers have their entry: the
	// dispatchers are running.
	for _, i := range []int{0, 5, 6, 11} {
		csinks[i].waitCount(t, 1)
	}
	if err := st.b.Close(ctx); err != nil {
		t.Fatalf("Broker.Close: %v", err)
	}
	for i, s := range csinks {
		if n := s.closedCount(); n != 1 {
			t.Errorf("consumer %d: Closed %d times, want 1", i, n)
		}
	}
	for i, s := range psinks {
		if n := s.closedCount(); n != 1 {
			t.Errorf("producer %d: Closed %d times, want 1", i, n)
		}
	}
	if _, err := st.b.Topic(ctx, mustParse(t, "close-a"), true); !errors.Is(err, ErrBrokerClosed) {
		t.Fatalf("Topic after Close = %v, want ErrBrokerClosed", err)
	}
	if r := publish(t, producers[0], msg{seq: 1}); r.Err == nil {
		t.Fatalf("publish after Close: %+v", r)
	}
	if err := consumers[0].Ack(false, []Ack{{Position: ledger.Position{}}}); err == nil {
		t.Fatal("ack after Close succeeded")
	}
	// Every dispatcher and wait is gone.
	const slack = 2
	defer func() { t.Logf("goroutines: %d before, %d after", before, runtime.NumGoroutine()) }()
	waitFor(t, 10*time.Second, func() bool { return runtime.NumGoroutine() <= before+slack },
		"goroutines back to %d (+%d) after Broker.Close: %d", before, slack, runtime.NumGoroutine())
	if err := st.b.Close(ctx); err != nil {
		t.Fatalf("second Broker.Close: %v", err)
	}
}

func TestTopicConcurrentLoad(t *testing.T) {
	st := newTestBroker(t, func(c *Config) { c.AutoTopicCreation, c.AutoTopicPartitions = AutoCreatePartitioned, 3 })
	ctx := testCtx(t)
	name := mustParse(t, "concurrent")
	if err := st.b.CreatePartitionedTopic(ctx, name, 2); err != nil {
		t.Fatal(err)
	}
	const n = 8
	type result struct {
		create bool
		tp     *Topic
		k      int
		err    error
	}
	results := make(chan result, 2*n)
	for i := range n {
		go func() {
			tp, err := st.b.Topic(ctx, name.PartitionName(1), i%2 == 0)
			results <- result{create: i%2 == 0, tp: tp, err: err}
		}()
		go func() {
			k, err := st.b.Partitions(ctx, mustParse(t, "concurrent-meta"))
			results <- result{k: k, err: err}
		}()
	}
	var topics []*Topic
	for range 2 * n {
		r := <-results
		switch {
		case r.tp != nil:
			topics = append(topics, r.tp)
		case r.err == nil && r.k != 3:
			t.Fatalf("concurrent Partitions = %d, want 3", r.k)
		case r.err != nil && (r.create || !errors.Is(r.err, ErrTopicNotFound)):
			// Without create, a load that ran first finds no topic.
			t.Fatalf("concurrent load (create %v): %v", r.create, r.err)
		}
	}
	tp, err := st.b.Topic(ctx, name.PartitionName(1), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) < n/2 {
		t.Fatalf("%d loads succeeded, want at least %d", len(topics), n/2)
	}
	for _, x := range topics {
		if x != tp {
			t.Fatal("concurrent loads returned different topics")
		}
	}
}

func TestWaitingProducerTopicClose(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "wait-close")
	if _, err := tp.AddProducer(ctx, ProducerOptions{AccessMode: AccessExclusive, Sink: &producerSink{}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := tp.AddProducer(ctx, ProducerOptions{AccessMode: AccessWaitForExclusive, Sink: &producerSink{}})
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("WaitForExclusive returned while an exclusive producer is connected: %v", err)
	case <-time.After(quiet):
	}
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ErrTopicClosed) {
			t.Fatalf("waiting producer on a closed topic: %v, want ErrTopicClosed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiting producer not released by Topic.Close")
	}
}
