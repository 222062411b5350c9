package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// Consumer groups with franz-go, and the helpers the other group tests
// share. A group's committed offset on a partition is the Pulsar
// subscription of the group's name on it, so the tests also look at the
// subscriptions through the admin REST API.

// groupWait bounds waits on a group: a first join waits the server's
// initial rebalance delay (3 s on the shared server), a rebalance a
// member's rebalance timeout at worst.
const groupWait = 45 * time.Second

// fastGroupArgs starts a server whose new groups assign at once.
var fastGroupArgs = harness.WithArgs("--kafka-group-initial-rebalance-delay", "0s")

// produceValues produces n records valued prefix-000, prefix-001, … to
// topic, record i to partition i%partitions, and returns the values.
func produceValues(t testing.TB, srv *harness.Server, topic, prefix string, n, partitions int) []string {
	t.Helper()
	return produceRange(t, srv, topic, prefix, 0, n, partitions)
}

// produceRange is produceValues for records first..first+n-1.
func produceRange(t testing.TB, srv *harness.Server, topic, prefix string, first, n, partitions int) []string {
	t.Helper()
	cl := franzClient(t, srv, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	var vals []string
	for i := first; i < first+n; i++ {
		v := fmt.Sprintf("%s-%03d", prefix, i)
		vals = append(vals, v)
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % partitions), Value: []byte(v)})
	}
	produceAll(t, cl, rs)
	cl.Close()
	return vals
}

// produceOneByOne produces values to partition 0 of topic, each in its
// own record batch (one entry, one Pulsar message).
func produceOneByOne(t testing.TB, srv *harness.Server, topic string, vals []string) {
	t.Helper()
	cl := franzClient(t, srv, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	for i, v := range vals {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s (%d of %d): %v", v, i, len(vals), err)
		}
	}
}

