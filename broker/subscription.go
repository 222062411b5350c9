package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// SubType is a subscription type (Pulsar's numbering).
type SubType int32

const (
	SubExclusive SubType = 0
	SubShared    SubType = 1
	SubFailover  SubType = 2
	SubKeyShared SubType = 3
)

func (s SubType) String() string {
	switch s {
	case SubExclusive:
		return "Exclusive"
	case SubShared:
		return "Shared"
	case SubFailover:
		return "Failover"
	case SubKeyShared:
		return "Key_Shared"
	}
	return fmt.Sprintf("SubType(%d)", int32(s))
}

// singleActive says whether one consumer at a time receives everything.
func (s SubType) singleActive() bool { return s == SubExclusive || s == SubFailover }

// InitialPosition is where a new durable subscription starts (Pulsar's
// numbering).
type InitialPosition int32

const (
	InitialLatest   InitialPosition = 0
	InitialEarliest InitialPosition = 1
)

// HashRange is an inclusive range of Key_Shared key hashes (0..65535).
type HashRange struct{ Start, End int32 }

// SubscribeOptions describe a consumer joining a subscription.
type SubscribeOptions struct {
	Subscription string
	Type         SubType
	ConsumerName string
	Priority     int32 // Failover: lower is preferred
	Initial      InitialPosition
	// Durable: the subscription's position is stored and survives the
	// consumer. A non-durable subscription (a reader) lives while it has
	// consumers and starts at StartMessageID.
	Durable        bool
	StartMessageID *MessageID
	StartInclusive bool
	// StickyRanges: Key_Shared in sticky mode, the hash ranges this
	// consumer takes; nil for auto split.
	StickyRanges []HashRange
	Sink         ConsumerSink
}

// ConsumerSink is how the broker reaches a consumer's connection. Its
// methods are called from the subscription's dispatcher and must not block
// (queue and return).
type ConsumerSink interface {
	// Send delivers messages.
	Send(ds []Delivery)
	// ActiveChanged tells a Failover or Exclusive consumer whether it is
	// the one receiving messages.
	ActiveChanged(active bool)
	// Closed tells the client that the broker closed the consumer (seek,
	// unload); it should reconnect.
	Closed()
}

// Delivery is one entry for a consumer.
type Delivery struct {
	Entry           ledger.Entry
	RedeliveryCount uint32
	// AckSet: for a batch some of whose messages are acknowledged, the
	// bits of the messages still unacknowledged (bit i of word i/64); nil
	// means all.
	AckSet []int64
}

// Ack acknowledges one entry, or some messages of a batch entry.
type Ack struct {
	Position ledger.Position
	// AckSet, if not nil: the batch's messages still unacknowledged after
	// this acknowledgement (cleared bits are acknowledged), as clients
	// send them; the entry is acknowledged once none is left.
	AckSet []int64
}

// maxReadEntries bounds one read of the dispatcher.
const maxReadEntries = 100

// maxHeld bounds the entries a Key_Shared dispatcher holds for consumers
// without permits before it stops reading.
const maxHeld = 1000

