package bookie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/meta"
)

// Config configures a bookie node.
type Config struct {
	// Listener serves the bookie protocol. Required.
	Listener net.Listener
	// ID is the bookie's identity and the address clients dial (host:port),
	// registered at /bookies/available/<ID>. Default: the listener's address.
	ID string
	// Storage configures ledger storage; its Dir (and JournalDir) are the
	// bookie's data directories.
	Storage storage.Options
	// Meta is the metadata store. Required.
	Meta   meta.Store
	Logger *slog.Logger
	// Version is reported in the registration.
	Version string
	// LedgerGCInterval: how often the bookie deletes ledgers whose metadata
	// is gone (deleted while it was down). Default 5 minutes; negative
	// disables it.
	LedgerGCInterval time.Duration
}

// Bookie is a running storage node.
type Bookie struct {
	cfg     Config
	log     *slog.Logger
	storage *storage.Storage
	server  *Server
	served  chan error

	regCtx    context.Context
	regCancel context.CancelFunc
	regDone   chan struct{}
	gcStop    chan struct{}
	gcDone    chan struct{}
	roStop    chan struct{} // the read-only mark's loop (readonly.go)
	roResync  chan struct{} // capacity 1: write the mark again
	roDone    chan struct{}
	roFailing bool // the loop's own: its last write of the mark failed
	closeOnce sync.Once
}

// registration is the value of /bookies/available/<id>.
type registration struct {
	Address string `json:"address"`
	Version string `json:"version,omitempty"`
	Started int64  `json:"startedMs"`
}

