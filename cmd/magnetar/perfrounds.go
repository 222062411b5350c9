package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/broker"
)

// The goals that compare Magnetar with a floor, in rounds: perf all's
// last phase.
//
// A p99 of a 10 s load on a shared virtual machine moves by a factor of
// two or more from one minute to the next (the host's steal, its disk's
// flushes), a throughput by a quarter, and the loads of the earlier
// phases run minutes apart from their floors and from each other: a goal
// then reads met or not by the minute it ran in. In rounds, each publish
// latency load runs against Magnetar and against its durable no-op broker
// back to back, the order swapped every round, and the batched Pulsar
// produce against both right after Magnetar's 1-partition Kafka produce it
// is compared with, all on processes started for the phase; the goals are
// judged on the medians of the rounds.

// roundSeries is one load's rounds: each round's figure (the p99 in ms of
// a publish latency load, the MB/s of a produce) and the host's CPU steal
// over it (a fraction; NaN where not measured), against Magnetar and
// against the load's durable no-op broker (none for the Kafka produce);
// for a produce, also the CPU per MB of the two parties.
//
// For a publish latency load also the load generator's own lateness (the
// p99 of its send lag, in ms: how late it sent the messages due, which a
// broker's answers do not cause) against each, and the slowest journal fdatasync of
// Magnetar's bookie over the load (histDelta.slowest): what tells a
// round's bad p99 made by the host from one made by the standalone or its
// disk.
//
// The warm consume also runs against kfake, the peer its goal compares it
// with: its figures, steal and CPU per MB are peer, peerSteal and
// peerCPU; its floor is the broker only sending (the durable no-op Kafka
// broker).
type roundSeries struct {
	magnetar, floor, peer                []float64
	magnetarSteal, floorSteal, peerSteal []float64
	magnetarCPU, floorCPU, peerCPU       []cpuSplit
	magnetarLag, floorLag                []float64
	magnetarSync                         []string
}

// cpuSplit is what a produce cost the two parties sharing the machine's
// CPUs, per MB acknowledged, in ms: the client (the benchmark's process)
// and the broker (its process). NaN where not measured.
type cpuSplit struct{ client, broker float64 }

// measureCPU runs load, which returns a produce's figures, and sets their
// CPU and BrokerCPU to this process's and process pid's CPU time over it;
// a broker's CPU time that cannot be read is logged and left 0.
func (b *benchRun) measureCPU(pid int, load func() (*pulsarResult, error)) (*pulsarResult, error) {
	cpu0 := processCPU()
	broker0, brokerErr := broker.ProcessCPU(pid)
	f, err := load()
	if f != nil {
		f.CPU = processCPU() - cpu0
		broker1, err1 := broker.ProcessCPU(pid)
		if brokerErr == nil && err1 == nil {
			f.BrokerCPU = broker1 - broker0
		} else {
			b.log.Warn("perf all: the broker's CPU time could not be read", "pid", pid, "err", errors.Join(brokerErr, err1))
		}
	}
	return f, err
}

// splitOf is f's CPU per MB, NaN for what was not measured.
func splitOf(f *pulsarResult) cpuSplit {
	perMB := func(cpu func(*pulsarResult) time.Duration) float64 {
		if v := cpuPerMB(f, cpu); v > 0 {
			return v
		}
		return math.NaN()
	}
	return cpuSplit{perMB(clientCPU), perMB(brokerCPU)}
}

// medianSplit is the median of the rounds' client figures and of their
// broker figures, over the rounds that measured them.
func medianSplit(v []cpuSplit) cpuSplit {
	var client, broker []float64
	for _, s := range v {
		if !math.IsNaN(s.client) {
			client = append(client, s.client)
		}
		if !math.IsNaN(s.broker) {
			broker = append(broker, s.broker)
		}
	}
	return cpuSplit{median(client), median(broker)}
}

