package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

func newRootCommand(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "magnetar",
		Short: "Magnetar is a message broker that speaks the Pulsar and Kafka protocols",
		Long: `Magnetar is a message broker in the family of Apache Pulsar: stateless
brokers serve topics, bookies store them, and a metadata store (ZooKeeper, or
an embedded store on one machine) coordinates them. Every broker will speak
both the Pulsar and the Kafka protocol on the same topics.
` + configHelp,
		SilenceUsage:      true,
		SilenceErrors:     true,
		PersistentPreRunE: a.prepare,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	defineFlags(root.PersistentFlags(), globalSettings)
	root.AddCommand(newVersionCommand(a), newStandaloneCommand(a), newBrokerCommand(a), newBookieCommand(a), newPerfCommand(a),
		newAdminCommand(a), newProduceCommand(a), newConsumeCommand(a), newMirrorCommand(a))
	return root
}

// addSettings declares cmd's own settings as flags.
func (a *app) addSettings(cmd *cobra.Command, list []setting) {
	defineFlags(cmd.Flags(), list)
	a.own[cmd] = list
}

// prepare resolves the settings of the command about to run and sets up
// logging. Its errors are usage errors.
func (a *app) prepare(cmd *cobra.Command, _ []string) error {
	vals, err := loadSettings(cmd.Flags(), a.settingsOf(cmd))
	if err != nil {
		return err
	}
	level, err := check(vals, lookupSetting(globalSettings, "log-level"), parseLogLevel)
	if err != nil {
		return err
	}
	format, err := check(vals, lookupSetting(globalSettings, "log-format"), parseLogFormat)
	if err != nil {
		return err
	}
	a.vals = vals
	a.logger = newLogger(a.stderr, level, format)
	return nil
}

func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("want debug, info, warn or error")
}

func parseLogFormat(s string) (string, error) {
	switch s = strings.ToLower(s); s {
	case "text", "json":
		return s, nil
	}
	return "", fmt.Errorf("want text or json")
}

// newLogger returns a logger writing one line per event to w.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
