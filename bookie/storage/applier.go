package storage

import "sync"

// defaultApplyQueue bounds the applier's queue when Options.Journal.QueueSize
// is left zero (the journal's own default queue size).
const defaultApplyQueue = 10_000

// applyQueue hands durable journal records from the journal's writer
// goroutine to the applier goroutine.
//
// Invariant: the queue is FIFO; put appends under mu from the one journal
// goroutine, in the journal's done order (append order), and the applier
// takes the whole queue at once; so the applier sees journal order.
//
// The queue is bounded: put blocks while limit records wait, which holds
// up the journal (and through its queue the appenders) when apply falls
// behind the disk, instead of queueing without bound.
type applyQueue struct {
	mu       sync.Mutex
	reqs     []applyReq
	limit    int
	closed   bool
	notEmpty sync.Cond // on mu: put made the queue non-empty, or close
	notFull  sync.Cond // on mu: take emptied the queue, or close
	stopped  chan struct{}
}

func newApplyQueue(limit int) *applyQueue {
	if limit <= 0 {
		limit = defaultApplyQueue
	}
	q := &applyQueue{limit: limit, stopped: make(chan struct{})}
	q.notEmpty.L = &q.mu
	q.notFull.L = &q.mu
	return q
}

// put queues r for the applier. After close (which only follows the
// journal's Close, so no record comes then) r is refused with ErrClosed.
func (q *applyQueue) put(r applyReq) {
	q.mu.Lock()
	for len(q.reqs) >= q.limit && !q.closed {
		q.notFull.Wait()
	}
	if q.closed {
		q.mu.Unlock()
		r.finish(&applyResult{err: ErrClosed, lac: -1, last: -1})
		return
	}
	q.reqs = append(q.reqs, r)
	if len(q.reqs) == 1 {
		q.notEmpty.Signal()
	}
	q.mu.Unlock()
}

// wait blocks until records are queued (true) or the queue is closed and
// empty (false).
func (q *applyQueue) wait() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.reqs) == 0 {
		if q.closed {
			return false
		}
		q.notEmpty.Wait()
	}
	return true
}

// take returns every queued record, replacing the queue with spare's
// (empty) backing array.
func (q *applyQueue) take(spare []applyReq) []applyReq {
	q.mu.Lock()
	defer q.mu.Unlock()
	reqs := q.reqs
	q.reqs = spare[:0]
	q.notFull.Broadcast()
	return reqs
}

// len is the number of records queued (tests).
func (q *applyQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.reqs)
}

// close makes the applier exit once the queue is empty and waits for it.
// Call it after the journal is closed: every record then is queued.
func (q *applyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.notEmpty.Broadcast()
	q.notFull.Broadcast()
	q.mu.Unlock()
	<-q.stopped
}

// runApplier is the applier goroutine: it takes what the journal queued,
// applies it (applyAll: entry logs, one index batch per segment, ledger
// states, applied) and calls the done callbacks, in journal order, while
// the journal writes and syncs the next groups. Then it starts the entry
// logs' writeback if due.
func (s *Storage) runApplier() {
	q := s.applyQ
	defer close(q.stopped)
	var spare []applyReq
	var res []applyResult
	for q.wait() {
		if hook := s.testHookApply; hook != nil {
			hook()
		}
		reqs := q.take(spare)
		res = s.applyAll(reqs, res)
		clear(reqs) // drop the entries and callbacks for the GC
		spare = reqs[:0]
		// After the acknowledgements: it may wait for the disk.
		if err := s.logs.writeback(); err != nil {
			s.fail(err)
		}
	}
}