// String is "client + broker", each to 0.01 ms or "?".
func (s cpuSplit) String() string {
	f := func(v float64) string {
		if math.IsNaN(v) {
			return "?"
		}
		return fmt.Sprintf("%.2f", v)
	}
	return f(s.client) + " + " + f(s.broker)
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

// roundsLoads are the loads run in rounds, in their order: the warm
// consume's rounds first (runConsumeRounds), then a round of each of the
// others in turn.
func roundsLoads() []string {
	return append([]string{loadWarm}, roundsProduceLoads()...)
}

// roundsProduceLoads are the loads of roundsLoads that write, in their
// order in a round.
func roundsProduceLoads() []string {
	var loads []string
	for _, r := range benchRates {
		loads = append(loads, loadAt("kafka-publish", r.rate), loadAt("pulsar-publish", r.rate))
	}
	return append(loads, loadProduce1, loadPulsarBatch)
}

// roundsUnit is what a load's figure in rounds is.
func roundsUnit(load string) string {
	if load == loadProduce1 || load == loadPulsarBatch || load == loadWarm {
		return "MB/s"
	}
	return "p99 ms"
}

// The roles of the parties of a load in rounds.
const (
	roleMagnetar = "magnetar"
	roleFloor    = "floor" // the load's durable no-op broker
	rolePeer     = "peer"  // kfake
)

// roundsParty is a broker a load in rounds runs against, its role, and
// run runs the load against it.
type roundsParty struct {
	name, role string
	pid        int // the broker's process
	run        func(ctx context.Context) (*pulsarResult, error)
}

// runRounds runs the loads of roundsLoads in cfg.Rounds rounds against a
// fresh standalone and fresh durable no-op brokers, all started from exe
// with their data under dir (and kfake, for the warm consume); the
// figures go into res.rounds.
func (b *benchRun) runRounds(ctx context.Context, exe, dir string, logs io.Writer, res *benchResults) (err error) {
	n := b.cfg.Rounds
	if n == 0 || ctx.Err() != nil {
		return nil
	}
	if err := b.settle(ctx); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "\n[rounds] %d rounds: first the warm consume against Magnetar, kfake and the broker only sending back to back, the order turned every round; then each publish latency load against Magnetar and against its durable no-op broker back to back, the order swapped every round; then Magnetar's Kafka produce on 1 partition, and the batched Pulsar produce against both; a fresh standalone, fresh durable no-op brokers and a fresh kfake\n", n)
	sa, err := startStandaloneChild(ctx, exe, filepath.Join(dir, "rounds-standalone"), false, b.cfg.StandaloneArgs, logs)
	if err != nil {
		return err
	}
	defer stopStandalone(ctx, sa, &err)
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
	res.rounds = map[string]*roundSeries{}
	if err := b.runConsumeRounds(ctx, exe, sa, floors["kafka"], logs, res); err != nil || ctx.Err() != nil {
		return err
	}
	metrics := "http://" + sa.ready.HTTP + "/metrics"
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

	kafka := func(name, role string, c *standaloneChild, addr, topic string, partitions int, load string, rate float64) roundsParty {
		return roundsParty{name, role, c.cmd.Process.Pid, func(ctx context.Context) (*pulsarResult, error) {
			f, err := runKafkaLoads(ctx, b.out, name, []string{addr}, b.kafkaConfig(topic, partitions, load, rate), b.log)
			if load == "produce" {
				return f.Produce, err
			}
			return f.Latency, err
		}}
	}
	pulsarParty := func(name, role string, c *standaloneChild, client pulsar.Client, topic string, batching bool, rate float64) roundsParty {
		return roundsParty{name, role, c.cmd.Process.Pid, func(ctx context.Context) (*pulsarResult, error) {
			return b.pulsarProduce(ctx, client, topic, batching, rate)
		}}
	}
	// By load: its durable no-op broker (if any), then Magnetar.
	parties := map[string][]roundsParty{
		loadProduce1: {kafka("magnetar", roleMagnetar, sa, sa.ready.Kafka, topic1p, 1, "produce", 0)},
		loadPulsarBatch: {pulsarParty("durable no-op pulsar", roleFloor, floors["pulsar"], noopClient, "rounds-noop-"+loadPulsarBatch, true, 0),
			pulsarParty("magnetar", roleMagnetar, sa, saClient, "rounds-"+loadPulsarBatch, true, 0)},
	}
	for _, r := range benchRates {
		k, p := loadAt("kafka-publish", r.rate), loadAt("pulsar-publish", r.rate)
		parties[k] = []roundsParty{kafka("durable no-op kafka", roleFloor, floors["kafka"], floors["kafka"].ready.Addr, topic4p, 4, "latency", r.rate),
			kafka("magnetar", roleMagnetar, sa, sa.ready.Kafka, topic4p, 4, "latency", r.rate)}
		parties[p] = []roundsParty{pulsarParty("durable no-op pulsar", roleFloor, floors["pulsar"], noopClient, "rounds-noop-"+p, false, r.rate),
			pulsarParty("magnetar", roleMagnetar, sa, saClient, "rounds-"+p, false, r.rate)}
	}
	for round := 1; round <= n; round++ {
		for _, load := range roundsProduceLoads() {
			if err := b.runRound(ctx, round, load, parties[load], metrics, res); err != nil || ctx.Err() != nil {
				return err
			}
		}
	}
	for _, load := range []string{loadWarm, loadProduce1, loadPulsarBatch} {
		if s := res.rounds[load]; s != nil {
			fmt.Fprintf(b.out, "\n%s, CPU ms per MB, client + broker, medians of the rounds: magnetar %s", load, medianSplit(s.magnetarCPU))
			if len(s.floorCPU) > 0 {
				fmt.Fprintf(b.out, ", durable no-op %s", medianSplit(s.floorCPU))
			}
			if len(s.peerCPU) > 0 {
				fmt.Fprintf(b.out, ", kfake %s", medianSplit(s.peerCPU))
			}
			fmt.Fprintln(b.out)
		}
	}
	return nil
}

