// Package bookietest runs bookies in-process for the tests of the layers
// above them (bookie/client, ledger, broker): real ledger storage
// (bookie/storage) served by a real bookie server on loopback, registered
// as available in a metadata store. It leaves out the cookie check and
// re-registration of a full bookie node (bookie.Start), which tests of
// those layers do not need.
package bookietest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta"
)

// Options say where a test bookie keeps its data and how it is served.
type Options struct {
	FS     vfs.FS // default vfs.NewMem()
	Dir    string // required
	NoSync bool
	// Addr is the listen address; default 127.0.0.1:0. A bookie restarted
	// on the same data must keep its address: it is its identity.
	Addr string
	// EntryLogMaxSize: entry logs roll over past this size; default the
	// storage's.
	EntryLogMaxSize int64
	Logger          *slog.Logger // default: discard
	// Wrap, if set, wraps the storage the server serves (to inject faults).
	Wrap func(*storage.Storage) bookie.Storage
}

// Bookie is a running test bookie. Checkpoints, GC and disk checks run
// only when the test calls them on Storage.
type Bookie struct {
	Addr    string
	Storage *storage.Storage
	FS      vfs.FS
	Dir     string

	server   *bookie.Server
	stopOnce sync.Once
}

// Start opens storage, serves it on a loopback listener and registers the
// bookie under /bookies/available in store.
func Start(store meta.Store, o Options) (*Bookie, error) {
	if o.Dir == "" {
		return nil, errors.New("bookietest: Options.Dir is required")
	}
	if o.FS == nil {
		o.FS = vfs.NewMem()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	st, err := storage.Open(storage.Options{FS: o.FS, Dir: o.Dir, NoSync: o.NoSync,
		CheckpointInterval: -1, GCInterval: -1, DiskCheckInterval: -1, EntryLogMaxSize: o.EntryLogMaxSize, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	var served bookie.Storage = st
	if o.Wrap != nil {
		served = o.Wrap(st)
	}
	srv, err := bookie.NewServer(bookie.ServerConfig{Storage: served, StatusOf: bookie.StorageStatus, Logger: o.Logger})
	if err != nil {
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		st.Close()
		return nil, err
	}
	go srv.Serve(ln)
	b := &Bookie{Addr: ln.Addr().String(), Storage: st, FS: o.FS, Dir: o.Dir, server: srv}
	ctx := context.Background()
	if err := meta.EnsurePath(ctx, store, meta.BookiesAvailableRoot); err != nil {
		b.Stop()
		return nil, err
	}
	if _, err := store.Create(ctx, meta.Join(meta.BookiesAvailableRoot, b.Addr), []byte(`{}`), meta.Ephemeral); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// Stop makes the bookie fail at once, as a crash would from the clients'
// side: connections break, new ones are refused, storage is closed. Its
// registration stays until its session ends or Deregister. Stop is
// idempotent.
func (b *Bookie) Stop() {
	b.stopOnce.Do(func() {
		expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		b.server.Shutdown(expired)
		b.Storage.Close()
	})
}

// Server is the bookie's server, for in-process calls (bookie/client's
// Config.Local).
func (b *Bookie) Server() *bookie.Server { return b.server }

// Deregister removes the bookie from /bookies/available.
func (b *Bookie) Deregister(store meta.Store) error {
	return store.Delete(context.Background(), meta.Join(meta.BookiesAvailableRoot, b.Addr), meta.AnyVersion)
}

// EntryLogBytes returns the size of the bookie's entry logs on its FS.
func (b *Bookie) EntryLogBytes() (int64, error) {
	dir := b.FS.PathJoin(b.Dir, "entrylogs")
	names, err := b.FS.List(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		if fi, err := b.FS.Stat(b.FS.PathJoin(dir, name)); err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}

// FullDisk wraps fs in a file system whose file writes fail with ENOSPC,
// as a full disk's do, while the returned toggle is on: a bookie on it
// turns read-only.
func FullDisk(fs vfs.FS) (vfs.FS, *errorfs.Toggle) {
	full := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt {
			return syscall.ENOSPC
		}
		return nil
	})}
	return errorfs.Wrap(fs, full), full
}
