package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
)

// resolveWith resolves list's settings from command-line args (and the
// environment) the way the command does.
func resolveWith[T any](t *testing.T, list []setting, resolve func(*settingValues) (T, error), args ...string) (T, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	defineFlags(fs, list)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	sv, err := loadSettings(fs, list)
	if err != nil {
		t.Fatal(err)
	}
	return resolve(sv)
}

func TestResolvePerfProduce(t *testing.T) {
	clearEnv(t)
	cfg, err := resolveWith(t, perfProduceSettings, resolvePerfProduce)
	if err != nil {
		t.Fatal(err)
	}
	want := perfProduceConfig{
		perfPulsarConfig: perfPulsarConfig{
			ServiceURL: "pulsar://127.0.0.1:6650",
			Topics:     []string{"persistent://public/default/perf"},
			Duration:   10 * time.Second,
			Warmup:     time.Second,
		},
		MaxPending: 1000, MessageSize: 1024, Producers: 1, Batching: true,
		BatchMaxMessages: 1000, BatchMaxSize: 4 << 20, BatchMaxDelay: time.Millisecond, Compression: "none",
	}
	if !equalProduceConfig(cfg, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", cfg, want)
	}

	t.Setenv("MAGNETAR_PERF_RATE", "20000")
	cfg, err = resolveWith(t, perfProduceSettings, resolvePerfProduce,
		"--perf-service-url", "pulsar://broker:6651", "--perf-topic", "t1/ns1/load", "--perf-topics", "3",
		"--perf-partitions", "4", "--perf-duration", "0", "--perf-warmup", "0", "--perf-compression", "ZSTD",
		"--perf-batching=false", "--perf-max-pending", "5000", "--perf-message-size", "100", "--perf-producers", "2",
		"--perf-batch-max-size", "65536")
	if err != nil {
		t.Fatal(err)
	}
	want = perfProduceConfig{
		perfPulsarConfig: perfPulsarConfig{
			ServiceURL: "pulsar://broker:6651",
			Topics:     []string{"persistent://t1/ns1/load-0", "persistent://t1/ns1/load-1", "persistent://t1/ns1/load-2"},
			Partitions: 4,
		},
		Rate: 20000, MaxPending: 5000, MessageSize: 100, Producers: 2, Batching: false,
		BatchMaxMessages: 1000, BatchMaxSize: 65536, BatchMaxDelay: time.Millisecond, Compression: "zstd",
	}
	if !equalProduceConfig(cfg, want) {
		t.Errorf("flags:\n got %+v\nwant %+v", cfg, want)
	}
}

func equalProduceConfig(a, b perfProduceConfig) bool { return reflect.DeepEqual(a, b) }