// Subscription is a named cursor with its consumers and dispatcher.
//
// The dispatcher (run) is one goroutine: it reads entries — first those
// to deliver again (replay), then new ones from the cursor — and hands
// them to consumers by the subscription type. Everything it decides is
// under mu; reads happen without it. Consumers joining or leaving during
// a read change only where the entries go. A rewind or a seek during a
// read bumps gen: the cursor reads again from where it was put, so what
// was read under the old gen is dropped.
type Subscription struct {
	topic   *Topic
	name    string
	durable bool
	cursor  *ledger.Cursor
	log     *slog.Logger

	mu        sync.Mutex
	typ       SubType
	consumers []*Consumer // in joining order
	active    *Consumer   // single-active types
	gen       uint64
	replay    []ledger.Position // sorted, to deliver again
	inReplay  map[ledger.Position]bool
	redeliver map[ledger.Position]uint32  // redelivery counts
	batchAcks map[ledger.Position][]int64 // unacknowledged bits of partly acknowledged batches
	owner     map[ledger.Position]*Consumer
	held      map[*Consumer][]heldEntry // Key_Shared: in position order, waiting
	nheld     int
	ring      *hashRing // Key_Shared
	// Key_Shared: the hash of every entry delivered and not acknowledged,
	// and per hash the consumer holding such entries and how many.
	// Invariant: an entry is given to a consumer only if no other
	// consumer holds unacknowledged entries of its hash (draining
	// hashes), so a key that moves to another consumer cannot overtake
	// its own earlier messages.
	hashOf   map[ledger.Position]uint32
	draining map[uint32]hashOwner
	reroutes uint64 // bumped when held entries go back to replay
	rr       int    // Shared: round-robin index
	closed   bool
	out      flowCounter // dispatched (topicadmin.go)

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Consumer is a consumer attached to a subscription.
type heldEntry struct {
	d Delivery
	h uint32
}

type hashOwner struct {
	c *Consumer
	n int
}

type Consumer struct {
	sub      *Subscription
	id       uint64
	name     string
	priority int32
	sink     ConsumerSink

	// guarded by sub.mu
	permits int64
	pending map[ledger.Position]int32 // delivered, unacknowledged: messages per entry
	unacked int64
	ranges  []HashRange
	closed  bool
	out     flowCounter // dispatched (topicadmin.go)
}

// Subscribe attaches a consumer to a subscription of the topic, creating
// the subscription if needed.
func (t *Topic) Subscribe(ctx context.Context, o SubscribeOptions) (*Consumer, error) {
	if o.Sink == nil {
		return nil, fmt.Errorf("%w: consumer without a sink", ErrInvalidRequest)
	}
	if o.Subscription == "" || isInternalCursor(o.Subscription) {
		return nil, fmt.Errorf("%w: subscription name %q", ErrInvalidRequest, o.Subscription)
	}
	if o.Type < SubExclusive || o.Type > SubKeyShared {
		return nil, fmt.Errorf("%w: subscription type %d", ErrInvalidRequest, o.Type)
	}
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrTopicClosed, t.name)
		}
		s := t.subs[o.Subscription]
		t.mu.Unlock()
		if s == nil {
			var err error
			if s, err = t.openSubscription(ctx, o); err != nil {
				return nil, err
			}
		}
		c, err := s.addConsumer(o)
		if errors.Is(err, errSubscriptionGone) {
			continue // closed meanwhile (last consumer of a reader left): open again
		}
		return c, err
	}
}

var errSubscriptionGone = errors.New("subscription closed")

func (t *Topic) openSubscription(ctx context.Context, o SubscribeOptions) (*Subscription, error) {
	var cur *ledger.Cursor
	if o.Durable {
		start := ledger.StartLatest
		if o.Initial == InitialEarliest {
			start = ledger.StartEarliest
		}
		var err error
		if cur, err = t.ml.OpenCursor(ctx, o.Subscription, start); err != nil {
			return nil, fmt.Errorf("broker: subscription %s on %s: %w", o.Subscription, t.name, err)
		}
	} else {
		cur = t.ml.NewNonDurableCursor(t.startOf(o))
	}
	t.mu.Lock()
	if s := t.subs[o.Subscription]; s != nil || t.closed {
		t.mu.Unlock()
		if o.Durable {
			cur.Close(ctx)
		}
		if s == nil {
			return nil, fmt.Errorf("%w: %s", ErrTopicClosed, t.name)
		}
		return s, nil
	}
	s := newSubscription(t, o, cur)
	t.subs[o.Subscription] = s
	t.mu.Unlock()
	go s.run()
	return s, nil
}

// startOf is where a non-durable subscription starts.
func (t *Topic) startOf(o SubscribeOptions) ledger.Start {
	id := o.StartMessageID
	switch {
	case id == nil:
		if o.Initial == InitialEarliest {
			return ledger.StartEarliest
		}
		return ledger.StartLatest
	case id.IsEarliest():
		return ledger.StartEarliest
	case id.IsLatest():
		if o.StartInclusive {
			if last := t.ml.LastConfirmed(); last.Entry >= 0 {
				return ledger.StartAt(last)
			}
		}
		return ledger.StartLatest
	}
	// Start at the entry itself, inclusive or not, batch or not: the
	// client drops what is at or before its start message (Pulsar's
	// brokers start there too).
	return ledger.StartAt(id.Position)
}

