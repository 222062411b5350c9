package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestClusterOwnershipAndLookup: two brokers share a partitioned topic's
// partitions by bundle; Pulsar and Kafka clients that know only one
// broker reach every partition through lookup redirects and Metadata; both
// brokers answer lookups alike; a non-owner refuses a Kafka produce with
// NOT_LEADER_OR_FOLLOWER; a bundle unloaded through the other broker (a
// 307 to the owner) moves; a split bundle becomes two.
func TestClusterOwnershipAndLookup(t *testing.T) {
	c := startTestCluster(t, 2)
	b0, b1 := c.brokers[0], c.brokers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	setRetention(t, b0)
	if code, body := httpDo(t, "PUT", b0.web()+"/admin/v2/persistent/public/default/spread/partitions", "8"); code != 204 {
		t.Fatalf("create partitioned topic: %d %s", code, body)
	}
	pc, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.pulsarURL(b0), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	produceAll := func(round int) {
		t.Helper()
		prod, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: "spread", DisableBatching: true})
		if err != nil {
			t.Fatalf("round %d: producer: %v", round, err)
		}
		defer prod.Close()
		for i := range 40 {
			if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(round, "-", i))}); err != nil {
				t.Fatalf("round %d: send %d: %v", round, i, err)
			}
		}
	}
	produceAll(0)

	// Both brokers own bundles, and both answer lookups with the same
	// owners.
	owners := map[string]int{}
	for _, o := range ownership(t, b1) {
		owners[o.Owner]++
	}
	if owners[b0.r.PulsarAdvertised] == 0 || owners[b1.r.PulsarAdvertised] == 0 {
		t.Fatalf("bundle owners %v: want both brokers %s and %s", owners, b0.r.PulsarAdvertised, b1.r.PulsarAdvertised)
	}
	for i := range 8 {
		var answers []string
		for _, b := range []*clusterBroker{b0, b1} {
			code, body := httpDo(t, "GET", fmt.Sprintf("%s/lookup/v2/topic/persistent/public/default/spread-partition-%d", b.web(), i), "")
			if code != 200 {
				t.Fatalf("lookup on %s: %d %s", b.r.HTTP, code, body)
			}
			answers = append(answers, body)
		}
		if answers[0] != answers[1] {
			t.Fatalf("partition %d: lookups differ: %s vs %s", i, answers[0], answers[1])
		}
	}

	// Kafka through one broker: Metadata leads the client to the owners.
	kc, err := kgo.NewClient(kgo.SeedBrokers(b0.r.KafkaAdvertised), kgo.DefaultProduceTopic("spread"),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	for i := range 40 {
		if err := kc.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint("k", i))}).FirstErr(); err != nil {
			t.Fatalf("kafka produce %d: %v", i, err)
		}
	}
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Brokers) != 2 {
		t.Fatalf("Metadata lists %d brokers, want 2", len(meta.Brokers))
	}
	// A request sent to a broker that does not own the partition.
	var wrong int32 = -1
	var part int32
	for _, tp := range meta.Topics {
		if *tp.Topic != "spread" {
			continue
		}
		for _, p := range tp.Partitions {
			for _, br := range meta.Brokers {
				if br.NodeID != p.Leader {
					wrong, part = br.NodeID, p.Partition
				}
			}
		}
	}
	if wrong < 0 {
		t.Fatal("no partition with a leader to avoid")
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "spread"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = part, -1
	lt.Partitions = append(lt.Partitions, lp)
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := kc.Broker(int(wrong)).Request(ctx, lreq)
	if err != nil {
		t.Fatal(err)
	}
	if code := lresp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode; code != 6 {
		t.Fatalf("ListOffsets of a non-owner: error %d, want 6 (NOT_LEADER_OR_FOLLOWER)", code)
	}

	// Unload a bundle of b0 by asking b1: redirected to b0, which gives
	// it up; the next use puts it on b1.
	var moved string
	for _, o := range ownership(t, b1) {
		if o.Owner == b0.r.PulsarAdvertised {
			moved = o.Bundle
			break
		}
	}
	if code, out := cli(t, "admin", "namespaces", "unload", "public/default", "--bundle", moved, "--url", b1.web()); code != 0 ||
		!strings.Contains(out, "unloaded") {
		t.Fatalf("admin namespaces unload: exit %d, %s", code, out)
	}
	produceAll(1)
	for _, o := range ownership(t, b0) {
		if o.Bundle == moved && o.Owner != b1.r.PulsarAdvertised {
			t.Fatalf("bundle %s is owned by %q after its unload from %s, want %s", moved, o.Owner, b0.r.PulsarAdvertised, b1.r.PulsarAdvertised)
		}
	}

	// Split a bundle (asked of the broker that does not own it).
	split := ownership(t, b0)[0]
	asker := b0
	if split.Owner == b0.r.PulsarAdvertised {
		asker = b1
	}
	if code, out := cli(t, "admin", "namespaces", "split-bundle", "public/default", "--bundle", split.Bundle, "--url", asker.web()); code != 0 {
		t.Fatalf("admin namespaces split-bundle: exit %d, %s", code, out)
	}
	if got := len(ownership(t, b1)); got != 5 {
		t.Fatalf("%d bundles after a split, want 5", got)
	}
	produceAll(2)

	// Everything produced is there: 3 × 40 Pulsar messages and 40 Kafka
	// records, read over Kafka from every partition.
	rc, err := kgo.NewClient(kgo.SeedBrokers(b1.r.KafkaAdvertised), kgo.ConsumeTopics("spread"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	seen := map[string]bool{}
	perPartition := map[int32]int{}
	for len(seen) < 160 {
		fs := rc.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		if err := fs.Err0(); err != nil {
			for _, b := range []*clusterBroker{b0, b1} {
				for i := range 8 {
					code, body := httpDo(t, "GET", fmt.Sprintf("%s/admin/v2/persistent/public/default/spread-partition-%d/internalStats", b.web(), i), "")
					t.Logf("partition %d via %s: %d %s", i, b.r.HTTP, code, body)
				}
			}
			t.Fatalf("consume after %d (per partition %v): %v", len(seen), perPartition, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[string(r.Value)] = true
			perPartition[r.Partition]++
		})
	}

	// The CLI shows the owners and the brokers.
	if code, out := cli(t, "admin", "namespaces", "bundles", "public/default", "--url", b0.web()); code != 0 ||
		!strings.Contains(out, b1.r.PulsarAdvertised) || strings.Count(out, "\n") != 6 {
		t.Fatalf("admin namespaces bundles: exit %d, %s", code, out)
	}
	if code, out := cli(t, "admin", "brokers", "list", "--url", b1.web()); code != 0 ||
		!strings.Contains(out, b0.r.PulsarAdvertised) || !strings.Contains(out, b1.r.KafkaAdvertised) {
		t.Fatalf("admin brokers list: exit %d, %s", code, out)
	}

	// The brokers' load reports count their bundles.
	code, body := httpDo(t, "GET", b0.web()+"/admin/v2/brokers/test/loads", "")
	var loads []struct {
		ID   string `json:"id"`
		Load struct {
			Bundles int `json:"bundles"`
		} `json:"load"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &loads) != nil || len(loads) != 2 {
		t.Fatalf("loads: %d %s", code, body)
	}
}

// TestClusterBrokerFailover kills (SIGKILL) one of two brokers during
// continuous Kafka (franz-go, acks=all, idempotent) and Pulsar produce and
// consume on partitioned topics spread over both. The other broker takes
// the dead one's bundles once its ZooKeeper session expires; clients
// reconnect through lookup and go on. Everything acknowledged before,
// during and after the kill is consumed, in order per partition (per key),
// Kafka offsets without gaps.
func TestClusterBrokerFailover(t *testing.T) {
	brokerLoss(t, false)
}

// TestClusterGracefulHandover is the same with SIGTERM: the stopping
// broker hands its bundles over at once, and no send fails — clients see
// nothing but a reconnect.
func TestClusterGracefulHandover(t *testing.T) {
	brokerLoss(t, true)
}

func brokerLoss(t *testing.T, graceful bool) {
	c := startTestCluster(t, 2)
	b0, b1 := c.brokers[0], c.brokers[1]
	setRetention(t, b0)
	createPartitioned(t, b0, "fo-kafka", 4)
	createPartitioned(t, b0, "fo-pulsar", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var mu sync.Mutex
	type kafkaAck struct {
		offset int64
		value  string
	}
	kafkaAcked := map[int32][]kafkaAck{}
	pulsarAcked := map[string]bool{}
	var kafkaFailed, pulsarFailed int
	var lastAckAt [2]time.Time // Kafka, Pulsar

	kp, err := kgo.NewClient(kgo.SeedBrokers(b0.r.KafkaAdvertised, b1.r.KafkaAdvertised), kgo.DefaultProduceTopic("fo-kafka"),
		kgo.RecordDeliveryTimeout(90*time.Second), kgo.RetryTimeout(90*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer kp.Close()
	pc, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.pulsarURL(b0, b1), OperationTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pp, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: "fo-pulsar", DisableBatching: true, SendTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pp.Close()

	// Consumers, from the start, through the whole run.
	pcons, err := pc.Subscribe(pulsar.ConsumerOptions{Topic: "fo-pulsar", SubscriptionName: "fo",
		Type: pulsar.Failover, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer pcons.Close()
	pulsarGot := map[string][]int{} // key → sequence numbers in arrival order
	pulsarSeen := map[string]bool{}
	go func() {
		for {
			m, err := pcons.Receive(ctx)
			if err != nil {
				return
			}
			var seq int
			fmt.Sscanf(string(m.Payload()), "p-%d", &seq)
			mu.Lock()
			pulsarGot[m.Key()] = append(pulsarGot[m.Key()], seq)
			pulsarSeen[string(m.Payload())] = true
			mu.Unlock()
			pcons.Ack(m)
		}
	}()
	kc, err := kgo.NewClient(kgo.SeedBrokers(b1.r.KafkaAdvertised, b0.r.KafkaAdvertised), kgo.ConsumeTopics("fo-kafka"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kafkaGot := map[int32][]kafkaAck{}
	kafkaCount := 0
	go func() {
		for ctx.Err() == nil {
			fs := kc.PollFetches(ctx)
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				kafkaGot[r.Partition] = append(kafkaGot[r.Partition], kafkaAck{r.Offset, string(r.Value)})
				kafkaCount++
			})
			mu.Unlock()
		}
	}()

	// Producers: a record or message every few milliseconds, keys 0–7.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			v := fmt.Sprint("k-", i)
			kp.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint("key-", i%8)), Value: []byte(v)}, func(r *kgo.Record, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					kafkaFailed++
					return
				}
				kafkaAcked[r.Partition] = append(kafkaAcked[r.Partition], kafkaAck{r.Offset, v})
				lastAckAt[0] = time.Now()
			})
		}
	})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			v := fmt.Sprint("p-", i)
			pp.SendAsync(ctx, &pulsar.ProducerMessage{Key: fmt.Sprint("key-", i%8), Payload: []byte(v)},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						pulsarFailed++
						return
					}
					pulsarAcked[v] = true
					lastAckAt[1] = time.Now()
				})
		}
	})

	time.Sleep(3 * time.Second)
	var owned int
	for _, o := range ownership(t, b1) {
		if o.Owner == b0.r.PulsarAdvertised {
			owned++
		}
	}
	if owned == 0 {
		t.Fatal("the broker to kill owns no bundle")
	}
	killedAt := time.Now()
	if graceful {
		b0.p.signal(syscall.SIGTERM)
		defer b0.p.waitLine(`"msg":"shutdown complete"`, 30*time.Second)
	} else {
		b0.p.kill()
	}
	// Both protocols produce again through the survivor.
	var resumed [2]time.Duration
	eventually(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for i, at := range lastAckAt {
			if at.After(killedAt.Add(500*time.Millisecond)) && resumed[i] == 0 {
				resumed[i] = at.Sub(killedAt)
			}
		}
		if resumed[0] == 0 || resumed[1] == 0 {
			return fmt.Errorf("not producing again yet (Kafka %v, Pulsar %v)", resumed[0], resumed[1])
		}
		return nil
	})
	t.Logf("producing again after the broker went: Kafka %v, Pulsar %v", resumed[0], resumed[1])
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if err := kp.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pp.FlushWithCtx(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range ownership(t, b1) {
		if o.Owner != "" && o.Owner != b1.r.PulsarAdvertised {
			t.Fatalf("bundle %s still owned by %s after its death", o.Bundle, o.Owner)
		}
	}

	// Everything acknowledged is consumed.
	eventually(t, 90*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		acked := 0
		for _, l := range kafkaAcked {
			acked += len(l)
		}
		missing := 0
		for v := range pulsarAcked {
			if !pulsarSeen[v] {
				missing++
			}
		}
		if kafkaCount < acked || missing > 0 {
			return fmt.Errorf("Kafka consumed %d of %d acknowledged; Pulsar %d acknowledged not consumed", kafkaCount, acked, missing)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case graceful && (kafkaFailed > 0 || pulsarFailed > 0):
		t.Fatalf("sends failed across a graceful handover: Kafka %d, Pulsar %d", kafkaFailed, pulsarFailed)
	case kafkaFailed > 0 || pulsarFailed > 0:
		t.Logf("sends that failed (not acknowledged, so not required): Kafka %d, Pulsar %d", kafkaFailed, pulsarFailed)
	}
	total := 0
	for p, got := range kafkaGot {
		for i, r := range got {
			if r.offset != int64(i) {
				t.Fatalf("Kafka partition %d: record %d has offset %d: a gap or a duplicate", p, i, r.offset)
			}
		}
		for _, a := range kafkaAcked[p] {
			if a.offset >= int64(len(got)) || got[a.offset].value != a.value {
				t.Fatalf("Kafka partition %d: acknowledged %q at offset %d, consumed otherwise", p, a.value, a.offset)
			}
		}
		total += len(got)
	}
	for key, seqs := range pulsarGot {
		max := -1
		for _, s := range seqs {
			if s < max && !slices.Contains(seqs[:slices.Index(seqs, max)], s) {
				t.Fatalf("Pulsar key %s: %d after %d, out of order", key, s, max)
			}
			if s > max {
				max = s
			}
		}
	}
	t.Logf("Kafka: %d records acknowledged and consumed; Pulsar: %d acknowledged, all consumed", total, len(pulsarAcked))
}

// TestClusterBrokerPausedPastSession pauses (SIGSTOP) the broker serving a
// topic for longer than its ZooKeeper session, while a producer through
// the other broker goes on writing the topic: the other broker takes the
// bundle and fences the paused one's ledger. Resumed (SIGCONT), the old
// owner finds its session expired and gives its bundles up; what its
// producer sent while it was paused is either refused or lands after the
// takeover's writes, never beside them. Nothing acknowledged is lost and
// the topic reads as one log.
func TestClusterBrokerPausedPastSession(t *testing.T) {
	c := startTestCluster(t, 2)
	b0, b1 := c.brokers[0], c.brokers[1]
	setRetention(t, b0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic = "persistent://public/default/paused"
	// The topic goes to b0: an authoritative lookup there takes it.
	if code, body := httpDo(t, "GET", b0.web()+"/lookup/v2/topic/persistent/public/default/paused?authoritative=true", ""); code != 200 ||
		!strings.Contains(body, b0.r.PulsarAdvertised) {
		t.Fatalf("lookup: %d %s", code, body)
	}

	var mu sync.Mutex
	acked := map[string]bool{}
	pending := map[pulsar.Producer]*sync.WaitGroup{} // sends not answered yet, per producer
	send := func(p pulsar.Producer, v string) {
		if pending[p] == nil {
			pending[p] = &sync.WaitGroup{}
		}
		pending := pending[p]
		pending.Add(1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(v)}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			defer pending.Done()
			if err == nil {
				mu.Lock()
				acked[v] = true
				mu.Unlock()
			}
		})
	}
	// Waiting for the answers, not Flush: pulsar-client-go's Flush races
	// with its own reconnection (the race detector says so).
	answered := func(p pulsar.Producer) { pending[p].Wait() }
	c0, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.pulsarURL(b0), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	p0, err := c0.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p0.Close()
	for i := range 20 {
		send(p0, fmt.Sprint("before-", i))
	}
	answered(p0)

	b0.p.signal(syscall.SIGSTOP)
	pausedAt := time.Now()
	for i := range 20 { // sent to the paused broker
		send(p0, fmt.Sprint("paused-", i))
	}
	// A producer through b1 writes the topic once b0's session is gone.
	c1, err := pulsar.NewClient(pulsar.ClientOptions{URL: c.pulsarURL(b1), OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	var p1 pulsar.Producer
	eventually(t, 60*time.Second, func() error {
		var err error
		p1, err = c1.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 60 * time.Second})
		return err
	})
	defer p1.Close()
	t.Logf("b1 took the topic %v after b0 was paused", time.Since(pausedAt))
	for i := range 20 {
		send(p1, fmt.Sprint("takeover-", i))
	}
	answered(p1)

	b0.p.signal(syscall.SIGCONT)
	b0.p.waitLine("giving up every bundle", 30*time.Second)
	answered(p0) // what was sent while it was paused, once p0 reconnected
	for i := range 20 {
		send(p0, fmt.Sprint("after-", i))
	}
	answered(p0)
	for _, o := range ownership(t, b1) {
		if o.Owner == b0.r.PulsarAdvertised {
			t.Fatalf("bundle %s owned by the paused broker after it resumed", o.Bundle)
		}
	}

	// One log: read it all; every acknowledged message is there, once
	// each for the takeover's and after's, and "before" ahead of them.
	r, err := c1.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var log []string
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, string(m.Payload()))
	}
	mu.Lock()
	defer mu.Unlock()
	pos := map[string]int{}
	for i, v := range log {
		if _, dup := pos[v]; !dup {
			pos[v] = i
		}
	}
	for v := range acked {
		if _, ok := pos[v]; !ok {
			t.Fatalf("acknowledged %q is not in the log %v", v, log)
		}
	}
	for i := range 20 {
		if b, ok := pos[fmt.Sprint("before-", i)]; !ok || b > pos["takeover-0"] {
			t.Fatalf("before-%d at %d, after takeover-0 at %d: %v", i, b, pos["takeover-0"], log)
		}
	}
	t.Logf("log of %d messages, %d acknowledged", len(log), len(acked))
}

// TestClusterKafkaGroups: a franz-go consumer group on a topic whose
// partitions are spread over two brokers. Its coordinator (one broker,
// the same whichever is asked) commits offsets on partitions the other
// broker owns; the committed offsets are the group's subscriptions. Then
// the coordinator is killed: the survivor coordinates the group from its
// stored record, and a new member resumes exactly at the committed
// offsets — nothing committed comes again, nothing after is missed.
func TestClusterKafkaGroups(t *testing.T) {
	c := startTestCluster(t, 2)
	b0, b1 := c.brokers[0], c.brokers[1]
	setRetention(t, b0)
	createPartitioned(t, b0, "grp", 8)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seeds := kgo.SeedBrokers(b0.r.KafkaAdvertised, b1.r.KafkaAdvertised)

	const total = 800
	pc, err := kgo.NewClient(seeds, kgo.DefaultProduceTopic("grp"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for i := range total {
		pc.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprint("k", i)), Value: []byte(fmt.Sprint(i))}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := pc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, o := range ownership(t, b0) {
		owners[o.Owner] = true
	}
	if !owners[b0.r.PulsarAdvertised] || !owners[b1.r.PulsarAdvertised] {
		t.Fatalf("bundle owners %v: want both brokers", owners)
	}

	// Both brokers name the same coordinator.
	coordinator := func(b *clusterBroker) int32 {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.r.KafkaAdvertised))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = "g1", []string{"g1"}
		resp, err := cl.SeedBrokers()[0].Request(ctx, req) // the seed itself
		if err != nil {
			t.Fatal(err)
		}
		fc := resp.(*kmsg.FindCoordinatorResponse)
		node, code := fc.NodeID, fc.ErrorCode
		if len(fc.Coordinators) == 1 { // v4+
			node, code = fc.Coordinators[0].NodeID, fc.Coordinators[0].ErrorCode
		}
		if code != 0 {
			t.Fatalf("FindCoordinator on %s: error %d", b.r.KafkaAdvertised, code)
		}
		return node
	}

	// First member: consumes about half, commits, leaves.
	committed := map[int32]int64{}
	seen := map[int32]map[int64]bool{}
	m1, err := kgo.NewClient(seeds, kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("grp"), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < total/2 {
		fs := m1.PollRecords(ctx, 50) // so that about half is consumed and committed
		if err := fs.Err0(); err != nil {
			t.Fatalf("member 1 after %d: %v", got, err)
		}
		fs.EachRecord(func(r *kgo.Record) { got++ })
	}
	if err := m1.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	for _, ps := range m1.CommittedOffsets() {
		for p, o := range ps {
			committed[p] = o.Offset
		}
	}
	m1.Close()
	var sum int64
	for _, o := range committed {
		sum += o
	}
	if sum != int64(got) {
		t.Fatalf("committed offsets %v add up to %d, consumed %d", committed, sum, got)
	}
	// The commits are the group's subscriptions on every partition, on
	// both brokers.
	for p, o := range committed {
		code, body := httpDo(t, "GET", fmt.Sprintf("%s/admin/v2/persistent/public/default/grp-partition-%d/kafka-offsets/g1", b0.web(), p), "")
		var ko struct {
			Offset    int64 `json:"offset"`
			Committed bool  `json:"committed"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &ko) != nil || !ko.Committed || ko.Offset != o {
			t.Fatalf("partition %d: committed %d, the partition's owner says %d %s", p, o, code, body)
		}
	}

	// Kill the coordinator.
	node := coordinator(b0)
	if other := coordinator(b1); other != node {
		t.Fatalf("coordinators differ: %d and %d", node, other)
	}
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	var victim, survivor *clusterBroker
	for _, br := range meta.Brokers {
		if br.NodeID == node {
			for _, b := range []*clusterBroker{b0, b1} {
				if b.r.KafkaAdvertised == fmt.Sprintf("%s:%d", br.Host, br.Port) {
					victim = b
				} else {
					survivor = b
				}
			}
		}
	}
	if victim == nil {
		t.Fatalf("coordinator node %d is not a broker of %v", node, meta.Brokers)
	}
	victim.p.kill()

	// A new member resumes at the committed offsets.
	m2, err := kgo.NewClient(kgo.SeedBrokers(survivor.r.KafkaAdvertised), kgo.ConsumerGroup("g1"), kgo.ConsumeTopics("grp"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	rest := 0
	for rest < total-got {
		fs := m2.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("member 2 after %d of %d: %v", rest, total-got, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < committed[r.Partition] {
				t.Errorf("partition %d offset %d came again: committed %d", r.Partition, r.Offset, committed[r.Partition])
			}
			if seen[r.Partition] == nil {
				seen[r.Partition] = map[int64]bool{}
			}
			if !seen[r.Partition][r.Offset] {
				seen[r.Partition][r.Offset] = true
				rest++
			}
		})
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("member 1 consumed and committed %d, member 2 the other %d after the coordinator was killed", got, rest)
}

// TestClusterBookieLossAndAutoRecovery: a bookie of a topic's ledger is
// killed during Kafka writes (E/Qw/Qa 2/2/2 over three bookies): the
// writer goes on by an ensemble change; the auditor marks the ledger
// under-replicated and a replication worker copies the lost bookie's
// fragment to the one bookie left outside it. Then another original
// bookie is stopped and a fresh broker (nothing cached) reads every
// acknowledged record back from the bookies left.
func TestClusterBookieLossAndAutoRecovery(t *testing.T) {
	zkAddr, chroot := testZK(t)
	store := "zk:" + zkAddr + chroot
	bookie := func() *proc {
		p := start(t, "bookie", "--data-dir", t.TempDir(), "--bookie-listen", bookieListen, "--metadata-store", store,
			"--zk-session-timeout", "3s", "--autorecovery-grace-period", "1s", "--autorecovery-audit-interval", "2s",
			"--log-format", "json")
		p.waitLine(`"msg":"magnetar bookie ready"`, 60*time.Second)
		return p
	}
	brokerArgs := []string{"broker", "--metadata-store", store, "--zk-session-timeout", "3s", "--cluster", "test",
		"--pulsar-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--managed-ledger-ensemble-size", "2", "--managed-ledger-write-quorum", "2", "--managed-ledger-ack-quorum", "2",
		"--log-format", "json"}
	startBroker := func() *clusterBroker {
		p := start(t, brokerArgs...)
		b := &clusterBroker{p: p}
		if err := json.Unmarshal([]byte(p.waitLine(`"msg":"magnetar broker ready"`, 60*time.Second)), &b.r); err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The topic's first ledger goes on A and B, the only bookies then.
	a, b := bookie(), bookie()
	br := startBroker()
	setRetention(t, br)
	if code, body := httpDo(t, "PUT", br.web()+"/admin/v2/persistent/public/default/durable", ""); code != 204 {
		t.Fatalf("create topic: %d %s", code, body)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(br.r.KafkaAdvertised), kgo.DefaultProduceTopic("durable"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	var acked []string
	var ackedN atomic.Int64 // len(acked), for other goroutines
	produce := func(n int) error {
		for range n {
			v := fmt.Sprint("r-", len(acked))
			if err := kc.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				return fmt.Errorf("produce %s: %w", v, err)
			}
			acked = append(acked, v)
			ackedN.Add(1)
		}
		return nil
	}
	if err := produce(200); err != nil {
		t.Fatal(err)
	}

	// C joins; A dies during writes: the writer replaces it by C.
	c := bookie()
	done := make(chan error, 1)
	go func() { done <- produce(300) }()
	eventually(t, 30*time.Second, func() error {
		if n := ackedN.Load(); n < 250 {
			return fmt.Errorf("%d records acknowledged, waiting for 250 before the kill", n)
		}
		return nil
	})
	a.kill()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	underReplicated := func() []json.RawMessage {
		code, body := httpDo(t, "GET", br.web()+"/admin/v2/autorecovery/under-replicated", "")
		var list []json.RawMessage
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			t.Fatalf("under-replicated: %d %s", code, body)
		}
		return list
	}
	// The mark is the auditor's log line, not the admin listing: a worker
	// may copy the fragment and clear the mark within milliseconds, faster
	// than any poll of the listing.
	eventually(t, 60*time.Second, func() error {
		for _, p := range []*proc{b, c} {
			if p.logged(`"msg":"ledger under-replicated"`) {
				return nil
			}
		}
		return fmt.Errorf("no ledger marked under-replicated yet")
	})
	eventually(t, 90*time.Second, func() error {
		if l := underReplicated(); len(l) > 0 {
			return fmt.Errorf("still under-replicated: %s", l)
		}
		if !b.logged(`"msg":"ledger re-replicated"`) && !c.logged(`"msg":"ledger re-replicated"`) {
			return fmt.Errorf("no ledger re-replicated yet")
		}
		return nil
	})
	if code, out := cli(t, "admin", "bookies", "under-replicated", "--url", br.web()); code != 0 || !strings.Contains(out, "no under-replicated ledgers") {
		t.Fatalf("admin bookies under-replicated: exit %d, %s", code, out)
	}

	// D joins, so that a new ledger still finds two bookies; B stops; a new
	// broker reads it all from C, which now holds every entry.
	bookie() // D
	br.p.signal(syscall.SIGTERM)
	br.p.waitLine(`"msg":"shutdown complete"`, 30*time.Second)
	b.kill()
	br2 := startBroker()
	rc, err := kgo.NewClient(kgo.SeedBrokers(br2.r.KafkaAdvertised), kgo.ConsumeTopics("durable"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	for len(got) < len(acked) {
		fs := rc.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume after %d of %d: %v", len(got), len(acked), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(len(got)) {
				t.Fatalf("record at offset %d after %d records", r.Offset, len(got))
			}
			got = append(got, string(r.Value))
		})
	}
	if !slices.Equal(got, acked) {
		t.Fatalf("read back differs from what was acknowledged")
	}
}
