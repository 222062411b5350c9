package broker

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
)

func TestBundles(t *testing.T) {
	bs, err := bundlesOf("t", "ns", nil)
	if err != nil || len(bs) != DefaultNumBundles {
		t.Fatalf("default bundles %v (%v), want %d", bs, err, DefaultNumBundles)
	}
	if bs[0].Range() != "0x00000000_0x40000000" || bs[3].Range() != "0xc0000000_0xffffffff" {
		t.Fatalf("bundles %v", bs)
	}
	// Every hash is in exactly one bundle, the top one in the last.
	for _, h := range []uint32{0, 0x3fffffff, 0x40000000, 0xbfffffff, 0xfffffffe, 0xffffffff} {
		n := 0
		for _, b := range bs {
			if b.Contains(h) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("hash %#x in %d bundles", h, n)
		}
	}
	for _, bad := range []string{"", "0x0_0x1", "0x00000010_0x00000001", "0x00000000-0x40000000", "0xzzzzzzzz_0x40000000"} {
		if _, err := ParseBundle("t", "ns", bad); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("ParseBundle(%q) = %v, want ErrInvalidRequest", bad, err)
		}
	}
	b, err := ParseBundle("t", "ns", "0x40000000_0x80000000")
	if err != nil || b != bs[1] || b.String() != "t/ns/0x40000000_0x80000000" {
		t.Fatalf("ParseBundle = %v, %v", b, err)
	}
	bounds := bundleBoundaries(4)
	split, err := splitBoundaries(bounds, bs[1])
	if err != nil || !slices.Equal(split, []string{"0x00000000", "0x40000000", "0x60000000", "0x80000000", "0xc0000000", "0xffffffff"}) {
		t.Fatalf("split = %v, %v", split, err)
	}
	if _, err := splitBoundaries(bounds, Bundle{Tenant: "t", Namespace: "ns", Lo: 1, Hi: 2}); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("splitting a one-hash bundle: %v", err)
	}
	if _, err := splitBoundaries(bounds, Bundle{Tenant: "t", Namespace: "ns", Lo: 0, Hi: 0x20000000}); !errors.Is(err, ErrBundleNotFound) {
		t.Fatalf("splitting a range that is not a bundle: %v", err)
	}
	// A topic's bundle depends on its full name only.
	tn, _ := ParseTopicName("persistent://t/ns/x-partition-3")
	if TopicHash(tn) != murmur3([]byte("persistent://t/ns/x-partition-3")) {
		t.Fatal("TopicHash is not Murmur3 of the full name")
	}
}

// named gives a broker stack its own identity.
func named(id string) func(*Config) {
	return func(c *Config) {
		c.Name = id
		c.Advertised = BrokerInfo{ID: id, PulsarURL: "pulsar://" + id + ":6650", WebURL: "http://" + id + ":8080"}
	}
}

// topicIn returns a topic of public/default whose bundle is bd.
func topicIn(t *testing.T, bd Bundle) TopicName {
	t.Helper()
	for i := range 1000 {
		tn, _ := ParseTopicName(fmt.Sprint("persistent://public/default/t", i))
		if bd.Contains(TopicHash(tn)) {
			return tn
		}
	}
	t.Fatalf("no topic in %v", bd)
	return TopicName{}
}

