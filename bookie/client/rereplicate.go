package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/bookie/wire"
)

// Re-replication (auto-recovery's copying step, as BookKeeper's
// ReplicationWorker and LedgerFragmentReplicator do it): a fragment is the
// part of a ledger one ensemble stores. When a bookie of a fragment is
// lost, the entries it held (those whose write set includes its ensemble
// position) are copied from surviving replicas to a replacement bookie,
// and then the fragment's ensemble names the replacement instead.
//
// Invariant: the metadata names the replacement only after it holds every
// entry the lost bookie was to hold, so every entry keeps being on its
// write set as the metadata describes it.
//
// The last fragment of a ledger that is not CLOSED is left alone: its
// range is not final, its writer replaces failed bookies by ensemble
// change, and if the writer is gone whoever opens the ledger recovers it
// (recovery needs the last ensemble to stay as it is).

// copyWindow bounds the entries a copy has in flight.
const copyWindow = 64

// ParseMetadata decodes and checks a ledger metadata node's value.
func ParseMetadata(id int64, value []byte) (LedgerMetadata, error) {
	return decodeMetadata(id, value)
}

// MissingBookies returns the bookies that some ensemble of m names and
// that available does not list, sorted.
func (m *LedgerMetadata) MissingBookies(available []string) []string {
	var out []string
	for _, e := range m.Ensembles {
		for _, b := range e.Bookies {
			if !slices.Contains(available, b) && !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	slices.Sort(out)
	return out
}

// lostFragment is a fragment with lost bookies.
type lostFragment struct {
	ensemble    int   // index in LedgerMetadata.Ensembles
	first, last int64 // its entries; last < first when it has none
	positions   []int // ensemble positions of the lost bookies
}

// lostFragments returns the fragments of md whose ensemble names a bookie
// lost reports, in entry order, leaving out the last fragment of a ledger
// that is not CLOSED; deferred says whether that one names a lost bookie.
func lostFragments(md *LedgerMetadata, lost func(bookie string) bool) (frags []lostFragment, deferred bool) {
	for i, ens := range md.Ensembles {
		var positions []int
		for pos, b := range ens.Bookies {
			if lost(b) {
				positions = append(positions, pos)
			}
		}
		if len(positions) == 0 {
			continue
		}
		isLast := i == len(md.Ensembles)-1
		if isLast && md.State != StateClosed {
			deferred = true
			continue
		}
		last := md.LastEntry
		if !isLast {
			last = md.Ensembles[i+1].FirstEntry - 1
		}
		frags = append(frags, lostFragment{ensemble: i, first: ens.FirstEntry, last: last, positions: positions})
	}
	return frags, deferred
}

// holds reports whether ensemble position pos is in entry's write set.
func holds(entry int64, pos, ensembleSize, writeQuorum int) bool {
	return writeSetMember(entry, pos, ensembleSize, writeQuorum) >= 0
}

// entriesToCopy counts the entries of f that some lost position holds.
func entriesToCopy(f lostFragment, ensembleSize, writeQuorum int) int64 {
	var n int64
	for e := f.first; e <= f.last; e++ {
		for _, pos := range f.positions {
			if holds(e, pos, ensembleSize, writeQuorum) {
				n++
				break
			}
		}
	}
	return n
}

// ReplicateOptions configure ReplicateLedger.
type ReplicateOptions struct {
	// Lost, if not empty, limits the work to these bookies (those an
	// auditor found missing for its grace period); a bookie is
	// re-replicated only while it is also not available. Empty: every
	// bookie not available.
	Lost []string
	// Progress, if set, is called on the calling goroutine with the number
	// of entries copied so far, after each entry.
	Progress func(copied int64)
}

// Replacement is one lost bookie of one fragment replaced.
type Replacement struct {
	FirstEntry int64  // the fragment's first entry
	Lost       string // the bookie no longer available
	By         string // the bookie that now holds its entries
}

// ReplicationResult says what ReplicateLedger did.
type ReplicationResult struct {
	Replaced      []Replacement
	EntriesCopied int64
	// Deleted: the ledger has no metadata (deleted); nothing to do.
	Deleted bool
	// Deferred: the last fragment of a ledger not CLOSED names a lost
	// bookie; it is left to the writer (ensemble change) or to recovery.
	// Try again once the ledger is closed.
	Deferred bool
}

// ReplicateLedger restores the replication of ledger id: for each fragment
// that names a lost bookie (see ReplicateOptions.Lost), except the last of
// a ledger not CLOSED, it picks an available bookie outside the fragment's
// ensemble, copies there every entry the lost bookie held (read from a
// surviving replica, checksum verified; written with FlagRecovery, which
// fenced bookies accept), and then replaces the lost bookie by it in the
// metadata (compare-and-set; a concurrent change is re-read and the work
// decided again). Fragments are handled one at a time, in entry order.
//
// It fails with ErrNotEnoughBookies when no replacement is available, and
// with an error naming the entry when no replica of it can be read; what
// was done before stays done.
func (c *Client) ReplicateLedger(ctx context.Context, id int64, o ReplicateOptions) (ReplicationResult, error) {
	var res ReplicationResult
	log := c.log.With("ledger", id)
	for stalls := 0; ; {
		cur, err := c.readMetadata(ctx, id)
		if errors.Is(err, ErrNoLedger) {
			res.Deleted = true
			return res, nil
		}
		if err != nil {
			return res, err
		}
		available, err := c.availableBookies(ctx)
		if err != nil {
			return res, err
		}
		lost := func(b string) bool {
			return !slices.Contains(available, b) && (len(o.Lost) == 0 || slices.Contains(o.Lost, b))
		}
		frags, deferred := lostFragments(&cur.md, lost)
		res.Deferred = deferred
		if len(frags) == 0 {
			return res, nil
		}
		f := frags[0]
		ens := cur.md.Ensembles[f.ensemble].Bookies
		readOnly, err := c.readOnlyBookies(ctx)
		if err != nil {
			return res, err
		}
		repl, err := chooseBookies(available, ens, readOnly, len(f.positions), c.perm)
		if err != nil {
			return res, fmt.Errorf("bookie client: re-replicating ledger %d entries %d..%d from %v: %w",
				id, f.first, f.last, lostOf(ens, f.positions), err)
		}
		targets := make(map[int]string, len(f.positions))
		for i, pos := range f.positions {
			targets[pos] = repl[i]
		}
		log.Info("re-replicating fragment", "firstEntry", f.first, "lastEntry", f.last,
			"lost", lostOf(ens, f.positions), "replacements", repl)
		n, err := c.copyFragment(ctx, id, &cur.md, f, targets, func(k int64) {
			if o.Progress != nil {
				o.Progress(res.EntriesCopied + k)
			}
		})
		res.EntriesCopied += n
		if err != nil {
			return res, err
		}
		var done []Replacement
		_, err = c.updateMetadata(ctx, id, cur, func(m *LedgerMetadata) (bool, error) {
			done = done[:0]
			i := slices.IndexFunc(m.Ensembles, func(e Ensemble) bool { return e.FirstEntry == f.first })
			if i < 0 || (i == len(m.Ensembles)-1 && m.State != StateClosed) {
				return false, nil // not the fragment copied any more: decide again
			}
			bookies := m.Ensembles[i].Bookies
			for pos, by := range targets {
				if bookies[pos] == ens[pos] && !slices.Contains(bookies, by) {
					done = append(done, Replacement{FirstEntry: f.first, Lost: bookies[pos], By: by})
					bookies[pos] = by
				}
			}
			return len(done) > 0, nil
		})
		if errors.Is(err, ErrNoLedger) {
			res.Deleted = true
			return res, nil
		}
		if err != nil {
			return res, err
		}
		if len(done) == 0 {
			// Another worker or a writer changed the fragment meanwhile;
			// what was copied is unused. Give up if that keeps happening.
			if stalls++; stalls == 3 {
				return res, fmt.Errorf("bookie client: re-replicating ledger %d entries %d..%d: the metadata keeps changing underneath", id, f.first, f.last)
			}
			continue
		}
		stalls = 0
		res.Replaced = append(res.Replaced, done...)
		log.Info("fragment re-replicated", "firstEntry", f.first, "replaced", done, "entriesCopied", n)
	}
}

func lostOf(ensemble []string, positions []int) []string {
	out := make([]string, len(positions))
	for i, pos := range positions {
		out[i] = ensemble[pos]
	}
	return out
}

// copyJob is one entry being copied: read from its sources in turn, then
// written to its targets.
type copyJob struct {
	entry   int64
	sources []string // surviving members of its write set
	targets []string // replacements of the lost members
	tried   int      // sources asked so far
	data    []byte   // nil while reading
	waiting int      // writes not yet answered
	errs    []error
}

// copyFragment copies the entries of f that the lost positions held to
// their targets (position → replacement), with up to copyWindow entries in
// flight. It returns how many entries it copied.
func (c *Client) copyFragment(ctx context.Context, id int64, md *LedgerMetadata, f lostFragment, targets map[int]string, progress func(int64)) (int64, error) {
	ens := md.Ensembles[f.ensemble].Bookies
	jobs := make([]*copyJob, copyWindow) // slot → job; the slot is the request tag
	free := make([]int, 0, copyWindow)
	for i := copyWindow - 1; i >= 0; i-- {
		free = append(free, i)
	}
	replies := make(chan reply, copyWindow*len(targets)) // at most one read or len(targets) writes per slot
	read := func(slot int) {
		j := jobs[slot]
		c.request(j.sources[j.tried], wire.OpRead, 0, wire.LedgerEntry(id, j.entry), c.cfg.ReadTimeout, slot, replies)
		j.tried++
	}
	var copied int64
	next, inflight := f.first, 0
	for {
		for len(free) > 0 && next <= f.last {
			e := next
			next++
			j := &copyJob{entry: e}
			for i := range md.WriteQuorum {
				pos := writeSetIndex(e, i, len(ens))
				if by, ok := targets[pos]; ok {
					j.targets = append(j.targets, by)
				} else {
					j.sources = append(j.sources, ens[pos])
				}
			}
			if len(j.targets) == 0 {
				continue
			}
			if len(j.sources) == 0 {
				return copied, fmt.Errorf("bookie client: re-replicating ledger %d entry %d: every bookie of its write set is lost", id, e)
			}
			slot := free[len(free)-1]
			free = free[:len(free)-1]
			jobs[slot] = j
			inflight++
			read(slot)
		}
		if inflight == 0 {
			return copied, nil
		}
		var rp reply
		select {
		case rp = <-replies:
		case <-ctx.Done():
			return copied, fmt.Errorf("bookie client: re-replicating ledger %d: %w", id, ctx.Err())
		}
		slot := rp.tag
		j := jobs[slot]
		if j.data == nil { // a read
			data, err := checkEntry(rp, id, j.entry)
			if err != nil {
				j.errs = append(j.errs, err)
				if j.tried < len(j.sources) {
					read(slot)
					continue
				}
				return copied, fmt.Errorf("bookie client: re-replicating ledger %d entry %d: no replica could be read: %w",
					id, j.entry, errors.Join(j.errs...))
			}
			j.data, j.waiting = data, len(j.targets)
			for _, to := range j.targets {
				c.request(to, wire.OpAdd, wire.FlagRecovery, data, c.cfg.AddTimeout, slot, replies)
			}
			continue
		}
		if err := rp.Err(); err != nil {
			return copied, fmt.Errorf("bookie client: re-replicating ledger %d entry %d to %s: %w", id, j.entry, rp.addr, err)
		}
		if j.waiting--; j.waiting > 0 {
			continue
		}
		jobs[slot] = nil
		free = append(free, slot)
		inflight--
		copied++
		progress(copied)
	}
}