func TestResolvePerfConsume(t *testing.T) {
	clearEnv(t)
	cfg, err := resolveWith(t, perfConsumeSettings, resolvePerfConsume)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Subscription != "perf" || cfg.Type != "exclusive" || cfg.Position != "latest" || cfg.Consumers != 1 || cfg.AckEvery != 1 ||
		!slices.Equal(cfg.Topics, []string{"persistent://public/default/perf"}) || cfg.Duration != 10*time.Second || cfg.Warmup != time.Second {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = resolveWith(t, perfConsumeSettings, resolvePerfConsume,
		"--perf-subscription", "s1", "--perf-subscription-type", "Key_Shared", "--perf-subscription-position", "earliest",
		"--perf-consumers", "3")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Subscription != "s1" || cfg.Type != "key_shared" || cfg.Position != "earliest" || cfg.Consumers != 3 {
		t.Errorf("flags: %+v", cfg)
	}
	if subscriptionTypes[cfg.Type] != pulsar.KeyShared || subscriptionPositions[cfg.Position] != pulsar.SubscriptionPositionEarliest {
		t.Errorf("type %q, position %q map to %v, %v", cfg.Type, cfg.Position, subscriptionTypes[cfg.Type], subscriptionPositions[cfg.Position])
	}
}

// TestPerfPulsarUsageErrors: each mistake exits 2, before any connection,
// with a message naming the setting, the value and what is wanted.
func TestPerfPulsarUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"produce", "--perf-compression", "brotli"}, nil,
			`invalid perf-compression "brotli" (from flag --perf-compression): want one of lz4, none, zlib, zstd`},
		{[]string{"produce", "--perf-rate", "-1"}, nil, `invalid perf-rate "-1" (from flag --perf-rate): want messages per second`},
		{[]string{"produce"}, map[string]string{"MAGNETAR_PERF_RATE": "fast"}, `invalid perf-rate "fast" (from environment MAGNETAR_PERF_RATE)`},
		{[]string{"produce", "--perf-message-size", "0"}, nil, `invalid perf-message-size "0" (from flag --perf-message-size): want a whole number from 1 to 5242880`},
		{[]string{"produce", "--perf-max-pending", "0"}, nil, `invalid perf-max-pending "0"`},
		{[]string{"produce", "--perf-producers", "x"}, nil, `invalid perf-producers "x"`},
		{[]string{"produce"}, map[string]string{"MAGNETAR_PERF_BATCHING": "maybe"}, `invalid perf-batching "maybe" (from environment MAGNETAR_PERF_BATCHING): want true or false`},
		{[]string{"produce", "--perf-batch-max-delay", "0"}, nil, `invalid perf-batch-max-delay "0" (from flag --perf-batch-max-delay): must be positive`},
		{[]string{"produce", "--perf-batch-max-messages", "0"}, nil, `invalid perf-batch-max-messages "0"`},
		{[]string{"produce", "--perf-batch-max-size", "0"}, nil, `invalid perf-batch-max-size "0"`},
		{[]string{"produce", "--perf-batch-max-size", "5242881"}, nil, `invalid perf-batch-max-size "5242881"`},
		{[]string{"produce", "--perf-service-url", "http://127.0.0.1:8080"}, nil, `invalid perf-service-url "http://127.0.0.1:8080" (from flag --perf-service-url): want pulsar://host:port`},
		{[]string{"produce", "--perf-service-url", "pulsar://"}, nil, `invalid perf-service-url "pulsar://"`},
		{[]string{"produce", "--perf-topic", "a/b"}, nil, `invalid perf-topic "a/b" (from flag --perf-topic): invalid topic name`},
		{[]string{"produce", "--perf-topic", "non-persistent://public/default/t"}, nil, "non-persistent topics are not supported"},
		{[]string{"produce", "--perf-topic", "t-partition-2"}, nil, `invalid perf-topic "t-partition-2" (from flag --perf-topic): want a topic, not one partition of it`},
		{[]string{"produce", "--perf-topics", "0"}, nil, `invalid perf-topics "0"`},
		{[]string{"produce", "--perf-partitions", "-1"}, nil, `invalid perf-partitions "-1" (from flag --perf-partitions): want a whole number from 0 to`},
		{[]string{"produce", "--perf-duration", "-1s"}, nil, `invalid perf-duration "-1s"`},
		{[]string{"produce", "--perf-warmup", "10s"}, nil, "perf-warmup 10s, perf-duration 10s: the warm-up must be shorter than the run"},
		{[]string{"consume", "--perf-subscription-type", "round_robin"}, nil,
			`invalid perf-subscription-type "round_robin" (from flag --perf-subscription-type): want one of exclusive, failover, key_shared, shared`},
		{[]string{"consume", "--perf-subscription-position", "middle"}, nil, `want one of earliest, latest`},
		{[]string{"consume", "--perf-subscription", ""}, nil, `invalid perf-subscription ""`},
		{[]string{"consume", "--perf-consumers", "2"}, nil, "perf-consumers 2: an exclusive subscription admits one consumer per topic"},
		{[]string{"consume", "--perf-subscription-type", "shared", "--perf-ack-every", "10"}, nil,
			"perf-ack-every 10: cumulative acknowledgement is not allowed on shared subscriptions"},
		{[]string{"consume", "--perf-compression", "lz4"}, nil, "unknown flag: --perf-compression"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := run(t, append([]string{"perf"}, tc.args...)...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, exitUsage, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q: the run started", r.stdout)
			}
		})
	}
}

// TestPulsarMeter: the summary counts what completed from the end of the
// warm-up on, over the time from then to the last completion; intervals
// count everything.
func TestPulsarMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := newPulsarMeter(t0, time.Second)
	m.done(t0.Add(500*time.Millisecond), 7*time.Millisecond, 100)
	m.fail(errFakeAdd)
	iv := m.interval(t0.Add(time.Second), t0)
	if iv.Messages != 1 || iv.Bytes != 100 || iv.Failures != 1 || iv.Total != 1 || iv.Failed != 1 ||
		iv.Latency.Max() != 7*time.Millisecond || iv.At != time.Second || iv.Length != time.Second {
		t.Errorf("first interval %+v", iv)
	}
	m.done(t0.Add(time.Second), 2*time.Millisecond, 100)
	m.done(t0.Add(1500*time.Millisecond), 3*time.Millisecond, 100)
	m.fail(errors.New("second"))
	iv = m.interval(t0.Add(2*time.Second), t0.Add(time.Second))
	if iv.Messages != 2 || iv.Failures != 1 || iv.Total != 3 || iv.Failed != 2 {
		t.Errorf("second interval %+v", iv)
	}
	res := m.result()
	if res.Total != 3 || res.Failed != 2 || !errors.Is(res.FirstErr, errFakeAdd) {
		t.Errorf("totals %d, failed %d, first %v", res.Total, res.Failed, res.FirstErr)
	}
	if res.Messages != 2 || res.Bytes != 200 || res.Elapsed != 500*time.Millisecond || res.Latency.Max() != 3*time.Millisecond {
		t.Errorf("after the warm-up: %d messages, %d bytes in %v, max %v", res.Messages, res.Bytes, res.Elapsed, res.Latency.Max())
	}
}

// fakeSender is a producer over a fakeWriter: sends complete in order, on
// the writer's goroutine.
type fakeSender struct{ w *fakeWriter }

func (f fakeSender) send(s *sendSlot) {
	f.w.Append(s.payload, func(_ int64, err error) { s.finish(err) })
}

func collectPulsar() (func(pulsarInterval), func() []pulsarInterval) {
	ch := make(chan pulsarInterval, 1000)
	return func(iv pulsarInterval) { ch <- iv }, func() []pulsarInterval {
		var ivs []pulsarInterval
		for {
			select {
			case iv := <-ch:
				ivs = append(ivs, iv)
			default:
				return ivs
			}
		}
	}
}

// TestRunProduceFailuresGoOn: failed sends are counted, the first kept,
// and the run goes on to its end within the pending bound.
func TestRunProduceFailuresGoOn(t *testing.T) {
	w := newFakeWriter(t)
	w.failAt = 50
	report, intervals := collectPulsar()
	cfg := produceLoad{MessageSize: 10, Duration: 300 * time.Millisecond, MaxPending: 8, Interval: 100 * time.Millisecond}
	res := runProduce(context.Background(), []asyncSender{fakeSender{w}}, cfg, report)
	if res.Total != 50 || res.Failed == 0 || res.Total+res.Failed != int64(w.n) || res.Sent != int64(w.n) || !errors.Is(res.FirstErr, errFakeAdd) {
		t.Fatalf("%d acknowledged, %d failed (%v) of %d sent; want 50 and the rest", res.Total, res.Failed, res.FirstErr, w.n)
	}
	if w.maxOut > cfg.MaxPending {
		t.Errorf("%d sends outstanding, the bound is %d", w.maxOut, cfg.MaxPending)
	}
	ivs := intervals()
	if len(ivs) < 2 || ivs[len(ivs)-1].Failed != res.Failed || ivs[len(ivs)-1].Total != res.Total {
		t.Errorf("intervals %+v; want ≥ 2, the last with the totals", ivs)
	}
}

// TestRunProduceOpenLoop: messages go out on schedule round robin, and a
// stall counts against every message due during it.
func TestRunProduceOpenLoop(t *testing.T) {
	const stall = 200 * time.Millisecond
	w1, w2 := newFakeWriter(t), newFakeWriter(t)
	w1.stallAt, w1.stall = 0, stall
	report, _ := collectPulsar()
	cfg := produceLoad{MessageSize: 10, Duration: 500 * time.Millisecond, Rate: 1000, MaxPending: 1000, Interval: 100 * time.Millisecond}
	res := runProduce(context.Background(), []asyncSender{fakeSender{w1}, fakeSender{w2}}, cfg, report)
	if res.Total < 300 || res.Total > 500 || res.Failed != 0 {
		t.Errorf("%d acknowledged, %d failed at 1000/s for 0.5 s", res.Total, res.Failed)
	}
	if d := w1.n - w2.n; d < 0 || d > 1 {
		t.Errorf("round robin sent %d and %d", w1.n, w2.n)
	}
	// About 100 of ~500 messages (those of the stalled sender) were due
	// during the stall, with latencies from 200 ms down to 0.
	if p90 := res.Latency.Quantile(0.9); p90 < stall/4 {
		t.Errorf("open loop: p90 %v with a %v stall at the start", p90, stall)
	}
}

// heldSender holds sends until max of them are out, waits a little (the
// load's loop is asleep by then), then finishes those it holds one at a
// time. resumed has, for each send that came after max were out, how
// many still were.
type heldSender struct {
	max     int
	mu      sync.Mutex
	out     int         // sent, not finished
	held    []*sendSlot // sent since the last release
	full    bool
	resumed []int
}

func (h *heldSender) send(s *sendSlot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.full {
		h.resumed, h.full = append(h.resumed, h.out), false
	}
	h.out++
	if h.held = append(h.held, s); h.out < h.max {
		return
	}
	h.full = true
	h.releaseLocked(20 * time.Millisecond)
}

// releaseLocked finishes what is held, one at a time, after wait.
func (h *heldSender) releaseLocked(wait time.Duration) {
	batch := h.held
	h.held = nil
	go func() {
		time.Sleep(wait)
		for _, s := range batch {
			h.mu.Lock()
			h.out--
			h.mu.Unlock()
			s.finish(nil)
			time.Sleep(200 * time.Microsecond)
		}
	}()
}

// releaseAll finishes whatever is still held: the sends of a load that
// ended before they added up to max.
func (h *heldSender) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked(0)
}

// TestRunProduceWakesPerBatch: a closed loop with every slot in flight
// sends again only once closedLoopBatch of them are back (waking per
// acknowledgement cost a context switch per record); an open loop sends a
// due message as soon as one slot is.
func TestRunProduceWakesPerBatch(t *testing.T) {
	for n, want := range map[int]int{10_000: slotBatch, 100: 25, 3: 1} {
		if got := closedLoopBatch(n); got != want {
			t.Errorf("a closed loop of %d slots waits for %d, want %d", n, got, want)
		}
	}
	const pending = 100
	batch := closedLoopBatch(pending) // 25: a quarter of the slots
	for _, tc := range []struct {
		name string
		rate float64
		want func(out int) bool
		says string
	}{
		{"closed loop", 0, func(out int) bool { return out <= pending-batch }, fmt.Sprintf("≤ %d", pending-batch)},
		// One slot back is enough; a loop slow to wake (a busy CI
		// machine's scheduler) may see more come back, but never waits
		// for a closed loop's batch.
		{"open loop", 1e6, func(out int) bool { return out > pending-batch }, fmt.Sprintf("> %d", pending-batch)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &heldSender{max: pending}
			report, _ := collectPulsar()
			cfg := produceLoad{MessageSize: 10, Duration: 300 * time.Millisecond, Rate: tc.rate, MaxPending: pending, Interval: time.Second}
			// A load that ends part-way through a batch leaves sends
			// held; its last wait is for them.
			release := time.AfterFunc(cfg.Duration+50*time.Millisecond, h.releaseAll)
			defer release.Stop()
			res := runProduce(context.Background(), []asyncSender{h}, cfg, report)
			if res.Failed != 0 || res.Total != res.Sent || res.Sent < 2*pending {
				t.Fatalf("%d sent, %d acknowledged, %d failed", res.Sent, res.Total, res.Failed)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.resumed) == 0 {
				t.Fatal("the loop never had every slot out")
			}
			for i, out := range h.resumed {
				if !tc.want(out) {
					t.Fatalf("the loop went on with %d sends out after all %d were (the %dth of %d times); want %s", out, pending, i+1, len(h.resumed), tc.says)
				}
			}
		})
	}
}

