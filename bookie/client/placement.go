package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// chooseBookies picks n bookies from available that are neither in
// exclude nor in readOnly, in random order (perm returns a permutation of
// [0, k)). Too few candidates is ErrNotEnoughBookies, saying how many were
// needed and available, and why the others were left out.
func chooseBookies(available, exclude, readOnly []string, n int, perm func(k int) []int) ([]string, error) {
	candidates := make([]string, 0, len(available))
	refusing := 0
	for _, b := range available {
		switch {
		case slices.Contains(candidates, b), slices.Contains(exclude, b):
		case slices.Contains(readOnly, b):
			refusing++
		default:
			candidates = append(candidates, b)
		}
	}
	if len(candidates) < n {
		var why []string
		if len(exclude) > 0 {
			why = append(why, fmt.Sprintf("%d excluded as already in the ensemble", len(exclude)))
		}
		if refusing > 0 {
			why = append(why, fmt.Sprintf("%d read-only", refusing))
		}
		if len(why) > 0 {
			return nil, fmt.Errorf("%w: need %d, %d available (%d registered, %s)",
				ErrNotEnoughBookies, n, len(candidates), len(available), strings.Join(why, ", "))
		}
		return nil, fmt.Errorf("%w: need %d, %d available", ErrNotEnoughBookies, n, len(candidates))
	}
	out := make([]string, n)
	for i, j := range perm(len(candidates))[:n] {
		out[i] = candidates[j]
	}
	return out, nil
}

// readOnlyFor is how long a bookie that refused a write as read-only is
// left out of new ensembles, replacements and re-replication. Its storage
// stays read-only until it restarts (docs/bookies.md); a restarted bookie
// is placed again at most this long after. Until then a broker whose only
// bookie is read-only fails to create a ledger at once, before allocating
// an id or writing metadata, rather than creating one per retry.
const readOnlyFor = time.Minute

// markReadOnly leaves addr out of placement for readOnlyFor, logging when
// it starts to be.
func (c *Client) markReadOnly(addr string, err error) {
	now := time.Now()
	c.roMu.Lock()
	until, known := c.readOnly[addr]
	c.readOnly[addr] = now.Add(readOnlyFor)
	c.roMu.Unlock()
	if !known || now.After(until) {
		c.log.Warn("bookie is read-only: no new ledgers, replacements or copies on it for a while", "bookie", addr, "for", readOnlyFor, "err", err)
	}
}

// readOnlyBookies are the bookies left out of placement now.
func (c *Client) readOnlyBookies() []string {
	now := time.Now()
	c.roMu.Lock()
	defer c.roMu.Unlock()
	var out []string
	for b, until := range c.readOnly {
		if now.After(until) {
			delete(c.readOnly, b)
			continue
		}
		out = append(out, b)
	}
	return out
}

// availableBookies lists the registered bookies (children of
// meta.BookiesAvailableRoot; the child's name is its address).
func (c *Client) availableBookies(ctx context.Context) ([]string, error) {
	names, err := c.meta.Children(ctx, meta.BookiesAvailableRoot)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bookie client: listing bookies: %w", err)
	}
	return names, nil
}

// pickBookies chooses n available bookies outside exclude.
func (c *Client) pickBookies(ctx context.Context, exclude []string, n int) ([]string, error) {
	available, err := c.availableBookies(ctx)
	if err != nil {
		return nil, err
	}
	return chooseBookies(available, exclude, c.readOnlyBookies(), n, c.perm)
}
