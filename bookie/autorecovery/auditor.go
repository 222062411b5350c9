package autorecovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
)

// Auditor is a candidate for the cluster's auditor: it tries to create the
// auditor node, and while it holds it, audits (see the package
// documentation). The others watch the node and try again when it goes.
type Auditor struct {
	cfg     Config
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Bool
}

// StartAuditor starts a candidate.
func StartAuditor(cfg Config) (*Auditor, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Auditor{cfg: cfg, log: cfg.Logger.With("component", "auditor"), cancel: cancel, done: make(chan struct{})}
	go a.run(ctx)
	return a, nil
}

// Leading reports whether this candidate is the auditor now (holds the
// auditor node and audits).
func (a *Auditor) Leading() bool { return a.leading.Load() }

// Close stops the candidate; if it is the auditor it removes the auditor
// node, so that another takes over at once.
func (a *Auditor) Close() {
	a.cancel()
	<-a.done
}

func (a *Auditor) run(ctx context.Context) {
	defer close(a.done)
	failures := 0
	for ctx.Err() == nil {
		if err := a.elect(ctx); err != nil && ctx.Err() == nil {
			failures++
			d := backoff(failures, a.cfg.MaxBackoff)
			a.log.Warn("auditor election failed; trying again", "in", d, "err", err)
			sleep(ctx, d)
			continue
		}
		failures = 0
	}
}

// elect tries once to become the auditor. It returns when the node is
// held by another and has changed, or when this candidate's term ended.
func (a *Auditor) elect(ctx context.Context) error {
	store := a.cfg.Meta
	if err := meta.EnsurePath(ctx, store, meta.UnderReplicationRoot); err != nil {
		return fmt.Errorf("creating %s: %w", meta.UnderReplicationRoot, err)
	}
	value, _ := json.Marshal(auditorNode{Bookie: a.cfg.BookieID, Since: time.Now().UnixMilli()})
	err := createEphemeral(ctx, store, meta.AuditorPath, value)
	if errors.Is(err, meta.ErrExists) {
		_, ok, changed, err := store.ExistsW(ctx, meta.AuditorPath)
		if err != nil || !ok {
			return err // gone already: try again
		}
		select {
		case <-changed:
		case <-ctx.Done():
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", meta.AuditorPath, err)
	}
	err = a.lead(ctx)
	a.leading.Store(false)
	a.resign(value)
	if ctx.Err() == nil {
		a.log.Info("no longer the auditor", "err", err)
	}
	return err
}

// resign removes the auditor node if it is still the one this candidate
// created (value).
func (a *Auditor) resign(value []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	v, st, err := a.cfg.Meta.Get(ctx, meta.AuditorPath)
	if err != nil || string(v) != string(value) {
		return
	}
	if err := a.cfg.Meta.Delete(ctx, meta.AuditorPath, st.Version); err != nil && !errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
		a.log.Warn("removing the auditor node", "err", err)
	}
}

