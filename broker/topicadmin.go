package broker

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/magnetar-io/magnetar/broker/msgpb"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// Topic administration: what the admin REST API (Pulsar's
// /admin/v2/persistent/...) asks of the broker. Topics are loaded as
// needed; a topic that does not exist is ErrTopicNotFound, never created,
// except by CreateTopic and CreatePartitioned.
//
// Rates (msgRateIn and the like) are sampled when stats are asked for:
// each counter keeps the value and time of its previous sample, and the
// rate is the change since then per second (over at least a second; the
// first sample measures from the counter's first message). As in Pulsar,
// a rate describes the last interval, not the instant.

// flowCounter counts messages and bytes through one point (a producer,
// a subscription, a consumer) and samples their rates.
type flowCounter struct {
	msgs, bytes atomic.Int64
	start       atomic.Int64 // unix nanoseconds of the first add; 0: none yet

	mu        sync.Mutex
	sampledAt int64 // unix nanoseconds; 0: never sampled
	lastMsgs  int64
	lastBytes int64
	msgRate   float64
	byteRate  float64
}

func (f *flowCounter) add(now func() time.Time, msgs, bytes int64) {
	if f.start.Load() == 0 {
		f.start.CompareAndSwap(0, now().UnixNano())
	}
	f.msgs.Add(msgs)
	f.bytes.Add(bytes)
}

// minRateInterval is the shortest interval a rate is measured over.
const minRateInterval = time.Second

// rates returns the message and byte rates per second since the previous
// sample (kept if that was less than minRateInterval ago).
func (f *flowCounter) rates(now time.Time) (msgRate, byteRate float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	from := f.sampledAt
	if from == 0 {
		from = f.start.Load()
		if from == 0 {
			return 0, 0
		}
	}
	elapsed := time.Duration(now.UnixNano() - from)
	if f.sampledAt != 0 && elapsed < minRateInterval {
		return f.msgRate, f.byteRate
	}
	msgs, bytes := f.msgs.Load(), f.bytes.Load()
	secs := max(elapsed, minRateInterval).Seconds()
	f.msgRate = float64(msgs-f.lastMsgs) / secs
	f.byteRate = float64(bytes-f.lastBytes) / secs
	f.lastMsgs, f.lastBytes, f.sampledAt = msgs, bytes, now.UnixNano()
	return f.msgRate, f.byteRate
}

// countOut records deliveries to c (its subscription's counter too).
func (c *Consumer) countOut(ds []Delivery) {
	var msgs, bytes int64
	for _, d := range ds {
		if d.AckSet != nil {
			msgs += int64(popcount(d.AckSet))
		} else {
			msgs += int64(d.Entry.Header.Messages)
		}
		bytes += int64(len(d.Entry.Payload))
	}
	clock := c.sub.topic.b.cfg.Clock
	c.out.add(clock, msgs, bytes)
	c.sub.out.add(clock, msgs, bytes)
}

// ---- Listing, creating and deleting topics ----

// PartitionedTopicsOfNamespace returns the partitioned topics of
// tenant/namespace (their base names), sorted.
func (b *Broker) PartitionedTopicsOfNamespace(ctx context.Context, tenant, namespace string) ([]string, error) {
	if err := checkNamePart(tenant); err != nil {
		return nil, fmt.Errorf("%w: tenant %s", ErrInvalidRequest, err)
	}
	if err := checkNamePart(namespace); err != nil {
		return nil, fmt.Errorf("%w: namespace %s", ErrInvalidRequest, err)
	}
	names, err := b.children(ctx, meta.Join(meta.PartitionedTopicsRoot, tenant+"/"+namespace+"/persistent"))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, TopicName{Tenant: tenant, Namespace: namespace, Local: n, Partition: -1}.String())
	}
	sort.Strings(out)
	return out, nil
}

// CreateTopic creates the non-partitioned topic t (auto-creation settings
// do not matter). ErrAlreadyExists if it exists, or if t or the topic it
// is a partition of is partitioned; ErrNamespaceNotFound (in
// ErrTopicNotFound) if its namespace does not exist.
func (b *Broker) CreateTopic(ctx context.Context, t TopicName) error {
	if err := b.CheckNamespace(ctx, t); err != nil {
		return err
	}
	n, err := b.storedPartitions(ctx, t.Base())
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: %s is a partitioned topic", ErrAlreadyExists, t.Base())
	}
	exists, err := b.topicExists(ctx, t)
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("%w: topic %s", ErrAlreadyExists, t)
	}
	ml, err := b.cfg.Ledgers.Open(ctx, t.ManagedLedgerName())
	if err != nil {
		return fmt.Errorf("broker: creating topic %s: %w", t, err)
	}
	if err := ml.Close(ctx); err != nil {
		return fmt.Errorf("broker: creating topic %s: %w", t, err)
	}
	b.log.Info("topic created", "topic", t.String())
	return nil
}

// loadedTopic returns t loaded, never creating it. A partitioned topic's
// base name is ErrTopicNotFound here (its partitions are topics).
func (b *Broker) loadedTopic(ctx context.Context, t TopicName) (*Topic, error) {
	if !t.IsPartition() {
		n, err := b.storedPartitions(ctx, t)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("%w: %s is a partitioned topic, not a topic: use its partitions", ErrTopicNotFound, t)
		}
	}
	return b.Topic(ctx, t, t.IsPartition()) // partitions exist once their topic does
}