func newSubscription(t *Topic, o SubscribeOptions, cur *ledger.Cursor) *Subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscription{topic: t, name: o.Subscription, durable: o.Durable, cursor: cur, typ: o.Type,
		log:      t.log.With("subscription", o.Subscription),
		inReplay: map[ledger.Position]bool{}, redeliver: map[ledger.Position]uint32{},
		batchAcks: map[ledger.Position][]int64{}, owner: map[ledger.Position]*Consumer{},
		held: map[*Consumer][]heldEntry{}, kick: make(chan struct{}, 1),
		hashOf: map[ledger.Position]uint32{}, draining: map[uint32]hashOwner{},
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	return s
}

// Name is the subscription's name.
func (s *Subscription) Name() string { return s.name }

// Cursor is the subscription's cursor.
func (s *Subscription) Cursor() *ledger.Cursor { return s.cursor }

func (s *Subscription) addConsumer(o SubscribeOptions) (*Consumer, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errSubscriptionGone
	}
	if len(s.consumers) > 0 && s.typ != o.Type {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: subscription %s is %v, not %v", ErrSubscriptionType, s.name, s.typ, o.Type)
	}
	if len(s.consumers) > 0 && o.Type == SubExclusive {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: exclusive subscription %s on %s already has a consumer", ErrConsumerBusy, s.name, s.topic.name)
	}
	if len(s.consumers) == 0 {
		s.typ = o.Type
	}
	c := &Consumer{sub: s, id: s.topic.b.consumerSeq.Add(1), name: o.ConsumerName, priority: o.Priority,
		sink: o.Sink, pending: map[ledger.Position]int32{}, ranges: o.StickyRanges}
	if c.name == "" {
		c.name = fmt.Sprintf("consumer-%d", c.id)
	}
	if s.typ == SubKeyShared {
		ring := s.ringWith(append(slices.Clone(s.consumers), c))
		if err := ring.err; err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %v", ErrConsumerBusy, err)
		}
		s.ring = ring
		s.rerouteHeldLocked()
	}
	s.consumers = append(s.consumers, c)
	var notify []func()
	if s.typ.singleActive() {
		notify = s.pickActiveLocked()
	}
	s.mu.Unlock()
	for _, f := range notify {
		f()
	}
	s.wake()
	s.log.Debug("consumer added", "consumer", c.name, "type", s.typ)
	return c, nil
}

// pickActiveLocked chooses the active consumer of a single-active
// subscription: the one with the best (lowest) priority, then by name;
// on a partition of a partitioned topic, the partition index picks among
// those, so that partitions spread over consumers. A change rewinds the
// cursor, so the new active consumer gets what the old one left
// unacknowledged. It returns the notifications to send (without mu).
func (s *Subscription) pickActiveLocked() []func() {
	var next *Consumer
	if len(s.consumers) > 0 {
		best := slices.Clone(s.consumers)
		sort.SliceStable(best, func(i, j int) bool {
			if best[i].priority != best[j].priority {
				return best[i].priority < best[j].priority
			}
			return best[i].name < best[j].name
		})
		n := 1
		for n < len(best) && best[n].priority == best[0].priority {
			n++
		}
		i := 0
		if p := s.topic.name.Partition; p > 0 && s.typ == SubFailover {
			i = p % n
		}
		next = best[i]
	}
	if next == s.active {
		if next == nil {
			return nil
		}
		// Tell the newcomers who is active.
		var out []func()
		for _, c := range s.consumers {
			c := c
			out = append(out, func() { c.sink.ActiveChanged(c == next) })
		}
		return out
	}
	prev := s.active
	s.active = next
	if prev != nil {
		s.rewindLocked()
	}
	var out []func()
	for _, c := range s.consumers {
		c := c
		out = append(out, func() { c.sink.ActiveChanged(c == next) })
	}
	return out
}