// lead audits until the auditor node goes (session lost, or removed) or
// ctx ends.
func (a *Auditor) lead(ctx context.Context) error {
	store := a.cfg.Meta
	_, _, held, err := store.GetW(ctx, meta.AuditorPath)
	if errors.Is(err, meta.ErrNotFound) {
		return errors.New("the auditor node is gone")
	}
	if err != nil {
		return err
	}
	for _, p := range []string{meta.BookiesAvailableRoot, meta.UnderReplicatedLedgersRoot} {
		if err := meta.EnsurePath(ctx, store, p); err != nil {
			return fmt.Errorf("creating %s: %w", p, err)
		}
	}
	a.leading.Store(true)
	a.log.Info("elected auditor", "bookie", a.cfg.BookieID)
	lost := lostSince{}
	ticker := time.NewTicker(a.cfg.AuditInterval)
	defer ticker.Stop()
	grace := time.NewTimer(0)
	defer grace.Stop()
	<-grace.C
	var changed <-chan meta.Event // armed watch on the available bookies, nil once it fired
	for {
		var available []string
		if changed == nil {
			available, changed, err = store.ChildrenW(ctx, meta.BookiesAvailableRoot)
		} else {
			available, err = store.Children(ctx, meta.BookiesAvailableRoot)
		}
		if err == nil {
			var due time.Time
			due, err = a.audit(ctx, lost, available, time.Now())
			if !due.IsZero() {
				grace.Reset(time.Until(due))
			}
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("audit failed; trying again at the next change or interval", "err", err)
		}
		select {
		case ev := <-held:
			if ev.Type != meta.EventDataChanged {
				return fmt.Errorf("the auditor node is gone (%s)", ev.Type)
			}
			if _, _, held, err = store.GetW(ctx, meta.AuditorPath); err != nil {
				return err
			}
		case <-changed:
			changed = nil
		case <-ticker.C:
		case <-grace.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lostSince says since when each bookie that ledger metadata names has
// been missing from the available bookies, as the auditor saw it.
type lostSince map[string]time.Time

// update records that missing are the bookies named and not available at
// now: those newly missing are lost from now on, those not missing any
// more are forgotten.
func (l lostSince) update(now time.Time, missing []string) {
	for b := range l {
		if !slices.Contains(missing, b) {
			delete(l, b)
		}
	}
	for _, b := range missing {
		if _, ok := l[b]; !ok {
			l[b] = now
		}
	}
}

// confirmed returns those of bookies lost for at least grace at now.
func (l lostSince) confirmed(bookies []string, now time.Time, grace time.Duration) []string {
	var out []string
	for _, b := range bookies {
		if t, ok := l[b]; ok && now.Sub(t) >= grace {
			out = append(out, b)
		}
	}
	return out
}

// nextDue returns when the next lost bookie not yet confirmed at now will
// be, or the zero time if none is waiting.
func (l lostSince) nextDue(now time.Time, grace time.Duration) time.Time {
	var due time.Time
	for _, t := range l {
		if d := t.Add(grace); d.After(now) && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	return due
}

// audit reads every ledger's metadata, updates lost, and marks the ledgers
// naming bookies lost for the grace period. It returns when the next
// waiting bookie's grace period ends (zero if none).
func (a *Auditor) audit(ctx context.Context, lost lostSince, available []string, now time.Time) (time.Time, error) {
	missing, err := a.scan(ctx, available)
	if err != nil {
		return time.Time{}, err
	}
	var all []string
	for _, m := range missing {
		for _, b := range m {
			if !slices.Contains(all, b) {
				all = append(all, b)
			}
		}
	}
	lost.update(now, all)
	marked := 0
	for _, id := range sortedKeys(missing) {
		confirmed := lost.confirmed(missing[id], now, a.cfg.GracePeriod)
		if len(confirmed) == 0 {
			continue
		}
		if err := a.mark(ctx, id, confirmed, now); err != nil {
			return time.Time{}, err
		}
		marked++
	}
	a.log.Debug("audit done", "available", len(available), "ledgersMissingBookies", len(missing), "marked", marked)
	return lost.nextDue(now, a.cfg.GracePeriod), nil
}

// scan returns, for every ledger whose metadata names a bookie not in
// available, those bookies. Metadata that cannot be decoded is logged and
// skipped.
func (a *Auditor) scan(ctx context.Context, available []string) (map[int64][]string, error) {
	store := a.cfg.Meta
	names, err := store.Children(ctx, meta.LedgersRoot)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", meta.LedgersRoot, err)
	}
	missing := map[int64][]string{}
	for _, bucket := range ledgerIDs(names) { // skips idgen, underreplication
		bucketPath := meta.Join(meta.LedgersRoot, strconv.FormatInt(bucket, 10))
		ids, err := store.Children(ctx, bucketPath)
		if errors.Is(err, meta.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", bucketPath, err)
		}
		for _, id := range ledgerIDs(ids) {
			if id/meta.LedgerBucketSize != bucket {
				a.log.Warn("skipping a ledger node in the wrong bucket", "bucket", bucketPath, "ledger", id)
				continue
			}
			v, _, err := store.Get(ctx, meta.LedgerPath(id))
			if errors.Is(err, meta.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("reading ledger %d metadata: %w", id, err)
			}
			md, err := client.ParseMetadata(id, v)
			if err != nil {
				a.log.Warn("skipping a ledger whose metadata cannot be read", "ledger", id, "err", err)
				continue
			}
			if m := md.MissingBookies(available); len(m) > 0 {
				missing[id] = m
			}
		}
	}
	return missing, nil
}

// mark creates or updates ledger id's mark with the bookies it misses.
func (a *Auditor) mark(ctx context.Context, id int64, missing []string, now time.Time) error {
	store := a.cfg.Meta
	v, st, err := store.Get(ctx, markPath(id))
	if errors.Is(err, meta.ErrNotFound) {
		value, _ := json.Marshal(Mark{MissingBookies: missing, MarkedAt: now.UnixMilli()})
		if _, err := store.Create(ctx, markPath(id), value, 0); err != nil && !errors.Is(err, meta.ErrExists) {
			return fmt.Errorf("marking ledger %d: %w", id, err)
		}
		a.log.Info("ledger under-replicated", "ledger", id, "missingBookies", missing)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the mark of ledger %d: %w", id, err)
	}
	var m Mark
	if json.Unmarshal(v, &m) == nil && slices.Equal(m.MissingBookies, missing) {
		return nil
	}
	if m.MarkedAt == 0 {
		m.MarkedAt = now.UnixMilli()
	}
	m.MissingBookies = missing
	value, _ := json.Marshal(m)
	if _, err := store.Set(ctx, markPath(id), value, st.Version); err != nil &&
		!errors.Is(err, meta.ErrNotFound) && !errors.Is(err, meta.ErrBadVersion) {
		return fmt.Errorf("updating the mark of ledger %d: %w", id, err)
	}
	a.log.Info("ledger under-replicated", "ledger", id, "missingBookies", missing)
	return nil
}

func sortedKeys(m map[int64][]string) []int64 {
	keys := make([]int64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
