package ledger

import (
	"context"
	"fmt"
	"sort"
	"time"

	bookieentry "github.com/magnetar-io/magnetar/bookie/entry"
)

// The message index. Offsets and publish times only grow along a managed
// ledger, so finding the entry for an offset or a time is a search over
// in-memory tables, narrowed step by step:
//
//  1. the ledger list: each ledger's first offset, message count and
//     first/last publish time (stored in the list, so known after a
//     restart without reading anything);
//  2. the ledger's sparse index: the header of every indexEvery-th entry,
//     recorded as appends are confirmed, plus the headers read by earlier
//     searches;
//  3. a binary search over the entries left between two index points,
//     reading headers — from the cache (recent entries are there) and
//     otherwise from the bookies: log2(indexEvery) reads at most for
//     ledgers written by this process, log2(entries) for older ones, whose
//     probes are kept as index points so later searches get cheaper.

// EntryInfo locates an entry: its position and header.
type EntryInfo struct {
	Position Position
	Header   Header
}

// indexPoint is an entry's header, known without reading it.
type indexPoint struct {
	entry int64
	h     Header
}

// sparseIndex is a ledger's known headers, sorted by entry.
type sparseIndex struct{ points []indexPoint }

// maxLearned bounds the probe results kept per ledger beyond the points
// recorded on append.
const maxLearned = 1024

func (x *sparseIndex) add(entry int64, h Header) {
	i := sort.Search(len(x.points), func(i int) bool { return x.points[i].entry >= entry })
	if i < len(x.points) && x.points[i].entry == entry {
		return
	}
	x.points = append(x.points, indexPoint{})
	copy(x.points[i+1:], x.points[i:])
	x.points[i] = indexPoint{entry, h}
}

// bounds narrows the search for the first entry satisfying pred (false
// then true along the ledger) to [lo, hi]; when hi < n the header of hi
// is known and returned.
func (x *sparseIndex) bounds(n int64, pred func(Header) bool) (lo, hi int64, hiH Header) {
	i := sort.Search(len(x.points), func(i int) bool { return pred(x.points[i].h) })
	lo, hi = 0, n
	if i < len(x.points) {
		hi, hiH = x.points[i].entry, x.points[i].h
	}
	if i > 0 {
		lo = x.points[i-1].entry + 1
	}
	return lo, hi, hiH
}

// FindOffset returns the entry holding message offset. ErrOffsetOutOfRange
// unless FirstOffset ≤ offset < NextOffset.
func (ml *ManagedLedger) FindOffset(ctx context.Context, offset int64) (EntryInfo, error) {
	ml.mu.Lock()
	first, next := ml.firstOffsetLocked(), ml.confirmedNext
	if offset < first || offset >= next {
		ml.mu.Unlock()
		return EntryInfo{}, fmt.Errorf("%w: managed ledger %s: offset %d, stored %d..%d",
			ErrOffsetOutOfRange, ml.name, offset, first, next-1)
	}
	i := sort.Search(len(ml.ledgers), func(i int) bool { return ml.ledgers[i].nextOffset() > offset })
	l := ml.ledgers[i]
	ml.mu.Unlock()
	info, err := ml.search(ctx, l, func(h Header) bool { return h.NextOffset() > offset })
	if err == nil && info.Header.FirstOffset > offset {
		err = fmt.Errorf("%w: managed ledger %s: ledger %d entry %d starts at offset %d, looking for %d",
			ErrCorrupt, ml.name, l.id, info.Position.Entry, info.Header.FirstOffset, offset)
	}
	return info, err
}

// FindTime returns the first entry published at or after t.
// ErrOffsetOutOfRange if every stored entry is older.
func (ml *ManagedLedger) FindTime(ctx context.Context, t time.Time) (EntryInfo, error) {
	ms := t.UnixMilli()
	ml.mu.Lock()
	var l *ledger
	for _, x := range ml.ledgers {
		if x.entries > 0 && x.lastPubMs >= ms {
			l = x
			break
		}
	}
	ml.mu.Unlock()
	if l == nil {
		return EntryInfo{}, fmt.Errorf("%w: managed ledger %s: no entry published at or after %d ms",
			ErrOffsetOutOfRange, ml.name, ms)
	}
	return ml.search(ctx, l, func(h Header) bool { return h.PublishTime >= ms })
}

// search finds the first confirmed entry of l whose header satisfies
// pred, which must hold for its last confirmed entry.
func (ml *ManagedLedger) search(ctx context.Context, l *ledger, pred func(Header) bool) (EntryInfo, error) {
	ml.mu.Lock()
	n := l.entries
	lo, hi, hiH := l.index.bounds(n, pred)
	ml.mu.Unlock()
	for lo < hi {
		mid := lo + (hi-lo)/2
		h, err := ml.header(ctx, l.id, mid)
		if err != nil {
			return EntryInfo{}, err
		}
		ml.mu.Lock()
		if len(l.index.points) < int(l.entries/indexEvery)+maxLearned {
			l.index.add(mid, h)
		}
		ml.mu.Unlock()
		if pred(h) {
			hi, hiH = mid, h
		} else {
			lo = mid + 1
		}
	}
	if hi >= n {
		return EntryInfo{}, fmt.Errorf("%w: managed ledger %s: ledger %d: no entry found where one should be",
			ErrCorrupt, ml.name, l.id)
	}
	return EntryInfo{Position{l.id, hi}, hiH}, nil
}

// header returns the header of one entry, read as Read reads.
func (ml *ManagedLedger) header(ctx context.Context, ledgerID, entry int64) (Header, error) {
	bs, bufs, err := ml.fetch(ctx, ledgerID, entry, entry)
	if err != nil {
		return Header{}, err
	}
	h, _, err := ParseHeader(bs[0])
	if bufs != nil {
		bookieentry.Recycle(bufs[0])
	}
	if err != nil {
		return Header{}, fmt.Errorf("%w: managed ledger %s: ledger %d entry %d: %v", ErrCorrupt, ml.name, ledgerID, entry, err)
	}
	return h, nil
}
