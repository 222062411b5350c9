package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/wire"
)

// recover closes a ledger whose writer may be gone (see "Fencing and
// recovery" in the package documentation) and returns its CLOSED metadata,
// which may be another recoverer's if that one closed it first.
func (c *Client) recover(ctx context.Context, id int64, cur versioned) (versioned, error) {
	cur, err := c.updateMetadata(ctx, id, cur, func(m *LedgerMetadata) (bool, error) {
		if m.State != StateOpen {
			return false, nil // closed, or a recoverer died: go on from its state
		}
		m.State = StateInRecovery
		return true, nil
	})
	if err != nil || cur.md.State == StateClosed {
		return cur, err
	}
	// From here the ensembles cannot change: the writer's ensemble change
	// needs OPEN. So the last ensemble holds every entry past the LAC.
	md := &cur.md
	log := c.log.With("ledger", id)
	log.Info("recovering ledger", "ensembles", len(md.Ensembles))

	lac, err := c.fence(ctx, id, md)
	if err != nil {
		return cur, err
	}
	last, length, err := c.recoverTail(ctx, id, md, lac)
	if err != nil {
		return cur, err
	}
	final, err := c.updateMetadata(ctx, id, cur, func(m *LedgerMetadata) (bool, error) {
		if m.State == StateClosed {
			return false, nil // another recovery won: its result stands
		}
		m.State, m.LastEntry, m.Length = StateClosed, last, length
		return true, nil
	})
	if err != nil {
		return final, err
	}
	if final.md.LastEntry == last {
		log.Info("ledger recovered", "lac", lac, "lastEntry", last, "length", length)
	} else {
		log.Info("ledger closed by a concurrent recovery", "lastEntry", final.md.LastEntry)
	}
	return final, nil
}

// fence fences the ledger on the bookies of the last ensemble and returns
// the LAC to recover from: the largest the fenced bookies report, and at
// least the entry before the last ensemble. It fails with ErrNoQuorum
// unless every write set has Qw-Qa+1 fenced bookies.
func (c *Client) fence(ctx context.Context, id int64, md *LedgerMetadata) (int64, error) {
	lac, ok, errs, err := c.readLACs(ctx, id, md, wire.FlagFence, func(rp reply) bool { return rp.Err() == nil })
	if err != nil {
		return -1, fmt.Errorf("bookie client: recovering ledger %d: fencing: %w", id, err)
	}
	if done, start := covered(ok, md.WriteQuorum, md.AckQuorum); !done {
		fenced := 0
		for _, f := range ok {
			if f {
				fenced++
			}
		}
		return -1, fmt.Errorf("%w: recovering ledger %d: fenced %d of %d bookies, but write set %v needs %d fenced (Qw-Qa+1) for the old writer to be stopped: %w",
			ErrNoQuorum, id, fenced, len(ok), writeSet(md.last().Bookies, int64(start), md.WriteQuorum),
			coverageNeed(md.WriteQuorum, md.AckQuorum), errors.Join(errs...))
	}
	return max(lac, md.last().FirstEntry-1), nil
}

// recoverTail reads forward from lac+1, re-replicating each entry found,
// until one is absent. It returns the last entry found (lac if none) and
// the ledger length through it.
func (c *Client) recoverTail(ctx context.Context, id int64, md *LedgerMetadata, lac int64) (last, length int64, err error) {
	last, length = lac, -1
	for e := lac + 1; ; e++ {
		data, err := c.recoveryRead(ctx, id, md, e)
		if err != nil {
			return 0, 0, err
		}
		if data == nil {
			break
		}
		if err := c.recoveryWrite(ctx, id, md, e, data); err != nil {
			return 0, 0, err
		}
		h, _ := entry.Parse(data) // verified by recoveryRead
		last, length = e, h.Length
	}
	if length >= 0 {
		return last, length, nil
	}
	if last < 0 {
		return last, 0, nil
	}
	raw, err := c.readEntries(ctx, id, md, last, last)
	if err != nil {
		return 0, 0, fmt.Errorf("bookie client: recovering ledger %d: reading the length of entry %d: %w", id, last, err)
	}
	h, _ := entry.Parse(raw[0])
	return last, h.Length, nil
}

// recoveryRead asks every bookie of entry e's write set for it (fencing
// again on the way, for bookies the fence did not reach). It returns the
// entry when found, nil when absent, and ErrNoQuorum when undecidable.
func (c *Client) recoveryRead(ctx context.Context, id int64, md *LedgerMetadata, e int64) ([]byte, error) {
	ws := writeSet(md.EnsembleFor(e), e, md.WriteQuorum)
	replies := make(chan reply, len(ws))
	for i, b := range ws {
		c.request(b, wire.OpRead, wire.FlagFence, wire.LedgerEntry(id, e), c.cfg.ReadTimeout, i, replies)
	}
	missing, failed := 0, 0
	var errs []error
	for range ws {
		var rp reply
		select {
		case rp = <-replies:
		case <-ctx.Done():
			return nil, fmt.Errorf("bookie client: recovering ledger %d: reading entry %d: %w", id, e, ctx.Err())
		}
		data, err := checkEntry(rp, id, e)
		switch {
		case err == nil:
		case errors.Is(err, wire.ErrNoEntry), errors.Is(err, wire.ErrNoLedger):
			missing++
		default:
			failed++
			errs = append(errs, err)
		}
		switch recoveryVerdict(err == nil, missing, failed, md.WriteQuorum, md.AckQuorum) {
		case verdictFound:
			return data, nil
		case verdictAbsent:
			return nil, nil
		case verdictUndecided:
			return nil, fmt.Errorf("%w: recovering ledger %d: entry %d is neither found nor missing on %d of %d bookies of its write set %v: %w",
				ErrNoQuorum, id, e, coverageNeed(md.WriteQuorum, md.AckQuorum), len(ws), ws, errors.Join(errs...))
		}
	}
	return nil, fmt.Errorf("bookie client: recovering ledger %d: entry %d: no verdict", id, e) // unreachable: all answered
}

// recoveryWrite re-adds a found entry (FlagRecovery: fenced bookies accept
// it) to its whole write set. Bookies that cannot be reached are skipped
// with a warning: the entry is then on fewer bookies than Qw, but on at
// least one, and recovery's correctness does not depend on it; it fails
// only if no bookie stored it.
func (c *Client) recoveryWrite(ctx context.Context, id int64, md *LedgerMetadata, e int64, data []byte) error {
	ws := writeSet(md.EnsembleFor(e), e, md.WriteQuorum)
	replies := make(chan reply, len(ws))
	for i, b := range ws {
		c.request(b, wire.OpAdd, wire.FlagRecovery, data, c.cfg.AddTimeout, i, replies)
	}
	acked := 0
	var errs []error
	for range ws {
		select {
		case rp := <-replies:
			if err := rp.Err(); err != nil {
				errs = append(errs, err)
			} else {
				acked++
			}
		case <-ctx.Done():
			return fmt.Errorf("bookie client: recovering ledger %d: re-replicating entry %d: %w", id, e, ctx.Err())
		}
	}
	switch {
	case acked == 0:
		return fmt.Errorf("%w: recovering ledger %d: no bookie of write set %v stored entry %d again: %w",
			ErrNoQuorum, id, ws, e, errors.Join(errs...))
	case acked < len(ws):
		c.log.Warn("recovery: entry left under-replicated", "ledger", id, "entry", e,
			"stored", acked, "writeSet", ws, "err", errors.Join(errs...))
	}
	return nil
}
