package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
)

// newPerfKFakeCommand is `magnetar perf kfake-broker`, which perf all
// starts as a child process, as it starts the standalone: the peer in a
// process of its own. In the benchmark's process kfake shared the Kafka
// client's garbage collector, and the gigabytes it holds paced that
// collector for the client: with it, the client spent less CPU per MB
// than with any broker in another process (warm consume 1,382–1,558 MB/s
// in-process, 199–870 MB/s in a process of its own, the same loads).
// Hidden: it is part of the benchmark, not a broker.
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
