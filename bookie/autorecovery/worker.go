package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
)

// progressEvery bounds how often a worker records its progress in a lock.
const progressEvery = time.Second

// Worker re-replicates marked ledgers, one at a time (see the package
// documentation).
type Worker struct {
	cfg    Config
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	// Owned by the run goroutine: when each ledger may be tried again,
	// and how many tries in a row failed or were deferred.
	retryAt  map[int64]time.Time
	failures map[int64]int
}

// StartWorker starts a worker. cfg.Client is required.
func StartWorker(cfg Config) (*Worker, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		return nil, errors.New("autorecovery: Config.Client is required")
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Worker{cfg: cfg, log: cfg.Logger.With("component", "replication-worker"), cancel: cancel,
		done: make(chan struct{}), retryAt: map[int64]time.Time{}, failures: map[int64]int{}}
	go w.run(ctx)
	return w, nil
}

// Close stops the worker and waits for it. A re-replication in progress is
// abandoned: its lock is removed and its mark stays.
func (w *Worker) Close() {
	w.cancel()
	<-w.done
}

func (w *Worker) run(ctx context.Context) {
	defer close(w.done)
	store := w.cfg.Meta
	poll := time.NewTicker(w.cfg.PollInterval)
	defer poll.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	var changed <-chan meta.Event // armed watch on the marks, nil once it fired
	failures := 0
	for ctx.Err() == nil {
		var names []string
		err := meta.EnsurePath(ctx, store, meta.UnderReplicatedLedgersRoot)
		if err == nil {
			err = meta.EnsurePath(ctx, store, meta.ReplicationLocksRoot)
		}
		if err == nil {
			if changed == nil {
				names, changed, err = store.ChildrenW(ctx, meta.UnderReplicatedLedgersRoot)
			} else {
				names, err = store.Children(ctx, meta.UnderReplicatedLedgersRoot)
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				failures++
				d := backoff(failures, w.cfg.MaxBackoff)
				w.log.Warn("listing under-replicated ledgers failed; trying again", "in", d, "err", err)
				sleep(ctx, d)
			}
			continue
		}
		failures = 0
		if w.pass(ctx, ledgerIDs(names)) {
			continue // tried some: look again for marks added meanwhile
		}
		if next := w.nextRetry(); !next.IsZero() {
			retry.Reset(time.Until(next))
		}
		select {
		case <-changed:
			changed = nil
		case <-poll.C:
		case <-retry.C:
		case <-ctx.Done():
		}
	}
}

// pass tries each marked ledger that is not waiting for a retry. It
// reports whether it tried any.
func (w *Worker) pass(ctx context.Context, ids []int64) bool {
	marked := make(map[int64]bool, len(ids))
	tried := false
	for _, id := range ids {
		marked[id] = true
		if ctx.Err() != nil || time.Now().Before(w.retryAt[id]) {
			continue
		}
		if w.replicate(ctx, id) {
			tried = true
		}
	}
	for id := range w.retryAt { // marks gone: forget them
		if !marked[id] {
			delete(w.retryAt, id)
			delete(w.failures, id)
		}
	}
	return tried
}

// nextRetry returns the earliest time a ledger may be tried again (zero if
// none is waiting).
func (w *Worker) nextRetry() time.Time {
	var next time.Time
	for _, t := range w.retryAt {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

// later schedules ledger id's next try after one more failed or deferred
// try, and returns the delay.
func (w *Worker) later(id int64) time.Duration {
	w.failures[id]++
	d := backoff(w.failures[id], w.cfg.MaxBackoff)
	w.retryAt[id] = time.Now().Add(d)
	return d
}

// replicate takes ledger id's lock and re-replicates it. It reports
// whether it got the lock.
func (w *Worker) replicate(ctx context.Context, id int64) bool {
	store := w.cfg.Meta
	log := w.log.With("ledger", id)
	v, markStat, err := store.Get(ctx, markPath(id))
	if errors.Is(err, meta.ErrNotFound) {
		return false
	}
	if err != nil {
		log.Warn("reading the mark failed", "retryIn", w.later(id), "err", err)
		return false
	}
	var mark Mark
	if err := json.Unmarshal(v, &mark); err != nil {
		// Re-replicate every lost bookie, then the mark goes.
		log.Warn("unreadable mark: re-replicating every bookie not available", "err", err)
	}
	lock := Lock{Bookie: w.cfg.BookieID, StartedAt: time.Now().UnixMilli()}
	value, _ := json.Marshal(lock)
	if err := createEphemeral(ctx, store, lockPath(id), value); err != nil {
		if !errors.Is(err, meta.ErrExists) && ctx.Err() == nil {
			log.Warn("taking the replication lock failed", "retryIn", w.later(id), "err", err)
		}
		return false // another worker has it
	}
	lockVersion := meta.Version(0)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := store.Delete(cctx, lockPath(id), lockVersion); err != nil &&
			!errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
			log.Warn("removing the replication lock failed", "err", err)
		}
	}()

	log.Info("re-replicating ledger", "missingBookies", mark.MissingBookies)
	last := time.Now()
	res, err := w.cfg.Client.ReplicateLedger(ctx, id, client.ReplicateOptions{
		Lost: mark.MissingBookies,
		Progress: func(copied int64) {
			if time.Since(last) < progressEvery {
				return
			}
			last = time.Now()
			lock.EntriesCopied = copied
			value, _ := json.Marshal(lock)
			if st, err := store.Set(ctx, lockPath(id), value, lockVersion); err == nil {
				lockVersion = st.Version
			}
		},
	})
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("re-replication failed; the ledger stays marked", "entriesCopied", res.EntriesCopied,
				"retryIn", w.later(id), "err", err)
		}
		return true
	case res.Deferred:
		log.Info("re-replication deferred: the ledger's last ensemble is still being written",
			"entriesCopied", res.EntriesCopied, "retryIn", w.later(id))
		return true
	}
	err = store.Delete(ctx, markPath(id), markStat.Version)
	switch {
	case err == nil, errors.Is(err, meta.ErrNotFound):
		delete(w.retryAt, id)
		delete(w.failures, id)
		log.Info("ledger re-replicated", "entriesCopied", res.EntriesCopied, "replaced", fmt.Sprint(res.Replaced),
			"deleted", res.Deleted)
	case errors.Is(err, meta.ErrBadVersion):
		log.Info("the mark changed during re-replication; looking again") // tried again on the next pass
	default:
		log.Warn("removing the mark failed", "retryIn", w.later(id), "err", err)
	}
	return true
}