// Start opens storage, checks the cookie, starts serving and registers the
// bookie as available. On error everything opened is closed again.
func Start(ctx context.Context, cfg Config) (_ *Bookie, err error) {
	if cfg.Listener == nil || cfg.Meta == nil {
		return nil, errors.New("bookie: Config.Listener and Config.Meta are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == "" {
		cfg.ID = cfg.Listener.Addr().String()
	}
	if cfg.Storage.Logger == nil {
		cfg.Storage.Logger = cfg.Logger
	}
	fs := cfg.Storage.FS
	if fs == nil {
		fs = vfs.Default
	}
	dirs := []string{cfg.Storage.Dir}
	if cfg.Storage.JournalDir != "" && cfg.Storage.JournalDir != cfg.Storage.Dir {
		dirs = append(dirs, cfg.Storage.JournalDir)
	}
	if err := checkCookie(ctx, fs, cfg.Meta, cookie{BookieID: cfg.ID, DataDir: cfg.Storage.Dir, JournalDir: cfg.Storage.JournalDir}, dirs); err != nil {
		return nil, err
	}
	st, err := storage.Open(cfg.Storage)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	srv, err := NewServer(ServerConfig{Storage: st, Logger: cfg.Logger, StatusOf: StorageStatus})
	if err != nil {
		return nil, err
	}
	b := &Bookie{cfg: cfg, log: cfg.Logger, storage: st, server: srv, served: make(chan error, 1), regDone: make(chan struct{}),
		roStop: make(chan struct{}), roResync: make(chan struct{}, 1), roDone: make(chan struct{})}
	go func() { b.served <- srv.Serve(cfg.Listener) }()
	// Session events are watched from before the registration: an expiry
	// right after it (before a goroutine got to subscribing) would
	// otherwise go unseen, and the bookie stay unregistered.
	events, stopEvents := cfg.Meta.SessionEvents()
	if err := b.register(ctx); err != nil {
		stopEvents()
		srv.Shutdown(ctx)
		return nil, err
	}
	b.regCtx, b.regCancel = context.WithCancel(context.Background())
	go b.keepRegistered(events, stopEvents)
	go b.keepReadOnlyMark(b.roStop, b.roResync, b.roDone)
	b.gcStop, b.gcDone = make(chan struct{}), make(chan struct{})
	switch interval := cfg.LedgerGCInterval; {
	case interval == 0:
		interval = 5 * time.Minute
		fallthrough
	case interval > 0:
		go func() { defer close(b.gcDone); b.ledgerGCLoop(interval, b.gcStop) }()
	default:
		close(b.gcDone)
	}
	b.log.Info("bookie started", "id", cfg.ID, "data-dir", cfg.Storage.Dir, "journal-dir", cfg.Storage.JournalDir)
	return b, nil
}

// ID returns the bookie's id (its address).
func (b *Bookie) ID() string { return b.cfg.ID }

// Local returns the bookie's server for calls from the same process
// (bookie/client's Config.Local).
func (b *Bookie) Local() *Server { return b.server }

// Storage returns the bookie's ledger storage (for in-process tools).
func (b *Bookie) Storage() *storage.Storage { return b.storage }

func (b *Bookie) registrationPath() string { return meta.Join(meta.BookiesAvailableRoot, b.cfg.ID) }

// register creates the ephemeral availability node. A node left by this
// bookie's previous session (not yet expired) is replaced.
func (b *Bookie) register(ctx context.Context) error {
	v, _ := json.Marshal(registration{Address: b.cfg.ID, Version: b.cfg.Version, Started: time.Now().UnixMilli()})
	if err := meta.EnsurePath(ctx, b.cfg.Meta, meta.BookiesAvailableRoot); err != nil {
		return err
	}
	p := b.registrationPath()
	for range 3 {
		_, err := b.cfg.Meta.Create(ctx, p, v, meta.Ephemeral)
		if !errors.Is(err, meta.ErrExists) {
			if err != nil {
				return fmt.Errorf("bookie: registering %s: %w", p, err)
			}
			return nil
		}
		st, ok, err := b.cfg.Meta.Exists(ctx, p)
		if err != nil {
			return err
		}
		if ok && !st.Ephemeral {
			return fmt.Errorf("bookie: %s exists and is not ephemeral; remove it", p)
		}
		// An old session's node: delete it (it would vanish at expiry).
		if err := b.cfg.Meta.Delete(ctx, p, meta.AnyVersion); err != nil && !errors.Is(err, meta.ErrNotFound) {
			return err
		}
	}
	return fmt.Errorf("bookie: %s keeps being re-created by someone else: is another bookie running with id %s?", p, b.cfg.ID)
}

// keepRegistered re-registers after a session expiry (from events),
// which deletes the ephemeral node.
func (b *Bookie) keepRegistered(events <-chan meta.SessionEvent, stopEvents func()) {
	defer close(b.regDone)
	defer stopEvents()
	for {
		select {
		case <-b.regCtx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.State != meta.SessionExpired {
				continue
			}
			b.log.Warn("metadata session expired; registering again", "path", b.registrationPath())
			select { // the read-only mark went with the session too
			case b.roResync <- struct{}{}:
			default:
			}
			for b.regCtx.Err() == nil {
				ctx, cancel := context.WithTimeout(b.regCtx, 30*time.Second)
				err := b.register(ctx)
				cancel()
				if err == nil {
					break
				}
				b.log.Error("re-registration failed; retrying", "err", err)
				select {
				case <-time.After(time.Second):
				case <-b.regCtx.Done():
				}
			}
		}
	}
}

// Shutdown deregisters the bookie, answers requests in flight (within
// ctx), and closes storage.
func (b *Bookie) Shutdown(ctx context.Context) error {
	var err error
	b.closeOnce.Do(func() {
		b.regCancel()
		<-b.regDone
		close(b.roStop)
		<-b.roDone
		close(b.gcStop)
		<-b.gcDone
		if derr := b.cfg.Meta.Delete(ctx, b.registrationPath(), meta.AnyVersion); derr != nil && !errors.Is(derr, meta.ErrNotFound) {
			b.log.Warn("deregistering", "err", derr)
		}
		err = b.server.Shutdown(ctx)
		if serr := <-b.served; serr != nil {
			err = errors.Join(err, serr)
		}
		err = errors.Join(err, b.storage.Close())
		b.log.Info("bookie stopped", "id", b.cfg.ID)
	})
	return err
}

// StorageStatus maps ledger storage errors to wire statuses.
func StorageStatus(err error) wire.Status {
	switch {
	case errors.Is(err, storage.ErrFenced):
		return wire.StatusFenced
	case errors.Is(err, storage.ErrNoLedger):
		return wire.StatusNoLedger
	case errors.Is(err, storage.ErrNoEntry):
		return wire.StatusNoEntry
	case errors.Is(err, storage.ErrClosed):
		return wire.StatusShuttingDown
	case errors.Is(err, storage.ErrReadOnly):
		return wire.StatusReadOnly
	case errors.Is(err, storage.ErrChecksum):
		return wire.StatusChecksum
	case errors.Is(err, storage.ErrMalformed):
		return wire.StatusMalformed
	}
	return wire.StatusOf(err)
}
