package journal

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The syncer: a goroutine of its own makes written groups durable, as
// BookKeeper's force-write thread does. The writer writes a group and
// hands it over; while the syncer's fdatasync runs, the writer already
// gathers and writes the next groups, and the syncer's next fdatasync
// covers every group written meanwhile. A group's write no longer waits for
// the previous group's fsync, nor the fsync for the next group's write:
// with large groups (written with O_DIRECT, direct.go) the two take about
// as long each, and a journal that alternated them did half the work it can.
//
// Order and failure. The syncer calls the done callbacks, for every group
// in the order written, each after an fsync that began after the group's
// write returned (so it covers it). A group the writer failed to write
// carries its error and is handed over too, so that callbacks keep their
// order. A failed fsync fails its groups and every group after it (the
// kernel may have dropped the dirty pages: no later fsync can be trusted
// for them); the writer learns of it before its next write and refuses
// everything from then on. Before the writer moves to a new file, and
// before Close finishes the current one, it waits until the syncer has
// made every group written so far durable (drain).

// written is a group handed from the writer to the syncer.
type written struct {
	group []request
	file  vfs.File    // the file written (synced through it)
	fill  *zeroFiller // its zero filler, asked for more after a small group
	num   uint64      // its number
	path  string      // its path
	start int64       // offset of the group's first record
	bytes int         // the records' bytes
	began time.Time   // when its write began
	small bool        // written through the page cache
	err   error       // not written: the writer's failure
}

// syncer is the state shared by the writer and the syncer goroutine.
type syncer struct {
	mu      sync.Mutex
	cond    sync.Cond // on mu: a group handed over, the syncer idle, or closed
	pending []written // written, not yet taken by the syncer, in order
	ahead   int       // bytes in pending
	spare   []written // the slice the syncer last took, for reuse
	groups  [][]request
	busy    bool  // the syncer is syncing what it took
	closed  bool  // the writer stopped: exit once pending is done
	err     error // sticky: the first failed fsync, wrapping ErrFailed
	stopped chan struct{}
}

// maxWrittenAhead bounds the bytes written and handed over that the
// syncer has not taken yet: when its fsyncs, or the done callbacks, fall
// behind, the writer waits, the queue fills and Append blocks, and what
// the journal holds stays bounded.
const maxWrittenAhead = 4 << 20

// handOver gives a written group to the syncer and returns an empty group
// slice for the writer's next one, once the syncer is less than
// maxWrittenAhead bytes behind.
func (s *syncer) handOver(w written) []request {
	s.mu.Lock()
	s.pending = append(s.pending, w)
	s.ahead += w.bytes
	var g []request
	if n := len(s.groups); n > 0 {
		g, s.groups = s.groups[n-1], s.groups[:n-1]
	}
	s.cond.Broadcast()
	for s.ahead >= maxWrittenAhead {
		s.cond.Wait()
	}
	s.mu.Unlock()
	return g
}

// failure returns the fsync failure, if any.
func (s *syncer) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// drain waits until every group handed over is synced and its callbacks
// called, and returns the fsync failure, if any.
func (s *syncer) drain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) > 0 || s.busy {
		s.cond.Wait()
	}
	return s.err
}

// stop lets the syncer finish what was handed over and waits for it to
// exit. The writer calls it once, when it stops.
func (s *syncer) stop() {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.stopped
}

// take waits for groups to sync and takes them all; nil once stopped with
// nothing left.
func (s *syncer) take() []written {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) == 0 && !s.closed {
		s.cond.Wait()
	}
	if len(s.pending) == 0 {
		return nil
	}
	ws := s.pending
	s.pending, s.spare = s.spare[:0], nil
	s.ahead = 0
	s.busy = true
	s.cond.Broadcast() // a writer waiting in handOver
	return ws
}

// done marks the groups taken as synced, keeping their slices for reuse.
func (s *syncer) done(ws []written) {
	s.mu.Lock()
	for i := range ws {
		s.groups = append(s.groups, ws[i].group[:0])
		ws[i] = written{}
	}
	s.spare = ws[:0]
	s.busy = false
	s.cond.Broadcast()
	s.mu.Unlock()
}

// syncLoop is the syncer goroutine.
func (j *Journal) syncLoop() {
	s := &j.sync
	defer close(s.stopped)
	for {
		ws := s.take()
		if ws == nil {
			return
		}
		j.syncGroups(ws)
		s.done(ws)
	}
}

// syncGroups makes the groups ws durable with one fsync, then calls their
// callbacks in order.
func (j *Journal) syncGroups(ws []written) {
	s := &j.sync
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	// The last group written is in the file every written group is in: the
	// writer drains before it moves to the next file.
	var first, last *written
	for i := range ws {
		if ws[i].err == nil {
			if first == nil {
				first = &ws[i]
			}
			last = &ws[i]
		}
	}
	if last != nil && err == nil && !j.opts.NoSync {
		if serr := last.file.SyncData(); serr != nil {
			err = fmt.Errorf("%w: %s at offset %d: fsync: %w", ErrFailed, last.path, first.start, serr)
			j.log.Error("journal: fsync failed, refusing all further records",
				"file", last.path, "offset", first.start, "err", serr)
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		} else {
			j.syncs.Add(1)
		}
	}
	records, bytes := 0, 0
	for i := range ws {
		w := &ws[i]
		ferr := w.err
		if ferr == nil {
			ferr = err
		}
		pos := Position{File: w.num, Offset: w.start}
		for k := range w.group {
			if ferr != nil {
				callDone(w.group[k].done, Position{}, ferr)
			} else {
				pos.Offset += recordSize(len(w.group[k].body))
				callDone(w.group[k].done, pos, nil)
			}
			w.group[k] = request{}
		}
		if ferr == nil {
			records += len(w.group)
			bytes += w.bytes
			if w.small && w.fill != nil {
				w.fill.ahead()
			}
		}
	}
	if err == nil && last != nil && j.opts.OnSync != nil {
		j.opts.OnSync(time.Since(first.began), records, bytes)
	}
}
