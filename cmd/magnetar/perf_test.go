package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestHistBuckets(t *testing.T) {
	// Buckets are contiguous and increasing, each at most 1/histSub of its
	// values wide, and histBucket agrees with their bounds.
	for i := 1; i < histBuckets; i++ {
		low, high := histBucketHigh(i-1)+1, histBucketHigh(i)
		if high < low || histBucket(low) != i || histBucket(high) != i {
			t.Fatalf("bucket %d: [%d, %d], histBucket gives %d, %d", i, low, high, histBucket(low), histBucket(high))
		}
		if width := high - low + 1; width > 1 && float64(width) > float64(low)/histSub {
			t.Fatalf("bucket %d: [%d, %d] is wider than 1/%d of its values", i, low, high, histSub)
		}
	}
	if last := histBucketHigh(histBuckets - 1); last != ^uint64(0) {
		t.Fatalf("last bucket ends at %d", last)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100_000 {
		v := rng.Uint64() >> rng.UintN(64)
		b := histBucket(v)
		if v > histBucketHigh(b) || (b > 0 && v <= histBucketHigh(b-1)) {
			t.Fatalf("%d in bucket %d, which ends at %d", v, b, histBucketHigh(b))
		}
	}
}

func TestLatencyHistQuantiles(t *testing.T) {
	var h latencyHist
	if h.Quantile(0.99) != 0 || h.Max() != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram reports samples")
	}

	// Small values are exact.
	for v := 10; v >= 1; v-- {
		h.Record(time.Duration(v))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.001, 1}, {0.1, 1}, {0.5, 5}, {0.9, 9}, {0.91, 10}, {1, 10}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("1..10: quantile %g = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Mean() != 5 || h.Max() != 10 || h.Count() != 10 {
		t.Errorf("1..10: mean %d, max %d, count %d", h.Mean(), h.Max(), h.Count())
	}

	// 1 µs … 100 ms, shuffled: quantiles within 1/histSub above the exact one.
	const n = 100_000
	vals := rand.New(rand.NewPCG(1, 2)).Perm(n)
	var big latencyHist
	for _, v := range vals {
		big.Record(time.Duration(v+1) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := time.Duration(q*n) * time.Microsecond
		got := big.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/histSub {
			t.Errorf("uniform: quantile %g = %v, want %v to +%.1f%%", q, got, exact, 100.0/histSub)
		}
	}
	if big.Max() != n*time.Microsecond {
		t.Errorf("max %v", big.Max())
	}

	// Merging equals recording everything in one.
	var a, b, all latencyHist
	for i, v := range vals[:1000] {
		d := time.Duration(v) * time.Millisecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(&b)
	a.Merge(&latencyHist{})
	if a != all {
		t.Error("merged histogram differs from one recording every sample")
	}

	var neg latencyHist
	neg.Record(-time.Second)
	if neg.Quantile(0.5) != 0 || neg.Count() != 1 {
		t.Error("negative sample not counted as 0")
	}
}

// fakeWriter completes adds in order on a goroutine of its own, like
// client.Writer. Add number stallAt is held for stall (and with it every
// later one); from add failAt on (if ≥ 0), adds fail.
type fakeWriter struct {
	stallAt int
	stall   time.Duration
	failAt  int

	mu          sync.Mutex
	n           int
	outstanding int
	maxOut      int
	queue       chan func()
}

var errFakeAdd = errors.New("fake add failed")

func newFakeWriter(t *testing.T) *fakeWriter {
	w := &fakeWriter{stallAt: -1, failAt: -1, queue: make(chan func(), 1<<16)}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case f := <-w.queue:
				f()
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop) })
	return w
}

func (w *fakeWriter) Append(payload []byte, done func(int64, error)) {
	w.mu.Lock()
	id := w.n
	w.n++
	w.outstanding++
	w.maxOut = max(w.maxOut, w.outstanding)
	w.mu.Unlock()
	w.queue <- func() {
		if id == w.stallAt {
			time.Sleep(w.stall)
		}
		w.mu.Lock()
		w.outstanding--
		w.mu.Unlock()
		if w.failAt >= 0 && id >= w.failAt {
			done(-1, errFakeAdd)
			return
		}
		done(int64(id), nil)
	}
}

