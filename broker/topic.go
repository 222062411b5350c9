package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/magnetar-io/magnetar/ledger"
)

// Topic is a loaded topic (a non-partitioned topic or one partition): its
// managed ledger, producers and subscriptions.
type Topic struct {
	b    *Broker
	name TopicName
	ml   *ledger.ManagedLedger
	log  *slog.Logger

	mu        sync.Mutex
	producers map[string]*Producer // by name
	waiting   []chan struct{}      // WaitForExclusive producers, woken when a producer leaves
	subs      map[string]*Subscription
	closed    bool

	in           flowCounter  // published (topicadmin.go)
	kafkaOut     flowCounter  // read by Kafka fetches (not tied to a subscription)
	entriesAdded atomic.Int64 // entries published since loaded

	// dedupMu guards dedup and orders each deduplicated publish with its
	// Append (so sequence ids reach the log in the order they were checked).
	dedupMu sync.Mutex
	dedup   *dedupState // nil: deduplication off

	// kafkaMu guards kafka and orders each idempotent Kafka append with its
	// Append (kafkaproducers.go).
	kafkaMu sync.Mutex
	kafka   *kafkaProducers // nil until the first idempotent Kafka producer

	config atomic.Pointer[TopicConfig] // the topic's own settings (topicconfig.go); nil: none

	// kafkaBlocked, if set, refuses Kafka appends: the topic is over a
	// backlog quota that holds or rejects producers (quota.go).
	kafkaBlocked atomic.Pointer[error]
	hints        kafkaHints // where Kafka fetches go on (kafka.go)
	fencedOnce   sync.Once  // closing after fencing (ownership.go)
}

func newTopic(b *Broker, name TopicName, ml *ledger.ManagedLedger) *Topic {
	return &Topic{b: b, name: name, ml: ml, log: b.log.With("topic", name.String()),
		producers: map[string]*Producer{}, subs: map[string]*Subscription{}}
}

// load restores what the topic keeps besides its log: deduplication state
// and the state of Kafka idempotent producers.
func (t *Topic) load(ctx context.Context) error {
	c, err := t.b.TopicConfig(ctx, t.name)
	if err != nil {
		return fmt.Errorf("broker: topic %s: %w", t.name, err)
	}
	t.config.Store(&c)
	if t.hasCursor(kafkaProducersCursor) {
		kp, err := openKafkaProducers(ctx, t, false)
		if err != nil {
			return fmt.Errorf("broker: topic %s: Kafka producer state: %w", t.name, err)
		}
		t.kafka = kp
	}
	on, err := t.b.deduplication(ctx, t.name)
	if err != nil || !on {
		return err
	}
	d, err := loadDedup(ctx, t)
	if err != nil {
		return fmt.Errorf("broker: topic %s: deduplication state: %w", t.name, err)
	}
	t.dedup = d
	return nil
}

// Name is the topic's name.
func (t *Topic) Name() TopicName { return t.name }

// ManagedLedger is the topic's log.
func (t *Topic) ManagedLedger() *ledger.ManagedLedger { return t.ml }

// LastMessageID returns the id of the last message stored (its entry and,
// for a batch, the index of its last message), and ok=false if the topic
// has none.
func (t *Topic) LastMessageID(ctx context.Context) (MessageID, bool, error) {
	last := t.ml.LastConfirmed()
	id := MessageID{Position: last, BatchIndex: -1, Partition: int32(t.name.Partition)}
	if last.Entry < 0 {
		return id, false, nil
	}
	es, err := t.ml.Read(ctx, last, 1)
	if errors.Is(err, ledger.ErrOffsetOutOfRange) {
		// Trimmed (everything consumed and retention over): the id stands,
		// only its batch size is unknown.
		return id, true, nil
	}
	if err != nil {
		return id, true, err
	}
	if len(es) == 1 {
		switch es[0].Header.Format {
		case ledger.FormatPulsar:
			if md, _, err := ParseEntry(es[0].Payload); err == nil && md.NumMessagesInBatch != nil {
				id.BatchIndex = md.GetNumMessagesInBatch() - 1
			}
		case ledger.FormatKafka: // read by Pulsar clients as a batch
			id.BatchIndex = es[0].Header.Messages - 1
		}
	}
	return id, true, nil
}