// TestOwnershipTwoBrokers: one bundle, one owner; the other broker is
// refused and names the owner; an unloaded bundle goes to the other
// broker; a split bundle is given up and its halves assigned again; a
// closing broker hands its bundles over.
func TestOwnershipTwoBrokers(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.newStack(t, named("a"))
	b := tc.newStack(t, named("b"))
	ctx := testCtx(t)
	if err := a.b.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	bs, err := a.b.Bundles(ctx, "public", "default")
	if err != nil {
		t.Fatal(err)
	}
	tn := topicIn(t, bs[0])

	if _, err := a.b.Topic(ctx, tn, true); err != nil {
		t.Fatal(err)
	}
	_, err = b.b.Topic(ctx, tn, true)
	var ne *NotOwnerError
	if !errors.As(err, &ne) || ne.Owner.ID != "a" || ne.Owner.PulsarURL != "pulsar://a:6650" {
		t.Fatalf("b loading a's topic: %v, want a NotOwnerError naming a", err)
	}
	if l, err := b.b.LookupTopic(ctx, tn, false); err != nil || l.Self || l.Owner.ID != "a" {
		t.Fatalf("b's lookup = %+v, %v", l, err)
	}
	if l, err := a.b.LookupTopic(ctx, tn, false); err != nil || !l.Self {
		t.Fatalf("a's lookup = %+v, %v", l, err)
	}
	if got := a.b.OwnedBundles(); len(got) != 1 || got[0] != bs[0] {
		t.Fatalf("a owns %v", got)
	}
	// Unload through the wrong broker is refused with the owner.
	if err := b.b.UnloadBundle(ctx, bs[0]); !errors.As(err, &ne) || ne.Owner.ID != "a" {
		t.Fatalf("unload asked of b: %v", err)
	}
	// Unloaded by its owner, it goes to b (a is passed over), even when
	// a is asked.
	if err := a.b.UnloadBundle(ctx, bs[0]); err != nil {
		t.Fatal(err)
	}
	if len(a.b.OwnedBundles()) != 0 {
		t.Fatal("a still owns the bundle it unloaded")
	}
	l, err := a.b.LookupTopic(ctx, tn, false)
	if err != nil || l.Self || l.Owner.ID != "b" || !l.Assigned {
		t.Fatalf("lookup after the unload = %+v, %v; want it assigned to b", l, err)
	}
	if _, err := b.b.Topic(ctx, tn, true); err != nil {
		t.Fatalf("b loading the topic it was given: %v", err)
	}
	if l, err := a.b.LookupTopic(ctx, tn, false); err != nil || l.Owner.ID != "b" {
		t.Fatalf("a's lookup after the move = %+v, %v", l, err)
	}

	// Split by its owner: five bundles; b gives the old one up.
	if err := a.b.SplitBundle(ctx, bs[0]); !errors.As(err, &ne) {
		t.Fatalf("split asked of a: %v, want a NotOwnerError", err)
	}
	if err := b.b.SplitBundle(ctx, bs[0]); err != nil {
		t.Fatal(err)
	}
	after, err := a.b.Bundles(ctx, "public", "default")
	if err != nil || len(after) != 5 {
		t.Fatalf("bundles after the split: %v, %v", after, err)
	}
	if len(b.b.OwnedBundles()) != 0 {
		t.Fatalf("b owns %v after splitting its bundle", b.b.OwnedBundles())
	}
	if _, err := b.b.Topic(ctx, tn, true); err != nil {
		t.Fatalf("loading the topic again after the split: %v", err)
	}
	owned := b.b.OwnedBundles()
	if len(owned) != 1 || owned[0].Hi-owned[0].Lo != 0x20000000 {
		t.Fatalf("b owns %v, want one half of the split bundle", owned)
	}

	// Closing b hands its bundle over: a takes it on its next use.
	if err := b.b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.b.Topic(ctx, tn, true); err != nil {
		t.Fatalf("a loading the topic after b closed: %v", err)
	}
}

// TestOwnershipSpreadsBundles: lookups of unowned bundles asked of one
// broker give them to both.
func TestOwnershipSpreadsBundles(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.newStack(t, named("a"))
	tc.newStack(t, named("b"))
	ctx := testCtx(t)
	bs, err := a.b.Bundles(ctx, "public", "default")
	if err != nil {
		t.Fatal(err)
	}
	to := map[string]int{}
	for _, bd := range bs {
		l, err := a.b.LookupTopic(ctx, topicIn(t, bd), false)
		if err != nil {
			t.Fatal(err)
		}
		to[l.Owner.ID]++
	}
	if to["a"] != 2 || to["b"] != 2 {
		t.Fatalf("4 bundles went %v, want 2 to each broker", to)
	}
}

