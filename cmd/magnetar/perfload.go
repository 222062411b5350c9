package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// appender is what a perf load needs of a ledger writer (*client.Writer):
// asynchronous adds whose done callbacks run one at a time, in add order.
type appender interface {
	Append(payload []byte, done func(entryID int64, err error))
}

// loadConfig describes the adds of a perf run.
type loadConfig struct {
	EntrySize int           // payload bytes per add
	Duration  time.Duration // how long adds are sent
	// Rate > 0 is an open loop: add i is due at start + i/Rate and its
	// latency runs from then, not from when it could be sent, so a stall
	// shows in the latency of every add it delays (no coordinated
	// omission). Rate 0 is a closed loop: each add is sent as soon as one
	// of InFlight slots is free, its latency timed from the send.
	Rate     float64
	InFlight int           // adds outstanding at most
	Interval time.Duration // between progress reports
}

// loadInterval is one progress report: the adds completed in an interval.
type loadInterval struct {
	At      time.Duration // end of the interval, since the start
	Length  time.Duration
	Latency *latencyHist
}

// loadResult sums up a load.
type loadResult struct {
	Entries int64         // adds completed successfully
	Elapsed time.Duration // from the start to the last completion
	Latency latencyHist
}

// runLoad adds entries to w as cfg says until cfg.Duration has passed, ctx
// ends or an add fails, then waits for the adds outstanding. Every
// cfg.Interval, and once at the end for the rest, it calls report (from
// another goroutine, one call at a time). The error is the first failed
// add's; the result counts what completed before it.
func runLoad(ctx context.Context, w appender, cfg loadConfig, report func(loadInterval)) (*loadResult, error) {
	payload := make([]byte, cfg.EntrySize)
	rng := rand.New(rand.NewPCG(1, 2)) // incompressible, and the same every run
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	lctx, stop := context.WithDeadline(ctx, end)
	defer stop()

	// Invariant: a slot is held from just before an Append until its done
	// callback; filling every slot therefore waits for every add.
	slots := make(chan struct{}, cfg.InFlight)
	var (
		mu       sync.Mutex
		cur      = new(latencyHist) // completions of the current interval
		res      loadResult
		lastDone time.Time
		firstErr error
	)
	doneFrom := func(due time.Time) func(int64, error) {
		return func(_ int64, err error) {
			now := time.Now()
			mu.Lock()
			if err == nil {
				cur.Record(now.Sub(due))
				res.Entries++
				lastDone = now
			} else if firstErr == nil {
				firstErr = err
				stop()
			}
			mu.Unlock()
			<-slots
		}
	}

	finish := make(chan struct{})
	reported := make(chan struct{})
	go func() { // progress reports, and the total
		defer close(reported)
		t := time.NewTicker(cfg.Interval)
		defer t.Stop()
		last := start
		for {
			var now time.Time
			final := false
			select {
			case now = <-t.C:
			case <-finish:
				now, final = time.Now(), true
			}
			mu.Lock()
			h := cur
			cur = new(latencyHist)
			mu.Unlock()
			res.Latency.Merge(h)
			if !final || h.Count() > 0 {
				report(loadInterval{At: now.Sub(start), Length: now.Sub(last), Latency: h})
			}
			last = now
			if final {
				return
			}
		}
	}()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
send:
	for i := 0; lctx.Err() == nil; i++ {
		due := start
		if cfg.Rate > 0 {
			due = start.Add(time.Duration(float64(i) * float64(time.Second) / cfg.Rate))
			if !due.Before(end) {
				break
			}
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-lctx.Done():
					break send
				}
			}
		}
		select {
		case slots <- struct{}{}:
		case <-lctx.Done():
			break send
		}
		if cfg.Rate == 0 {
			due = time.Now()
		}
		w.Append(payload, doneFrom(due))
	}
	timer.Stop()
	for range cap(slots) { // wait for the adds outstanding
		slots <- struct{}{}
	}
	close(finish)
	<-reported

	mu.Lock()
	defer mu.Unlock()
	res.Elapsed = time.Since(start)
	if res.Entries > 0 {
		res.Elapsed = lastDone.Sub(start)
	}
	if firstErr != nil {
		return &res, fmt.Errorf("add failed after %d entries: %w", res.Entries, firstErr)
	}
	return &res, nil
}
