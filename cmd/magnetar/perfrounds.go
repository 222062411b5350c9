package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"

	"github.com/apache/pulsar-client-go/pulsar"
)

// The publish latency loads in rounds: perf all's last phase.
//
// A p99 of a 10 s load on a shared virtual machine moves by a factor of
// two or more from one minute to the next (the host's steal, its disk's
// flushes), and the loads of the earlier phases run minutes apart from
// their floors: a goal of 2 ms then reads met or not by the minute it ran
// in. In rounds, each publish latency load runs against Magnetar and
// against its durable no-op broker back to back, the order swapped every
// round, on processes started for the phase, and the goal is judged on
// the median of the rounds' p99s beside the median of the floor's.

// roundSeries is one publish latency load's rounds: each round's p99 (ms)
// and the host's CPU steal over it (a fraction; NaN where not measured),
// against Magnetar and against the load's durable no-op broker.
type roundSeries struct {
	magnetar, floor           []float64
	magnetarSteal, floorSteal []float64
}

// median is the middle of v (the mean of the two middle values when there
// are as many below as above); NaN if v is empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// roundsLoads are the loads run in rounds, in their order in a round.
func roundsLoads() []string {
	var loads []string
	for _, r := range benchRates {
		loads = append(loads, loadAt("kafka-publish", r.rate), loadAt("pulsar-publish", r.rate))
	}
	return loads
}

// roundsParty is what a load in rounds runs against.
type roundsParty struct {
	name string
	run  func(ctx context.Context, rate float64) (*pulsarResult, error)
}

// runRounds runs the publish latency loads in cfg.Rounds rounds against a
// fresh standalone and fresh durable no-op brokers, all started from exe
// with their data under dir; the p99s go into res.rounds.
func (b *benchRun) runRounds(ctx context.Context, exe, dir string, logs io.Writer, res *benchResults) (err error) {
	n := b.cfg.Rounds
	if n == 0 || ctx.Err() != nil {
		return nil
	}
	fmt.Fprintf(b.out, "\n[rounds] the publish latency loads again in %d rounds: each against Magnetar and against its durable no-op broker back to back, the order swapped every round; a fresh standalone and fresh durable no-op brokers\n", n)
	sa, err := startStandaloneChild(ctx, exe, filepath.Join(dir, "rounds-standalone"), false, b.cfg.StandaloneArgs, logs)
	if err != nil {
		return err
	}
	defer func() {
		early := sa.hasExited()
		stopErr := sa.stop()
		switch {
		case err != nil && early:
			err = fmt.Errorf("%w\n%s", err, sa.describeExit())
		case err == nil && ctx.Err() == nil:
			err = stopErr
		}
	}()
	floors := map[string]*standaloneChild{}
	for _, protocol := range []string{"kafka", "pulsar"} {
		name := "durable no-op " + protocol
		c, err := startDurableNoop(ctx, exe, name, protocol, false, filepath.Join(dir, "rounds-noop-"+protocol), logs)
		if err != nil {
			return err
		}
		defer func() {
			if serr := c.stop(); err == nil && ctx.Err() == nil {
				err = serr
			}
		}()
		floors[protocol] = c
	}
	saClient, err := newBenchPulsarClient(b.log, "pulsar://"+sa.ready.Pulsar)
	if err != nil {
		return err
	}
	defer saClient.Close()
	noopClient, err := newBenchPulsarClient(b.log, "pulsar://"+floors["pulsar"].ready.Addr)
	if err != nil {
		return err
	}
	defer noopClient.Close()

	kafka := func(name, addr string) roundsParty {
		return roundsParty{name, func(ctx context.Context, rate float64) (*pulsarResult, error) {
			f, err := runKafkaLoads(ctx, b.out, name, []string{addr}, b.kafkaConfig(topic4p, 4, "latency", rate), b.log)
			return f.Latency, err
		}}
	}
	pulsarParty := func(name string, client pulsar.Client, prefix string) roundsParty {
		return roundsParty{name, func(ctx context.Context, rate float64) (*pulsarResult, error) {
			return b.pulsarProduce(ctx, client, prefix+loadAt("pulsar-publish", rate), false, rate)
		}}
	}
	parties := map[string][2]roundsParty{ // the floor, then Magnetar
		"kafka":  {kafka("durable no-op kafka", floors["kafka"].ready.Addr), kafka("magnetar", sa.ready.Kafka)},
		"pulsar": {pulsarParty("durable no-op pulsar", noopClient, "rounds-noop-"), pulsarParty("magnetar", saClient, "rounds-")},
	}
	res.rounds = map[string]*roundSeries{}
	for round := 1; round <= n; round++ {
		for _, r := range benchRates {
			for _, protocol := range []string{"kafka", "pulsar"} {
				load := loadAt(protocol+"-publish", r.rate)
				s := res.rounds[load]
				if s == nil {
					s = &roundSeries{}
					res.rounds[load] = s
				}
				order := parties[protocol]
				if round%2 == 0 {
					order[0], order[1] = order[1], order[0]
				}
				for _, p := range order {
					fmt.Fprintf(b.out, "\n[round %d/%d, %s] %s\n", round, n, p.name, load)
					before, measured := readHostCPU()
					f, err := p.run(ctx, r.rate)
					if ctx.Err() != nil {
						return nil
					}
					if err == nil && f == nil {
						err = fmt.Errorf("no figures")
					}
					if err != nil {
						return fmt.Errorf("round %d: %s: %s: %w", round, p.name, load, err)
					}
					steal := math.NaN()
					if after, ok := readHostCPU(); measured && ok {
						if frac, ok := after.stealSince(before); ok {
							steal = frac
							fmt.Fprintf(b.out, "the host's CPU steal during the load: %.1f %%\n", 100*frac)
						}
					}
					p99 := ms(f.Latency.Quantile(0.99))
					if p.name == "magnetar" {
						s.magnetar, s.magnetarSteal = append(s.magnetar, p99), append(s.magnetarSteal, steal)
					} else {
						s.floor, s.floorSteal = append(s.floor, p99), append(s.floorSteal, steal)
					}
				}
			}
		}
	}
	return nil
}

