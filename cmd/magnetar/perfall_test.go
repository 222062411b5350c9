package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/storage"
)

// diskDir is a new directory under the package's, in the checkout, for
// what must run on a disk (O_DIRECT): the system temp directory may be
// tmpfs, which refuses O_DIRECT.
func diskDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(".", ".disk-test-")
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(abs) })
	return abs
}

// runPerfAllBinary runs the real binary's `perf all` with tiny loads and
// returns its exit code, stdout and stderr.
func runPerfAllBinary(t *testing.T, extra ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append([]string{"perf", "all", "--data-dir", diskDir(t),
		"--perf-duration", "300ms", "--perf-warmup", "50ms", "--perf-limits-duration", "100ms",
		"--perf-all-topics", "10", "--perf-all-topics-rate", "500", "--perf-all-partitions", "30", "--perf-all-rounds", "2", "--perf-all-settle", "10ms", "--log-level", "warn"}, extra...)
	cmd := exec.CommandContext(ctx, magnetarBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("perf all did not finish in time\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// perfAllMeasures are the first cells of the results table's rows.
func perfAllMeasures(topics, partitions, rounds int) []string {
	m := []string{
		"limit: disk, 64 KiB writes + fdatasync, MB/s", "limit: disk, 1 MiB writes + fdatasync, MB/s",
		"limit: disk, 1 MiB O_DIRECT writes + fdatasync, MB/s",
		"limit: disk, each byte twice as a bookie writes it (1 MiB journal writes + fdatasync, the same bytes to an entry log beside them, O_DIRECT), MB/s of payload",
		"limit: fsync latency (64 KiB), p50 ms", "limit: fsync latency (64 KiB), p99 ms",
		"limit: durable 1024-byte appends at 5,000/s (group commit + fdatasync), p50 ms",
		"limit: durable 1024-byte appends at 5,000/s (group commit + fdatasync), p99 ms",
		"limit: durable 1024-byte appends at 20,000/s (group commit + fdatasync), p50 ms",
		"limit: durable 1024-byte appends at 20,000/s (group commit + fdatasync), p99 ms",
		"limit: Pulsar publish at 5,000/s to a no-op broker (the client alone), p50 ms",
		"limit: Pulsar publish at 5,000/s to a no-op broker (the client alone), p99 ms",
		"limit: Pulsar publish at 20,000/s to a no-op broker (the client alone), p50 ms",
		"limit: Pulsar publish at 20,000/s to a no-op broker (the client alone), p99 ms",
		"limit: Pulsar publish at 5,000/s to a durable no-op broker (group commit + fdatasync), p50 ms",
		"limit: Pulsar publish at 5,000/s to a durable no-op broker (group commit + fdatasync), p99 ms",
		"limit: Pulsar publish at 20,000/s to a durable no-op broker (group commit + fdatasync), p50 ms",
		"limit: Pulsar publish at 20,000/s to a durable no-op broker (group commit + fdatasync), p99 ms",
		"limit: Kafka publish at 5,000/s to a durable no-op broker (group commit + fdatasync), p50 ms",
		"limit: Kafka publish at 5,000/s to a durable no-op broker (group commit + fdatasync), p99 ms",
		"limit: Kafka publish at 20,000/s to a durable no-op broker (group commit + fdatasync), p50 ms",
		"limit: Kafka publish at 20,000/s to a durable no-op broker (group commit + fdatasync), p99 ms",
		"limit: Kafka produce, 4 partitions, to a durable no-op broker (group commit + fdatasync), MB/s",
		"limit: Kafka produce, 1 partition, to a durable no-op broker (group commit + fdatasync), MB/s",
		"limit: Pulsar produce, batching, to a durable no-op broker (group commit + fdatasync), MB/s",
		"limit: Kafka produce, 4 partitions, to a durable no-op broker writing each byte twice (journal, then entry log), MB/s",
		"limit: Kafka produce, 1 partition, to a durable no-op broker writing each byte twice (journal, then entry log), MB/s",
		"limit: Kafka consume cold, 4 partitions, from a broker only sending (the durable no-op broker: batches sampled from the produce, sent from memory), MB/s",
		"limit: Kafka consume warm, 4 partitions, from a broker only sending (the durable no-op broker: batches sampled from the produce, sent from memory), MB/s",
		"limit: Pulsar produce, batching, to a durable no-op broker, the client's CPU per MB, ms",
		"limit: Pulsar produce, batching, to a durable no-op broker, the broker's CPU per MB, ms",
		"limit: loopback TCP, MB/s",
		"limit: disk, 64 KiB writes + fdatasync after the Magnetar loads, MB/s",
		"limit: fsync latency (64 KiB) after the Magnetar loads, p99 ms",
		"limit: loopback TCP, the sender's CPU per MB, ms",
	}
	if rounds > 0 {
		for _, at := range []string{"5,000", "20,000"} {
			for _, what := range []string{"Kafka", "Pulsar"} {
				m = append(m, fmt.Sprintf("limit: %s publish at %s/s to a durable no-op broker, p99 ms, median of %d rounds", what, at, rounds))
			}
		}
		m = append(m, fmt.Sprintf("limit: Pulsar produce, batching, to a durable no-op broker, MB/s, median of %d rounds", rounds),
			fmt.Sprintf("limit: Kafka consume warm, 4 partitions, from a broker only sending, MB/s, median of %d rounds", rounds))
	}
	for _, r := range benchRows(perfAllConfig{Topics: topics, Partitions: partitions, Rounds: rounds}) {
		m = append(m, r.measure)
	}
	return m
}

// checkPerfAllTable checks that out's results table has every row with
// its figures: Magnetar's everywhere, kfake's and the ratio on Kafka rows,
// a verdict where there is a goal; and that the memory of the 30 open
// partitions is plausible.
func checkPerfAllTable(t *testing.T, out string) {
	t.Helper()
	_, table, ok := strings.Cut(out, "\nresults: ")
	if !ok {
		t.Fatalf("no results table in:\n%s", out)
	}
	measures := perfAllMeasures(10, 30, 2)
	// 35 limits and 6 of the rounds; Kafka: produce 4p and 1p (MB/s, records/s), consume cold
	// and warm, the median of the rounds' warm consumes, the client's CPU
	// and bound (5), publish at 2 rates × (3
	// quantiles, the median of the rounds' p99s, the broker's share ×3),
	// end to end at 2 rates × 3 quantiles; Pulsar: the same latencies,
	// batched produce (MB/s, msg/s, the client's and the standalone's CPU
	// per MB, the medians of the rounds' batched and Kafka 1-partition
	// produce), 10 topics (3); 30 partitions open (5).
	// And the disk's writes during each Kafka produce (2).
	if len(measures) != 41+4+5+14+6+14+6+6+3+5+2 {
		t.Fatalf("%d rows, want 106: %q", len(measures), measures)
	}
	num := `-?[0-9]+(\.[0-9]+)?` // RSS per partition may be negative: the heap can shrink
	// The disk's writes are measured where /proc/diskstats lists the
	// device of the data directory (under this package's, diskDir).
	_, dev := mountOf(".")
	_, diskstats := diskWritten(dev)
	for _, m := range measures {
		want := `(?m)^` + regexp.QuoteMeta(m) + ` +` + num
		if strings.Contains(m, "the disk's writes") {
			if !diskstats {
				want = `(?m)^` + regexp.QuoteMeta(m) + ` +-`
			}
		} else if strings.HasPrefix(m, "Kafka") && !strings.Contains(m, "broker:") && !strings.Contains(m, "bound:") && !strings.Contains(m, "client's CPU") &&
			(!strings.Contains(m, "median of") || strings.HasPrefix(m, "Kafka consume warm")) {
			want += ` +` + num + ` +` + num // kfake, ÷ kfake (in rounds: the warm consume's)
		}
		if !regexp.MustCompile(want).MatchString(table) {
			t.Errorf("no row %q with its figures in:\n%s", m, table)
		}
	}
	for _, g := range []string{"≥ 1.0× kfake; ≥ 0.5× disk", "≥ 1.2× kfake", "≤ 2 ms", "≤ 5 ms", "≥ 0.8× Kafka 1 partition"} {
		verdict := `(met|not met|not met \(unattainable here: ((durable appends'|the client's) p99 (with a (durable )?no-op broker )?|the durable no-op broker's median p99 over the rounds )is [0-9.]+; this is [0-9.]+× it\)` +
			`|not met \(unattainable here: the produce of a durable no-op broker (writing each byte twice )?is [0-9.]+, [0-9.]+ of [^;]+; this is [0-9.]+ of it\)` +
			`|not met \(unattainable here: (the batched produce of a durable no-op broker|the durable no-op broker's median batched produce over the rounds|the consume from a broker only sending|the median consume from a broker only sending over the rounds) is [0-9.]+, [0-9.]+ of the [0-9.]+ compared with; this is [0-9.]+ of it\))`
		if !regexp.MustCompile(regexp.QuoteMeta(g) + ` +` + verdict + `(; ` + verdict + `)?\n`).MatchString(table) {
			t.Errorf("no goal %q with its verdict in:\n%s", g, table)
		}
	}
	if strings.Contains(table, "≤ 2048 MiB") {
		t.Errorf("the memory goal (10,000 partitions) is judged with 30:\n%s", table)
	}
	mib := func(measure string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta("30 partitions open (1 subscription each)"+measure) + ` +([0-9.]+)$`).FindStringSubmatch(table)
		if m == nil {
			t.Fatalf("no row %q with its figure alone in:\n%s", measure, table)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	rss, before, peak := mib(": RSS, MiB"), mib(", RSS before, MiB"), mib(", peak RSS (VmHWM), MiB")
	// A standalone holds tens of MiB at least, far less than 64 GiB.
	if rss < 10 || before < 10 || rss > 64<<10 || before > 64<<10 || peak < rss {
		t.Errorf("RSS %g MiB, before %g MiB, peak %g MiB: want 10 MiB to 64 GiB, the peak at least the RSS after", rss, before, peak)
	}
}

// TestPerfAll runs `perf all` twice against the real binary with tiny
// loads: the first time with profiles, both times writing into the same
// document, which must keep one section.
func TestPerfAll(t *testing.T) {
	clearEnv(t)
	doc := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	const intro = "# Benchmarks\n\nWritten by hand.\n"
	if err := os.WriteFile(doc, []byte(intro), 0o644); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(t.TempDir(), "profiles")

	code, out, errOut := runPerfAllBinary(t, "--perf-write-doc", doc, "--perf-profile-dir", profiles)
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s\nstdout:\n%s", code, errOut, out)
	}
	for _, w := range []string{"(the standalone's bookie refuses writes above 95 %)", "[limits] the machine", "disk: sequential 1 MiB O_DIRECT writes + fdatasync", "standalone ready: ", "[magnetar 13/14] pulsar-topics",
		"[magnetar 14/14] partitions-open", "removed the standalone's data (", "30 records produced, one per partition", "30 offsets committed, one per partition",
		"loaded: the broker counts 30 more topics and 30 more subscriptions than before the load",
		"[kfake 7/7] kafka-e2e-20000", "[no-op pulsar 2/2] pulsar-publish-20000", "[durable no-op pulsar 2/3] pulsar-publish-20000", "[durable no-op pulsar 3/3] pulsar-produce-batched",
		"[durable no-op kafka 3/5] kafka-consume", "[durable no-op kafka 5/5] kafka-publish-20000", "[durable no-op kafka, each byte twice 2/2] kafka-produce-1p", "created 10 producers in ", "the host's CPU steal during the load: ",
		"[rounds] 2 rounds: ", "[rounds, kfake] kafka-produce-4p: the topic the warm consume's rounds read", "[rounds, durable no-op kafka] kafka-consume-warm: a first read, not counted",
		"[round 1/2, kfake] kafka-consume-warm", "[round 2/2, durable no-op kafka] kafka-consume-warm", "kafka-consume-warm, CPU ms per MB, client + broker, medians of the rounds: magnetar ",
		"[round 1/2, durable no-op kafka] kafka-publish-5000", "[round 1/2, magnetar] kafka-publish-5000",
		"[round 2/2, magnetar] pulsar-publish-20000", "[round 2/2, durable no-op pulsar] pulsar-publish-20000",
		"[round 2/2, magnetar] kafka-produce-1p", "[round 2/2, durable no-op pulsar] pulsar-produce-batched", "wrote the results into " + doc,
		"Their garbage collector runs with GOGC 400 (perf-all-client-gogc;"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	// A settle before each phase that writes to the disk: the three
	// durable no-op brokers, the standalone, the rounds.
	if n := strings.Count(out, "[settle] sync, then 10ms for the disk"); n != 5 {
		t.Errorf("%d settles, want 5 (before each phase writing to the disk):\n%s", n, out)
	}
	// The warm consume's order turned every round: Magnetar first in the
	// first, kfake in the second.
	for round, order := range map[int][]string{1: {"magnetar", "kfake", "durable no-op kafka"}, 2: {"kfake", "durable no-op kafka", "magnetar"}} {
		at := -1
		for _, party := range order {
			i := strings.Index(out, fmt.Sprintf("[round %d/2, %s] kafka-consume-warm", round, party))
			if i < 0 || i < at {
				t.Errorf("round %d of the warm consume did not run in the order %q:\n%s", round, order, out)
			}
			at = i
		}
	}
	// The floor first in odd rounds, Magnetar first in even ones.
	for round, first := range map[int]string{1: "durable no-op kafka", 2: "magnetar"} {
		second := map[string]string{"magnetar": "durable no-op kafka", "durable no-op kafka": "magnetar"}[first]
		i := strings.Index(out, fmt.Sprintf("[round %d/2, %s] kafka-publish-5000", round, first))
		j := strings.Index(out, fmt.Sprintf("[round %d/2, %s] kafka-publish-5000", round, second))
		if i < 0 || j < i {
			t.Errorf("round %d did not run %s first, then %s:\n%s", round, first, second, out)
		}
	}
	checkPerfAllTable(t, out)
	for _, load := range []string{loadProduce4, loadProduce1, "kafka-consume", "kafka-publish-5000", "kafka-publish-20000",
		"kafka-e2e-5000", "kafka-e2e-20000", "pulsar-publish-5000", "pulsar-publish-20000", "pulsar-e2e-5000",
		"pulsar-e2e-20000", loadPulsarBatch, loadTopics, loadPartitions} {
		for _, suffix := range []string{".cpu.pprof", ".allocs-before.pprof", ".allocs.pprof"} {
			if fi, err := os.Stat(filepath.Join(profiles, load+suffix)); err != nil || fi.Size() == 0 {
				t.Errorf("profile %s%s: %v", load, suffix, err)
			}
		}
	}
	first := checkPerfAllDoc(t, doc, intro)
	if !strings.Contains(first, "--perf-profile-dir") || !strings.Contains(first, "with its defaults (fsync on), a child") {
		t.Errorf("the document's command lacks --perf-profile-dir, or it does not say the standalone ran with its defaults:\n%s", first)
	}

	// A setting measured against the default: the standalone runs with it,
	// and the document says so.
	code, out, errOut = runPerfAllBinary(t, "--perf-write-doc", doc, "--perf-standalone-flags", "--entry-log-direct-io --entry-cache-size=1048576",
		"--perf-all-client-gogc", "100")
	if code != 0 {
		t.Fatalf("second run: exit %d\nstderr:\n%s\nstdout:\n%s", code, errOut, out)
	}
	second := checkPerfAllDoc(t, doc, intro)
	if strings.Contains(second, "--perf-profile-dir") {
		t.Errorf("the second run did not replace the section:\n%s", second)
	}
	if !strings.Contains(second, "with its defaults (fsync on) but `--entry-log-direct-io --entry-cache-size=1048576`") {
		t.Errorf("the document does not name the standalone's flags:\n%s", second)
	}
	// The clients' GOGC, as the runtime has it.
	if !strings.Contains(second, "Their garbage collector runs at Go's default target (GOGC 100") {
		t.Errorf("the document does not say the clients ran at GOGC 100:\n%s", second)
	}
}

// checkPerfAllDoc checks that the document at path is intro followed by
// one marked section holding the table, and returns it.
func checkPerfAllDoc(t *testing.T, path, intro string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.HasPrefix(doc, intro+"\n"+docBegin+"\n## ") || !strings.HasSuffix(doc, "|\n"+docEnd+"\n") ||
		strings.Count(doc, docBegin) != 1 || strings.Count(doc, docEnd) != 1 {
		t.Errorf("document is not the intro and one marked section:\n%s", doc)
	}
	for _, w := range []string{"Machine: ", " CPUs", "Command: `", "| measure | magnetar | kfake |"} {
		if !strings.Contains(doc, w) {
			t.Errorf("document lacks %q:\n%s", w, doc)
		}
	}
	for _, m := range perfAllMeasures(10, 30, 2) {
		if !strings.Contains(doc, "| "+m+" | ") {
			t.Errorf("document lacks the row %q:\n%s", m, doc)
		}
	}
	// Every round of every publish latency load.
	if !strings.Contains(doc, "\n"+roundsNote+".\n\n| load | round | figure | magnetar | durable no-op | magnetar ÷ durable no-op | steal % (magnetar) | steal % (durable no-op) | CPU ms per MB, client + broker (magnetar) | CPU ms per MB, client + broker (durable no-op) | send lag p99 ms (magnetar) | send lag p99 ms (durable no-op) | slowest journal sync ms (magnetar) | kfake | magnetar ÷ kfake | steal % (kfake) | CPU ms per MB, client + broker (kfake) |\n") {
		t.Errorf("document lacks the rounds table's note and head:\n%s", doc)
	}
	for _, load := range roundsLoads() {
		for round := 1; round <= 2; round++ {
			split := `[0-9.]+ \+ [0-9.]+` // client + broker CPU per MB
			// figure, ratio, the two steals, no CPU, the two send lags,
			// Magnetar's slowest journal sync
			// and no kfake
			floor := `[0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| - \| - \| [0-9.]+ \| [0-9.]+ \| (≤|>) [0-9.]+ \| - \| - \| - \| -`
			switch load {
			case loadWarm: // and kfake's figure, ratio, steal and CPU
				// A read this small may take a broker less than one clock
				// tick of CPU (/proc/PID/stat): its share is then "?".
				split := `[0-9.]+ \+ ([0-9.]+|\?)`
				floor = `[0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ` + split + ` \| ` + split + ` \| - \| - \| - \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ` + split
			case loadProduce1: // Magnetar only
				floor = `- \| - \| [0-9.]+ \| - \| ` + split + ` \| - \| - \| - \| - \| - \| - \| - \| -`
			case loadPulsarBatch:
				floor = `[0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ` + split + ` \| ` + split + ` \| - \| - \| - \| - \| - \| - \| -`
			}
			row := regexp.MustCompile(`\| ` + load + ` \| ` + strconv.Itoa(round) + ` \| (p99 ms|MB/s) \| [0-9.]+ \| ` + floor + ` \|\n`)
			if !row.MatchString(doc) {
				t.Errorf("the rounds table has no row for %s, round %d:\n%s", load, round, doc)
			}
		}
	}
	// The host's steal over every load, by party, in the order they ran.
	if !strings.Contains(doc, "\n"+stealNote+".\n\n| load: the host's CPU steal, % | no-op pulsar | durable no-op pulsar | durable no-op kafka | durable no-op kafka, each byte twice | magnetar | kfake |\n") {
		t.Errorf("document lacks the steal table's note and head:\n%s", doc)
	}
	steal := regexp.MustCompile(`\| ([a-z0-9-]+) \|(( [0-9.]*)? \|){6}\n`)
	loads := map[string]bool{}
	for _, m := range steal.FindAllStringSubmatch(doc, -1) {
		loads[m[1]] = true
	}
	for _, load := range []string{loadProduce4, loadProduce1, "kafka-consume", "kafka-publish-5000", "kafka-e2e-20000",
		"pulsar-publish-5000", "pulsar-e2e-20000", loadPulsarBatch, loadTopics, loadPartitions} {
		if !loads[load] {
			t.Errorf("the steal table has no row for %s:\n%s", load, doc)
		}
	}
	return doc
}

func TestReplaceDocSection(t *testing.T) {
	const sec = "new\n"
	for _, tc := range []struct {
		doc, want, err string
	}{
		{doc: "", want: docBegin + "\nnew\n" + docEnd + "\n"},
		{doc: "# B\n\ntext", want: "# B\n\ntext\n\n" + docBegin + "\nnew\n" + docEnd + "\n"},
		{doc: "a\n" + docBegin + "\nold\nold\n" + docEnd + "\nafter\n", want: "a\n" + docBegin + "\nnew\n" + docEnd + "\nafter\n"},
		{doc: "a\n" + docBegin + "\nold\n", err: "has no " + docEnd},
		{doc: docBegin + "\n" + docEnd + "\n" + docBegin + "\n" + docEnd + "\n", err: "more than one"},
	} {
		got, err := replaceDocSection(tc.doc, sec)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.doc, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q:\n got %q, %v\nwant %q", tc.doc, got, err, tc.want)
		}
	}
}

// A load failing on a disk past the bookie's warning threshold says so;
// under it, nothing is added.
func TestFullDiskNote(t *testing.T) {
	if n := fullDiskNote(20e9, 0.60); n != "" {
		t.Errorf("a disk 60 %% full: note %q, want none", n)
	}
	want := " (the data's file system is now 96.2 % full, 3.2 GB available: the standalone's bookie refuses adds above 95 %; free some room and run again)"
	if n := fullDiskNote(3.2e9, 0.962); n != want {
		t.Errorf("a disk 96.2 %% full: note %q, want %q", n, want)
	}
	if n := (&benchRun{}).fullDiskNote(); n != "" {
		t.Errorf("no scratch directory: note %q, want none", n)
	}
	// This disk: the note only if it is that full (unless it is so close
	// to the threshold that other tests' writes could cross it between
	// the two reads).
	b := &benchRun{scratch: t.TempDir()}
	_, used, ok := diskRoom(b.scratch)
	if !ok {
		t.Fatal("the temp directory's disk usage cannot be read")
	}
	warn := storage.DefaultDiskUsageWarnThreshold
	if got, want := b.fullDiskNote() != "", used >= warn; got != want && math.Abs(used-warn) > 0.01 {
		t.Errorf("the temp directory's disk %.1f %% full: note given %t, want %t", 100*used, got, want)
	}
}

// A child of perf all gets this process's environment without MAGNETAR_*
// variables, and GODEBUG's madvdontneed as asked, the other GODEBUG
// settings kept.
func TestChildEnv(t *testing.T) {
	for _, tc := range []struct {
		environ      []string
		madvdontneed string
		want         []string
	}{
		{[]string{"PATH=/bin", "MAGNETAR_DATA_DIR=/x"}, goDefaultFree, []string{"PATH=/bin"}},
		{[]string{"PATH=/bin"}, lazyFree, []string{"PATH=/bin", "GODEBUG=madvdontneed=0"}},
		{[]string{"GODEBUG=madvdontneed=0"}, goDefaultFree, nil},
		{[]string{"GODEBUG=gctrace=1,madvdontneed=1,x=2", "HOME=/h"}, lazyFree, []string{"HOME=/h", "GODEBUG=gctrace=1,x=2,madvdontneed=0"}},
		{[]string{"GODEBUG=gctrace=1,madvdontneed=0"}, goDefaultFree, []string{"GODEBUG=gctrace=1"}},
	} {
		if got := childEnv(tc.environ, tc.madvdontneed); !slices.Equal(got, tc.want) {
			t.Errorf("childEnv(%q, %q) = %q, want %q", tc.environ, tc.madvdontneed, got, tc.want)
		}
	}
	for _, tc := range []struct {
		environ []string
		want    bool
	}{
		{nil, false},
		{[]string{"GODEBUG=madvdontneed=0"}, true},
		{[]string{"GODEBUG=gctrace=1,madvdontneed=0"}, true},
		{[]string{"GODEBUG=madvdontneed=0,madvdontneed=1"}, false}, // the last one counts, as for Go
		{[]string{"GODEBUG=madvdontneed=1"}, false},
		{[]string{"XGODEBUG=madvdontneed=0"}, false},
	} {
		if got := freesLazily(tc.environ); got != tc.want {
			t.Errorf("freesLazily(%q) = %t, want %t", tc.environ, got, tc.want)
		}
	}
}

func TestPerfAllUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--perf-warmup", "10s"}, "the warm-up must be shorter than the run"},
		{[]string{"--perf-duration", "0"}, `invalid perf-duration "0"`},
		{[]string{"--perf-limits-duration", "-1s"}, `invalid perf-limits-duration "-1s"`},
		{[]string{"--perf-all-topics", "0"}, `invalid perf-all-topics "0"`},
		{[]string{"--perf-all-topics-rate", "0"}, "perf-all-topics-rate 0: want a positive rate"},
		{[]string{"--perf-all-partitions", "0"}, `invalid perf-all-partitions "0"`},
		{[]string{"--perf-all-partitions", "65537"}, `invalid perf-all-partitions "65537"`},
		{[]string{"--perf-all-rounds", "-1"}, `invalid perf-all-rounds "-1"`},
		{[]string{"--perf-all-settle", "-1s"}, `invalid perf-all-settle "-1s"`},
		{[]string{"--perf-all-rounds", "26"}, `invalid perf-all-rounds "26"`},
		{[]string{"--perf-all-client-gogc", "5"}, `invalid perf-all-client-gogc "5"`},
		{[]string{"--perf-all-client-gogc", "off"}, `invalid perf-all-client-gogc "off"`},
		{[]string{"--perf-standalone-flags", "--entry-log-direct-io fsync"}, `"fsync" is not a flag`},
	} {
		clearEnv(t)
		r := run(t, append([]string{"perf", "all"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
}

// TestPerfAllTablePartitions: the many-partitions rows show Magnetar's
// figures only, and the memory goal is judged at 10,000 partitions only.
func TestPerfAllTablePartitions(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int
		res        *partitionsResult
		want       [][]string // the five rows' cells after the measure
	}{
		{"not measured", 10_000, nil, [][]string{
			{"-", "", "", "", "≤ 2048 MiB", "-"}, {"-", "", "", "", "", ""}, {"-", "", "", "", "", ""},
			{"-", "", "", "", "", ""}, {"-", "", "", "", "", ""}}},
		{"met", 10_000, &partitionsResult{Partitions: 10_000, Elapsed: 61500 * time.Millisecond,
			RSSBefore: 500 << 20, RSS: 1500 << 20, Peak: 1600 << 20}, [][]string{
			{"1500.0", "", "", "", "≤ 2048 MiB", "met"}, {"500.0", "", "", "", "", ""}, {"1600.0", "", "", "", "", ""},
			{"61.50", "", "", "", "", ""}, {"102.4", "", "", "", "", ""}}},
		{"not met", 10_000, &partitionsResult{Partitions: 10_000, Elapsed: time.Minute,
			RSSBefore: 500 << 20, RSS: 2049 << 20, Peak: 2049 << 20}, [][]string{
			{"2049.0", "", "", "", "≤ 2048 MiB", "not met"}, {"500.0", "", "", "", "", ""}, {"2049.0", "", "", "", "", ""},
			{"60.00", "", "", "", "", ""}, {"158.6", "", "", "", "", ""}}},
		{"fewer than the goal's", 1000, &partitionsResult{Partitions: 1000, Elapsed: time.Second,
			RSSBefore: 500 << 20, RSS: 490 << 20, Peak: 501 << 20}, [][]string{
			{"490.0", "", "", "", "", ""}, {"500.0", "", "", "", "", ""}, {"501.0", "", "", "", "", ""},
			{"1.00", "", "", "", "", ""}, {"-10.2", "", "", "", "", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := perfAllConfig{Topics: 10, Partitions: tc.partitions}
			res := &benchResults{magnetar: benchFigures{}, kfake: benchFigures{}, partitions: tc.res}
			tab := benchTable(res, cfg)
			open := thousands(int64(tc.partitions)) + " partitions open (1 subscription each)"
			measures := []string{open + ": RSS, MiB", open + ", RSS before, MiB", open + ", peak RSS (VmHWM), MiB",
				open + ", opening them, s", open + ", RSS per partition, KiB"}
			rows := map[string][]string{}
			for _, r := range tab.rows {
				rows[r[0]] = r[1:]
			}
			for i, m := range measures {
				if got := rows[m]; !slices.Equal(got, tc.want[i]) {
					t.Errorf("row %q: %q, want %q", m, got, tc.want[i])
				}
			}
		})
	}
}

// The bound the machine sets on the warm consume: every CPU over the
// client's own CPU per MB plus the loopback sender's, judged against 1.2×
// kfake, and "-" when what it needs was not measured.
func TestPerfAllBounds(t *testing.T) {
	kfakeWarm := func(mb int64) benchFigures {
		return benchFigures{loadWarm: {Messages: 1000, Bytes: mb * 1e6, Elapsed: time.Second}}
	}
	// 500 MB consumed with 1 s of the client's CPU: 2 ms per MB; the
	// sender's 0.5 more.
	magnetar := benchFigures{loadWarm: {Messages: 500, Bytes: 500e6, Elapsed: time.Second, CPU: time.Second}}
	ceiling := fmt.Sprintf("%.0f", float64(runtime.NumCPU())*1000/2.5)
	for _, tc := range []struct {
		name string
		res  *benchResults
		want map[string][]string // measure (a prefix) -> figure, goal, status
	}{
		{"unattainable", &benchResults{magnetar: magnetar, kfake: kfakeWarm(1e5), loopbackSendCPU: 0.5},
			map[string][]string{
				"Kafka consume warm, the client's CPU":  {"2.000", "", ""},
				"limit: loopback TCP, the sender's CPU": {"0.500", "", ""},
				"bound: the client on":                  {ceiling, "≥ 1.2× kfake", "unattainable here: 1.2× kfake is 120000"},
			}},
		{"attainable", &benchResults{magnetar: magnetar, kfake: kfakeWarm(1), loopbackSendCPU: 0.5},
			map[string][]string{
				"bound: the client on": {ceiling, "≥ 1.2× kfake", "attainable"},
			}},
		{"no sender figure", &benchResults{magnetar: magnetar, kfake: kfakeWarm(1)},
			map[string][]string{
				"limit: loopback TCP, the sender's CPU": {"-", "", ""},
				"bound: the client on":                  {"-", "≥ 1.2× kfake", "-"},
			}},
		{"not measured", &benchResults{magnetar: benchFigures{}, kfake: benchFigures{}, loopbackSendCPU: 0.5},
			map[string][]string{
				"bound: the client on": {"-", "≥ 1.2× kfake", "-"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := benchTable(tc.res, perfAllConfig{Topics: 10, Partitions: 10})
			for prefix, want := range tc.want {
				var got []string
				for _, r := range tab.rows {
					if strings.HasPrefix(r[0], prefix) {
						got = []string{r[1], r[5], r[6]}
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("row %q: %q, want %q", prefix, got, want)
				}
			}
		})
	}
}

// A publish p99 over its goal is said unattainable when a floor is over it
// (the disk's durable appends at that rate; for Pulsar also the client's
// own p99 with a no-op broker, without and with its store), and is
// compared with the durable appends.
func TestPerfAllLatencyBound(t *testing.T) {
	magnetar := benchFigures{
		loadAt("kafka-publish", 5000):  {Messages: 100, Latency: hist(3 * time.Millisecond)},
		loadAt("pulsar-publish", 5000): {Messages: 100, Latency: hist(1500 * time.Microsecond)},
	}
	res := &benchResults{magnetar: magnetar, kfake: benchFigures{},
		appends: map[float64]*durableAppends{5000: {Latency: hist(2500 * time.Microsecond)}, 20000: {Latency: hist(time.Millisecond)}},
		noop:    benchFigures{loadAt("pulsar-publish", 20000): {Latency: hist(7 * time.Millisecond)}},
		noopDurable: benchFigures{
			loadAt("pulsar-publish", 5000):  {Latency: hist(time.Millisecond)},
			loadAt("pulsar-publish", 20000): {Latency: hist(9 * time.Millisecond)},
		},
		noopKafka: benchFigures{loadAt("kafka-publish", 20000): {Latency: hist(4 * time.Millisecond)}}}
	magnetar[loadAt("pulsar-publish", 20000)] = &pulsarResult{Latency: hist(8 * time.Millisecond)}
	magnetar[loadAt("kafka-publish", 20000)] = &pulsarResult{Latency: hist(6 * time.Millisecond)}
	tab := benchTable(res, perfAllConfig{Topics: 10, Partitions: 10})
	rows := map[string][]string{}
	for _, r := range tab.rows {
		rows[r[0]] = r[1:]
	}
	p99 := func(ms float64) string { return fmt.Sprintf("%.3f", ms) }
	for measure, want := range map[string][]string{
		"Kafka publish at 5,000/s, p99 ms":  {p99(3), "1.20 of durable appends' p99", "≤ 2 ms", "not met (unattainable here: durable appends' p99 is 2.50; this is 1.2× it)"},
		"Pulsar publish at 5,000/s, p99 ms": {p99(1.5), "0.60 of durable appends' p99", "≤ 2 ms", "met"},
		// The no-op brokers' floors are the Pulsar client's, not Kafka's;
		// the highest floor is named.
		"Pulsar publish at 20,000/s, p99 ms": {p99(8), "8.00 of durable appends' p99", "≤ 5 ms",
			"not met (unattainable here: the client's p99 with a durable no-op broker is 9.00; this is 0.9× it)"},
		// The durable no-op Kafka broker's p99 is under the goal: no floor.
		"Kafka publish at 20,000/s, p99 ms": {p99(6), "6.00 of durable appends' p99", "≤ 5 ms", "not met"},
		"limit: Kafka publish at 20,000/s to a durable no-op broker (group commit + fdatasync), p99 ms":  {p99(4), "", "", ""},
		"limit: Pulsar publish at 20,000/s to a no-op broker (the client alone), p99 ms":                 {p99(7), "", "", ""},
		"limit: Pulsar publish at 5,000/s to a no-op broker (the client alone), p99 ms":                  {"-", "", "", ""},
		"limit: Pulsar publish at 20,000/s to a durable no-op broker (group commit + fdatasync), p99 ms": {p99(9), "", "", ""},
		"limit: Pulsar publish at 5,000/s to a durable no-op broker (group commit + fdatasync), p99 ms":  {p99(1), "", "", ""},
		"limit: durable 1024-byte appends at 5,000/s (group commit + fdatasync), p99 ms":                 {p99(2.5), "", "", ""},
		"limit: durable 1024-byte appends at 20,000/s (group commit + fdatasync), p99 ms":                {p99(1), "", "", ""},
	} {
		got := rows[measure]
		if len(got) != 6 || !slices.Equal([]string{got[0], got[3], got[4], got[5]}, want) {
			t.Errorf("row %q: %q, want figure, ÷ limit, goal, status %q", measure, got, want)
		}
	}
}

// The produce goal compares with the disk's better 1 MiB bandwidth: with
// O_DIRECT where it is higher, else through the page cache; it is
// unattainable when a durable no-op broker's produce, or the disk taking
// each byte twice, misses it too, and Magnetar's is not more than 5 %
// above that ceiling.
func TestPerfAllDiskLimit(t *testing.T) {
	writes := func(mbps float64) *syncedWrites {
		return &syncedWrites{Block: 1 << 20, Writes: int64(mbps), Elapsed: time.Duration(float64(time.Second) * 1.048576)}
	}
	produce := benchFigures{loadProduce1: {Messages: 1, Bytes: 300e6, Elapsed: time.Second}}
	for _, tc := range []struct {
		name        string
		res         *benchResults
		limit, goal string
	}{
		{"direct higher", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1M: writes(200), disk1MDirect: writes(750)},
			"0.40 of 1 MiB O_DIRECT fsync'd writes", "not met"},
		{"buffered higher", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1M: writes(500), disk1MDirect: writes(400)},
			"0.60 of 1 MiB fsync'd writes", "met"},
		{"no direct figure", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1M: writes(500)},
			"0.60 of 1 MiB fsync'd writes", "met"},
		// A durable no-op broker's produce under half the disk: the goal
		// is out of reach; over it, it is not.
		{"ceiling under the goal", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1MDirect: writes(1000),
			noopKafka: benchFigures{loadProduce1: {Messages: 1, Bytes: 400e6, Elapsed: time.Second}}},
			"0.30 of 1 MiB O_DIRECT fsync'd writes",
			"not met (unattainable here: the produce of a durable no-op broker is 400.00, 0.40 of 1 MiB O_DIRECT fsync'd writes; this is 0.75 of it)"},
		{"ceiling over the goal", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1MDirect: writes(1000),
			noopKafka: benchFigures{loadProduce1: {Messages: 1, Bytes: 600e6, Elapsed: time.Second}}},
			"0.30 of 1 MiB O_DIRECT fsync'd writes", "not met"},
		// A durable no-op broker slower than Magnetar bounds nothing.
		{"ceiling under the goal and under the figure", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1MDirect: writes(1000),
			noopKafka: benchFigures{loadProduce1: {Messages: 1, Bytes: 250e6, Elapsed: time.Second}}},
			"0.30 of 1 MiB O_DIRECT fsync'd writes", "not met"},
		// The disk taking each byte twice, as a bookie writes it: under
		// half its bandwidth, the goal is out of reach (Magnetar within
		// 5 % of it); over half, it is not; far under Magnetar, it
		// bounds nothing.
		{"each byte twice under the goal", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1MDirect: writes(700), diskTwice: writes(310)},
			"0.43 of 1 MiB O_DIRECT fsync'd writes",
			"not met (unattainable here: the disk taking each byte twice, as a bookie writes it is 310.00, 0.44 of 1 MiB O_DIRECT fsync'd writes; this is 0.97 of it)"},
		{"each byte twice over the goal", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1MDirect: writes(700), diskTwice: writes(380)},
			"0.43 of 1 MiB O_DIRECT fsync'd writes", "not met"},
		{"each byte twice under the figure", &benchResults{magnetar: produce, kfake: benchFigures{}, disk1MDirect: writes(700), diskTwice: writes(280)},
			"0.43 of 1 MiB O_DIRECT fsync'd writes", "not met"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := benchTable(tc.res, perfAllConfig{Topics: 10, Partitions: 10})
			for _, r := range tab.rows {
				if r[0] == "Kafka produce, 1 partition, MB/s" {
					if r[4] != tc.limit || !strings.HasSuffix(r[6], "; "+tc.goal) {
						t.Errorf("÷ limit %q, status %q; want %q and the disk goal %s", r[4], r[6], tc.limit, tc.goal)
					}
					return
				}
			}
			t.Fatal("no produce row")
		})
	}
}

