package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/ledger"
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
		// Twice: the second answer comes from the cache of names.
		for try := range 2 {
			tn, err := st.b.KafkaTopicName(tc.in)
			if tc.err {
				if !errors.Is(err, ErrInvalidKafkaTopic) {
					t.Errorf("%q, try %d: err %v, want ErrInvalidKafkaTopic", tc.in, try, err)
				}
				continue
			}
			if err != nil || tn.String() != tc.full || st.b.KafkaName(tn) != tc.kafka {
				t.Errorf("%q, try %d: %v (%v), kafka name %q; want %s, %s", tc.in, try, tn, err, st.b.KafkaName(tn), tc.full, tc.kafka)
			}
		}
	}
}

// TestKafkaNameCacheBounded: the cache of resolved names starts over at
// kafkaNameCacheMax names, keeps no refused name, and answers what
// resolving answers.
func TestKafkaNameCacheBounded(t *testing.T) {
	st := newTestBroker(t)
	for i := range kafkaNameCacheMax + 10 {
		name := fmt.Sprintf("t%d", i)
		tn, err := st.b.KafkaTopicName(name)
		if err != nil || tn.Local != name {
			t.Fatalf("%s: %v, %v", name, tn, err)
		}
		if n := len(st.b.kafkaNames.names); n > kafkaNameCacheMax {
			t.Fatalf("after %d names the cache holds %d, more than %d", i+1, n, kafkaNameCacheMax)
		}
	}
	if n := len(st.b.kafkaNames.names); n != 10 {
		t.Errorf("the cache holds %d names after starting over, want the 10 since", n)
	}
	if _, err := st.b.KafkaTopicName("bad name"); err == nil {
		t.Fatal("a bad name resolved")
	}
	if _, ok := st.b.kafkaNames.get("bad name"); ok {
		t.Error("a refused name was kept")
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

// framedCopy is a with its batch in a buffer of its own with
// ledger.AppendRoom free bytes in front (KafkaAppend.Framed).
func framedCopy(a KafkaAppend) KafkaAppend {
	a.Framed = append(make([]byte, ledger.AppendRoom), a.Batch...)
	a.Batch = a.Framed[ledger.AppendRoom:]
	return a
}

// TestKafkaAppendInPlace: framed batches, of idempotent producers or not,
// are stored in place with their bytes as sent, as read back from the
// bookies by another broker; a framed batch whose CRC field is wrong is
// refused by the bookies, not stored with a checksum made up for it; a
// Framed that is not the room before Batch is stored by copy.
func TestKafkaAppendInPlace(t *testing.T) {
	cluster := newTestCluster(t)
	tp := cluster.newStack(t).mustTopic(t, "kafka-in-place")
	sent := []KafkaAppend{
		framedCopy(testKafkaBatch(-1, 0, 0, 3)),
		framedCopy(testKafkaBatch(9, 0, 0, 2)),
		testKafkaBatch(9, 0, 2, 1),
		framedCopy(testKafkaBatch(9, 0, 3, 4)),
	}
	sent[0].ProducerID = -1
	// Framed holds other bytes than Batch: Batch is what is stored.
	other := testKafkaBatch(-1, 0, 0, 2)
	other.Framed = append(make([]byte, ledger.AppendRoom), testKafkaBatch(-1, 0, 0, 5).Batch...)
	sent = append(sent, other)
	var offsets []int64
	for i, a := range sent {
		off, err := appendKafka(t, tp, a)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		offsets = append(offsets, off)
	}

	bad := framedCopy(testKafkaBatch(-1, 0, 0, 2))
	bad.Batch[batchCRCOff] ^= 0xff
	if _, err := appendKafka(t, tp, bad); err == nil {
		t.Fatal("a framed batch with a wrong CRC field was stored")
	}
	// The refusal fails the ledger (as a bookie's error does); the
	// managed ledger rolls to a new one and appends go on.
	after := testKafkaBatch(-1, 0, 0, 1)
	deadline := time.Now().Add(20 * time.Second)
	for {
		off, err := appendKafka(t, tp, framedCopy(after))
		if err == nil {
			sent, offsets = append(sent, after), append(offsets, off)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("appends after the refused one still fail: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	ml := cluster.newStack(t).mustTopic(t, "kafka-in-place").ManagedLedger()
	for i, a := range sent {
		es, err := ml.ReadOffset(testCtx(t), offsets[i], 1)
		if err != nil || len(es) != 1 {
			t.Fatalf("batch %d: read at offset %d: %v, %d entries", i, offsets[i], err, len(es))
		}
		if !bytes.Equal(es[0].Payload, a.Batch) {
			t.Fatalf("batch %d: stored %d bytes differ from the %d sent", i, len(es[0].Payload), len(a.Batch))
		}
		if h := es[0].Header; h.Format != ledger.FormatKafka || h.FirstOffset != offsets[i] || h.Messages != a.Records {
			t.Fatalf("batch %d: stored header %+v", i, h)
		}
	}
}
