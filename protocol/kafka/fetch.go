package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
)

// Fetch: v4–v12.
//
// Each partition is read from the entry holding the fetch offset on,
// until its PartitionMaxBytes or the request's MaxBytes is reached (the
// first batch of the response is always whole, as in Kafka, so a large
// batch cannot stall a consumer). A Kafka entry is served as stored with
// only its base offset rewritten; a Pulsar entry is converted to one record
// batch. A batch may start before the fetch offset (clients skip the
// records they did not ask for). When fewer than MinBytes are ready, the
// request waits up to MaxWaitMillis, woken by new entries on any of its
// partitions, not by polling. Fetch sessions (v7+) are declined (session
// id 0): every request is a full fetch. Without transactions, both
// isolation levels read the same and the last stable offset is the high
// watermark.

const (
	errFetchSessionIDNotFound int16 = 70
	// maxFetchEntries bounds the entries read from a ledger at once.
	maxFetchEntries = 64
	// fetchParallelism is how many partitions of a fetch are read at once.
	fetchParallelism = 8
)

type fetchPart struct {
	name    string
	t       *broker.Topic
	req     *kmsg.FetchRequestTopicPartition
	resp    *kmsg.FetchResponseTopicPartition
	after   ledger.Position // last confirmed when read: wait for entries after it
	fixed   bool            // answered with an error: not read again
	recs    records         // the record batches read (resp.RecordBatches stays empty)
	served  int64           // messages from the fetch offset on in recs
	next    int64           // the offset after recs
	ahead   int64           // where a read-ahead would start: next, or after the entries held from there (readAhead.hold)
	entries int             // entries in recs
}

func handleFetch(c *conn, sl *slot, kreq kmsg.Request) {
	req := kreq.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	if req.SessionID != 0 {
		resp.ErrorCode = errFetchSessionIDNotFound
		sl.finish(resp)
		return
	}
	wait := time.Duration(max(req.MaxWaitMillis, 0)) * time.Millisecond
	ctx, cancel := context.WithTimeout(c.ctx, wait+requestTimeout)
	var parts []*fetchPart
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		t := &resp.Topics[i]
		*t = kmsg.NewFetchResponseTopic()
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		name, nameErr := c.s.b.KafkaTopicName(rt.Topic)
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			p := &t.Partitions[j]
			*p = kmsg.NewFetchResponseTopicPartition()
			p.Partition = rp.Partition
			fp := &fetchPart{name: rt.Topic, req: rp, resp: p}
			parts = append(parts, fp)
			if nameErr != nil {
				p.ErrorCode, fp.fixed = errCode(nameErr), true
				continue
			}
			tp, err := c.s.b.KafkaPartition(ctx, name, rp.Partition)
			if err != nil {
				p.ErrorCode, fp.fixed = errCode(err), true
				continue
			}
			fp.t = tp
		}
	}
	go func() {
		defer cancel()
		answered := false
		defer func() {
			if r := recover(); r != nil {
				// As conn.handle does for the handlers' own goroutines: a
				// bug must not take the broker down.
				c.log.Error("Kafka fetch panicked; closing the connection", "panic", r)
				c.nc.Close()
				if !answered {
					sl.abandon()
				}
			}
		}()
		c.s.fetch(ctx, c, req, parts, c.s.cfg.Clock().Add(wait))
		recs := make([]*records, len(parts))
		for i, fp := range parts {
			if fp.t != nil && fp.served > 0 && fp.recs.size > 0 {
				fp.t.KafkaServed(fp.served, int64(fp.recs.size))
				if fp.ahead < fp.resp.HighWatermark {
					// Behind: read on while this response is written and
					// decoded (readahead.go).
					c.s.ahead.start(fp.t, fp.ahead, fp.entries, int64(fp.recs.size))
				}
			}
			recs[i] = &fp.recs
		}
		answered = true
		sl.finishFetch(resp, recs)
	}()
}