// Close disconnects the topic's producers and consumers and closes its
// subscriptions and managed ledger. The broker loads it again on next use.
func (t *Topic) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	subs := t.detachLocked()
	var errs []error
	for _, s := range subs {
		if err := s.close(ctx, true); err != nil {
			errs = append(errs, err)
		}
	}
	t.dedupMu.Lock()
	if t.dedup != nil {
		if err := t.dedup.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	t.dedupMu.Unlock()
	t.kafkaMu.Lock()
	if t.kafka != nil {
		if err := t.kafka.close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	t.kafkaMu.Unlock()
	if err := t.ml.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	t.b.forget(t)
	t.log.Info("topic closed")
	return errors.Join(errs...)
}

// detachLocked, called with t.mu held, marks the topic closed, releases
// the producers waiting for exclusive access, disconnects the producers
// and returns the subscriptions (to close); it returns with t.mu released.
func (t *Topic) detachLocked() []*Subscription {
	t.closed = true
	producers := make([]*Producer, 0, len(t.producers))
	for _, p := range t.producers {
		producers = append(producers, p)
	}
	subs := make([]*Subscription, 0, len(t.subs))
	for _, s := range t.subs {
		subs = append(subs, s)
	}
	waiting := t.waiting
	t.waiting = nil
	t.mu.Unlock()
	for _, w := range waiting {
		close(w)
	}
	for _, p := range producers {
		p.disconnect()
	}
	return subs
}

// AccessMode is a producer's access mode (Pulsar's numbering).
type AccessMode int32

const (
	AccessShared               AccessMode = 0
	AccessExclusive            AccessMode = 1
	AccessWaitForExclusive     AccessMode = 2
	AccessExclusiveWithFencing AccessMode = 3
)

// ProducerSink is how the broker reaches a producer's connection.
type ProducerSink interface {
	// Closed tells the client the broker closed the producer (the topic is
	// unloading or another producer fenced it); it should reconnect.
	Closed()
}

// ProducerOptions describe a producer joining a topic.
type ProducerOptions struct {
	Name       string // "" for a broker-assigned name
	AccessMode AccessMode
	Schema     *Schema // nil: the producer has no schema
	Sink       ProducerSink
}

// Producer is a producer attached to a topic.
type Producer struct {
	topic         *Topic
	name          string
	mode          AccessMode
	sink          ProducerSink
	schemaVersion SchemaVersion // -1: none
	closed        bool          // guarded by topic.mu
	in            flowCounter   // published (topicadmin.go)
}

// AddProducer attaches a producer. ErrProducerBusy if its name is taken or
// the access modes conflict; WaitForExclusive waits (honouring ctx) until
// the topic has no other producer.
func (t *Topic) AddProducer(ctx context.Context, o ProducerOptions) (*Producer, error) {
	if o.Sink == nil {
		return nil, fmt.Errorf("%w: producer without a sink", ErrInvalidRequest)
	}
	if err := t.checkProducerQuota(ctx); err != nil { // quota.go
		return nil, err
	}
	version := SchemaVersion(-1)
	if o.Schema != nil {
		v, err := t.b.schemas.GetOrCreate(ctx, t.name, *o.Schema)
		if err != nil {
			return nil, err
		}
		version = v
	} else {
		ok, err := t.b.schemas.AcceptsNoSchema(ctx, t.name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: topic %s has a schema and producers must have one", ErrIncompatibleSchema, t.name)
		}
	}
	name := o.Name
	if name == "" {
		name = t.b.nextProducerName()
	}
	p := &Producer{topic: t, name: name, mode: o.AccessMode, sink: o.Sink, schemaVersion: version}
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrTopicClosed, t.name)
		}
		if t.ml.Terminated() {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrTopicTerminated, t.name)
		}
		if _, dup := t.producers[name]; dup {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: producer %q is already connected to %s", ErrProducerBusy, name, t.name)
		}
		var fenced []*Producer
		busy := ""
		for _, q := range t.producers {
			switch {
			case o.AccessMode == AccessExclusiveWithFencing:
				fenced = append(fenced, q)
			case q.mode != AccessShared:
				busy = fmt.Sprintf("topic %s has an exclusive producer (%s)", t.name, q.name)
			case o.AccessMode != AccessShared:
				busy = fmt.Sprintf("topic %s has shared producers", t.name)
			}
		}
		if busy != "" && o.AccessMode == AccessWaitForExclusive {
			w := make(chan struct{})
			t.waiting = append(t.waiting, w)
			t.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if busy != "" {
			t.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrProducerBusy, busy)
		}
		for _, q := range fenced {
			q.closed = true
			delete(t.producers, q.name)
		}
		t.producers[name] = p
		t.mu.Unlock()
		for _, q := range fenced {
			q.sink.Closed()
		}
		t.log.Debug("producer added", "producer", name, "access-mode", o.AccessMode)
		return p, nil
	}
}

// Name is the producer's name.
func (p *Producer) Name() string { return p.name }