// collect returns a report func that keeps the intervals.
func collect() (func(loadInterval), func() []loadInterval) {
	var mu sync.Mutex
	var ivs []loadInterval
	return func(iv loadInterval) {
			mu.Lock()
			ivs = append(ivs, iv)
			mu.Unlock()
		}, func() []loadInterval {
			mu.Lock()
			defer mu.Unlock()
			return ivs
		}
}

func TestRunLoadClosedLoop(t *testing.T) {
	w := newFakeWriter(t)
	report, intervals := collect()
	cfg := loadConfig{EntrySize: 100, Duration: 300 * time.Millisecond, InFlight: 8, Interval: 100 * time.Millisecond}
	res, err := runLoad(context.Background(), w, cfg, report)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries == 0 || res.Entries != int64(w.n) || res.Latency.Count() != uint64(res.Entries) {
		t.Fatalf("%d entries, %d sent, %d latencies", res.Entries, w.n, res.Latency.Count())
	}
	if w.maxOut > cfg.InFlight {
		t.Errorf("%d adds outstanding, the bound is %d", w.maxOut, cfg.InFlight)
	}
	var sum uint64
	ivs := intervals()
	for _, iv := range ivs {
		sum += iv.Latency.Count()
	}
	if len(ivs) < 2 || sum != uint64(res.Entries) {
		t.Errorf("%d intervals with %d entries in all, want ≥ 2 with %d", len(ivs), sum, res.Entries)
	}
	if res.Elapsed < cfg.Duration || res.Elapsed > 10*cfg.Duration {
		t.Errorf("elapsed %v for a %v run", res.Elapsed, cfg.Duration)
	}
}

// TestRunLoadOpenLoop: adds go out on schedule, and a stall counts
// against every add due during it (no coordinated omission), where a
// closed loop only sees it in the one add that was waiting.
func TestRunLoadOpenLoop(t *testing.T) {
	const stall = 200 * time.Millisecond
	w := newFakeWriter(t)
	w.stallAt, w.stall = 0, stall
	report, _ := collect()
	cfg := loadConfig{EntrySize: 10, Duration: 500 * time.Millisecond, Rate: 1000, InFlight: 1000, Interval: 100 * time.Millisecond}
	res, err := runLoad(context.Background(), w, cfg, report)
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries < 300 || res.Entries > 500 {
		t.Errorf("%d entries at 1000/s for 0.5 s", res.Entries)
	}
	// About 200 of ~500 adds were due during the stall, with latencies
	// spread from 200 ms down to 0.
	if p90 := res.Latency.Quantile(0.9); p90 < stall/4 {
		t.Errorf("open loop: p90 %v with a %v stall at the start", p90, stall)
	}

	w = newFakeWriter(t)
	w.stallAt, w.stall = 0, stall
	cfg.Rate, cfg.InFlight = 0, 1
	res, err = runLoad(context.Background(), w, cfg, report)
	if err != nil {
		t.Fatal(err)
	}
	if p90, m := res.Latency.Quantile(0.9), res.Latency.Max(); p90 > stall/4 || m < stall {
		t.Errorf("closed loop: p90 %v, max %v with a %v stall at the start", p90, m, stall)
	}
}

func TestRunLoadAddFails(t *testing.T) {
	w := newFakeWriter(t)
	w.failAt = 5
	report, _ := collect()
	res, err := runLoad(context.Background(), w, loadConfig{EntrySize: 1, Duration: time.Minute, InFlight: 3, Interval: time.Second}, report)
	if !errors.Is(err, errFakeAdd) {
		t.Fatalf("error %v, want %v", err, errFakeAdd)
	}
	if res.Entries != 5 {
		t.Errorf("%d entries before the failure, want 5", res.Entries)
	}
}