// DeleteTopic deletes the non-partitioned topic (or partition) t: its
// subscriptions, managed ledger and, if not a partition, its schemas.
// Without force, a topic with producers or consumers connected is
// ErrPreconditionFailed; with force they are disconnected.
func (b *Broker) DeleteTopic(ctx context.Context, t TopicName, force bool) error {
	if !t.IsPartition() {
		n, err := b.storedPartitions(ctx, t)
		if err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("%w: %s is a partitioned topic: delete it as one", ErrPreconditionFailed, t)
		}
	}
	tp, err := b.Topic(ctx, t, false)
	if err != nil {
		return err
	}
	if err := tp.delete(ctx, force); err != nil {
		return err
	}
	if !t.IsPartition() {
		if err := b.deleteTopicConfig(ctx, t); err != nil {
			return err
		}
		return b.schemas.Delete(ctx, t)
	}
	return nil
}

// connectedLocked says whether producers or consumers are attached.
// Called with t.mu held (it takes each subscription's mu).
func (t *Topic) connectedLocked() bool {
	if len(t.producers) > 0 {
		return true
	}
	for _, s := range t.subs {
		s.mu.Lock()
		n := len(s.consumers)
		s.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// delete closes t (disconnecting its clients) and deletes its managed
// ledger with every cursor.
func (t *Topic) delete(ctx context.Context, force bool) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrTopicClosed, t.name)
	}
	if !force && t.connectedLocked() {
		t.mu.Unlock()
		return fmt.Errorf("%w: topic %s has active producers/subscriptions", ErrPreconditionFailed, t.name)
	}
	subs := t.detachLocked()
	for _, s := range subs {
		s.close(ctx, true) // the cursors go with the managed ledger
	}
	t.dedupMu.Lock()
	if t.dedup != nil {
		t.dedup.cursor.Close(ctx)
	}
	t.dedupMu.Unlock()
	defer t.b.forget(t)
	if err := t.ml.Delete(ctx); err != nil {
		return fmt.Errorf("broker: deleting topic %s: %w", t.name, err)
	}
	t.log.Info("topic deleted", "force", force)
	return nil
}

// UnloadTopic unloads t (each partition of a partitioned topic): with
// other brokers live, the bundle holding it is given up so that the
// topic moves (with the rest of its bundle); alone, the broker closes the
// topic and clients load it again here. Either way clients reconnect.
// ErrTopicNotFound if it does not exist; a *NotOwnerError if another
// broker serves it.
func (b *Broker) UnloadTopic(ctx context.Context, t TopicName) error {
	return b.eachPartition(ctx, t, func(t TopicName) error {
		exists, err := b.topicExists(ctx, t)
		if err != nil {
			return err
		}
		if !exists && !t.IsPartition() {
			return fmt.Errorf("%w: %s", ErrTopicNotFound, t)
		}
		l, err := b.LookupTopic(ctx, t, false)
		if err != nil {
			return err
		}
		if !l.Self && !l.Assigned {
			return &NotOwnerError{Topic: t.String(), Owner: l.Owner}
		}
		if moved, err := b.unloadTopicBundle(ctx, t); err != nil || moved {
			return err
		}
		b.mu.Lock()
		tl := b.topics[t.String()]
		b.mu.Unlock()
		if tl == nil {
			return nil
		}
		select {
		case <-tl.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if tl.t == nil {
			return nil
		}
		return tl.t.Close(ctx)
	})
}

// PartitionNames returns the partitions of t if it is partitioned, else
// t itself.
func (b *Broker) PartitionNames(ctx context.Context, t TopicName) ([]TopicName, error) {
	if t.IsPartition() {
		return []TopicName{t}, nil
	}
	return b.KafkaPartitionNames(ctx, t, false)
}

// eachPartition calls f for every partition of t if t is partitioned,
// else for t.
func (b *Broker) eachPartition(ctx context.Context, t TopicName, f func(TopicName) error) error {
	n := 0
	if !t.IsPartition() {
		var err error
		if n, err = b.storedPartitions(ctx, t); err != nil {
			return err
		}
	}
	if n == 0 {
		return f(t)
	}
	for i := range n {
		if err := f(t.PartitionName(i)); err != nil {
			return err
		}
	}
	return nil
}

// ---- Partitioned topics ----

// MaxPartitions bounds the partitions of a partitioned topic.
const MaxPartitions = 65536

// CreatePartitioned creates the partitioned topic t with n partitions.
// ErrInvalidRequest for n < 1 or a partition's name; ErrAlreadyExists if
// t exists, partitioned or not.
func (b *Broker) CreatePartitioned(ctx context.Context, t TopicName, n int) error {
	if n > MaxPartitions {
		return fmt.Errorf("%w: %d partitions, the limit is %d", ErrInvalidRequest, n, MaxPartitions)
	}
	if t.IsPartition() || n < 1 {
		return fmt.Errorf("%w: a partitioned topic needs a name without -partition- and at least one partition (got %d)", ErrInvalidRequest, n)
	}
	exists, err := b.topicExists(ctx, t)
	if err != nil {
		return err
	}
	if exists {
		return fmt.Errorf("%w: %s is a non-partitioned topic", ErrAlreadyExists, t)
	}
	if err := b.CreatePartitionedTopic(ctx, t, n); err != nil {
		if errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("%w: partitioned topic %s", ErrAlreadyExists, t)
		}
		return err
	}
	return nil
}

// PartitionedMetadata returns t's partition count: 0 for a topic that is
// not partitioned (as Pulsar answers; it may not exist either).
func (b *Broker) PartitionedMetadata(ctx context.Context, t TopicName) (int, error) {
	if t.IsPartition() {
		return 0, nil
	}
	return b.storedPartitions(ctx, t)
}

// ErrShrinkPartitions refuses an update that would remove partitions.
var ErrShrinkPartitions = errors.New("partitions can only be added")