// rewindLocked makes everything unacknowledged be read again: what was
// delivered and not acknowledged counts as redelivered.
func (s *Subscription) rewindLocked() {
	for _, c := range s.consumers {
		for p := range c.pending {
			s.redeliver[p]++
			s.undeliverLocked(p)
		}
	}
	// Entries put back for later (single-active consumers out of
	// permits) are read again by the cursor now.
	s.replay, s.inReplay = nil, map[ledger.Position]bool{}
	s.cursor.Rewind()
	s.gen++
}

// deliverLocked records that d goes to c: permits, what c holds
// unacknowledged and, on Key_Shared, the entry's hash (h).
func (s *Subscription) deliverLocked(c *Consumer, d Delivery, h uint32) {
	p := d.Entry.Position
	n := d.Entry.Header.Messages
	if d.AckSet != nil {
		n = int32(popcount(d.AckSet))
	}
	c.permits -= int64(n)
	c.pending[p] = n
	c.unacked += int64(n)
	s.owner[p] = c
	if s.typ == SubKeyShared {
		s.hashOf[p] = h
		o := s.draining[h]
		s.draining[h] = hashOwner{c, o.n + 1}
	}
}

// undeliverLocked forgets that the entry at p is out with a consumer
// (acknowledged, or to be delivered again).
func (s *Subscription) undeliverLocked(p ledger.Position) {
	c := s.owner[p]
	if c == nil {
		return
	}
	c.unacked -= int64(c.pending[p])
	delete(c.pending, p)
	delete(s.owner, p)
	if h, ok := s.hashOf[p]; ok {
		delete(s.hashOf, p)
		if o := s.draining[h]; o.n <= 1 {
			delete(s.draining, h)
		} else {
			s.draining[h] = hashOwner{o.c, o.n - 1}
		}
	}
}

// Flow gives the consumer permits for n more messages.
func (c *Consumer) Flow(n uint32) {
	s := c.sub
	s.mu.Lock()
	c.permits += int64(n)
	s.mu.Unlock()
	s.wake()
}

// ID is the broker-wide consumer id.
func (c *Consumer) ID() uint64 { return c.id }

// Name is the consumer's name.
func (c *Consumer) Name() string { return c.name }

// Subscription is the consumer's subscription.
func (c *Consumer) Subscription() *Subscription { return c.sub }

// Topic is the consumer's topic.
func (c *Consumer) Topic() *Topic { return c.sub.topic }

// Ack acknowledges entries: each individually, or, if cumulative (not for
// Shared and Key_Shared), everything up to the one given.
func (c *Consumer) Ack(cumulative bool, acks []Ack) error {
	s := c.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%w: consumer %s closed", ErrInvalidRequest, c.name)
	}
	if cumulative {
		if !s.typ.singleActive() {
			return fmt.Errorf("%w: cumulative acknowledgement on a %v subscription", ErrInvalidRequest, s.typ)
		}
		if len(acks) != 1 {
			return fmt.Errorf("%w: cumulative acknowledgement of %d positions", ErrInvalidRequest, len(acks))
		}
		return s.ackCumulativeLocked(acks[0])
	}
	var full []ledger.Position
	for _, a := range acks {
		if a.AckSet != nil {
			left := s.batchAcks[a.Position]
			if left == nil {
				left = slices.Clone(a.AckSet)
			} else {
				for i := range left {
					if i < len(a.AckSet) {
						left[i] &= a.AckSet[i]
					}
				}
			}
			if !allZero(left) {
				s.batchAcks[a.Position] = left
				continue
			}
		}
		full = append(full, a.Position)
	}
	if len(full) == 0 {
		return nil
	}
	if err := s.cursor.Delete(full...); err != nil {
		if !errors.Is(err, ledger.ErrOffsetOutOfRange) {
			return err
		}
		// Some position is not an entry: acknowledge the others.
		var bad []ledger.Position
		for _, p := range full {
			if s.cursor.Delete(p) != nil {
				bad = append(bad, p)
			}
		}
		defer s.log.Warn("acknowledgement of positions that are not entries ignored", "positions", bad)
	}
	for _, p := range full {
		s.forgetLocked(p)
	}
	s.wakeLater()
	return nil
}

