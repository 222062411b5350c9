package bookie

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// collectDeletedLedgers deletes from storage the ledgers that no longer
// have metadata: deleted while this bookie was down or unreachable, so the
// client's delete never reached it. It returns how many it deleted.
//
// It is safe against ledgers being created meanwhile: a client creates a
// ledger's metadata before writing any entry, and the ledgers this bookie
// holds are listed before the metadata is, so a ledger it holds without
// metadata was deleted. (A wrong metadata store cannot make it delete
// everything: the cookie check refuses to start against one.)
func (b *Bookie) collectDeletedLedgers(ctx context.Context) (int, error) {
	held, err := b.storage.Ledgers()
	if err != nil {
		return 0, err
	}
	live := map[int64]bool{}
	listed := map[int64]bool{}
	for _, id := range held {
		bucket := id / meta.LedgerBucketSize
		if listed[bucket] {
			continue
		}
		listed[bucket] = true
		names, err := b.cfg.Meta.Children(ctx, meta.Join(meta.LedgersRoot, strconv.FormatInt(bucket, 10)))
		if err != nil && !errors.Is(err, meta.ErrNotFound) {
			return 0, err
		}
		for _, n := range names {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil {
				live[v] = true
			}
		}
	}
	deleted := 0
	for _, id := range held {
		if live[id] {
			continue
		}
		done := make(chan error, 1)
		b.storage.Delete(id, func(err error) { done <- err })
		select {
		case err := <-done:
			if err != nil {
				return deleted, err
			}
		case <-ctx.Done():
			return deleted, ctx.Err()
		}
		deleted++
		b.log.Info("deleted a ledger whose metadata is gone", "ledger", id)
	}
	return deleted, nil
}

// ledgerGCLoop runs collectDeletedLedgers every interval until stop.
func (b *Bookie) ledgerGCLoop(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		if _, err := b.collectDeletedLedgers(ctx); err != nil {
			b.log.Warn("collecting deleted ledgers failed; will retry", "err", err)
		}
		cancel()
	}
}
