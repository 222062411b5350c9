// Package brokertest runs a real broker in-process for the tests of the
// layers above it (protocol/pulsar, protocol/admin): an embedded metadata
// store in a temp dir, one in-process bookie (bookie/bookietest, in
// memory, no fsync), a bookie client, an entry cache and a managed-ledger
// factory, all closed at the test's cleanup in reverse order.
package brokertest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta/local"
)

// Options adjust the stack; nil funcs leave the defaults.
type Options struct {
	// Ledger adjusts the managed-ledger configuration (default: infinite
	// retention, so that tests read back what they wrote).
	Ledger func(*ledger.Config)
	// Broker adjusts the broker configuration.
	Broker func(*broker.Config)
	// Bootstrap creates the cluster, public and public/default first.
	Bootstrap bool
	// Local has the bookie client call the bookie in-process, as the
	// standalone's does, instead of over loopback.
	Local bool
	// BookieFS is the bookie's file system (default: in memory).
	BookieFS vfs.FS
}

// Stack is a running broker and what it stands on.
type Stack struct {
	Broker *broker.Broker
	Meta   *local.Store
	Bookie *bookietest.Bookie
}

// Logger discards logs unless BROKERTEST_LOG is set (then debug to
// stderr).
func Logger() *slog.Logger {
	if os.Getenv("BROKERTEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Start starts the stack; it fails t on any error.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	log := Logger()
	store, err := local.Open(t.TempDir(), local.Options{NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	bk, err := bookietest.Start(store, bookietest.Options{FS: o.BookieFS, Dir: "/b1", NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bk.Stop)
	cc := client.Config{Meta: store, Logger: log, DialTimeout: time.Second}
	if o.Local {
		cc.Local = func(addr string) client.Local {
			if addr == bk.Addr {
				return bk.Server()
			}
			return nil
		}
	}
	c, err := client.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cache, err := ledger.NewCache(ledger.CacheConfig{MaxBytes: 16 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	lc := ledger.Config{Bookies: ledger.ClientBookies(c), Meta: store, Cache: cache,
		RetentionTime: -1, RetentionSize: -1, Logger: log}
	if o.Ledger != nil {
		o.Ledger(&lc)
	}
	f, err := ledger.NewFactory(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f.Close(ctx)
	})
	bc := broker.Config{Meta: store, Ledgers: f, Logger: log}
	if o.Broker != nil {
		o.Broker(&bc)
	}
	b, err := broker.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b.Close(ctx)
	})
	if o.Bootstrap {
		if err := b.Bootstrap(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return &Stack{Broker: b, Meta: store, Bookie: bk}
}