// fetch reads the partitions until MinBytes are ready, an error is to be
// reported, or the deadline passes.
func (s *Server) fetch(ctx context.Context, c *conn, req *kmsg.FetchRequest, parts []*fetchPart, deadline time.Time) {
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = s.cfg.MaxRequestSize
	}
	for {
		// Partitions are read fetchParallelism at a time (reads that miss
		// the cache wait on the bookies), each within its own and the
		// request's limit, until the request's MaxBytes is read; then, in
		// request order, what exceeds MaxBytes is dropped (the first
		// partition with data is always kept whole).
		errsOf := make([]error, len(parts))
		for _, fp := range parts {
			fp.recs.clear()
			fp.recs.dropRead() // a round before this one's, no longer served
			fp.served, fp.entries = 0, 0
		}
		read := 0
		for i := 0; i < len(parts) && read < maxBytes; {
			var wg sync.WaitGroup
			wave := parts[i:min(i+fetchParallelism, len(parts))]
			for j, fp := range wave {
				if fp.fixed {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() {
						if r := recover(); r != nil {
							c.log.Error("Kafka fetch: reading a partition panicked", "topic", fp.name, "partition", fp.req.Partition, "panic", r)
							errsOf[i+j] = fmt.Errorf("internal error reading the partition: %v", r)
						}
					}()
					errsOf[i+j] = s.readPartition(ctx, fp, maxBytes)
				}()
			}
			wg.Wait()
			for _, fp := range wave {
				read += fp.recs.size
			}
			i += len(wave)
		}
		total, errs := 0, false
		for i, fp := range parts {
			if fp.fixed {
				errs = errs || fp.resp.ErrorCode != 0
				continue
			}
			if err := errsOf[i]; err != nil {
				fp.resp.ErrorCode, fp.fixed = errCode(err), true
				fp.recs.release()
				if fp.resp.ErrorCode == errUnknownServer {
					c.log.Warn("Fetch failed", "topic", fp.name, "partition", fp.req.Partition, "err", err)
				}
				errs = true
				continue
			}
			n := fp.recs.size
			if total > 0 && total+n > maxBytes {
				fp.recs.clear() // over the request's limit: next time
				fp.served, fp.entries, n = 0, 0, 0
			}
			total += n
		}
		left := deadline.Sub(s.cfg.Clock())
		if total >= int(req.MinBytes) || total > 0 && errs || left <= 0 || ctx.Err() != nil {
			return
		}
		if errs && total == 0 && allFixed(parts) {
			return
		}
		s.waitNew(ctx, parts, left)
	}
}

func allFixed(parts []*fetchPart) bool {
	for _, fp := range parts {
		if !fp.fixed {
			return false
		}
	}
	return true
}

// waitNew waits until a partition has an entry after the one it last saw,
// or d passes.
func (s *Server) waitNew(ctx context.Context, parts []*fetchPart, d time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	woke := make(chan struct{}, 1)
	for _, fp := range parts {
		if fp.fixed {
			continue
		}
		go func(ml *ledger.ManagedLedger, after ledger.Position) {
			if ml.WaitNewEntries(wctx, after) == nil || wctx.Err() == nil {
				select {
				case woke <- struct{}{}:
				default:
				}
			}
		}(fp.t.ManagedLedger(), fp.after)
	}
	select {
	case <-woke:
	case <-wctx.Done():
	}
}

