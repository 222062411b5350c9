package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// What the Kafka protocol needs of the broker: Kafka topic names, Kafka
// partitions as topics, producer ids, and appends of record batches with
// Kafka's idempotent-producer checks (kafkaproducers.go). The record batch
// format and the conversions live in kafkabatch.go and convert.go.
//
// A Kafka topic with N partitions is a partitioned topic with N
// partitions; a non-partitioned topic is a Kafka topic with one
// partition (partition 0 is the topic itself).

// ErrInvalidKafkaTopic reports a Kafka topic name that names no topic
// (Kafka's INVALID_TOPIC_EXCEPTION).
var ErrInvalidKafkaTopic = errors.New("invalid Kafka topic name")

// KafkaTopicName maps a Kafka topic name to a topic: "foo" is foo in the
// Kafka tenant and namespace (Config.KafkaTenant/KafkaNamespace),
// "tenant/ns/foo" and "persistent://tenant/ns/foo" name any topic. A name
// of a partition ("foo-partition-1") is refused: Kafka addresses
// partitions by number.
func (b *Broker) KafkaTopicName(name string) (TopicName, error) {
	if t, ok := b.kafkaNames.get(name); ok {
		return t, nil
	}
	t, err := b.kafkaTopicName(name)
	if err == nil {
		b.kafkaNames.put(name, t)
	}
	return t, err
}

// kafkaNameCache remembers the names KafkaTopicName resolved: every
// Produce and Fetch names its topics, once per partition, and parsing
// each again cost the Kafka connection's reader 1–2 µs a request. Names
// refused are not kept. At kafkaNameCacheMax names it starts over, so
// clients naming ever new topics cannot grow it.
type kafkaNameCache struct {
	mu    sync.RWMutex
	names map[string]TopicName
}

const kafkaNameCacheMax = 4096

func (c *kafkaNameCache) get(name string) (TopicName, bool) {
	c.mu.RLock()
	t, ok := c.names[name]
	c.mu.RUnlock()
	return t, ok
}

func (c *kafkaNameCache) put(name string, t TopicName) {
	c.mu.Lock()
	if c.names == nil || len(c.names) >= kafkaNameCacheMax {
		c.names = make(map[string]TopicName)
	}
	c.names[name] = t
	c.mu.Unlock()
}

// kafkaTopicName is KafkaTopicName without the cache.
func (b *Broker) kafkaTopicName(name string) (TopicName, error) {
	if name == "" {
		return TopicName{}, fmt.Errorf("%w: empty name", ErrInvalidKafkaTopic)
	}
	if name == "__consumer_offsets" || name == "__transaction_state" {
		// Kafka's internal topics are not topics here.
		return TopicName{}, fmt.Errorf("%w %q: a Kafka internal topic (offsets are subscription positions here)", ErrInvalidKafkaTopic, name)
	}
	full := name
	if !strings.Contains(name, "://") {
		switch strings.Count(name, "/") {
		case 0:
			full = b.cfg.KafkaTenant + "/" + b.cfg.KafkaNamespace + "/" + name
		case 2:
		default:
			return TopicName{}, fmt.Errorf("%w %q: want topic, tenant/namespace/topic or persistent://tenant/namespace/topic", ErrInvalidKafkaTopic, name)
		}
	}
	t, err := ParseTopicName(full)
	if err != nil {
		return TopicName{}, fmt.Errorf("%w: %w", ErrInvalidKafkaTopic, err)
	}
	if t.IsPartition() {
		return TopicName{}, fmt.Errorf("%w %q: names a partition; Kafka clients use the topic name and a partition number", ErrInvalidKafkaTopic, name)
	}
	return t, nil
}

