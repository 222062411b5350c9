package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	bookieentry "github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/meta"
)

// maxOpenAttempts bounds the compare-and-set races Open retries when
// another broker changes the list meanwhile.
const maxOpenAttempts = 10

// open reads the list, recovers the ledgers left open (fencing their
// writer), starts a new ledger and stores the list by compare-and-set.
// On a version conflict (another broker changed the list since it was
// read — it is opening the managed ledger too, or was writing it) it reads
// the list again and recovers again: the last to open wins, and every
// earlier owner is fenced.
func open(ctx context.Context, f *Factory, name, path string, opts []OpenOption) (_ *ManagedLedger, err error) {
	cfg := &f.cfg
	ml := &ManagedLedger{name: name, path: path, f: f, cfg: cfg,
		log: cfg.Logger.With("component", "managed-ledger", "name", name),
		ops: make(chan struct{}, 1), readers: make(map[int64]LedgerReader),
		cursors: make(map[string]*Cursor), cursorOps: make(chan struct{}, 1)}
	for _, o := range opts {
		o(ml) // before the first ledger is created: it may use them
	}
	var w LedgerWriter // created once, reused across attempts
	defer func() {
		if err != nil && w != nil {
			w.Close(ctx)
			ml.deleteLedgers(ctx, w.ID())
		}
	}()
	for attempt := 1; ; attempt++ {
		list, version, err := readList(ctx, cfg.Meta, path)
		if err != nil {
			return nil, fmt.Errorf("ledger: opening managed ledger %s: %w", name, err)
		}
		ledgers, next, drop, err := ml.recoverList(ctx, &list)
		if err != nil {
			return nil, fmt.Errorf("ledger: opening managed ledger %s: %w", name, err)
		}
		ml.ledgers, ml.version = ledgers, version
		var last *ledger
		for _, l := range ledgers {
			if l.entries > 0 {
				last = l
			}
		}
		ml.nextOffset, ml.confirmedNext = next, next
		if last != nil {
			ml.lastConfirmed = Position{last.id, last.entries - 1}
			ml.lastPubMs = last.lastPubMs
		}
		if list.State == stateTerminated {
			ml.state, ml.stateErr = mlTerminated, fmt.Errorf("%w: %s", ErrTerminated, name)
			ml.terminatedAt = *list.TerminatedAt
			if len(drop) > 0 {
				return nil, fmt.Errorf("%w: %s: terminated, with ledgers to recover", ErrCorrupt, path)
			}
			break
		}
		if w == nil {
			if w, err = cfg.Bookies.CreateLedger(ctx, ml.ledgerOptions()); err != nil {
				return nil, fmt.Errorf("ledger: opening managed ledger %s: creating a ledger: %w", name, err)
			}
		}
		cur := &current{l: &ledger{id: w.ID(), firstOffset: next}, w: w, created: cfg.Clock()}
		ml.ledgers = append(ml.ledgers, cur.l)
		if last == nil {
			ml.lastConfirmed = Position{cur.l.id, -1}
		}
		l, v := ml.listLocked()
		b, err := encodeList(l)
		if err != nil {
			return nil, err
		}
		st, err := cfg.Meta.Set(ctx, path, b, v)
		if errors.Is(err, meta.ErrBadVersion) && attempt < maxOpenAttempts {
			ml.log.Info("ledger list changed while opening; reading it again")
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ledger: opening managed ledger %s: storing the ledger list: %w", name, err)
		}
		ml.version, ml.cur = st.Version, cur
		ml.deleteLedgers(ctx, drop...)
		break
	}
	ml.cacheID = cfg.Cache.NewID()
	ml.life, ml.cancel = context.WithCancel(context.Background())
	if ml.cur != nil {
		ml.rollTimer = time.AfterFunc(cfg.MaxLedgerAge, ml.checkAge)
	}
	ml.log.Info("managed ledger opened", "ledgers", len(ml.ledgers), "nextOffset", ml.nextOffset,
		"lastConfirmed", ml.lastConfirmed, "terminated", ml.state == mlTerminated)
	return ml, nil
}

