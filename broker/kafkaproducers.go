package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
)

// Kafka idempotent producers. A producer (id, epoch) numbers its batches
// per partition: baseSequence, and the batch holds records baseSequence..
// baseSequence+records-1 (wrapping after MaxInt32 to 0). Kafka's rules,
// kept here per topic:
//   - a batch equal to one of the producer's last kafkaRecentBatches
//     (same first and last sequence) is a retry: answered with the
//     original offset (once stored), not stored again;
//   - otherwise its first sequence must follow the last one stored or in
//     flight, or it is ErrOutOfOrderSequence;
//   - an epoch older than the producer's is ErrProducerFenced; a newer
//     one starts over at sequence 0.
// A producer id the topic has not seen is accepted at any sequence (its
// state may have expired, as in Kafka).
//
// The state is written as the properties of the durable cursor
// kafkaProducersCursor, whose mark-delete position is the last entry the
// snapshot covers; on load, the entries after it are read (each stored
// batch carries its producer id, epoch and sequence) to bring it up to
// date. The cursor exists only on topics that had an idempotent producer.

const (
	kafkaProducersCursor = "kafka.producers"
	// kafkaRecentBatches is how many batches per producer are remembered
	// for retries: Kafka producers have at most 5 in flight.
	kafkaRecentBatches = 5
	// kafkaProducerExpiry: a producer not heard from for this long is
	// forgotten (Kafka's producer.id.expiration.ms default).
	kafkaProducerExpiry = 24 * time.Hour
)

// Errors of idempotent Kafka appends.
var (
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	ErrProducerFenced     = errors.New("producer fenced by a newer epoch")
)

// isInternalCursor reports cursors the broker keeps for itself, which are
// not subscriptions.
func isInternalCursor(name string) bool {
	return name == dedupCursor || name == kafkaProducersCursor
}

type kafkaProducers struct {
	t      *Topic
	cursor *ledger.Cursor
	m      map[int64]*kafkaProducer
	since  int // entries stored since the last snapshot
}

type kafkaProducer struct {
	epoch    int16
	lastUsed int64         // broker time, ms
	recent   []*kafkaBatch // oldest first, at most kafkaRecentBatches
}

// kafkaBatch is a batch stored or in flight. offset is -1 and done open
// while in flight.
type kafkaBatch struct {
	first, last int32
	offset      int64
	err         error
	done        chan struct{}
}

// storedDone is the done channel of batches known stored.
var storedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

func lastSeq(first, records int32) int32 {
	return int32((int64(first) + int64(records) - 1) % (math.MaxInt32 + 1))
}

// openKafkaProducers loads the state from the cursor (creating it if
// create) and the entries after its snapshot.
func openKafkaProducers(ctx context.Context, t *Topic, create bool) (*kafkaProducers, error) {
	if !create && !t.hasCursor(kafkaProducersCursor) {
		return nil, nil
	}
	c, err := t.ml.OpenCursor(ctx, kafkaProducersCursor, ledger.StartLatest)
	if err != nil {
		return nil, err
	}
	kp := &kafkaProducers{t: t, cursor: c, m: map[int64]*kafkaProducer{}}
	for k, v := range c.Properties() {
		id, err1 := strconv.ParseInt(k, 10, 64)
		p, err2 := parseKafkaProducer(v)
		if err1 != nil || err2 != nil {
			t.log.Warn("ignoring a malformed Kafka producer record", "key", k, "value", v)
			continue
		}
		kp.m[id] = p
	}
	replayed, err := replay(ctx, c, func(e ledger.Entry) bool {
		if e.Header.Format != ledger.FormatKafka || len(e.Payload) < batchHeaderLen {
			return false
		}
		h := decodeHeader(e.Payload)
		if h.Magic != 2 || h.ProducerID < 0 {
			return false
		}
		p := kp.m[h.ProducerID]
		if p == nil || h.ProducerEpoch > p.epoch {
			p = &kafkaProducer{epoch: h.ProducerEpoch}
			kp.m[h.ProducerID] = p
		}
		p.lastUsed = e.Header.PublishTime
		p.remember(&kafkaBatch{first: h.BaseSequence, last: lastSeq(h.BaseSequence, h.NumRecords),
			offset: e.Header.FirstOffset, done: storedDone})
		return true
	})
	if err != nil {
		return nil, err
	}
	t.log.Info("Kafka producer state loaded", "producers", len(kp.m), "entries-replayed", replayed)
	return kp, nil
}

func (p *kafkaProducer) remember(b *kafkaBatch) {
	if len(p.recent) == kafkaRecentBatches {
		p.recent = append(p.recent[:0], p.recent[1:]...)
	}
	p.recent = append(p.recent, b)
}