func TestRunLoadContextEnds(t *testing.T) {
	w := newFakeWriter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	report, _ := collect()
	start := time.Now()
	res, err := runLoad(ctx, w, loadConfig{EntrySize: 1, Duration: time.Minute, InFlight: 3, Interval: time.Second}, report)
	if err != nil || res.Entries == 0 || time.Since(start) > 30*time.Second {
		t.Fatalf("%d entries, %v, after %v", res.Entries, err, time.Since(start))
	}
}

func TestMeasureSyncedWrites(t *testing.T) {
	dir := t.TempDir()
	r, err := measureSyncedWrites(context.Background(), vfs.Default, dir, 64<<10, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	checkMeasured(t, r, 200*time.Millisecond, dir)
}

// checkMeasured checks a disk measurement of d in dir: writes made and
// each timed, bandwidth, at least d, and its files removed.
func checkMeasured(t *testing.T, r *syncedWrites, d time.Duration, dir string) {
	t.Helper()
	if r.Writes == 0 || r.MBps() <= 0 || r.Latency.Count() != uint64(r.Writes) || r.Elapsed < d {
		t.Fatalf("%d writes, %.1f MB/s, %d latencies in %v", r.Writes, r.MBps(), r.Latency.Count(), r.Elapsed)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %d files behind", len(left))
	}
}

// TestMeasureDirectWrites: O_DIRECT writes on a disk, and the file removed.
func TestMeasureDirectWrites(t *testing.T) {
	dir := diskDir(t)
	r, err := measureDirectWrites(context.Background(), dir, 1<<20, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("O_DIRECT writes in %s: %v", dir, err)
	}
	checkMeasured(t, r, 200*time.Millisecond, dir)
}

// TestMeasureTwiceWrites: a journal stream of synced groups with an
// entry-log stream of the same bytes beside it, both files removed; a
// directory that is not there is an error, not "O_DIRECT unsupported".
func TestMeasureTwiceWrites(t *testing.T) {
	dir := diskDir(t)
	r, err := measureTwiceWrites(context.Background(), dir, 256<<10, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("each byte twice in %s: %v", dir, err)
	}
	checkMeasured(t, r, 200*time.Millisecond, dir)
	_, err = measureTwiceWrites(context.Background(), filepath.Join(dir, "missing"), 256<<10, time.Second)
	if err == nil || errors.Is(err, errDirectUnsupported) {
		t.Errorf("in a missing directory: %v", err)
	}
}

// TestMeasureDurableAppends: every append due in the run is made durable
// and timed, in groups, and the file is removed.
func TestMeasureDurableAppends(t *testing.T) {
	dir := t.TempDir()
	r, err := measureDurableAppends(context.Background(), vfs.Default, dir, 2000, 1024, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Due every 500 µs from 0 up to 200 ms: 400.
	if r.Appends != 400 || r.Latency.Count() != 400 || r.Syncs < 1 || r.Syncs > 400 || r.Latency.Quantile(0.5) <= 0 {
		t.Fatalf("%d appends, %d latencies, %d syncs, p50 %v", r.Appends, r.Latency.Count(), r.Syncs, r.Latency.Quantile(0.5))
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %d files behind", len(left))
	}
}

// failingSyncFS fails every SyncData of files opened for writing over.
type failingSyncFS struct{ vfs.FS }

type failingSyncFile struct{ vfs.File }

func (fs failingSyncFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, cat, opts...)
	return failingSyncFile{f}, err
}

func (failingSyncFile) SyncData() error { return errors.New("injected: no space left on device") }

func TestMeasureDurableAppendsErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := measureDurableAppends(ctx, vfs.Default, t.TempDir(), 0, 1024, time.Second); err == nil {
		t.Error("rate 0 accepted")
	}
	if _, err := measureDurableAppends(ctx, vfs.Default, filepath.Join(t.TempDir(), "missing"), 1000, 1024, time.Second); err == nil {
		t.Error("a missing directory accepted")
	}
	start := time.Now()
	_, err := measureDurableAppends(ctx, failingSyncFS{vfs.Default}, t.TempDir(), 1000, 1024, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "injected") || time.Since(start) > 5*time.Second {
		t.Errorf("failing fdatasync: %v after %v, want the error at once", err, time.Since(start))
	}
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := measureDurableAppends(cctx, vfs.Default, t.TempDir(), 1000, 1024, time.Minute); err != nil || time.Since(start) > 10*time.Second {
		t.Errorf("cancelled: %v after %v", err, time.Since(start))
	}
}