// SchemaVersion is the version of the producer's schema, -1 if none.
func (p *Producer) SchemaVersion() SchemaVersion { return p.schemaVersion }

// LastSequenceID is the highest sequence id stored for the producer's
// name (deduplication), -1 if unknown or deduplication is off.
func (p *Producer) LastSequenceID() int64 {
	t := p.topic
	t.dedupMu.Lock()
	defer t.dedupMu.Unlock()
	if t.dedup == nil {
		return -1
	}
	return t.dedup.persistedSeq(p.name)
}

// Close detaches the producer (the client closed it).
func (p *Producer) Close() {
	t := p.topic
	t.mu.Lock()
	defer t.mu.Unlock()
	p.closeLocked()
}

func (p *Producer) closeLocked() {
	t := p.topic
	if p.closed {
		return
	}
	p.closed = true
	if t.producers[p.name] == p {
		delete(t.producers, p.name)
	}
	for _, w := range t.waiting {
		close(w)
	}
	t.waiting = nil
}

// disconnect closes the producer from the broker's side.
func (p *Producer) disconnect() {
	p.Close()
	p.sink.Closed()
}

// PublishRequest is one SEND: an entry of Messages messages (a batch if
// more than one), Data being the stored form (see ParseEntry).
type PublishRequest struct {
	SequenceID        int64 // first sequence id of the entry
	HighestSequenceID int64 // last sequence id of the entry (≥ SequenceID)
	Messages          int32
	Data              []byte // the caller's again when Publish returns
	// Framed, if set, is Data with ledger.AppendRoom free bytes in front
	// of it: the entry is stored in place (ledger.AppendInPlace), and
	// Framed is the topic's from then on.
	Framed []byte
	// FramedTail is what the caller knows of Framed's checksum: a Pulsar
	// SEND's verified CRC-32C of its metadata and payload, which the
	// stored entry's checksum is combined from (ledger.TailCRC).
	FramedTail ledger.TailCRC
}

// PublishResult is the outcome of a publish.
type PublishResult struct {
	ID     MessageID // the entry's id (BatchIndex -1)
	Offset int64     // the entry's first message offset
	// Duplicate: the message was already stored (deduplication) and was
	// not stored again; ID is then {-1,-1}.
	Duplicate bool
	Err       error
}

// Publish stores an entry. done is called once, in Publish order per
// topic, on an internal goroutine; it must not block.
func (p *Producer) Publish(req PublishRequest, done func(PublishResult)) {
	t := p.topic
	partition := int32(t.name.Partition)
	t.mu.Lock()
	closed := p.closed
	t.mu.Unlock()
	if closed {
		done(PublishResult{Err: fmt.Errorf("%w: producer %s on %s", ErrTopicClosed, p.name, t.name)})
		return
	}
	if req.HighestSequenceID < req.SequenceID {
		req.HighestSequenceID = req.SequenceID
	}
	t.dedupMu.Lock()
	d := t.dedup
	if d != nil {
		switch d.check(p.name, req.SequenceID) {
		case dupStored:
			t.dedupMu.Unlock()
			done(PublishResult{ID: MessageID{Position: ledger.Position{Ledger: -1, Entry: -1}, BatchIndex: -1, Partition: partition}, Offset: -1, Duplicate: true})
			return
		case dupInFlight:
			t.dedupMu.Unlock()
			done(PublishResult{Err: fmt.Errorf("%w: producer %s sequence id %d on %s", ErrDuplicateUnknown, p.name, req.SequenceID, t.name)})
			return
		}
		d.pushed[p.name] = req.HighestSequenceID
	}
	name, highest := p.name, req.HighestSequenceID
	msgs, size := int64(req.Messages), int64(len(req.Data))
	stored := func(pos ledger.Position, offset int64, err error) {
		if d != nil {
			t.dedupMu.Lock()
			if err == nil {
				d.stored(name, highest, pos)
			} else {
				d.failed(name)
			}
			t.dedupMu.Unlock()
		}
		if errors.Is(err, ledger.ErrTerminated) {
			err = fmt.Errorf("%w: %s: %w", ErrTopicTerminated, t.name, err)
		}
		if err != nil {
			t.appendFailed(err)
			done(PublishResult{Err: err})
			return
		}
		p.in.add(t.b.cfg.Clock, msgs, size)
		t.in.add(t.b.cfg.Clock, msgs, size)
		t.entriesAdded.Add(1)
		done(PublishResult{ID: MessageID{Position: pos, BatchIndex: -1, Partition: partition}, Offset: offset})
	}
	if req.Framed != nil {
		t.ml.AppendInPlace(req.Framed, req.FramedTail, ledger.FormatPulsar, req.Messages, stored)
	} else {
		t.ml.Append(req.Data, ledger.FormatPulsar, req.Messages, stored)
	}
	t.dedupMu.Unlock()
}