// committed returns the group's committed offsets on topic by partition
// (partitions without a commit are left out), failing t on any error.
func committed(t testing.TB, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	resps, err := adm.FetchOffsets(testCtx(t), group)
	if err != nil {
		t.Fatalf("FetchOffsets(%s): %v", group, err)
	}
	if err := resps.Error(); err != nil {
		t.Fatalf("FetchOffsets(%s): %v", group, err)
	}
	out := map[int32]int64{}
	for p, r := range resps[topic] {
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out
}

// waitCommitted waits until the group's committed offsets on topic are
// want.
func waitCommitted(t testing.TB, adm *kadm.Client, group, topic string, want map[int32]int64) {
	t.Helper()
	var got map[int32]int64
	deadline := time.Now().Add(groupWait)
	for {
		got = committed(t, adm, group, topic)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s's committed offsets on %s: %v, want %v", group, topic, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// uniform is partitions → off.
func uniform(partitions int, off int64) map[int32]int64 {
	m := map[int32]int64{}
	for p := range partitions {
		m[int32(p)] = off
	}
	return m
}

// describeGroup describes one group.
func describeGroup(t testing.TB, adm *kadm.Client, group string) kadm.DescribedGroup {
	t.Helper()
	ds, err := adm.DescribeGroups(testCtx(t), group)
	if err != nil {
		t.Fatalf("DescribeGroups(%s): %v", group, err)
	}
	d, ok := ds[group]
	if !ok {
		t.Fatalf("DescribeGroups(%s) answered %v, not the group", group, ds.Names())
	}
	return d
}

// assignedOf is a described member's assignment of topic's partitions,
// sorted.
func assignedOf(m kadm.DescribedGroupMember, topic string) []int32 {
	a, ok := m.Assigned.AsConsumer()
	if !ok {
		return nil
	}
	var ps []int32
	for _, tp := range a.Topics {
		if tp.Topic == topic {
			ps = append(ps, tp.Partitions...)
		}
	}
	slices.Sort(ps)
	return ps
}

// waitStable waits until group is Stable with members members whose
// assignments cover topic's partitions once each, and returns it.
func waitStable(t testing.TB, adm *kadm.Client, group, topic string, members, partitions int) kadm.DescribedGroup {
	t.Helper()
	var d kadm.DescribedGroup
	deadline := time.Now().Add(groupWait)
	for {
		d = describeGroup(t, adm, group)
		if d.Err == nil && d.State == "Stable" && len(d.Members) == members {
			var all []int32
			for _, m := range d.Members {
				all = append(all, assignedOf(m, topic)...)
			}
			slices.Sort(all)
			if len(all) == partitions && len(slices.Compact(all)) == partitions {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: state %s (err %v), %d members %s; want Stable with %d members covering %d partitions",
				group, d.State, d.Err, len(d.Members), describeMembers(d, topic), members, partitions)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describeMembers(d kadm.DescribedGroup, topic string) string {
	var parts []string
	for _, m := range d.Members {
		parts = append(parts, fmt.Sprintf("%s(%s)=%v", m.MemberID, m.ClientID, assignedOf(m, topic)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// subscriptions lists the Pulsar subscriptions of a topic (a partition's
// full local name, e.g. foo-partition-0) through the admin REST API.
func subscriptions(t testing.TB, srv *harness.Server, localName string) []string {
	t.Helper()
	var subs []string
	getJSON(t, srv.HTTPURL()+"/admin/v2/persistent/public/default/"+localName+"/subscriptions", &subs)
	sort.Strings(subs)
	return subs
}

// getJSON GETs url and decodes its 200 answer into out.
func getJSON(t testing.TB, url string, out any) {
	t.Helper()
	c := &http.Client{Timeout: opTimeout}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

// consumption records what a group's members consumed.
type consumption struct {
	mu      sync.Mutex
	count   map[string]int               // value → times consumed
	offsets map[string]map[int32][]int64 // member → partition → offsets in order
}

func newConsumption() *consumption {
	return &consumption{count: map[string]int{}, offsets: map[string]map[int32][]int64{}}
}

func (c *consumption) add(member string, rs []*kgo.Record) {
	for _, r := range rs {
		c.addOne(member, r.Partition, r.Offset, string(r.Value))
	}
}

func (c *consumption) addOne(member string, partition int32, offset int64, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.offsets[member] == nil {
		c.offsets[member] = map[int32][]int64{}
	}
	c.count[value]++
	c.offsets[member][partition] = append(c.offsets[member][partition], offset)
}

// hasAll reports whether every value was consumed at least once.
func (c *consumption) hasAll(vals []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range vals {
		if c.count[v] == 0 {
			return false
		}
	}
	return true
}

func (c *consumption) missing(vals []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, v := range vals {
		if c.count[v] == 0 {
			out = append(out, v)
		}
	}
	return out
}

// franzMember is a franz-go group member with autocommit off: its poll
// loop records what it got, commits it (CommitRecords) and only then
// allows a rebalance (BlockRebalanceOnPoll); on revocation it commits
// what is left (CommitUncommittedOffsets). It counts its rebalance
// callbacks and keeps the partitions it owns.
type franzMember struct {
	name string
	cl   *kgo.Client
	done chan struct{}

	mu                sync.Mutex
	assigned, revoked int
	owned             map[int32]bool
	commitErrs        []error
}

func startFranzMember(t testing.TB, srv *harness.Server, name, group, topic string, into *consumption, opts ...kgo.Opt) *franzMember {
	t.Helper()
	m := &franzMember{name: name, done: make(chan struct{}), owned: map[int32]bool{}}
	base := []kgo.Opt{
		kgo.ClientID(name),
		kgo.WithLogger(kgo.BasicLogger(testLogWriter{t}, kgo.LogLevelInfo, func() string { return "franz-go " + name + ": " })),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.assigned++
			for _, p := range a[topic] {
				m.owned[p] = true
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			err := cl.CommitUncommittedOffsets(ctx)
			m.mu.Lock()
			defer m.mu.Unlock()
			if err != nil {
				m.commitErrs = append(m.commitErrs, fmt.Errorf("CommitUncommittedOffsets on revoke: %w", err))
			}
			m.revoked++
			for _, p := range r[topic] {
				delete(m.owned, p)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, p := range l[topic] {
				delete(m.owned, p)
			}
		}),
	}
	m.cl = franzClient(t, srv, append(base, opts...)...)
	// The loop polls until the client is closed: franz-go's Close waits
	// for a group error to have been polled.
	ctx := context.Background()
	go func() {
		defer close(m.done)
		for {
			fs := m.cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			fs.EachError(func(tp string, p int32, err error) {
				m.mu.Lock()
				m.commitErrs = append(m.commitErrs, fmt.Errorf("fetch %s/%d: %w", tp, p, err))
				m.mu.Unlock()
			})
			if rs := fs.Records(); len(rs) > 0 {
				into.add(name, rs)
				if err := m.cl.CommitRecords(ctx, rs...); err != nil {
					m.mu.Lock()
					m.commitErrs = append(m.commitErrs, fmt.Errorf("CommitRecords: %w", err))
					m.mu.Unlock()
				}
			}
			m.cl.AllowRebalance()
		}
	}()
	t.Cleanup(m.close)
	return m
}

// close closes the client (a dynamic member leaves the group) and waits
// for the poll loop to end.
func (m *franzMember) close() {
	m.cl.Close()
	<-m.done
}

func (m *franzMember) ownedList() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p := range m.owned {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func (m *franzMember) callbacks() (assigned, revoked int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.assigned, m.revoked
}

func (m *franzMember) errs() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.commitErrs)
}

// waitOwnership waits until each member owns what the group's
// description assigns it (the members' callbacks have run).
func waitOwnership(t testing.TB, adm *kadm.Client, group, topic string, members []*franzMember, nMembers, partitions int) kadm.DescribedGroup {
	t.Helper()
	var d kadm.DescribedGroup
	harness.WaitFor(t, groupWait, func() bool {
		d = waitStable(t, adm, group, topic, nMembers, partitions)
		for _, m := range members {
			id, _ := m.cl.GroupMetadata()
			found := false
			for _, dm := range d.Members {
				if dm.MemberID == id {
					found = true
					if fmt.Sprint(assignedOf(dm, topic)) != fmt.Sprint(m.ownedList()) {
						return false
					}
				}
			}
			if !found {
				return false
			}
		}
		return true
	}, "members to own what the group assigned them")
	return d
}

// TestGroupFranzBalancers: three franz-go members of a group on a
// 6-partition topic, with each of franz-go's balancers, on the shared
// server (the default initial rebalance delay). Stable, each record is
// consumed once, by the member assigned its partition, in order; a member
// leaving and another joining loses nothing; describe, list, fetch
// offsets and delete see the group, and deleting it deletes its
// subscriptions.
func TestGroupFranzBalancers(t *testing.T) {
	srv := shared.Server(t)
	for _, b := range []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.RoundRobinBalancer(), kgo.StickyBalancer(), kgo.CooperativeStickyBalancer()} {
		t.Run(b.ProtocolName(), func(t *testing.T) {
			t.Parallel()
			const partitions = 6
			topic, group := harness.Name(t), harness.Name(t)
			adm := newAdmin(t, srv)
			createTopic(t, adm, topic, partitions)
			got := newConsumption()
			var ms []*franzMember
			for i := range 3 {
				ms = append(ms, startFranzMember(t, srv, fmt.Sprintf("m%d", i), group, topic, got, kgo.Balancers(b)))
			}
			d := waitOwnership(t, adm, group, topic, ms, 3, partitions)
			if d.Protocol != b.ProtocolName() || d.ProtocolType != "consumer" {
				t.Fatalf("group protocol %s/%s, want consumer/%s", d.ProtocolType, d.Protocol, b.ProtocolName())
			}
			for _, m := range d.Members {
				if n := len(assignedOf(m, topic)); n != 2 {
					t.Errorf("member %s assigned %d partitions, want 2: %s", m.ClientID, n, describeMembers(d, topic))
				}
			}

			// Stable: each record exactly once, each partition read by
			// its owner in offset order.
			first := produceValues(t, srv, topic, "a", 60, partitions)
			harness.WaitFor(t, groupWait, func() bool { return got.hasAll(first) }, "all 60 records consumed")
			waitCommitted(t, adm, group, topic, uniform(partitions, 10))
			got.mu.Lock()
			for _, v := range first {
				if got.count[v] != 1 {
					t.Errorf("%s consumed %d times, want once", v, got.count[v])
				}
			}
			for _, m := range ms {
				owned := m.ownedList()
				for p, offs := range got.offsets[m.name] {
					if !slices.Contains(owned, p) {
						t.Errorf("%s consumed partition %d, assigned %v", m.name, p, owned)
					}
					if want := []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(offs, want) {
						t.Errorf("%s consumed partition %d offsets %v, want %v", m.name, p, offs, want)
					}
				}
			}
			got.mu.Unlock()
			for _, m := range ms {
				if a, r := m.callbacks(); a != 1 || (r != 0 && b.ProtocolName() != "cooperative-sticky") {
					t.Errorf("%s: %d assigned and %d revoked callbacks while stable, want 1 and 0", m.name, a, r)
				}
			}
			if d := describeGroup(t, adm, group); d.State != "Stable" {
				t.Errorf("group state %s after consuming, want Stable", d.State)
			}

			// A member leaves, records arrive during the rebalance, a new
			// member joins: nothing is lost.
			ms[0].close()
			second := produceValues(t, srv, topic, "b", 60, partitions)
			ms = append(ms[1:], startFranzMember(t, srv, "m3", group, topic, got, kgo.Balancers(b)))
			harness.WaitFor(t, groupWait, func() bool { return got.hasAll(second) }, "all 60 records of the second round consumed")
			waitCommitted(t, adm, group, topic, uniform(partitions, 20))
			d = waitOwnership(t, adm, group, topic, ms, 3, partitions)
			var ids []string
			for _, m := range d.Members {
				ids = append(ids, m.ClientID)
			}
			slices.Sort(ids)
			if fmt.Sprint(ids) != "[m1 m2 m3]" {
				t.Errorf("members %v after the rebalance, want [m1 m2 m3]", ids)
			}
			for _, m := range ms {
				if errs := m.errs(); len(errs) > 0 {
					t.Errorf("%s: %v", m.name, errs)
				}
			}

			lg, err := adm.ListGroups(testCtx(t))
			if err != nil {
				t.Fatalf("ListGroups: %v", err)
			}
			if g, ok := lg[group]; !ok || g.State != "Stable" || g.ProtocolType != "consumer" {
				t.Errorf("ListGroups: %s is %+v (listed %v), want Stable consumer", group, g, ok)
			}

			// kadm returns the group's error as the call's error too.
			if resp, err := adm.DeleteGroup(testCtx(t), group); !errors.Is(resp.Err, kerr.NonEmptyGroup) || !errors.Is(err, kerr.NonEmptyGroup) {
				t.Errorf("DeleteGroup(%s) with members: %v / %v, want NON_EMPTY_GROUP", group, err, resp.Err)
			}

			// Members gone: Empty, the offsets stay, as subscriptions.
			for _, m := range ms {
				m.close()
			}
			harness.WaitFor(t, groupWait, func() bool {
				d := describeGroup(t, adm, group)
				return d.State == "Empty" && len(d.Members) == 0
			}, "the group to be empty after its members closed")
			if got := committed(t, adm, group, topic); fmt.Sprint(got) != fmt.Sprint(uniform(partitions, 20)) {
				t.Errorf("committed offsets of the empty group: %v, want 20 on each", got)
			}
			for p := range partitions {
				if subs := subscriptions(t, srv, fmt.Sprintf("%s-partition-%d", topic, p)); !slices.Contains(subs, group) {
					t.Errorf("subscriptions of partition %d: %v, want %s among them", p, subs, group)
				}
			}

			resp, err := adm.DeleteGroup(testCtx(t), group)
			if err != nil || resp.Err != nil {
				t.Fatalf("DeleteGroup(%s): %v / %v", group, err, resp.Err)
			}
			lg, err = adm.ListGroups(testCtx(t))
			if err != nil {
				t.Fatalf("ListGroups: %v", err)
			}
			if _, ok := lg[group]; ok {
				t.Errorf("ListGroups lists %s after DeleteGroup", group)
			}
			if got := committed(t, adm, group, topic); len(got) != 0 {
				t.Errorf("committed offsets after DeleteGroup: %v, want none", got)
			}
			for p := range partitions {
				if subs := subscriptions(t, srv, fmt.Sprintf("%s-partition-%d", topic, p)); slices.Contains(subs, group) {
					t.Errorf("subscriptions of partition %d after DeleteGroup: %v, still with %s", p, subs, group)
				}
			}
		})
	}
}

// consumeGroupFrom joins group with a new franz-go member, reads topic's
// partition 0 until it has the record at offset last, and returns the
// offsets it got.
func consumeGroupFrom(t testing.TB, srv *harness.Server, group, topic string, last int64) []*kgo.Record {
	t.Helper()
	cl := franzClient(t, srv, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), groupWait)
	defer cancel()
	var rs []*kgo.Record
	for len(rs) == 0 || rs[len(rs)-1].Offset < last {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("group %s consuming %s after %d records: %v", group, topic, len(rs), err)
		}
		rs = append(rs, fs.Records()...)
	}
	return rs
}

// checkContiguous checks rs are offsets from..last of vals, in order.
func checkContiguous(t testing.TB, rs []*kgo.Record, vals []string, from int64) {
	t.Helper()
	if int64(len(rs)) != int64(len(vals))-from {
		t.Errorf("got %d records, want offsets %d..%d", len(rs), from, len(vals)-1)
	}
	for i, r := range rs {
		if want := from + int64(i); r.Offset != want || (want < int64(len(vals)) && string(r.Value) != vals[want]) {
			t.Fatalf("record %d: offset %d value %q, want offset %d value %q", i, r.Offset, r.Value, want, vals[min(want, int64(len(vals)-1))])
		}
	}
}

// commitTen has a new member of group read the first 10 records of
// topic (one partition), commit offset 10 (CommitOffsetsSync) and leave;
// it returns once OffsetFetch answers 10.
func commitTen(t testing.TB, srv *harness.Server, adm *kadm.Client, group, topic string, vals []string) {
	t.Helper()
	cl := franzClient(t, srv, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	rs := consumeWith(t, cl, 10)
	if rs[0].Offset != 0 || string(rs[9].Value) != vals[9] {
		t.Fatalf("group %s got offsets %d.. values %q.., want from 0", group, rs[0].Offset, rs[0].Value)
	}
	var commitErr error
	cl.CommitOffsetsSync(testCtx(t), map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: 10}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err == nil {
				for _, rt := range resp.Topics {
					for _, rp := range rt.Partitions {
						if rp.ErrorCode != 0 {
							commitErr = fmt.Errorf("%s/%d: error code %d", rt.Topic, rp.Partition, rp.ErrorCode)
						}
					}
				}
			}
		})
	if commitErr != nil {
		t.Fatalf("CommitOffsetsSync: %v", commitErr)
	}
	cl.Close()
	waitCommitted(t, adm, group, topic, map[int32]int64{0: 10})
}

// TestGroupFranzRestart: a group's committed offset survives a clean
// stop and a crash of the server (its own, groups assigned at once), and
// a member that stays up across them keeps its membership.
//
// Two topics: one whose records are each their own batch (a Pulsar
// entry), one whose 20 records are one batch. A commit is durable at once
// as far as the entry holding it (the subscription's position); the exact
// offset inside a batch is flushed with the cursor (within a second), so
// after a crash that soon the group may resume at the batch's start:
// records again, none lost.
func TestGroupFranzRestart(t *testing.T) {
	srv := harness.Start(t, fastGroupArgs)
	for _, crash := range []bool{false, true} {
		name := "Stop"
		if crash {
			name = "Kill"
		}
		t.Run(name, func(t *testing.T) {
			adm := newAdmin(t, srv)
			single, batched, group := harness.Name(t), harness.Name(t), harness.Name(t)
			createTopic(t, adm, single, 1)
			createTopic(t, adm, batched, 1)
			var singleVals []string
			for i := range 20 {
				singleVals = append(singleVals, fmt.Sprintf("s-%03d", i))
			}
			produceOneByOne(t, srv, single, singleVals)
			batchedVals := produceValues(t, srv, batched, "b", 20, 1)
			commitTen(t, srv, adm, group, single, singleVals)
			commitTen(t, srv, adm, group, batched, batchedVals)

			// Another group's member stays up across the restart.
			liveTopic, liveGroup := harness.Name(t), harness.Name(t)
			createTopic(t, adm, liveTopic, 1)
			live := newConsumption()
			m := startFranzMember(t, srv, "live", liveGroup, liveTopic, live)
			waitOwnership(t, adm, liveGroup, liveTopic, []*franzMember{m}, 1, 1)
			before := produceValues(t, srv, liveTopic, "before", 5, 1)
			harness.WaitFor(t, groupWait, func() bool { return live.hasAll(before) }, "the live member to consume")
			waitCommitted(t, adm, liveGroup, liveTopic, map[int32]int64{0: 5})
			memberID, gen := m.cl.GroupMetadata()

			if crash {
				srv.Kill(t)
			} else {
				srv.Stop(t)
			}
			srv.Restart(t)

			lg, err := adm.ListGroups(testCtx(t))
			if err != nil {
				t.Fatalf("ListGroups after restart: %v", err)
			}
			if g, ok := lg[group]; !ok || g.State != "Empty" {
				t.Errorf("ListGroups after restart: %s is %+v (listed %v), want Empty", group, g, ok)
			}
			waitCommitted(t, adm, group, single, map[int32]int64{0: 10})
			checkContiguous(t, consumeGroupFrom(t, srv, group, single, 19), singleVals, 10)
			// An acknowledged commit survives a crash exactly, also inside a
			// batch (the broker stores it before answering).
			waitCommitted(t, adm, group, batched, map[int32]int64{0: 10})
			checkContiguous(t, consumeGroupFrom(t, srv, group, batched, 19), batchedVals, 10)

			// The live member goes on: same member id, consumes and commits.
			after := produceValues(t, srv, liveTopic, "after", 5, 1)
			harness.WaitFor(t, groupWait, func() bool { return live.hasAll(after) }, "the live member to consume after the restart")
			waitCommitted(t, adm, liveGroup, liveTopic, map[int32]int64{0: 10})
			d := waitStable(t, adm, liveGroup, liveTopic, 1, 1)
			newID, newGen := m.cl.GroupMetadata()
			t.Logf("live member: %s generation %d before the restart, %s generation %d after", memberID, gen, newID, newGen)
			if d.Members[0].MemberID != memberID || newID != memberID {
				t.Errorf("live member id %s (described %s) after the restart, want %s: the group's state was lost", newID, d.Members[0].MemberID, memberID)
			}
			live.mu.Lock()
			if offs := live.offsets["live"][0]; !slices.Equal(offs, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
				t.Errorf("live member consumed offsets %v, want 0..9 once each", offs)
			}
			live.mu.Unlock()
			// While the server was down the client could not dial it and
			// says so; anything else is a failure.
			for _, err := range m.errs() {
				if msg := err.Error(); strings.Contains(msg, "connection refused") || strings.Contains(msg, "unable to dial") {
					t.Logf("live member, during the restart: %v", err)
					continue
				}
				t.Errorf("live member: %v", err)
			}
		})
	}
}

// consumeWith polls cl until it has at least n records and returns them.
func consumeWith(t testing.TB, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), groupWait)
	defer cancel()
	var rs []*kgo.Record
	for len(rs) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("consuming after %d of %d records: %v", len(rs), n, err)
		}
		rs = append(rs, fs.Records()...)
	}
	return rs
}

// TestGroupFranzStaticMembership: a static member (kgo.InstanceID) that
// closes without leaving and comes back with the same instance id gets
// its partition back without a rebalance: the other member (the leader)
// sees no callback and keeps its generation. Kafka's coordinator skips
// the rebalance when a static member rejoins a Stable group unless the
// group's selected protocol would change; the member's protocol metadata
// may differ (a cooperative balancer's lists the partitions it owns, none
// after a restart), hence the cooperative-sticky case. (When the
// returning static member is the leader, Kafka answers JoinGroup v9 with
// skipAssignment; not tested here.)
func TestGroupFranzStaticMembership(t *testing.T) {
	srv := harness.Start(t, fastGroupArgs)
	for _, bal := range []kgo.GroupBalancer{kgo.RangeBalancer(), kgo.CooperativeStickyBalancer()} {
		t.Run(bal.ProtocolName(), func(t *testing.T) { testStaticMembership(t, srv, bal) })
	}
}

func testStaticMembership(t *testing.T, srv *harness.Server, bal kgo.GroupBalancer) {
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 2)
	got := newConsumption()
	static := func(name string) *franzMember {
		return startFranzMember(t, srv, name, group, topic, got, kgo.InstanceID(name), kgo.SessionTimeout(30*time.Second),
			kgo.Balancers(bal))
	}
	b := static("b")
	waitOwnership(t, adm, group, topic, []*franzMember{b}, 1, 2)
	a := static("a")
	d := waitOwnership(t, adm, group, topic, []*franzMember{a, b}, 2, 2)
	for _, m := range d.Members {
		if m.InstanceID == nil || *m.InstanceID != m.ClientID {
			t.Errorf("member %s (client %s): instance id %v, want %s", m.MemberID, m.ClientID, m.InstanceID, m.ClientID)
		}
	}
	aOwned := a.ownedList()
	if len(aOwned) != 1 || len(b.ownedList()) != 1 {
		t.Fatalf("a owns %v, b owns %v; want one partition each", aOwned, b.ownedList())
	}
	first := produceValues(t, srv, topic, "s", 10, 2)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(first) }, "the first records consumed")
	waitCommitted(t, adm, group, topic, uniform(2, 5))
	bID, bGen := b.cl.GroupMetadata()
	bAssigned, bRevoked := b.callbacks()

	// a closes: a static member does not leave, so the group keeps it.
	a.close()
	if d := describeGroup(t, adm, group); len(d.Members) != 2 || d.State != "Stable" {
		t.Fatalf("after the static member closed: %s with %d members, want Stable with 2", d.State, len(d.Members))
	}
	a2 := static("a")
	harness.WaitFor(t, groupWait, func() bool { return fmt.Sprint(a2.ownedList()) == fmt.Sprint(aOwned) },
		fmt.Sprintf("the restarted static member to own %v again", aOwned))
	second := produceValues(t, srv, topic, "t", 10, 2)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(second) }, "the second records consumed")
	waitCommitted(t, adm, group, topic, uniform(2, 10))

	if id, gen := b.cl.GroupMetadata(); id != bID || gen != bGen {
		t.Errorf("b is %s generation %d after a came back, was %s generation %d: a rebalance", id, gen, bID, bGen)
	}
	if as, rs := b.callbacks(); as != bAssigned || rs != bRevoked {
		t.Errorf("b had %d assigned and %d revoked callbacks after a came back, was %d and %d: a rebalance", as, rs, bAssigned, bRevoked)
	}
	d = waitStable(t, adm, group, topic, 2, 2)
	for _, m := range []*franzMember{a, a2, b} {
		if errs := m.errs(); len(errs) > 0 {
			t.Errorf("%s: %v", m.name, errs)
		}
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	for _, v := range append(first, second...) {
		if got.count[v] != 1 {
			t.Errorf("%s consumed %d times, want once", v, got.count[v])
		}
	}
}
