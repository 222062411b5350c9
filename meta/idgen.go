package meta

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
)

// IDGenerator hands out unique, increasing int64 ids (ledger ids) from a
// counter node shared by every process on the store. It reserves blocks of
// ids with one compare-and-set on the counter and serves them from memory,
// so ids from one generator increase, ids from different generators never
// collide, and ids reserved but unused when a process stops are skipped.
//
// The counter node's value is the next unreserved id, 8 bytes big-endian.
type IDGenerator struct {
	store Store
	path  string
	block int64

	mu   sync.Mutex
	next int64 // next id to hand out
	end  int64 // end of the reserved block (exclusive)
}

// NewIDGenerator returns a generator on the counter at path, reserving
// block ids at a time (block ≥ 1). The counter node and its parents are
// created on first use.
func NewIDGenerator(s Store, path string, block int64) (*IDGenerator, error) {
	if err := ValidatePath(path); err != nil {
		return nil, err
	}
	if block < 1 {
		return nil, fmt.Errorf("meta: id block size %d must be at least 1", block)
	}
	return &IDGenerator{store: s, path: path, block: block}, nil
}

// Next returns the next id. Ids start at 1.
func (g *IDGenerator) Next(ctx context.Context) (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next == g.end {
		start, err := g.reserve(ctx)
		if err != nil {
			return 0, err
		}
		g.next, g.end = start, start+g.block
	}
	id := g.next
	g.next++
	return id, nil
}

// reserve moves the counter on by one block and returns the block's start.
func (g *IDGenerator) reserve(ctx context.Context) (int64, error) {
	for {
		v, st, err := g.store.Get(ctx, g.path)
		if errors.Is(err, ErrNotFound) {
			if err := EnsurePath(ctx, g.store, Parent(g.path)); err != nil {
				return 0, err
			}
			_, err = g.store.Create(ctx, g.path, encodeCounter(1+g.block), 0)
			if err == nil {
				return 1, nil
			}
			if errors.Is(err, ErrExists) {
				continue
			}
			return 0, err
		}
		if err != nil {
			return 0, err
		}
		if len(v) != 8 {
			return 0, fmt.Errorf("meta: id counter %s holds %d bytes, want 8", g.path, len(v))
		}
		start := int64(binary.BigEndian.Uint64(v))
		_, err = g.store.Set(ctx, g.path, encodeCounter(start+g.block), st.Version)
		if err == nil {
			return start, nil
		}
		if !errors.Is(err, ErrBadVersion) {
			return 0, err
		}
	}
}

func encodeCounter(n int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(n))
}