// runRound runs round round of load against each of parties in turn,
// starting with the (round-1)-th modulo their count (so that each goes
// first as often as the others), and appends each figure to the load's
// series in res.rounds. A publish latency load against Magnetar also
// records its journal's slowest fdatasync, from the standalone's metrics.
func (b *benchRun) runRound(ctx context.Context, round int, load string, parties []roundsParty, metrics string, res *benchResults) error {
	s := res.rounds[load]
	if s == nil {
		s = &roundSeries{}
		res.rounds[load] = s
	}
	k := (round - 1) % len(parties)
	order := append(slices.Clone(parties[k:]), parties[:k]...)
	throughput := roundsUnit(load) == "MB/s"
	for _, p := range order {
		fmt.Fprintf(b.out, "\n[round %d/%d, %s] %s\n", round, b.cfg.Rounds, p.name, load)
		var f *pulsarResult
		var runErr error
		var syncs histDelta
		steal, measured := b.stealDuring(func() {
			switch {
			case throughput:
				f, runErr = b.measureCPU(p.pid, func() (*pulsarResult, error) { return p.run(ctx) })
			case p.role == roleMagnetar:
				syncs, runErr = b.journalSyncsDuring(ctx, metrics, func() error {
					var err error
					f, err = p.run(ctx)
					return err
				})
			default:
				f, runErr = p.run(ctx)
			}
		})
		if !measured {
			steal = math.NaN()
		}
		if ctx.Err() != nil {
			return nil
		}
		if runErr == nil && f == nil {
			runErr = fmt.Errorf("no figures")
		}
		if runErr != nil {
			return fmt.Errorf("round %d: %s: %s: %w", round, p.name, load, runErr)
		}
		var v float64
		var split cpuSplit
		lag := math.NaN()
		if throughput {
			v, split = figMBps(f), splitOf(f)
			fmt.Fprintf(b.out, "CPU per MB, ms: the client + the broker: %s\n", split)
		} else {
			v, lag = ms(f.Latency.Quantile(0.99)), ms(f.SendLag.Quantile(0.99))
		}
		switch p.role {
		case roleMagnetar:
			s.magnetar, s.magnetarSteal, s.magnetarLag = append(s.magnetar, v), append(s.magnetarSteal, steal), append(s.magnetarLag, lag)
			if throughput {
				s.magnetarCPU = append(s.magnetarCPU, split)
			} else {
				s.magnetarSync = append(s.magnetarSync, syncs.slowest())
			}
		case roleFloor:
			s.floor, s.floorSteal, s.floorLag = append(s.floor, v), append(s.floorSteal, steal), append(s.floorLag, lag)
			if throughput {
				s.floorCPU = append(s.floorCPU, split)
			}
		case rolePeer:
			s.peer, s.peerSteal = append(s.peer, v), append(s.peerSteal, steal)
			if throughput {
				s.peerCPU = append(s.peerCPU, split)
			}
		}
	}
	return nil
}

// topicRoundsConsume is the topic the warm consume's rounds read.
const topicRoundsConsume = "bench-rounds-consume"

