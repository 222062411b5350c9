package broker

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// bootstrapped is a test broker after Bootstrap (cluster "standalone",
// tenant public, namespace public/default).
func bootstrapped(t *testing.T, tweak ...func(*Config)) *testStack {
	t.Helper()
	tweak = append([]func(*Config){func(c *Config) {
		c.ServiceURL, c.BrokerServiceURL = "http://localhost:8080", "pulsar://localhost:6650"
	}}, tweak...)
	st := newTestBroker(t, tweak...)
	if err := st.b.Bootstrap(testCtx(t)); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	return st
}

func TestBootstrap(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	if cs, err := st.b.Clusters(ctx); err != nil || !slices.Equal(cs, []string{"standalone"}) {
		t.Fatalf("Clusters = %v, %v", cs, err)
	}
	c, err := st.b.Cluster(ctx, "standalone")
	if err != nil || c.ServiceURL != "http://localhost:8080" || c.BrokerServiceURL != "pulsar://localhost:6650" {
		t.Fatalf("Cluster(standalone) = %+v, %v", c, err)
	}
	ti, err := st.b.Tenant(ctx, "public")
	if err != nil || !slices.Equal(ti.AllowedClusters, []string{"standalone"}) || ti.AdminRoles == nil {
		t.Fatalf("Tenant(public) = %+v, %v", ti, err)
	}
	if nss, err := st.b.Namespaces(ctx, "public"); err != nil || !slices.Equal(nss, []string{"public/default"}) {
		t.Fatalf("Namespaces(public) = %v, %v", nss, err)
	}
	p, err := st.b.NamespacePolicies(ctx, "public", "default")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"}
	if p.Bundles == nil || p.Bundles.NumBundles != 4 || !slices.Equal(p.Bundles.Boundaries, want) {
		t.Fatalf("public/default bundles = %+v, want 4 bundles %v", p.Bundles, want)
	}
	if !slices.Equal(p.ReplicationClusters, []string{"standalone"}) {
		t.Fatalf("replication clusters = %v", p.ReplicationClusters)
	}

	// A second start keeps what exists and updates the service URLs.
	if err := st.b.SetMessageTTL(ctx, "public", "default", policyPtr(60)); err != nil {
		t.Fatal(err)
	}
	st.b.cfg.ServiceURL = "http://other:8081"
	if err := st.b.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := st.b.Cluster(ctx, "standalone"); c.ServiceURL != "http://other:8081" || c.BrokerServiceURL != "pulsar://localhost:6650" {
		t.Fatalf("cluster after restart = %+v", c)
	}
	if p, _ := st.b.NamespacePolicies(ctx, "public", "default"); p.MessageTTLInSeconds == nil || *p.MessageTTLInSeconds != 60 {
		t.Fatalf("policies after restart lost the TTL: %+v", p)
	}
}

func TestBundleBoundaries(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []string
	}{
		{1, []string{"0x00000000", "0xffffffff"}},
		{3, []string{"0x00000000", "0x55555555", "0xaaaaaaaa", "0xffffffff"}},
		{4, []string{"0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"}},
	} {
		got := bundleBoundaries(tc.n)
		if !slices.Equal(got, tc.want) {
			t.Errorf("bundleBoundaries(%d) = %v, want %v", tc.n, got, tc.want)
		}
		if err := checkBoundaries(got); err != nil {
			t.Errorf("checkBoundaries(%v): %v", got, err)
		}
	}
	for _, bad := range [][]string{{"0x00000000"}, {"0x00000001", "0xffffffff"}, {"0x00000000", "0x80000000", "0x40000000", "0xffffffff"},
		{"0x00000000", "0xzz000000", "0xffffffff"}, {"0x00000000", "0x8", "0xffffffff"}} {
		if err := checkBoundaries(bad); !errors.Is(err, ErrPreconditionFailed) {
			t.Errorf("checkBoundaries(%v) = %v, want ErrPreconditionFailed", bad, err)
		}
	}
}