// KafkaName is the name Kafka clients see for t: the bare name in the
// Kafka namespace, tenant/namespace/topic elsewhere.
func (b *Broker) KafkaName(t TopicName) string {
	if t.Tenant == b.cfg.KafkaTenant && t.Namespace == b.cfg.KafkaNamespace {
		return t.Local
	}
	return t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// KafkaNamespace is the tenant and namespace of bare Kafka names.
func (b *Broker) KafkaNamespace() (tenant, namespace string) {
	return b.cfg.KafkaTenant, b.cfg.KafkaNamespace
}

// KafkaPartitions returns how many Kafka partitions t has: its partition
// count if partitioned, 1 if it is a non-partitioned topic. A topic that
// does not exist is created if create is true and its namespace's
// auto-creation allows (partitioned or not, as configured); otherwise
// ErrTopicNotFound.
func (b *Broker) KafkaPartitions(ctx context.Context, t TopicName, create bool) (int, error) {
	names, err := b.KafkaPartitionNames(ctx, t, create)
	return len(names), err
}

// KafkaPartitionNames is KafkaPartitions with the topics serving the
// partitions: t's partitions if it is partitioned, else t itself.
func (b *Broker) KafkaPartitionNames(ctx context.Context, t TopicName, create bool) ([]TopicName, error) {
	var n int
	var err error
	if create {
		n, err = b.Partitions(ctx, t) // creates a partitioned topic if so configured
	} else {
		n, err = b.storedPartitions(ctx, t)
	}
	if err != nil {
		return nil, err
	}
	if n > 0 {
		out := make([]TopicName, n)
		for i := range n {
			out[i] = t.PartitionName(i)
		}
		return out, nil
	}
	exists, err := b.topicExists(ctx, t)
	if err != nil {
		return nil, err
	}
	if exists {
		return []TopicName{t}, nil
	}
	if !create {
		return nil, fmt.Errorf("%w: %s", ErrTopicNotFound, t)
	}
	mode, _, err := b.autoCreation(ctx, t)
	if err != nil {
		return nil, err
	}
	if mode == AutoCreateOff {
		return nil, fmt.Errorf("%w: %s", ErrTopicNotFound, t)
	}
	// Created, not loaded: its owner (maybe another broker) loads it.
	if err := b.CreateTopic(ctx, t); err != nil && !errors.Is(err, ErrAlreadyExists) {
		return nil, err
	}
	return []TopicName{t}, nil
}

// KafkaPartition returns the loaded topic serving Kafka partition p of t
// (which must exist): partition p of a partitioned topic, or t itself for
// p = 0 of a non-partitioned one. ErrTopicNotFound if there is no such
// partition (Kafka's UNKNOWN_TOPIC_OR_PARTITION).
func (b *Broker) KafkaPartition(ctx context.Context, t TopicName, p int32) (*Topic, error) {
	// Every produce and fetch asks: a loaded topic is answered without
	// reading the partition count from the metadata store.
	if p >= 0 {
		if tp := b.readyTopic(t.PartitionName(int(p))); tp != nil {
			return tp, nil
		}
	}
	if p == 0 {
		if tp := b.readyTopic(t); tp != nil {
			return tp, nil
		}
	}
	n, err := b.storedPartitions(ctx, t)
	if err != nil {
		return nil, err
	}
	switch {
	case n > 0 && p >= 0 && int(p) < n:
		return b.Topic(ctx, t.PartitionName(int(p)), true)
	case n == 0 && p == 0:
		return b.Topic(ctx, t, false)
	}
	return nil, fmt.Errorf("%w: %s has no partition %d", ErrTopicNotFound, t, p)
}

// DefaultPartitions is the partition count of topics created without
// one (auto-topic-partitions).
func (b *Broker) DefaultPartitions() int { return b.cfg.AutoTopicPartitions }

// KafkaPartitionLoaded reports whether partition p of t is loaded here
// (KafkaPartition would answer it without a load).
func (b *Broker) KafkaPartitionLoaded(t TopicName, p int32) bool {
	return p >= 0 && b.readyTopic(t.PartitionName(int(p))) != nil || p == 0 && b.readyTopic(t) != nil
}

// readyTopic returns t if it is loaded (not loading, not closed).
func (b *Broker) readyTopic(t TopicName) *Topic {
	b.mu.Lock()
	tl, ok := b.topics[t.String()]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-tl.done:
		return tl.t
	default:
		return nil
	}
}

// KafkaPartitionOf is the Kafka partition number of a loaded topic.
func (t *Topic) KafkaPartitionOf() int32 {
	if t.name.IsPartition() {
		return int32(t.name.Partition)
	}
	return 0
}

// kafkaProducerIDs hands out Kafka producer ids, unique in the cluster
// (the counter is in meta).
type kafkaProducerIDs struct {
	once sync.Once
	gen  *meta.IDGenerator
	err  error
}

// NextKafkaProducerID returns a new producer id (InitProducerId).
func (b *Broker) NextKafkaProducerID(ctx context.Context) (int64, error) {
	p := &b.kafkaIDs
	p.once.Do(func() { p.gen, p.err = meta.NewIDGenerator(b.cfg.Meta, meta.KafkaProducerIDPath, 100) })
	if p.err != nil {
		return 0, p.err
	}
	return p.gen.Next(ctx)
}

// KafkaAppend is one record batch to append, as validated by
// SplitRecordBatches.
type KafkaAppend struct {
	Batch []byte // record batch v2; the caller's again when done is called
	// Framed, if set, is Batch with ledger.AppendRoom free bytes in front
	// of it: the entry is stored in place (ledger.AppendInPlace), and
	// Framed is the topic's from then on. Batch's CRC must have been
	// checked (SplitRecordBatches): the stored entry's checksum is
	// combined from it, not read off those bytes again.
	Framed        []byte
	Records       int32
	ProducerID    int64 // -1: not an idempotent producer
	ProducerEpoch int16
	BaseSequence  int32
}

