package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// indexEvery: the sparse index records every indexEvery-th entry of a
// ledger as it is confirmed.
const indexEvery = 64

// pendingAdd is one Append, from the call to its callback.
type pendingAdd struct {
	cur       *current // nil: refused at Append
	entry     int64
	h         Header
	data      []byte // header + payload, as stored; shared with the cache once confirmed
	lacAtSend int64  // the writer's LAC was at least this when the add was sent
	done      func(Position, int64, error)
	start     time.Time // of the Append, for Config.AddLatency

	finished bool
	err      error
}

// Append adds an entry holding messages messages (≥ 1) of the given
// format, asynchronously. The managed ledger writes the entry header: the
// offset of the first message (continuing the previous entry's), the
// message count and the publish time (Config.Clock, never earlier than
// the previous entry's). payload is the caller's again when Append
// returns.
//
// done is called exactly once per Append, in Append order, with the
// entry's position and first offset, or with an error: ErrFenced,
// ErrTerminated, ErrClosed, or a bookie failure (retriable: the managed
// ledger goes on with a new ledger; the appends after a failed one fail
// too, so that confirmed offsets never have a gap). done runs on an
// internal goroutine and must not block; it may call Append.
//
// Invariant (completions ordered, offsets continuous): appends are
// assigned offsets and handed to the writer under ml.mu in call order;
// callbacks run in that order, one at a time (see deliverLocked), and a
// success is reported only when every earlier append succeeded.
func (ml *ManagedLedger) Append(payload []byte, format Format, messages int32, done func(pos Position, firstOffset int64, err error)) {
	ml.append(nil, TailCRC{}, payload, format, messages, done)
}

// AppendRoom is the room AppendInPlace wants in front of a payload: the
// bookie entry header's and the managed ledger's.
const AppendRoom = entry.HeaderSize + HeaderSize

// AppendInPlace is Append of the payload buf[AppendRoom:], with the
// headers written in the room in front of it instead of into a copy. buf
// is the managed ledger's from then on (the stored entry, kept by the
// cache): the caller must not change it. tail is what the caller knows
// of buf's checksum, if anything (the zero TailCRC). A buf shorter than
// AppendRoom, or a tail outside the payload, is an error (done).
func (ml *ManagedLedger) AppendInPlace(buf []byte, tail TailCRC, format Format, messages int32, done func(pos Position, firstOffset int64, err error)) {
	ml.append(buf, tail, nil, format, messages, done)
}

// TailCRC is what the caller of AppendInPlace may know of its buffer: the
// CRC-32C of buf[From:], from a checksum it verified (a Pulsar SEND's
// checksum covers the message's metadata and payload). The stored entry's
// checksum is then combined from it instead of read off those bytes a
// second time. The zero TailCRC knows nothing. A wrong CRC makes an entry
// the bookies refuse (the append fails), never one stored unchecked.
type TailCRC struct {
	From int // in [AppendRoom, len(buf)]; 0 when nothing is known
	CRC  uint32
}

// append is Append of payload, or in place of framed[AppendRoom:] when
// framed is set (with tail known of framed).
func (ml *ManagedLedger) append(framed []byte, tail TailCRC, payload []byte, format Format, messages int32, done func(pos Position, firstOffset int64, err error)) {
	p := &pendingAdd{done: done}
	if ml.cfg.AddLatency != nil {
		p.start = time.Now()
	}
	ml.mu.Lock()
	ml.queue = append(ml.queue, p)
	err := ml.refuseLocked()
	if err == nil && messages < 1 {
		err = fmt.Errorf("ledger: managed ledger %s: append of %d messages", ml.name, messages)
	}
	if err == nil && format != FormatPulsar && format != FormatKafka {
		err = fmt.Errorf("ledger: managed ledger %s: append in unknown %v", ml.name, format)
	}
	if err == nil && framed != nil {
		if len(framed) < AppendRoom {
			err = fmt.Errorf("ledger: managed ledger %s: append in place of %d bytes, less than the %d-byte room for headers", ml.name, len(framed), AppendRoom)
		} else if tail.From != 0 && (tail.From < AppendRoom || tail.From > len(framed)) {
			err = fmt.Errorf("ledger: managed ledger %s: append in place of %d bytes with a known checksum from %d, outside the payload", ml.name, len(framed), tail.From)
		} else {
			payload = framed[AppendRoom:]
		}
	}
	if err != nil {
		p.finished, p.err = true, err
		ml.mu.Unlock()
		go ml.deliver()
		return
	}
	c := ml.cur
	pub := max(ml.cfg.Clock().UnixMilli(), ml.lastPubMs)
	ml.lastPubMs = pub
	p.h = Header{Format: format, FirstOffset: ml.nextOffset, Messages: messages, PublishTime: pub}
	ml.nextOffset += int64(messages)
	// A writer that takes the entry in place gets room for its own header
	// in front: one copy of the payload fewer (two with framed).
	rw, inPlace := c.w.(reservingWriter)
	room := 0
	if inPlace {
		room = entry.HeaderSize
	}
	var buf []byte
	if framed != nil {
		AppendHeader(framed[:entry.HeaderSize], p.h) // fills framed[entry.HeaderSize:AppendRoom]
		buf = framed[entry.HeaderSize-room:]
	} else {
		// bytes.Join allocates without zeroing what it then copies over,
		// unlike make: zeroing a fresh 1 MiB batch's buffer cost as much
		// as copying it.
		var head [entry.HeaderSize + HeaderSize]byte
		buf = bytes.Join([][]byte{AppendHeader(head[:room], p.h), payload}, nil)
	}
	p.data = buf[room:]
	p.cur, p.entry, p.lacAtSend = c, c.sent, c.l.entries-1
	c.sent++
	c.size += int64(len(p.data))
	ml.sentPending++
	written := func(id int64, err error) { ml.completed(p, id, err) }
	switch {
	case inPlace && tail.From != 0: // only AppendInPlace passes a tail
		// buf is framed: the room for the writer's header is its start.
		rw.AppendReservedKnown(buf, tail.From, tail.CRC, written)
	case inPlace:
		rw.AppendReserved(buf, written)
	default:
		c.w.Append(p.data, written)
	}
	roll := ml.shouldRollLocked()
	ml.mu.Unlock()
	if roll {
		go ml.rollover()
	}
}