func (s *Subscription) ackCumulativeLocked(a Ack) error {
	to := a.Position
	if a.AckSet != nil && !allZero(a.AckSet) {
		s.batchAcks[to] = slices.Clone(a.AckSet)
		to = ledger.Position{Ledger: to.Ledger, Entry: to.Entry - 1}
	}
	if err := s.cursor.MarkDelete(to, nil); err != nil {
		return err
	}
	for _, c := range s.consumers {
		for p := range c.pending {
			if p.Compare(to) <= 0 {
				s.forgetLocked(p)
			}
		}
	}
	for p := range s.redeliver {
		if p.Compare(to) <= 0 {
			delete(s.redeliver, p)
		}
	}
	for p := range s.batchAcks {
		if p.Compare(to) <= 0 {
			delete(s.batchAcks, p)
		}
	}
	s.wakeLater()
	return nil
}

// forgetLocked drops what the subscription kept about an acknowledged
// entry.
func (s *Subscription) forgetLocked(p ledger.Position) {
	s.undeliverLocked(p)
	delete(s.redeliver, p)
	delete(s.batchAcks, p)
	if s.inReplay[p] {
		delete(s.inReplay, p)
		if i, ok := slices.BinarySearchFunc(s.replay, p, ledger.Position.Compare); ok {
			s.replay = slices.Delete(s.replay, i, i+1)
		}
	}
}

func allZero(ws []int64) bool {
	for _, w := range ws {
		if w != 0 {
			return false
		}
	}
	return true
}