func TestClusters(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	if err := b.CreateCluster(ctx, "east", ClusterData{ServiceURL: "http://east:8080"}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateCluster(ctx, "east", ClusterData{}); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("duplicate CreateCluster = %v", err)
	}
	for _, bad := range []struct {
		name string
		c    ClusterData
	}{{"bad/name", ClusterData{}}, {"", ClusterData{}}, {"west", ClusterData{ServiceURL: "no url"}}} {
		if err := b.CreateCluster(ctx, bad.name, bad.c); !errors.Is(err, ErrPreconditionFailed) {
			t.Errorf("CreateCluster(%q, %+v) = %v, want ErrPreconditionFailed", bad.name, bad.c, err)
		}
	}
	if err := b.UpdateCluster(ctx, "east", ClusterData{BrokerServiceURL: "pulsar://east:6650"}); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Cluster(ctx, "east"); err != nil || c.BrokerServiceURL != "pulsar://east:6650" || c.ServiceURL != "" {
		t.Fatalf("Cluster(east) = %+v, %v", c, err)
	}
	if err := b.UpdateCluster(ctx, "nope", ClusterData{}); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("UpdateCluster(nope) = %v", err)
	}
	if err := b.CreateTenant(ctx, "t1", TenantInfo{AllowedClusters: []string{"east"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteCluster(ctx, "east"); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("DeleteCluster of a cluster in use = %v", err)
	}
	if err := b.DeleteCluster(ctx, "standalone"); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("DeleteCluster of the broker's cluster = %v", err)
	}
	if err := b.DeleteTenant(ctx, "t1", false); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteCluster(ctx, "east"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteCluster(ctx, "east"); !errors.Is(err, ErrClusterNotFound) {
		t.Fatalf("second DeleteCluster = %v", err)
	}
	if cs, _ := b.Clusters(ctx); !slices.Equal(cs, []string{"standalone"}) {
		t.Fatalf("Clusters = %v", cs)
	}
}

func TestTenants(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	ti := TenantInfo{AdminRoles: []string{"admin"}, AllowedClusters: []string{"standalone"}}
	if err := b.CreateTenant(ctx, "acme", ti); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Tenant(ctx, "acme"); err != nil || !reflect.DeepEqual(got, ti) {
		t.Fatalf("Tenant(acme) = %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		ti   TenantInfo
		want error
	}{
		{"acme", ti, ErrAlreadyExists},
		{"bad name", ti, ErrPreconditionFailed},
		{"x", TenantInfo{}, ErrPreconditionFailed},
		{"x", TenantInfo{AllowedClusters: []string{"nope"}}, ErrPreconditionFailed},
	} {
		if err := b.CreateTenant(ctx, tc.name, tc.ti); !errors.Is(err, tc.want) {
			t.Errorf("CreateTenant(%q, %+v) = %v, want %v", tc.name, tc.ti, err, tc.want)
		}
	}
	if ts, _ := b.Tenants(ctx); !slices.Equal(ts, []string{"acme", "public"}) {
		t.Fatalf("Tenants = %v", ts)
	}
	if err := b.UpdateTenant(ctx, "acme", TenantInfo{AllowedClusters: []string{"nope"}}); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("UpdateTenant with unknown cluster = %v", err)
	}
	if err := b.UpdateTenant(ctx, "ghost", ti); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("UpdateTenant(ghost) = %v", err)
	}
	if err := b.UpdateTenant(ctx, "acme", TenantInfo{AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Tenant(ctx, "acme"); len(got.AdminRoles) != 0 || got.AdminRoles == nil {
		t.Fatalf("after update: %+v (want empty, non-nil admin roles)", got)
	}

	// Not empty: refused, then forced.
	if err := b.CreateNamespace(ctx, "acme", "ns1", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateNamespace(ctx, "acme", "ns2", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteTenant(ctx, "acme", false); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("DeleteTenant with namespaces = %v", err)
	}
	if nss, _ := b.Namespaces(ctx, "acme"); len(nss) != 2 {
		t.Fatalf("refused delete changed the namespaces: %v", nss)
	}
	if err := b.DeleteTenant(ctx, "acme", true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Tenant(ctx, "acme"); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("Tenant after delete = %v", err)
	}
	if _, err := b.Namespaces(ctx, "acme"); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("Namespaces after delete = %v", err)
	}
	// The name can be used again, without the old namespaces.
	if err := b.CreateTenant(ctx, "acme", ti); err != nil {
		t.Fatal(err)
	}
	if nss, _ := b.Namespaces(ctx, "acme"); len(nss) != 0 {
		t.Fatalf("recreated tenant has namespaces %v", nss)
	}
	if err := b.DeleteTenant(ctx, "ghost", false); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("DeleteTenant(ghost) = %v", err)
	}
}

func TestNamespaces(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	if err := b.CreateTenant(ctx, "acme", TenantInfo{AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateNamespace(ctx, "ghost", "ns", nil); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("CreateNamespace in a missing tenant = %v", err)
	}
	if err := b.CreateNamespace(ctx, "acme", "ns", &Policies{Bundles: &BundlesData{NumBundles: 3},
		MessageTTLInSeconds: policyPtr(30), DeduplicationEnabled: policyPtr(true)}); err != nil {
		t.Fatal(err)
	}
	p, err := b.NamespacePolicies(ctx, "acme", "ns")
	if err != nil || p.Bundles.NumBundles != 3 || len(p.Bundles.Boundaries) != 4 || *p.MessageTTLInSeconds != 30 ||
		!*p.DeduplicationEnabled || p.SchemaCompatibilityStrategy != "UNDEFINED" || p.BacklogQuotaMap == nil {
		t.Fatalf("policies = %+v, %v", p, err)
	}
	if err := b.CreateNamespace(ctx, "acme", "ns", nil); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("duplicate CreateNamespace = %v", err)
	}
	for _, bad := range []*Policies{
		{Bundles: &BundlesData{NumBundles: -1}},
		{Bundles: &BundlesData{NumBundles: MaxNumBundles + 1}},
		{ReplicationClusters: []string{"nope"}},
		{MessageTTLInSeconds: policyPtr(-1)},
		{RetentionPolicies: &RetentionPolicies{RetentionTimeInMinutes: 0, RetentionSizeInMB: 10}},
		{AutoTopicCreationOverride: &AutoTopicCreationOverride{Allow: true, TopicType: "sideways"}},
	} {
		if err := b.CreateNamespace(ctx, "acme", "bad", bad); !errors.Is(err, ErrPreconditionFailed) {
			t.Errorf("CreateNamespace with %+v = %v, want ErrPreconditionFailed", bad, err)
		}
	}
	if err := b.CreateNamespace(ctx, "acme", "bad/name", nil); !errors.Is(err, ErrPreconditionFailed) {
		t.Errorf("CreateNamespace with a bad name = %v", err)
	}
	if nss, _ := b.Namespaces(ctx, "acme"); !slices.Equal(nss, []string{"acme/ns"}) {
		t.Fatalf("Namespaces = %v (refused creates must not add any)", nss)
	}
	if _, err := b.NamespacePolicies(ctx, "acme", "nope"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("NamespacePolicies(acme/nope) = %v", err)
	}
	if _, err := b.NamespacePolicies(ctx, "ghost", "nope"); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("NamespacePolicies(ghost/nope) = %v", err)
	}

	// A namespace with a topic cannot be deleted.
	st.mustTopic(t, "acme/ns/t1")
	if err := b.DeleteNamespace(ctx, "acme", "ns", false); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("DeleteNamespace with a topic = %v", err)
	}
	if p, err := b.NamespacePolicies(ctx, "acme", "ns"); err != nil || p.Deleted {
		t.Fatalf("refused delete left %+v, %v", p, err)
	}
	st.mustTopic(t, "acme/ns/t2") // still usable
	if err := b.CreateNamespace(ctx, "acme", "empty", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteNamespace(ctx, "acme", "empty", false); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteNamespace(ctx, "acme", "empty", false); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("second DeleteNamespace = %v", err)
	}
}