// roundsTable lists every round of every load: the p99s and the steal of
// Magnetar and of the floor; nil if no rounds ran.
func roundsTable(res *benchResults) *table {
	if len(res.rounds) == 0 {
		return nil
	}
	t := &table{head: []string{"load", "round", "magnetar p99 ms", "durable no-op p99 ms", "magnetar ÷ durable no-op", "steal % (magnetar)", "steal % (durable no-op)"}}
	pct := func(f float64) string {
		if math.IsNaN(f) {
			return "-"
		}
		return fmt.Sprintf("%.1f", 100*f)
	}
	for _, load := range roundsLoads() {
		s := res.rounds[load]
		if s == nil {
			continue
		}
		for i := range min(len(s.magnetar), len(s.floor)) {
			t.rows = append(t.rows, []string{load, fmt.Sprint(i + 1), fmt.Sprintf("%.3f", s.magnetar[i]), fmt.Sprintf("%.3f", s.floor[i]),
				fmt.Sprintf("%.2f", ratio(s.magnetar[i], s.floor[i])), pct(s.magnetarSteal[i]), pct(s.floorSteal[i])})
		}
	}
	return t
}

// roundsNote says what the rounds table is.
const roundsNote = `The publish latency loads in rounds: after the other loads, each publish latency load again against a fresh standalone and against its durable no-op broker (fresh too), back to back, the order swapped every round (the floor first in odd rounds), the host's CPU steal over each; the "median of the rounds" rows above are these, and the publish p99 goals are judged on them`

// roundsMagnetar is the median of Magnetar's p99s over the rounds of load.
func roundsMagnetar(load string) func(*benchResults) (float64, bool) {
	return func(res *benchResults) (float64, bool) {
		s := res.rounds[load]
		if s == nil || len(s.magnetar) == 0 {
			return 0, false
		}
		return median(s.magnetar), true
	}
}

// roundsFloorLimit names the median of the floor's p99s over the rounds
// of load in benchLimits.
func roundsFloorLimit(load string) string { return "rounds-floor-" + load }
