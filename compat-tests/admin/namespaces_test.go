package admin_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsaradmin/pkg/utils"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

func TestNamespaces(t *testing.T) {
	a := adminClient(t)
	tn := newTenant(t)
	ns := tn + "/ns"
	nsName, err := utils.GetNamespaceName(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().CreateNsWithNumBundles(tn+"/three", 3); err != nil {
		t.Fatal(err)
	}
	ttl := 45
	if err := a.Namespaces().CreateNsWithPolices(tn+"/with-policies", utils.Policies{MessageTTLInSeconds: &ttl}); err != nil {
		t.Fatal(err)
	}
	if nss, err := a.Namespaces().GetNamespaces(tn); err != nil || !slices.Equal(nss, []string{tn + "/ns", tn + "/three", tn + "/with-policies"}) {
		t.Fatalf("GetNamespaces(%s) = %v, %v", tn, nss, err)
	}
	p, err := a.Namespaces().GetPolicies(ns)
	if err != nil {
		t.Fatal(err)
	}
	wantBounds := []string{"0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"}
	if p.Bundles == nil || p.Bundles.NumBundles != 4 || !slices.Equal(p.Bundles.Boundaries, wantBounds) ||
		!slices.Equal(p.ReplicationClusters, []string{"standalone"}) || p.MessageTTLInSeconds != nil {
		t.Fatalf("GetPolicies(%s) = %+v (bundles %+v)", ns, p, p.Bundles)
	}
	if p, _ := a.Namespaces().GetPolicies(tn + "/three"); p.Bundles == nil || p.Bundles.NumBundles != 3 ||
		!slices.Equal(p.Bundles.Boundaries, []string{"0x00000000", "0x55555555", "0xaaaaaaaa", "0xffffffff"}) {
		t.Fatalf("3 bundles: %+v", p.Bundles)
	}
	if got, err := a.Namespaces().GetNamespaceMessageTTL(tn + "/with-policies"); err != nil || got != 45 {
		t.Fatalf("TTL of a namespace created with policies = %d, %v", got, err)
	}

	// Retention.
	if r, err := a.Namespaces().GetRetention(ns); err != nil || r != nil {
		t.Fatalf("GetRetention before setting = %+v, %v; want nil", r, err)
	}
	if err := a.Namespaces().SetRetention(ns, utils.NewRetentionPolicies(120, 512)); err != nil {
		t.Fatal(err)
	}
	if r, err := a.Namespaces().GetRetention(ns); err != nil || r == nil || *r != utils.NewRetentionPolicies(120, 512) {
		t.Fatalf("GetRetention = %+v, %v", r, err)
	}
	// Message TTL.
	if err := a.Namespaces().SetNamespaceMessageTTL(ns, 300); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Namespaces().GetNamespaceMessageTTL(ns); err != nil || got != 300 {
		t.Fatalf("GetNamespaceMessageTTL = %d, %v", got, err)
	}
	// Backlog quota (below retention: 512 MB, 120 min).
	q := utils.NewBacklogQuota(64<<20, 600, utils.ProducerException)
	if err := a.Namespaces().SetBacklogQuota(ns, q, utils.DestinationStorage); err != nil {
		t.Fatal(err)
	}
	if m, err := a.Namespaces().GetBacklogQuotaMap(ns); err != nil || m[utils.DestinationStorage] != q {
		t.Fatalf("GetBacklogQuotaMap = %+v, %v", m, err)
	}
	// Deduplication.
	if err := a.Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	// Auto topic creation.
	parts := 2
	atc := utils.TopicAutoCreationConfig{Allow: true, Type: utils.Partitioned, Partitions: &parts}
	if err := a.Namespaces().SetTopicAutoCreation(*nsName, atc); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Namespaces().GetTopicAutoCreation(*nsName); err != nil || got == nil || got.Allow != true ||
		got.Type != utils.Partitioned || got.Partitions == nil || *got.Partitions != 2 {
		t.Fatalf("GetTopicAutoCreation = %+v, %v", got, err)
	}

	p, err = a.Namespaces().GetPolicies(ns)
	if err != nil {
		t.Fatal(err)
	}
	if p.RetentionPolicies == nil || *p.RetentionPolicies != utils.NewRetentionPolicies(120, 512) ||
		p.MessageTTLInSeconds == nil || *p.MessageTTLInSeconds != 300 ||
		p.BacklogQuotaMap[utils.DestinationStorage] != q ||
		p.DeduplicationEnabled == nil || !*p.DeduplicationEnabled ||
		p.TopicAutoCreationConfig == nil || p.TopicAutoCreationConfig.Type != utils.Partitioned {
		t.Fatalf("GetPolicies after setting everything = %+v", p)
	}

	// Remove everything.
	for what, err := range map[string]error{
		"RemoveRetention":           a.Namespaces().RemoveRetention(ns),
		"RemoveNamespaceMessageTTL": a.Namespaces().RemoveNamespaceMessageTTL(ns),
		"RemoveBacklogQuota":        a.Namespaces().RemoveBacklogQuota(ns),
		"RemoveTopicAutoCreation":   a.Namespaces().RemoveTopicAutoCreation(*nsName),
	} {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	expect(t, "DELETE", "/admin/v2/namespaces/"+ns+"/deduplication", "", 204)
	p, err = a.Namespaces().GetPolicies(ns)
	if err != nil {
		t.Fatal(err)
	}
	if p.RetentionPolicies != nil || p.MessageTTLInSeconds != nil || len(p.BacklogQuotaMap) != 0 ||
		p.DeduplicationEnabled != nil || p.TopicAutoCreationConfig != nil {
		t.Fatalf("GetPolicies after removing everything = %+v", p)
	}
	if r, err := a.Namespaces().GetRetention(ns); err != nil || r != nil {
		t.Fatalf("GetRetention after removal = %+v, %v; want nil", r, err)
	}
	if got, err := a.Namespaces().GetTopicAutoCreation(*nsName); err != nil || got != nil {
		t.Fatalf("GetTopicAutoCreation after removal = %+v, %v; want nil", got, err)
	}

	for _, n := range []string{ns, tn + "/three", tn + "/with-policies"} {
		if err := a.Namespaces().DeleteNamespace(n); err != nil {
			t.Fatalf("DeleteNamespace(%s): %v", n, err)
		}
	}
	if nss, err := a.Namespaces().GetNamespaces(tn); err != nil || len(nss) != 0 {
		t.Fatalf("GetNamespaces after deleting all = %v, %v", nss, err)
	}
	if _, err := a.Namespaces().GetPolicies(ns); adminCode(err) != 404 {
		t.Fatalf("GetPolicies of a deleted namespace = %v, want 404", err)
	}
}

func TestNamespaceBadInput(t *testing.T) {
	a := adminClient(t)
	tn := newTenant(t)
	ns := tn + "/ns"
	if err := a.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().SetRetention(ns, utils.NewRetentionPolicies(60, 100)); err != nil {
		t.Fatal(err)
	}
	// A topic makes the namespace non-empty.
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	prod, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://" + ns + "/t"})
	if err != nil {
		t.Fatal(err)
	}
	prod.Close()

	base := "/admin/v2/namespaces/" + ns
	unchanged(t, []string{"/admin/v2/namespaces/" + tn, base, base + "/retention", base + "/messageTTL", base + "/backlogQuotaMap",
		base + "/deduplication", base + "/autoTopicCreation"}, func() {
		if err := a.Namespaces().CreateNamespace(ns); adminCode(err) != 409 {
			t.Errorf("duplicate CreateNamespace = %v, want 409", err)
		}
		if err := a.Namespaces().CreateNamespace(tn + "-nope/ns"); adminCode(err) != 404 {
			t.Errorf("CreateNamespace in a missing tenant = %v, want 404", err)
		}
		if err := a.Namespaces().DeleteNamespace(ns); adminCode(err) != 409 {
			t.Errorf("DeleteNamespace with a topic = %v, want 409", err)
		}
		if err := a.Namespaces().SetNamespaceMessageTTL(ns, -1); adminCode(err) != 412 {
			t.Errorf("negative TTL = %v, want 412", err)
		}
		if err := a.Namespaces().SetRetention(ns, utils.NewRetentionPolicies(-5, 10)); adminCode(err) != 412 {
			t.Errorf("retention time -5 = %v, want 412", err)
		}
		if err := a.Namespaces().SetBacklogQuota(ns, utils.NewBacklogQuota(1<<30, -1, utils.ProducerRequestHold), utils.DestinationStorage); adminCode(err) != 412 {
			t.Errorf("backlog quota above retention = %v, want 412", err)
		}
		if _, err := a.Namespaces().GetPolicies(tn + "/nope"); adminCode(err) != 404 {
			t.Errorf("GetPolicies of a missing namespace = %v, want 404", err)
		}
		if err := a.Namespaces().SetNamespaceMessageTTL(tn+"/nope", 5); adminCode(err) != 404 {
			t.Errorf("SetNamespaceMessageTTL of a missing namespace = %v, want 404", err)
		}
		expect(t, "GET", "/admin/v2/namespaces/"+tn+"-nope", "", 404)
		expect(t, "PUT", "/admin/v2/namespaces/"+tn+"/bad%20name", "", 412)
		expect(t, "PUT", "/admin/v2/namespaces/"+tn+"/other", `{"bundles":{"numBundles":-1}}`, 412)
		expect(t, "PUT", "/admin/v2/namespaces/"+tn+"/other", `{"replication_clusters":["nowhere"]}`, 412)
		expect(t, "PUT", "/admin/v2/namespaces/"+tn+"/other", `{"bundles":`, 400)
		expect(t, "POST", base+"/messageTTL", `"soon"`, 400)
		expect(t, "POST", base+"/retention", `{"retentionTimeInMinutes":"long"}`, 400)
		expect(t, "POST", base+"/retention", `{"retentionTimeInMinutes":0,"retentionSizeInMB":10}`, 412)
		expect(t, "POST", base+"/backlogQuota", `{"limitSize":1,"policy":"drop_it"}`, 400)
		expect(t, "POST", base+"/backlogQuota?backlogQuotaType=nowhere", `{"limitSize":1,"policy":"producer_exception"}`, 400)
		expect(t, "POST", base+"/deduplication", `"yes"`, 400)
		expect(t, "POST", base+"/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"partitioned","defaultNumPartitions":0}`, 412)
		expect(t, "POST", base+"/autoTopicCreation", `{"allowAutoTopicCreation":true,"topicType":"sideways"}`, 412)
		expect(t, "POST", base+"/autoTopicCreation", `[]`, 400)
		expect(t, "DELETE", base+"?force=sometimes", "", 400)
	})

	// Forced, the namespace goes with its topic.
	expect(t, "DELETE", base+"?force=true", "", 204)
	if nss, err := a.Namespaces().GetNamespaces(tn); err != nil || len(nss) != 0 {
		t.Fatalf("GetNamespaces after a forced delete = %v, %v", nss, err)
	}
	if err := a.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if ts, err := a.Namespaces().GetTopics(ns); err != nil || len(ts) != 0 {
		t.Fatalf("topics of the recreated namespace = %v, %v; want none", ts, err)
	}
}

// sendSeqs sends one message per sequence id (explicit ids, no batching)
// as producer name on topic, and closes the producer.
func sendSeqs(t *testing.T, c pulsar.Client, topic, name string, seqs ...int64) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Name: name, DisableBatching: true})
	if err != nil {
		t.Fatalf("CreateProducer(%s): %v", topic, err)
	}
	defer p.Close()
	for _, seq := range seqs {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "seq-%d", seq), SequenceID: &seq})
		cancel()
		if err != nil {
			t.Fatalf("Send(seq %d) on %s: %v", seq, topic, err)
		}
	}
}

