package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func testKafkaBatch(id int64, epoch int16, seq int32, n int) KafkaAppend {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{OffsetDelta: int32(i), Value: []byte(fmt.Sprint("v", seq+int32(i)))}
	}
	b := AppendRecordBatch(nil, RecordBatch{ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	return KafkaAppend{Batch: b, Records: int32(n), ProducerID: id, ProducerEpoch: epoch, BaseSequence: seq}
}

func appendKafka(t *testing.T, tp *Topic, a KafkaAppend) (int64, error) {
	t.Helper()
	type result struct {
		off int64
		err error
	}
	ch := make(chan result, 1)
	tp.AppendKafka(testCtx(t), a, func(off int64, err error) { ch <- result{off, err} })
	select {
	case r := <-ch:
		return r.off, r.err
	case <-time.After(30 * time.Second):
		t.Fatal("AppendKafka did not complete")
	}
	return 0, nil
}

// TestKafkaProducerStateSurvivesRestart: retries of batches stored before
// a graceful restart or a takeover by another broker are still answered
// with their offsets and not stored again; the sequence goes on.
func TestKafkaProducerStateSurvivesRestart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "takeover"}[crash], func(t *testing.T) {
			ctx := testCtx(t)
			cluster := newTestCluster(t)
			snap := func(c *Config) { c.DedupSnapshotInterval = 3 }
			st := cluster.newStack(t, snap)
			tp := st.mustTopic(t, "kafka-idem")
			// 7 batches of 2: a snapshot after the 3rd and 6th, the 7th
			// only in the log.
			var offsets []int64
			for i := range 7 {
				off, err := appendKafka(t, tp, testKafkaBatch(42, 0, int32(2*i), 2))
				if err != nil || off != int64(2*i) {
					t.Fatalf("batch %d: offset %d err %v", i, off, err)
				}
				offsets = append(offsets, off)
			}
			var tp2 *Topic
			if crash {
				tp2 = cluster.newStack(t, snap).mustTopic(t, "kafka-idem")
			} else {
				if err := tp.Close(ctx); err != nil {
					t.Fatal(err)
				}
				tp2 = st.mustTopic(t, "kafka-idem")
			}
			entries := tp2.ManagedLedger().NumberOfEntries()
			// The last 5 batches are remembered: retries get their offsets.
			for i := 2; i < 7; i++ {
				off, err := appendKafka(t, tp2, testKafkaBatch(42, 0, int32(2*i), 2))
				if err != nil || off != offsets[i] {
					t.Fatalf("retry of batch %d after the restart: offset %d err %v, want %d", i, off, err, offsets[i])
				}
			}
			if got := tp2.ManagedLedger().NumberOfEntries(); got != entries {
				t.Fatalf("retries stored again: %d entries, was %d", got, entries)
			}
			if _, err := appendKafka(t, tp2, testKafkaBatch(42, 0, 20, 1)); !errors.Is(err, ErrOutOfOrderSequence) {
				t.Fatalf("a gap after the restart: err %v, want ErrOutOfOrderSequence", err)
			}
			if off, err := appendKafka(t, tp2, testKafkaBatch(42, 0, 14, 1)); err != nil || off != 14 {
				t.Fatalf("the next batch: offset %d err %v, want 14", off, err)
			}
			infos := tp2.KafkaProducers()
			if len(infos) != 1 || infos[0].ProducerID != 42 || infos[0].LastSequence != 14 {
				t.Fatalf("producers %+v, want 42 at sequence 14", infos)
			}
		})
	}
}

// TestKafkaInFlightRetryWaitsForTheOriginal: a retry arriving while the
// original is being stored is answered with the original's offset once
// stored, not stored twice.
func TestKafkaInFlightRetryWaitsForTheOriginal(t *testing.T) {
	st := newTestBroker(t)
	tp := st.mustTopic(t, "kafka-inflight")
	a := testKafkaBatch(7, 0, 0, 3)
	type result struct {
		off int64
		err error
	}
	ch := make(chan result, 2)
	ctx := testCtx(t)
	tp.AppendKafka(ctx, a, func(off int64, err error) { ch <- result{off, err} })
	tp.AppendKafka(ctx, a, func(off int64, err error) { ch <- result{off, err} })
	for range 2 {
		if r := <-ch; r.err != nil || r.off != 0 {
			t.Fatalf("offset %d err %v, want 0", r.off, r.err)
		}
	}
	if n := tp.ManagedLedger().NumberOfEntries(); n != 1 {
		t.Fatalf("%d entries stored, want 1", n)
	}
}