// recoverList turns the stored list into ledgers, all closed: a ledger
// the list has open is recovered (fenced and closed on its bookies), and
// its counts come from the recovery and from the headers of its first and
// last entries — the only reads opening needs. Empty ledgers are dropped
// (returned to be deleted once the list without them is stored). A
// ledger written ahead of its predecessor's end — possible only when an
// append failed and the owner died before it reset — was never confirmed
// to anyone and is dropped with every ledger after it.
//
// It returns the ledgers kept, the offset after the last message, and the
// ledgers to delete.
func (ml *ManagedLedger) recoverList(ctx context.Context, list *storedList) ([]*ledger, int64, []int64, error) {
	var out []*ledger
	var drop []int64
	next := int64(0)
	prevOpen := false
	for i, s := range list.Ledgers {
		l := &ledger{id: s.LedgerID, closed: s.Closed, closedWriter: s.Closed, entries: s.Entries, size: s.Size,
			messages: s.Messages, firstOffset: s.FirstOffset, firstPubMs: s.FirstPublishTime, lastPubMs: s.LastPublishTime}
		if i == 0 && l.firstOffset >= 0 {
			next = l.firstOffset
		}
		if l.firstOffset < 0 {
			l.firstOffset = next
		}
		if !s.Closed {
			inconsistent, err := ml.recoverLedger(ctx, l, prevOpen)
			if err != nil {
				return nil, 0, nil, err
			}
			if inconsistent {
				ml.log.Warn("dropping ledgers written past a failed append", "from", l.id)
				for _, x := range list.Ledgers[i:] {
					drop = append(drop, x.LedgerID)
				}
				break
			}
		}
		prevOpen = !s.Closed
		if l.firstOffset != next {
			return nil, 0, nil, fmt.Errorf("%w: %s: ledger %d starts at offset %d, its predecessor ends at %d",
				ErrCorrupt, ml.path, l.id, l.firstOffset, next)
		}
		next = l.nextOffset()
		if l.entries == 0 && list.State != stateTerminated {
			drop = append(drop, l.id)
			continue
		}
		out = append(out, l)
	}
	return out, next, drop, nil
}

// recoverLedger recovers ledger l and fills in its counts. It reports
// inconsistent when its first entry does not continue its predecessor and
// the predecessor was open too (see recoverList).
func (ml *ManagedLedger) recoverLedger(ctx context.Context, l *ledger, prevOpen bool) (inconsistent bool, err error) {
	r, err := ml.cfg.Bookies.OpenLedger(ctx, l.id, true)
	if err != nil {
		return false, fmt.Errorf("recovering ledger %d: %w", l.id, err)
	}
	ml.readers[l.id] = r
	l.entries, l.size, l.messages = r.LastAddConfirmed()+1, r.Length(), 0
	l.closed, l.closedWriter = true, true
	if l.entries == 0 {
		return false, nil
	}
	head := func(e int64) (Header, error) {
		bs, bufs, err := r.Read(ctx, e, e)
		if err != nil {
			return Header{}, fmt.Errorf("recovering ledger %d: reading entry %d: %w", l.id, e, err)
		}
		h, _, err := ParseHeader(bs[0])
		bookieentry.Recycle(bufs[0])
		if err != nil {
			return Header{}, fmt.Errorf("%w: %s: ledger %d entry %d: %v", ErrCorrupt, ml.path, l.id, e, err)
		}
		return h, nil
	}
	first, err := head(0)
	if err != nil {
		return false, err
	}
	if first.FirstOffset != l.firstOffset {
		if prevOpen {
			return true, nil
		}
		return false, fmt.Errorf("%w: %s: ledger %d entry 0 has offset %d, the list says %d",
			ErrCorrupt, ml.path, l.id, first.FirstOffset, l.firstOffset)
	}
	last := first
	if l.entries > 1 {
		if last, err = head(l.entries - 1); err != nil {
			return false, err
		}
	}
	l.messages = last.NextOffset() - l.firstOffset
	l.firstPubMs, l.lastPubMs = first.PublishTime, last.PublishTime
	l.index.add(0, first)
	l.index.add(l.entries-1, last)
	ml.log.Info("recovered ledger", "ledger", l.id, "entries", l.entries, "firstOffset", l.firstOffset,
		"nextOffset", l.nextOffset())
	return false, nil
}