// appendLocked, called with t.kafkaMu held, checks a and appends it (or
// answers it). It returns a function to run without the lock when the
// answer must wait for a batch in flight.
func (kp *kafkaProducers) appendLocked(a KafkaAppend, stored func(ledger.Position, int64, error)) (wait func()) {
	t := kp.t
	now := t.b.cfg.Clock().UnixMilli()
	fail := func(err error) func() {
		stored(ledger.Position{}, -1, err)
		return nil
	}
	p := kp.m[a.ProducerID]
	switch {
	case p == nil:
		p = &kafkaProducer{epoch: a.ProducerEpoch}
		kp.m[a.ProducerID] = p
	case a.ProducerEpoch < p.epoch:
		return fail(fmt.Errorf("%w: producer %d epoch %d, the topic has seen epoch %d", ErrProducerFenced, a.ProducerID, a.ProducerEpoch, p.epoch))
	case a.ProducerEpoch > p.epoch:
		if a.BaseSequence != 0 {
			return fail(fmt.Errorf("%w: producer %d starts epoch %d at sequence %d, want 0", ErrOutOfOrderSequence, a.ProducerID, a.ProducerEpoch, a.BaseSequence))
		}
		*p = kafkaProducer{epoch: a.ProducerEpoch}
	default:
		last := lastSeq(a.BaseSequence, a.Records)
		for _, b := range p.recent {
			if b.first == a.BaseSequence && b.last == last {
				p.lastUsed = now
				return kp.duplicate(b, stored)
			}
		}
		if n := len(p.recent); n > 0 && a.BaseSequence != nextSeq(p.recent[n-1].last) {
			return fail(fmt.Errorf("%w: producer %d sent sequence %d, expected %d", ErrOutOfOrderSequence, a.ProducerID, a.BaseSequence, nextSeq(p.recent[n-1].last)))
		}
	}
	b := &kafkaBatch{first: a.BaseSequence, last: lastSeq(a.BaseSequence, a.Records), offset: -1, done: make(chan struct{})}
	p.lastUsed = now
	p.remember(b)
	t.storeKafka(a, func(pos ledger.Position, offset int64, err error) {
		t.kafkaMu.Lock()
		b.offset, b.err = offset, err
		if err != nil {
			p.forget(b)
		} else {
			kp.stored(pos)
		}
		close(b.done)
		t.kafkaMu.Unlock()
		stored(pos, offset, err)
	})
	return nil
}

// duplicate answers a retry of b with b's outcome.
func (kp *kafkaProducers) duplicate(b *kafkaBatch, stored func(ledger.Position, int64, error)) func() {
	select {
	case <-b.done:
		stored(ledger.Position{}, b.offset, b.err)
		return nil
	default:
	}
	return func() {
		<-b.done
		kp.t.kafkaMu.Lock()
		offset, err := b.offset, b.err
		kp.t.kafkaMu.Unlock()
		stored(ledger.Position{}, offset, err)
	}
}

// forget drops a failed batch and the ones after it (appends fail in
// order: the later ones failed too), so the producer may send them again.
func (p *kafkaProducer) forget(b *kafkaBatch) {
	for i, x := range p.recent {
		if x == b {
			p.recent = p.recent[:i]
			return
		}
	}
}

// stored counts a stored entry; every DedupSnapshotInterval entries the
// state is written as the cursor's properties.
func (kp *kafkaProducers) stored(pos ledger.Position) {
	kp.since++
	if kp.since < kp.t.b.cfg.DedupSnapshotInterval {
		return
	}
	kp.since = 0
	kp.snapshot(pos)
}

func (kp *kafkaProducers) snapshot(pos ledger.Position) {
	expired := kp.t.b.cfg.Clock().Add(-kafkaProducerExpiry).UnixMilli()
	props := make(map[string]string, len(kp.m))
	for id, p := range kp.m {
		if p.lastUsed < expired {
			delete(kp.m, id)
			continue
		}
		if v := p.format(); v != "" {
			props[strconv.FormatInt(id, 10)] = v
		}
	}
	if err := kp.cursor.MarkDelete(pos, props); err != nil {
		kp.t.log.Warn("Kafka producer snapshot not stored; the entries after the previous one are read on load", "err", err)
	}
}

func (kp *kafkaProducers) close(ctx context.Context) error {
	if lc := kp.t.ml.LastConfirmed(); lc.Entry >= 0 && kp.since > 0 {
		kp.snapshot(lc)
	}
	return kp.cursor.Close(ctx)
}

// format writes a producer as "epoch;lastUsed;first:last:offset,..." with
// the stored batches only (a cursor property, so a stored format).
func (p *kafkaProducer) format() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d;%d;", p.epoch, p.lastUsed)
	n := 0
	for _, b := range p.recent {
		if b.offset < 0 {
			continue
		}
		if n > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%d:%d:%d", b.first, b.last, b.offset)
		n++
	}
	return sb.String()
}

func parseKafkaProducer(v string) (*kafkaProducer, error) {
	parts := strings.Split(v, ";")
	if len(parts) != 3 {
		return nil, fmt.Errorf("want epoch;lastUsed;batches, got %q", v)
	}
	epoch, err := strconv.ParseInt(parts[0], 10, 16)
	if err != nil {
		return nil, err
	}
	used, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, err
	}
	p := &kafkaProducer{epoch: int16(epoch), lastUsed: used}
	if parts[2] == "" {
		return p, nil
	}
	for _, s := range strings.Split(parts[2], ",") {
		var first, last int32
		var offset int64
		if _, err := fmt.Sscanf(s, "%d:%d:%d", &first, &last, &offset); err != nil {
			return nil, fmt.Errorf("batch %q: %w", s, err)
		}
		p.remember(&kafkaBatch{first: first, last: last, offset: offset, done: storedDone})
	}
	return p, nil
}

// KafkaProducerInfo describes an idempotent producer a topic knows.
type KafkaProducerInfo struct {
	ProducerID   int64
	Epoch        int16
	LastSequence int32 // -1 if no batch is remembered
	LastUsed     time.Time
}

// KafkaProducers lists the idempotent producers t remembers
// (DescribeProducers).
func (t *Topic) KafkaProducers() []KafkaProducerInfo {
	t.kafkaMu.Lock()
	defer t.kafkaMu.Unlock()
	if t.kafka == nil {
		return nil
	}
	out := make([]KafkaProducerInfo, 0, len(t.kafka.m))
	for id, p := range t.kafka.m {
		last := int32(-1)
		if n := len(p.recent); n > 0 {
			last = p.recent[n-1].last
		}
		out = append(out, KafkaProducerInfo{ProducerID: id, Epoch: p.epoch, LastSequence: last, LastUsed: time.UnixMilli(p.lastUsed)})
	}
	return out
}