// Redeliver delivers again the given unacknowledged entries of this
// consumer (all of them if none is given). Single-active subscriptions
// always rewind: everything unacknowledged is delivered again, in order.
func (c *Consumer) Redeliver(ps []ledger.Position) {
	s := c.sub
	s.mu.Lock()
	if c.closed {
		s.mu.Unlock()
		return
	}
	if s.typ.singleActive() {
		if c == s.active {
			s.rewindLocked()
		}
		s.mu.Unlock()
		s.wake()
		return
	}
	if ps == nil {
		for p := range c.pending {
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		if _, ok := c.pending[p]; !ok {
			continue
		}
		s.undeliverLocked(p)
		s.redeliver[p]++
		s.addReplayLocked(p)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) addReplayLocked(p ledger.Position) {
	if s.inReplay[p] {
		return
	}
	s.inReplay[p] = true
	i, _ := slices.BinarySearchFunc(s.replay, p, ledger.Position.Compare)
	s.replay = slices.Insert(s.replay, i, p)
}

// Close detaches the consumer (the client closed it, or its connection
// went). What it left unacknowledged goes to the other consumers. The
// last consumer of a non-durable subscription ends it.
func (c *Consumer) Close(ctx context.Context) error {
	s := c.sub
	s.mu.Lock()
	if c.closed {
		s.mu.Unlock()
		return nil
	}
	notify := s.removeConsumerLocked(c)
	last := len(s.consumers) == 0 && !s.durable
	s.mu.Unlock()
	for _, f := range notify {
		f()
	}
	s.wake()
	if last {
		return s.topic.removeSubscription(ctx, s, false)
	}
	return nil
}

func (s *Subscription) removeConsumerLocked(c *Consumer) []func() {
	c.closed = true
	s.consumers = slices.DeleteFunc(s.consumers, func(x *Consumer) bool { return x == c })
	if s.typ.singleActive() {
		// What c was given and did not acknowledge is delivered again
		// (the rewind below reads it again for the next active consumer).
		for p := range c.pending {
			s.redeliver[p]++
			s.undeliverLocked(p)
		}
		if c == s.active {
			s.active = nil
			s.rewindLocked()
		}
		return s.pickActiveLocked()
	}
	for p := range c.pending {
		s.undeliverLocked(p)
		s.redeliver[p]++
		s.addReplayLocked(p)
	}
	if s.typ == SubKeyShared {
		s.ring = s.ringWith(s.consumers)
		s.rerouteHeldLocked()
	}
	return nil
}

// rerouteHeldLocked puts every held entry back to replay: the key ranges
// changed, so where each goes is decided again.
func (s *Subscription) rerouteHeldLocked() {
	for c, hs := range s.held {
		for _, x := range hs {
			s.addReplayLocked(x.d.Entry.Position)
		}
		delete(s.held, c)
	}
	s.nheld = 0
	s.reroutes++
}

// Unsubscribe deletes the subscription, if this consumer is its only one.
func (c *Consumer) Unsubscribe(ctx context.Context) error {
	s := c.sub
	s.mu.Lock()
	if len(s.consumers) > 1 || (len(s.consumers) == 1 && s.consumers[0] != c) {
		s.mu.Unlock()
		return fmt.Errorf("%w: subscription %s has other consumers", ErrSubscriptionBusy, s.name)
	}
	s.removeConsumerLocked(c)
	s.mu.Unlock()
	return s.topic.removeSubscription(ctx, s, true)
}

// Seek moves the subscription: to the entry of id (earliest and latest
// markers accepted) or, if id is nil, to the first entry published at or
// after t. Every consumer is disconnected (their clients reconnect), as
// Pulsar does.
func (c *Consumer) Seek(ctx context.Context, id *MessageID, t time.Time) error {
	return c.sub.Seek(ctx, id, t)
}

// Seek moves the subscription as Consumer.Seek does, for the admin API
// (reset cursor) as well as for consumers.
func (s *Subscription) Seek(ctx context.Context, id *MessageID, t time.Time) error {
	s.mu.Lock()
	consumers := slices.Clone(s.consumers)
	for _, x := range consumers {
		s.removeConsumerLocked(x)
	}
	s.replay, s.inReplay = nil, map[ledger.Position]bool{}
	clear(s.redeliver)
	clear(s.batchAcks)
	clear(s.owner)
	clear(s.held)
	clear(s.hashOf)
	clear(s.draining)
	s.nheld = 0
	s.gen++
	s.mu.Unlock()
	var err error
	switch {
	case id == nil:
		err = s.cursor.ResetToTime(ctx, t)
	case id.IsEarliest():
		err = s.cursor.ResetTo(ctx, s.topic.ml.FirstPosition())
	case id.IsLatest():
		err = s.cursor.ResetTo(ctx, s.topic.ml.Next(s.topic.ml.LastConfirmed()))
	default:
		err = s.cursor.ResetTo(ctx, id.Position)
	}
	for _, x := range consumers {
		x.sink.Closed()
	}
	s.wake()
	return err
}

// removeSubscription closes s and drops it from the topic; with del, the
// durable cursor is deleted too.
func (t *Topic) removeSubscription(ctx context.Context, s *Subscription, del bool) error {
	t.mu.Lock()
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
	}
	t.mu.Unlock()
	if err := s.close(ctx, false); err != nil {
		return err
	}
	if del && s.durable {
		return t.ml.DeleteCursor(ctx, s.name)
	}
	return nil
}

// close stops the dispatcher and closes the cursor; with disconnect, the
// consumers are told (topic unload).
func (s *Subscription) close(ctx context.Context, disconnect bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	consumers := slices.Clone(s.consumers)
	for _, c := range consumers {
		c.closed = true
	}
	s.consumers = nil
	s.mu.Unlock()
	s.cancel()
	<-s.done
	if disconnect {
		for _, c := range consumers {
			c.sink.Closed()
		}
	}
	return s.cursor.Close(ctx)
}

// wake makes the dispatcher look again (permits, consumers or replays
// changed).
func (s *Subscription) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// wakeLater is wake for callers holding mu (it never blocks either).
func (s *Subscription) wakeLater() { s.wake() }

// available says whether c may be given more now.
func (s *Subscription) availableLocked(c *Consumer) bool {
	if c.permits <= 0 {
		return false
	}
	limit := s.topic.b.cfg.MaxUnackedPerConsumer
	return s.typ.singleActive() || limit < 0 || c.unacked < int64(limit)
}

// readableLocked is how many entries the dispatcher may read now.
func (s *Subscription) readableLocked() int {
	var n int64
	if s.typ.singleActive() {
		if s.active != nil && s.availableLocked(s.active) {
			n = s.active.permits
		}
	} else {
		for _, c := range s.consumers {
			if s.availableLocked(c) {
				n += c.permits
			}
		}
		if s.typ == SubKeyShared && s.nheld >= maxHeld {
			n = 0
		}
	}
	return int(min(n, maxReadEntries))
}

type send struct {
	c  *Consumer
	ds []Delivery
}

// run is the dispatcher.
func (s *Subscription) run() {
	defer close(s.done)
	backoff := time.Duration(0)
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		sends := s.releaseHeldLocked()
		n := s.readableLocked()
		var replay []ledger.Position
		if n > 0 && len(s.replay) > 0 {
			k := min(n, len(s.replay))
			replay = slices.Clone(s.replay[:k])
			s.replay = s.replay[k:]
			for _, p := range replay {
				delete(s.inReplay, p)
			}
		}
		gen, reroutes := s.gen, s.reroutes
		s.mu.Unlock()
		s.flush(sends)
		if n == 0 {
			if !s.idle() {
				return
			}
			continue
		}
		var es []ledger.Entry
		var err error
		if replay != nil {
			es, err = s.readPositions(replay)
		} else {
			es, err = s.cursor.ReadEntries(s.ctx, n)
			if err == nil && len(es) == 0 {
				if !s.waitEntries() {
					return
				}
				continue
			}
		}
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, ledger.ErrCursorClosed) || errors.Is(err, ledger.ErrClosed) {
				return
			}
			s.mu.Lock()
			for _, p := range replay {
				s.addReplayLocked(p)
			}
			s.mu.Unlock()
			backoff = min(max(2*backoff, 10*time.Millisecond), time.Second)
			s.log.Warn("dispatcher read failed; retrying", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.gen != gen {
			// A rewind or seek during the read: the cursor reads again
			// from where it was put, so what was read is dropped.
			s.mu.Unlock()
			continue
		}
		if s.reroutes != reroutes {
			// Key_Shared consumers changed during the read and the held
			// entries went back to replay: what was read goes there too,
			// so that all of it is routed again in position order.
			for _, e := range es {
				if _, delivered := s.owner[e.Position]; !delivered {
					s.addReplayLocked(e.Position)
				}
			}
			s.mu.Unlock()
			continue
		}
		sends = s.assignLocked(es)
		s.mu.Unlock()
		s.flush(sends)
	}
}

