package meta

import "sync"

// SessionBroadcaster fans session events out to subscribers, in order,
// without dropping any and without ever blocking the publisher: each
// subscriber has its own queue drained by its own goroutine. Stores embed
// it to implement Store.SessionEvents.
type SessionBroadcaster struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	out    chan SessionEvent
	mu     sync.Mutex
	queue  []SessionEvent
	wake   chan struct{}
	done   chan struct{}
	closed bool // no more events will be queued
}

// SessionEvents implements Store.SessionEvents. After Close it returns a
// closed channel.
func (b *SessionBroadcaster) SessionEvents() (<-chan SessionEvent, func()) {
	s := &subscriber{out: make(chan SessionEvent), wake: make(chan struct{}, 1), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		close(s.out)
		return s.out, func() {}
	}
	if b.subs == nil {
		b.subs = make(map[*subscriber]struct{})
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	go s.run()
	var once sync.Once
	return s.out, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, s)
			b.mu.Unlock()
			close(s.done)
		})
	}
}

// Publish queues ev for every subscriber.
func (b *SessionBroadcaster) Publish(ev SessionEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.push(ev, false)
	}
}

// Close delivers a final SessionClosed event to every subscriber and then
// closes their channels. Later subscriptions get a closed channel.
func (b *SessionBroadcaster) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		s.push(SessionEvent{State: SessionClosed}, true)
	}
	b.subs = nil
}

func (s *subscriber) push(ev SessionEvent, last bool) {
	s.mu.Lock()
	if !s.closed {
		s.queue = append(s.queue, ev)
		s.closed = last
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) run() {
	defer close(s.out)
	for {
		s.mu.Lock()
		q, last := s.queue, s.closed
		s.queue = nil
		s.mu.Unlock()
		for _, ev := range q {
			select {
			case s.out <- ev:
			case <-s.done:
				return
			}
		}
		if last { // closed is set with the final push: q held everything
			return
		}
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
	}
}