func (ml *ManagedLedger) refuseLocked() error {
	switch {
	case ml.state != mlOpen:
		return ml.stateErr
	case ml.failed != nil:
		ml.startRollLocked()
		return ml.failed
	case ml.cur == nil:
		return fmt.Errorf("ledger: managed ledger %s has no ledger to write to", ml.name)
	}
	return nil
}

// completed is the writer's callback for p.
func (ml *ManagedLedger) completed(p *pendingAdd, id int64, err error) {
	ml.mu.Lock()
	p.finished = true
	switch {
	case err != nil && isFenced(err):
		p.err = ml.fenceLocked(err)
	case err != nil:
		p.err = fmt.Errorf("ledger: managed ledger %s: ledger %d: %w", ml.name, p.cur.l.id, err)
	case id != p.entry:
		p.err = fmt.Errorf("%w: managed ledger %s: ledger %d acknowledged entry %d for entry %d",
			ErrCorrupt, ml.name, p.cur.l.id, id, p.entry)
	}
	ml.deliverLocked()
}

// deliver runs the callbacks that are ready.
func (ml *ManagedLedger) deliver() {
	ml.mu.Lock()
	ml.deliverLocked()
}

// deliverLocked, called with ml.mu held, confirms the finished appends at
// the head of the queue and runs their callbacks without the lock, until
// the head is unfinished. Only one goroutine delivers at a time (the
// others leave their finished appends to it), which keeps callbacks in
// order and one at a time. It returns with ml.mu released.
func (ml *ManagedLedger) deliverLocked() {
	if ml.delivering {
		ml.mu.Unlock()
		return
	}
	ml.delivering = true
	var batch []*pendingAdd
	for {
		batch = batch[:0]
		for len(ml.queue) > 0 && ml.queue[0].finished {
			p := ml.queue[0]
			ml.queue[0] = nil
			ml.queue = ml.queue[1:]
			ml.confirmLocked(p)
			batch = append(batch, p)
		}
		if len(batch) == 0 {
			ml.delivering = false
			ml.mu.Unlock()
			return
		}
		ml.wakeLocked()
		if ml.sentPending == 0 && ml.drained != nil {
			close(ml.drained)
			ml.drained = nil
		}
		ml.mu.Unlock()
		for _, p := range batch {
			if p.err != nil {
				p.done(Position{}, -1, p.err)
			} else {
				p.done(Position{p.cur.l.id, p.entry}, p.h.FirstOffset, nil)
			}
		}
		ml.mu.Lock()
	}
}

// confirmLocked applies a finished append, in order: a success advances
// the ledger's counts, the index and the last confirmed position; the
// first failure stops every later success (see failed).
func (ml *ManagedLedger) confirmLocked(p *pendingAdd) {
	if p.cur == nil {
		return // refused at Append
	}
	ml.sentPending--
	if p.err == nil && ml.failed != nil {
		p.err = ml.failed
	}
	if p.err != nil {
		// Fencing too: an append after a fenced one may land in a ledger
		// the new owner has not fenced yet, and must not be reported
		// successful past the gap.
		if ml.failed == nil {
			ml.failed = p.err
			if ml.state == mlOpen && !errors.Is(p.err, ErrFenced) {
				ml.log.Warn("append failed; starting a new ledger", "ledger", p.cur.l.id, "err", p.err)
				ml.startRollLocked()
			}
		}
		p.data = nil
		return
	}
	if ml.cfg.AddLatency != nil {
		ml.cfg.AddLatency.Observe(time.Since(p.start).Seconds())
	}
	l, h := p.cur.l, p.h
	l.entries++
	l.size += int64(len(p.data))
	l.messages += int64(h.Messages)
	if l.entries == 1 {
		l.firstPubMs = h.PublishTime
	}
	l.lastPubMs = h.PublishTime
	if p.entry%indexEvery == 0 {
		l.index.add(p.entry, h)
	}
	ml.lastConfirmed = Position{l.id, p.entry}
	ml.confirmedNext = h.NextOffset()
	// In the cache before any reader can see it confirmed (the insert is
	// a short, non-blocking call).
	ml.cfg.Cache.Insert(EntryKey{ML: ml.cacheID, Ledger: l.id, Entry: p.entry}, p.data)
	if !l.closedWriter {
		l.pin = append(l.pin, pinned{p.entry, p.data})
		i := 0
		for i < len(l.pin) && l.pin[i].entry <= p.lacAtSend {
			l.pin[i] = pinned{}
			i++
		}
		l.pin = l.pin[i:]
	}
}
