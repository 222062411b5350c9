package broker

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// durable is the options of a durable subscription starting at the
// earliest entry.
func durable(sub string, typ SubType, consumer string) SubscribeOptions {
	return SubscribeOptions{Subscription: sub, Type: typ, ConsumerName: consumer, Durable: true, Initial: InitialEarliest}
}

var earliestID = MessageID{Position: ledger.Position{Ledger: -1, Entry: -1}, BatchIndex: -1, Partition: -1}

var latestID = MessageID{Position: ledger.Position{Ledger: latestLedger, Entry: latestLedger}, BatchIndex: -1, Partition: -1}

// sentFor is how many entries (holding msgs[i] messages) a consumer with
// permits gets: an entry is sent while permits are left.
func sentFor(msgs []int32, permits int64) int {
	n := 0
	for n < len(msgs) && permits > 0 {
		permits -= int64(msgs[n])
		n++
	}
	return n
}

func TestExclusiveFlowPermits(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "flow")
	p, _ := mustProducer(t, tp, "p")
	ms := hundred()
	rs := publishAll(t, p, ms)
	msgs := make([]int32, len(ms))
	for i, m := range ms {
		msgs[i] = m.messages()
	}

	c, s := subscribe(t, tp, durable("sub", SubExclusive, "c"))
	// Permits count messages: a batch of 10 takes 10 of them, and an entry
	// goes out while any are left.
	permits := int64(0)
	for _, flow := range []int64{15, 20, 1, 1000} {
		permits += flow
		c.Flow(uint32(flow))
		want := sentFor(msgs, permits)
		s.waitCount(t, want)
		// Bounded: shows that no more than the permits' worth arrives.
		time.Sleep(quiet)
		ds := s.deliveries()
		if len(ds) != want {
			t.Fatalf("after Flow of %d permits in all: %d entries (%d messages) delivered, want %d entries",
				permits, len(ds), s.messages(), want)
		}
		if !slices.Equal(positionsOf(ds), positionsOfResults(rs[:want])) {
			t.Fatalf("delivered out of order:\n%v\nwant\n%v", positionsOf(ds), positionsOfResults(rs[:want]))
		}
	}
	for i, d := range s.deliveries() {
		if d.RedeliveryCount != 0 || d.AckSet != nil || d.Entry.Header.Messages != msgs[i] {
			t.Fatalf("delivery %d: redelivery count %d, ack set %v, %d messages", i, d.RedeliveryCount, d.AckSet, d.Entry.Header.Messages)
		}
	}
	if err := c.Ack(true, []Ack{{Position: rs[len(rs)-1].ID.Position}}); err != nil {
		t.Fatal(err)
	}
	if md := c.Subscription().Cursor().MarkDeletePosition(); md != rs[len(rs)-1].ID.Position {
		t.Fatalf("mark-delete position %v after the cumulative ack of %v", md, rs[len(rs)-1].ID.Position)
	}
}

func TestSubscribeConflicts(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "conflicts")

	c1, _ := subscribe(t, tp, durable("ex", SubExclusive, "c1"))
	if _, err := tp.Subscribe(ctx, SubscribeOptions{Subscription: "ex", Type: SubExclusive, Durable: true, Sink: newConsumerSink("c2", nil)}); !errors.Is(err, ErrConsumerBusy) {
		t.Fatalf("second Exclusive consumer: %v, want ErrConsumerBusy", err)
	}
	for _, typ := range []SubType{SubShared, SubFailover, SubKeyShared} {
		if _, err := tp.Subscribe(ctx, SubscribeOptions{Subscription: "ex", Type: typ, Durable: true, Sink: newConsumerSink("c3", nil)}); !errors.Is(err, ErrSubscriptionType) {
			t.Fatalf("%v consumer on an Exclusive subscription: %v, want ErrSubscriptionType", typ, err)
		}
	}
	// Once the consumer left, the subscription takes any type.
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	subscribe(t, tp, durable("ex", SubShared, "s1"))
	subscribe(t, tp, durable("ex", SubShared, "s2"))
	if _, err := tp.Subscribe(ctx, SubscribeOptions{Subscription: "ex", Type: SubFailover, Durable: true, Sink: newConsumerSink("f", nil)}); !errors.Is(err, ErrSubscriptionType) {
		t.Fatalf("Failover consumer on a Shared subscription: %v, want ErrSubscriptionType", err)
	}

	for _, o := range []SubscribeOptions{
		{Subscription: "", Type: SubShared, Sink: newConsumerSink("x", nil)},
		{Subscription: dedupCursor, Type: SubShared, Durable: true, Sink: newConsumerSink("x", nil)},
		{Subscription: "t", Type: SubType(4), Sink: newConsumerSink("x", nil)},
		{Subscription: "t", Type: SubType(-1), Sink: newConsumerSink("x", nil)},
		{Subscription: "t", Type: SubShared},
	} {
		if _, err := tp.Subscribe(ctx, o); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Subscribe(%+v) = %v, want ErrInvalidRequest", o, err)
		}
	}
}

// An Exclusive consumer that leaves with unacknowledged entries: the next
// consumer of the subscription gets them.
func TestExclusiveReconnectGetsUnacknowledged(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "reconnect")
	p, _ := mustProducer(t, tp, "p")
	rs := publishAll(t, p, singles(0, 10, nil))

	c1, s1 := subscribe(t, tp, durable("sub", SubExclusive, "c1"))
	c1.Flow(100)
	ds := s1.waitCount(t, 10)
	if err := c1.Ack(true, []Ack{{Position: ds[4].Entry.Position}}); err != nil {
		t.Fatal(err)
	}
	if err := c1.Ack(false, []Ack{{Position: ds[6].Entry.Position}}); err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2, s2 := subscribe(t, tp, durable("sub", SubExclusive, "c2"))
	c2.Flow(100)
	want := []uint64{5, 7, 8, 9}
	waitFor(t, 5*time.Second, func() bool { return s2.count() >= len(want) },
		"the next Exclusive consumer to get the %d entries the first left unacknowledged (got %d)", len(want), s2.count())
	if got := seqsOf(t, s2.deliveries()); !slices.Equal(got, want) {
		t.Fatalf("next consumer got %v, want %v", got, want)
	}
	ackAll(t, c2, s2.deliveries())
	if md := c2.Subscription().Cursor().MarkDeletePosition(); md != rs[9].ID.Position {
		t.Fatalf("mark-delete %v, want %v", md, rs[9].ID.Position)
	}
}