// UpdatePartitions grows the partitioned topic t to n partitions: the new
// partitions are created on first use. ErrTopicNotFound if t is not
// partitioned, ErrShrinkPartitions for fewer partitions than it has,
// ErrInvalidRequest for n < 1. The same count changes nothing.
func (b *Broker) UpdatePartitions(ctx context.Context, t TopicName, n int) error {
	if t.IsPartition() || n < 1 {
		return fmt.Errorf("%w: number of partitions should be more than 0 (got %d)", ErrInvalidRequest, n)
	}
	if n > MaxPartitions {
		return fmt.Errorf("%w: %d partitions, the limit is %d", ErrInvalidRequest, n, MaxPartitions)
	}
	p := partitionedPath(t)
	v, st, err := b.cfg.Meta.Get(ctx, p)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: partitioned topic %s", ErrTopicNotFound, t)
	}
	if err != nil {
		return err
	}
	var sp storedPartitions
	if err := json.Unmarshal(v, &sp); err != nil {
		return fmt.Errorf("broker: partitioned topic %s: bad metadata: %w", t, err)
	}
	cur := sp.Partitions
	switch {
	case n < cur:
		return fmt.Errorf("%w: desired partitions %d can't be less than the current partitions %d", ErrShrinkPartitions, n, cur)
	case n == cur:
		return nil
	}
	nv, _ := json.Marshal(storedPartitions{Partitions: n})
	if _, err := b.cfg.Meta.Set(ctx, p, nv, st.Version); err != nil {
		if errors.Is(err, meta.ErrBadVersion) {
			return fmt.Errorf("%w: partitioned topic %s changed meanwhile", ErrAlreadyExists, t)
		}
		return err
	}
	b.log.Info("partitioned topic updated", "topic", t.String(), "partitions", n, "was", cur)
	return nil
}

// DeletePartitioned deletes every partition of t and then its metadata.
// Without force, ErrPreconditionFailed if any partition has clients (and
// nothing is deleted).
func (b *Broker) DeletePartitioned(ctx context.Context, t TopicName, force bool) error {
	if t.IsPartition() {
		return fmt.Errorf("%w: %s is a partition", ErrInvalidRequest, t)
	}
	n, err := b.storedPartitions(ctx, t)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: partitioned topic %s", ErrTopicNotFound, t)
	}
	if !force {
		for i := range n {
			b.mu.Lock()
			tl := b.topics[t.PartitionName(i).String()]
			b.mu.Unlock()
			if tl == nil {
				continue
			}
			<-tl.done
			if tp := tl.t; tp != nil {
				tp.mu.Lock()
				busy := tp.connectedLocked()
				tp.mu.Unlock()
				if busy {
					return fmt.Errorf("%w: partition %s has active producers/subscriptions", ErrPreconditionFailed, tp.name)
				}
			}
		}
	}
	for i := range n {
		err := b.DeleteTopic(ctx, t.PartitionName(i), force)
		if err != nil && !errors.Is(err, ErrTopicNotFound) {
			return err
		}
	}
	if err := b.cfg.Meta.Delete(ctx, partitionedPath(t), meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	b.log.Info("partitioned topic deleted", "topic", t.String(), "partitions", n)
	if err := b.deleteTopicConfig(ctx, t); err != nil {
		return err
	}
	return b.schemas.Delete(ctx, t)
}

// ---- Subscriptions ----

// subscription returns t's subscription name, opening it without
// consumers if only its durable cursor is there. ErrSubscriptionNotFound
// if there is none.
func (t *Topic) subscription(ctx context.Context, name string) (*Subscription, error) {
	t.mu.Lock()
	s := t.subs[name]
	t.mu.Unlock()
	if s != nil {
		return s, nil
	}
	if isInternalCursor(name) || !t.hasCursor(name) {
		return nil, fmt.Errorf("%w: %s on %s", ErrSubscriptionNotFound, name, t.name)
	}
	return t.openSubscription(ctx, SubscribeOptions{Subscription: name, Durable: true})
}

func (t *Topic) hasCursor(name string) bool {
	for _, c := range t.ml.Cursors() {
		if c.Name() == name {
			return true
		}
	}
	return false
}

