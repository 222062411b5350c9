package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta"
)

// The durable no-op bookie of `perf bookie --perf-durable-noop`: a real
// bookie server (wire protocol, connections, in-process calls) over a
// storage that does only what every bookie must before it acknowledges
// an add: check the entry's checksum, write it and fdatasync (noopStore:
// group commit into a prefilled file used as a ring). No entry log, no
// index, no reads. Its figures under the same load are what the bookie's
// own are compared with: throughput it cannot reach, latency it cannot
// beat, on this machine.

// errNoopBookie answers everything but adds.
var errNoopBookie = errors.New("durable no-op bookie: it stores adds only; nothing can be read, fenced or waited for")

// noopBookieStorage is the bookie.Storage of a durable no-op bookie.
type noopBookieStorage struct {
	store *noopStore
	mu    sync.Mutex
	lacs  map[int64][2]int64 // ledger → LAC and last entry seen
}

func (s *noopBookieStorage) AddEntry(e []byte, _ bool, done func(error)) {
	h, err := entry.Verify(e)
	if err != nil {
		done(fmt.Errorf("%w: %w", storage.ErrChecksum, err))
		return
	}
	if err := s.store.addFunc(e, func(err error) {
		if err == nil {
			s.mu.Lock()
			v, ok := s.lacs[h.Ledger]
			if !ok {
				v = [2]int64{-1, -1}
			}
			s.lacs[h.Ledger] = [2]int64{max(v[0], h.LAC), max(v[1], h.Entry)}
			s.mu.Unlock()
		}
		done(err)
	}); err != nil {
		done(err)
	}
}

func (s *noopBookieStorage) ReadEntry(int64, int64) ([]byte, error) { return nil, errNoopBookie }

func (s *noopBookieStorage) LastAddConfirmed(ledger int64) (int64, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.lacs[ledger]
	if !ok {
		return 0, 0, storage.ErrNoLedger
	}
	return v[0], v[1], nil
}

func (s *noopBookieStorage) WaitLAC(context.Context, int64, int64) (int64, error) {
	return 0, errNoopBookie
}

func (s *noopBookieStorage) Fence(_ int64, done func(int64, int64, error)) { done(0, 0, errNoopBookie) }

func (s *noopBookieStorage) Delete(_ int64, done func(error)) { done(nil) }

// noopBookie is a running durable no-op bookie.
type noopBookie struct {
	id     string // its address, as registered
	server *bookie.Server
	store  *noopStore
	served chan error
}

// startNoopBookie starts a durable no-op bookie on 127.0.0.1, its file in
// dir, registered as available in store; onSync counts its fdatasyncs.
func startNoopBookie(ctx context.Context, dir string, store meta.Store, onSync func(int), log *slog.Logger) (*noopBookie, error) {
	st, err := openNoopStore(ctx, log, vfs.Default, filepath.Join(dir, "noop-bookie"), noopStoreSize, onSync, "")
	if err != nil {
		return nil, err
	}
	srv, err := bookie.NewServer(bookie.ServerConfig{Storage: &noopBookieStorage{store: st, lacs: map[int64][2]int64{}},
		StatusOf: bookie.StorageStatus, Logger: log})
	if err != nil {
		st.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return nil, err
	}
	b := &noopBookie{id: ln.Addr().String(), server: srv, store: st, served: make(chan error, 1)}
	go func() { b.served <- srv.Serve(ln) }()
	if err := meta.EnsurePath(ctx, store, meta.BookiesAvailableRoot); err == nil {
		_, err = store.Create(ctx, meta.Join(meta.BookiesAvailableRoot, b.id), []byte(`{}`), meta.Ephemeral)
	}
	if err != nil {
		b.shutdown(ctx)
		return nil, fmt.Errorf("durable no-op bookie: registering: %w", err)
	}
	return b, nil
}

// shutdown stops the server and the store (its file removed).
func (b *noopBookie) shutdown(ctx context.Context) error {
	err := b.server.Shutdown(ctx)
	if serr := <-b.served; serr != nil {
		err = errors.Join(err, serr)
	}
	b.store.Close()
	return err
}
