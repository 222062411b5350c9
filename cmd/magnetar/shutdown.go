package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// errSecondSignal is returned when a second signal arrives during
// shutdown: the process exits at once with code 1, leaving the shutdown
// unfinished.
var errSecondSignal = errors.New("second signal during shutdown: exiting without finishing it")

// awaitShutdown waits for the first signal on sigs (or for the server to
// fail, reported on failed), then runs stop with a context that ends after
// timeout. It returns stop's error, or the server's failure. A second
// signal while stop runs makes it return errSecondSignal at once; stop is
// left running for the process to cut short by exiting.
func awaitShutdown(log *slog.Logger, sigs <-chan os.Signal, failed <-chan error, stop func(context.Context) error, timeout time.Duration) error {
	var cause error
	select {
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "timeout", timeout)
	case err := <-failed:
		if err == nil {
			err = errors.New("server stopped unexpectedly")
		}
		log.Error("server failed; shutting down", "err", err)
		cause = err
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- stop(ctx) }()

	select {
	case err := <-stopped:
		if err != nil {
			log.Error("shutdown incomplete", "err", err)
			return errors.Join(cause, fmt.Errorf("shutdown: %w", err))
		}
		if cause != nil {
			return cause
		}
		log.Info("shutdown complete")
		return nil
	case sig := <-sigs:
		log.Warn("second signal; exiting now without finishing shutdown", "signal", sig.String())
		return errSecondSignal
	}
}

// watchStartup cancels the returned context if a signal arrives while a
// command starts up (connecting to ZooKeeper can take a while). started
// stops the watch and returns the signal that arrived, if any; later
// signals are left on sigs for awaitShutdown.
func watchStartup(sigs <-chan os.Signal) (ctx context.Context, started func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	var sig os.Signal
	stop, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case sig = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	return ctx, func() os.Signal {
		close(stop)
		<-watching
		cancel()
		return sig
	}
}