func TestJournalCounter(t *testing.T) {
	var c journalCounter
	for _, n := range []int{8, 100, 1000} {
		c.onSync(time.Millisecond, 1, n)
	}
	if fsyncs, bytes := c.counts(); fsyncs != 3 || bytes != 1108 {
		t.Errorf("counted %d fsyncs, %d bytes; want 3, 1108", fsyncs, bytes)
	}
}

var (
	progressLine = regexp.MustCompile(`(?m)^ +[0-9.]+s +([0-9]+) +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$`)
	summaryLine  = regexp.MustCompile(`(?m)^summary: ([0-9]+) entries, [0-9.]+ MB in [0-9.]+s: [0-9]+ entries/s, ([0-9.]+) MB/s$`)
)

// checkPerfOutput checks a run's output: progress lines and a summary with
// adds in it, and the scratch directory removed. It returns the summary's
// entry count.
func checkPerfOutput(t *testing.T, out, dataDir string) int {
	t.Helper()
	for _, w := range []string{"magnetar perf bookie: ", "scratch directory " + dataDir, progressHeader, "latency: p50 "} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	if !progressLine.MatchString(out) {
		t.Errorf("no progress line:\n%s", out)
	}
	m := summaryLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	if mb, _ := strconv.ParseFloat(m[2], 64); n <= 0 || mb <= 0 {
		t.Errorf("summary: %d entries, %g MB/s:\n%s", n, mb, out)
	}
	if left, _ := os.ReadDir(dataDir); len(left) != 0 {
		t.Errorf("scratch directory left behind in %s", dataDir)
	}
	return n
}

// TestPerfBookie runs the command for real: bookies in-process, a ledger,
// adds, and the disk baseline.
func TestPerfBookie(t *testing.T) {
	t.Run("1 bookie in-process, no fsync, closed loop", func(t *testing.T) {
		clearEnv(t)
		dataDir := t.TempDir()
		r := run(t, "perf", "bookie", "--data-dir", dataDir, "--perf-duration", "1s", "--journal-sync=false",
			"--perf-in-process", "--perf-disk-duration", "500ms", "--log-level", "warn")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		checkPerfOutput(t, r.stdout, dataDir)
		for _, w := range []string{"1 bookie(s) over in-process calls", "journal fsync off", "closed loop", "journal: ", " fsyncs, each covering ",
			"disk: each byte twice", "disk: sequential ", "disk: 4 KiB write + fdatasync", "ratio: throughput ", "ratio: p99 "} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("output lacks %q:\n%s", w, r.stdout)
			}
		}
		// Measured where the file system takes O_DIRECT (this machine's
		// disks do), compared with raw and with the run.
		if !strings.Contains(r.stdout, "disk: each byte twice: skipped") {
			for _, w := range []string{"O_DIRECT writes + fdatasync", "ratio: each byte twice "} {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout)
				}
			}
		}
	})
	t.Run("3 durable no-op bookies 3/2/2 in-process, fsync", func(t *testing.T) {
		clearEnv(t)
		dataDir := t.TempDir()
		r := run(t, "perf", "bookie", "--data-dir", dataDir, "--perf-duration", "1s", "--perf-durable-noop=true",
			"--perf-in-process", "--perf-bookies", "3", "--perf-ensemble", "3", "--perf-write-quorum", "2",
			"--perf-ack-quorum", "2", "--perf-disk-duration", "0", "--log-level", "warn")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		checkPerfOutput(t, r.stdout, dataDir)
		for _, w := range []string{"3 durable no-op bookie(s) (checksum, write, fdatasync; nothing stored to read) over in-process calls",
			"journal fsync on", " fsyncs, each covering "} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("output lacks %q:\n%s", w, r.stdout)
			}
		}
	})
	t.Run("3 bookies 3/2/2, fsync, open loop", func(t *testing.T) {
		clearEnv(t)
		dataDir, journalDir := t.TempDir(), t.TempDir()
		r := run(t, "perf", "bookie", "--data-dir", dataDir, "--journal-dir", journalDir, "--perf-duration", "1s",
			"--perf-bookies", "3", "--perf-ensemble", "3", "--perf-write-quorum", "2", "--perf-ack-quorum", "2",
			"--perf-rate", "500", "--perf-entry-size", "16384", "--perf-disk-duration", "0", "--log-level", "warn")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		n := checkPerfOutput(t, r.stdout, dataDir)
		if n < 250 || n > 500 {
			t.Errorf("%d entries at 500/s for 1 s", n)
		}
		for _, w := range []string{"3 bookie(s) over loopback TCP, ledger E/Qw/Qa 3/2/2, 16384-byte entries, open loop at 500 entries/s",
			"journal fsync on", "journals in " + journalDir, "disk baseline: skipped"} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("output lacks %q:\n%s", w, r.stdout)
			}
		}
		if left, _ := os.ReadDir(journalDir); len(left) != 0 {
			t.Errorf("journal scratch directory left behind in %s", journalDir)
		}
	})
}