// tableCell is column col of the row of t whose measure is measure, ""
// if there is none.
func tableCell(t *table, measure string, col int) string {
	for _, r := range t.rows {
		if r[0] == measure {
			return r[col]
		}
	}
	return ""
}

// ceilingCase is a goal's figure, its ceiling's (0: not measured), and
// the status and limit cell the table must then show.
type ceilingCase struct {
	name            string
	figure, ceiling float64
	status, limit   string
}

// checkCeilings checks, for each case, the status cell of the row
// statusRow and the limit cell of limitRow in the table of results(the
// case's figure and ceiling, in MB/s).
func checkCeilings(t *testing.T, statusRow, limitRow string, results func(figure, ceiling *pulsarResult) *benchResults, cases []ceilingCase) {
	mb := func(n float64) *pulsarResult {
		if n == 0 {
			return nil
		}
		return &pulsarResult{Messages: 1, Bytes: int64(n * 1e6), Elapsed: time.Second}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab := benchTable(results(mb(tc.figure), mb(tc.ceiling)), perfAllConfig{Topics: 10, Partitions: 10})
			status, limit := tableCell(tab, statusRow, 6), tableCell(tab, limitRow, 1)
			if status != tc.status || limit != tc.limit {
				t.Errorf("status %q, limit %q; want %q, %q", status, limit, tc.status, tc.limit)
			}
		})
	}
}

