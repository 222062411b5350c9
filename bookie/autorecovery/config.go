package autorecovery

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
)

// Defaults of Config.
const (
	DefaultAuditInterval = 60 * time.Second
	DefaultGracePeriod   = 30 * time.Second
	DefaultPollInterval  = 30 * time.Second
	DefaultMaxBackoff    = 5 * time.Minute
)

// minBackoff is the first retry delay of a ledger whose re-replication
// failed or was deferred; it doubles up to Config.MaxBackoff.
const minBackoff = time.Second

// Config configures an Auditor, a Worker, or both (Start). Zero durations
// take the defaults.
type Config struct {
	// Meta is the metadata store, on the process's session: the auditor
	// node and replication locks are ephemeral nodes of it. Required. Not
	// closed.
	Meta meta.Store
	// Client re-replicates ledgers. Required by the worker. Not closed.
	Client *client.Client
	// BookieID names this process in the auditor node and in locks.
	// Required.
	BookieID string
	// AuditInterval: the auditor checks every ledger this often, besides
	// on every change of the available bookies. Default 60 s.
	AuditInterval time.Duration
	// GracePeriod: a bookie must be missing this long before the ledgers
	// naming it are marked. Default 30 s.
	GracePeriod time.Duration
	// PollInterval: the worker looks at the marks this often, besides on
	// every change of them (to take over ledgers whose worker died).
	// Default 30 s.
	PollInterval time.Duration
	// MaxBackoff bounds the delay before a ledger whose re-replication
	// failed or was deferred is tried again. Default 5 min.
	MaxBackoff time.Duration
	Logger     *slog.Logger // default slog.Default()
}

func (c *Config) setDefaults() error {
	switch {
	case c.Meta == nil:
		return errors.New("autorecovery: Config.Meta is required")
	case c.BookieID == "":
		return errors.New("autorecovery: Config.BookieID is required")
	case c.AuditInterval < 0, c.GracePeriod < 0, c.PollInterval < 0, c.MaxBackoff < 0:
		return errors.New("autorecovery: negative duration in Config")
	}
	if c.AuditInterval == 0 {
		c.AuditInterval = DefaultAuditInterval
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// backoff is the delay before the next try after failures failed (or
// deferred) tries in a row: minBackoff doubled each time, up to limit.
func backoff(failures int, limit time.Duration) time.Duration {
	d := minBackoff
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Service is an auditor candidate and a worker, as a bookie process runs
// them.
type Service struct {
	auditor *Auditor
	worker  *Worker
}

// Start starts an auditor candidate and a worker.
func Start(cfg Config) (*Service, error) {
	a, err := StartAuditor(cfg)
	if err != nil {
		return nil, err
	}
	w, err := StartWorker(cfg)
	if err != nil {
		a.Close()
		return nil, err
	}
	return &Service{auditor: a, worker: w}, nil
}

// Close stops both and waits for them (a re-replication in progress is
// abandoned; its lock is removed, its mark stays).
func (s *Service) Close() {
	s.worker.Close()
	s.auditor.Close()
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// cleanupTimeout bounds creating and removing the auditor node or a lock
// when ctx has ended.
const cleanupTimeout = 2 * time.Second

// createEphemeral creates an ephemeral node, not cut short when ctx ends
// (but bounded by cleanupTimeout then): a create cut short may still reach
// ZooKeeper, and leave a node this process holds without knowing it until
// its session ends. The caller removes the node once done with it.
func createEphemeral(ctx context.Context, store meta.Store, p string, value []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := store.Create(ctx, p, value, meta.Ephemeral)
	return err
}