// Subscriptions returns the names of t's subscriptions (durable ones and
// readers'), sorted; for a partitioned topic, those of every partition.
func (b *Broker) Subscriptions(ctx context.Context, t TopicName) ([]string, error) {
	seen := map[string]bool{}
	err := b.eachPartition(ctx, t, func(t TopicName) error {
		tp, err := b.Topic(ctx, t, t.IsPartition())
		if err != nil {
			return err
		}
		for _, c := range tp.ml.Cursors() {
			if !isInternalCursor(c.Name()) {
				seen[c.Name()] = true
			}
		}
		tp.mu.Lock()
		for n := range tp.subs {
			seen[n] = true
		}
		tp.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// CreateSubscription creates the durable subscription name on t (every
// partition of a partitioned topic) starting at id: its entry is the
// first delivered; the earliest and latest markers are accepted.
// ErrAlreadyExists if it exists (on any partition: then none is created).
func (b *Broker) CreateSubscription(ctx context.Context, t TopicName, name string, id MessageID) error {
	if name == "" || isInternalCursor(name) || strings.ContainsAny(name, "/") {
		return fmt.Errorf("%w: subscription name %q", ErrInvalidRequest, name)
	}
	var topics []*Topic
	err := b.eachPartition(ctx, t, func(t TopicName) error {
		tp, err := b.Topic(ctx, t, t.IsPartition())
		if err != nil {
			return err
		}
		tp.mu.Lock()
		_, open := tp.subs[name]
		tp.mu.Unlock()
		if open || tp.hasCursor(name) {
			return fmt.Errorf("%w: subscription %s on %s", ErrAlreadyExists, name, t)
		}
		topics = append(topics, tp)
		return nil
	})
	if err != nil {
		return err
	}
	start := ledger.StartAt(id.Position)
	switch {
	case id.IsEarliest():
		start = ledger.StartEarliest
	case id.IsLatest():
		start = ledger.StartLatest
	}
	for _, tp := range topics {
		if _, err := tp.ml.OpenCursor(ctx, name, start); err != nil {
			return fmt.Errorf("broker: subscription %s on %s: %w", name, tp.name, err)
		}
		if _, err := tp.subscription(ctx, name); err != nil {
			return err
		}
		tp.log.Info("subscription created", "subscription", name, "at", id.Position)
	}
	return nil
}

// DeleteSubscription deletes the subscription name of t (of every
// partition). Without force, one with consumers is ErrPreconditionFailed
// (and nothing is deleted); with force they are disconnected.
func (b *Broker) DeleteSubscription(ctx context.Context, t TopicName, name string, force bool) error {
	subs, err := b.subscriptionsOf(ctx, t, name)
	if err != nil {
		return err
	}
	if !force {
		for _, s := range subs {
			s.mu.Lock()
			n := len(s.consumers)
			s.mu.Unlock()
			if n > 0 {
				return fmt.Errorf("%w: subscription %s on %s has active consumers", ErrPreconditionFailed, name, s.topic.name)
			}
		}
	}
	for _, s := range subs {
		s.mu.Lock()
		consumers := slices.Clone(s.consumers)
		s.mu.Unlock()
		tp := s.topic
		tp.mu.Lock()
		if tp.subs[s.name] == s {
			delete(tp.subs, s.name)
		}
		tp.mu.Unlock()
		if err := s.close(ctx, true); err != nil {
			return err
		}
		if s.durable {
			if err := tp.ml.DeleteCursor(ctx, name); err != nil && !errors.Is(err, ledger.ErrNoCursor) {
				return err
			}
		}
		tp.log.Info("subscription deleted", "subscription", name, "consumers-disconnected", len(consumers))
	}
	return nil
}

// subscriptionsOf returns subscription name of t, or of each partition
// of a partitioned topic.
func (b *Broker) subscriptionsOf(ctx context.Context, t TopicName, name string) ([]*Subscription, error) {
	var out []*Subscription
	err := b.eachPartition(ctx, t, func(t TopicName) error {
		tp, err := b.Topic(ctx, t, t.IsPartition())
		if err != nil {
			return err
		}
		s, err := tp.subscription(ctx, name)
		if err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

// ResetCursor moves the subscription name of t: to the entry of id, or
// if id is nil to the first entry published at or after ts. Its
// consumers are disconnected and reconnect, as on a seek. On a
// partitioned topic every partition is reset (to ts; an id's partition
// index picks one partition, -1 all). With excluded, the entry after id's
// is the first read.
func (b *Broker) ResetCursor(ctx context.Context, t TopicName, name string, id *MessageID, ts time.Time, excluded bool) error {
	subs, err := b.subscriptionsOf(ctx, t, name)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if id != nil && id.Partition >= 0 && s.topic.name.IsPartition() && !t.IsPartition() && int32(s.topic.name.Partition) != id.Partition {
			continue
		}
		at := id
		if id != nil && excluded && !id.IsEarliest() && !id.IsLatest() {
			next := *id
			next.Position = s.topic.ml.Next(id.Position)
			at = &next
		}
		if err := s.Seek(ctx, at, ts); err != nil {
			return err
		}
	}
	return nil
}

// SkipMessages acknowledges the next n messages of the subscription (n <
// 0: all of them, Pulsar's skip_all / clear backlog). A batch is skipped
// whole once its first message is among the n.
func (b *Broker) SkipMessages(ctx context.Context, t TopicName, name string, n int64) error {
	if n == 0 {
		return nil
	}
	subs, err := b.subscriptionsOf(ctx, t, name)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := s.skip(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (s *Subscription) skip(ctx context.Context, n int64) error {
	if n < 0 {
		last := s.topic.ml.LastConfirmed()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.cursor.MarkDelete(last, nil); err != nil {
			return err
		}
		s.forgetSkippedLocked(func(p ledger.Position) bool { return p.Compare(last) <= 0 })
		return nil
	}
	skip := map[ledger.Position]bool{}
	var ps []ledger.Position
	left := n
	err := s.scanUnacked(ctx, func(e ledger.Entry) bool {
		skip[e.Position] = true
		ps = append(ps, e.Position)
		left -= int64(e.Header.Messages)
		return left > 0
	})
	if err != nil || len(ps) == 0 {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cursor.Delete(ps...); err != nil {
		return err
	}
	s.forgetSkippedLocked(func(p ledger.Position) bool { return skip[p] })
	return nil
}

// forgetSkippedLocked drops what the dispatcher keeps about the entries
// skipped: out with consumers, to replay, held. (A read under way may
// still deliver some; their acknowledgements are then no-ops.)
func (s *Subscription) forgetSkippedLocked(skipped func(ledger.Position) bool) {
	for p := range s.owner {
		if skipped(p) {
			s.forgetLocked(p)
		}
	}
	for _, p := range slices.Clone(s.replay) {
		if skipped(p) {
			s.forgetLocked(p)
		}
	}
	for c, hs := range s.held {
		kept := slices.DeleteFunc(hs, func(x heldEntry) bool { return skipped(x.d.Entry.Position) })
		s.nheld -= len(hs) - len(kept)
		if len(kept) == 0 {
			delete(s.held, c)
		} else {
			s.held[c] = kept
		}
	}
	for p := range s.redeliver {
		if skipped(p) {
			delete(s.redeliver, p)
		}
	}
	for p := range s.batchAcks {
		if skipped(p) {
			delete(s.batchAcks, p)
		}
	}
	s.wakeLater()
}

// scanUnacked calls f with each unacknowledged entry after the
// mark-delete position, in order, while f returns true.
func (s *Subscription) scanUnacked(ctx context.Context, f func(ledger.Entry) bool) error {
	ml := s.topic.ml
	from := ml.Next(s.cursor.MarkDeletePosition())
	last := ml.LastConfirmed()
	for from.Compare(last) <= 0 {
		es, err := ml.Read(ctx, from, maxReadEntries)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return nil
		}
		for _, e := range es {
			if s.cursor.IsAcked(e.Position) {
				continue
			}
			if !f(e) {
				return nil
			}
		}
		from = ml.Next(es[len(es)-1].Position)
	}
	return nil
}

// PeekEntry returns the n-th (from 1) unacknowledged entry of the
// subscription (Pulsar's peek counts entries, a batch being one);
// ErrMessageNotFound past the backlog.
func (b *Broker) PeekEntry(ctx context.Context, t TopicName, name string, n int) (ledger.Entry, error) {
	if n < 1 {
		return ledger.Entry{}, fmt.Errorf("%w: position %d: want ≥ 1", ErrInvalidRequest, n)
	}
	tp, err := b.loadedTopic(ctx, t)
	if err != nil {
		return ledger.Entry{}, err
	}
	s, err := tp.subscription(ctx, name)
	if err != nil {
		return ledger.Entry{}, err
	}
	var out ledger.Entry
	found := false
	err = s.scanUnacked(ctx, func(e ledger.Entry) bool {
		n--
		if n == 0 {
			out, found = e, true
			return false
		}
		return true
	})
	if err != nil {
		return out, err
	}
	if !found {
		return out, fmt.Errorf("%w: no message at that position of subscription %s on %s", ErrMessageNotFound, name, t)
	}
	return out, nil
}

// ErrMessageNotFound: no message at the position asked for.
var ErrMessageNotFound = errors.New("message not found")

// ReadEntry returns the entry at pos of t.
func (b *Broker) ReadEntry(ctx context.Context, t TopicName, pos ledger.Position) (ledger.Entry, error) {
	tp, err := b.loadedTopic(ctx, t)
	if err != nil {
		return ledger.Entry{}, err
	}
	if pos.Entry < 0 || pos.Compare(tp.ml.LastConfirmed()) > 0 {
		return ledger.Entry{}, fmt.Errorf("%w: %v in %s", ErrMessageNotFound, pos, t)
	}
	es, err := tp.ml.Read(ctx, pos, 1)
	if errors.Is(err, ledger.ErrOffsetOutOfRange) || (err == nil && (len(es) == 0 || es[0].Position != pos)) {
		return ledger.Entry{}, fmt.Errorf("%w: %v in %s", ErrMessageNotFound, pos, t)
	}
	if err != nil {
		return ledger.Entry{}, err
	}
	return es[0], nil
}

// ---- Last message, terminate ----

// LastMessageID returns the id of t's last message (ok=false: none).
func (b *Broker) LastMessageID(ctx context.Context, t TopicName) (MessageID, bool, error) {
	tp, err := b.loadedTopic(ctx, t)
	if err != nil {
		return MessageID{}, false, err
	}
	return tp.LastMessageID(ctx)
}

// Terminate ends t for good: its producers are disconnected and new ones
// refused (ErrTopicTerminated), consumers read to the end. It returns the last message's id.
func (b *Broker) Terminate(ctx context.Context, t TopicName) (MessageID, error) {
	tp, err := b.loadedTopic(ctx, t)
	if err != nil {
		return MessageID{}, err
	}
	if _, err := tp.ml.Terminate(ctx); err != nil {
		return MessageID{}, fmt.Errorf("broker: terminating %s: %w", t, err)
	}
	// Producers are disconnected; coming back, they are refused with
	// ErrTopicTerminated (clients then fail what they hold), as in Pulsar.
	tp.mu.Lock()
	producers := make([]*Producer, 0, len(tp.producers))
	for _, p := range tp.producers {
		producers = append(producers, p)
	}
	tp.mu.Unlock()
	for _, p := range producers {
		p.disconnect()
	}
	id, _, err := tp.LastMessageID(ctx)
	tp.log.Info("topic terminated", "last", id.Position)
	return id, err
}

// ---- Stats ----

// PublisherStats are one producer's (Pulsar's PublisherStats).
type PublisherStats struct {
	ProducerName    string  `json:"producerName"`
	AccessMode      string  `json:"accessMode"`
	MsgRateIn       float64 `json:"msgRateIn"`
	MsgThroughputIn float64 `json:"msgThroughputIn"`
	AverageMsgSize  float64 `json:"averageMsgSize"`
	MsgInCounter    int64   `json:"msgInCounter"`
	BytesInCounter  int64   `json:"bytesInCounter"`
}

// ConsumerStats are one consumer's (Pulsar's ConsumerStats).
type ConsumerStats struct {
	ConsumerName                 string            `json:"consumerName"`
	MsgRateOut                   float64           `json:"msgRateOut"`
	MsgThroughputOut             float64           `json:"msgThroughputOut"`
	MsgOutCounter                int64             `json:"msgOutCounter"`
	BytesOutCounter              int64             `json:"bytesOutCounter"`
	AvailablePermits             int64             `json:"availablePermits"`
	UnackedMessages              int64             `json:"unackedMessages"`
	BlockedConsumerOnUnackedMsgs bool              `json:"blockedConsumerOnUnackedMsgs"`
	Metadata                     map[string]string `json:"metadata"`
}

// SubscriptionStats are one subscription's (Pulsar's SubscriptionStats).
type SubscriptionStats struct {
	MsgRateOut          float64         `json:"msgRateOut"`
	MsgThroughputOut    float64         `json:"msgThroughputOut"`
	MsgOutCounter       int64           `json:"msgOutCounter"`
	BytesOutCounter     int64           `json:"bytesOutCounter"`
	MsgBacklog          int64           `json:"msgBacklog"`
	MsgBacklogNoDelayed int64           `json:"msgBacklogNoDelayed"`
	BacklogSize         int64           `json:"backlogSize"`
	UnackedMessages     int64           `json:"unackedMessages"`
	Type                string          `json:"type"`
	ActiveConsumerName  string          `json:"activeConsumerName,omitempty"`
	IsDurable           bool            `json:"isDurable"`
	Consumers           []ConsumerStats `json:"consumers"`
}

// TopicStats are a topic's (Pulsar's TopicStats).
type TopicStats struct {
	MsgRateIn           float64                      `json:"msgRateIn"`
	MsgRateOut          float64                      `json:"msgRateOut"`
	MsgThroughputIn     float64                      `json:"msgThroughputIn"`
	MsgThroughputOut    float64                      `json:"msgThroughputOut"`
	MsgInCounter        int64                        `json:"msgInCounter"`
	BytesInCounter      int64                        `json:"bytesInCounter"`
	MsgOutCounter       int64                        `json:"msgOutCounter"`
	BytesOutCounter     int64                        `json:"bytesOutCounter"`
	AverageMsgSize      float64                      `json:"averageMsgSize"`
	StorageSize         int64                        `json:"storageSize"`
	BacklogSize         int64                        `json:"backlogSize"`
	Publishers          []PublisherStats             `json:"publishers"`
	Subscriptions       map[string]SubscriptionStats `json:"subscriptions"`
	Replication         map[string]any               `json:"replication"`
	DeduplicationStatus string                       `json:"deduplicationStatus"`
}

// PartitionedTopicStats aggregate a partitioned topic's partitions
// (Pulsar's PartitionedTopicStats); Partitions is filled only when asked.
type PartitionedTopicStats struct {
	TopicStats
	Metadata   PartitionsMetadata    `json:"metadata"`
	Partitions map[string]TopicStats `json:"partitions,omitempty"`
}

// PartitionsMetadata is Pulsar's PartitionedTopicMetadata.
type PartitionsMetadata struct {
	Partitions int `json:"partitions"`
}

func accessModeName(m AccessMode) string {
	switch m {
	case AccessExclusive:
		return "Exclusive"
	case AccessWaitForExclusive:
		return "WaitForExclusive"
	case AccessExclusiveWithFencing:
		return "ExclusiveWithFencing"
	}
	return "Shared"
}

// TopicStats returns t's stats.
func (b *Broker) TopicStats(ctx context.Context, t TopicName) (TopicStats, error) {
	tp, err := b.loadedTopic(ctx, t)
	if err != nil {
		return TopicStats{}, err
	}
	return tp.stats(ctx)
}

func (t *Topic) stats(ctx context.Context) (TopicStats, error) {
	now := t.b.cfg.Clock()
	st := TopicStats{Publishers: []PublisherStats{}, Subscriptions: map[string]SubscriptionStats{},
		Replication: map[string]any{}, StorageSize: t.ml.TotalSize(), DeduplicationStatus: "Disabled"}
	t.dedupMu.Lock()
	if t.dedup != nil {
		st.DeduplicationStatus = "Enabled"
	}
	t.dedupMu.Unlock()
	t.mu.Lock()
	producers := make([]*Producer, 0, len(t.producers))
	for _, p := range t.producers {
		producers = append(producers, p)
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	sort.Slice(producers, func(i, j int) bool { return producers[i].name < producers[j].name })
	for _, p := range producers {
		mr, br := p.in.rates(now)
		ps := PublisherStats{ProducerName: p.name, AccessMode: accessModeName(p.mode), MsgRateIn: mr, MsgThroughputIn: br,
			MsgInCounter: p.in.msgs.Load(), BytesInCounter: p.in.bytes.Load()}
		if mr > 0 {
			ps.AverageMsgSize = br / mr
		}
		st.Publishers = append(st.Publishers, ps)
	}
	mr, br := t.in.rates(now)
	st.MsgRateIn, st.MsgThroughputIn = mr, br
	st.MsgInCounter, st.BytesInCounter = t.in.msgs.Load(), t.in.bytes.Load()
	if mr > 0 {
		st.AverageMsgSize = br / mr
	}
	// Subscriptions with only a durable cursor count too (no consumers,
	// a backlog).
	open := map[string]bool{}
	for _, s := range subs {
		open[s.name] = true
	}
	for _, c := range t.ml.Cursors() {
		if isInternalCursor(c.Name()) || open[c.Name()] {
			continue
		}
		bl, err := c.Backlog(ctx)
		if err != nil {
			return st, err
		}
		st.Subscriptions[c.Name()] = SubscriptionStats{MsgBacklog: bl.Messages, MsgBacklogNoDelayed: bl.Messages,
			BacklogSize: bl.Bytes, Type: SubExclusive.String(), IsDurable: true, Consumers: []ConsumerStats{}}
		st.BacklogSize = max(st.BacklogSize, bl.Bytes)
	}
	for _, s := range subs {
		ss, err := s.stats(ctx, now)
		if err != nil {
			if errors.Is(err, ledger.ErrCursorClosed) || errors.Is(err, ledger.ErrNoCursor) {
				continue // closed or deleted meanwhile
			}
			return st, err
		}
		st.Subscriptions[s.name] = ss
		st.MsgRateOut += ss.MsgRateOut
		st.MsgThroughputOut += ss.MsgThroughputOut
		st.MsgOutCounter += ss.MsgOutCounter
		st.BytesOutCounter += ss.BytesOutCounter
		st.BacklogSize = max(st.BacklogSize, ss.BacklogSize)
	}
	// Kafka consumers fetch without a subscription: their reads count for
	// the topic.
	kmr, kbr := t.kafkaOut.rates(now)
	st.MsgRateOut += kmr
	st.MsgThroughputOut += kbr
	st.MsgOutCounter += t.kafkaOut.msgs.Load()
	st.BytesOutCounter += t.kafkaOut.bytes.Load()
	return st, nil
}

func (s *Subscription) stats(ctx context.Context, now time.Time) (SubscriptionStats, error) {
	bl, err := s.cursor.Backlog(ctx)
	if err != nil {
		return SubscriptionStats{}, err
	}
	mr, br := s.out.rates(now)
	ss := SubscriptionStats{MsgRateOut: mr, MsgThroughputOut: br, MsgOutCounter: s.out.msgs.Load(),
		BytesOutCounter: s.out.bytes.Load(), MsgBacklog: bl.Messages, MsgBacklogNoDelayed: bl.Messages,
		BacklogSize: bl.Bytes, IsDurable: s.durable, Consumers: []ConsumerStats{}}
	limit := s.topic.b.cfg.MaxUnackedPerConsumer
	s.mu.Lock()
	ss.Type = s.typ.String()
	if s.active != nil {
		ss.ActiveConsumerName = s.active.name
	}
	consumers := slices.Clone(s.consumers)
	type snap struct{ permits, unacked int64 }
	snaps := make([]snap, len(consumers))
	for i, c := range consumers {
		snaps[i] = snap{c.permits, c.unacked}
	}
	typ := s.typ
	s.mu.Unlock()
	for i, c := range consumers {
		cmr, cbr := c.out.rates(now)
		ss.Consumers = append(ss.Consumers, ConsumerStats{ConsumerName: c.name, MsgRateOut: cmr, MsgThroughputOut: cbr,
			MsgOutCounter: c.out.msgs.Load(), BytesOutCounter: c.out.bytes.Load(),
			AvailablePermits: snaps[i].permits, UnackedMessages: snaps[i].unacked,
			BlockedConsumerOnUnackedMsgs: !typ.singleActive() && limit > 0 && snaps[i].unacked >= int64(limit),
			Metadata:                     map[string]string{}})
		ss.UnackedMessages += snaps[i].unacked
	}
	return ss, nil
}

// PartitionedStats returns the stats of t's partitions added up (and
// each partition's if perPartition). ErrTopicNotFound if t is not
// partitioned.
func (b *Broker) PartitionedStats(ctx context.Context, t TopicName, perPartition bool) (PartitionedTopicStats, error) {
	n, err := b.PartitionedMetadata(ctx, t)
	if err != nil {
		return PartitionedTopicStats{}, err
	}
	if n == 0 {
		return PartitionedTopicStats{}, fmt.Errorf("%w: partitioned topic %s", ErrTopicNotFound, t)
	}
	out := PartitionedTopicStats{TopicStats: TopicStats{Publishers: []PublisherStats{},
		Subscriptions: map[string]SubscriptionStats{}, Replication: map[string]any{}}}
	out.Metadata.Partitions = n
	if perPartition {
		out.Partitions = map[string]TopicStats{}
	}
	for i := range n {
		pt := t.PartitionName(i)
		tp, err := b.Topic(ctx, pt, true)
		if err != nil {
			return out, err
		}
		ps, err := tp.stats(ctx)
		if err != nil {
			return out, err
		}
		if perPartition {
			out.Partitions[pt.String()] = ps
		}
		a := &out.TopicStats
		a.DeduplicationStatus = ps.DeduplicationStatus
		a.MsgRateIn += ps.MsgRateIn
		a.MsgRateOut += ps.MsgRateOut
		a.MsgThroughputIn += ps.MsgThroughputIn
		a.MsgThroughputOut += ps.MsgThroughputOut
		a.MsgInCounter += ps.MsgInCounter
		a.BytesInCounter += ps.BytesInCounter
		a.MsgOutCounter += ps.MsgOutCounter
		a.BytesOutCounter += ps.BytesOutCounter
		a.StorageSize += ps.StorageSize
		a.BacklogSize += ps.BacklogSize
		a.Publishers = append(a.Publishers, ps.Publishers...)
		for name, ss := range ps.Subscriptions {
			agg, ok := a.Subscriptions[name]
			if !ok {
				agg = SubscriptionStats{Type: ss.Type, IsDurable: ss.IsDurable, Consumers: []ConsumerStats{}}
			}
			agg.MsgRateOut += ss.MsgRateOut
			agg.MsgThroughputOut += ss.MsgThroughputOut
			agg.MsgOutCounter += ss.MsgOutCounter
			agg.BytesOutCounter += ss.BytesOutCounter
			agg.MsgBacklog += ss.MsgBacklog
			agg.MsgBacklogNoDelayed += ss.MsgBacklogNoDelayed
			agg.BacklogSize += ss.BacklogSize
			agg.UnackedMessages += ss.UnackedMessages
			agg.Consumers = append(agg.Consumers, ss.Consumers...)
			a.Subscriptions[name] = agg
		}
	}
	if a := &out.TopicStats; a.MsgRateIn > 0 {
		a.AverageMsgSize = a.MsgThroughputIn / a.MsgRateIn
	}
	return out, nil
}

// LedgerStats describe one ledger (Pulsar's ManagedLedgerInternalStats
// LedgerInfo).
type LedgerStats struct {
	LedgerID  int64 `json:"ledgerId"`
	Entries   int64 `json:"entries"`
	Size      int64 `json:"size"`
	Offloaded bool  `json:"offloaded"`
}

// CursorStats describe one cursor (Pulsar's CursorStats).
type CursorStats struct {
	MarkDeletePosition                     string           `json:"markDeletePosition"`
	ReadPosition                           string           `json:"readPosition"`
	MessagesConsumedCounter                int64            `json:"messagesConsumedCounter"`
	IndividuallyDeletedMessages            string           `json:"individuallyDeletedMessages"`
	TotalNonContiguousDeletedMessagesRange int              `json:"totalNonContiguousDeletedMessagesRange"`
	State                                  string           `json:"state"`
	Properties                             map[string]int64 `json:"properties"`
}

// InternalStats are a topic's managed ledger as Pulsar's
// PersistentTopicInternalStats shows it.
type InternalStats struct {
	EntriesAddedCounter  int64                  `json:"entriesAddedCounter"`
	NumberOfEntries      int64                  `json:"numberOfEntries"`
	TotalSize            int64                  `json:"totalSize"`
	CurrentLedgerEntries int64                  `json:"currentLedgerEntries"`
	CurrentLedgerSize    int64                  `json:"currentLedgerSize"`
	LastConfirmedEntry   string                 `json:"lastConfirmedEntry"`
	State                string                 `json:"state"`
	Ledgers              []LedgerStats          `json:"ledgers"`
	Cursors              map[string]CursorStats `json:"cursors"`
}

// InternalStats returns t's internal stats.
func (b *Broker) InternalStats(ctx context.Context, t TopicName) (InternalStats, error) {
	tp, err := b.loadedTopic(ctx, t)
	if err != nil {
		return InternalStats{}, err
	}
	ml := tp.ml
	st := InternalStats{EntriesAddedCounter: tp.entriesAdded.Load(), NumberOfEntries: ml.NumberOfEntries(),
		TotalSize: ml.TotalSize(), LastConfirmedEntry: ml.LastConfirmed().String(), State: "LedgerOpened",
		Ledgers: []LedgerStats{}, Cursors: map[string]CursorStats{}}
	ls := ml.Ledgers()
	for _, l := range ls {
		st.Ledgers = append(st.Ledgers, LedgerStats{LedgerID: l.LedgerID, Entries: l.Entries, Size: l.Size})
	}
	if len(ls) > 0 {
		cur := ls[len(ls)-1]
		st.CurrentLedgerEntries, st.CurrentLedgerSize = cur.Entries, cur.Size
	}
	for _, c := range ml.Cursors() {
		st.Cursors[c.Name()] = cursorStats(c)
	}
	tp.mu.Lock()
	for name, s := range tp.subs {
		if !s.durable {
			st.Cursors[name] = cursorStats(s.cursor)
		}
	}
	tp.mu.Unlock()
	return st, nil
}

func cursorStats(c *ledger.Cursor) CursorStats {
	ranges := c.AckedRanges()
	var sb strings.Builder
	sb.WriteByte('[')
	for i, r := range ranges {
		if i > 0 {
			sb.WriteByte(',')
		}
		// Pulsar writes ranges open below: (previous entry..last entry].
		fmt.Fprintf(&sb, "(%d:%d..%v]", r[0].Ledger, r[0].Entry-1, r[1])
	}
	sb.WriteByte(']')
	props := map[string]int64{}
	for k, v := range c.Properties() {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			props[k] = n
		}
	}
	return CursorStats{MarkDeletePosition: c.MarkDeletePosition().String(), ReadPosition: c.ReadPosition().String(),
		IndividuallyDeletedMessages: sb.String(), TotalNonContiguousDeletedMessagesRange: len(ranges),
		State: "Open", Properties: props}
}

// maxDecodedPayload bounds the uncompressed size of a payload DecodePayload
// accepts (a message's declared size comes from its producer).
const maxDecodedPayload = 128 << 20

// DecodePayload returns an entry's payload uncompressed, as md's
// compression and uncompressed size describe it (a batch's payload is
// then its single-message records). An uncompressed payload is returned
// as it is; ErrBadEntry if it does not decode.
func DecodePayload(md *msgpb.MessageMetadata, payload []byte) ([]byte, error) {
	c := md.GetCompression()
	if c == msgpb.CompressionType_NONE {
		return payload, nil
	}
	size := int64(md.GetUncompressedSize())
	if size < 0 || size > maxDecodedPayload {
		return nil, fmt.Errorf("%w: uncompressed size %d", ErrBadEntry, size)
	}
	var out []byte
	var err error
	switch c {
	case msgpb.CompressionType_LZ4:
		out = make([]byte, size)
		var n int
		n, err = lz4.UncompressBlock(payload, out)
		out = out[:max(n, 0)]
	case msgpb.CompressionType_ZLIB:
		var r io.ReadCloser
		if r, err = zlib.NewReader(bytes.NewReader(payload)); err == nil {
			out, err = io.ReadAll(io.LimitReader(r, size+1))
			r.Close()
		}
	case msgpb.CompressionType_ZSTD:
		var d *zstd.Decoder
		if d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxDecodedPayload)); err == nil {
			out, err = d.DecodeAll(payload, make([]byte, 0, size))
			d.Close()
		}
	case msgpb.CompressionType_SNAPPY:
		var n int
		if n, err = snappy.DecodedLen(payload); err == nil && int64(n) > size {
			err = fmt.Errorf("decoded length %d", n)
		}
		if err == nil {
			out, err = snappy.Decode(nil, payload)
		}
	default:
		err = fmt.Errorf("unknown compression %v", c)
	}
	if err == nil && int64(len(out)) != size {
		err = fmt.Errorf("%d bytes, the metadata says %d", len(out), size)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v payload: %v", ErrBadEntry, c, err)
	}
	return out, nil
}