// readPartition fills fp.recs with the record batches from the fetch
// offset on, within budget bytes but at least one batch (the fetch drops
// what exceeds the request's MaxBytes), and fp.resp with the partition's
// offsets.
func (s *Server) readPartition(ctx context.Context, fp *fetchPart, budget int) error {
	ml := fp.t.ManagedLedger()
	fp.after = ml.LastConfirmed()
	hw := ml.NextOffset()
	start := ml.FirstOffset()
	p := fp.resp
	p.HighWatermark, p.LastStableOffset, p.LogStartOffset = hw, hw, start
	r := &fp.recs
	r.clear()
	off := fp.req.FetchOffset
	if off < start || off > hw {
		return fmt.Errorf("%w: offset %d, the partition holds %d..%d", ledger.ErrOffsetOutOfRange, off, start, hw)
	}
	budget = min(budget, int(fp.req.PartitionMaxBytes))
	// Entries are read a few at a time, more as they prove small: a
	// batch of a MiB fills the budget alone. Entries read past the budget
	// are held for the fetch that goes on from them (readAhead.hold), so
	// that none is read twice.
	fp.entries = 0
	fp.ahead = -1
	full := false
	for n := 1; !full && off < hw && r.size < budget; n = min(2*n, maxFetchEntries) {
		var es []ledger.Entry
		var err error
		if got, ok := s.ahead.take(ctx, fp.t, off); ok {
			es, n = got, len(got)
		}
		if es == nil {
			es, err = s.ahead.readAt(ctx, fp.t, off, n)
		}
		if err != nil {
			releaseEntries(es) // read before the error, not kept
			if r.size > 0 {
				break // serve what was read; the error comes back next time
			}
			return err
		}
		if len(es) == 0 {
			break
		}
		r.read = append(r.read, es...)
		// One growth of the own buffer for the round instead of
		// doublings by append; when it must grow, with room for the next
		// round too (twice as many entries) within the budget, so that a
		// round rarely copies what the earlier ones added.
		need := 0
		for _, e := range es {
			if e.Header.Format == ledger.FormatKafka && len(e.Payload) >= borrowMin {
				need += 8 // only the base offset: the batch is written from the entry
			} else {
				need += len(e.Payload)
			}
		}
		if cap(r.own)-len(r.own) < need {
			r.reserve(max(need, min(3*need, budget-r.size)))
		}
		used := 0
		for _, e := range es {
			before := r.mark()
			switch e.Header.Format {
			case ledger.FormatKafka:
				r.addBatch(e.Payload, e.Header.FirstOffset)
			default:
				from := len(r.own)
				var cerr error
				r.own, _, cerr = broker.AppendPulsarAsKafka(r.own, e.Payload, e.Header.FirstOffset, e.Header.PublishTime, s.cfg.MaxRequestSize)
				r.ownAdded(from)
				if cerr != nil {
					// Encrypted, chunked or marker messages have no Kafka
					// form: skipped, leaving a gap in the offsets (which
					// clients allow, as on compacted topics).
					s.log.Warn("Fetch: a Pulsar entry cannot be served to Kafka clients; skipped",
						"topic", fp.name, "partition", fp.req.Partition, "entry", e.Position.String(),
						"offsets", fmt.Sprintf("%d..%d", e.Header.FirstOffset, e.Header.NextOffset()-1), "err", cerr)
					r.reset(before)
				}
			}
			if r.size > budget && before.size > 0 {
				r.reset(before)
				full = true
				break
			}
			off = e.Header.NextOffset()
			fp.entries++
			used++
			fp.t.SetKafkaReadHint(off, ml.Next(e.Position))
			if r.size >= budget {
				break
			}
		}
		if left := es[used:]; len(left) > 0 {
			// Read past the budget: kept for the fetch that goes on from
			// here, not read again by it.
			r.read = r.read[:len(r.read)-len(left)]
			if s.ahead.hold(fp.t, left) {
				fp.ahead = left[len(left)-1].Header.NextOffset()
			}
		}
	}
	fp.served, fp.next = 0, off
	if fp.ahead < 0 {
		fp.ahead = off // nothing held: a read-ahead goes on from here
	}
	if r.size > 0 {
		fp.served = off - fp.req.FetchOffset
	}
	return nil
}

// readAt reads up to n entries of t from the one holding offset: from
// where a read left off if one ended at offset (its read hint), else by
// searching; it leaves a read hint where it ends, for whoever reads on
// from there (a fetch, or the read-ahead after it). Fetches and
// read-aheads read through it.
func (ra *readAhead) readAt(ctx context.Context, t *broker.Topic, offset int64, n int) ([]ledger.Entry, error) {
	ml := t.ManagedLedger()
	es, err := func() ([]ledger.Entry, error) {
		if pos, ok := t.KafkaReadHint(offset); ok {
			es, err := ml.Read(ctx, pos, n)
			ra.entriesRead.Add(int64(len(es)))
			if err == nil && len(es) > 0 && es[0].Header.FirstOffset == offset {
				return es, nil
			}
			releaseEntries(es)
		}
		es, err := ml.ReadOffset(ctx, offset, n)
		ra.entriesRead.Add(int64(len(es)))
		return es, err
	}()
	if err == nil && len(es) > 0 {
		last := es[len(es)-1]
		t.SetKafkaReadHint(last.Header.NextOffset(), ml.Next(last.Position))
	}
	return es, err
}