func TestSharedDispatch(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "shared")
	var cs []*Consumer
	var ss []*consumerSink
	for i := range 3 {
		c, s := subscribe(t, tp, durable("sub", SubShared, fmt.Sprintf("c%d", i)))
		c.Flow(1000)
		cs, ss = append(cs, c), append(ss, s)
	}
	p, _ := mustProducer(t, tp, "p")
	const n = 300
	rs := publishAll(t, p, singles(0, n, nil))
	total := func() int { return ss[0].count() + ss[1].count() + ss[2].count() }
	waitFor(t, 20*time.Second, func() bool { return total() >= n }, "%d deliveries (have %d)", n, total())
	time.Sleep(quiet) // bounded: shows nothing is delivered twice
	seen := map[uint64]int{}
	for i, s := range ss {
		ds := s.deliveries()
		if len(ds) < n/3/2 {
			t.Errorf("consumer %d got %d of %d entries: not spread", i, len(ds), n)
		}
		for k, d := range ds {
			seen[seqOf(t, d)]++
			if d.RedeliveryCount != 0 {
				t.Errorf("first delivery with redelivery count %d", d.RedeliveryCount)
			}
			if k > 0 && !ds[k-1].Entry.Position.Before(d.Entry.Position) {
				t.Errorf("consumer %d: %v after %v", i, d.Entry.Position, ds[k-1].Entry.Position)
			}
		}
	}
	for i := range n {
		if seen[uint64(i)] != 1 {
			t.Fatalf("entry %d delivered %d times", i, seen[uint64(i)])
		}
	}

	// c0 leaves without acknowledging: its entries go to the others, as
	// redelivered.
	for i := 1; i < 3; i++ {
		ackAll(t, cs[i], ss[i].deliveries())
	}
	left := seqsOf(t, ss[0].deliveries())
	firsts := []int{ss[1].count(), ss[2].count()}
	if err := cs[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return ss[1].count()+ss[2].count() >= n }, "redelivery of c0's %d entries", len(left))
	time.Sleep(quiet) // bounded: shows nothing more comes
	var again []uint64
	for k, i := range []int{1, 2} {
		ds := ss[i].deliveries()[firsts[k]:]
		for _, d := range ds {
			if d.RedeliveryCount != 1 {
				t.Errorf("redelivered %v with redelivery count %d, want 1", d.Entry.Position, d.RedeliveryCount)
			}
			again = append(again, seqOf(t, d))
		}
		ackAll(t, cs[i], ds)
	}
	slices.Sort(again)
	if !slices.Equal(again, left) {
		t.Fatalf("redelivered %v, want c0's unacknowledged %v", again, left)
	}
	cur := cs[1].Subscription().Cursor()
	waitFor(t, 5*time.Second, func() bool { return cur.MarkDeletePosition() == rs[n-1].ID.Position },
		"mark-delete at the last entry %v (at %v)", rs[n-1].ID.Position, cur.MarkDeletePosition())
	if b, err := cur.Backlog(ctx); err != nil || b.Entries != 0 || b.Messages != 0 {
		t.Fatalf("backlog %+v, %v; want empty", b, err)
	}
	if err := cs[1].Ack(true, []Ack{{Position: rs[n-1].ID.Position}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("cumulative ack on Shared: %v, want ErrInvalidRequest", err)
	}
}

func TestSharedMaxUnacked(t *testing.T) {
	st := newTestBroker(t, func(c *Config) { c.MaxUnackedPerConsumer = 5 })
	tp := st.mustTopic(t, "max-unacked")
	c, s := subscribe(t, tp, durable("sub", SubShared, "c"))
	c.Flow(1000)
	p, _ := mustProducer(t, tp, "p")
	publishAll(t, p, singles(0, 20, nil))
	ds := s.waitCount(t, 5)
	time.Sleep(quiet) // bounded: shows the consumer gets no more than 5 unacknowledged
	if n := s.count(); n != 5 {
		t.Fatalf("%d entries delivered with at most 5 unacknowledged", n)
	}
	ackAll(t, c, ds[:3])
	waitFor(t, 5*time.Second, func() bool { return s.count() >= 8 },
		"acknowledging 3 of 5 to let 3 more through (have %d)", s.count())
	time.Sleep(quiet)
	if n := s.count(); n != 8 {
		t.Fatalf("%d entries delivered after 3 acks, want 8", n)
	}
}

func TestFailover(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "failover")
	type member struct {
		name string
		prio int32
	}
	members := []member{{"a", 1}, {"c", 0}, {"b", 0}}
	cs := map[string]*Consumer{}
	ss := map[string]*consumerSink{}
	for _, m := range members {
		o := durable("sub", SubFailover, m.name)
		o.Priority = m.prio
		c, s := subscribe(t, tp, o)
		c.Flow(1000)
		cs[m.name], ss[m.name] = c, s
	}
	// b: best priority (0), then first by name.
	checkActive := func(active string, names ...string) {
		t.Helper()
		for _, n := range names {
			waitFor(t, 5*time.Second, func() bool { a, ok := ss[n].lastActive(); return ok && a == (n == active) },
				"consumer %s to be told active=%v", n, n == active)
		}
	}
	checkActive("b", "a", "b", "c")

	p, _ := mustProducer(t, tp, "p")
	rs := publishAll(t, p, singles(0, 50, nil))
	ss["b"].waitCount(t, 50)
	time.Sleep(quiet) // bounded: shows the others get nothing
	if ss["a"].count() != 0 || ss["c"].count() != 0 {
		t.Fatalf("inactive consumers got %d and %d entries", ss["a"].count(), ss["c"].count())
	}
	if got := seqsOf(t, ss["b"].deliveries()); !slices.Equal(got, seqRange(0, 50)) {
		t.Fatalf("active consumer got %v", got)
	}
	if err := cs["b"].Ack(true, []Ack{{Position: rs[19].ID.Position}}); err != nil {
		t.Fatal(err)
	}
	if md := cs["b"].Subscription().Cursor().MarkDeletePosition(); md != rs[19].ID.Position {
		t.Fatalf("mark-delete %v after the cumulative ack of %v", md, rs[19].ID.Position)
	}

	// b leaves: c (priority 0) takes over from the mark-delete position.
	if err := cs["b"].Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkActive("c", "a", "c")
	waitFor(t, 5*time.Second, func() bool { return ss["c"].count() >= 30 },
		"the new active consumer to get the 30 entries left unacknowledged (got %d)", ss["c"].count())
	time.Sleep(quiet)
	if got := seqsOf(t, ss["c"].deliveries()); !slices.Equal(got, seqRange(20, 50)) {
		t.Fatalf("new active consumer got %v, want 20..49 in order", got)
	}
	if ss["a"].count() != 0 {
		t.Fatalf("inactive consumer got %d entries", ss["a"].count())
	}
	if err := cs["c"].Ack(true, []Ack{{Position: rs[29].ID.Position}}); err != nil {
		t.Fatal(err)
	}

	// A consumer with a better priority takes over.
	o := durable("sub", SubFailover, "z")
	o.Priority = -1
	z, sz := subscribe(t, tp, o)
	cs["z"], ss["z"] = z, sz
	z.Flow(1000)
	checkActive("z", "a", "c", "z")
	waitFor(t, 5*time.Second, func() bool { return sz.count() >= 20 }, "z to get 30..49 (got %d)", sz.count())
	if got := seqsOf(t, sz.deliveries()); !slices.Equal(got, seqRange(30, 50)) {
		t.Fatalf("z got %v, want 30..49", got)
	}
	if err := z.Ack(true, []Ack{{Position: rs[49].ID.Position}}); err != nil {
		t.Fatal(err)
	}
	if md := z.Subscription().Cursor().MarkDeletePosition(); md != rs[49].ID.Position {
		t.Fatalf("mark-delete %v, want %v", md, rs[49].ID.Position)
	}
}

