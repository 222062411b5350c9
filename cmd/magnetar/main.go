// Command magnetar is the Magnetar message broker: one binary whose
// subcommands run a standalone broker and, in later releases, brokers,
// bookies and client tools.
//
// Exit codes: 0 success, 1 runtime failure (a busy port, an unwritable
// data dir, a second signal during shutdown), 2 usage error (a bad flag,
// setting or config file).
package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(execute(newApp(os.Stdout, os.Stderr), os.Args[1:]))
}

// app holds what the commands share: output streams, the settings each
// command declared, and what PersistentPreRunE resolved for the command
// being run. Tests replace the hooks.
type app struct {
	stdout, stderr io.Writer
	own            map[*cobra.Command][]setting // each command's settings beyond the global ones

	vals   *settingValues // set by prepare
	logger *slog.Logger   // set by prepare

	// Hooks, replaced in tests.
	runStandalone func(cfg standaloneConfig) error  // the standalone server
	runBookie     func(cfg bookieConfig) error      // a bookie process
	notify        func() (<-chan os.Signal, func()) // SIGINT and SIGTERM
	hostname      func() (string, error)            // advertised host of 0.0.0.0
}

func newApp(stdout, stderr io.Writer) *app {
	a := &app{
		stdout:   stdout,
		stderr:   stderr,
		own:      map[*cobra.Command][]setting{},
		notify:   notifySignals,
		hostname: os.Hostname,
	}
	a.runStandalone = a.standalone
	a.runBookie = a.bookie
	return a
}

func notifySignals() (<-chan os.Signal, func()) {
	// Room for two: the first starts the shutdown, the second cuts it short.
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

// exitError carries the exit code of a failure. Errors without one are
// usage errors (cobra's own flag and argument errors among them).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

const (
	exitRuntime = 1
	exitUsage   = 2
)

// runtimeError marks a failure of the running program (exit code 1), as
// opposed to a mistake in how it was invoked (exit code 2).
func runtimeError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitRuntime, err: err}
}

// execute runs the command line args and returns the exit code.
func execute(a *app, args []string) int {
	root := newRootCommand(a)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	code := exitUsage
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(a.stderr, "%s: %v\n", cmd.CommandPath(), err)
	if code == exitUsage {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}