// TestPerfBookieSignal: a signal ends the run early, with a summary.
func TestPerfBookieSignal(t *testing.T) {
	clearEnv(t)
	dataDir := t.TempDir()
	var stdout, stderr syncBuffer
	a := newApp(&stdout, &stderr)
	sigs := make(chan os.Signal, 2)
	a.notify = func() (<-chan os.Signal, func()) { return sigs, func() {} }
	exit := make(chan int, 1)
	start := time.Now()
	go func() {
		exit <- execute(a, []string{"perf", "bookie", "--data-dir", dataDir, "--perf-duration", "10m",
			"--journal-sync=false", "--log-level", "warn"})
	}()
	for !progressLine.MatchString(stdout.String()) {
		select {
		case code := <-exit:
			t.Fatalf("exit %d before any progress: %s%s", code, stdout.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("no progress line after a minute:\n%s", stdout.String())
		}
	}
	sigs <- syscall.SIGINT
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d after SIGINT: %s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after SIGINT")
	}
	out := stdout.String()
	checkPerfOutput(t, out, dataDir)
	if !strings.Contains(out, "disk baseline: skipped") {
		t.Errorf("disk baseline ran after SIGINT:\n%s", out)
	}
}

func TestPerfBookieUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--perf-ensemble", "3"}, "want bookies ≥ ensemble ≥ write quorum ≥ ack quorum"},
		{[]string{"--perf-bookies", "3", "--perf-ensemble", "3", "--perf-write-quorum", "2", "--perf-ack-quorum", "3"}, "perf-ack-quorum 3"},
		{[]string{"--perf-rate", "-1"}, `invalid perf-rate "-1"`},
		{[]string{"--perf-entry-size", "0"}, `invalid perf-entry-size "0" (from flag --perf-entry-size): want a whole number from 1 to`},
		{[]string{"--perf-disk-duration", "-1s"}, `invalid perf-disk-duration "-1s"`},
		{[]string{"--perf-duration", "0s"}, `invalid perf-duration "0s"`},
		{[]string{"--perf-durable-noop", "--journal-sync=false"}, "the durable no-op bookies always fdatasync"},
		{[]string{"--perf-in-process=maybe"}, `invalid argument "maybe" for "--perf-in-process" flag: want true or false`},
	} {
		clearEnv(t)
		r := run(t, append([]string{"perf", "bookie"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
}
