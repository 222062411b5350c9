package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/magnetar-io/magnetar/meta"
)

// Mark is the value of an under-replicated ledger's mark.
type Mark struct {
	MissingBookies []string `json:"missingBookies"`
	MarkedAt       int64    `json:"markedAt"`
}

// Lock is the value of a ledger's replication lock.
type Lock struct {
	Bookie        string `json:"bookie"`
	StartedAt     int64  `json:"startedAt"`
	EntriesCopied int64  `json:"entriesCopied"`
}

// auditorNode is the value of the auditor node.
type auditorNode struct {
	Bookie string `json:"bookie"`
	Since  int64  `json:"since"`
}

func markPath(id int64) string {
	return meta.Join(meta.UnderReplicatedLedgersRoot, strconv.FormatInt(id, 10))
}

func lockPath(id int64) string {
	return meta.Join(meta.ReplicationLocksRoot, strconv.FormatInt(id, 10))
}

// Status is an under-replicated ledger as the admin API shows it.
type Status struct {
	LedgerID       int64    `json:"ledgerId"`
	MissingBookies []string `json:"missingBookies"`
	MarkedAt       int64    `json:"markedAt"`
	ReplicatingBy  string   `json:"replicatingBy,omitempty"` // the worker holding the lock
	EntriesCopied  int64    `json:"entriesCopied"`
}

// UnderReplicated lists the marked ledgers, in id order, with the worker
// re-replicating each (if any) and its progress. Marks or locks that are
// not readable are listed with what could be read.
func UnderReplicated(ctx context.Context, store meta.Store) ([]Status, error) {
	names, err := store.Children(ctx, meta.UnderReplicatedLedgersRoot)
	if errors.Is(err, meta.ErrNotFound) {
		return []Status{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("autorecovery: listing under-replicated ledgers: %w", err)
	}
	out := make([]Status, 0, len(names))
	for _, id := range ledgerIDs(names) {
		v, _, err := store.Get(ctx, markPath(id))
		if errors.Is(err, meta.ErrNotFound) {
			continue // re-replicated meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("autorecovery: reading the mark of ledger %d: %w", id, err)
		}
		var m Mark
		_ = json.Unmarshal(v, &m) // a damaged mark still shows its ledger
		st := Status{LedgerID: id, MissingBookies: m.MissingBookies, MarkedAt: m.MarkedAt}
		if st.MissingBookies == nil {
			st.MissingBookies = []string{}
		}
		v, _, err = store.Get(ctx, lockPath(id))
		switch {
		case err == nil:
			var l Lock
			_ = json.Unmarshal(v, &l)
			st.ReplicatingBy, st.EntriesCopied = l.Bookie, l.EntriesCopied
		case !errors.Is(err, meta.ErrNotFound):
			return nil, fmt.Errorf("autorecovery: reading the lock of ledger %d: %w", id, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// ledgerIDs returns the names that are ledger ids, as numbers, in order
// (Children sorts names as strings).
func ledgerIDs(names []string) []int64 {
	var ids []int64
	for _, n := range names {
		if id, err := strconv.ParseInt(n, 10, 64); err == nil && id >= 0 && strconv.FormatInt(id, 10) == n {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
