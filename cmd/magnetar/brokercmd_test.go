package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// TestBrokerProcessOnBookies runs a cluster of processes on ZooKeeper —
// three `magnetar bookie`s and a `magnetar broker` with ledgers 3/2/2 —
// produces and consumes over Kafka, checks that the topic's ledger is
// replicated as configured and that the broker registered itself, that a
// second broker joins with its own Kafka node id, and that SIGTERM stops
// the brokers cleanly and deregisters them.
func TestBrokerProcessOnBookies(t *testing.T) {
	zkAddr, chroot := testZKChroot(t, "magnetar-broker-test")
	store := "zk:" + zkAddr + chroot
	for i := range 3 {
		p := startMagnetar(t, "bookie", "--data-dir", filepath.Join(t.TempDir(), fmt.Sprint("b", i)),
			"--bookie-listen", freePort(t), "--metadata-store", store, "--zk-session-timeout", "4s", "--log-format", "json")
		p.waitLine(`"msg":"magnetar bookie ready"`, 60*time.Second)
	}
	brokerArgs := func() []string {
		return []string{"broker", "--metadata-store", store, "--zk-session-timeout", "4s", "--cluster", "test-cluster",
			"--pulsar-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
			"--managed-ledger-ensemble-size", "3", "--managed-ledger-write-quorum", "2", "--managed-ledger-ack-quorum", "2",
			"--log-format", "json"}
	}
	b := startMagnetar(t, brokerArgs()...)
	line := b.waitLine(`"msg":"magnetar broker ready"`, 60*time.Second)
	var kafkaAddr string
	for _, f := range strings.Split(line, ",") {
		if k, v, ok := strings.Cut(f, ":"); ok && k == `"kafka-advertised"` {
			kafkaAddr = strings.Trim(v, `"`)
		}
	}
	if kafkaAddr == "" || !strings.Contains(line, `"ledger-quorums":"3/2/2"`) || !strings.Contains(line, `"cluster":"test-cluster"`) {
		t.Fatalf("ready line %s: want the Kafka address, quorums 3/2/2 and cluster test-cluster", line)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.DefaultProduceTopic("on-bookies"), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics("on-bookies"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 20
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(fmt.Sprint("v", i))}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if string(rec.Value) != fmt.Sprint("v", got) || rec.Offset != int64(got) {
				t.Fatalf("record %d: %q at %d", got, rec.Value, rec.Offset)
			}
			got++
		})
	}

	// The topic's ledger is on three bookies, written to two of them.
	ms, err := zk.Open(ctx, zkAddr+chroot, zk.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	brokers, err := ms.Children(ctx, meta.BrokersRoot)
	if err != nil || len(brokers) != 1 {
		t.Fatalf("registered brokers %v (%v), want one", brokers, err)
	}
	ledgers := 0
	buckets, err := ms.Children(ctx, meta.LedgersRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, bucket := range buckets {
		ids, _ := ms.Children(ctx, meta.Join(meta.LedgersRoot, bucket))
		for _, id := range ids {
			data, _, err := ms.Get(ctx, meta.Join(meta.LedgersRoot, bucket, id))
			var md client.LedgerMetadata
			if err != nil || json.Unmarshal(data, &md) != nil || md.Format == 0 {
				continue // not a ledger's node
			}
			ledgers++
			if md.EnsembleSize != 3 || md.WriteQuorum != 2 || md.AckQuorum != 2 {
				t.Fatalf("ledger %s: %d/%d/%d, want 3/2/2", id, md.EnsembleSize, md.WriteQuorum, md.AckQuorum)
			}
		}
	}
	if ledgers == 0 {
		t.Fatal("no ledger metadata found")
	}

	// A second broker joins: both are registered, each with its own
	// Kafka node id.
	second := startMagnetar(t, brokerArgs()...)
	second.waitLine(`"msg":"magnetar broker ready"`, 60*time.Second)
	ids := map[int32]bool{}
	eventually(t, 20*time.Second, func() error {
		brokers, err := ms.Children(ctx, meta.BrokersRoot)
		if err != nil || len(brokers) != 2 {
			return fmt.Errorf("registered brokers %v (%v), want two", brokers, err)
		}
		for _, n := range brokers {
			v, _, err := ms.Get(ctx, meta.Join(meta.BrokersRoot, n))
			var r struct {
				NodeID int32 `json:"kafkaNodeId"`
			}
			if err != nil || json.Unmarshal(v, &r) != nil {
				return fmt.Errorf("broker %s: %s (%v)", n, v, err)
			}
			ids[r.NodeID] = true
		}
		return nil
	})
	if len(ids) != 2 {
		t.Fatalf("Kafka node ids %v: want two different ones", ids)
	}
	second.signal(syscall.SIGTERM)
	if code := second.wait(15 * time.Second); code != 0 {
		t.Fatalf("second broker exited %d on SIGTERM", code)
	}

	b.signal(syscall.SIGTERM)
	if code := b.wait(15 * time.Second); code != 0 {
		t.Fatalf("broker exited %d on SIGTERM", code)
	}
	if brokers, err := ms.Children(ctx, meta.BrokersRoot); err != nil || len(brokers) != 0 {
		t.Fatalf("after SIGTERM registered brokers %v (%v), want none", brokers, err)
	}
}