// idle waits for a kick; false if the subscription closed.
func (s *Subscription) idle() bool {
	select {
	case <-s.kick:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// waitEntries waits for new entries or a kick; false if closed.
//
// The goroutine watching for a kick is gone before it returns: otherwise
// it could take a kick meant for the dispatcher's next wait (a consumer's
// FLOW right after a seek) once the wait had ended for new entries, and
// the dispatcher would sleep with permits to fill. A kick it took is acted
// on: the dispatcher looks again after any return.
func (s *Subscription) waitEntries() bool {
	wctx, cancel := context.WithCancel(s.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-s.kick:
			cancel()
		case <-wctx.Done():
		}
	}()
	err := s.cursor.WaitNewEntries(wctx)
	interrupted := wctx.Err() != nil // a kick, or the subscription closing
	cancel()
	<-watched
	if s.ctx.Err() != nil {
		return false
	}
	if err != nil && !interrupted {
		if errors.Is(err, ledger.ErrCursorClosed) || errors.Is(err, ledger.ErrClosed) {
			return false
		}
		// Terminated or fenced: nothing more will come; wait for a change.
		s.log.Debug("no more entries", "err", err)
		return s.idle()
	}
	return true
}

// readPositions reads the given entries (sorted), skipping those that
// are acknowledged or trimmed meanwhile.
func (s *Subscription) readPositions(ps []ledger.Position) ([]ledger.Entry, error) {
	var out []ledger.Entry
	ml := s.topic.ml
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].Ledger == ps[i].Ledger && ps[j].Entry == ps[j-1].Entry+1 {
			j++
		}
		es, err := ml.Read(s.ctx, ps[i], j-i)
		if errors.Is(err, ledger.ErrOffsetOutOfRange) {
			i = j // trimmed: nothing to deliver
			continue
		}
		if err != nil {
			return out, err
		}
		for _, e := range es {
			if e.Position.Ledger == ps[i].Ledger && e.Position.Entry <= ps[j-1].Entry && !s.cursor.IsAcked(e.Position) {
				out = append(out, e)
			}
		}
		i = j
	}
	return out, nil
}