// TestPerfAllProduceKFakeCeiling: the Kafka produce's goal of 1.0× kfake
// not met is unattainable when the durable no-op Kafka broker writing
// each byte twice (a bookie's journal and entry log, and no other work)
// misses it too; its limit rows show its figures. (The disk goal has no
// disk figure here: "-".)
func TestPerfAllProduceKFakeCeiling(t *testing.T) {
	kfake := &pulsarResult{Messages: 1, Bytes: 200e6, Elapsed: time.Second}
	checkCeilings(t, "Kafka produce, 4 partitions, MB/s",
		"limit: Kafka produce, 4 partitions, to a durable no-op broker writing each byte twice (journal, then entry log), MB/s",
		func(figure, ceiling *pulsarResult) *benchResults {
			res := &benchResults{magnetar: benchFigures{loadProduce4: figure}, kfake: benchFigures{loadProduce4: kfake},
				noopKafka: benchFigures{}, noopKafkaTwice: benchFigures{}}
			if ceiling != nil {
				res.noopKafkaTwice[loadProduce4] = ceiling
			}
			return res
		}, []ceilingCase{
			{"met", 220, 210, "met; -", "210.00"},
			{"not met, ceiling under the goal", 150, 180, "not met (unattainable here: the produce of a durable no-op broker writing each byte twice is 180.00, 0.90 of the 200.00 compared with; this is 0.83 of it); -", "180.00"},
			{"not met, ceiling over the goal", 150, 230, "not met; -", "230.00"},
			{"not met, ceiling under the goal, the figure above it within the noise", 150, 145, "not met (unattainable here: the produce of a durable no-op broker writing each byte twice is 145.00, 0.72 of the 200.00 compared with; this is 1.03 of it); -", "145.00"},
			{"not met, ceiling under the goal and under the figure", 150, 140, "not met; -", "140.00"},
			{"not met, no ceiling", 150, 0, "not met; -", "-"},
		})
}