// Key_Shared. Routing hashes keys with Murmur3 (32-bit, seed 0), as
// Pulsar does; murmur3 itself is checked against published values in
// keyshared_test.go.
func keyHashRef(key string) int32 {
	if key == "" {
		key = "NONE_KEY"
	}
	return int32(murmur3([]byte(key)) % 65536)
}

// keyed is n single-message entries with sequence ids from.., key
// "key-<seq mod keys>".
func keyed(from, n, keys int) []msg {
	return singles(from, n, func(i int) string { return fmt.Sprintf("key-%d", i%keys) })
}

// routing returns, for each key, the consumer names its entries were
// delivered to, in delivery order of first deliveries, failing the test
// if a consumer got a key's entries out of order.
func checkPerConsumerKeyOrder(t *testing.T, ss []*consumerSink) map[string][]string {
	t.Helper()
	owners := map[string][]string{}
	for _, s := range ss {
		last := map[string]uint64{}
		for _, d := range s.deliveries() {
			k, seq := keyOf(t, d), seqOf(t, d)
			if prev, ok := last[k]; ok && seq <= prev {
				t.Errorf("consumer %s: key %s: sequence id %d after %d", s.name, k, seq, prev)
			}
			last[k] = seq
			if o := owners[k]; len(o) == 0 || o[len(o)-1] != s.name {
				owners[k] = append(owners[k], s.name)
			}
		}
	}
	return owners
}

func TestKeySharedRouting(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "key-shared")
	var ss []*consumerSink
	for i := range 3 {
		c, s := subscribe(t, tp, durable("sub", SubKeyShared, fmt.Sprintf("c%d", i)))
		c.Flow(1000)
		ss = append(ss, s)
	}
	p, _ := mustProducer(t, tp, "p")
	const n, keys = 600, 20
	publishAll(t, p, keyed(0, n, keys))
	total := func() int { return ss[0].count() + ss[1].count() + ss[2].count() }
	waitFor(t, 20*time.Second, func() bool { return total() >= n }, "%d deliveries (have %d)", n, total())
	time.Sleep(quiet) // bounded: shows nothing is delivered twice
	if total() != n {
		t.Fatalf("%d deliveries of %d entries", total(), n)
	}
	owners := checkPerConsumerKeyOrder(t, ss)
	perConsumer := map[string]int{}
	for k, o := range owners {
		if len(o) != 1 {
			t.Errorf("key %s went to %v, want one consumer", k, o)
		}
		perConsumer[o[0]]++
	}
	if len(owners) != keys {
		t.Fatalf("%d keys delivered, want %d", len(owners), keys)
	}
	if len(perConsumer) < 2 {
		t.Fatalf("every key went to one consumer: %v", perConsumer)
	}
	// Entries without a key are routed like any key.
	publishAll(t, p, singles(n, 10, nil))
	waitFor(t, 20*time.Second, func() bool { return total() >= n+10 }, "10 entries without a key")
	owners = checkPerConsumerKeyOrder(t, ss)
	if o := owners[""]; len(o) != 1 {
		t.Fatalf("entries without a key went to %v", o)
	}
}

// calibrate returns the consumer each key of ms goes to on a Key_Shared
// subscription (of its own) with consumers of the given names: routing
// depends only on the names.
func calibrate(t *testing.T, tp *Topic, sub string, names []string, n int) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	var cs []*Consumer
	var ss []*consumerSink
	for _, name := range names {
		c, s := subscribe(t, tp, durable(sub, SubKeyShared, name))
		cs, ss = append(cs, c), append(ss, s)
	}
	// Permits once all are there: a consumer joining after reads began
	// would wait for acknowledgements.
	for _, c := range cs {
		c.Flow(uint32(n))
	}
	waitFor(t, 20*time.Second, func() bool {
		sum := 0
		for _, s := range ss {
			sum += s.count()
		}
		return sum >= n
	}, "calibration of %v", names)
	owners := checkPerConsumerKeyOrder(t, ss)
	out := map[string]string{}
	for k, o := range owners {
		if len(o) != 1 {
			t.Fatalf("calibration: key %s went to %v", k, o)
		}
		out[k] = o[0]
	}
	for i, c := range cs {
		if i < len(cs)-1 {
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := c.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestKeySharedNoPermitsHoldsOnlyItsKeys(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "key-shared-permits")
	p, _ := mustProducer(t, tp, "p")
	const n, keys = 300, 20
	rs := publishAll(t, p, keyed(0, n, keys))
	names := []string{"A", "B", "C"}
	owner := calibrate(t, tp, "calibration", names, n)
	// The starved consumer is the one with the most keys.
	count := map[string]int{}
	for _, o := range owner {
		count[o]++
	}
	starved := names[0]
	for _, nm := range names {
		if count[nm] > count[starved] {
			starved = nm
		}
	}
	want := map[string][]uint64{}
	for i := range n {
		o := owner[fmt.Sprintf("key-%d", i%keys)]
		want[o] = append(want[o], uint64(i))
	}

	cs := map[string]*Consumer{}
	ss := map[string]*consumerSink{}
	for _, nm := range names {
		c, s := subscribe(t, tp, durable("sub", SubKeyShared, nm))
		cs[nm], ss[nm] = c, s
	}
	for _, nm := range names {
		if nm != starved {
			cs[nm].Flow(uint32(n))
		}
	}
	for _, nm := range names {
		if nm == starved {
			continue
		}
		waitFor(t, 20*time.Second, func() bool { return ss[nm].count() >= len(want[nm]) },
			"consumer %s to get its %d entries while %s has no permits (got %d)", nm, len(want[nm]), starved, ss[nm].count())
	}
	time.Sleep(quiet) // bounded: shows the starved consumer gets nothing
	if k := ss[starved].count(); k != 0 {
		t.Fatalf("consumer %s without permits got %d entries", starved, k)
	}
	cs[starved].Flow(uint32(n))
	ss[starved].waitCount(t, len(want[starved]))
	time.Sleep(quiet)
	for _, nm := range names {
		if got := seqsOf(t, ss[nm].deliveries()); !slices.Equal(got, want[nm]) {
			t.Fatalf("consumer %s got %v\nwant %v", nm, got, want[nm])
		}
		ackAll(t, cs[nm], ss[nm].deliveries())
	}
	if md := cs[starved].Subscription().Cursor().MarkDeletePosition(); md != rs[n-1].ID.Position {
		t.Fatalf("mark-delete %v, want %v", md, rs[n-1].ID.Position)
	}
}

// checkKeyOrder checks the events of a Key_Shared subscription against
// its ordering guarantee: for each key, the first deliveries of its
// entries are in sequence (publish) order; and when a key moves from
// consumer A to consumer B, every entry of that key delivered to A had
// been acknowledged (or A closed) before B received one.
func checkKeyOrder(t *testing.T, events []event) {
	t.Helper()
	type keyState struct {
		lastFirst int64
		seen      map[uint64]bool
		holder    map[uint64]string // delivered and not yet acknowledged: seq → consumer
	}
	keys := map[string]*keyState{}
	closed := map[string]bool{}
	errs := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if errs++; errs <= 10 {
			t.Errorf(format, args...)
		}
	}
	for i, e := range events {
		if e.closed {
			closed[e.consumer] = true
			for _, ks := range keys {
				for seq, c := range ks.holder {
					if c == e.consumer {
						delete(ks.holder, seq)
					}
				}
			}
			continue
		}
		ks := keys[e.key]
		if ks == nil {
			ks = &keyState{lastFirst: -1, seen: map[uint64]bool{}, holder: map[uint64]string{}}
			keys[e.key] = ks
		}
		if e.ack {
			delete(ks.holder, e.seq)
			continue
		}
		if !ks.seen[e.seq] {
			if int64(e.seq) <= ks.lastFirst {
				fail("event %d: key %s: sequence id %d first delivered (to %s) after %d", i, e.key, e.seq, e.consumer, ks.lastFirst)
			}
			ks.seen[e.seq] = true
			ks.lastFirst = int64(e.seq)
		}
		if closed[e.consumer] {
			continue // sent to a consumer already closed: it goes back
		}
		var unacked []string
		for seq, c := range ks.holder {
			if c != e.consumer {
				unacked = append(unacked, fmt.Sprintf("%d at %s", seq, c))
			}
		}
		if len(unacked) > 0 {
			sort.Strings(unacked)
			fail("event %d: key %s: %s received sequence id %d while %v were unacknowledged", i, e.key, e.consumer, e.seq, unacked)
		}
		ks.holder[e.seq] = e.consumer
	}
	if errs > 10 {
		t.Errorf("... %d ordering violations in all", errs)
	}
}