// receiveAll reads topic from the start until no message comes for a
// moment and returns the payloads.
func receiveAll(t *testing.T, c pulsar.Client, topic string) []string {
	t.Helper()
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		msg, err := r.Next(ctx)
		cancel()
		if err != nil {
			return got
		}
		got = append(got, string(msg.Payload()))
	}
}

// TestNamespaceDeduplication: a namespace with deduplication enabled drops
// a reconnected producer's resent messages; public/default, with the
// broker's default (off), stores them again.
func TestNamespaceDeduplication(t *testing.T) {
	a := adminClient(t)
	tn := newTenant(t)
	ns := tn + "/dedup"
	if err := a.Namespaces().CreateNamespace(ns); err != nil {
		t.Fatal(err)
	}
	if err := a.Namespaces().SetDeduplicationStatus(ns, true); err != nil {
		t.Fatal(err)
	}
	expect(t, "GET", "/admin/v2/namespaces/"+ns+"/deduplication", "", 200)
	c := harness.NewClient(t, shared.Server(t).PulsarURL())
	for _, tc := range []struct {
		topic string
		want  []string
	}{
		{"persistent://" + ns + "/" + name(t), []string{"seq-0", "seq-1", "seq-2", "seq-3"}},
		{"persistent://public/default/" + name(t), []string{"seq-0", "seq-1", "seq-2", "seq-1", "seq-2", "seq-3"}},
	} {
		producer := "p-" + name(t)
		sendSeqs(t, c, tc.topic, producer, 0, 1, 2)
		sendSeqs(t, c, tc.topic, producer, 1, 2, 3) // reconnected, resending 1 and 2
		if got := receiveAll(t, c, tc.topic); !slices.Equal(got, tc.want) {
			t.Errorf("%s: stored %v, want %v", tc.topic, got, tc.want)
		}
	}
}

