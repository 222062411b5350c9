package zk

import (
	"errors"

	gozk "github.com/go-zookeeper/zk"

	"github.com/magnetar-io/magnetar/meta"
)

// forward turns one go-zookeeper watch channel into a meta watch channel for
// the caller's path p. go-zookeeper delivers exactly one event on a watch
// channel (on expiry or Close an EventNotWatching); the forwarder also ends
// at Close so that Close can wait for every forwarder and deliver
// EventWatchLost(ErrClosed) before it returns.
func (s *Store) forward(p string, zch <-chan gozk.Event) <-chan meta.Event {
	out := make(chan meta.Event, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		out <- meta.Event{Type: meta.EventWatchLost, Path: p, Err: meta.ErrClosed}
		close(out)
		return out
	}
	s.watches.Add(1) // under s.mu with !closed: Close's Wait comes after
	s.mu.Unlock()
	go func() {
		defer s.watches.Done()
		var ev meta.Event
		select {
		case zev, ok := <-zch:
			ev = s.translate(p, zev, ok)
		case <-s.closing:
			ev = meta.Event{Type: meta.EventWatchLost, Path: p, Err: meta.ErrClosed}
		}
		out <- ev // never blocks: out has room for the one event
		close(out)
	}()
	return out
}

// translate maps a go-zookeeper watch event to a meta.Event on path p (the
// caller's path, without chroot). ok is false if the channel was closed
// without an event.
func (s *Store) translate(p string, zev gozk.Event, ok bool) meta.Event {
	ev := meta.Event{Path: p}
	if ok {
		switch zev.Type {
		case gozk.EventNodeCreated:
			ev.Type = meta.EventCreated
			return ev
		case gozk.EventNodeDeleted:
			ev.Type = meta.EventDeleted
			return ev
		case gozk.EventNodeDataChanged:
			ev.Type = meta.EventDataChanged
			return ev
		case gozk.EventNodeChildrenChanged:
			ev.Type = meta.EventChildrenChanged
			return ev
		}
	}
	// EventNotWatching: go-zookeeper dropped its watches, with
	// ErrSessionExpired on expiry and ErrClosing on Close.
	ev.Type, ev.Err = meta.EventWatchLost, meta.ErrSessionExpired
	if errors.Is(zev.Err, gozk.ErrClosing) || s.isClosed() {
		ev.Err = meta.ErrClosed
	}
	return ev
}
