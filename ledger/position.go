package ledger

import (
	"cmp"
	"fmt"
)

// Position is an entry's address: the bookie ledger holding it and its
// entry id there. Positions order entries: ledgers of a managed ledger
// have increasing ids.
//
// Entry -1 names the point before a ledger's first entry: LastConfirmed
// of a managed ledger with no entries is (current ledger, -1).
type Position struct {
	Ledger int64 `json:"ledgerId"`
	Entry  int64 `json:"entryId"`
}

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	if c := cmp.Compare(p.Ledger, q.Ledger); c != 0 {
		return c
	}
	return cmp.Compare(p.Entry, q.Entry)
}

// Before reports whether p is before q.
func (p Position) Before(q Position) bool { return p.Compare(q) < 0 }

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }
