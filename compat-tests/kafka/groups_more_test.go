package kafka_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

// More consumer group scenarios with the other clients, each on its own
// server whose new groups assign at once: static members of sarama and
// kcat (librdkafka) restarting without a rebalance of the others, and
// kafka-go and kafkajs groups losing nothing while members leave and join.

// saramaStaticVersion is the lowest protocol version with which sarama
// sends a group instance id (JoinGroup v5, KIP-345).
var saramaStaticVersion = sarama.V2_3_0_0

// saramaStatic is a sarama ConsumerGroup member with an instance id. Its
// handler counts sessions (Setup/Cleanup): a rebalance the member sees
// ends its session and starts another.
type saramaStatic struct {
	name  string
	topic string
	cg    sarama.ConsumerGroup
	into  *consumption

	cancel context.CancelFunc
	done   chan struct{}

	mu              sync.Mutex
	setups, cleanup int
	claims          []int32 // of the current session
	memberID        string
	errs            []error
}

func (m *saramaStatic) Setup(sess sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setups++
	m.memberID = sess.MemberID()
	m.claims = slices.Sorted(slices.Values(sess.Claims()[m.topic]))
	return nil
}

func (m *saramaStatic) Cleanup(sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cleanup++
	m.claims = nil
	return nil
}

func (m *saramaStatic) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		m.into.addOne(m.name, msg.Partition, msg.Offset, string(msg.Value))
		sess.MarkMessage(msg, "")
	}
	return nil
}

func (m *saramaStatic) sessions() (setups, cleanups int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.setups, m.cleanup
}

func (m *saramaStatic) claimed() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.claims)
}

func (m *saramaStatic) member() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.memberID
}

// startSaramaStatic starts a member with instance id name.
func startSaramaStatic(t testing.TB, srv *harness.Server, name, group, topic string, into *consumption) *saramaStatic {
	t.Helper()
	cfg := saramaConfig()
	cfg.Version = saramaStaticVersion
	cfg.ClientID = name
	cfg.Consumer.Group.InstanceId = name
	cfg.Consumer.Group.Session.Timeout = 30 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup([]string{srv.KafkaAddr()}, group, cfg)
	if err != nil {
		t.Fatalf("sarama.NewConsumerGroup(%s) as %s: %v", group, name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &saramaStatic{name: name, topic: topic, cg: cg, into: into, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, m); err != nil {
				if !errors.Is(err, sarama.ErrClosedConsumerGroup) {
					m.mu.Lock()
					m.errs = append(m.errs, fmt.Errorf("Consume: %w", err))
					m.mu.Unlock()
				}
				return
			}
		}
	}()
	go func() {
		for err := range cg.Errors() {
			m.mu.Lock()
			m.errs = append(m.errs, err)
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop ends the session (sarama commits what was marked) and closes the
// group, which for a static member sends no LeaveGroup (sarama's leave
// only forgets the member id when an instance id is set).
func (m *saramaStatic) stop(t testing.TB) {
	m.cancel()
	<-m.done
	if err := m.cg.Close(); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
		t.Errorf("%s: Close: %v", m.name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, err := range m.errs {
		t.Errorf("%s: %v", m.name, err)
	}
	m.errs = nil
}

// memberByInstance finds the described member with instance id id.
func memberByInstance(d kadm.DescribedGroup, id string) (kadm.DescribedGroupMember, bool) {
	for _, m := range d.Members {
		if m.InstanceID != nil && *m.InstanceID == id {
			return m, true
		}
	}
	return kadm.DescribedGroupMember{}, false
}

// TestGroupMoreSaramaStatic: two sarama members with instance ids
// (protocol V2_3_0_0: JoinGroup v5) on a 2-partition topic. sarama's
// Close does not leave for a static member, so each member in turn (the
// follower, then the first one to join, the leader) is closed and started
// again with its instance id, well within the 30 s session timeout: it
// gets its partition back, the other member's session goes on (no new
// Setup), and every record is consumed exactly once.
func TestGroupMoreSaramaStatic(t *testing.T) {
	srv := harness.Start(t, fastGroupArgs)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 2)
	got := newConsumption()

	members := map[string]*saramaStatic{}
	members["a"] = startSaramaStatic(t, srv, "a", group, topic, got)
	waitStable(t, adm, group, topic, 1, 2)
	members["b"] = startSaramaStatic(t, srv, "b", group, topic, got)
	waitSaramaClaims := func(t *testing.T, what string) kadm.DescribedGroup {
		t.Helper()
		var d kadm.DescribedGroup
		harness.WaitFor(t, groupWait, func() bool {
			d = waitStable(t, adm, group, topic, 2, 2)
			for _, name := range []string{"a", "b"} {
				dm, ok := memberByInstance(d, name)
				if !ok || dm.MemberID != members[name].member() ||
					fmt.Sprint(assignedOf(dm, topic)) != fmt.Sprint(members[name].claimed()) || len(members[name].claimed()) != 1 {
					return false
				}
			}
			return true
		}, what)
		return d
	}
	waitSaramaClaims(t, "a and b to hold one partition each")

	var all []string
	round := 0
	produceRound := func(t *testing.T) {
		t.Helper()
		vals := produceRange(t, srv, topic, "s", round*10, 10, 2)
		round++
		all = append(all, vals...)
		harness.WaitFor(t, groupWait, func() bool { return got.hasAll(vals) }, fmt.Sprintf("round %d's records consumed", round))
		waitCommitted(t, adm, group, topic, uniform(2, int64(round*5)))
	}
	produceRound(t)

	// a joined first, alone, so it is the group's leader; b a follower.
	parent := t
	for _, restart := range []struct{ role, name, other string }{{"Follower", "b", "a"}, {"Leader", "a", "b"}} {
		t.Run(restart.role, func(t *testing.T) {
			old, other := members[restart.name], members[restart.other]
			oldClaims, oldID := old.claimed(), old.member()
			otherID := other.member()
			otherSetups, otherCleanups := other.sessions()

			old.stop(t)
			d := describeGroup(t, adm, group)
			if dm, ok := memberByInstance(d, restart.name); d.State != "Stable" || len(d.Members) != 2 || !ok || dm.MemberID != oldID {
				t.Fatalf("after %s (static) closed: %s with members %s; want Stable, %s still in as %s",
					restart.name, d.State, describeMembers(d, topic), restart.name, oldID)
			}
			// Started on the parent: the member outlives this subtest.
			members[restart.name] = startSaramaStatic(parent, srv, restart.name, group, topic, got)
			d = waitSaramaClaims(t, fmt.Sprintf("%s back with its instance id", restart.name))
			if c := members[restart.name].claimed(); fmt.Sprint(c) != fmt.Sprint(oldClaims) {
				t.Errorf("%s restarted with partitions %v, had %v", restart.name, c, oldClaims)
			}
			if dm, _ := memberByInstance(d, restart.name); dm.MemberID == oldID {
				t.Errorf("%s restarted with the member id %s of its previous incarnation, want a new one", restart.name, oldID)
			}
			produceRound(t)
			if s, c := other.sessions(); s != otherSetups || c != otherCleanups {
				t.Errorf("%s: %d Setup and %d Cleanup calls after %s restarted, was %d and %d: it was rebalanced",
					restart.other, s, c, restart.name, otherSetups, otherCleanups)
			}
			if id := other.member(); id != otherID {
				t.Errorf("%s: member id %s after %s restarted, was %s", restart.other, id, restart.name, otherID)
			}
		})
	}

	got.mu.Lock()
	defer got.mu.Unlock()
	for _, v := range all {
		if got.count[v] != 1 {
			t.Errorf("%s consumed %d times, want once", v, got.count[v])
		}
	}
}

// lineProc is a client process whose stdout and stderr are read line by
// line as they come.
type lineProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's, once done is closed
}

// startLineProc starts cmd, passing each stdout line to onOut and logging
// each stderr line (after passing it to onErr, if set). The process is
// killed at cleanup if still running.
func startLineProc(t testing.TB, name string, cmd *exec.Cmd, onOut, onErr func(string)) *lineProc {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &lineProc{name: name, cmd: cmd, done: make(chan struct{})}
	var readers sync.WaitGroup
	scan := func(r io.Reader, each func(string)) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			each(sc.Text())
		}
	}
	readers.Add(2)
	go scan(stdout, onOut)
	go scan(stderr, func(l string) {
		if onErr != nil {
			onErr(l)
		}
		t.Logf("%s: %s", name, l)
	})
	go func() {
		readers.Wait()
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// signal sends sig and waits for the exit, returning Wait's error.
func (p *lineProc) signal(t testing.TB, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(opTimeout):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s still running %v after %v", p.name, opTimeout, sig)
	}
	return p.err
}

// kcatStatic is a kcat balanced consumer (-G) with a group instance id,
// printing records as JSON lines (-J, unbuffered) until killed. It counts
// the rebalances kcat reports on stderr ("% Group … rebalanced …").
type kcatStatic struct {
	*lineProc
	mu         sync.Mutex
	rebalances []string
}

func (k *kcatStatic) rebalanceLines() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.rebalances)
}

func startKcatStatic(t testing.TB, srv *harness.Server, instance, group, topic string, into *consumption) *kcatStatic {
	t.Helper()
	k := &kcatStatic{}
	cmd := exec.Command(kcatBin(t), "-b", srv.KafkaAddr(), "-X", "client.id="+instance,
		"-G", group, "-X", "group.instance.id="+instance,
		"-X", "session.timeout.ms=30000", "-X", "heartbeat.interval.ms=500",
		"-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100",
		"-J", "-u", topic)
	k.lineProc = startLineProc(t, "kcat "+instance, cmd, func(l string) {
		var r kcatRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Payload == nil {
			t.Errorf("kcat %s: stdout line %q: %v", instance, l, err)
			return
		}
		into.addOne(instance, r.Partition, r.Offset, *r.Payload)
	}, func(l string) {
		if strings.Contains(l, "rebalanced") {
			k.mu.Lock()
			k.rebalances = append(k.rebalances, l)
			k.mu.Unlock()
		}
	})
	return k
}

// TestGroupMoreKcatStatic: two kcat -G members with group.instance.id on
// a 2-partition topic. Each in turn (the follower, then the first to join,
// the leader) is SIGKILLed (it does not leave) and started again with its
// instance id within the 30 s session timeout, while records are
// produced: the other keeps its member id and partition and reports no
// rebalance, the restarted one gets its partition back under a new member
// id, and no record is lost (kcat commits every 100 ms, so the killed
// member may consume some again; the other's partition is consumed
// exactly once).
func TestGroupMoreKcatStatic(t *testing.T) {
	srv := harness.Start(t, fastGroupArgs)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 2)
	got := newConsumption()

	members := map[string]*kcatStatic{}
	members["a"] = startKcatStatic(t, srv, "a", group, topic, got)
	waitStable(t, adm, group, topic, 1, 2)
	members["b"] = startKcatStatic(t, srv, "b", group, topic, got)
	d := waitStable(t, adm, group, topic, 2, 2)
	for _, name := range []string{"a", "b"} {
		if m, ok := memberByInstance(d, name); !ok || len(assignedOf(m, topic)) != 1 {
			t.Fatalf("members %s, want instances a and b with one partition each", describeMembers(d, topic))
		}
	}
	first := produceValues(t, srv, topic, "k", 20, 2)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(first) }, "the first 20 records consumed")
	waitCommitted(t, adm, group, topic, uniform(2, 10))
	all := first

	// a joined first, alone, so it is the group's leader; b a follower.
	parent := t
	for _, restart := range []struct{ role, name, other string }{{"Follower", "b", "a"}, {"Leader", "a", "b"}} {
		t.Run(restart.role, func(t *testing.T) {
			d := waitStable(t, adm, group, topic, 2, 2)
			rm, _ := memberByInstance(d, restart.name)
			om, _ := memberByInstance(d, restart.other)
			other := members[restart.other]
			harness.WaitFor(t, groupWait, func() bool { return len(other.rebalanceLines()) > 0 },
				fmt.Sprintf("kcat %s to report its assignment", restart.other))
			otherRebalances := other.rebalanceLines()

			if err := members[restart.name].signal(t, syscall.SIGKILL); err == nil {
				t.Fatalf("kcat %s exited 0 after SIGKILL", restart.name)
			}
			from := len(all)
			during := produceRange(t, srv, topic, "k", from, 20, 2)
			d = describeGroup(t, adm, group)
			if dm, ok := memberByInstance(d, restart.name); d.State != "Stable" || len(d.Members) != 2 || !ok || dm.MemberID != rm.MemberID {
				t.Fatalf("after kcat %s was killed: %s with members %s; want Stable, %s still in as %s",
					restart.name, d.State, describeMembers(d, topic), restart.name, rm.MemberID)
			}
			// Started on the parent: the process outlives this subtest.
			members[restart.name] = startKcatStatic(parent, srv, restart.name, group, topic, got)
			harness.WaitFor(t, groupWait, func() bool { return got.hasAll(during) },
				fmt.Sprintf("the records produced while %s was down consumed", restart.name))
			after := produceRange(t, srv, topic, "k", from+20, 20, 2)
			harness.WaitFor(t, groupWait, func() bool { return got.hasAll(after) },
				fmt.Sprintf("the records produced after %s came back consumed", restart.name))
			all = slices.Concat(all, during, after)
			waitCommitted(t, adm, group, topic, uniform(2, int64(len(all)/2)))

			d = waitStable(t, adm, group, topic, 2, 2)
			om2, _ := memberByInstance(d, restart.other)
			rm2, _ := memberByInstance(d, restart.name)
			if om2.MemberID != om.MemberID || fmt.Sprint(assignedOf(om2, topic)) != fmt.Sprint(assignedOf(om, topic)) {
				t.Errorf("%s is %s with %v after %s's restart, was %s with %v",
					restart.other, om2.MemberID, assignedOf(om2, topic), restart.name, om.MemberID, assignedOf(om, topic))
			}
			if rm2.MemberID == rm.MemberID || fmt.Sprint(assignedOf(rm2, topic)) != fmt.Sprint(assignedOf(rm, topic)) {
				t.Errorf("%s is %s with %v after its restart, was %s with %v; want a new member id, the same partitions",
					restart.name, rm2.MemberID, assignedOf(rm2, topic), rm.MemberID, assignedOf(rm, topic))
			}
			if now := other.rebalanceLines(); !slices.Equal(now, otherRebalances) {
				t.Errorf("kcat %s reported rebalances after %s's restart: %q", restart.other, restart.name, now[min(len(otherRebalances), len(now)):])
			}

			got.mu.Lock()
			defer got.mu.Unlock()
			op := assignedOf(om, topic)[0]
			for i, v := range slices.Concat(during, after) {
				if got.count[v] == 0 {
					t.Errorf("%s never consumed", v)
				} else if int32((from+i)%2) == op && got.count[v] != 1 {
					t.Errorf("%s (partition %d, %s's) consumed %d times, want once", v, op, restart.other, got.count[v])
				}
			}
		})
	}
	if missing := got.missing(all); len(missing) > 0 {
		t.Errorf("never consumed: %v", missing)
	}
}

// kafkaGoMember is a kafka-go Reader in a group that fetches, records and
// then commits (synchronously) each message until stopped.
type kafkaGoMember struct {
	name   string
	r      *kafka.Reader
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	errs       []error
	commitErrs []error
}

func startKafkaGoMember(t testing.TB, srv *harness.Server, name, group, topic string, into *consumption) *kafkaGoMember {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           []string{srv.KafkaAddr()},
		GroupID:           group,
		Topic:             topic,
		Dialer:            &kafka.Dialer{ClientID: name, Timeout: 5 * time.Second},
		MaxWait:           500 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: 500 * time.Millisecond,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  200 * time.Millisecond,
		Logger:            kafka.LoggerFunc(func(f string, a ...any) { t.Logf("kafka-go "+name+": "+f, a...) }),
		ErrorLogger:       kafka.LoggerFunc(func(f string, a ...any) { t.Logf("kafka-go "+name+" error: "+f, a...) }),
	})
	ctx, cancel := context.WithCancel(context.Background())
	m := &kafkaGoMember{name: name, r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			msg, err := r.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					m.mu.Lock()
					m.errs = append(m.errs, fmt.Errorf("FetchMessage: %w", err))
					m.mu.Unlock()
				}
				return
			}
			into.addOne(name, int32(msg.Partition), msg.Offset, string(msg.Value))
			if err := r.CommitMessages(ctx, msg); err != nil && ctx.Err() == nil {
				m.mu.Lock()
				m.commitErrs = append(m.commitErrs, fmt.Errorf("CommitMessages %d@%d: %w", msg.Partition, msg.Offset, err))
				m.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop ends the fetch loop and closes the Reader, which leaves the group.
func (m *kafkaGoMember) stop(t testing.TB) {
	select {
	case <-m.done:
		return
	default:
	}
	m.cancel()
	<-m.done
	if err := m.r.Close(); err != nil {
		t.Errorf("kafka-go %s: Close: %v", m.name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, err := range m.errs {
		t.Errorf("kafka-go %s: %v", m.name, err)
	}
	// A commit may fail in a rebalance (the generation ended); the record
	// is then consumed again, which the loss check allows.
	for _, err := range m.commitErrs {
		t.Logf("kafka-go %s: %v", m.name, err)
	}
}

// checkNoneLost fails t for each value never consumed; it logs how many
// were consumed more than once (allowed across rebalances).
func checkNoneLost(t testing.TB, got *consumption, vals []string) {
	t.Helper()
	if missing := got.missing(vals); len(missing) > 0 {
		t.Errorf("%d of %d records never consumed: %v", len(missing), len(vals), missing)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	var again []string
	for _, v := range vals {
		if got.count[v] > 1 {
			again = append(again, fmt.Sprintf("%s×%d", v, got.count[v]))
		}
	}
	if len(again) > 0 {
		t.Logf("consumed more than once: %v", again)
	}
}

// TestGroupMoreKafkaGoRebalance: kafka-go Readers in a group on a
// 4-partition topic: two consume (each record once while stable), one
// closes (leaving) while records arrive, a third joins while more
// arrive; nothing is lost and the commits reach the end.
func TestGroupMoreKafkaGoRebalance(t *testing.T) {
	const partitions = 4
	srv := harness.Start(t, fastGroupArgs)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, partitions)
	got := newConsumption()

	r1 := startKafkaGoMember(t, srv, "r1", group, topic, got)
	startKafkaGoMember(t, srv, "r2", group, topic, got)
	d := waitStable(t, adm, group, topic, 2, partitions)
	for _, m := range d.Members {
		if n := len(assignedOf(m, topic)); n != 2 {
			t.Errorf("member %s assigned %d partitions, want 2: %s", m.ClientID, n, describeMembers(d, topic))
		}
	}
	first := produceValues(t, srv, topic, "g", 40, partitions)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(first) }, "the first 40 records consumed")
	waitCommitted(t, adm, group, topic, uniform(partitions, 10))
	got.mu.Lock()
	for _, v := range first {
		if got.count[v] != 1 {
			t.Errorf("%s consumed %d times while stable, want once", v, got.count[v])
		}
	}
	got.mu.Unlock()

	r1.stop(t)
	second := produceRange(t, srv, topic, "g", 40, 40, partitions)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(second) }, "the records produced as r1 left consumed")
	d = waitStable(t, adm, group, topic, 1, partitions)
	if d.Members[0].ClientID != "r2" {
		t.Errorf("the member left is %s, want r2", d.Members[0].ClientID)
	}

	startKafkaGoMember(t, srv, "r3", group, topic, got)
	third := produceRange(t, srv, topic, "g", 80, 40, partitions)
	d = waitStable(t, adm, group, topic, 2, partitions)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(third) }, "the records produced as r3 joined consumed")
	waitCommitted(t, adm, group, topic, uniform(partitions, 30))
	var ids []string
	for _, m := range d.Members {
		ids = append(ids, m.ClientID)
	}
	slices.Sort(ids)
	if fmt.Sprint(ids) != "[r2 r3]" {
		t.Errorf("members %v after r3 joined, want [r2 r3]", ids)
	}
	checkNoneLost(t, got, slices.Concat(first, second, third))
}

// kafkajsMember runs js/consume_group.js.
type kafkajsMember struct {
	*lineProc
	mu       sync.Mutex
	joins    [][]int32 // assignments, one per GROUP_JOIN
	left     bool
	badLines []string
}

func (k *kafkajsMember) lastAssignment() ([]int32, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.joins) == 0 {
		return nil, 0
	}
	return k.joins[len(k.joins)-1], len(k.joins)
}

func startKafkajsMember(t testing.TB, srv *harness.Server, name, group, topic string, into *consumption) *kafkajsMember {
	t.Helper()
	in, err := json.Marshal(map[string]any{"topic": topic, "groupId": group})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "consume_group.js")
	cmd.Dir = kafkajsDir(t)
	cmd.Env = append(os.Environ(), "MAGNETAR_KAFKA="+srv.KafkaAddr(), "KAFKAJS_NO_PARTITIONER_WARNING=1")
	cmd.Stdin = strings.NewReader(string(in))
	k := &kafkajsMember{}
	k.lineProc = startLineProc(t, "kafkajs "+name, cmd, func(l string) {
		var ev struct {
			Event     string  `json:"event"`
			Assigned  []int32 `json:"assigned"`
			Partition int32   `json:"partition"`
			Offset    int64   `json:"offset,string"`
			Value     *string `json:"value"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			k.mu.Lock()
			k.badLines = append(k.badLines, l)
			k.mu.Unlock()
			return
		}
		switch ev.Event {
		case "join":
			k.mu.Lock()
			k.joins = append(k.joins, ev.Assigned)
			k.mu.Unlock()
		case "message":
			if ev.Value == nil {
				t.Errorf("kafkajs %s: null value at %d@%d", name, ev.Partition, ev.Offset)
				return
			}
			into.addOne(name, ev.Partition, ev.Offset, *ev.Value)
		case "left":
			k.mu.Lock()
			k.left = true
			k.mu.Unlock()
		default:
			k.mu.Lock()
			k.badLines = append(k.badLines, l)
			k.mu.Unlock()
		}
	}, nil)
	t.Cleanup(func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if len(k.badLines) > 0 {
			t.Errorf("kafkajs %s: unexpected output lines %q", name, k.badLines)
		}
	})
	return k
}

// TestGroupMoreKafkajsLeave: two long-running kafkajs members
// (consume_group.js: each message printed, then committed) on a
// 2-partition topic; one is sent SIGTERM (it disconnects, leaving the
// group) while records arrive: the other takes both partitions and
// nothing is lost.
func TestGroupMoreKafkajsLeave(t *testing.T) {
	srv := harness.Start(t, fastGroupArgs)
	adm := newAdmin(t, srv)
	topic, group := harness.Name(t), harness.Name(t)
	createTopic(t, adm, topic, 2)
	got := newConsumption()

	j1 := startKafkajsMember(t, srv, "j1", group, topic, got)
	j2 := startKafkajsMember(t, srv, "j2", group, topic, got)
	harness.WaitFor(t, groupWait, func() bool {
		a1, _ := j1.lastAssignment()
		a2, _ := j2.lastAssignment()
		return len(a1) == 1 && len(a2) == 1
	}, "the two kafkajs members to hold one partition each")
	waitStable(t, adm, group, topic, 2, 2)
	first := produceValues(t, srv, topic, "j", 20, 2)
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(first) }, "the first 20 records consumed")
	waitCommitted(t, adm, group, topic, uniform(2, 10))
	got.mu.Lock()
	for _, v := range first {
		if got.count[v] != 1 {
			t.Errorf("%s consumed %d times while stable, want once", v, got.count[v])
		}
	}
	got.mu.Unlock()

	if err := j1.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("kafkajs j1 after SIGTERM: %v, want exit 0", err)
	}
	j1.mu.Lock()
	left := j1.left
	j1.mu.Unlock()
	if !left {
		t.Errorf("kafkajs j1 exited without reporting its disconnect")
	}
	second := produceRange(t, srv, topic, "j", 20, 20, 2)
	harness.WaitFor(t, groupWait, func() bool {
		a, _ := j2.lastAssignment()
		return fmt.Sprint(a) == "[0 1]"
	}, "j2 to be assigned both partitions")
	harness.WaitFor(t, groupWait, func() bool { return got.hasAll(second) }, "the records produced as j1 left consumed")
	waitCommitted(t, adm, group, topic, uniform(2, 20))
	d := waitStable(t, adm, group, topic, 1, 2)
	if _, joins := j2.lastAssignment(); len(d.Members) != 1 || joins < 2 {
		t.Errorf("group %s, j2 joined %d times; want j2 alone after a rebalance", describeMembers(d, topic), joins)
	}
	checkNoneLost(t, got, slices.Concat(first, second))
}
