package kafka

import (
	"context"
	"fmt"
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

// readAheadDepth is how many read-aheads follow a fetch: with one, the
// next fetch often waited for it, or read on itself where the entries
// read ahead fell short of its limit; three read a 12 GB warm consume 7 %
// faster than two (BENCHMARKS.md, twenty-seventh look).
const readAheadDepth = 3

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
	// Guarded by readAhead.mu:
	read bool  // entries and end are set
	end  int64 // the offset after the entries; -1 if the read failed
	more int   // read-aheads to start after this one once it is read
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

// start makes sure that readAheadDepth read-aheads follow offset in t,
// each of about n entries and size bytes (what the fetch ending there
// served): it goes past those held or read already, and asks one under
// way to go on once read. None starts beyond the read-aheads' limit.
func (ra *readAhead) start(t *broker.Topic, offset int64, n int, size int64) {
	ra.chain(t, offset, n, size, readAheadDepth)
}

// chain is start with depth read-aheads to make sure of.
func (ra *readAhead) chain(t *broker.Topic, offset int64, n int, size int64, depth int) {
	if ra.limit <= 0 || n <= 0 {
		return
	}
	for ; depth > 0 && offset < t.ManagedLedger().NextOffset(); depth-- {
		k := aheadKey{t, offset}
		ra.mu.Lock()
		a, ok := ra.held[k]
		switch {
		case !ok:
			if ra.bytes+size > ra.limit {
				ra.mu.Unlock()
				return
			}
			a = &ahead{ready: make(chan struct{}), size: size, more: depth - 1}
			ra.insertLocked(k, a)
			ra.mu.Unlock()
			go ra.read(k, a, n)
			return
		case !a.read:
			a.more = max(a.more, depth-1) // it goes on when read
			ra.mu.Unlock()
			return
		}
		offset = a.end
		ra.mu.Unlock()
		if offset < 0 {
			return // that read failed
		}
	}
}

// read reads a, n entries from k's offset, then the read-aheads that were
// asked to follow it.
func (ra *readAhead) read(k aheadKey, a *ahead, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), readAheadTimeout)
	defer cancel()
	var es []ledger.Entry
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil { // a bug must not take the broker down
				ra.log.Error("Kafka read-ahead panicked", "offset", k.offset, "panic", r)
				es, err = nil, fmt.Errorf("panic: %v", r)
			}
		}()
		es, err = ra.readAt(ctx, k.t, k.offset, n)
	}()
	end := int64(-1)
	var size int64
	if err == nil && len(es) > 0 && es[0].Header.FirstOffset == k.offset {
		end = es[len(es)-1].Header.NextOffset() // readAt left a read hint there
		for _, e := range es {
			size += int64(len(e.Payload))
		}
	} else {
		releaseEntries(es)
		es = nil
		ra.drop(k, a) // nothing to take
	}
	ra.mu.Lock()
	a.entries, a.end, a.read = es, end, true
	more := a.more
	ra.mu.Unlock()
	// The next one is held before a fetch waiting for this one wakes, so
	// that the fetch, going on past these entries, takes it rather than
	// reading them itself (and then again here).
	if more > 0 && end >= 0 {
		ra.chain(k.t, end, len(es), size, more)
	}
	close(a.ready)
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
	a := &ahead{ready: make(chan struct{}), entries: es, size: size, read: true, end: es[len(es)-1].Header.NextOffset()}
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
