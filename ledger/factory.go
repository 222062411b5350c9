package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/magnetar-io/magnetar/meta"
)

// Factory opens managed ledgers by name; they share its Config (bookies,
// metadata store, cache, limits). A name is open at most once per factory.
type Factory struct {
	cfg Config

	mu     sync.Mutex
	open   map[string]*ManagedLedger // nil value: being opened
	closed bool
}

// NewFactory validates cfg and returns a factory.
func NewFactory(cfg Config) (*Factory, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Factory{cfg: cfg, open: make(map[string]*ManagedLedger)}, nil
}

// Path returns the metadata node of the managed ledger name, or
// ErrInvalidName. Names are path-like ("tenant/ns/persistent/topic").
func Path(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w %q: must be a relative path", ErrInvalidName, name)
	}
	p := meta.Join(meta.ManagedLedgersRoot, name)
	if err := meta.ValidatePath(p); err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidName, name, err)
	}
	return p, nil
}

// Open opens the managed ledger name, creating it if it does not exist.
// Opening recovers the ledgers its previous owner left open (fencing that
// owner: its appends fail from then on) and starts a new ledger for
// appends, unless the managed ledger is terminated. ErrAlreadyOpen if
// this factory has it open. Options (WithRetention) apply before anything
// is trimmed.
func (f *Factory) Open(ctx context.Context, name string, opts ...OpenOption) (*ManagedLedger, error) {
	path, err := Path(name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: factory", ErrClosed)
	}
	if _, ok := f.open[name]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyOpen, name)
	}
	f.open[name] = nil
	f.mu.Unlock()

	ml, err := open(ctx, f, name, path, opts)
	if err == nil {
		// Every durable cursor is loaded before anything is trimmed.
		if err = ml.loadCursors(ctx); err != nil {
			ml.Close(ctx)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		delete(f.open, name)
		return nil, err
	}
	f.open[name] = ml
	ml.startTrimming()
	return ml, nil
}

// forget is called by a managed ledger that closed.
func (f *Factory) forget(ml *ManagedLedger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.open[ml.name] == ml {
		delete(f.open, ml.name)
	}
}

// Close closes every managed ledger open in the factory (see
// ManagedLedger.Close) and refuses further Opens. It does not close the
// Config's bookies, store or cache.
func (f *Factory) Close(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	var mls []*ManagedLedger
	for _, ml := range f.open {
		if ml != nil {
			mls = append(mls, ml)
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, ml := range mls {
		errs = append(errs, ml.Close(ctx))
	}
	return errors.Join(errs...)
}
