package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta/local"
)

// The broker's tests run over real parts: a meta/local store, one
// in-process bookie, a bookie client, the ledger factory and a Broker.
// Only the client connections are replaced, by recording sinks.

// brokerTestLogger discards logs unless BROKER_TEST_LOG is set.
func brokerTestLogger() *slog.Logger {
	if os.Getenv("BROKER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testCluster is the storage every broker stack of a test shares: the
// metadata store and one bookie.
type testCluster struct {
	store  *local.Store
	bookie *bookietest.Bookie
}

func newTestCluster(t testing.TB) *testCluster {
	t.Helper()
	store, err := local.Open(t.TempDir(), local.Options{NoSync: true, Logger: brokerTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	b, err := bookietest.Start(store, bookietest.Options{Dir: "/b1", NoSync: true, Logger: brokerTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	return &testCluster{store: store, bookie: b}
}

// testStack is one broker over the cluster, with its own bookie client,
// cache and ledger factory.
type testStack struct {
	cluster *testCluster
	client  *client.Client
	cache   *ledger.Cache
	ledgers *ledger.Factory
	clock   *fakeClock // the ledgers' clock: publish times
	b       *Broker
}

// newStack starts a broker on the cluster; tweak adjusts its config. It is
// closed (broker, factory, cache, client, in that order) when the test
// ends.
func (tc *testCluster) newStack(t testing.TB, tweak ...func(*Config)) *testStack {
	t.Helper()
	st := &testStack{cluster: tc, clock: newFakeClock()}
	c, err := client.New(client.Config{Meta: tc.store, Logger: brokerTestLogger(), DialTimeout: time.Second,
		AddTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st.client = c
	t.Cleanup(func() { c.Close() })
	if st.cache, err = ledger.NewCache(ledger.CacheConfig{MaxBytes: 64 << 20, Logger: brokerTestLogger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.cache.Close)
	st.ledgers, err = ledger.NewFactory(ledger.Config{Bookies: ledger.ClientBookies(c), Meta: tc.store, Cache: st.cache,
		RetentionTime: -1, RetentionSize: -1, CursorFlushInterval: 10 * time.Millisecond, MinLedgerAge: -1,
		Clock: st.clock.Now, Logger: brokerTestLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st.ledgers.Close(ctx)
	})
	cfg := Config{Meta: tc.store, Ledgers: st.ledgers, Logger: brokerTestLogger()}
	for _, f := range tweak {
		f(&cfg)
	}
	if st.b, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		st.b.Close(ctx)
	})
	return st
}

// newTestBroker is a cluster with one broker stack.
func newTestBroker(t testing.TB, tweak ...func(*Config)) *testStack {
	t.Helper()
	return newTestCluster(t).newStack(t, tweak...)
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.UnixMilli(1_764_450_000_000)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testCtx ends with the test or after two minutes.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// quiet is how long a test waits to show that something does NOT happen
// (no more deliveries, no return). It bounds the check; it never
// synchronises.
const quiet = 150 * time.Millisecond

// mustTopic parses name and loads the topic (creating it).
func (st *testStack) mustTopic(t testing.TB, name string) *Topic {
	t.Helper()
	tn, err := ParseTopicName(name)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := st.b.Topic(testCtx(t), tn, true)
	if err != nil {
		t.Fatalf("topic %s: %v", name, err)
	}
	return tp
}

func mustParse(t testing.TB, name string) TopicName {
	t.Helper()
	tn, err := ParseTopicName(name)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// entry builds a Pulsar entry as a producer sends it:
// [0x0e01][crc32c][metadata size][MessageMetadata][payload]. batch > 0
// makes it a batch of that many messages (num_messages_in_batch set, the
// payload being [size][SingleMessageMetadata][payload] records, sequence
// ids seq..seq+batch-1); key, if not empty, is the partition key.
func entry(t testing.TB, producer string, seq uint64, key string, payload []byte, batch int) []byte {
	t.Helper()
	md := &msgpb.MessageMetadata{
		ProducerName: proto.String(producer),
		SequenceId:   proto.Uint64(seq),
		PublishTime:  proto.Uint64(uint64(time.UnixMilli(1_764_450_000_000).UnixMilli())),
	}
	if key != "" {
		md.PartitionKey = proto.String(key)
	}
	body := payload
	if batch > 0 {
		md.NumMessagesInBatch = proto.Int32(int32(batch))
		md.HighestSequenceId = proto.Uint64(seq + uint64(batch) - 1)
		body = nil
		for i := range batch {
			smd := &msgpb.SingleMessageMetadata{PayloadSize: proto.Int32(int32(len(payload))),
				SequenceId: proto.Uint64(seq + uint64(i))}
			if key != "" {
				smd.PartitionKey = proto.String(key)
			}
			sb, err := proto.Marshal(smd)
			if err != nil {
				t.Fatal(err)
			}
			body = binary.BigEndian.AppendUint32(body, uint32(len(sb)))
			body = append(body, sb...)
			body = append(body, payload...)
		}
	}
	mb, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	var rest []byte
	rest = binary.BigEndian.AppendUint32(rest, uint32(len(mb)))
	rest = append(rest, mb...)
	rest = append(rest, body...)
	out := binary.BigEndian.AppendUint16(nil, 0x0e01)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(rest, crc32.MakeTable(crc32.Castagnoli)))
	return append(out, rest...)
}

// msg describes one entry to publish.
type msg struct {
	seq    int64
	key    string
	batch  int  // 0: a single message
	framed bool // published with ledger.AppendRoom in front (PublishRequest.Framed)
}

func (m msg) messages() int32 { return int32(max(m.batch, 1)) }

func (m msg) request(t testing.TB, producer string) PublishRequest {
	data := entry(t, producer, uint64(m.seq), m.key, fmt.Appendf(nil, "payload-%d", m.seq), m.batch)
	req := PublishRequest{SequenceID: m.seq, HighestSequenceID: m.seq + int64(m.messages()) - 1,
		Messages: m.messages(), Data: data}
	if m.framed {
		req.Framed = append(make([]byte, ledger.AppendRoom), data...)
		req.Data = req.Framed[ledger.AppendRoom:]
	}
	return req
}

// publish stores one entry and waits for its result.
func publish(t testing.TB, p *Producer, m msg) PublishResult {
	t.Helper()
	ch := make(chan PublishResult, 1)
	p.Publish(m.request(t, p.Name()), func(r PublishResult) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatalf("publish of sequence id %d did not complete", m.seq)
	}
	return PublishResult{}
}

// mustPublish is publish failing the test on error or duplicate.
func mustPublish(t testing.TB, p *Producer, m msg) PublishResult {
	t.Helper()
	r := publish(t, p, m)
	if r.Err != nil || r.Duplicate {
		t.Fatalf("publish of sequence id %d: %+v", m.seq, r)
	}
	return r
}

// publishAll publishes ms without waiting between them, then waits for
// every result; it fails the test if a publish fails or the callbacks do
// not come in publish order. Results are in publish order.
func publishAll(t testing.TB, p *Producer, ms []msg) []PublishResult {
	t.Helper()
	var mu sync.Mutex
	var order []int
	results := make([]PublishResult, len(ms))
	all := make(chan struct{})
	for i, m := range ms {
		p.Publish(m.request(t, p.Name()), func(r PublishResult) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, i)
			results[i] = r
			if len(order) == len(ms) {
				close(all)
			}
		})
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		t.Fatalf("%d publishes did not complete", len(ms))
	}
	mu.Lock()
	defer mu.Unlock()
	for k, i := range order {
		if k != i {
			t.Fatalf("publish callbacks out of order: %v", order)
		}
	}
	for i, r := range results {
		if r.Err != nil || r.Duplicate {
			t.Fatalf("publish %d (sequence id %d): %+v", i, ms[i].seq, r)
		}
	}
	return results
}

// singles is n single-message entries with sequence ids from..from+n-1,
// keyed by key(i) if key is not nil.
func singles(from, n int, key func(i int) string) []msg {
	out := make([]msg, n)
	for i := range n {
		out[i] = msg{seq: int64(from + i)}
		if key != nil {
			out[i].key = key(from + i)
		}
	}
	return out
}

// producerSink records Closed.
type producerSink struct {
	mu     sync.Mutex
	closed int
}

func (s *producerSink) Closed() {
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
}

func (s *producerSink) closedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func mustProducer(t testing.TB, tp *Topic, name string) (*Producer, *producerSink) {
	t.Helper()
	ps := &producerSink{}
	p, err := tp.AddProducer(testCtx(t), ProducerOptions{Name: name, Sink: ps})
	if err != nil {
		t.Fatalf("producer %q: %v", name, err)
	}
	return p, ps
}

// event is one delivery or acknowledgement, as the recorder saw it.
type event struct {
	ack        bool
	closed     bool // the consumer was closed (its unacknowledged entries go back)
	consumer   string
	seq        uint64
	key        string
	redelivery uint32
}

// recorder is an event log shared by several sinks: deliveries are
// appended by the sinks, acknowledgements by ackers holding mu around
// Consumer.Ack (so a delivery logged after an ack was decided after it).
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// consumerSink records what the broker sends a consumer. Send never
// blocks.
type consumerSink struct {
	name string
	rec  *recorder // nil: not shared

	mu      sync.Mutex
	ds      []Delivery
	actives []bool
	closed  int
	notify  chan struct{} // signalled (without blocking) on every call
}

func newConsumerSink(name string, rec *recorder) *consumerSink {
	return &consumerSink{name: name, rec: rec, notify: make(chan struct{}, 1)}
}

func (s *consumerSink) Send(ds []Delivery) {
	if s.rec != nil {
		s.rec.mu.Lock()
		for _, d := range ds {
			md, _, err := ParseEntry(d.Entry.Payload)
			if err != nil {
				panic(err)
			}
			s.rec.events = append(s.rec.events, event{consumer: s.name, seq: md.GetSequenceId(),
				key: md.GetPartitionKey(), redelivery: d.RedeliveryCount})
		}
		s.rec.mu.Unlock()
	}
	s.mu.Lock()
	s.ds = append(s.ds, ds...)
	s.mu.Unlock()
	s.signal()
}

func (s *consumerSink) ActiveChanged(active bool) {
	s.mu.Lock()
	s.actives = append(s.actives, active)
	s.mu.Unlock()
	s.signal()
}

func (s *consumerSink) Closed() {
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
	s.signal()
}

func (s *consumerSink) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *consumerSink) deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ds)
}

func (s *consumerSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ds)
}

// messages counts the messages delivered (a batch counts its messages).
func (s *consumerSink) messages() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.ds {
		n += int(d.Entry.Header.Messages)
	}
	return n
}

// lastActive is the last ActiveChanged value; ok=false if none came.
func (s *consumerSink) lastActive() (active, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.actives) == 0 {
		return false, false
	}
	return s.actives[len(s.actives)-1], true
}