// TestSlotPoolGivesSlotsInOrder: the loop takes free slots in the array's
// order, whatever order they finished in (a Kafka client gives records
// back a partition's batch at a time), and a set it has emptied takes
// slots again.
func TestSlotPoolGivesSlotsInOrder(t *testing.T) {
	const n = 200
	m := newPulsarMeter(time.Now(), 0)
	p := &slotPool{m: m, free: newSlotSet(n), wake: make(chan struct{}, 1)}
	slots := make([]sendSlot, n)
	for i := range slots {
		slots[i] = sendSlot{payload: make([]byte, 10), due: time.Now(), pool: p, index: i}
	}
	finish := func(i int) { slots[i].finish(nil) }
	for part := range 4 {
		for i := part; i < n; i += 4 {
			finish(i)
		}
	}
	pops := func(set *slotSet) []int {
		var got []int
		for i, ok := set.pop(); ok; i, ok = set.pop() {
			got = append(got, i)
		}
		return got
	}
	set := p.swap(newSlotSet(n))
	if set.n != n {
		t.Fatalf("%d free after %d finished", set.n, n)
	}
	got := pops(&set)
	for i, idx := range got {
		if idx != i {
			t.Fatalf("taken in the order %v, want 0 to %d", got, n-1)
		}
	}
	if len(got) != n {
		t.Fatalf("%d taken of %d free", len(got), n)
	}
	if set.n != 0 {
		t.Fatalf("%d left in an emptied set", set.n)
	}
	// The emptied set goes to the pool at the next swap, and comes back
	// at the one after, from its start again.
	for round, idx := range [][]int{{3, 130}, {7, 64}, {0, 199}} {
		finish(idx[1])
		finish(idx[0])
		set = p.swap(set)
		if got := pops(&set); !slices.Equal(got, idx) {
			t.Fatalf("swap %d after the first gave %v; want %v", round+1, got, idx)
		}
	}
	if res := m.result(); res.Total != n+6 || res.Bytes != 10*(n+6) {
		t.Errorf("the meter counted %d messages, %d bytes; want %d, %d", res.Total, res.Bytes, n+6, 10*(n+6))
	}
}

// TestKafkaSlotTimesFromDue: the Kafka promise times a message from its
// due time, not from its record's timestamp, which franz-go truncates to
// the millisecond before sending.
func TestKafkaSlotTimesFromDue(t *testing.T) {
	m := newPulsarMeter(time.Now().Add(-time.Minute), 0)
	p := &slotPool{m: m, free: newSlotSet(1), wake: make(chan struct{}, 1)}
	s := &sendSlot{pool: p, due: time.Now()}
	var ks kafkaSlot
	ks.init(s)
	s.payload = []byte("0123456789")
	ks.rec.Value, ks.rec.Timestamp = s.payload, s.due.Add(-time.Hour)
	ks.promise(&ks.rec, nil)
	res := m.result()
	if res.Total != 1 || res.Bytes != 10 {
		t.Fatalf("the meter counted %d messages, %d bytes; want 1, 10", res.Total, res.Bytes)
	}
	if lat := res.Latency.Max(); lat > time.Minute {
		t.Errorf("latency %v: taken from the record's timestamp, not the due time", lat)
	}
	if set := p.swap(newSlotSet(1)); set.n != 1 {
		t.Errorf("%d slots given back, want 1", set.n)
	}
}

