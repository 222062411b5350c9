package broker

import (
	"bytes"
	"compress/zlib"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/ledger"
)

func TestFlowCounterRates(t *testing.T) {
	var f flowCounter
	t0 := time.UnixMilli(1_000_000)
	now := t0
	clock := func() time.Time { return now }
	if m, b := f.rates(now); m != 0 || b != 0 {
		t.Fatalf("no traffic: rates %v %v", m, b)
	}
	f.add(clock, 10, 1000)
	now = t0.Add(2 * time.Second)
	if m, b := f.rates(now); m != 5 || b != 500 {
		t.Fatalf("10 messages over 2s: rates %v %v; want 5, 500", m, b)
	}
	f.add(clock, 4, 400)
	now = now.Add(500 * time.Millisecond)
	if m, _ := f.rates(now); m != 5 {
		t.Fatalf("sampled again after 0.5s: rate %v; want the previous 5", m)
	}
	now = now.Add(1500 * time.Millisecond) // 2s after the last sample
	if m, b := f.rates(now); m != 2 || b != 200 {
		t.Fatalf("4 messages over 2s: rates %v %v; want 2, 200", m, b)
	}
	now = now.Add(10 * time.Second)
	if m, _ := f.rates(now); m != 0 {
		t.Fatalf("idle: rate %v; want 0", m)
	}
}

