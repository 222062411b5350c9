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
// left out of new ensembles, replacements and re-replication, whatever
// the metadata store says. A read-only bookie marks itself in the store
// (/bookies/readonly/<id>, bookie/readonly.go) within a second or so and
// is left out for as long as the mark is there; this covers the refusals
// seen before the mark. Meanwhile a broker whose only bookie is read-only
// fails to create a ledger at once, before allocating an id or writing
// metadata, rather than creating one per retry.
const readOnlyFor = 10 * time.Second

// markReadOnly leaves addr out of placement for readOnlyFor, logging when
// it starts to be.
func (c *Client) markReadOnly(addr string, err error) {
	now := time.Now()
	c.roMu.Lock()
	until, known := c.readOnly[addr]
	c.readOnly[addr] = now.Add(readOnlyFor)
	c.roMu.Unlock()
	if !known || now.After(until) {
		c.log.Warn("bookie is read-only: no new ledgers, replacements or copies on it while it says so", "bookie", addr, "err", err)
	}
}

// readOnlyBookies are the bookies left out of placement now: those marked
// read-only in the metadata store, and those that refused a write as
// read-only in the last readOnlyFor.
func (c *Client) readOnlyBookies(ctx context.Context) ([]string, error) {
	marked, err := c.meta.Children(ctx, meta.BookiesReadOnlyRoot)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return nil, fmt.Errorf("bookie client: listing read-only bookies: %w", err)
	}
	now := time.Now()
	c.roMu.Lock()
	defer c.roMu.Unlock()
	out := marked
	for b, until := range c.readOnly {
		if now.After(until) {
			delete(c.readOnly, b)
			continue
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
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
	readOnly, err := c.readOnlyBookies(ctx)
	if err != nil {
		return nil, err
	}
	return chooseBookies(available, exclude, readOnly, n, c.perm)
}