func TestKafkaTopicNames(t *testing.T) {
	st := newTestBroker(t, func(c *Config) { c.KafkaTenant, c.KafkaNamespace = "acme", "kafka" })
	for _, tc := range []struct {
		in, full, kafka string
		err             bool
	}{
		{in: "foo", full: "persistent://acme/kafka/foo", kafka: "foo"},
		{in: "t/ns/foo", full: "persistent://t/ns/foo", kafka: "t/ns/foo"},
		{in: "persistent://acme/kafka/foo", full: "persistent://acme/kafka/foo", kafka: "foo"},
		{in: "foo-partition-1", err: true},
		{in: "a/b", err: true},
		{in: "bad name", err: true},
		{in: "", err: true},
	} {
		tn, err := st.b.KafkaTopicName(tc.in)
		if tc.err {
			if !errors.Is(err, ErrInvalidKafkaTopic) {
				t.Errorf("%q: err %v, want ErrInvalidKafkaTopic", tc.in, err)
			}
			continue
		}
		if err != nil || tn.String() != tc.full || st.b.KafkaName(tn) != tc.kafka {
			t.Errorf("%q: %v (%s), kafka name %q; want %s, %s", tc.in, tn, err, st.b.KafkaName(tn), tc.full, tc.kafka)
		}
	}
}

// TestKafkaAppendRefusedOverQuota: a producer-blocking backlog quota
// refuses Kafka appends until the topic is under it again.
func TestKafkaAppendRefusedOverQuota(t *testing.T) {
	st := newTestBroker(t)
	ctx := context.Background()
	tp := st.mustTopic(t, "kafka-quota")
	subscribe(t, tp, SubscribeOptions{Subscription: "slow", Type: SubExclusive, Durable: true})
	if _, err := appendKafka(t, tp, testKafkaBatch(-1, -1, -1, 5)); err != nil {
		t.Fatal(err)
	}
	quotas := map[string]BacklogQuota{BacklogQuotaDestinationStorage: {LimitSize: 10, Policy: BacklogPolicyProducerException}}
	if err := tp.enforceBacklogQuotas(ctx, quotas); err != nil {
		t.Fatal(err)
	}
	if _, err := appendKafka(t, tp, testKafkaBatch(-1, -1, -1, 1)); !errors.Is(err, ErrProducerBlockedQuotaException) {
		t.Fatalf("append over quota: err %v, want ErrProducerBlockedQuotaException", err)
	}
	quotas[BacklogQuotaDestinationStorage] = BacklogQuota{LimitSize: 1 << 20, Policy: BacklogPolicyProducerException}
	if err := tp.enforceBacklogQuotas(ctx, quotas); err != nil {
		t.Fatal(err)
	}
	if _, err := appendKafka(t, tp, testKafkaBatch(-1, -1, -1, 1)); err != nil {
		t.Fatalf("append under quota again: %v", err)
	}
}

func TestOwnRetention(t *testing.T) {
	ms := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		c      *TopicConfig
		r      *RetentionPolicies
		rt     time.Duration
		rs     int64
		hasOwn bool
	}{
		{c: &TopicConfig{}, hasOwn: false},
		// Only retention.ms: the size is unlimited, not 0 (which would
		// trim everything acknowledged at once).
		{c: &TopicConfig{RetentionMs: ms(60_000)}, rt: time.Minute, rs: -1, hasOwn: true},
		{c: &TopicConfig{RetentionBytes: ms(1 << 20)}, rt: -1, rs: 1 << 20, hasOwn: true},
		{c: &TopicConfig{RetentionMs: ms(-1)}, r: &RetentionPolicies{RetentionTimeInMinutes: 5, RetentionSizeInMB: 2}, rt: -1, rs: 2 << 20, hasOwn: true},
	} {
		rt, rs, ok := ownRetention(tc.c, tc.r)
		if ok != tc.hasOwn || (ok && (rt != tc.rt || rs != tc.rs)) {
			t.Errorf("%+v over %+v: %v %d %v, want %v %d %v", tc.c, tc.r, rt, rs, ok, tc.rt, tc.rs, tc.hasOwn)
		}
	}
}