// TestRunProduceWarmup: the summary leaves out what completed during the
// warm-up.
func TestRunProduceWarmup(t *testing.T) {
	w := newFakeWriter(t)
	report, _ := collectPulsar()
	cfg := produceLoad{MessageSize: 10, Duration: 600 * time.Millisecond, Warmup: 300 * time.Millisecond, Rate: 1000, MaxPending: 1000, Interval: time.Second}
	res := runProduce(context.Background(), []asyncSender{fakeSender{w}}, cfg, report)
	if f := float64(res.Messages) / float64(res.Total); res.Total < 400 || f < 0.3 || f > 0.7 {
		t.Errorf("%d of %d messages after a warm-up of half the run", res.Messages, res.Total)
	}
	if res.Elapsed <= 0 || res.Elapsed > cfg.Duration {
		t.Errorf("elapsed %v after the warm-up of a %v run", res.Elapsed, cfg.Duration)
	}
}

// perfProc is a magnetar process whose stdout and stderr are kept.
type perfProc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	exited         chan struct{}
	err            error
}

func startPerfProc(t *testing.T, args ...string) *perfProc {
	t.Helper()
	p := &perfProc{t: t, exited: make(chan struct{})}
	p.cmd = exec.Command(magnetarBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("magnetar %s stdout:\n%s\nstderr:\n%s", strings.Join(args[:2], " "), p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *perfProc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("still running %v later", timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("wait: %v", p.err)
	}
	return 0
}

var (
	pulsarProgressLine = regexp.MustCompile(`(?m)^ +[0-9.]+s +([0-9]+) +[0-9]+ +[0-9.]+ +([0-9.]+) +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9]+)$`)
	pulsarSummaryLine  = regexp.MustCompile(`(?m)^summary: ([0-9]+) messages, [0-9.]+ MB in [0-9.]+s: [0-9]+ msg/s, [0-9.]+ MB/s \(after the 0s warm-up\)$`)
	pulsarLatencyLine  = regexp.MustCompile(`(?m)^latency: p50 ([0-9.]+) ms, p99 [0-9.]+ ms, p99.9 [0-9.]+ ms, max [0-9.]+ ms, mean [0-9.]+ ms$`)
	pulsarSentLine     = regexp.MustCompile(`(?m)^sent: ([0-9]+) messages, ([0-9]+) acknowledged, ([0-9]+) failed$`)
	pulsarReceivedLine = regexp.MustCompile(`(?m)^received: ([0-9]+) messages, ([0-9]+) acknowledgements failed$`)
)

// lastTotal is the total of the last progress line in out, -1 if none.
func lastTotal(out string) int {
	m := pulsarProgressLine.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// checkPulsarRun checks a finished run's output: progress lines with
// messages and latencies in them, a summary and a latency line. It returns
// the summary's message count.
func checkPulsarRun(t *testing.T, what, out string) int {
	t.Helper()
	busy := 0
	for _, m := range pulsarProgressLine.FindAllStringSubmatch(out, -1) {
		if p50, _ := strconv.ParseFloat(m[2], 64); p50 > 0 {
			busy++
		}
		if m[3] != "0" {
			t.Errorf("%s: progress line with errors: %q", what, m[0])
		}
	}
	if busy == 0 {
		t.Errorf("%s: no progress line with a latency:\n%s", what, out)
	}
	s := pulsarSummaryLine.FindStringSubmatch(out)
	if s == nil {
		t.Fatalf("%s: no summary line:\n%s", what, out)
	}
	if l := pulsarLatencyLine.FindStringSubmatch(out); l == nil || l[1] == "0.000" {
		t.Errorf("%s: no latency summary:\n%s", what, out)
	}
	n, _ := strconv.Atoi(s[1])
	return n
}

// TestPerfProduceConsume runs the binary three times over: a standalone
// broker, a consumer, and a producer at 500 msg/s for 2 s; the consumer
// must receive what the producer had acknowledged, and both must report
// about 1000 messages, latencies, and no errors.
func TestPerfProduceConsume(t *testing.T) {
	_, ready := startStandaloneProc(t)
	url := "pulsar://" + ready.PulsarAdvertised
	common := []string{"--perf-service-url", url, "--perf-topic", "perf-e2e", "--perf-warmup", "0", "--log-level", "warn"}

	cons := startPerfProc(t, append([]string{"perf", "consume", "--perf-duration", "0", "--perf-subscription-position", "earliest"}, common...)...)
	eventually(t, time.Minute, func() error {
		select {
		case <-cons.exited:
			t.Fatalf("consumer exited: %v", cons.err)
		default:
		}
		if !strings.Contains(cons.stdout.String(), "subscribed: 1 consumer(s)\n") {
			return errors.New("consumer not subscribed")
		}
		return nil
	})

	prod := startPerfProc(t, append([]string{"perf", "produce", "--perf-rate", "500", "--perf-duration", "2s"}, common...)...)
	if code := prod.wait(2 * time.Minute); code != 0 {
		t.Fatalf("producer exit %d", code)
	}
	out := prod.stdout.String()
	for _, w := range []string{"open loop at 500 msg/s", "topic persistent://public/default/perf-e2e: non-partitioned", pulsarProgressHeader, "send lag: p50 "} {
		if !strings.Contains(out, w) {
			t.Errorf("producer output lacks %q", w)
		}
	}
	produced := checkPulsarRun(t, "producer", out)
	sent := pulsarSentLine.FindStringSubmatch(out)
	if sent == nil || sent[3] != "0" || sent[1] != sent[2] {
		t.Fatalf("producer: no sent line, or not all sends acknowledged: %v", sent)
	}
	acked, _ := strconv.Atoi(sent[2])
	if produced < 800 || produced > 1200 || acked != produced {
		t.Errorf("producer: summary %d, acknowledged %d; want about 1000 at 500 msg/s for 2 s", produced, acked)
	}

	eventually(t, time.Minute, func() error {
		if n := lastTotal(cons.stdout.String()); n < acked {
			return fmt.Errorf("consumer has reported %d of %d messages", n, acked)
		}
		return nil
	})
	cons.cmd.Process.Signal(syscall.SIGINT)
	if code := cons.wait(time.Minute); code != 0 {
		t.Fatalf("consumer exit %d after SIGINT", code)
	}
	out = cons.stdout.String()
	consumed := checkPulsarRun(t, "consumer", out)
	rcv := pulsarReceivedLine.FindStringSubmatch(out)
	if rcv == nil || rcv[2] != "0" {
		t.Fatalf("consumer: no received line, or failures: %v", rcv)
	}
	if consumed < acked || consumed > 1200 {
		t.Errorf("consumer: summary %d messages; the producer had %d acknowledged", consumed, acked)
	}

	t.Run("partitions", func(t *testing.T) {
		// The last --perf-topic wins.
		p := startPerfProc(t, append(append([]string{"perf", "produce"}, common...), "--perf-partitions", "2", "--perf-topic", "perf-e2e-p")...)
		if code := p.wait(time.Minute); code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		want := "topic persistent://public/default/perf-e2e-p is not partitioned, want perf-partitions 2: perf cannot create partitioned topics"
		if !strings.Contains(p.stderr.String(), want) || !strings.Contains(p.stderr.String(), "--auto-topic-creation partitioned --auto-topic-partitions 2") ||
			!strings.Contains(p.stderr.String(), "magnetar admin topics create-partitioned persistent://public/default/perf-e2e-p -p 2") {
			t.Errorf("stderr lacks %q", want)
		}
	})
}

// TestPulsarClientLogging: the client's records reach the app's logger at
// warn level and above, both through the client's logger and through
// logrus's standard logger, which parts of the client use directly.
func TestPulsarClientLogging(t *testing.T) {
	var buf syncBuffer
	a := newApp(&buf, &buf)
	a.logger = newLogger(&buf, slog.LevelDebug, "text")
	c, err := a.newPulsarClient("pulsar://127.0.0.1:1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	log := slog.New(minLevelHandler{Handler: a.logger.Handler(), min: slog.LevelWarn})
	log.Info("info-dropped")
	log.With("k", "v").Warn("warn-kept")
	logrus.Info("logrus-info-dropped")
	logrus.WithField("f", 1).Error("logrus-error-kept")
	out := buf.String()
	for _, w := range []string{"level=WARN msg=warn-kept k=v", "level=ERROR msg=logrus-error-kept component=pulsar-client f=1"} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "dropped") {
		t.Errorf("info records logged:\n%s", out)
	}
}
