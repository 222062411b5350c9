package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/magnetar-io/magnetar/meta"
)

// A bookie that refuses adds (a disk above its usage threshold, a failed
// write) says so in the metadata store, as BookKeeper's read-only bookies
// do: an ephemeral node at /bookies/readonly/<id> beside its
// registration. Clients leave the bookies listed there out of new
// ensembles, and place on them again as soon as the node is gone, rather
// than some fixed time after the last refusal they saw.

// readOnlyCheckInterval is how often the bookie compares its storage's
// state with its mark.
const readOnlyCheckInterval = time.Second

// readOnlyMark is the value of /bookies/readonly/<id>.
type readOnlyMark struct {
	Reason string `json:"reason"`
	Since  int64  `json:"sinceMs"`
}

func (b *Bookie) readOnlyPath() string { return meta.Join(meta.BookiesReadOnlyRoot, b.cfg.ID) }

// keepReadOnlyMark keeps the read-only mark in step with the storage until
// stop is closed, then removes it. A receive on resync writes the mark
// again whatever it was: the bookie registered again after a session
// expiry, which took the ephemeral mark away too.
func (b *Bookie) keepReadOnlyMark(stop, resync <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a write in progress does not hold up Shutdown
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(readOnlyCheckInterval)
	defer t.Stop()
	// force: write the mark whatever marked says (at start, after a
	// resync, after a failed write).
	marked, force := false, true
	for {
		if why := b.storage.ReadOnly(); force || (why != nil) != marked {
			force = !b.setReadOnlyMark(ctx, why, marked)
			if !force {
				marked = why != nil
			}
		}
		select {
		case <-t.C:
		case <-resync:
			force = true
		case <-stop:
			// force: a failed create may have made the node all the same.
			if marked || force {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				b.setReadOnlyMark(ctx, nil, marked)
			}
			return
		}
	}
}

// setReadOnlyMark creates the mark (why != nil) or deletes it; was says
// whether it was there. On a failure it logs and returns false, for the
// next check to try again.
func (b *Bookie) setReadOnlyMark(ctx context.Context, why error, was bool) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p := b.readOnlyPath()
	if why == nil {
		if err := b.cfg.Meta.Delete(ctx, p, meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
			b.markFailed("bookie: cannot remove the read-only mark; clients go on leaving it out of new ledgers", p, err)
			return false
		}
		b.roFailing = false
		if was {
			b.log.Info("bookie: takes adds again; read-only mark removed", "path", p)
		}
		return true
	}
	v, _ := json.Marshal(readOnlyMark{Reason: why.Error(), Since: time.Now().UnixMilli()})
	err := meta.EnsurePath(ctx, b.cfg.Meta, meta.BookiesReadOnlyRoot)
	for try := 0; err == nil; try++ {
		if _, err = b.cfg.Meta.Create(ctx, p, v, meta.Ephemeral); !errors.Is(err, meta.ErrExists) || try == 2 {
			break
		}
		// A mark left by this bookie's previous session, which would
		// vanish when that session expires: replace it with ours, as
		// register does the registration. (Ours is written again only
		// when forced, and a moment without it is harmless.)
		if err = b.cfg.Meta.Delete(ctx, p, meta.AnyVersion); errors.Is(err, meta.ErrNotFound) {
			err = nil
		}
	}
	if err != nil {
		b.markFailed("bookie: cannot mark itself read-only; clients learn it from refused adds", p, err)
		return false
	}
	b.roFailing = false
	if !was {
		b.log.Warn("bookie: refuses adds; marked read-only for clients", "path", p, "reason", why)
	}
	return true
}

// markFailed logs the first of a run of failures to write the mark (it is
// tried again every check).
func (b *Bookie) markFailed(msg, path string, err error) {
	if !b.roFailing {
		b.log.Warn(msg+"; trying again every second", "path", path, "err", err)
	}
	b.roFailing = true
}