func TestCreateListDeleteTopics(t *testing.T) {
	st := newTestBroker(t, func(c *Config) { c.AutoTopicCreation = AutoCreateOff })
	b, ctx := st.b, testCtx(t)
	plain := mustParse(t, "persistent://public/default/plain")
	if err := b.CreateTopic(ctx, plain); err != nil {
		t.Fatalf("CreateTopic with auto-creation off: %v", err)
	}
	if err := b.CreateTopic(ctx, plain); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("CreateTopic again: %v; want ErrAlreadyExists", err)
	}
	if err := b.CreateTopic(ctx, mustParse(t, "persistent://public/nons/x")); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("CreateTopic in a missing namespace: %v; want ErrNamespaceNotFound", err)
	}
	parted := mustParse(t, "persistent://public/default/parted")
	if err := b.CreatePartitioned(ctx, parted, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		t    TopicName
		n    int
		want error
	}{
		{"again", parted, 3, ErrAlreadyExists},
		{"non-partitioned exists", plain, 2, ErrAlreadyExists},
		{"zero partitions", mustParse(t, "zero"), 0, ErrInvalidRequest},
		{"negative partitions", mustParse(t, "neg"), -1, ErrInvalidRequest},
		{"partition name", mustParse(t, "x-partition-1"), 2, ErrInvalidRequest},
		{"too many", mustParse(t, "many"), MaxPartitions + 1, ErrInvalidRequest},
	} {
		if err := b.CreatePartitioned(ctx, c.t, c.n); !errors.Is(err, c.want) {
			t.Errorf("CreatePartitioned %s: %v; want %v", c.name, err, c.want)
		}
	}
	if err := b.CreateTopic(ctx, parted); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("CreateTopic over a partitioned topic: %v", err)
	}
	if err := b.CreateTopic(ctx, parted.PartitionName(1)); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("CreateTopic of a partition: %v", err)
	}
	names, err := b.TopicsOfNamespace(ctx, "public", "default")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"persistent://public/default/parted-partition-0", "persistent://public/default/parted-partition-1",
		"persistent://public/default/parted-partition-2", "persistent://public/default/plain"}
	if !slices.Equal(names, want) {
		t.Fatalf("TopicsOfNamespace = %v; want %v", names, want)
	}
	pnames, err := b.PartitionedTopicsOfNamespace(ctx, "public", "default")
	if err != nil || !slices.Equal(pnames, []string{"persistent://public/default/parted"}) {
		t.Fatalf("PartitionedTopicsOfNamespace = %v, %v", pnames, err)
	}

	// Grow, refuse to shrink, same count is a no-op.
	if err := b.UpdatePartitions(ctx, parted, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdatePartitions(ctx, parted, 4); !errors.Is(err, ErrShrinkPartitions) {
		t.Fatalf("shrink: %v", err)
	}
	if err := b.UpdatePartitions(ctx, parted, 5); err != nil {
		t.Fatalf("same count: %v", err)
	}
	if err := b.UpdatePartitions(ctx, plain, 5); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("update a non-partitioned topic: %v", err)
	}
	if n, err := b.PartitionedMetadata(ctx, parted); err != nil || n != 5 {
		t.Fatalf("PartitionedMetadata = %d, %v; want 5", n, err)
	}
	if n, err := b.PartitionedMetadata(ctx, plain); err != nil || n != 0 {
		t.Fatalf("PartitionedMetadata of a plain topic = %d, %v; want 0", n, err)
	}

	// Deleting: refused with a producer unless forced.
	tp, err := b.Topic(ctx, plain, false)
	if err != nil {
		t.Fatal(err)
	}
	_, ps := mustProducer(t, tp, "p")
	if err := b.Schemas().Delete(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Schemas().GetOrCreate(ctx, plain, Schema{Type: SchemaTypeString}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteTopic(ctx, plain, false); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("DeleteTopic with a producer: %v; want ErrPreconditionFailed", err)
	}
	if ok, _ := b.topicExists(ctx, plain); !ok {
		t.Fatal("refused delete removed the topic")
	}
	if err := b.DeleteTopic(ctx, plain, true); err != nil {
		t.Fatalf("forced DeleteTopic: %v", err)
	}
	if ps.closedCount() != 1 {
		t.Fatalf("producer told %d times it was closed; want 1", ps.closedCount())
	}
	if ok, _ := b.topicExists(ctx, plain); ok {
		t.Fatal("deleted topic still has its managed ledger")
	}
	if ok, err := b.Schemas().AcceptsNoSchema(ctx, plain); err != nil || !ok {
		t.Fatalf("schema of the deleted topic still there: %v %v", ok, err)
	}
	if err := b.DeleteTopic(ctx, plain, false); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("DeleteTopic again: %v", err)
	}
	if err := b.DeleteTopic(ctx, parted, false); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("DeleteTopic of a partitioned topic: %v", err)
	}

	// Partitioned delete: refused while a partition has a consumer.
	part := st.mustTopic(t, "persistent://public/default/parted-partition-2")
	c, _ := subscribe(t, part, SubscribeOptions{Subscription: "s", Durable: true})
	if err := b.DeletePartitioned(ctx, parted, false); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("DeletePartitioned with a consumer: %v", err)
	}
	if n, _ := b.PartitionedMetadata(ctx, parted); n != 5 {
		t.Fatal("refused DeletePartitioned changed the metadata")
	}
	c.Close(ctx)
	if err := b.DeletePartitioned(ctx, parted, false); err != nil {
		t.Fatal(err)
	}
	if names, _ := b.TopicsOfNamespace(ctx, "public", "default"); len(names) != 0 {
		t.Fatalf("after deleting everything: %v", names)
	}
	if err := b.DeletePartitioned(ctx, parted, false); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("DeletePartitioned again: %v", err)
	}
}