// A consumer joins while keys have an entry unacknowledged at their
// consumer and more waiting for permits there: the keys that move to the
// newcomer must wait for those acknowledgements.
func TestKeySharedJoinWaitsForAcks(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "key-shared-join")
	p, _ := mustProducer(t, tp, "p")
	const n, keys = 60, 20
	rs := publishAll(t, p, keyed(0, n, keys))
	three := []string{"A", "B", "C"}
	before := calibrate(t, tp, "calibration-3", three, n)
	after := calibrate(t, tp, "calibration-4", append(slices.Clone(three), "D"), n)
	var moved []string
	from := map[string]bool{} // consumers keys move away from
	for k, o := range after {
		if o == "D" {
			moved = append(moved, k)
			from[before[k]] = true
		}
	}
	if len(moved) == 0 {
		t.Fatal("calibration: no key moves to D; choose other consumer names")
	}
	perConsumer := map[string]int{}
	for _, o := range before {
		perConsumer[o]++
	}
	// One consumer ("big") takes all its entries, so that every entry is
	// read; the others have permits for the first entry of each of their
	// keys: the rest waits for them. Big is one that some moved key does
	// not come from.
	big := ""
	for _, nm := range three {
		if big == "" && (len(from) > 1 || !from[nm]) {
			big = nm
		}
	}
	want := map[string]int{}
	for _, nm := range three {
		want[nm] = perConsumer[nm]
		if nm == big {
			want[nm] = 3 * perConsumer[nm]
		}
	}

	rec := &recorder{}
	cs := map[string]*Consumer{}
	ss := map[string]*consumerSink{}
	for _, nm := range three {
		o := durable("sub", SubKeyShared, nm)
		o.Sink = newConsumerSink(nm, rec)
		c, _ := subscribe(t, tp, o)
		cs[nm], ss[nm] = c, o.Sink.(*consumerSink)
	}
	// Permits once all are there (a consumer joining after reads began
	// would wait for acknowledgements), big's last.
	for _, nm := range three {
		if nm != big {
			cs[nm].Flow(uint32(perConsumer[nm]))
		}
	}
	cs[big].Flow(n)
	for _, nm := range three {
		ss[nm].waitCount(t, want[nm])
	}
	time.Sleep(quiet) // bounded: shows the others get no more than their permits
	for _, nm := range three {
		if got := ss[nm].count(); got != want[nm] {
			t.Fatalf("consumer %s got %d entries, want %d", nm, got, want[nm])
		}
	}
	o := durable("sub", SubKeyShared, "D")
	o.Sink = newConsumerSink("D", rec)
	d, _ := subscribe(t, tp, o)
	cs["D"], ss["D"] = d, o.Sink.(*consumerSink)
	d.Flow(n)
	// Bounded: gives a faulty dispatcher the time to hand the moved keys
	// to D before A, B and C acknowledge; a correct one hands D nothing
	// of them however long this is.
	time.Sleep(quiet)
	for _, nm := range []string{"A", "B", "C", "D"} {
		startAcker(t, cs[nm], ss[nm])
	}
	cur := d.Subscription().Cursor()
	waitFor(t, 20*time.Second, func() bool { return cur.MarkDeletePosition() == rs[n-1].ID.Position },
		"every entry acknowledged (mark-delete %v)", cur.MarkDeletePosition())
	checkKeyOrder(t, rec.snapshot())
	got := map[string]bool{}
	for _, dl := range ss["D"].deliveries() {
		got[keyOf(t, dl)] = true
	}
	for _, k := range moved {
		if before[k] != big && !got[k] {
			t.Errorf("key %s moved from %s to D, which got none of its entries", k, before[k])
		}
	}
}

