package ledger

import (
	"context"
	"fmt"
	"sort"

	bookieentry "github.com/magnetar-io/magnetar/bookie/entry"
)

// Entry is an entry read back: its position, the header the managed
// ledger wrote and the payload the appender gave. Payload may be shared
// with the cache: it must not be modified.
type Entry struct {
	Position Position
	Header   Header
	Payload  []byte
	buf      []byte // read from a bookie for this Entry alone (Release)
}

// Release gives back the read buffer of an entry that Read read from a
// bookie for the caller alone, for later reads to reuse (sparing them
// the zeroing of a fresh buffer); it does nothing for entries from the
// cache. The caller must hold e alone, with no copy of it or slice of
// its payload in use anywhere, and must not use its Payload afterwards.
// Release clears e only: releasing a copy of an Entry and then the
// original (or another copy) would give the buffer back twice, for two
// later reads to share. Not calling Release is always safe: the buffer
// is then collected.
func (e *Entry) Release() {
	bookieentry.Recycle(e.buf)
	e.buf, e.Payload = nil, nil
}

// Read returns up to maxEntries confirmed entries from position from
// (included) on, crossing into later ledgers; none (and no error) when
// from is past LastConfirmed — WaitNewEntries then waits for more. A
// position in a ledger that is no longer in the list because it was
// trimmed is ErrOffsetOutOfRange (FirstPosition says where data starts).
//
// Entries come from the cache (recent appends are there), then from the
// tail this instance pinned, then from the bookies, one ranged read per
// run of misses. Entries read from bookies are not added to the cache, so
// that catch-up readers do not evict what tailing readers need.
func (ml *ManagedLedger) Read(ctx context.Context, from Position, maxEntries int) ([]Entry, error) {
	type span struct{ ledger, first, last int64 }
	var spans []span
	ml.mu.Lock()
	if ml.state == mlClosed {
		err := ml.stateErr
		ml.mu.Unlock()
		return nil, err
	}
	i := sort.Search(len(ml.ledgers), func(i int) bool { return ml.ledgers[i].id >= from.Ledger })
	if len(ml.ledgers) == 0 || from.Ledger < ml.ledgers[0].id {
		ml.mu.Unlock()
		return nil, fmt.Errorf("%w: managed ledger %s: position %v was trimmed", ErrOffsetOutOfRange, ml.name, from)
	}
	start := max(from.Entry, 0)
	if i < len(ml.ledgers) && ml.ledgers[i].id != from.Ledger {
		start = 0 // a ledger no longer listed (dropped empty): go on with the next
	}
	for left := int64(maxEntries); left > 0 && i < len(ml.ledgers); i++ {
		l := ml.ledgers[i]
		if start < l.entries {
			n := min(l.entries-start, left)
			spans = append(spans, span{l.id, start, start + n - 1})
			left -= n
		}
		start = 0
	}
	ml.mu.Unlock()

	var out []Entry
	for _, s := range spans {
		bs, bufs, err := ml.fetch(ctx, s.ledger, s.first, s.last)
		if err != nil {
			return out, err
		}
		for i, b := range bs {
			e := s.first + int64(i)
			h, payload, err := ParseHeader(b)
			if err != nil {
				return out, fmt.Errorf("%w: managed ledger %s: ledger %d entry %d: %v", ErrCorrupt, ml.name, s.ledger, e, err)
			}
			var buf []byte
			if bufs != nil {
				buf = bufs[i]
			}
			out = append(out, Entry{Position{s.ledger, e}, h, payload, buf})
		}
	}
	return out, nil
}

// ReadOffset reads up to maxEntries entries from the one holding message
// offset on. An offset equal to NextOffset returns no entries (nothing
// there yet); one outside FirstOffset..NextOffset is ErrOffsetOutOfRange.
func (ml *ManagedLedger) ReadOffset(ctx context.Context, offset int64, maxEntries int) ([]Entry, error) {
	if offset == ml.NextOffset() {
		return nil, nil
	}
	info, err := ml.FindOffset(ctx, offset)
	if err != nil {
		return nil, err
	}
	return ml.Read(ctx, info.Position, maxEntries)
}

// fetch returns the stored bytes (header and payload) of confirmed
// entries first..last of a ledger: from the cache, the pinned tail, then
// the bookies; and, if any came from a bookie, for each entry read from
// one the read buffer it lies in, which the caller holds alone (nil for
// the others; bufs is nil when none was read from a bookie).
func (ml *ManagedLedger) fetch(ctx context.Context, ledgerID, first, last int64) (out, bufs [][]byte, err error) {
	out = make([][]byte, last-first+1)
	missing := 0
	for i := range out {
		if b, ok := ml.cfg.Cache.Get(EntryKey{ML: ml.cacheID, Ledger: ledgerID, Entry: first + int64(i)}); ok {
			out[i] = b
		} else {
			missing++
		}
	}
	if missing == 0 {
		return out, nil, nil
	}
	ml.mu.Lock()
	var pin []pinned
	if i := sort.Search(len(ml.ledgers), func(i int) bool { return ml.ledgers[i].id >= ledgerID }); i < len(ml.ledgers) && ml.ledgers[i].id == ledgerID {
		pin = ml.ledgers[i].pin
	}
	if len(pin) > 0 {
		for i := range out {
			e := first + int64(i)
			if out[i] != nil || e < pin[0].entry || e > pin[len(pin)-1].entry {
				continue
			}
			// pin is contiguous: entries pin[0].entry, pin[0].entry+1, …
			out[i] = pin[e-pin[0].entry].data
		}
	}
	ml.mu.Unlock()
	for i := 0; i < len(out); {
		if out[i] != nil {
			i++
			continue
		}
		j := i
		for j+1 < len(out) && out[j+1] == nil {
			j++
		}
		bs, bb, err := ml.readBookies(ctx, ledgerID, first+int64(i), first+int64(j))
		if err != nil {
			return nil, nil, err
		}
		copy(out[i:], bs)
		if bufs == nil {
			bufs = make([][]byte, len(out))
		}
		copy(bufs[i:], bb)
		i = j + 1
	}
	return out, bufs, nil
}

// readBookies reads entries first..last from the bookies (LedgerReader.Read).
func (ml *ManagedLedger) readBookies(ctx context.Context, ledgerID, first, last int64) ([][]byte, [][]byte, error) {
	r, err := ml.reader(ctx, ledgerID)
	if err != nil {
		return nil, nil, err
	}
	if last > r.LastAddConfirmed() {
		// A ledger closed or written since the reader last looked.
		if _, err := r.ReadLAC(ctx); err != nil && last > r.LastAddConfirmed() {
			return nil, nil, fmt.Errorf("ledger: managed ledger %s: ledger %d: %w", ml.name, ledgerID, err)
		}
	}
	bs, bufs, err := r.Read(ctx, first, last)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: managed ledger %s: reading ledger %d entries %d..%d: %w", ml.name, ledgerID, first, last, err)
	}
	return bs, bufs, nil
}

// reader returns the (shared) reader of a ledger, opening it without
// recovery on first use.
func (ml *ManagedLedger) reader(ctx context.Context, ledgerID int64) (LedgerReader, error) {
	ml.mu.Lock()
	r := ml.readers[ledgerID]
	ml.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := ml.cfg.Bookies.OpenLedger(ctx, ledgerID, false)
	if err != nil {
		return nil, fmt.Errorf("ledger: managed ledger %s: opening ledger %d: %w", ml.name, ledgerID, err)
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if x := ml.readers[ledgerID]; x != nil {
		return x, nil
	}
	ml.readers[ledgerID] = r
	return r, nil
}