// runConsumeRounds runs the warm consume's rounds: kfake is started from
// exe; Magnetar (the standalone sa), kfake and the broker only sending
// (noop, the durable no-op Kafka broker) each take perf-duration of the
// Kafka produce on 4 partitions into a topic of their own, and are each
// read once from the start, not counted, so that every counted read is
// warm; then, in each round, each is read from the start back to back.
// kfake is stopped at the end, before the loads that write.
func (b *benchRun) runConsumeRounds(ctx context.Context, exe string, sa, noop *standaloneChild, logs io.Writer, res *benchResults) (err error) {
	fmt.Fprintln(b.out, "\n[rounds] starting `magnetar perf kfake-broker` for the warm consume's rounds")
	kf, err := startKFakeChild(ctx, exe, logs)
	if err != nil {
		return err
	}
	defer func() {
		if serr := kf.stop(); err == nil && ctx.Err() == nil {
			err = serr
		}
	}()
	brokers := []struct {
		name, role string
		c          *standaloneChild
		addr       string
	}{
		{"magnetar", roleMagnetar, sa, sa.ready.Kafka},
		{"kfake", rolePeer, kf, kf.ready.Addr},
		{"durable no-op kafka", roleFloor, noop, noop.ready.Addr},
	}
	var parties []roundsParty
	for _, br := range brokers {
		fmt.Fprintf(b.out, "\n[rounds, %s] %s: the topic the warm consume's rounds read\n", br.name, loadProduce4)
		f, err := runKafkaLoads(ctx, b.out, br.name, []string{br.addr}, b.kafkaConfig(topicRoundsConsume, 4, "produce", 0), b.log)
		var read func(context.Context) (*pulsarResult, error)
		if err == nil {
			read, err = b.kafkaTopicReader(ctx, br.name, br.addr, topicRoundsConsume)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rounds: %s: %s: %w", br.name, loadProduce4, err)
		}
		produced := f.Produce
		parties = append(parties, roundsParty{br.name, br.role, br.c.cmd.Process.Pid, func(ctx context.Context) (*pulsarResult, error) {
			r, err := read(ctx)
			if err == nil {
				err = checkAllRead(produced, r)
			}
			return r, err
		}})
	}
	for _, p := range parties {
		fmt.Fprintf(b.out, "\n[rounds, %s] %s: a first read, not counted, so that the counted ones are warm\n", p.name, loadWarm)
		_, err := p.run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rounds: %s: the first read: %w", p.name, err)
		}
	}
	for round := 1; round <= b.cfg.Rounds; round++ {
		if err := b.runRound(ctx, round, loadWarm, parties, "", res); err != nil || ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// kafkaTopicReader lists topic's start and end offsets on the Kafka
// broker at addr, called name, once, and returns a read of the topic
// from those start offsets to those end offsets, the same every call.
func (b *benchRun) kafkaTopicReader(ctx context.Context, name, addr, topic string) (func(context.Context) (*pulsarResult, error), error) {
	base := []kgo.Opt{kgo.SeedBrokers(addr), kgo.WithLogger(kgoLogger{b.log.With("component", "kafka-client", "cluster", name)})}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	from, err := partitionOffsets(ctx, adm, topic, adm.ListStartOffsets)
	if err != nil {
		return nil, err
	}
	to, err := partitionOffsets(ctx, adm, topic, adm.ListEndOffsets)
	if err != nil {
		return nil, err
	}
	cfg := b.kafkaConfig(topic, len(to), "consume", 0)
	return func(ctx context.Context) (*pulsarResult, error) {
		return runKafkaConsume(ctx, b.out, base, cfg, from, to)
	}, nil
}

// journalSyncsDuring runs load and returns the standalone's journal
// fdatasyncs over it, scraping metrics before and after. A failed scrape
// is logged and gives no syncs: the load's own figures still count.
func (b *benchRun) journalSyncsDuring(ctx context.Context, metrics string, load func() error) (histDelta, error) {
	before, berr := scrapeHists(ctx, metrics)
	if err := load(); err != nil {
		return histDelta{}, err
	}
	after, aerr := scrapeHists(ctx, metrics)
	if err := errors.Join(berr, aerr); err != nil {
		b.log.Warn("perf all: the standalone's journal syncs could not be read", "err", err)
		return histDelta{}, nil
	}
	return after[syncLatencyMetric].minus(before[syncLatencyMetric]), nil
}

// roundsTable lists every round of every load: the figures and the steal
// of Magnetar and of the floor; nil if no rounds ran.
func roundsTable(res *benchResults) *table {
	if len(res.rounds) == 0 {
		return nil
	}
	t := &table{head: []string{"load", "round", "figure", "magnetar", "durable no-op", "magnetar ÷ durable no-op", "steal % (magnetar)", "steal % (durable no-op)",
		"CPU ms per MB, client + broker (magnetar)", "CPU ms per MB, client + broker (durable no-op)",
		"send lag p99 ms (magnetar)", "send lag p99 ms (durable no-op)", "slowest journal sync ms (magnetar)",
		"kfake", "magnetar ÷ kfake", "steal % (kfake)", "CPU ms per MB, client + broker (kfake)"}}
	num := func(v []float64, i int, scale float64, format string) string {
		if i >= len(v) || math.IsNaN(v[i]) {
			return "-"
		}
		return fmt.Sprintf(format, scale*v[i])
	}
	pct := func(v []float64, i int) string { return num(v, i, 100, "%.1f") }
	lag := func(v []float64, i int) string { return num(v, i, 1, "%.3f") }
	str := func(v []string, i int) string {
		if i >= len(v) {
			return "-"
		}
		return v[i]
	}
	cpu := func(v []cpuSplit, i int) string {
		if i >= len(v) {
			return "-"
		}
		return v[i].String()
	}
	for _, load := range roundsLoads() {
		s := res.rounds[load]
		if s == nil {
			continue
		}
		format := "%.3f"
		if roundsUnit(load) == "MB/s" {
			format = "%.2f"
		}
		// against is the figure of round i in v, and Magnetar's ÷ it.
		against := func(v []float64, i int) (string, string) {
			if i >= len(v) {
				return "-", "-"
			}
			return fmt.Sprintf(format, v[i]), fmt.Sprintf("%.2f", ratio(s.magnetar[i], v[i]))
		}
		for i := range s.magnetar {
			floor, vsFloor := against(s.floor, i)
			peer, vsPeer := against(s.peer, i)
			t.rows = append(t.rows, []string{load, fmt.Sprint(i + 1), roundsUnit(load), fmt.Sprintf(format, s.magnetar[i]), floor, vsFloor,
				pct(s.magnetarSteal, i), pct(s.floorSteal, i), cpu(s.magnetarCPU, i), cpu(s.floorCPU, i),
				lag(s.magnetarLag, i), lag(s.floorLag, i), str(s.magnetarSync, i),
				peer, vsPeer, pct(s.peerSteal, i), cpu(s.peerCPU, i)})
		}
	}
	return t
}

// roundsNote says what the rounds table is.
const roundsNote = `The goals against a floor or compared with kfake, in rounds: after the other loads, on a fresh standalone, fresh durable no-op brokers and a fresh kfake, first the warm consume (each of the three given perf-duration of the Kafka produce on 4 partitions into a topic of its own and read once from the start, not counted; then in each round each read from the start back to back, the order turned every round: Magnetar first in the first round, kfake in the second, the broker only sending, the durable no-op Kafka broker, in the third), then each publish latency load against Magnetar and against its durable no-op broker back to back, then Magnetar's Kafka produce on 1 partition and the batched Pulsar produce against both, the order swapped every round (the floor first in odd rounds); the host's CPU steal over each, and for the produces and the consume the CPU time (user and system) per MB acknowledged or read of the client (the benchmark's process) and of the broker's process, warm-up included: the two share the machine's CPUs, so a load that fills them goes as fast as the two costs together allow; for the publish latency loads the p99 of the load generator's send lag against each (how late it sent the messages due: a busy host, or the broker taking its CPUs, not the broker's answers) and the slowest journal fdatasync of Magnetar's bookie over the load, by the bucket of magnetar_bookie_journal_sync_latency_seconds that holds it; the "median of the rounds" rows above are these, and the warm consume's goal, the publish p99 goals and the batched produce's are judged on them`

// roundsFloorLimit names, in benchLimits, the median of the floor's
// figures over the rounds of load.
func roundsFloorLimit(load string) string { return "rounds-floor-" + load }

// roundsFloorName is what benchLimits calls the limit roundsFloorLimit(load).
func roundsFloorName(load string) string {
	switch load {
	case loadPulsarBatch:
		return "the durable no-op broker's median batched produce over the rounds"
	case loadWarm:
		return "the median consume from a broker only sending over the rounds"
	}
	return "the durable no-op broker's median p99 over the rounds"
}