// TestNamespaceAutoTopicCreation: the namespace's override decides whether
// and how a producer's first use of a topic creates it.
func TestNamespaceAutoTopicCreation(t *testing.T) {
	a := adminClient(t)
	tn := newTenant(t)
	off, parted := tn+"/off", tn+"/parted"
	for _, ns := range []string{off, parted} {
		if err := a.Namespaces().CreateNamespace(ns); err != nil {
			t.Fatal(err)
		}
	}
	offName, _ := utils.GetNamespaceName(off)
	partedName, _ := utils.GetNamespaceName(parted)
	if err := a.Namespaces().SetTopicAutoCreation(*offName, utils.TopicAutoCreationConfig{Allow: false}); err != nil {
		t.Fatal(err)
	}
	n := 3
	if err := a.Namespaces().SetTopicAutoCreation(*partedName, utils.TopicAutoCreationConfig{Allow: true, Type: utils.Partitioned, Partitions: &n}); err != nil {
		t.Fatal(err)
	}
	c := harness.NewClient(t, shared.Server(t).PulsarURL())

	topic := "persistent://" + off + "/" + name(t)
	if p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic}); err == nil {
		p.Close()
		t.Fatalf("producer on a new topic in %s (auto-creation off) was created", off)
	}
	if ts, err := a.Namespaces().GetTopics(off); err != nil || len(ts) != 0 {
		t.Fatalf("topics of %s = %v, %v; want none", off, ts, err)
	}
	// A namespace that does not exist refuses too.
	if p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://" + tn + "/nope/" + name(t)}); err == nil {
		p.Close()
		t.Fatalf("producer on a topic of a missing namespace was created")
	}

	topic = "persistent://" + parted + "/" + name(t)
	sendSeqs(t, c, topic, "p-"+name(t), 0)
	if parts, err := c.TopicPartitions(topic); err != nil || len(parts) != n {
		t.Fatalf("TopicPartitions(%s) = %v, %v; want %d partitions", topic, parts, err, n)
	}

	// Removing the override brings back the broker's default
	// (non-partitioned).
	if err := a.Namespaces().RemoveTopicAutoCreation(*offName); err != nil {
		t.Fatal(err)
	}
	topic = "persistent://" + off + "/" + name(t)
	sendSeqs(t, c, topic, "p-"+name(t), 0)
	if parts, err := c.TopicPartitions(topic); err != nil || len(parts) != 1 {
		t.Fatalf("TopicPartitions(%s) = %v, %v; want a non-partitioned topic", topic, parts, err)
	}
}