// AppendKafka stores a record batch as one entry, applying Kafka's
// idempotent-producer rules when it carries a producer id: a batch
// already stored (a retry) is answered with its original offset and not
// stored again; a sequence gap is ErrOutOfOrderSequence; an old epoch is
// ErrProducerFenced. done is called once, with the offset of the batch's
// first record, in AppendKafka order per topic, on an internal goroutine;
// it must not block.
func (t *Topic) AppendKafka(ctx context.Context, a KafkaAppend, done func(offset int64, err error)) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		done(-1, fmt.Errorf("%w: %s", ErrTopicClosed, t.name))
		return
	}
	if t.ml.Terminated() {
		done(-1, fmt.Errorf("%w: %s", ErrTopicTerminated, t.name))
		return
	}
	if blocked := t.kafkaBlocked.Load(); blocked != nil {
		done(-1, *blocked)
		return
	}
	size := int64(len(a.Batch))
	stored := func(pos ledger.Position, offset int64, err error) {
		if errors.Is(err, ledger.ErrTerminated) {
			err = fmt.Errorf("%w: %s: %w", ErrTopicTerminated, t.name, err)
		}
		if err != nil {
			t.appendFailed(err)
			done(-1, err)
			return
		}
		t.in.add(t.b.cfg.Clock, int64(a.Records), size)
		t.entriesAdded.Add(1)
		done(offset, nil)
	}
	if a.ProducerID < 0 {
		t.storeKafka(a, stored)
		return
	}
	t.kafkaMu.Lock()
	if t.kafka == nil {
		// The first idempotent producer of the topic: its state's cursor
		// is created without holding kafkaMu (a metadata write). A racing
		// opener gets the same cursor; the first to install wins.
		t.kafkaMu.Unlock()
		kp, err := openKafkaProducers(ctx, t, true)
		if err != nil {
			done(-1, err)
			return
		}
		t.kafkaMu.Lock()
		if t.kafka == nil {
			t.kafka = kp
		}
	}
	wait := t.kafka.appendLocked(a, stored)
	t.kafkaMu.Unlock()
	if wait != nil {
		go wait()
	}
}

// storeKafka appends a's batch to the managed ledger, in place if it is
// framed. A batch's CRC-32C covers its bytes from the attributes on, so
// the ledger knows the checksum of the entry's tail from there.
func (t *Topic) storeKafka(a KafkaAppend, done func(pos ledger.Position, firstOffset int64, err error)) {
	if !a.framedOK() {
		t.ml.Append(a.Batch, ledger.FormatKafka, a.Records, done)
		return
	}
	tail := ledger.TailCRC{From: ledger.AppendRoom + batchAttrOff, CRC: binary.BigEndian.Uint32(a.Batch[batchCRCOff:])}
	t.ml.AppendInPlace(a.Framed, tail, ledger.FormatKafka, a.Records, done)
}

// framedOK reports whether a is framed as KafkaAppend says: Framed is the
// room, then Batch itself, a whole batch header long at least. Anything
// else is stored by copy.
func (a *KafkaAppend) framedOK() bool {
	return len(a.Batch) >= batchHeaderLen && len(a.Framed) == ledger.AppendRoom+len(a.Batch) &&
		&a.Framed[ledger.AppendRoom] == &a.Batch[0]
}

// KafkaServed counts messages and bytes a Kafka fetch served from t (in
// the topic's out rates and counters).
func (t *Topic) KafkaServed(msgs, bytes int64) {
	t.kafkaOut.add(t.b.cfg.Clock, msgs, bytes)
}

// kafkaHintsMax bounds the read hints a topic keeps.
const kafkaHintsMax = 256

// kafkaHints remembers, for Kafka fetches, where the entry starting at an
// offset is: a consumer's next fetch starts where its last one ended, so
// the entry is found without searching the ledger (which may read entry
// headers from the bookies).
type kafkaHints struct {
	mu sync.Mutex
	m  map[int64]ledger.Position
}

// KafkaReadHint returns the position of the entry that starts at offset,
// if a read left one.
func (t *Topic) KafkaReadHint(offset int64) (ledger.Position, bool) {
	h := &t.hints
	h.mu.Lock()
	defer h.mu.Unlock()
	p, ok := h.m[offset]
	return p, ok
}

// SetKafkaReadHint records that the entry at pos starts at offset.
func (t *Topic) SetKafkaReadHint(offset int64, pos ledger.Position) {
	h := &t.hints
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= kafkaHintsMax {
		h.m = make(map[int64]ledger.Position, 16)
	}
	h.m[offset] = pos
}
