package main

import (
	"errors"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"
)

var perfNoopSettings = []setting{
	{"perf-noop-protocol", "pulsar", "protocol", "the protocol served: pulsar or kafka"},
	{"perf-noop-store-dir", "", "dir", "directory of the store file (noop-store, removed on exit): with it, each message or produce request is acknowledged once written and fdatasync'd; without it (pulsar only), at once"},
	{"perf-noop-entry-log", "false", "bool", "with perf-noop-store-dir: also write every byte a second time once durable, to a growing file beside the store (noop-entrylog), as a bookie writes its entry log after its journal"},
}

var noopProtocols = map[string]bool{"pulsar": true, "kafka": true}

// newPerfNoopCommand is `magnetar perf noop-broker`, which perf all starts
// as a child process, as it starts the standalone: a floor measured in a
// process of its own, as Magnetar's figures are. Hidden: it is part of the
// benchmark, not a broker.
func newPerfNoopCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "noop-broker",
		Short:  "Serve producers (and Kafka consumers) with a no-op broker (part of perf all)",
		Hidden: true,
		Long: `Serve Pulsar or Kafka producers on a free loopback port with a broker that
stores nothing (pulsar only) or only writes what it is sent to a file and
fdatasyncs it before acknowledging (group commit), and with
perf-noop-entry-log writes it a second time after, as a bookie's entry log,
until SIGINT or SIGTERM. The Kafka one also serves consumers as a broker
only sending: a fetch gets batches sampled from what was produced to the
partition (one in 8 MiB, 16 MiB of them at most), sent from memory at the
offsets asked for.
It logs "magnetar perf noop-broker ready" with its address once it listens.
perf all runs it as a child process, for the floors of its table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := func(name string) setting { return lookupSetting(perfNoopSettings, name) }
			protocol, err := check(a.vals, s("perf-noop-protocol"), parseChoice(noopProtocols))
			if err != nil {
				return err
			}
			dir, err := check(a.vals, s("perf-noop-store-dir"), func(v string) (string, error) { return v, nil })
			if err != nil {
				return err
			}
			if protocol == "kafka" && dir == "" {
				return errors.New("perf-noop-store-dir: the Kafka no-op broker needs a store")
			}
			twice, err := check(a.vals, s("perf-noop-entry-log"), parseBool)
			if err != nil {
				return err
			}
			if twice && dir == "" {
				return errors.New("perf-noop-entry-log: needs perf-noop-store-dir")
			}
			var entryLog string
			if twice {
				entryLog = filepath.Join(dir, "noop-entrylog")
			}
			ctx, stop := a.perfSignals()
			defer stop()
			var store *noopStore
			if dir != "" {
				if store, err = openNoopStore(ctx, a.logger, vfs.Default, filepath.Join(dir, "noop-store"), noopStoreSize, nil, entryLog); err != nil {
					return runtimeError(err)
				}
				defer store.Close()
			}
			var addr string
			var closeBroker func()
			if protocol == "kafka" {
				k, err := startNoopKafka(a.logger, store)
				if err != nil {
					return runtimeError(err)
				}
				addr, closeBroker = k.Addr(), k.Close
			} else {
				p, err := startNoopPulsar(a.logger, store)
				if err != nil {
					return runtimeError(err)
				}
				addr, closeBroker = p.Addr(), p.Close
			}
			defer closeBroker()
			a.logger.Info("magnetar perf noop-broker ready", "addr", addr, "protocol", protocol, "store", dir != "", "entry-log", twice)
			<-ctx.Done()
			return nil
		},
	}
	a.addSettings(cmd, perfNoopSettings)
	return cmd
}
