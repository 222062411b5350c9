package kafka

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
)

// Read-ahead for consumers catching up. A Kafka client has one fetch in
// flight per broker, and it decodes a response before sending the next
// fetch: with the broker reading from storage only once asked, the
// broker's reads and the client's decoding take turns, each leaving the
// other's CPU idle. So when a fetch leaves data behind in a partition (the
// consumer is behind its high watermark), the entries after what it
// served are read at once, while the response is written and decoded; the
// next fetch that starts at that offset takes them instead of reading.
//
// What is held is bounded: a read-ahead reads about what the fetch served
// for that partition (within its PartitionMaxBytes), the bytes held by all
// read-aheads together within Config.ReadAheadSize (none start beyond
// it), and what no fetch takes within readAheadTTL is dropped. Entries are
// immutable once read, so serving them later is serving what a read then
// would give; a fetch checks the offset range before it looks here.

// readAheadTTL is how long entries read ahead wait for the fetch that
// takes them.
const readAheadTTL = 5 * time.Second

// readAheadTimeout bounds the read of one read-ahead.
const readAheadTimeout = 10 * time.Second

type aheadKey struct {
	t      *broker.Topic
	offset int64 // of the first record the entries hold
}

// ahead is one read-ahead: entries starting at its key's offset, read by
// the time ready is closed (none if the read failed).
type ahead struct {
	ready   chan struct{}
	entries []ledger.Entry
	size    int64 // bytes reserved
	timer   *time.Timer
}

// readAhead holds the read-aheads of a server.
type readAhead struct {
	limit int64         // bytes; 0 or less: off
	ttl   time.Duration // readAheadTTL
	log   *slog.Logger

	mu    sync.Mutex
	held  map[aheadKey]*ahead
	bytes int64 // reserved by held

	entriesRead atomic.Int64 // from storage, by fetches and read-aheads (readAt)
}

func newReadAhead(limit int64, log *slog.Logger) *readAhead {
	return &readAhead{limit: limit, ttl: readAheadTTL, log: log, held: make(map[aheadKey]*ahead)}
}

// start reads n entries of t from the one starting at offset (a read hint
// of t says where it is), expecting about size bytes, unless that is
// already held or would take the read-aheads beyond their limit.
func (ra *readAhead) start(t *broker.Topic, offset int64, n int, size int64) {
	if ra.limit <= 0 || n <= 0 {
		return
	}
	k := aheadKey{t, offset}
	ra.mu.Lock()
	if _, ok := ra.held[k]; ok || ra.bytes+size > ra.limit {
		ra.mu.Unlock()
		return
	}
	a := &ahead{ready: make(chan struct{}), size: size}
	ra.insertLocked(k, a)
	ra.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), readAheadTimeout)
		defer cancel()
		defer close(a.ready)
		defer func() {
			if r := recover(); r != nil { // a bug must not take the broker down
				ra.log.Error("Kafka read-ahead panicked", "offset", offset, "panic", r)
			}
		}()
		es, err := ra.readAt(ctx, t, offset, n)
		if err == nil && len(es) > 0 && es[0].Header.FirstOffset == offset {
			a.entries = es
		} else {
			releaseEntries(es)
		}
	}()
}

// hold keeps es, entries of t a fetch read but could not serve within its
// budget, for the fetch going on from the first of them, within the
// read-aheads' limit (else they are released, and hold is false).
func (ra *readAhead) hold(t *broker.Topic, es []ledger.Entry) bool {
	var size int64
	for _, e := range es {
		size += int64(len(e.Payload))
	}
	k := aheadKey{t, es[0].Header.FirstOffset}
	ra.mu.Lock()
	if _, ok := ra.held[k]; ok || ra.limit <= 0 || ra.bytes+size > ra.limit {
		ra.mu.Unlock()
		releaseEntries(es)
		return false
	}
	a := &ahead{ready: make(chan struct{}), entries: es, size: size}
	close(a.ready)
	ra.insertLocked(k, a)
	ra.mu.Unlock()
	return true
}

// insertLocked holds a under k until a fetch takes it or the TTL passes.
func (ra *readAhead) insertLocked(k aheadKey, a *ahead) {
	ra.held[k] = a
	ra.bytes += a.size
	a.timer = time.AfterFunc(ra.ttl, func() { ra.drop(k, a) })
}

// drop forgets a if it is still held under k.
func (ra *readAhead) drop(k aheadKey, a *ahead) {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.held[k] == a {
		delete(ra.held, k)
		ra.bytes -= a.size
	}
}

// take returns the entries read ahead of t from offset, waiting for their
// read if it is under way; false if there are none.
func (ra *readAhead) take(ctx context.Context, t *broker.Topic, offset int64) ([]ledger.Entry, bool) {
	k := aheadKey{t, offset}
	ra.mu.Lock()
	a, ok := ra.held[k]
	if ok {
		delete(ra.held, k)
		ra.bytes -= a.size
		a.timer.Stop()
	}
	ra.mu.Unlock()
	if !ok {
		return nil, false
	}
	select {
	case <-a.ready:
	case <-ctx.Done():
		return nil, false
	}
	return a.entries, a.entries != nil
}
