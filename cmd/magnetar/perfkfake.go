package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kfakeGCPercent is kfake's GOGC (see newPerfKFakeCommand).
const kfakeGCPercent = 10

// newPerfKFakeCommand is `magnetar perf kfake-broker`, which perf all
// starts as a child process, as it starts the standalone: the peer in a
// process of its own. In the benchmark's process kfake shared the Kafka
// client's garbage collector, and the gigabytes it holds paced that
// collector for the client. Hidden: it is part of the benchmark, not a
// broker.
//
// kfake holds every record in its heap. With Go's default GOGC (100) its
// heap grows to twice the records held before it collects, and on a
// virtual machine whose host backs memory lazily every page of that
// growth costs the host's first touch: after produce loads like the
// benchmark's (about 8 GB held) kfake's first two consume passes read 335
// and 486 MB/s while its resident memory grew to 18 and then 21 GB, the
// third 1,571 (BENCHMARKS.md, "Twenty-ninth look"). So it runs with GOGC
// 10 (unless GOGC is set): its heap stays within a tenth of what it holds
// (10 GB resident there), and its figures are its steady state, the peer
// at its best, not its heap's growth.
func newPerfKFakeCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:    "kfake-broker",
		Short:  "Serve Kafka clients with franz-go's kfake (part of perf all)",
		Hidden: true,
		Long: `Serve Kafka clients with franz-go's in-memory fake Kafka (pkg/kfake), one
broker on a free loopback port, until SIGINT or SIGTERM. It logs
"magnetar perf kfake-broker ready" with its address once it listens.
perf all runs it as a child process, for the kfake column of its table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := a.perfSignals()
			defer stop()
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(kfakeGCPercent)
			}
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				return runtimeError(fmt.Errorf("kfake: %w", err))
			}
			defer c.Close()
			a.logger.Info("magnetar perf kfake-broker ready", "addr", c.ListenAddrs()[0])
			<-ctx.Done()
			return nil
		},
	}
}