// Consumers acknowledging as they go, a fourth joining mid-stream: per-key
// order holds throughout. Whether a join lands in the middle of a read
// depends on timing, so the scenario runs on several topics.
func TestKeySharedJoinMidStream(t *testing.T) {
	st := newTestBroker(t)
	for round := range 4 {
		tp := st.mustTopic(t, fmt.Sprintf("key-shared-stream-%d", round))
		rec := &recorder{}
		var cs []*Consumer
		join := func(name string) {
			o := durable("sub", SubKeyShared, name)
			s := newConsumerSink(name, rec)
			o.Sink = s
			c, _ := subscribe(t, tp, o)
			cs = append(cs, c)
			startAcker(t, c, s)
			c.Flow(10)
		}
		for _, nm := range []string{"A", "B", "C"} {
			join(nm)
		}
		p, _ := mustProducer(t, tp, "p")
		const keys = 20
		publishAll(t, p, keyed(0, 300, keys))
		join("D")
		rs := publishAll(t, p, keyed(300, 300, keys))
		cur := cs[0].Subscription().Cursor()
		last := rs[len(rs)-1].ID.Position
		waitFor(t, 10*time.Second, func() bool { return cur.MarkDeletePosition() == last },
			"round %d: every entry acknowledged (mark-delete %v, last %v)", round, cur.MarkDeletePosition(), last)
		events := rec.snapshot()
		checkKeyOrder(t, events)
		delivered := map[uint64]bool{}
		for _, e := range events {
			if !e.ack {
				delivered[e.seq] = true
			}
		}
		if len(delivered) != 600 {
			t.Fatalf("round %d: %d of 600 entries delivered", round, len(delivered))
		}
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
}

func TestKeySharedSticky(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "sticky")
	ranges := map[string][]HashRange{
		"A": {{0, 16383}, {32768, 49151}},
		"B": {{16384, 32767}, {49152, 65535}},
	}
	cs := map[string]*Consumer{}
	ss := map[string]*consumerSink{}
	for _, nm := range []string{"A", "B"} {
		o := durable("sub", SubKeyShared, nm)
		o.StickyRanges = ranges[nm]
		c, s := subscribe(t, tp, o)
		c.Flow(1000)
		cs[nm], ss[nm] = c, s
	}
	for _, bad := range []struct {
		name   string
		ranges []HashRange
	}{
		{"overlaps A", []HashRange{{16000, 16383}}},
		{"overlaps B", []HashRange{{65535, 65535}}},
		{"outside", []HashRange{{60000, 70000}}},
		{"negative", []HashRange{{-1, 5}}},
		{"reversed", []HashRange{{20, 10}}},
		{"auto split beside sticky", nil},
	} {
		o := durable("sub", SubKeyShared, bad.name)
		o.StickyRanges = bad.ranges
		o.Sink = newConsumerSink(bad.name, nil)
		if _, err := tp.Subscribe(ctx, o); !errors.Is(err, ErrConsumerBusy) {
			t.Errorf("consumer %s: %v, want ErrConsumerBusy", bad.name, err)
		}
	}
	inRanges := func(rs []HashRange, h int32) bool {
		for _, r := range rs {
			if r.Start <= h && h <= r.End {
				return true
			}
		}
		return false
	}
	p, _ := mustProducer(t, tp, "p")
	const n, keys = 200, 20
	publishAll(t, p, keyed(0, n, keys))
	want := map[string][]uint64{}
	for i := range n {
		k := fmt.Sprintf("key-%d", i%keys)
		for nm, rs := range ranges {
			if inRanges(rs, keyHashRef(k)) {
				want[nm] = append(want[nm], uint64(i))
			}
		}
	}
	if len(want["A"]) == 0 || len(want["B"]) == 0 {
		t.Fatalf("keys do not spread over both ranges: %d and %d entries", len(want["A"]), len(want["B"]))
	}
	for _, nm := range []string{"A", "B"} {
		ss[nm].waitCount(t, len(want[nm]))
	}
	time.Sleep(quiet) // bounded: shows no entry goes to the wrong consumer
	for _, nm := range []string{"A", "B"} {
		if got := seqsOf(t, ss[nm].deliveries()); !slices.Equal(got, want[nm]) {
			t.Fatalf("consumer %s (ranges %v) got %v\nwant %v", nm, ranges[nm], got, want[nm])
		}
	}

	// B leaves unacknowledged: its ranges have no consumer, so its keys
	// wait (A gets only its own) until a consumer takes them.
	ackAll(t, cs["A"], ss["A"].deliveries())
	if err := cs["B"].Close(ctx); err != nil {
		t.Fatal(err)
	}
	publishAll(t, p, keyed(n, 40, keys))
	var wantA, wantF []uint64
	for i := n; i < n+40; i++ {
		if inRanges(ranges["A"], keyHashRef(fmt.Sprintf("key-%d", i%keys))) {
			wantA = append(wantA, uint64(i))
		} else {
			wantF = append(wantF, uint64(i))
		}
	}
	ss["A"].waitCount(t, len(want["A"])+len(wantA))
	time.Sleep(quiet)
	if got := seqsOf(t, ss["A"].deliveries()[len(want["A"]):]); !slices.Equal(got, wantA) {
		t.Fatalf("A got %v after B left, want %v", got, wantA)
	}
	o := durable("sub", SubKeyShared, "F")
	o.StickyRanges = ranges["B"]
	f, sf := subscribe(t, tp, o)
	f.Flow(1000)
	wantF = append(slices.Clone(want["B"]), wantF...)
	sf.waitCount(t, len(wantF))
	if got := seqsOf(t, sf.deliveries()); !slices.Equal(got, wantF) {
		t.Fatalf("F (B's ranges) got %v\nwant %v", got, wantF)
	}
	for i, d := range sf.deliveries() {
		if i < len(want["B"]) && d.RedeliveryCount != 1 {
			t.Fatalf("B's unacknowledged entry %v delivered to F with redelivery count %d, want 1", d.Entry.Position, d.RedeliveryCount)
		}
	}
}

func TestSharedRedeliver(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "nack")
	x, sx := subscribe(t, tp, durable("sub", SubShared, "x"))
	x.Flow(10)
	p, _ := mustProducer(t, tp, "p")
	rs := publishAll(t, p, singles(0, 10, nil))
	sx.waitCount(t, 10)
	y, sy := subscribe(t, tp, durable("sub", SubShared, "y"))
	y.Flow(100)

	// x negatively acknowledges two entries: they come again (to y, the
	// one with permits), counted.
	x.Redeliver([]ledger.Position{rs[2].ID.Position, rs[5].ID.Position})
	ds := sy.waitCount(t, 2)
	if got := seqsOf(t, ds); !slices.Equal(got, []uint64{2, 5}) {
		t.Fatalf("redelivered %v, want [2 5]", got)
	}
	for _, d := range ds {
		if d.RedeliveryCount != 1 {
			t.Fatalf("redelivery count %d, want 1", d.RedeliveryCount)
		}
	}
	// Again, from y.
	y.Redeliver([]ledger.Position{rs[5].ID.Position})
	ds = sy.waitCount(t, 3)
	if seqOf(t, ds[2]) != 5 || ds[2].RedeliveryCount != 2 {
		t.Fatalf("second redelivery: sequence id %d, count %d; want 5, 2", seqOf(t, ds[2]), ds[2].RedeliveryCount)
	}
	// Positions the consumer does not hold are ignored.
	y.Redeliver([]ledger.Position{rs[7].ID.Position})
	// Redeliver(nil): all of x's.
	x.Redeliver(nil)
	ds = sy.waitCount(t, 3+8)
	var got []uint64
	for _, d := range ds[3:] {
		got = append(got, seqOf(t, d))
		if d.RedeliveryCount != 1 {
			t.Fatalf("redelivery count %d, want 1", d.RedeliveryCount)
		}
	}
	slices.Sort(got)
	if want := []uint64{0, 1, 3, 4, 6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("Redeliver(nil) gave %v, want %v", got, want)
	}
	time.Sleep(quiet) // bounded: shows nothing more comes
	if sx.count() != 10 || sy.count() != 11 {
		t.Fatalf("deliveries: x %d, y %d; want 10, 11", sx.count(), sy.count())
	}
	ackAll(t, y, sy.deliveries())
	if md := y.Subscription().Cursor().MarkDeletePosition(); md != rs[9].ID.Position {
		t.Fatalf("mark-delete %v, want %v", md, rs[9].ID.Position)
	}
}

