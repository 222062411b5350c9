package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/meta"
)

// chooseBookies picks n bookies from available that are not in exclude, in
// random order (perm returns a permutation of [0, k)). Too few candidates
// is ErrNotEnoughBookies, saying how many were needed and available.
func chooseBookies(available, exclude []string, n int, perm func(k int) []int) ([]string, error) {
	candidates := make([]string, 0, len(available))
	for _, b := range available {
		if !slices.Contains(exclude, b) && !slices.Contains(candidates, b) {
			candidates = append(candidates, b)
		}
	}
	if len(candidates) < n {
		if len(exclude) > 0 {
			return nil, fmt.Errorf("%w: need %d, %d available (%d registered, %d excluded as already in the ensemble)",
				ErrNotEnoughBookies, n, len(candidates), len(available), len(exclude))
		}
		return nil, fmt.Errorf("%w: need %d, %d available", ErrNotEnoughBookies, n, len(candidates))
	}
	out := make([]string, n)
	for i, j := range perm(len(candidates))[:n] {
		out[i] = candidates[j]
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
	return chooseBookies(available, exclude, n, c.perm)
}
