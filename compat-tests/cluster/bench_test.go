package cluster_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster benchmarks (issue 9): throughput through one broker and through
// two, and the time from a broker's death to clients producing again.
// Every process of the cluster (3 bookies, the brokers, ZooKeeper) and the
// clients share one machine, so these measure the software's scaling
// within that machine, not a cluster's. Run with
//
//	cd compat-tests && MAGNETAR_TEST_ZK=127.0.0.1:21810 go test -run '^$' -bench Cluster -benchtime 1x ./cluster/
//
// The brokers run with --load-shed-interval 0: bundles move only when the
// benchmark moves them.

const (
	benchRecordSize = 1024
	benchPartitions = 8
	benchLoadTime   = 15 * time.Second
)

// benchPulsarLogger keeps pulsar-client-go's warnings and errors (on
// stderr) and drops its per-connection info lines.
func benchPulsarLogger() pulsarlog.Logger {
	return pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func kafkaSeeds(bs ...*clusterBroker) []string {
	var seeds []string
	for _, b := range bs {
		seeds = append(seeds, b.r.KafkaAdvertised)
	}
	return seeds
}

// lookupOwner asks via who serves partition (a topic name in
// public/default): the Pulsar address of its bundle's owner, or of the
// broker chosen to take it; with authority, via takes an unowned bundle.
func lookupOwner(tb testing.TB, via *clusterBroker, partition string, authoritative bool) string {
	tb.Helper()
	code, body := httpDo(tb, "GET", fmt.Sprintf("%s/lookup/v2/topic/persistent/public/default/%s?authoritative=%t", via.web(), partition, authoritative), "")
	var l struct {
		BrokerURL string `json:"brokerUrl"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &l) != nil {
		tb.Fatalf("lookup of %s via %s: %d %s", partition, via.r.HTTP, code, body)
	}
	return strings.TrimPrefix(l.BrokerURL, "pulsar://")
}

// partitionOwners asks via who serves each of topic's n partitions.
func partitionOwners(tb testing.TB, via *clusterBroker, topic string, n int) []string {
	tb.Helper()
	owners := make([]string, n)
	for i := range owners {
		owners[i] = lookupOwner(tb, via, partitionName(topic, int32(i)), false)
	}
	return owners
}

// checkSpread fails unless every broker of c serves a partition of topic,
// and logs the spread.
func checkSpread(tb testing.TB, c *testCluster, topic string) {
	tb.Helper()
	count := map[string]int{}
	for _, o := range partitionOwners(tb, c.brokers[0], topic, benchPartitions) {
		count[o]++
	}
	tb.Logf("%s: partitions per broker %v", topic, count)
	for _, b := range c.brokers {
		if count[b.r.PulsarAdvertised] == 0 {
			tb.Fatalf("%s: broker %s serves none of the %d partitions (%v): the comparison would not be real",
				topic, b.r.PulsarAdvertised, benchPartitions, count)
		}
	}
}

// logBrokerErrors logs the error lines of the brokers' logs, for the
// record.
func logBrokerErrors(tb testing.TB, c *testCluster) {
	for _, b := range c.brokers {
		b.p.mu.Lock()
		var errs []string
		for l := range strings.Lines(b.p.stderr.String()) {
			if strings.Contains(l, `"level":"ERROR"`) {
				errs = append(errs, strings.TrimSpace(l))
			}
		}
		b.p.mu.Unlock()
		if len(errs) > 0 {
			tb.Logf("broker %s logged %d errors, the first: %s", b.r.PulsarAdvertised, len(errs), errs[0])
		}
	}
}

// randomValues returns a source of distinct-looking 1 KiB values: slices
// of one random buffer at varying offsets, so that nothing on the way
// compresses or deduplicates them.
func randomValues() func(i int64) []byte {
	const span = 1 << 20
	buf := make([]byte, span+benchRecordSize)
	rand.Read(buf)
	return func(i int64) []byte {
		off := (i * 4093) % span
		return buf[off : off+benchRecordSize]
	}
}

// spreadPartitions looks up each partition of topic as a Pulsar client
// does: through the first broker, then at once with authority at the
// broker the answer names, which takes the bundle. Kafka clients alone
// piled the bundles on the broker they asked (a bundle assigned to another
// broker but not yet taken was chosen again by the next lookup of one of
// its partitions; see docs/BENCHMARKS.md, issue 9), so this places the
// bundles as the brokers choose before a load starts.
func spreadPartitions(tb testing.TB, c *testCluster, topic string) {
	tb.Helper()
	for i := range int32(benchPartitions) {
		name := partitionName(topic, i)
		owner := lookupOwner(tb, c.brokers[0], name, false)
		for _, b := range c.brokers[1:] {
			if b.r.PulsarAdvertised == owner {
				lookupOwner(tb, b, name, true)
			}
		}
	}
}

func mbPerSec(bytes int64, d time.Duration) float64 { return float64(bytes) / 1e6 / d.Seconds() }

// BenchmarkClusterThroughput: a partitioned topic of 8 partitions spread
// over one broker or two; Kafka (franz-go, acks=all, idempotent, default
// linger, no compression) and Pulsar (pulsar-client-go, batching) produce 1 KiB records
// for benchLoadTime in a closed loop (up to 10,000 outstanding), then read
// exactly what was acknowledged from the start. MB is 10^6 bytes of
// payload.
func BenchmarkClusterThroughput(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("brokers=%d", n), func(b *testing.B) {
			c := startTestCluster(b, n, "--load-shed-interval", "0")
			setRetention(b, c.brokers[0])
			b.Run("kafka", func(b *testing.B) { benchKafkaThroughput(b, c) })
			b.Run("pulsar", func(b *testing.B) { benchPulsarThroughput(b, c) })
			logBrokerErrors(b, c)
		})
	}
}

func benchKafkaThroughput(b *testing.B, c *testCluster) {
	values := randomValues()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var produced, consumed int64
	var produceTime, consumeTime time.Duration
	for i := 0; b.Loop(); i++ {
		topic := fmt.Sprint("tput-kafka-", i)
		createPartitioned(b, c.brokers[0], topic, benchPartitions)
		spreadPartitions(b, c, topic)

		kp, err := kgo.NewClient(kgo.SeedBrokers(kafkaSeeds(c.brokers...)...), kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		var firstErr error
		var acked int64
		ends := map[int32]int64{} // per partition, the offset after the last acknowledged
		start := time.Now()
		for i := int64(0); time.Since(start) < benchLoadTime; i++ {
			kp.Produce(ctx, &kgo.Record{Value: values(i)}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					firstErr = cmp.Or(firstErr, err)
					return
				}
				acked++
				ends[r.Partition] = max(ends[r.Partition], r.Offset+1)
			})
		}
		if err := kp.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		kp.Close()
		if firstErr != nil {
			b.Fatalf("produce: %v", firstErr)
		}
		var sum int64
		for _, e := range ends {
			sum += e
		}
		if sum != acked {
			b.Fatalf("%d records acknowledged, but the offsets acknowledged end at %v (%d)", acked, ends, sum)
		}
		produced += acked
		produceTime += took
		checkSpread(b, c, topic)

		// Read it all back, each partition from offset 0.
		offsets := map[int32]kgo.Offset{}
		for p := range int32(benchPartitions) {
			offsets[p] = kgo.NewOffset().At(0)
		}
		kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaSeeds(c.brokers...)...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
		if err != nil {
			b.Fatal(err)
		}
		next := map[int32]int64{}
		var n int64
		start = time.Now()
		for n < acked {
			fs := kc.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				b.Fatalf("consume after %d of %d records: %v", n, acked, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset != next[r.Partition] || r.Offset >= ends[r.Partition] || len(r.Value) != benchRecordSize {
					b.Fatalf("partition %d: offset %d (%d bytes), want %d of %d", r.Partition, r.Offset, len(r.Value), next[r.Partition], ends[r.Partition])
				}
				next[r.Partition]++
				n++
			})
		}
		read := time.Since(start)
		consumeTime += read
		consumed += n
		kc.Close()
		b.Logf("%s: %d records produced in %v, read back in %v", topic, acked, took.Round(time.Millisecond), read.Round(time.Millisecond))
	}
	b.ReportMetric(mbPerSec(produced*benchRecordSize, produceTime), "MB/s-produce")
	b.ReportMetric(mbPerSec(consumed*benchRecordSize, consumeTime), "MB/s-consume")
}

func benchPulsarThroughput(b *testing.B, c *testCluster) {
	values := randomValues()
	pc, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.pulsarURL(c.brokers...), OperationTimeout: time.Minute, Logger: benchPulsarLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var produced, consumed int64
	var produceTime, consumeTime time.Duration
	for i := 0; b.Loop(); i++ {
		topic := fmt.Sprint("tput-pulsar-", i)
		createPartitioned(b, c.brokers[0], topic, benchPartitions)
		spreadPartitions(b, c, topic)
		prod, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: topic, MaxPendingMessages: 10000, SendTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}

		// Each payload starts with its sequence number, so that the read
		// can tell each acknowledged message was read once.
		var mu sync.Mutex
		var firstErr error
		var pending sync.WaitGroup
		var sent int64
		start := time.Now()
		for ; time.Since(start) < benchLoadTime; sent++ {
			payload := slices.Clone(values(sent))
			binary.BigEndian.PutUint64(payload, uint64(sent))
			pending.Add(1)
			prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer pending.Done()
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
				}
			})
		}
		// Waiting for the answers, not Flush (see
		// TestClusterBrokerPausedPastSession).
		pending.Wait()
		took := time.Since(start)
		prod.Close()
		if firstErr != nil {
			b.Fatalf("produce: %v", firstErr)
		}
		produced += sent
		produceTime += took
		checkSpread(b, c, topic)

		cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "bench",
			SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			b.Fatal(err)
		}
		seen := make([]bool, sent)
		var n int64
		start = time.Now()
		for n < sent {
			m, err := cons.Receive(ctx)
			if err != nil {
				b.Fatalf("consume after %d of %d messages: %v", n, sent, err)
			}
			seq := binary.BigEndian.Uint64(m.Payload())
			if len(m.Payload()) != benchRecordSize || seq >= uint64(sent) || seen[seq] {
				b.Fatalf("message %d (%d bytes): not one of the %d sent, or read twice", seq, len(m.Payload()), sent)
			}
			seen[seq] = true
			n++
		}
		read := time.Since(start)
		consumeTime += read
		consumed += n
		cons.Close()
		b.Logf("%s: %d messages produced in %v, read back in %v", topic, sent, took.Round(time.Millisecond), read.Round(time.Millisecond))
	}
	b.ReportMetric(mbPerSec(produced*benchRecordSize, produceTime), "MB/s-produce")
	b.ReportMetric(mbPerSec(consumed*benchRecordSize, consumeTime), "MB/s-consume")
}

// Failover benchmark topics and their partition counts.
const (
	foKafka      = "bench-fo-kafka"
	foPulsar     = "bench-fo-pulsar"
	foPartitions = 4
)

// foRun is the state of BenchmarkClusterFailover, shared with the
// producers' callbacks.
type foRun struct {
	mu sync.Mutex
	// Everything acknowledged, checked at the end.
	kafkaAcked  map[int32][]kafkaAck
	pulsarAcked map[string]bool
	failed      [2]int // sends that failed: Kafka, Pulsar
	// lastAck: when each partition of each topic last acknowledged a send.
	lastAck map[string]time.Time
	// dead: when the killed broker had exited (zero before the kill);
	// resumed: for each partition, when a send made after that was first
	// acknowledged.
	dead    time.Time
	resumed map[string]time.Time
}

type kafkaAck struct {
	offset int64
	value  string
}

func partitionName(topic string, p int32) string { return fmt.Sprint(topic, "-partition-", p) }

// acked records an acknowledgement of a send made at sentAt. f.mu is held.
func (f *foRun) acked(topic string, p int32, sentAt time.Time) {
	now := time.Now()
	name := partitionName(topic, p)
	f.lastAck[name] = now
	if !f.dead.IsZero() && sentAt.After(f.dead) {
		if _, ok := f.resumed[name]; !ok {
			f.resumed[name] = now
		}
	}
}

// ackedSince says whether every partition of both topics acknowledged a
// send after t.
func (f *foRun) ackedSince(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, topic := range []string{foKafka, foPulsar} {
		for p := range int32(foPartitions) {
			if !f.lastAck[partitionName(topic, p)].After(t) {
				return fmt.Errorf("%s: no acknowledgement since %v", partitionName(topic, p), t.Format("15:04:05.000"))
			}
		}
	}
	return nil
}

// BenchmarkClusterFailover: two brokers share a Kafka and a Pulsar topic
// of 4 partitions each; keyed producers send every 2 ms. Each round
// SIGKILLs the broker owning the most bundles and measures, per protocol,
// the time from the kill until every partition the dead broker served has
// acknowledged a send made after it died; then it starts a replacement
// broker and moves half the bundles to it. The brokers' ZooKeeper session
// timeout is 3 s: their bundles are free only once ZooKeeper expires the
// dead one's session. At the end everything acknowledged is read back.
// MAGNETAR_BENCH_KILLS sets the number of rounds (default 5).
func BenchmarkClusterFailover(b *testing.B) {
	kills := 5
	if v := os.Getenv("MAGNETAR_BENCH_KILLS"); v != "" {
		var err error
		if kills, err = strconv.Atoi(v); err != nil || kills < 1 {
			b.Fatalf("MAGNETAR_BENCH_KILLS=%q: want a positive number", v)
		}
	}
	c := startTestCluster(b, 2, "--load-shed-interval", "0")
	setRetention(b, c.brokers[0])
	createPartitioned(b, c.brokers[0], foKafka, foPartitions)
	createPartitioned(b, c.brokers[0], foPulsar, foPartitions)
	f := &foRun{kafkaAcked: map[int32][]kafkaAck{}, pulsarAcked: map[string]bool{}}
	live := []*clusterBroker{c.brokers[0], c.brokers[1]}
	var times [2][]time.Duration // Kafka, Pulsar
	for b.Loop() {
		for round := range kills {
			survivor, kafkaTook, pulsarTook := f.round(b, c, live, round)
			times[0] = append(times[0], kafkaTook)
			times[1] = append(times[1], pulsarTook)
			// A replacement, and half the survivor's bundles moved to it.
			nb := c.startBroker("--load-shed-interval", "0")
			live = []*clusterBroker{survivor, nb}
			rebalance(b, survivor)
		}
	}
	f.verify(b, live)
	logBrokerErrors(b, c)
	for i, proto := range []string{"kafka", "pulsar"} {
		ds := times[i]
		b.Logf("%s: producing again after each kill: %v", proto, ds)
		slices.Sort(ds)
		b.ReportMetric(percentile(ds, 50).Seconds(), "s-"+proto+"-p50")
		b.ReportMetric(percentile(ds, 99).Seconds(), "s-"+proto+"-p99")
	}
}

// percentile is the nearest-rank percentile of sorted ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p/100*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}

// rebalance unloads half the bundles b owns; the unload hint sends them
// elsewhere on their next lookup.
func rebalance(tb testing.TB, b *clusterBroker) {
	tb.Helper()
	var mine []string
	for _, o := range ownership(tb, b) {
		if o.Owner == b.r.PulsarAdvertised {
			mine = append(mine, o.Bundle)
		}
	}
	for _, bd := range mine[:len(mine)/2] {
		unloadBundle(tb, b, bd)
	}
}

func unloadBundle(tb testing.TB, via *clusterBroker, bundle string) {
	tb.Helper()
	if code, body := httpDo(tb, "PUT", via.web()+"/admin/v2/namespaces/public/default/"+bundle+"/unload", ""); code != 204 {
		tb.Fatalf("unload %s: %d %s", bundle, code, body)
	}
}

// round runs producers on the live brokers, kills one and returns the
// survivor and how long each protocol took to produce again on the killed
// broker's partitions.
func (f *foRun) round(b *testing.B, c *testCluster, live []*clusterBroker, round int) (survivor *clusterBroker, kafkaTook, pulsarTook time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f.mu.Lock()
	f.lastAck, f.resumed, f.dead = map[string]time.Time{}, map[string]time.Time{}, time.Time{}
	f.mu.Unlock()

	kp, err := kgo.NewClient(kgo.SeedBrokers(kafkaSeeds(live...)...), kgo.DefaultProduceTopic(foKafka),
		kgo.RecordDeliveryTimeout(90*time.Second), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer kp.Close()
	pc, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.pulsarURL(live...), OperationTimeout: time.Minute, Logger: benchPulsarLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	pp, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: foPulsar, DisableBatching: true,
		SendTimeout: 90 * time.Second, MaxPendingMessages: 10000})
	if err != nil {
		b.Fatal(err)
	}
	defer pp.Close()

	// Producers: a keyed record and message every 2 ms (64 keys, so that
	// every partition has some).
	stop := make(chan struct{})
	var loops, pending sync.WaitGroup
	loops.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			v := fmt.Sprintf("k-%d-%d", round, i)
			sentAt := time.Now()
			pending.Add(2)
			kp.Produce(ctx, &kgo.Record{Key: fmt.Append(nil, "key-", i%64), Value: []byte(v)}, func(r *kgo.Record, err error) {
				defer pending.Done()
				f.mu.Lock()
				defer f.mu.Unlock()
				if err != nil {
					f.failed[0]++
					return
				}
				f.kafkaAcked[r.Partition] = append(f.kafkaAcked[r.Partition], kafkaAck{r.Offset, v})
				f.acked(foKafka, r.Partition, sentAt)
			})
			pv := fmt.Sprintf("p-%d-%d", round, i)
			pp.SendAsync(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("key-", i%64), Payload: []byte(pv)},
				func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					defer pending.Done()
					f.mu.Lock()
					defer f.mu.Unlock()
					if err != nil {
						f.failed[1]++
						return
					}
					f.pulsarAcked[pv] = true
					f.acked(foPulsar, id.PartitionIdx(), sentAt)
				})
		}
	})
	steady := func() {
		b.Helper()
		since := time.Now()
		eventually(b, time.Minute, func() error { return f.ackedSince(since) })
	}
	steady()

	// The victim: the broker owning the most bundles. It must serve a
	// partition of each topic; if it does not, the survivor's bundles move
	// to it one by one until it does.
	var victim *clusterBroker
	var owned map[string][]int32 // topic → the victim's partitions
	for attempt := 0; ; attempt++ {
		count := map[string]int{}
		for _, o := range ownership(b, live[0]) {
			count[o.Owner]++
		}
		victim, survivor = live[0], live[1]
		if count[survivor.r.PulsarAdvertised] > count[victim.r.PulsarAdvertised] {
			victim, survivor = survivor, victim
		}
		owned = map[string][]int32{}
		for _, topic := range []string{foKafka, foPulsar} {
			for p, o := range partitionOwners(b, survivor, topic, foPartitions) {
				if o == victim.r.PulsarAdvertised {
					owned[topic] = append(owned[topic], int32(p))
				}
			}
		}
		if len(owned[foKafka]) > 0 && len(owned[foPulsar]) > 0 {
			break
		}
		var bundle string
		for _, o := range ownership(b, survivor) {
			if o.Owner == survivor.r.PulsarAdvertised {
				bundle = o.Bundle
				break
			}
		}
		if attempt == 3 || bundle == "" {
			b.Fatalf("round %d: the victim %s serves no partition of a topic after %d moves: %v", round, victim.r.PulsarAdvertised, attempt, owned)
		}
		b.Logf("round %d: %s serves partitions %v; moving bundle %s to it", round, victim.r.PulsarAdvertised, owned, bundle)
		unloadBundle(b, survivor, bundle)
		eventually(b, time.Minute, func() error {
			for _, o := range ownership(b, survivor) {
				if o.Bundle == bundle && o.Owner != victim.r.PulsarAdvertised {
					return fmt.Errorf("bundle %s owned by %q", bundle, o.Owner)
				}
			}
			return nil
		})
		steady()
	}

	killedAt := time.Now()
	victim.p.kill()
	f.mu.Lock()
	f.dead = time.Now()
	f.mu.Unlock()
	var took [2]time.Duration
	eventually(b, 2*time.Minute, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, topic := range []string{foKafka, foPulsar} {
			var last time.Time
			for _, p := range owned[topic] {
				at, ok := f.resumed[partitionName(topic, p)]
				if !ok {
					return fmt.Errorf("%s: no send made after the kill acknowledged yet", partitionName(topic, p))
				}
				if at.After(last) {
					last = at
				}
			}
			took[i] = last.Sub(killedAt)
		}
		return nil
	})
	close(stop)
	loops.Wait()
	pending.Wait()
	f.mu.Lock()
	b.Logf("round %d: killed %s (partitions %v), survivor %s took its bundles %v after: producing again after Kafka %v, Pulsar %v; failed sends so far: Kafka %d, Pulsar %d",
		round, victim.r.PulsarAdvertised, owned, survivor.r.PulsarAdvertised, bundlesTaken(b, survivor, killedAt),
		took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), f.failed[0], f.failed[1])
	f.mu.Unlock()
	for _, o := range ownership(b, survivor) {
		if o.Owner == victim.r.PulsarAdvertised {
			b.Fatalf("round %d: bundle %s still owned by %s after its death", round, o.Bundle, o.Owner)
		}
	}
	return survivor, took[0], took[1]
}

// bundlesTaken returns how long after since b logged taking each bundle,
// from its log.
func bundlesTaken(tb testing.TB, b *clusterBroker, since time.Time) []time.Duration {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	var out []time.Duration
	for l := range strings.Lines(b.p.stderr.String()) {
		var line struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "bundle taken" && line.Time.After(since) {
			out = append(out, line.Time.Sub(since).Round(time.Millisecond))
		}
	}
	return out
}

// verify reads both topics back: every acknowledged Kafka record at its
// offset, every acknowledged Pulsar message at least once.
func (f *foRun) verify(b *testing.B, live []*clusterBroker) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f.mu.Lock()
	defer f.mu.Unlock()

	offsets := map[int32]kgo.Offset{}
	ends := map[int32]int64{}
	for p, acks := range f.kafkaAcked {
		offsets[p] = kgo.NewOffset().At(0)
		for _, a := range acks {
			ends[p] = max(ends[p], a.offset+1)
		}
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaSeeds(live...)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{foKafka: offsets}))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	got := map[int32][]string{}
	for p := range ends {
		for int64(len(got[p])) < ends[p] {
			fs := kc.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				b.Fatalf("Kafka read back: %v", err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset != int64(len(got[r.Partition])) {
					b.Fatalf("Kafka partition %d: offset %d after %d records: a gap", r.Partition, r.Offset, len(got[r.Partition]))
				}
				got[r.Partition] = append(got[r.Partition], string(r.Value))
			})
		}
	}
	kafkaTotal := 0
	for p, acks := range f.kafkaAcked {
		for _, a := range acks {
			if got[p][a.offset] != a.value {
				b.Fatalf("Kafka partition %d: acknowledged %q at offset %d, read %q", p, a.value, a.offset, got[p][a.offset])
			}
		}
		kafkaTotal += len(acks)
	}

	pc, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + live[0].r.PulsarAdvertised, OperationTimeout: time.Minute, Logger: benchPulsarLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	cons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: foPulsar, SubscriptionName: "verify",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	read := 0
	for missing := len(f.pulsarAcked); missing > 0; {
		m, err := cons.Receive(ctx)
		if err != nil {
			b.Fatalf("Pulsar read back: %d of %d acknowledged messages not read after %d: %v", missing, len(f.pulsarAcked), read, err)
		}
		read++
		if v := string(m.Payload()); f.pulsarAcked[v] && !seen[v] {
			seen[v] = true
			missing--
		}
	}
	b.Logf("read back: Kafka %d acknowledged records, Pulsar %d acknowledged messages (%d read); failed sends (never acknowledged): Kafka %d, Pulsar %d",
		kafkaTotal, len(f.pulsarAcked), read, f.failed[0], f.failed[1])
}