// dedupCursor is the durable cursor that stores the producers' last
// sequence ids in its properties (Pulsar's name for it). It is not a
// subscription.
const dedupCursor = "pulsar.dedup"

type dupStatus int

const (
	dupNew dupStatus = iota
	dupStored
	dupInFlight
)

// dedupState tracks, per producer name, the highest sequence id handed to
// the log (pushed) and the highest stored (persisted). A snapshot of
// persisted is written as the properties of the dedup cursor, its
// mark-delete position being the last entry it covers; on load the
// entries after it are read to bring it up to date.
type dedupState struct {
	t         *Topic
	cursor    *ledger.Cursor
	pushed    map[string]int64
	persisted map[string]int64
	since     int // entries stored since the last snapshot
}

func loadDedup(ctx context.Context, t *Topic) (*dedupState, error) {
	c, err := t.ml.OpenCursor(ctx, dedupCursor, ledger.StartLatest)
	if err != nil {
		return nil, err
	}
	d := &dedupState{t: t, cursor: c, pushed: map[string]int64{}, persisted: map[string]int64{}}
	for name, v := range c.Properties() {
		if seq, err := strconv.ParseInt(v, 10, 64); err == nil {
			d.persisted[name] = seq
		}
	}
	replayed, err := replay(ctx, c, func(e ledger.Entry) bool {
		if e.Header.Format != ledger.FormatPulsar {
			return false
		}
		md, _, err := ParseEntry(e.Payload)
		if err != nil || md.ProducerName == nil {
			return false
		}
		seq := int64(md.GetSequenceId())
		if md.HighestSequenceId != nil && int64(md.GetHighestSequenceId()) > seq {
			seq = int64(md.GetHighestSequenceId())
		}
		if seq > d.persisted[md.GetProducerName()] || !d.has(md.GetProducerName()) {
			d.persisted[md.GetProducerName()] = seq
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	maps := d.persisted
	for k, v := range maps {
		d.pushed[k] = v
	}
	t.log.Info("deduplication state loaded", "producers", len(d.persisted), "entries-replayed", replayed)
	return d, nil
}

// replay passes every entry after c's read position to fn, which says
// whether it used it; it returns how many it used. On error the cursor
// is closed.
func replay(ctx context.Context, c *ledger.Cursor, fn func(ledger.Entry) bool) (int, error) {
	used := 0
	for {
		es, err := c.ReadEntries(ctx, 256)
		if err != nil {
			c.Close(ctx)
			return used, err
		}
		if len(es) == 0 {
			return used, nil
		}
		for _, e := range es {
			if fn(e) {
				used++
			}
		}
	}
}

func (d *dedupState) has(name string) bool { _, ok := d.persisted[name]; return ok }

func (d *dedupState) persistedSeq(name string) int64 {
	if v, ok := d.persisted[name]; ok {
		return v
	}
	return -1
}

func (d *dedupState) check(name string, seq int64) dupStatus {
	if seq < 0 {
		return dupNew
	}
	pushed, ok := d.pushed[name]
	if !ok || seq > pushed {
		return dupNew
	}
	if v, ok := d.persisted[name]; ok && seq <= v {
		return dupStored
	}
	return dupInFlight
}

// stored records a stored entry; every DedupSnapshotInterval entries the
// state is written as the dedup cursor's properties.
func (d *dedupState) stored(name string, highest int64, pos ledger.Position) {
	if highest > d.persistedSeq(name) {
		d.persisted[name] = highest
	}
	d.since++
	if d.since < d.t.b.cfg.DedupSnapshotInterval {
		return
	}
	d.since = 0
	d.snapshot(pos)
}

func (d *dedupState) snapshot(pos ledger.Position) {
	props := make(map[string]string, len(d.persisted))
	for k, v := range d.persisted {
		props[k] = strconv.FormatInt(v, 10)
	}
	if err := d.cursor.MarkDelete(pos, props); err != nil {
		d.t.log.Warn("deduplication snapshot not stored; the entries after the previous one are read on load", "err", err)
	}
}

// failed: an append failed, so the sequence ids pushed after the last
// stored one may be sent again.
func (d *dedupState) failed(name string) {
	d.pushed[name] = d.persistedSeq(name)
}

func (d *dedupState) close(ctx context.Context) error {
	if lc := d.t.ml.LastConfirmed(); lc.Entry >= 0 && d.since > 0 {
		d.snapshot(lc)
	}
	return d.cursor.Close(ctx)
}