// assignLocked hands entries to consumers by the subscription type.
func (s *Subscription) assignLocked(es []ledger.Entry) []send {
	byConsumer := map[*Consumer][]Delivery{}
	var order []*Consumer
	give := func(c *Consumer, d Delivery, h uint32) {
		if _, ok := byConsumer[c]; !ok {
			order = append(order, c)
		}
		byConsumer[c] = append(byConsumer[c], d)
		s.deliverLocked(c, d, h)
	}
	for _, e := range es {
		if _, delivered := s.owner[e.Position]; delivered {
			continue
		}
		d := Delivery{Entry: e, RedeliveryCount: s.redeliver[e.Position], AckSet: s.batchAcks[e.Position]}
		switch s.typ {
		case SubExclusive, SubFailover:
			if s.active == nil {
				s.rewindLocked()
				return collect(byConsumer, order)
			}
			if !s.availableLocked(s.active) {
				// Out of permits: read again once it has some (replays
				// come before the cursor's position, so order holds).
				s.addReplayLocked(e.Position)
				continue
			}
			give(s.active, d, 0)
		case SubShared:
			c := s.nextSharedLocked()
			if c == nil {
				s.addReplayLocked(e.Position)
				continue
			}
			give(c, d, 0)
		case SubKeyShared:
			h := keyHash(e)
			c := s.ring.pick(h)
			if c == nil || len(s.held[c]) > 0 || !s.keyReadyLocked(c, h) {
				s.holdLocked(c, heldEntry{d, h})
				continue
			}
			give(c, d, h)
		}
	}
	return collect(byConsumer, order)
}

// keyReadyLocked says whether c may be given an entry of hash h now: it
// has permits, and no other consumer still holds unacknowledged entries
// of h.
func (s *Subscription) keyReadyLocked(c *Consumer, h uint32) bool {
	if !s.availableLocked(c) {
		return false
	}
	o, ok := s.draining[h]
	return !ok || o.c == c
}

// holdLocked keeps x for c (nil: no consumer takes its hash), in position
// order.
func (s *Subscription) holdLocked(c *Consumer, x heldEntry) {
	hs := s.held[c]
	i, _ := slices.BinarySearchFunc(hs, x.d.Entry.Position, func(y heldEntry, p ledger.Position) int { return y.d.Entry.Position.Compare(p) })
	s.held[c] = slices.Insert(hs, i, x)
	s.nheld++
}

func collect(m map[*Consumer][]Delivery, order []*Consumer) []send {
	out := make([]send, 0, len(order))
	for _, c := range order {
		out = append(out, send{c, m[c]})
	}
	return out
}

// nextSharedLocked picks the next consumer with permits, round robin.
func (s *Subscription) nextSharedLocked() *Consumer {
	for range s.consumers {
		s.rr = (s.rr + 1) % len(s.consumers)
		if c := s.consumers[s.rr]; s.availableLocked(c) {
			return c
		}
	}
	return nil
}

// releaseHeldLocked delivers held Key_Shared entries to consumers that
// can take them now, in order: each consumer's queue stops at its first
// entry that must still wait.
func (s *Subscription) releaseHeldLocked() []send {
	var out []send
	for c, hs := range s.held {
		if c == nil {
			continue // no consumer for these keys (sticky ranges leave them out)
		}
		k := 0
		for k < len(hs) && s.keyReadyLocked(c, hs[k].h) {
			s.deliverLocked(c, hs[k].d, hs[k].h)
			k++
		}
		if k > 0 {
			ds := make([]Delivery, k)
			for i := range k {
				ds[i] = hs[i].d
			}
			out = append(out, send{c, ds})
			s.nheld -= k
			if k == len(hs) {
				delete(s.held, c)
			} else {
				s.held[c] = hs[k:]
			}
		}
	}
	return out
}

func (s *Subscription) flush(sends []send) {
	for _, x := range sends {
		x.c.countOut(x.ds)
		x.c.sink.Send(x.ds)
	}
}

func popcount(ws []int64) int {
	n := 0
	for _, w := range ws {
		n += bits.OnesCount64(uint64(w))
	}
	return n
}