func TestPolicySetters(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	if err := b.CreateTenant(ctx, "acme", TenantInfo{AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateNamespace(ctx, "acme", "ns", nil); err != nil {
		t.Fatal(err)
	}
	before, _ := b.NamespacePolicies(ctx, "acme", "ns")
	refused := func(what string, err error, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s = %v, want %v", what, err, want)
		}
		if got, _ := b.NamespacePolicies(ctx, "acme", "ns"); !reflect.DeepEqual(got, before) {
			t.Fatalf("%s refused but changed the policies:\n%+v\nwant\n%+v", what, got, before)
		}
	}
	refused("negative TTL", b.SetMessageTTL(ctx, "acme", "ns", policyPtr(-5)), ErrPreconditionFailed)
	refused("bad retention", b.SetRetention(ctx, "acme", "ns", &RetentionPolicies{RetentionTimeInMinutes: -2, RetentionSizeInMB: 1}), ErrPreconditionFailed)
	refused("bad quota policy", b.SetBacklogQuota(ctx, "acme", "ns", "", &BacklogQuota{LimitSize: 1, Policy: "drop_everything"}), ErrInvalidRequest)
	refused("bad quota type", b.SetBacklogQuota(ctx, "acme", "ns", "elsewhere", &BacklogQuota{LimitSize: 1, Policy: BacklogPolicyProducerException}), ErrInvalidRequest)
	refused("partitioned without partitions", b.SetAutoTopicCreation(ctx, "acme", "ns", &AutoTopicCreationOverride{Allow: true, TopicType: "partitioned"}), ErrPreconditionFailed)
	refused("TTL of a missing namespace", b.SetMessageTTL(ctx, "acme", "nope", policyPtr(5)), ErrNamespaceNotFound)

	if err := b.SetRetention(ctx, "acme", "ns", &RetentionPolicies{RetentionTimeInMinutes: 60, RetentionSizeInMB: 100}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetMessageTTL(ctx, "acme", "ns", policyPtr(120)); err != nil {
		t.Fatal(err)
	}
	q := BacklogQuota{LimitSize: 10 << 20, LimitTime: 600, Policy: BacklogPolicyProducerRequestHold}
	if err := b.SetBacklogQuota(ctx, "acme", "ns", "", &q); err != nil {
		t.Fatal(err)
	}
	// A quota above retention, and retention below the quota, are refused.
	before, _ = b.NamespacePolicies(ctx, "acme", "ns")
	refused("quota above retention", b.SetBacklogQuota(ctx, "acme", "ns", "", &BacklogQuota{LimitSize: 200 << 20, Policy: BacklogPolicyProducerException}), ErrPreconditionFailed)
	refused("retention below quota", b.SetRetention(ctx, "acme", "ns", &RetentionPolicies{RetentionTimeInMinutes: 5, RetentionSizeInMB: 100}), ErrPreconditionFailed)

	if err := b.SetDeduplication(ctx, "acme", "ns", policyPtr(true)); err != nil {
		t.Fatal(err)
	}
	o := AutoTopicCreationOverride{Allow: true, TopicType: "partitioned", DefaultNumPartitions: policyPtr(3)}
	if err := b.SetAutoTopicCreation(ctx, "acme", "ns", &o); err != nil {
		t.Fatal(err)
	}
	p, err := b.NamespacePolicies(ctx, "acme", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if *p.RetentionPolicies != (RetentionPolicies{60, 100}) || *p.MessageTTLInSeconds != 120 ||
		p.BacklogQuotaMap[BacklogQuotaDestinationStorage] != q || !*p.DeduplicationEnabled ||
		!reflect.DeepEqual(*p.AutoTopicCreationOverride, o) {
		t.Fatalf("policies = %+v", p)
	}

	for _, err := range []error{
		b.SetRetention(ctx, "acme", "ns", nil), b.SetMessageTTL(ctx, "acme", "ns", nil),
		b.SetBacklogQuota(ctx, "acme", "ns", "", nil), b.SetDeduplication(ctx, "acme", "ns", nil),
		b.SetAutoTopicCreation(ctx, "acme", "ns", nil),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p, _ = b.NamespacePolicies(ctx, "acme", "ns")
	if p.RetentionPolicies != nil || p.MessageTTLInSeconds != nil || len(p.BacklogQuotaMap) != 0 ||
		p.DeduplicationEnabled != nil || p.AutoTopicCreationOverride != nil {
		t.Fatalf("after removing everything: %+v", p)
	}
}

func TestTopicsNeedTheirNamespace(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	_, err := b.Topic(ctx, mustParse(t, "ghost/ns/t"), true)
	if !errors.Is(err, ErrTopicNotFound) || !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("topic in a missing namespace = %v, want ErrTopicNotFound and ErrNamespaceNotFound", err)
	}
	if err := b.CreatePartitionedTopic(ctx, mustParse(t, "ghost/ns/p"), 2); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("CreatePartitionedTopic in a missing namespace = %v, want ErrNamespaceNotFound", err)
	}
	if n, err := b.Partitions(ctx, mustParse(t, "ghost/ns/t")); n != 0 || !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("Partitions in a missing namespace = %d, %v; want ErrTopicNotFound", n, err)
	}
	// public/default works even without its node (a broker not bootstrapped).
	st2 := newTestBroker(t)
	st2.mustTopic(t, "public/default/t")
}

func TestNamespaceAutoTopicCreation(t *testing.T) {
	st := bootstrapped(t) // the broker creates non-partitioned topics
	ctx := testCtx(t)
	b := st.b
	if err := b.CreateTenant(ctx, "acme", TenantInfo{AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"off", "parted", "plain"} {
		if err := b.CreateNamespace(ctx, "acme", ns, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetAutoTopicCreation(ctx, "acme", "off", &AutoTopicCreationOverride{Allow: false}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetAutoTopicCreation(ctx, "acme", "parted", &AutoTopicCreationOverride{Allow: true, TopicType: "partitioned", DefaultNumPartitions: policyPtr(3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Topic(ctx, mustParse(t, "acme/off/t"), true); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("topic where auto-creation is off = %v", err)
	}
	if n, err := b.Partitions(ctx, mustParse(t, "acme/parted/t")); n != 3 || err != nil {
		t.Fatalf("Partitions where auto-creation is partitioned(3) = %d, %v", n, err)
	}
	if n, err := b.Partitions(ctx, mustParse(t, "acme/plain/t")); n != 0 || err != nil {
		t.Fatalf("Partitions where the broker's setting applies = %d, %v", n, err)
	}
	st.mustTopic(t, "acme/plain/t")

	// Removing the override restores the broker's setting.
	if err := b.SetAutoTopicCreation(ctx, "acme", "off", nil); err != nil {
		t.Fatal(err)
	}
	st.mustTopic(t, "acme/off/t")
	// And the other way round: a broker with auto-creation off, a
	// namespace allowing it.
	st2 := bootstrapped(t, func(c *Config) { c.AutoTopicCreation = AutoCreateOff })
	if err := st2.b.SetAutoTopicCreation(ctx, "public", "default", &AutoTopicCreationOverride{Allow: true, TopicType: "non-partitioned"}); err != nil {
		t.Fatal(err)
	}
	st2.mustTopic(t, "public/default/t")
}

func TestNamespaceDeduplication(t *testing.T) {
	st := bootstrapped(t) // broker deduplication off
	ctx := testCtx(t)
	b := st.b
	if err := b.CreateTenant(ctx, "acme", TenantInfo{AllowedClusters: []string{"standalone"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateNamespace(ctx, "acme", "dedup", &Policies{DeduplicationEnabled: policyPtr(true)}); err != nil {
		t.Fatal(err)
	}
	publishTwice := func(name string) (dups int) {
		tp := st.mustTopic(t, name)
		p, _ := mustProducer(t, tp, "p1")
		mustPublish(t, p, msg{seq: 1})
		if r := publish(t, p, msg{seq: 1}); r.Duplicate {
			dups++
		}
		return dups
	}
	if d := publishTwice("acme/dedup/t"); d != 1 {
		t.Fatalf("namespace with deduplication: %d duplicates dropped, want 1", d)
	}
	if d := publishTwice("public/default/t"); d != 0 {
		t.Fatalf("broker default (off): %d duplicates dropped, want 0", d)
	}

	// Turning it on unloads the namespace's topics; the producer sees its
	// topic close and the reloaded topic deduplicates.
	tp := st.mustTopic(t, "public/default/t2")
	p, ps := mustProducer(t, tp, "p2")
	mustPublish(t, p, msg{seq: 1})
	if err := b.SetDeduplication(ctx, "public", "default", policyPtr(true)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return ps.closedCount() > 0 }, "the producer to be closed")
	tp = st.mustTopic(t, "public/default/t2")
	p, _ = mustProducer(t, tp, "p2")
	mustPublish(t, p, msg{seq: 2})
	if r := publish(t, p, msg{seq: 2}); !r.Duplicate {
		t.Fatalf("after enabling deduplication on the namespace, a resent message was stored: %+v", r)
	}
}

func policyPtr[T any](v T) *T { return &v }

// mustNamespace creates tenant and namespace ("tenant/ns") on the broker's
// cluster, bootstrapping the broker first.
func (st *testStack) mustNamespace(t testing.TB, name string) {
	t.Helper()
	ctx := testCtx(t)
	tenant, ns, _ := strings.Cut(name, "/")
	if err := st.b.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	err := st.b.CreateTenant(ctx, tenant, TenantInfo{AllowedClusters: []string{st.b.ClusterName()}})
	if err != nil && !errors.Is(err, ErrAlreadyExists) {
		t.Fatal(err)
	}
	if err := st.b.CreateNamespace(ctx, tenant, ns, nil); err != nil && !errors.Is(err, ErrAlreadyExists) {
		t.Fatal(err)
	}
}

func TestForceDeleteNamespaceWithTopics(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	st.mustNamespace(t, "acme/ns")
	tp := st.mustTopic(t, "acme/ns/plain")
	_, ps := mustProducer(t, tp, "p1")
	if err := b.CreatePartitionedTopic(ctx, mustParse(t, "acme/ns/parted"), 2); err != nil {
		t.Fatal(err)
	}
	st.mustTopic(t, "acme/ns/parted-partition-1")
	st.mustNamespace(t, "acme/other")
	st.mustTopic(t, "acme/other/keep")

	if err := b.DeleteNamespace(ctx, "acme", "ns", false); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("DeleteNamespace without force = %v", err)
	}
	if err := b.DeleteNamespace(ctx, "acme", "ns", true); err != nil {
		t.Fatalf("forced DeleteNamespace: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { return ps.closedCount() > 0 }, "the producer to be closed")
	if _, err := b.NamespacePolicies(ctx, "acme", "ns"); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("policies after forced delete = %v", err)
	}
	if ts, err := b.TopicsOfNamespace(ctx, "acme", "ns"); err != nil || len(ts) != 0 {
		t.Fatalf("topics after forced delete = %v, %v", ts, err)
	}
	if _, err := b.Topic(ctx, mustParse(t, "acme/ns/plain"), true); !errors.Is(err, ErrNamespaceNotFound) {
		t.Fatalf("topic in the deleted namespace = %v, want ErrNamespaceNotFound", err)
	}
	// Recreated, the namespace is empty; the other namespace kept its topic.
	st.mustNamespace(t, "acme/ns")
	if ts, _ := b.TopicsOfNamespace(ctx, "acme", "ns"); len(ts) != 0 {
		t.Fatalf("recreated namespace has topics %v", ts)
	}
	if ts, _ := b.TopicsOfNamespace(ctx, "acme", "other"); !slices.Equal(ts, []string{"persistent://acme/other/keep"}) {
		t.Fatalf("other namespace's topics = %v", ts)
	}

	// A forced tenant delete takes namespaces with topics along.
	if err := b.DeleteTenant(ctx, "acme", true); err != nil {
		t.Fatalf("forced DeleteTenant: %v", err)
	}
	if ts, _ := b.TopicsOfNamespace(ctx, "acme", "other"); len(ts) != 0 {
		t.Fatalf("topics after forced tenant delete = %v", ts)
	}
	if _, err := b.Tenant(ctx, "acme"); !errors.Is(err, ErrTenantNotFound) {
		t.Fatalf("tenant after forced delete = %v", err)
	}
}

// TestConcurrentPolicyChanges: setters of different policies racing on one
// namespace do not undo each other (compare-and-set with retry).
func TestConcurrentPolicyChanges(t *testing.T) {
	st := bootstrapped(t)
	ctx := testCtx(t)
	b := st.b
	st.mustNamespace(t, "acme/ns")
	const rounds = 20
	errs := make(chan error, 3*rounds)
	var wg sync.WaitGroup
	for i := range rounds {
		wg.Add(3)
		go func() { defer wg.Done(); errs <- b.SetMessageTTL(ctx, "acme", "ns", policyPtr(i)) }()
		go func() {
			defer wg.Done()
			errs <- b.SetRetention(ctx, "acme", "ns", &RetentionPolicies{RetentionTimeInMinutes: 60 + i, RetentionSizeInMB: 100})
		}()
		go func() {
			defer wg.Done()
			errs <- b.SetBacklogQuota(ctx, "acme", "ns", BacklogQuotaMessageAge, &BacklogQuota{LimitTime: int64(i), Policy: BacklogPolicyProducerException})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	p, err := b.NamespacePolicies(ctx, "acme", "ns")
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageTTLInSeconds == nil || p.RetentionPolicies == nil || len(p.BacklogQuotaMap) != 1 {
		t.Fatalf("a concurrent change was lost: %+v", p)
	}
}