func TestExclusiveRedeliverRewinds(t *testing.T) {
	for _, typ := range []SubType{SubExclusive, SubFailover} {
		t.Run(typ.String(), func(t *testing.T) {
			st := newTestBroker(t)
			tp := st.mustTopic(t, "rewind")
			p, _ := mustProducer(t, tp, "p")
			rs := publishAll(t, p, singles(0, 10, nil))
			c, s := subscribe(t, tp, durable("sub", typ, "c"))
			c.Flow(10)
			ds := s.waitCount(t, 10)
			if err := c.Ack(false, []Ack{{Position: ds[3].Entry.Position}}); err != nil {
				t.Fatal(err)
			}
			c.Redeliver(nil)
			c.Flow(100)
			want := []uint64{0, 1, 2, 4, 5, 6, 7, 8, 9}
			ds = s.waitCount(t, 10+len(want))
			time.Sleep(quiet) // bounded: shows nothing more comes
			ds = s.deliveries()
			if got := seqsOf(t, ds[10:]); !slices.Equal(got, want) {
				t.Fatalf("after Redeliver(nil): %v, want %v", got, want)
			}
			for _, d := range ds[10:] {
				if d.RedeliveryCount != 1 {
					t.Fatalf("redelivery count %d, want 1", d.RedeliveryCount)
				}
			}
			if err := c.Ack(true, []Ack{{Position: rs[9].ID.Position}}); err != nil {
				t.Fatal(err)
			}
			if md := c.Subscription().Cursor().MarkDeletePosition(); md != rs[9].ID.Position {
				t.Fatalf("mark-delete %v, want %v", md, rs[9].ID.Position)
			}
		})
	}
}

func TestBatchIndexAck(t *testing.T) {
	for _, typ := range []SubType{SubShared, SubExclusive} {
		t.Run(typ.String(), func(t *testing.T) {
			st := newTestBroker(t)
			tp := st.mustTopic(t, "batch-ack")
			p, _ := mustProducer(t, tp, "p")
			rs := publishAll(t, p, []msg{{seq: 0, batch: 10}, {seq: 10}})
			batch, single := rs[0].ID.Position, rs[1].ID.Position
			c, s := subscribe(t, tp, durable("sub", typ, "c"))
			c.Flow(100)
			s.waitCount(t, 2)
			cur := c.Subscription().Cursor()
			mdBefore := cur.MarkDeletePosition()

			redeliver := func() Delivery {
				t.Helper()
				n := s.count()
				if typ == SubShared {
					c.Redeliver([]ledger.Position{batch})
				} else {
					c.Redeliver(nil)
				}
				c.Flow(100)
				var d Delivery
				waitFor(t, 5*time.Second, func() bool {
					for _, x := range s.deliveries()[n:] {
						if x.Entry.Position == batch {
							d = x
							return true
						}
					}
					return false
				}, "redelivery of the batch")
				return d
			}
			// Messages 0..3 acknowledged: bits 4..9 left.
			if err := c.Ack(false, []Ack{{Position: batch, AckSet: []int64{0x3f0}}}); err != nil {
				t.Fatal(err)
			}
			if md := cur.MarkDeletePosition(); md != mdBefore {
				t.Fatalf("a partial batch ack moved mark-delete from %v to %v", mdBefore, md)
			}
			d := redeliver()
			if !slices.Equal(d.AckSet, []int64{0x3f0}) || d.RedeliveryCount != 1 {
				t.Fatalf("redelivered batch: ack set %#x, redelivery count %d; want [0x3f0], 1", d.AckSet, d.RedeliveryCount)
			}
			// Messages 4..6 too: bits 7..9 left.
			if err := c.Ack(false, []Ack{{Position: batch, AckSet: []int64{0x380}}}); err != nil {
				t.Fatal(err)
			}
			d = redeliver()
			if !slices.Equal(d.AckSet, []int64{0x380}) || d.RedeliveryCount != 2 {
				t.Fatalf("redelivered batch: ack set %#x, redelivery count %d; want [0x380], 2", d.AckSet, d.RedeliveryCount)
			}
			if md := cur.MarkDeletePosition(); md != mdBefore {
				t.Fatalf("partial batch acks moved mark-delete from %v to %v", mdBefore, md)
			}
			// The rest: the entry is acknowledged.
			if err := c.Ack(false, []Ack{{Position: batch, AckSet: []int64{0}}}); err != nil {
				t.Fatal(err)
			}
			if md := cur.MarkDeletePosition(); md != batch {
				t.Fatalf("mark-delete %v after the batch's last messages were acknowledged, want %v", md, batch)
			}
			if err := c.Ack(false, []Ack{{Position: single}}); err != nil {
				t.Fatal(err)
			}
			if md := cur.MarkDeletePosition(); md != single {
				t.Fatalf("mark-delete %v, want %v", md, single)
			}
		})
	}
}