// TestPerfAllConsumeCeiling: the Kafka consume's goal of 1.2× kfake not
// met is unattainable when a broker only sending (the durable no-op Kafka
// broker's consume, the better of its cold and warm) misses it too; its
// limit rows show its figures.
func TestPerfAllConsumeCeiling(t *testing.T) {
	kfake := &pulsarResult{Messages: 1, Bytes: 500e6, Elapsed: time.Second}
	checkCeilings(t, "Kafka consume warm, MB/s",
		"limit: Kafka consume warm, 4 partitions, from a broker only sending (the durable no-op broker: batches sampled from the produce, sent from memory), MB/s",
		func(figure, ceiling *pulsarResult) *benchResults {
			res := &benchResults{magnetar: benchFigures{loadWarm: figure}, kfake: benchFigures{loadWarm: kfake}, noopKafka: benchFigures{}}
			if ceiling != nil {
				// The cold read from it slower: the warm one is the ceiling.
				res.noopKafka[loadWarm] = ceiling
				res.noopKafka[loadCold] = &pulsarResult{Messages: 1, Bytes: int64(mbps(ceiling.Bytes, ceiling.Elapsed) * 0.9e6), Elapsed: time.Second}
			}
			return res
		}, []ceilingCase{
			{"met", 650, 900, "met", "900.00"},
			{"not met, ceiling under the goal", 500, 550, "not met (unattainable here: the consume from a broker only sending is 550.00, 1.10 of the 500.00 compared with; this is 0.91 of it)", "550.00"},
			{"not met, ceiling over the goal", 500, 700, "not met", "700.00"},
			{"not met, ceiling under the goal and under the figure", 580, 540, "not met", "540.00"},
			{"not met, no ceiling", 500, 0, "not met", "-"},
		})
}