func (s *consumerSink) closedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// waitCount waits until the sink holds at least n deliveries.
func (s *consumerSink) waitCount(t testing.TB, n int) []Delivery {
	t.Helper()
	waitFor(t, 20*time.Second, func() bool { return s.count() >= n }, "%d deliveries to %s (have %d)", n, s.name, s.count())
	return s.deliveries()
}

// subscribe attaches a consumer with a recording sink (o.Sink, if set,
// is used instead and returned as nil).
func subscribe(t testing.TB, tp *Topic, o SubscribeOptions) (*Consumer, *consumerSink) {
	t.Helper()
	var s *consumerSink
	if o.Sink == nil {
		s = newConsumerSink(o.ConsumerName, nil)
		o.Sink = s
	}
	c, err := tp.Subscribe(testCtx(t), o)
	if err != nil {
		t.Fatalf("subscribe %s (%v) as %q: %v", o.Subscription, o.Type, o.ConsumerName, err)
	}
	return c, s
}

// seqOf is the sequence id of a delivered entry.
func seqOf(t testing.TB, d Delivery) uint64 {
	t.Helper()
	md, _, err := ParseEntry(d.Entry.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return md.GetSequenceId()
}

func keyOf(t testing.TB, d Delivery) string {
	t.Helper()
	md, _, err := ParseEntry(d.Entry.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return md.GetPartitionKey()
}

func seqsOf(t testing.TB, ds []Delivery) []uint64 {
	t.Helper()
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = seqOf(t, d)
	}
	return out
}

func positionsOf(ds []Delivery) []ledger.Position {
	out := make([]ledger.Position, len(ds))
	for i, d := range ds {
		out[i] = d.Entry.Position
	}
	return out
}

func positionsOfResults(rs []PublishResult) []ledger.Position {
	out := make([]ledger.Position, len(rs))
	for i, r := range rs {
		out[i] = r.ID.Position
	}
	return out
}

// seqRange is from, from+1, ..., to-1.
func seqRange(from, to int) []uint64 {
	var out []uint64
	for i := from; i < to; i++ {
		out = append(out, uint64(i))
	}
	return out
}

// ackAll acknowledges every given delivery individually.
func ackAll(t testing.TB, c *Consumer, ds []Delivery) {
	t.Helper()
	acks := make([]Ack, len(ds))
	for i, d := range ds {
		acks[i] = Ack{Position: d.Entry.Position}
	}
	if err := c.Ack(false, acks); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

// acker acknowledges, one at a time and in order, every entry its sink
// receives, logging each ack in the sink's recorder, and gives back a
// permit per message acknowledged (as a client with a small receive queue
// does). It stops with the test.
type acker struct {
	c    *Consumer
	s    *consumerSink
	stop chan struct{}
	done chan struct{}
}

func startAcker(t testing.TB, c *Consumer, s *consumerSink) *acker {
	a := &acker{c: c, s: s, stop: make(chan struct{}), done: make(chan struct{})}
	go a.run(t)
	t.Cleanup(a.halt)
	return a
}

func (a *acker) halt() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

func (a *acker) run(t testing.TB) {
	defer close(a.done)
	next := 0
	for {
		for _, d := range a.s.deliveries()[next:] {
			next++
			md, _, err := ParseEntry(d.Entry.Payload)
			if err != nil {
				t.Error(err)
				return
			}
			rec := a.s.rec
			rec.mu.Lock()
			err = a.c.Ack(false, []Ack{{Position: d.Entry.Position}})
			if err == nil {
				rec.events = append(rec.events, event{ack: true, consumer: a.s.name, seq: md.GetSequenceId(), key: md.GetPartitionKey()})
			}
			rec.mu.Unlock()
			if err != nil {
				return // closed
			}
			a.c.Flow(uint32(d.Entry.Header.Messages))
		}
		select {
		case <-a.s.notify:
		case <-a.stop:
			return
		}
	}
}