func TestSeek(t *testing.T) {
	tests := []struct {
		name string
		// target returns the seek target from the positions of the 20
		// entries and the publish times of the two halves (t0, t1 = t0+1m).
		target func(rs []PublishResult, t0, t1 time.Time) (*MessageID, time.Time)
		want   []uint64 // sequence ids delivered after the seek
		latest bool     // nothing old: an entry published after comes
	}{
		{name: "position", want: seqRange(5, 20), target: func(rs []PublishResult, _, _ time.Time) (*MessageID, time.Time) {
			return &MessageID{Position: rs[5].ID.Position, BatchIndex: -1, Partition: -1}, time.Time{}
		}},
		{name: "earliest", want: seqRange(0, 20), target: func([]PublishResult, time.Time, time.Time) (*MessageID, time.Time) {
			id := earliestID
			return &id, time.Time{}
		}},
		{name: "latest", latest: true, target: func([]PublishResult, time.Time, time.Time) (*MessageID, time.Time) {
			id := latestID
			return &id, time.Time{}
		}},
		{name: "time of the second half", want: seqRange(10, 20), target: func(_ []PublishResult, _, t1 time.Time) (*MessageID, time.Time) {
			return nil, t1
		}},
		{name: "time between the halves", want: seqRange(10, 20), target: func(_ []PublishResult, t0, _ time.Time) (*MessageID, time.Time) {
			return nil, t0.Add(30 * time.Second)
		}},
		{name: "time before everything", want: seqRange(0, 20), target: func(_ []PublishResult, t0, _ time.Time) (*MessageID, time.Time) {
			return nil, t0.Add(-time.Hour)
		}},
		{name: "time after everything", latest: true, target: func(_ []PublishResult, _, t1 time.Time) (*MessageID, time.Time) {
			return nil, t1.Add(time.Minute)
		}},
	}
	st := newTestBroker(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			tp := st.mustTopic(t, fmt.Sprintf("seek-%d", i))
			p, _ := mustProducer(t, tp, "p")
			t0 := st.clock.Now()
			rs := publishAll(t, p, singles(0, 10, nil))
			st.clock.Advance(time.Minute)
			t1 := st.clock.Now()
			rs = append(rs, publishAll(t, p, singles(10, 10, nil))...)

			c1, s1 := subscribe(t, tp, durable("sub", SubShared, "c1"))
			c2, s2 := subscribe(t, tp, durable("sub", SubShared, "c2"))
			c1.Flow(100)
			c2.Flow(100)
			waitFor(t, 5*time.Second, func() bool { return s1.count()+s2.count() >= 20 }, "first deliveries")
			ackAll(t, c1, s1.deliveries()[:s1.count()/2])

			id, at := tt.target(rs, t0, t1)
			if err := c1.Seek(ctx, id, at); err != nil {
				t.Fatalf("Seek: %v", err)
			}
			for k, s := range []*consumerSink{s1, s2} {
				waitFor(t, 5*time.Second, func() bool { return s.closedCount() == 1 }, "consumer %d to be closed by the seek", k+1)
			}
			if err := c2.Ack(false, []Ack{{Position: rs[0].ID.Position}}); err == nil {
				t.Fatal("a consumer closed by the seek acknowledged")
			}
			n1, n2 := s1.count(), s2.count()

			c3, s3 := subscribe(t, tp, durable("sub", SubShared, "c3"))
			c3.Flow(100)
			if tt.latest {
				time.Sleep(quiet) // bounded: shows nothing old comes
				if s3.count() != 0 {
					t.Fatalf("after the seek: %v, want nothing", seqsOf(t, s3.deliveries()))
				}
				mustPublish(t, p, msg{seq: 20})
				s3.waitCount(t, 1)
				if got := seqsOf(t, s3.deliveries()); !slices.Equal(got, []uint64{20}) {
					t.Fatalf("after the seek: %v, want [20]", got)
				}
			} else {
				s3.waitCount(t, len(tt.want))
				time.Sleep(quiet)
				if got := seqsOf(t, s3.deliveries()); !slices.Equal(got, tt.want) {
					t.Fatalf("after the seek: %v, want %v", got, tt.want)
				}
			}
			for _, d := range s3.deliveries() {
				if d.RedeliveryCount != 0 {
					t.Fatalf("delivery after a seek with redelivery count %d", d.RedeliveryCount)
				}
			}
			if s1.count() != n1 || s2.count() != n2 {
				t.Fatal("consumers closed by the seek got more entries")
			}
		})
	}
}

func TestNonDurableStart(t *testing.T) {
	tests := []struct {
		name  string
		start func(rs []PublishResult) *MessageID
		incl  bool
		want  []uint64 // first entries' sequence ids delivered
	}{
		{name: "earliest", start: func([]PublishResult) *MessageID { id := earliestID; return &id }, want: []uint64{0, 1, 2}},
		{name: "latest", start: func([]PublishResult) *MessageID { id := latestID; return &id }, want: []uint64{100}},
		{name: "latest inclusive", incl: true, start: func([]PublishResult) *MessageID { id := latestID; return &id }, want: []uint64{13, 100}},
		// The entry itself first: the client drops what it did not ask for.
		{name: "entry id", start: func(rs []PublishResult) *MessageID {
			return &MessageID{Position: rs[3].ID.Position, BatchIndex: -1, Partition: -1}
		}, want: []uint64{3, 4, 5}},
		{name: "entry id inclusive", incl: true, start: func(rs []PublishResult) *MessageID {
			return &MessageID{Position: rs[3].ID.Position, BatchIndex: -1, Partition: -1}
		}, want: []uint64{3, 4, 5}},
		{name: "batch message id", start: func(rs []PublishResult) *MessageID {
			return &MessageID{Position: rs[5].ID.Position, BatchIndex: 2, Partition: -1}
		}, want: []uint64{5, 10, 11}},
		{name: "no id, earliest", start: func([]PublishResult) *MessageID { return nil }, want: []uint64{0, 1, 2}},
	}
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "readers")
	p, _ := mustProducer(t, tp, "p")
	// Entries 0..4 single (sequence ids 0..4), entry 5 a batch (5..9),
	// entries 6..9 single (10..13).
	ms := append(singles(0, 5, nil), msg{seq: 5, batch: 5})
	ms = append(ms, singles(10, 4, nil)...)
	rs := publishAll(t, p, ms)
	var readers []*Consumer
	var sinks []*consumerSink
	for i, tt := range tests {
		o := SubscribeOptions{Subscription: fmt.Sprintf("reader-%d", i), Type: SubExclusive, StartMessageID: tt.start(rs),
			StartInclusive: tt.incl, Initial: InitialEarliest}
		c, s := subscribe(t, tp, o)
		c.Flow(1000)
		readers, sinks = append(readers, c), append(sinks, s)
	}
	// Bounded: lets the readers at the end show they get nothing old.
	time.Sleep(quiet)
	mustPublish(t, p, msg{seq: 100})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := sinks[i].waitCount(t, len(tt.want))
			if got := seqsOf(t, ds[:len(tt.want)]); !slices.Equal(got, tt.want) {
				t.Fatalf("reader starting at %+v (inclusive %v) got first %v, want %v", tt.start(rs), tt.incl, got, tt.want)
			}
		})
	}
	if cs := tp.ManagedLedger().Cursors(); len(cs) != 0 {
		t.Fatalf("readers left durable cursors: %v", cs)
	}
	for _, r := range readers {
		if err := r.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNonDurableEndsWithLastConsumer(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "reader-life")
	p, _ := mustProducer(t, tp, "p")
	rs := publishAll(t, p, singles(0, 10, nil))
	o := SubscribeOptions{Subscription: "r", Type: SubExclusive, StartMessageID: &earliestID}
	c, s := subscribe(t, tp, o)
	c.Flow(3)
	s.waitCount(t, 3)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Same name: a new subscription, starting where it is told.
	o.StartMessageID = &MessageID{Position: rs[7].ID.Position, BatchIndex: -1, Partition: -1}
	o.StartInclusive = true
	c2, s2 := subscribe(t, tp, o)
	c2.Flow(100)
	s2.waitCount(t, 3)
	if got := seqsOf(t, s2.deliveries()); !slices.Equal(got, []uint64{7, 8, 9}) {
		t.Fatalf("new reader with the old one's name got %v, want [7 8 9]", got)
	}
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestUnsubscribe(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "unsubscribe")
	p, _ := mustProducer(t, tp, "p")
	publishAll(t, p, singles(0, 5, nil))
	c1, _ := subscribe(t, tp, durable("sub", SubShared, "c1"))
	c2, _ := subscribe(t, tp, durable("sub", SubShared, "c2"))
	subscribe(t, tp, durable("other", SubExclusive, "o"))
	names := func() []string {
		var out []string
		for _, c := range tp.ManagedLedger().Cursors() {
			out = append(out, c.Name())
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"other", "sub"}) {
		t.Fatalf("cursors %v", got)
	}
	if err := c1.Unsubscribe(ctx); !errors.Is(err, ErrSubscriptionBusy) {
		t.Fatalf("Unsubscribe with another consumer: %v, want ErrSubscriptionBusy", err)
	}
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c1.Unsubscribe(ctx); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	if got := names(); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("cursors after Unsubscribe: %v, want [other]", got)
	}
	// The name starts afresh (here at the latest entry).
	c3, s3 := subscribe(t, tp, SubscribeOptions{Subscription: "sub", Type: SubShared, Durable: true, Initial: InitialLatest})
	c3.Flow(10)
	mustPublish(t, p, msg{seq: 5})
	s3.waitCount(t, 1)
	if got := seqsOf(t, s3.deliveries()); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("new subscription got %v, want [5]", got)
	}
	if err := c1.Ack(false, []Ack{{Position: s3.deliveries()[0].Entry.Position}}); err == nil {
		t.Fatal("an unsubscribed consumer acknowledged")
	}
}