// TestPerfAllPulsarBatchCeiling: the batched Pulsar produce's goal (0.8×
// Kafka's 1-partition produce) not met is unattainable when the durable
// no-op Pulsar broker's batched produce misses it too; its limit row
// shows that figure.
func TestPerfAllPulsarBatchCeiling(t *testing.T) {
	kafka := &pulsarResult{Messages: 1, Bytes: 300e6, Elapsed: time.Second}
	checkCeilings(t, "Pulsar produce, batching, MB/s",
		"limit: Pulsar produce, batching, to a durable no-op broker (group commit + fdatasync), MB/s",
		func(figure, ceiling *pulsarResult) *benchResults {
			res := &benchResults{magnetar: benchFigures{loadProduce1: kafka, loadPulsarBatch: figure},
				kfake: benchFigures{}, noopDurable: benchFigures{}}
			if ceiling != nil {
				res.noopDurable[loadPulsarBatch] = ceiling
			}
			return res
		}, []ceilingCase{
			{"met", 260, 300, "met", "300.00"},
			{"not met, ceiling under the goal", 200, 230, "not met (unattainable here: the batched produce of a durable no-op broker is 230.00, 0.77 of the 300.00 compared with; this is 0.87 of it)", "230.00"},
			{"not met, ceiling over the goal", 200, 280, "not met", "280.00"},
			{"not met, ceiling under the goal, the figure above it within the noise", 200, 196, "not met (unattainable here: the batched produce of a durable no-op broker is 196.00, 0.65 of the 300.00 compared with; this is 1.02 of it)", "196.00"},
			{"not met, ceiling under the goal and under the figure", 200, 190, "not met", "190.00"},
			{"not met, no ceiling", 200, 0, "not met", "-"},
		})
}

