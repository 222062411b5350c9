package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// produceSeq produces values prefix-from … prefix-(to-1) one at a time,
// each acknowledged (acks=all) before the next.
func produceSeq(t testing.TB, p *kgo.Client, topic, prefix string, from, to int) {
	t.Helper()
	ctx := testCtx(t)
	for i := from; i < to; i++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}).FirstErr(); err != nil {
			t.Fatalf("produce %s-%d to %s: %v", prefix, i, topic, err)
		}
	}
}

// checkSeq fails t unless topic holds exactly prefix-0 … prefix-(n-1) at
// offsets 0..n-1.
func checkSeq(t testing.TB, srv *harness.Server, topic, prefix string, n int) {
	t.Helper()
	if end := endOffsets(t, srv, topic); end[0] != int64(n) {
		t.Fatalf("%s: end offset %d, want %d", topic, end[0], n)
	}
	for i, r := range consumeFranz(t, srv, topic, n) {
		if want := fmt.Sprintf("%s-%d", prefix, i); r.Offset != int64(i) || string(r.Value) != want {
			t.Fatalf("%s: %q at offset %d, want %q at %d", topic, r.Value, r.Offset, want, i)
		}
	}
}

// TestRestartIdempotentProducer: records acknowledged to a franz-go
// idempotent producer survive a crash (SIGKILL) and a clean stop; the
// producer carries on after each restart with its producer id and
// sequence numbers, and nothing is lost or stored twice, including the
// batches it retries across the crash. Its topics keep everything
// (retention.ms and retention.bytes -1); a last topic with the default
// configs checks that a restart does not drop records either.
func TestRestartIdempotentProducer(t *testing.T) {
	srv := harness.Start(t)
	seq, flood, clean, dflt := harness.Name(t), harness.Name(t), harness.Name(t), harness.Name(t)
	// Topics that keep everything, so that what is checked is the
	// crash, not retention.
	adm := newAdmin(t, srv)
	for _, topic := range []string{seq, flood, clean} {
		keep := map[string]*string{"retention.ms": kadm.StringPtr("-1"), "retention.bytes": kadm.StringPtr("-1")}
		if r, err := adm.CreateTopic(testCtx(t), 1, 1, keep, topic); err != nil {
			t.Fatalf("CreateTopic(%s): %v (%s)", topic, err, r.ErrMessage)
		}
	}
	p := franzClient(t, srv)
	const n, m = 50, 50
	produceSeq(t, p, seq, "s", 0, n)

	// flood: a second producer keeps records in flight while the server
	// is killed.
	// Its buffer never fills, so Produce never blocks: it stops at the
	// kill, and what it buffered is retried after the restart.
	fp := franzClient(t, srv, kgo.DefaultProduceTopic(flood), kgo.ProducerLinger(time.Millisecond), kgo.MaxBufferedRecords(1<<20),
		kgo.WithLogger(kgo.BasicLogger(testLogWriter{t}, kgo.LogLevelInfo, func() string { return "franz-go flood: " })))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		mu          sync.Mutex
		killed      atomic.Bool
		sent        int
		ackedBefore = map[int]bool{} // acknowledged before the kill
		acked       = map[int]bool{} // acknowledged at all
		failed      = map[int]error{}
		inflight    sync.WaitGroup
	)
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		for i := 0; !killed.Load(); i++ {
			inflight.Add(1)
			mu.Lock()
			sent++
			mu.Unlock()
			fp.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "f-%d", i)}, func(_ *kgo.Record, err error) {
				defer inflight.Done()
				before := !killed.Load()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed[i] = err
					return
				}
				acked[i] = true
				if before {
					ackedBefore[i] = true
				}
			})
		}
	}()
	harness.WaitFor(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 500
	}, "500 flood records acknowledged")
	killed.Store(true) // before the signal: what is acknowledged from here on is not counted as before the kill
	srv.Kill(t)
	<-floodDone
	srv.Restart(t)

	// The first producer carries on after the crash.
	produceSeq(t, p, seq, "s", n, n+m)
	checkSeq(t, srv, seq, "s", n+m)

	// The flood's records in flight are retried by franz-go; once all
	// are answered, the topic holds every acknowledged record once, in
	// order, at consecutive offsets.
	inflight.Wait()
	mu.Lock()
	t.Logf("flood: %d sent, %d acknowledged before the kill, %d in all, %d failed", sent, len(ackedBefore), len(acked), len(failed))
	for i, err := range failed {
		t.Errorf("flood record f-%d failed: %v", i, err)
	}
	mu.Unlock()
	end := endOffsets(t, srv, flood)[0]
	present := map[int]bool{}
	last := -1
	for i, r := range consumeFranz(t, srv, flood, int(end)) {
		var k int
		if _, err := fmt.Sscanf(string(r.Value), "f-%d", &k); err != nil || r.Offset != int64(i) {
			t.Fatalf("flood: %q at offset %d, want f-<n> at %d", r.Value, r.Offset, i)
		}
		if present[k] {
			t.Fatalf("flood: f-%d stored twice (again at offset %d)", k, r.Offset)
		}
		if k <= last {
			t.Fatalf("flood: f-%d at offset %d after f-%d: out of order", k, r.Offset, last)
		}
		present[k], last = true, k
	}
	for k := range acked {
		if !present[k] {
			what := "after the restart"
			if ackedBefore[k] {
				what = "before the kill"
			}
			t.Errorf("flood: f-%d was acknowledged %s and is lost", k, what)
		}
	}
	if len(present) != len(acked) {
		t.Errorf("flood: %d records stored, %d acknowledged", len(present), len(acked))
	}

	// A clean stop and restart: the same producer keeps producing to a
	// new topic and to the old one without OUT_OF_ORDER_SEQUENCE_NUMBER.
	produceSeq(t, p, clean, "c", 0, 20)
	// dflt is created by a produce, with the defaults of a topic a Kafka
	// client auto-creates.
	ap := franzClient(t, srv, kgo.AllowAutoTopicCreation())
	produceSeq(t, ap, dflt, "d", 0, 20)
	srv.Stop(t)
	srv.Restart(t)
	produceSeq(t, ap, dflt, "d", 20, 21) // loads the default-retention topic; it is checked last
	produceSeq(t, p, clean, "c", 20, 40)
	produceSeq(t, p, seq, "s", n+m, n+m+10)
	checkSeq(t, srv, clean, "c", 40)
	checkSeq(t, srv, seq, "s", n+m+10)

	// A new producer (a new producer id) after the restarts works too.
	q := franzClient(t, srv)
	produceSeq(t, q, clean, "c", 40, 45)
	checkSeq(t, srv, clean, "c", 45)

	// A topic with the default configs keeps its records over a
	// restart too: Kafka clients expect retention, not the deletion of
	// what no Pulsar subscription holds.
	t.Run("default retention", func(t *testing.T) {
		// Kafka's retention.ms, given to the topic when it was created.
		checkConfig(t, describeConfigs(t, newAdmin(t, srv), dflt), "retention.ms", "604800000", kmsg.ConfigSourceDynamicTopicConfig)
		l, err := newAdmin(t, srv).ListStartOffsets(testCtx(t), dflt)
		if err != nil {
			t.Fatal(err)
		}
		if o := offsetsOf(t, l, dflt); o[0] != 0 {
			t.Errorf("%s (default retention): start offset %d after a restart, want 0: records 0..%d are gone", dflt, o[0], o[0]-1)
		}
		fc := franzClient(t, srv, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dflt: {0: kgo.NewOffset().At(0)}}))
		fctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		fs := fc.PollFetches(fctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("%s: fetch from offset 0: %v", dflt, err)
		}
		if rs := fs.Records(); len(rs) == 0 || rs[0].Offset != 0 || string(rs[0].Value) != "d-0" {
			first := "nothing"
			if len(rs) > 0 {
				first = fmt.Sprintf("%q at offset %d", rs[0].Value, rs[0].Offset)
			}
			t.Errorf("%s (default retention): fetch from offset 0 after a restart gives %s first, want \"d-0\" at 0", dflt, first)
		}
	})
}

// testLogWriter writes a client's log lines into t's log.
type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