// Consumers join and leave while entries stream (acknowledged as they
// arrive): per-key order holds and every entry is acknowledged in the
// end. The scenario runs on several topics (timing decides where the
// membership changes land).
func TestKeySharedMembershipChurn(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	for round := range 3 {
		tp := st.mustTopic(t, fmt.Sprintf("key-shared-churn-%d", round))
		rec := &recorder{}
		type member struct {
			c *Consumer
			a *acker
		}
		var members []member
		join := func(name string) {
			o := durable("sub", SubKeyShared, name)
			s := newConsumerSink(name, rec)
			o.Sink = s
			c, _ := subscribe(t, tp, o)
			members = append(members, member{c, startAcker(t, c, s)})
			c.Flow(10)
		}
		leave := func() {
			m := members[0]
			members = members[1:]
			m.a.halt()
			rec.mu.Lock()
			err := m.c.Close(ctx)
			rec.events = append(rec.events, event{closed: true, consumer: m.c.Name()})
			rec.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, nm := range []string{"A", "B", "C"} {
			join(nm)
		}
		p, _ := mustProducer(t, tp, "p")
		const keys, chunk, changes = 20, 60, 8
		var rs []PublishResult
		for r := range changes {
			rs = append(rs, publishAll(t, p, keyed(r*chunk, chunk, keys))...)
			if r%2 == 0 {
				join(fmt.Sprintf("J%d", r))
			} else {
				leave()
			}
		}
		cur := members[0].c.Subscription().Cursor()
		last := rs[len(rs)-1].ID.Position
		waitFor(t, 10*time.Second, func() bool { return cur.MarkDeletePosition() == last },
			"round %d: every entry acknowledged (mark-delete %v, last %v)", round, cur.MarkDeletePosition(), last)
		checkKeyOrder(t, rec.snapshot())
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
}

// A cumulative acknowledgement can end inside a batch: the batch's
// remaining messages are delivered again.
func TestCumulativeAckInsideBatch(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "cumulative-batch")
	p, _ := mustProducer(t, tp, "p")
	rs := publishAll(t, p, []msg{{seq: 0}, {seq: 1, batch: 10}, {seq: 11}})
	c, s := subscribe(t, tp, durable("sub", SubExclusive, "c"))
	c.Flow(100)
	s.waitCount(t, 3)
	// Up to message 4 of the batch: bits 5..9 left.
	if err := c.Ack(true, []Ack{{Position: rs[1].ID.Position, AckSet: []int64{0x3e0}}}); err != nil {
		t.Fatal(err)
	}
	cur := c.Subscription().Cursor()
	if md := cur.MarkDeletePosition(); md != rs[0].ID.Position {
		t.Fatalf("mark-delete %v after a cumulative ack inside the batch at %v, want %v", md, rs[1].ID.Position, rs[0].ID.Position)
	}
	c.Redeliver(nil)
	ds := s.waitCount(t, 5)[3:]
	if got := positionsOf(ds); !slices.Equal(got, positionsOfResults(rs[1:])) {
		t.Fatalf("redelivered %v, want %v", got, positionsOfResults(rs[1:]))
	}
	if !slices.Equal(ds[0].AckSet, []int64{0x3e0}) || ds[1].AckSet != nil {
		t.Fatalf("redelivered ack sets %#x and %#x, want [0x3e0] and nil", ds[0].AckSet, ds[1].AckSet)
	}
	if err := c.Ack(true, []Ack{{Position: rs[2].ID.Position}}); err != nil {
		t.Fatal(err)
	}
	if md := cur.MarkDeletePosition(); md != rs[2].ID.Position {
		t.Fatalf("mark-delete %v, want %v", md, rs[2].ID.Position)
	}
}

// A durable subscription keeps its position across a reload of the topic.
func TestSubscriptionSurvivesReload(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	tp := st.mustTopic(t, "reload")
	p, _ := mustProducer(t, tp, "p")
	publishAll(t, p, singles(0, 10, nil))
	c, s := subscribe(t, tp, durable("sub", SubShared, "c"))
	c.Flow(100)
	ds := s.waitCount(t, 10)
	ackAll(t, c, ds[:5])
	ackAll(t, c, ds[7:8])
	if err := tp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s.closedCount() != 1 {
		t.Fatalf("consumer closed %d times by Topic.Close, want 1", s.closedCount())
	}
	tp2 := st.mustTopic(t, "reload")
	c2, s2 := subscribe(t, tp2, durable("sub", SubShared, "c"))
	c2.Flow(100)
	s2.waitCount(t, 4)
	time.Sleep(quiet) // bounded: shows nothing acknowledged comes again
	if got := seqsOf(t, s2.deliveries()); !slices.Equal(got, []uint64{5, 6, 8, 9}) {
		t.Fatalf("after the reload: %v, want [5 6 8 9]", got)
	}
}

// Failover on a partition: among the consumers of the best priority, the
// partition index picks the active one (consumers spread over partitions).
func TestFailoverPartitionSpread(t *testing.T) {
	st := newTestBroker(t)
	ctx := testCtx(t)
	if err := st.b.CreatePartitionedTopic(ctx, mustParse(t, "fo-parted"), 3); err != nil {
		t.Fatal(err)
	}
	for part, want := range []string{"a", "b", "a"} {
		tp := st.mustTopic(t, fmt.Sprintf("fo-parted-partition-%d", part))
		ss := map[string]*consumerSink{}
		for _, nm := range []string{"b", "a"} {
			_, s := subscribe(t, tp, durable("sub", SubFailover, nm))
			ss[nm] = s
		}
		for nm, s := range ss {
			waitFor(t, 5*time.Second, func() bool { a, ok := s.lastActive(); return ok && a == (nm == want) },
				"partition %d: consumer %s told active=%v", part, nm, nm == want)
		}
	}
}