func TestTopicStats(t *testing.T) {
	st := newTestBroker(t)
	b, ctx := st.b, testCtx(t)
	name := mustParse(t, "stats")
	tp := st.mustTopic(t, "stats")
	p, _ := mustProducer(t, tp, "prod")
	c, sink := subscribe(t, tp, SubscribeOptions{Subscription: "sub", Type: SubShared, ConsumerName: "c1", Durable: true,
		Initial: InitialEarliest})
	rs := publishAll(t, p, append(singles(0, 4, nil), msg{seq: 4, batch: 3}))
	c.Flow(5)
	ds := sink.waitCount(t, 2) // permits go negative by up to a batch
	ackAll(t, c, ds[:1])
	// An idle subscription with only a cursor counts too.
	if err := b.CreateSubscription(ctx, name, "idle", MessageID{Position: rs[2].ID.Position}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return sink.messages() >= 5 }, "deliveries")
	s, err := b.TopicStats(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if s.MsgInCounter != 7 || s.BytesInCounter <= 0 || s.MsgRateIn <= 0 || s.MsgThroughputIn <= 0 || s.AverageMsgSize <= 0 {
		t.Errorf("in: %+v", s)
	}
	if len(s.Publishers) != 1 || s.Publishers[0].ProducerName != "prod" || s.Publishers[0].MsgInCounter != 7 ||
		s.Publishers[0].AccessMode != "Shared" {
		t.Errorf("publishers: %+v", s.Publishers)
	}
	if s.StorageSize != tp.ml.TotalSize() {
		t.Errorf("storageSize %d", s.StorageSize)
	}
	sub := s.Subscriptions["sub"]
	delivered := int64(sink.messages())
	if sub.Type != "Shared" || !sub.IsDurable || sub.MsgOutCounter != delivered || s.MsgOutCounter != delivered ||
		sub.MsgBacklog != 6 || sub.MsgBacklogNoDelayed != 6 || sub.UnackedMessages != delivered-1 || sub.BacklogSize <= 0 {
		t.Errorf("subscription (delivered %d): %+v", delivered, sub)
	}
	if len(sub.Consumers) != 1 || sub.Consumers[0].ConsumerName != "c1" || sub.Consumers[0].UnackedMessages != delivered-1 ||
		sub.Consumers[0].AvailablePermits != 5-delivered || sub.Consumers[0].MsgOutCounter != delivered {
		t.Errorf("consumers: %+v", sub.Consumers)
	}
	idle := s.Subscriptions["idle"]
	if idle.MsgBacklog != 5 || len(idle.Consumers) != 0 || idle.Type != "Exclusive" {
		t.Errorf("idle subscription: %+v", idle)
	}
	if s.BacklogSize < sub.BacklogSize {
		t.Errorf("topic backlogSize %d < the subscription's %d", s.BacklogSize, sub.BacklogSize)
	}

	is, err := b.InternalStats(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	last := rs[len(rs)-1].ID.Position
	if is.NumberOfEntries != 5 || is.EntriesAddedCounter != 5 || is.LastConfirmedEntry != last.String() ||
		len(is.Ledgers) == 0 || is.TotalSize != s.StorageSize || is.CurrentLedgerEntries != 5 {
		t.Errorf("internal stats: %+v", is)
	}
	cs, ok := is.Cursors["sub"]
	if !ok || cs.MarkDeletePosition != rs[0].ID.Position.String() || cs.IndividuallyDeletedMessages != "[]" {
		t.Errorf("cursor sub: %+v (all %v)", cs, is.Cursors)
	}
	// An individual ack after a gap shows as a range.
	if err := c.Ack(false, []Ack{{Position: rs[2].ID.Position}}); err != nil {
		t.Fatal(err)
	}
	is, _ = b.InternalStats(ctx, name)
	p2 := rs[2].ID.Position
	wantRange := "[(" + ledger.Position{Ledger: p2.Ledger, Entry: p2.Entry - 1}.String() + ".." + p2.String() + "]]"
	if got := is.Cursors["sub"].IndividuallyDeletedMessages; got != wantRange {
		t.Errorf("individuallyDeletedMessages = %q; want %q", got, wantRange)
	}
	if _, ok := is.Cursors[dedupCursor]; ok && !st.b.cfg.Deduplication {
		t.Errorf("dedup cursor shown without deduplication")
	}

	// A partitioned topic's base name has no stats of its own.
	parted := mustParse(t, "stats-parted")
	if err := b.CreatePartitioned(ctx, parted, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TopicStats(ctx, parted); !errors.Is(err, ErrTopicNotFound) {
		t.Errorf("TopicStats of a partitioned topic: %v", err)
	}
	pp, _ := mustProducer(t, st.mustTopic(t, "stats-parted-partition-1"), "pp")
	publishAll(t, pp, singles(0, 3, nil))
	ps, err := b.PartitionedStats(ctx, parted, true)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Metadata.Partitions != 2 || ps.MsgInCounter != 3 || len(ps.Partitions) != 2 ||
		ps.Partitions["persistent://public/default/stats-parted-partition-1"].MsgInCounter != 3 || len(ps.Publishers) != 1 {
		t.Errorf("partitioned stats: %+v", ps)
	}
	if _, err := b.PartitionedStats(ctx, name, false); !errors.Is(err, ErrTopicNotFound) {
		t.Errorf("PartitionedStats of a plain topic: %v", err)
	}
}

func TestSubscriptionAdmin(t *testing.T) {
	st := newTestBroker(t)
	b, ctx := st.b, testCtx(t)
	name := mustParse(t, "subs")
	tp := st.mustTopic(t, "subs")
	p, _ := mustProducer(t, tp, "p")
	rs := publishAll(t, p, append(singles(0, 3, nil), msg{seq: 3, batch: 2}, msg{seq: 5}))
	backlog := func(sub string) int64 {
		t.Helper()
		s, err := b.TopicStats(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		ss, ok := s.Subscriptions[sub]
		if !ok {
			t.Fatalf("no subscription %s in stats", sub)
		}
		return ss.MsgBacklog
	}
	peekSeq := func(sub string, n int) uint64 {
		t.Helper()
		e, err := b.PeekEntry(ctx, name, sub, n)
		if err != nil {
			t.Fatalf("peek %d of %s: %v", n, sub, err)
		}
		md, _, err := ParseEntry(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		return md.GetSequenceId()
	}

	earliest := MessageID{Position: ledger.Position{Ledger: -1, Entry: -1}}
	if err := b.CreateSubscription(ctx, name, "a", earliest); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateSubscription(ctx, name, "a", earliest); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("create again: %v", err)
	}
	latest := MessageID{Position: ledger.Position{Ledger: latestLedger, Entry: latestLedger}}
	if err := b.CreateSubscription(ctx, name, "z", latest); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateSubscription(ctx, name, "mid", MessageID{Position: rs[2].ID.Position}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateSubscription(ctx, mustParse(t, "missing"), "a", earliest); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("create on a missing topic with auto-creation: %v", err)
	}
	subs, err := b.Subscriptions(ctx, name)
	if err != nil || !slices.Equal(subs, []string{"a", "mid", "z"}) {
		t.Fatalf("Subscriptions = %v, %v", subs, err)
	}
	if got := []int64{backlog("a"), backlog("mid"), backlog("z")}; !slices.Equal(got, []int64{6, 4, 0}) {
		t.Fatalf("backlogs a, mid, z = %v; want 6 4 0", got)
	}
	if got := peekSeq("mid", 1); got != 2 {
		t.Fatalf("peek 1 of mid: seq %d; want 2", got)
	}
	if got := peekSeq("a", 4); got != 3 {
		t.Fatalf("peek 4 of a (the batch): seq %d; want 3", got)
	}
	if _, err := b.PeekEntry(ctx, name, "a", 6); !errors.Is(err, ErrMessageNotFound) {
		t.Fatalf("peek past the backlog: %v", err)
	}
	if _, err := b.PeekEntry(ctx, name, "nope", 1); !errors.Is(err, ErrSubscriptionNotFound) {
		t.Fatalf("peek on a missing subscription: %v", err)
	}

	// Skip counts messages; a batch goes whole.
	if err := b.SkipMessages(ctx, name, "a", 2); err != nil {
		t.Fatal(err)
	}
	if got := backlog("a"); got != 4 {
		t.Fatalf("after skipping 2: backlog %d; want 4", got)
	}
	if got := peekSeq("a", 1); got != 2 {
		t.Fatalf("after skipping 2: first is seq %d; want 2", got)
	}
	if err := b.SkipMessages(ctx, name, "a", 2); err != nil { // seq 2 and the batch (3, 4)
		t.Fatal(err)
	}
	if got := backlog("a"); got != 1 {
		t.Fatalf("after skipping into a batch: backlog %d; want 1 (the batch goes whole)", got)
	}
	if err := b.SkipMessages(ctx, name, "a", -1); err != nil {
		t.Fatal(err)
	}
	if got := backlog("a"); got != 0 {
		t.Fatalf("after skip all: backlog %d", got)
	}

	// Reset with a consumer: it is disconnected and the backlog is back.
	c, sink := subscribe(t, tp, SubscribeOptions{Subscription: "a", Type: SubExclusive, Durable: true})
	if err := b.ResetCursor(ctx, name, "a", &MessageID{Position: rs[1].ID.Position, BatchIndex: -1, Partition: -1}, time.Time{}, false); err != nil {
		t.Fatal(err)
	}
	if sink.closedCount() != 1 {
		t.Fatalf("consumer closed %d times by the reset; want 1", sink.closedCount())
	}
	if got := backlog("a"); got != 5 {
		t.Fatalf("after reset to entry 1: backlog %d; want 5", got)
	}
	if err := b.ResetCursor(ctx, name, "a", &MessageID{Position: rs[1].ID.Position, BatchIndex: -1, Partition: -1}, time.Time{}, true); err != nil {
		t.Fatal(err)
	}
	if got := backlog("a"); got != 4 {
		t.Fatalf("after reset past entry 1: backlog %d; want 4", got)
	}
	// Publish times come from the ledgers' clock: later messages are later.
	st.clock.Advance(time.Minute)
	later := st.clock.Now()
	mustPublish(t, p, msg{seq: 6})
	if err := b.ResetCursor(ctx, name, "a", nil, later, false); err != nil {
		t.Fatal(err)
	}
	if got := backlog("a"); got != 1 {
		t.Fatalf("after reset to the time of the last message: backlog %d; want 1", got)
	}
	if err := b.ResetCursor(ctx, name, "a", nil, time.UnixMilli(0), false); err != nil {
		t.Fatal(err)
	}
	if got := backlog("a"); got != 7 {
		t.Fatalf("after reset to time 0: backlog %d; want 7", got)
	}
	if err := b.ResetCursor(ctx, name, "nope", nil, later, false); !errors.Is(err, ErrSubscriptionNotFound) {
		t.Fatalf("reset a missing subscription: %v", err)
	}
	_ = c

	// Delete: refused with a consumer unless forced.
	c2, sink2 := subscribe(t, tp, SubscribeOptions{Subscription: "mid", Type: SubShared, Durable: true})
	if err := b.DeleteSubscription(ctx, name, "mid", false); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("delete with a consumer: %v", err)
	}
	if err := b.DeleteSubscription(ctx, name, "mid", true); err != nil {
		t.Fatal(err)
	}
	if sink2.closedCount() != 1 {
		t.Fatalf("consumer of a deleted subscription closed %d times; want 1", sink2.closedCount())
	}
	_ = c2
	if err := b.DeleteSubscription(ctx, name, "z", false); err != nil {
		t.Fatal(err)
	}
	subs, _ = b.Subscriptions(ctx, name)
	if !slices.Equal(subs, []string{"a"}) {
		t.Fatalf("after deletes: %v", subs)
	}
	if err := b.DeleteSubscription(ctx, name, "z", false); !errors.Is(err, ErrSubscriptionNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	// Subscriptions survive an unload (cursors are reloaded).
	if err := b.UnloadTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	subs, _ = b.Subscriptions(ctx, name)
	if !slices.Equal(subs, []string{"a"}) {
		t.Fatalf("after unload: %v", subs)
	}
	if got := backlog("a"); got != 7 {
		t.Fatalf("after unload: backlog %d; want 7", got)
	}
}

func TestTerminateUnloadReadEntry(t *testing.T) {
	st := newTestBroker(t)
	b, ctx := st.b, testCtx(t)
	name := mustParse(t, "term")
	tp := st.mustTopic(t, "term")
	p, ps := mustProducer(t, tp, "p")
	rs := publishAll(t, p, singles(0, 3, nil))

	e, err := b.ReadEntry(ctx, name, rs[1].ID.Position)
	if err != nil || e.Position != rs[1].ID.Position {
		t.Fatalf("ReadEntry = %v, %v", e.Position, err)
	}
	for _, pos := range []ledger.Position{{Ledger: rs[2].ID.Position.Ledger, Entry: rs[2].ID.Position.Entry + 1},
		{Ledger: 999999, Entry: 0}, {Ledger: rs[0].ID.Position.Ledger, Entry: -1}} {
		if _, err := b.ReadEntry(ctx, name, pos); !errors.Is(err, ErrMessageNotFound) {
			t.Errorf("ReadEntry %v: %v; want ErrMessageNotFound", pos, err)
		}
	}

	id, err := b.Terminate(ctx, name)
	if err != nil || id.Position != rs[2].ID.Position {
		t.Fatalf("Terminate = %+v, %v; want %v", id, err, rs[2].ID.Position)
	}
	if ps.closedCount() != 1 {
		t.Fatalf("producer closed %d times by terminate; want 1", ps.closedCount())
	}
	if _, err := tp.AddProducer(ctx, ProducerOptions{Name: "late", Sink: &producerSink{}}); !errors.Is(err, ErrTopicTerminated) {
		t.Fatalf("producer after terminate: %v; want ErrTopicTerminated", err)
	}
	if id2, err := b.Terminate(ctx, name); err != nil || id2.Position != id.Position {
		t.Fatalf("Terminate again = %+v, %v", id2, err)
	}
	last, ok, err := b.LastMessageID(ctx, name)
	if err != nil || !ok || last.Position != id.Position {
		t.Fatalf("LastMessageID = %+v %v %v", last, ok, err)
	}

	p3, ps3 := mustProducer(t, st.mustTopic(t, "unload"), "p3")
	_ = p3
	if err := b.UnloadTopic(ctx, mustParse(t, "unload")); err != nil {
		t.Fatal(err)
	}
	if ps3.closedCount() != 1 {
		t.Fatalf("producer closed %d times by unload; want 1", ps3.closedCount())
	}
	if err := b.UnloadTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := b.UnloadTopic(ctx, name); err != nil {
		t.Fatalf("unload of a topic not loaded: %v", err)
	}
	if err := b.UnloadTopic(ctx, mustParse(t, "never")); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("unload of a missing topic: %v", err)
	}
	// Still terminated after reloading.
	tp2 := st.mustTopic(t, "term")
	if _, err := tp2.AddProducer(ctx, ProducerOptions{Name: "p2", Sink: &producerSink{}}); !errors.Is(err, ErrTopicTerminated) {
		t.Fatalf("producer after reload: %v; want ErrTopicTerminated", err)
	}
	if _, _, err := b.LastMessageID(ctx, mustParse(t, "never")); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("LastMessageID of a missing topic: %v", err)
	}
}

func TestDecodePayload(t *testing.T) {
	plain := bytes.Repeat([]byte("magnetar payload "), 50)
	lz := make([]byte, lz4.CompressBlockBound(len(plain)))
	n, err := lz4.CompressBlock(plain, lz, nil)
	if err != nil {
		t.Fatal(err)
	}
	var zl bytes.Buffer
	zw := zlib.NewWriter(&zl)
	zw.Write(plain)
	zw.Close()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zs := enc.EncodeAll(plain, nil)
	enc.Close()
	for _, c := range []struct {
		typ  msgpb.CompressionType
		data []byte
	}{
		{msgpb.CompressionType_NONE, plain},
		{msgpb.CompressionType_LZ4, lz[:n]},
		{msgpb.CompressionType_ZLIB, zl.Bytes()},
		{msgpb.CompressionType_ZSTD, zs},
		{msgpb.CompressionType_SNAPPY, snappy.Encode(nil, plain)},
	} {
		md := &msgpb.MessageMetadata{Compression: c.typ.Enum(), UncompressedSize: proto.Uint32(uint32(len(plain)))}
		got, err := DecodePayload(md, c.data)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%v: %d bytes, %v", c.typ, len(got), err)
		}
		if c.typ == msgpb.CompressionType_NONE {
			continue
		}
		// A wrong declared size, or corrupt bytes, are bad entries.
		md.UncompressedSize = proto.Uint32(uint32(len(plain) - 1))
		if _, err := DecodePayload(md, c.data); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%v with a wrong size: %v", c.typ, err)
		}
		md.UncompressedSize = proto.Uint32(uint32(len(plain)))
		if _, err := DecodePayload(md, []byte("garbage!")); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%v of garbage: %v", c.typ, err)
		}
	}
	md := &msgpb.MessageMetadata{Compression: msgpb.CompressionType_ZSTD.Enum(), UncompressedSize: proto.Uint32(1 << 30)}
	if _, err := DecodePayload(md, zs); !errors.Is(err, ErrBadEntry) {
		t.Errorf("declared size over the limit: %v", err)
	}
}