// TestPerfAllBatchCPU: the batched produce's CPU rows, per MB of the
// messages acknowledged; "-" where a CPU time was not measured.
func TestPerfAllBatchCPU(t *testing.T) {
	// 2,000 messages of 1 KiB: 2.048 MB.
	run := func(client, broker time.Duration) *pulsarResult {
		return &pulsarResult{Total: 2000, Messages: 1, Bytes: 1e6, Elapsed: time.Second, CPU: client, BrokerCPU: broker}
	}
	res := &benchResults{magnetar: benchFigures{loadPulsarBatch: run(4096*time.Microsecond, 0)}, kfake: benchFigures{},
		noopDurable: benchFigures{loadPulsarBatch: run(2048*time.Microsecond, 1024*time.Microsecond)}}
	tab := benchTable(res, perfAllConfig{Topics: 10, Partitions: 10})
	want := map[string]string{
		"Pulsar produce, batching, the client's CPU per MB, ms":                                   "2.000",
		"Pulsar produce, batching, the standalone's CPU per MB, ms":                               "-",
		"limit: Pulsar produce, batching, to a durable no-op broker, the client's CPU per MB, ms": "1.000",
		"limit: Pulsar produce, batching, to a durable no-op broker, the broker's CPU per MB, ms": "0.500",
	}
	for _, r := range tab.rows {
		if w, ok := want[r[0]]; ok {
			if r[1] != w {
				t.Errorf("%s: %q, want %q", r[0], r[1], w)
			}
			delete(want, r[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("rows missing: %v", want)
	}
}

// TestPerfAllScrapeOpen: the loaded topics and the subscriptions summed over
// every series, named or "_other"; no magnetar_topics_loaded is an error.
func TestPerfAllScrapeOpen(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       openCounts
		err        string
	}{
		{"counts", `# HELP magnetar_topics_loaded Topics (and partitions) loaded on this broker.
# TYPE magnetar_topics_loaded gauge
magnetar_topics_loaded 10064
# HELP magnetar_topic_subscriptions_count Subscriptions of the topic.
# TYPE magnetar_topic_subscriptions_count gauge
magnetar_topic_subscriptions_count{namespace="public/default",tenant="public",topic="persistent://public/default/a"} 2
magnetar_topic_subscriptions_count{namespace="public/default",tenant="public",topic="_other"} 1e+04
magnetar_topic_subscriptions_count_total 7
magnetar_topic_producers_count{namespace="public/default",tenant="public",topic="_other"} 5
`, openCounts{topics: 10064, subs: 10002}, ""},
		{"no topics loaded", "magnetar_topic_subscriptions_count 3\n", openCounts{}, "no magnetar_topics_loaded"},
		{"bad value", "magnetar_topics_loaded x\n", openCounts{}, `line "magnetar_topics_loaded x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, tc.body) }))
			defer srv.Close()
			got, err := scrapeOpen(context.Background(), srv.URL)
			switch {
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("%+v, %v; want %+v", got, err, tc.want)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

// TestPerfAllReadProcMemory reads this process's memory, after resetting its
// peak.
func TestPerfAllReadProcMemory(t *testing.T) {
	if err := resetPeakRSS(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	m, err := readProcMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS < 1<<20 || m.Peak < m.RSS {
		t.Errorf("RSS %d bytes, peak %d: want at least 1 MiB, the peak at least the RSS", m.RSS, m.Peak)
	}
	if _, err := readProcMemory(-1); err == nil {
		t.Error("pid -1: no error")
	}
}

func TestCheckAllRead(t *testing.T) {
	produced := &pulsarResult{Total: 100}
	if err := checkAllRead(produced, &pulsarResult{Total: 100}, &pulsarResult{Total: 100}); err != nil {
		t.Errorf("all read: %v", err)
	}
	err := checkAllRead(produced, &pulsarResult{Total: 100}, &pulsarResult{Total: 99})
	if err == nil || !strings.Contains(err.Error(), "records lost: the produce load had 100 records acknowledged, a consume from the start read 99") {
		t.Errorf("one short: %v", err)
	}
}

// TestParseDiskWritten: the bytes a device wrote are its tenth
// /proc/diskstats field, in 512-byte sectors; a partition is not its
// disk; a device not listed gives nothing.
func TestParseDiskWritten(t *testing.T) {
	const stats = `   7       0 loop0 12 0 24 3 0 0 0 0 0 4 3 0 0 0 0 0 0
 254       0 vda 4125 1190 400662 1612 917211 103570 47710440 1018716 0 522768 1024376 412 0 8125736 4223 23160 3704
 254       1 vda1 3900 1190 390000 1500 917000 103500 47700000 1018000 0 522000 1023000 400 0 8125000 4000 23000 3700
`
	for _, tc := range []struct {
		name string
		want int64
		ok   bool
	}{{"vda", 47710440 * 512, true}, {"vda1", 47700000 * 512, true}, {"loop0", 0, true}, {"vdb", 0, false}} {
		if got, ok := parseDiskWritten(stats, tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %d, %t; want %d, %t", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := diskWritten(""); ok {
		t.Error("a data directory on no known device gave a figure")
	}
}

// loopSender acknowledges each message at once and hands a copy of its
// payload (which the load reuses) to a consumer through msgs.
type loopSender struct{ msgs chan []byte }

func (l loopSender) send(s *sendSlot) {
	l.msgs <- slices.Clone(s.payload)
	s.finish(nil)
}

// TestRunE2E: the end-to-end load times each message from the send time
// it carries, and fails when the consumer gets fewer or more messages than
// were acknowledged.
func TestRunE2E(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every func(i int) int // copies of message i the consumer gets
		want  string
	}{
		{"all", func(int) int { return 1 }, ""},
		{"lost", func(i int) int { return min(1, i%50) }, "records lost: "},
		{"duplicates", func(i int) int { return 1 + max(0, 1-i%50) }, "duplicates: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out syncBuffer
			b := &benchRun{cfg: perfAllConfig{Duration: 300 * time.Millisecond, Interval: 100 * time.Millisecond},
				out: &out, log: slog.New(slog.DiscardHandler), drain: 200 * time.Millisecond}
			msgs := make(chan []byte, benchMaxPending)
			tail := func(ctx context.Context, got func([]byte, error)) {
				for i := 0; ; i++ {
					select {
					case p := <-msgs:
						for range tc.every(i) {
							got(p, nil)
						}
					case <-ctx.Done():
						return
					}
				}
			}
			res, err := b.runE2E(context.Background(), loopSender{msgs}, tail, 2000)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q\n%s", err, tc.want, out.String())
			}
			if res.Messages < 500 || res.Latency.Max() <= 0 || res.Latency.Max() > 100*time.Millisecond {
				t.Errorf("%d messages, latency max %s: want about 600, timed from their send\n%s", res.Messages, res.Latency.Max(), out.String())
			}
		})
	}
}

// The broker's latency histograms: parsed from a metrics page, subtracted,
// and their quantiles interpolated within buckets.
func TestPerfAllBrokerHistograms(t *testing.T) {
	page := func(counts ...int) string {
		les := []string{"0.001", "0.002", "0.004", "+Inf"}
		var b strings.Builder
		b.WriteString("# HELP x_latency_seconds help\n# TYPE x_latency_seconds histogram\n")
		for i, le := range les {
			fmt.Fprintf(&b, "x_latency_seconds_bucket{le=%q} %d\n", le, counts[i])
		}
		fmt.Fprintf(&b, "x_latency_seconds_sum 1\nx_latency_seconds_count %d\nother_metric 3\n", counts[len(counts)-1])
		return b.String()
	}
	before, err := parseHists(strings.NewReader(page(10, 10, 10, 10)))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseHists(strings.NewReader(page(60, 110, 110, 110)))
	if err != nil {
		t.Fatal(err)
	}
	d := after["x_latency_seconds"].minus(before["x_latency_seconds"])
	// 100 new observations: 50 up to 1 ms, 50 from 1 to 2 ms.
	for _, tc := range []struct{ q, want float64 }{{0.25, 0.5}, {0.5, 1}, {0.75, 1.5}, {0.99, 1.98}} {
		if got, ok := d.quantile(tc.q); !ok || math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("p%g = %v, %v; want %v ms", tc.q*100, got, ok, tc.want)
		}
	}
	if _, ok := before["x_latency_seconds"].minus(before["x_latency_seconds"]).quantile(0.99); ok {
		t.Error("a quantile of no observations")
	}
	// All in +Inf: the last finite bound.
	inf, _ := parseHists(strings.NewReader(page(0, 0, 0, 5)))
	if got, ok := inf["x_latency_seconds"].quantile(0.99); !ok || got != 4 {
		t.Errorf("p99 in +Inf = %v, %v; want 4 ms", got, ok)
	}
	if _, err := parseHists(strings.NewReader("x_bucket{le=\"a\"} 1\n")); err == nil {
		t.Error("a bad bound parsed")
	}
	// A histogram with labels: one per label set, le wherever it is.
	vec, err := parseHists(strings.NewReader(`v_bucket{request="Produce",le="0.001"} 3
v_bucket{request="Produce",le="+Inf"} 4
v_bucket{le="0.001",request="Fetch",x="y"} 1
v_bucket{le="+Inf",request="Fetch",x="y"} 1
w_bucket{role="a",le="0.5",file="f"} 2
`))
	if err != nil {
		t.Fatal(err)
	}
	produce, fetch, w := vec[`v{request="Produce"}`], vec[`v{request="Fetch",x="y"}`], vec[`w{role="a",file="f"}`]
	if len(vec) != 3 || !slices.Equal(w.le, []float64{0.5}) || !slices.Equal(produce.counts, []float64{3, 4}) || !slices.Equal(fetch.counts, []float64{1, 1}) ||
		!slices.Equal(produce.le, []float64{0.001, math.Inf(1)}) {
		t.Errorf("labelled histograms parsed as %v", vec)
	}
}

// hist is a latency histogram of 100 latencies of d.
func hist(d time.Duration) latencyHist {
	var h latencyHist
	for range 100 {
		h.Record(d)
	}
	return h
}

// TestHistSlowest: the slowest observation of a histogram's difference,
// by the bucket that holds it.
func TestHistSlowest(t *testing.T) {
	le := []float64{0.001, 0.01, math.Inf(1)}
	for _, tc := range []struct {
		counts []float64
		want   string
	}{
		{[]float64{0, 0, 0}, "-"},
		{[]float64{5, 5, 5}, "≤ 1.0"},
		{[]float64{5, 7, 7}, "≤ 10.0"},
		{[]float64{5, 7, 8}, "> 10.0"},
		{nil, "-"},
	} {
		h := histDelta{le: le, counts: tc.counts}
		if tc.counts == nil {
			h = histDelta{}
		}
		if got := h.slowest(); got != tc.want {
			t.Errorf("counts %v: %q, want %q", tc.counts, got, tc.want)
		}
	}
}

// TestPerfAllRounds checks that with rounds the publish p99 goals and the
// batched produce's are judged on the medians of the rounds, beside the
// durable no-op broker's medians, and no longer on the single runs.
func TestPerfAllRounds(t *testing.T) {
	res := &benchResults{kfake: benchFigures{},
		magnetar: benchFigures{loadAt("kafka-publish", 5000): {Messages: 100, Latency: hist(9 * time.Millisecond)}},
		appends:  map[float64]*durableAppends{5000: {Latency: hist(8 * time.Millisecond)}},
		rounds: map[string]*roundSeries{
			// Magnetar's median 1.9 is under the goal, though one round
			// is far above it.
			// Its second round's load generator was late against both.
			loadAt("kafka-publish", 5000): {magnetar: []float64{1.9, 30, 1.8}, floor: []float64{1.0, 2.0, 1.5},
				magnetarSteal: []float64{0.01, 0.2, math.NaN()}, floorSteal: []float64{0, 0.15, 0.02},
				magnetarLag: []float64{0.1, 17.8, 0.09}, floorLag: []float64{0.08, 17, math.NaN()},
				magnetarSync: []string{"≤ 0.5", "≤ 1.2", "> 10.0"}},
			// The floor's median, 2.5, is above the goal.
			loadAt("pulsar-publish", 5000): {magnetar: []float64{3, 2.8, 4}, floor: []float64{2.4, 2.6, 2.5},
				magnetarSteal: []float64{0, 0, 0}, floorSteal: []float64{0, 0, 0}},
			// An even count: the median is the mean of the middle two.
			loadAt("pulsar-publish", 20000): {magnetar: []float64{6, 4, 7, 5}, floor: []float64{1, 1, 1, 1},
				magnetarSteal: []float64{0, 0, 0, 0}, floorSteal: []float64{0, 0, 0, 0}},
			// The batched produce is judged against the median of the
			// rounds' Kafka produce, 500: 380 is 0.76 of it, and the
			// durable no-op broker's median, 390, 0.78.
			// The CPU split: the third round's client unknown; Magnetar's
			// batched rounds measured in the first only.
			loadProduce1: {magnetar: []float64{500, 600, 450}, magnetarSteal: []float64{0, 0, 0},
				magnetarCPU: []cpuSplit{{2.5, 2}, {2.6, 2.1}, {math.NaN(), 1.5}}},
			loadPulsarBatch: {magnetar: []float64{380, 700, 300}, floor: []float64{390, 400, 100},
				magnetarSteal: []float64{0, 0, 0}, floorSteal: []float64{0, 0, 0},
				magnetarCPU: []cpuSplit{{4.25, 1.75}}, floorCPU: []cpuSplit{{4, 1.25}, {4.5, 1}, {5, 1.5}}},
			// The warm consume: Magnetar's median 1,000 against kfake's
			// 800 is 1.25×, met, though its first round is under 1.2×
			// kfake's first.
			loadWarm: {magnetar: []float64{900, 1000, 1100}, floor: []float64{950, 1000, 1050}, peer: []float64{800, 700, 900},
				magnetarSteal: []float64{0, 0, 0}, floorSteal: []float64{0, 0, 0}, peerSteal: []float64{0.01, 0, 0},
				magnetarCPU: []cpuSplit{{0.8, 0.9}, {0.8, 0.9}, {0.8, 0.9}}, floorCPU: []cpuSplit{{0.75, 0.2}, {0.75, 0.2}, {0.75, 0.2}},
				peerCPU: []cpuSplit{{0.8, 1.5}, {0.8, 1.5}, {0.8, 1.5}}},
		},
		// Single runs that would meet the goal: they no longer judge it.
		noopDurable: benchFigures{loadPulsarBatch: {Bytes: 900e6, Elapsed: time.Second}}}
	res.magnetar[loadProduce1] = &pulsarResult{Bytes: 500e6, Elapsed: time.Second}
	res.magnetar[loadPulsarBatch] = &pulsarResult{Bytes: 800e6, Elapsed: time.Second}
	tab := benchTable(res, perfAllConfig{Topics: 10, Partitions: 10, Rounds: 3})
	rows := map[string][]string{}
	for _, r := range tab.rows {
		rows[r[0]] = r[1:]
	}
	for measure, want := range map[string][]string{
		"Kafka publish at 5,000/s, p99 ms, median of 3 rounds": {"1.900", "1.27 of the durable no-op broker's median p99 over the rounds", "≤ 2 ms", "met"},
		"Pulsar publish at 5,000/s, p99 ms, median of 3 rounds": {"3.000", "1.20 of the durable no-op broker's median p99 over the rounds", "≤ 2 ms",
			"not met (unattainable here: the durable no-op broker's median p99 over the rounds is 2.50; this is 1.2× it)"},
		"Pulsar publish at 20,000/s, p99 ms, median of 3 rounds": {"5.500", "5.50 of the durable no-op broker's median p99 over the rounds", "≤ 5 ms", "not met"},
		"Kafka publish at 20,000/s, p99 ms, median of 3 rounds":  {"-", "", "≤ 5 ms", "-"},
		// The single run keeps its figure and gives up its goal.
		"Kafka publish at 5,000/s, p99 ms": {"9.000", "1.12 of durable appends' p99", "", ""},
		"limit: Kafka publish at 5,000/s to a durable no-op broker, p99 ms, median of 3 rounds":   {"1.500", "", "", ""},
		"limit: Pulsar publish at 5,000/s to a durable no-op broker, p99 ms, median of 3 rounds":  {"2.500", "", "", ""},
		"limit: Pulsar publish at 20,000/s to a durable no-op broker, p99 ms, median of 3 rounds": {"1.000", "", "", ""},
		"limit: Kafka publish at 20,000/s to a durable no-op broker, p99 ms, median of 3 rounds":  {"-", "", "", ""},
		"limit: Pulsar produce, batching, to a durable no-op broker, MB/s, median of 3 rounds":    {"390.00", "", "", ""},
		"Kafka produce, 1 partition, MB/s, median of 3 rounds":                                    {"500.00", "", "", ""},
		"Pulsar produce, batching, MB/s, median of 3 rounds": {"380.00", "0.97 of the durable no-op broker's median batched produce over the rounds", "≥ 0.8× Kafka 1 partition",
			"not met (unattainable here: the durable no-op broker's median batched produce over the rounds is 390.00, 0.78 of the 500.00 compared with; this is 0.97 of it)"},
		"Pulsar produce, batching, MB/s": {"800.00", "", "", ""},
		"limit: Kafka consume warm, 4 partitions, from a broker only sending, MB/s, median of 3 rounds": {"1000.00", "", "", ""},
		"Kafka consume warm, MB/s, median of 3 rounds":                                                  {"1000.00", "1.00 of the median consume from a broker only sending over the rounds", "≥ 1.2× kfake", "met"},
		// The single run (none here) gives up its goal.
		"Kafka consume warm, MB/s": {"-", "", "", ""},
	} {
		got, ok := rows[measure]
		if !ok || len(got) != 6 || !slices.Equal([]string{got[0], got[3], got[4], got[5]}, want) {
			t.Errorf("row %q: %q, want figure, ÷ limit, goal, status %q", measure, got, want)
		}
	}
	if got := rows["Kafka consume warm, MB/s, median of 3 rounds"]; len(got) != 6 || got[1] != "800.00" || got[2] != "1.25" {
		t.Errorf("the warm consume's rounds: %q, want kfake's median 800.00 and Magnetar ÷ it 1.25", got)
	}
	// kfake's median rises to 900 (Magnetar's is 1.11× it), the broker
	// only sending's falls to 960 (1.07× kfake's): the goal is missed,
	// unattainable.
	res.rounds[loadWarm].peer = []float64{900, 900, 900}
	res.rounds[loadWarm].floor = []float64{960, 960, 960}
	for _, r := range benchTable(res, perfAllConfig{Topics: 10, Partitions: 10, Rounds: 3}).rows {
		if r[0] == "Kafka consume warm, MB/s, median of 3 rounds" {
			if want := "not met (unattainable here: the median consume from a broker only sending over the rounds is 960.00, 1.07 of the 900.00 compared with; this is 1.04 of it)"; r[6] != want {
				t.Errorf("the warm consume's rounds against kfake's 900: %q, want %q", r[6], want)
			}
		}
	}
	res.rounds[loadWarm].peer = []float64{800, 700, 900}
	res.rounds[loadWarm].floor = []float64{950, 1000, 1050}

	rt := roundsTable(res)
	if rt == nil {
		t.Fatal("no rounds table")
	}
	var got []string
	for _, r := range rt.rows {
		got = append(got, strings.Join(r, " "))
	}
	want := []string{
		"kafka-consume-warm 1 MB/s 900.00 950.00 0.95 0.0 0.0 0.80 + 0.90 0.75 + 0.20 - - - 800.00 1.12 1.0 0.80 + 1.50",
		"kafka-consume-warm 2 MB/s 1000.00 1000.00 1.00 0.0 0.0 0.80 + 0.90 0.75 + 0.20 - - - 700.00 1.43 0.0 0.80 + 1.50",
		"kafka-consume-warm 3 MB/s 1100.00 1050.00 1.05 0.0 0.0 0.80 + 0.90 0.75 + 0.20 - - - 900.00 1.22 0.0 0.80 + 1.50",
		"kafka-publish-5000 1 p99 ms 1.900 1.000 1.90 1.0 0.0 - - 0.100 0.080 ≤ 0.5 - - - -",
		"kafka-publish-5000 2 p99 ms 30.000 2.000 15.00 20.0 15.0 - - 17.800 17.000 ≤ 1.2 - - - -",
		"kafka-publish-5000 3 p99 ms 1.800 1.500 1.20 - 2.0 - - 0.090 - > 10.0 - - - -",
		"pulsar-publish-5000 1 p99 ms 3.000 2.400 1.25 0.0 0.0 - - - - - - - - -",
		"pulsar-publish-5000 2 p99 ms 2.800 2.600 1.08 0.0 0.0 - - - - - - - - -",
		"pulsar-publish-5000 3 p99 ms 4.000 2.500 1.60 0.0 0.0 - - - - - - - - -",
		"pulsar-publish-20000 1 p99 ms 6.000 1.000 6.00 0.0 0.0 - - - - - - - - -",
		"pulsar-publish-20000 2 p99 ms 4.000 1.000 4.00 0.0 0.0 - - - - - - - - -",
		"pulsar-publish-20000 3 p99 ms 7.000 1.000 7.00 0.0 0.0 - - - - - - - - -",
		"pulsar-publish-20000 4 p99 ms 5.000 1.000 5.00 0.0 0.0 - - - - - - - - -",
		"kafka-produce-1p 1 MB/s 500.00 - - 0.0 - 2.50 + 2.00 - - - - - - - -",
		"kafka-produce-1p 2 MB/s 600.00 - - 0.0 - 2.60 + 2.10 - - - - - - - -",
		"kafka-produce-1p 3 MB/s 450.00 - - 0.0 - ? + 1.50 - - - - - - - -",
		"pulsar-produce-batched 1 MB/s 380.00 390.00 0.97 0.0 0.0 4.25 + 1.75 4.00 + 1.25 - - - - - - -",
		"pulsar-produce-batched 2 MB/s 700.00 400.00 1.75 0.0 0.0 - 4.50 + 1.00 - - - - - - -",
		"pulsar-produce-batched 3 MB/s 300.00 100.00 3.00 0.0 0.0 - 5.00 + 1.50 - - - - - - -",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rounds table:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if m := medianSplit(res.rounds[loadProduce1].magnetarCPU); m.client != 2.55 || m.broker != 2 {
		t.Errorf("the Kafka produce's median CPU split is %s, want 2.55 + 2.00 (the unmeasured client left out)", m)
	}
	if m := medianSplit(nil); m.String() != "? + ?" {
		t.Errorf("the median CPU split of no rounds is %s, want ? + ?", m)
	}
	if roundsTable(&benchResults{}) != nil {
		t.Error("a run without rounds made a rounds table")
	}
	if !math.IsNaN(median(nil)) {
		t.Error("the median of nothing is a number")
	}
}