// TestPersistencePolicies: a namespace's persistence policies set the
// quorums of its topics' ledgers.
func TestPersistencePolicies(t *testing.T) {
	tc := newTestCluster(t)
	for _, dir := range []string{"/b2", "/b3"} {
		b, err := bookietest.Start(tc.store, bookietest.Options{Dir: dir, NoSync: true, Logger: brokerTestLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Stop)
	}
	st := tc.newStack(t)
	ctx := testCtx(t)
	if err := st.b.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	bad := &PersistencePolicies{BookkeeperEnsemble: 2, BookkeeperWriteQuorum: 3, BookkeeperAckQuorum: 1}
	if err := st.b.SetPersistence(ctx, "public", "default", bad); !errors.Is(err, ErrPreconditionFailed) {
		t.Fatalf("write quorum above the ensemble: %v", err)
	}
	pp := &PersistencePolicies{BookkeeperEnsemble: 3, BookkeeperWriteQuorum: 3, BookkeeperAckQuorum: 2}
	if err := st.b.SetPersistence(ctx, "public", "default", pp); err != nil {
		t.Fatal(err)
	}
	if p, err := st.b.NamespacePolicies(ctx, "public", "default"); err != nil || p.Persistence == nil || *p.Persistence != *pp {
		t.Fatalf("policies %+v, %v", p.Persistence, err)
	}
	tn, _ := ParseTopicName("persistent://public/default/replicated")
	tp, err := st.b.Topic(ctx, tn, true)
	if err != nil {
		t.Fatal(err)
	}
	id := tp.ManagedLedger().LastConfirmed().Ledger
	v, _, err := tc.store.Get(ctx, meta.LedgerPath(id))
	if err != nil {
		t.Fatal(err)
	}
	md, err := client.ParseMetadata(id, v)
	if err != nil {
		t.Fatal(err)
	}
	if md.EnsembleSize != 3 || md.WriteQuorum != 3 || md.AckQuorum != 2 || len(md.Ensembles[0].Bookies) != 3 {
		t.Fatalf("ledger %d: %d/%d/%d over %v, want 3/3/2 over three bookies", id, md.EnsembleSize, md.WriteQuorum, md.AckQuorum, md.Ensembles[0].Bookies)
	}
}

// TestLoadShedding: a broker holding far more bundles than the cluster's
// average unloads one; one near the average does not.
func TestLoadShedding(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.newStack(t, named("a"), func(c *Config) { c.LoadShedInterval = -1 })
	b := tc.newStack(t, named("b"), func(c *Config) { c.LoadShedInterval = -1 })
	ctx := testCtx(t)
	if err := a.b.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.b.UpdateNamespacePolicies(ctx, "public", "default", func(p *Policies) error {
		p.Bundles = &BundlesData{Boundaries: bundleBoundaries(8), NumBundles: 8}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bs, err := a.b.Bundles(ctx, "public", "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, bd := range bs[:5] { // a takes five bundles, b none
		if _, err := a.b.LookupTopic(ctx, topicIn(t, bd), true); err != nil {
			t.Fatal(err)
		}
	}
	a.b.own.report()
	b.b.own.report()
	a.b.own.shed()
	if got := len(a.b.OwnedBundles()); got != 4 {
		t.Fatalf("a owns %d bundles after shedding, want 4", got)
	}
	// With b holding two, 4 against 2 (average 3) is balanced enough.
	for _, bd := range bs[5:7] {
		if _, err := b.b.LookupTopic(ctx, topicIn(t, bd), true); err != nil {
			t.Fatal(err)
		}
	}
	a.b.own.report()
	b.b.own.report()
	a.b.own.shed()
	if got := len(a.b.OwnedBundles()); got != 4 {
		t.Fatalf("a owns %d bundles after shedding near the average, want 4", got)
	}
}

// TestUnloadTopicMovesItsBundle: with another broker live, unloading a
// topic gives up its bundle, which the next lookup gives to the other
// broker; asked of a broker that does not own it, it names the owner.
func TestUnloadTopicMovesItsBundle(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.newStack(t, named("a"))
	b := tc.newStack(t, named("b"))
	ctx := testCtx(t)
	if err := a.b.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	tn, _ := ParseTopicName("persistent://public/default/moving")
	if _, err := a.b.Topic(ctx, tn, true); err != nil {
		t.Fatal(err)
	}
	var ne *NotOwnerError
	if err := b.b.UnloadTopic(ctx, tn); !errors.As(err, &ne) || ne.Owner.ID != "a" {
		t.Fatalf("unload asked of b: %v, want a NotOwnerError naming a", err)
	}
	if err := a.b.UnloadTopic(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if len(a.b.OwnedBundles()) != 0 {
		t.Fatalf("a still owns %v", a.b.OwnedBundles())
	}
	if l, err := a.b.LookupTopic(ctx, tn, false); err != nil || l.Owner.ID != "b" {
		t.Fatalf("lookup after the unload = %+v, %v; want b", l, err)
	}
	if _, err := b.b.Topic(ctx, tn, true); err != nil {
		t.Fatalf("b loading the moved topic: %v", err)
	}
}
