package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/entry"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta/local"
)

// perfBookieSettings are the settings of `magnetar perf bookie`: its own,
// then the storage settings of the bookies it runs in-process.
var perfBookieSettings = append(perfBookieOwnSettings, bookieStorageSettings...)

var perfBookieOwnSettings = []setting{
	{"data-dir", "", "dir", "directory in which the run makes its scratch directory (bookies, metadata, disk baseline), removed at the end (default: the system temp directory)"},
	{"perf-bookies", "1", "count", "bookies to run in-process on 127.0.0.1"},
	{"perf-durable-noop", "false", "bool", "run durable no-op bookies instead: each add's checksum checked, the entry written to a prefilled file and fdatasync'd (group commit), then acknowledged; no entry log, no index, no reads; the least any bookie does before it acknowledges, a ceiling for the real bookies' throughput and a floor for their latency"},
	{"perf-in-process", "false", "bool", "the client calls the bookies in-process, as the standalone's broker calls its bookie, instead of over loopback TCP (whose copies otherwise share the machine's CPUs with the bookies)"},
	{"perf-ensemble", "1", "count", "ledger ensemble size E (at most perf-bookies)"},
	{"perf-write-quorum", "1", "count", "ledger write quorum Qw (at most E)"},
	{"perf-ack-quorum", "1", "count", "ledger ack quorum Qa (at most Qw)"},
	{"perf-entry-size", "1024", "bytes", "payload bytes per entry"},
	{"perf-duration", "10s", "duration", "how long to add entries"},
	{"perf-rate", "0", "entries/s", "open loop: add at this steady rate, each add's latency counted from when it was due; 0 (the default): closed loop, as fast as perf-in-flight allows"},
	{"perf-in-flight", "1000", "count", "most adds outstanding at once"},
	{"perf-disk-duration", "8s", "duration", "after the run, measure the disk for this long, a quarter each: its bandwidth taking each byte twice as a bookie does (journal and entry log, O_DIRECT), its fsync'd write bandwidth with O_DIRECT and through the page cache, and its fsync latency; 0 skips it"},
}

func newPerfCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Measure the performance of Magnetar's parts",
		Long: `Measure the performance of Magnetar's parts, each beside the limits of the
machine it runs on. See docs/BENCHMARKS.md.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newPerfBookieCommand(a), newPerfProduceCommand(a), newPerfConsumeCommand(a), newPerfKafkaCommand(a), newPerfAllCommand(a),
		newPerfNoopCommand(a), newPerfKFakeCommand(a))
	return cmd
}

func newPerfBookieCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Measure bookie add throughput and latency against the disk's own limits",
		Example: `  magnetar perf bookie                                        # 1 bookie, 1 KiB entries, closed loop, 10 s
  magnetar perf bookie --perf-entry-size 16384 --perf-rate 6000 # open loop at 6,000 adds/s
  magnetar perf bookie --perf-bookies 3 --perf-ensemble 3 --perf-write-quorum 2 --perf-ack-quorum 2`,
		Long: `Measure bookie add throughput and latency against the disk's own limits.

Starts perf-bookies bookies in-process on 127.0.0.1 (random ports) with an
embedded metadata store, all in a scratch directory under data-dir; creates
a ledger with the quorums given; and adds perf-entry-size entries for
perf-duration: closed loop (up to perf-in-flight outstanding), or open loop
at perf-rate. Prints, every second, the adds completed in it (entries/s,
MB/s, latency p50/p99/p99.9/max), then a summary. The client reaches the
bookies over loopback TCP, or with perf-in-process by calls, as the
standalone's broker does. perf-durable-noop runs bookies that only check,
write and fdatasync each add (no entry log, no index): the most any
bookie could do on this machine under the same load.

Then it measures the disk under the journal, at the journal's average
group size in the run: the disk taking each byte twice as a bookie writes
it (a journal stream, each group followed by fdatasync, and the same bytes
to an entry log beside it, O_DIRECT: the most any bookie that keeps both
copies on this disk can add); sequential writes each followed by
fdatasync, with O_DIRECT and through the page cache ("raw" is the better);
and 4 KiB write + fdatasync (latency). It prints the ratios of the
bookie's throughput and p99 to them. MB is 10^6 bytes.

SIGINT or SIGTERM ends the run early; the summary is still printed and the
scratch directory removed. A second signal exits at once.
` + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolvePerfBookie(a.vals)
			if err != nil {
				return err
			}
			return runtimeError(a.perfBookie(cfg))
		},
	}
	a.addSettings(cmd, perfBookieSettings)
	return cmd
}

// perfBookieConfig is the checked configuration of `magnetar perf bookie`.
type perfBookieConfig struct {
	DataDir      string // parent of the scratch directory; "" is os.TempDir()
	Bookies      int
	Ledger       client.LedgerOptions
	Load         loadConfig
	DiskDuration time.Duration // 0: no disk baseline
	InProcess    bool          // client calls, not loopback TCP
	DurableNoop  bool          // durable no-op bookies (noopbookie.go)
	// Storage is every bookie's; Dir is set per bookie, and a JournalDir
	// is the parent of the bookies' scratch journal directories.
	Storage storage.Options
}

func resolvePerfBookie(sv *settingValues) (perfBookieConfig, error) {
	var cfg perfBookieConfig
	var err error
	s := func(name string) setting { return lookupSetting(perfBookieSettings, name) }
	if cfg.DataDir, err = check(sv, s("data-dir"), func(v string) (string, error) { return v, nil }); err != nil {
		return cfg, err
	}
	for _, c := range []struct {
		name  string
		limit int
		dst   *int
	}{
		{"perf-bookies", 64, &cfg.Bookies},
		{"perf-ensemble", 64, &cfg.Ledger.EnsembleSize},
		{"perf-write-quorum", 64, &cfg.Ledger.WriteQuorum},
		{"perf-ack-quorum", 64, &cfg.Ledger.AckQuorum},
		{"perf-entry-size", entry.MaxSize - entry.HeaderSize, &cfg.Load.EntrySize},
		{"perf-in-flight", 1_000_000, &cfg.Load.InFlight},
	} {
		if *c.dst, err = check(sv, s(c.name), parseCount(c.limit)); err != nil {
			return cfg, err
		}
	}
	if l := cfg.Ledger; !(cfg.Bookies >= l.EnsembleSize && l.EnsembleSize >= l.WriteQuorum && l.WriteQuorum >= l.AckQuorum) {
		return cfg, fmt.Errorf("perf-bookies %d, perf-ensemble %d, perf-write-quorum %d, perf-ack-quorum %d: want bookies ≥ ensemble ≥ write quorum ≥ ack quorum",
			cfg.Bookies, l.EnsembleSize, l.WriteQuorum, l.AckQuorum)
	}
	if cfg.Load.Duration, err = check(sv, s("perf-duration"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.Load.Rate, err = check(sv, s("perf-rate"), parseRateOf("entries")); err != nil {
		return cfg, err
	}
	if cfg.DiskDuration, err = check(sv, s("perf-disk-duration"), parseNonNegativeDuration); err != nil {
		return cfg, err
	}
	if cfg.InProcess, err = check(sv, s("perf-in-process"), parseBool); err != nil {
		return cfg, err
	}
	if cfg.DurableNoop, err = check(sv, s("perf-durable-noop"), parseBool); err != nil {
		return cfg, err
	}
	cfg.Load.Interval = time.Second
	if cfg.Storage, err = resolveStorage(sv, ""); err != nil {
		return cfg, err
	}
	if cfg.DurableNoop && cfg.Storage.NoSync {
		return cfg, errors.New("perf-durable-noop with journal-sync false: the durable no-op bookies always fdatasync (they exist to measure that)")
	}
	return cfg, nil
}

// parseCount returns a parser of whole numbers from 1 to limit.
func parseCount(limit int) func(string) (int, error) { return parseIntRange(1, limit) }

// parseIntRange returns a parser of whole numbers from lo to hi.
func parseIntRange(lo, hi int) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			return 0, fmt.Errorf("want a whole number from %d to %d", lo, hi)
		}
		return n, nil
	}
}

// parseRateOf returns a parser of rates of what per second: 0 means as
// fast as possible.
func parseRateOf(what string) func(string) (float64, error) {
	return func(s string) (float64, error) {
		r, err := strconv.ParseFloat(s, 64)
		if err != nil || r < 0 || r > 1e8 || math.IsNaN(r) {
			return 0, fmt.Errorf("want %s per second: 0 (as fast as possible) or a positive number", what)
		}
		return r, nil
	}
}

func parseNonNegativeDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("want a duration such as 5s, or 0")
	}
	return d, nil
}

// perfBookie runs `magnetar perf bookie`: it starts the cluster in a
// scratch directory, runs the load, stops the cluster and deletes its data,
// then measures the disk there. Results go to stdout, logs to stderr.
func (a *app) perfBookie(cfg perfBookieConfig) error {
	sigs, stopSignals := a.notify()
	defer stopSignals()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case sig := <-sigs:
			a.logger.Info("signal: ending the run early", "signal", sig.String())
			stopSignals() // a second signal kills the process
			cancel()
		case <-ctx.Done():
		}
	}()
	out := a.stdout

	dir, err := scratchDir(cfg.DataDir, "magnetar-perf-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	diskDir, journalRoot := dir, ""
	if cfg.Storage.JournalDir != "" {
		if journalRoot, err = scratchDir(cfg.Storage.JournalDir, "magnetar-perf-journal-"); err != nil {
			return err
		}
		defer os.RemoveAll(journalRoot)
		diskDir = journalRoot
	}
	fmt.Fprintf(out, "magnetar perf bookie: %s\n", cfg.describe())
	fmt.Fprintf(out, "scratch directory %s (removed at the end)\n", dir)
	if journalRoot != "" {
		fmt.Fprintf(out, "journals in %s (removed at the end)\n", journalRoot)
	}

	cl, err := startPerfCluster(ctx, dir, journalRoot, cfg, a.hostname, a.logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted during startup
		}
		return err
	}
	defer cl.close()
	w, err := cl.client.CreateLedger(ctx, cfg.Ledger)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintln(out, progressHeader)
	res, loadErr := runLoad(ctx, w, cfg.Load, func(iv loadInterval) { printInterval(out, iv, cfg.Load.EntrySize) })
	printSummary(out, res, cfg.Load.EntrySize)
	if loadErr == nil {
		closeCtx, cancelClose := context.WithTimeout(context.Background(), shutdownTimeout)
		loadErr = w.Close(closeCtx)
		cancelClose()
	}
	fsyncs, fsyncBytes := cl.journal.counts()
	if err := errors.Join(loadErr, cl.close()); err != nil {
		return err
	}
	// Deleting the bookies' files drops their dirty pages, which would
	// otherwise be written back during the disk baseline.
	for _, d := range cl.dirs {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	block, observed := baselineBlock(fsyncs, fsyncBytes, cfg)
	if observed {
		fmt.Fprintf(out, "journal: %d fsyncs, each covering %s and %.1f entries on average\n",
			fsyncs, kib(block), float64(res.Entries)*float64(cfg.Ledger.WriteQuorum)/float64(fsyncs))
	}

	if cfg.DiskDuration == 0 || ctx.Err() != nil {
		fmt.Fprintln(out, "disk baseline: skipped")
		return nil
	}
	limits, err := diskBaseline(ctx, out, diskDir, block, observed, cfg.DiskDuration)
	if err != nil {
		return err
	}
	printRatios(out, res, cfg.Load.EntrySize, limits)
	return nil
}

// diskLimits are the disk's figures perf bookie compares a run with.
type diskLimits struct {
	Buffered *syncedWrites // block + fdatasync through the page cache
	Direct   *syncedWrites // the same with O_DIRECT; nil where refused
	Twice    *syncedWrites // each byte twice, journal and entry log; nil where O_DIRECT is refused
	Latency  *syncedWrites // 4 KiB write + fdatasync
}

// Raw is the disk's fsync'd write bandwidth at the block size: the better
// of the page cache and O_DIRECT, the way the disk takes the bytes best.
func (l *diskLimits) Raw() *syncedWrites {
	if l.Direct != nil && l.Direct.MBps() > l.Buffered.MBps() {
		return l.Direct
	}
	return l.Buffered
}

// diskBaseline measures the disk in dir for d and prints the results, a
// quarter of d each: each byte written twice as a bookie writes it (first,
// on the disk as rested as the run left it, so the ceiling is a generous
// one), fdatasync'd sequential writes of block bytes with O_DIRECT, then
// through the page cache, then the latency of 4 KiB write + fdatasync.
// observed says block is the run's average bytes per journal fsync.
func diskBaseline(ctx context.Context, out io.Writer, dir string, block int, observed bool, d time.Duration) (*diskLimits, error) {
	how := "the run's average bytes per journal fsync"
	if !observed {
		how = "min(perf-in-flight × perf-entry-size, journal-max-group-bytes): no journal fsync observed"
	}
	directBlock := (block + 4095) &^ 4095 // O_DIRECT writes whole 4 KiB blocks
	// An O_DIRECT measurement where the file system refuses O_DIRECT is
	// skipped (nil), with a line that says why.
	direct := func(what string, measure func(context.Context, string, int, time.Duration) (*syncedWrites, error), line func(*syncedWrites) string) (*syncedWrites, error) {
		r, err := measure(ctx, dir, directBlock, d/4)
		switch {
		case errors.Is(err, errDirectUnsupported):
			fmt.Fprintf(out, "disk: %s: skipped (%v)\n", what, err)
		case err != nil:
			return nil, fmt.Errorf("disk baseline: %w", err)
		default:
			fmt.Fprintf(out, "disk: %s\n", line(r))
		}
		return r, nil
	}
	var l diskLimits
	var err error
	if l.Twice, err = direct("each byte twice", measureTwiceWrites, func(r *syncedWrites) string {
		return fmt.Sprintf("each byte twice, as a bookie writes it (a journal of %s groups, each + fdatasync, and the same bytes to an entry log beside it; O_DIRECT) for %.1fs: %.2f MB/s of payload (%.2f MB/s to the disk)",
			kib(directBlock), r.Elapsed.Seconds(), r.MBps(), 2*r.MBps())
	}); err != nil {
		return nil, err
	}
	if l.Direct, err = direct("O_DIRECT", measureDirectWrites, func(r *syncedWrites) string {
		return fmt.Sprintf("sequential %s O_DIRECT writes + fdatasync for %.1fs: %.2f MB/s, %.0f syncs/s, p99 %.3f ms",
			kib(directBlock), r.Elapsed.Seconds(), r.MBps(), perSecond(r.Writes, r.Elapsed), ms(r.Latency.Quantile(0.99)))
	}); err != nil {
		return nil, err
	}
	if l.Buffered, err = measureSyncedWrites(ctx, vfs.Default, dir, block, d/4); err != nil {
		return nil, fmt.Errorf("disk baseline: %w", err)
	}
	fmt.Fprintf(out, "disk: sequential %s writes (%s) + fdatasync for %.1fs: %.2f MB/s, %.0f syncs/s, p99 %.3f ms\n",
		kib(block), how, l.Buffered.Elapsed.Seconds(), l.Buffered.MBps(), perSecond(l.Buffered.Writes, l.Buffered.Elapsed), ms(l.Buffered.Latency.Quantile(0.99)))
	if l.Latency, err = measureSyncedWrites(ctx, vfs.Default, dir, 4<<10, d/4); err != nil {
		return nil, fmt.Errorf("disk baseline: %w", err)
	}
	fmt.Fprintf(out, "disk: 4 KiB write + fdatasync for %.1fs: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
		l.Latency.Elapsed.Seconds(), ms(l.Latency.Latency.Quantile(0.5)), ms(l.Latency.Latency.Quantile(0.99)), ms(l.Latency.Latency.Max()))
	return &l, nil
}

// scratchDir makes a new directory in parent (os.TempDir() if "").
func scratchDir(parent, pattern string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("scratch directory: %w", err)
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", fmt.Errorf("scratch directory: %w", err)
	}
	return dir, nil
}

func (cfg perfBookieConfig) describe() string {
	mode := fmt.Sprintf("closed loop, up to %d adds in flight", cfg.Load.InFlight)
	if cfg.Load.Rate > 0 {
		mode = fmt.Sprintf("open loop at %g entries/s (up to %d in flight)", cfg.Load.Rate, cfg.Load.InFlight)
	}
	sync := "on"
	if cfg.Storage.NoSync {
		sync = "off"
	}
	transport := "loopback TCP"
	if cfg.InProcess {
		transport = "in-process calls"
	}
	kind := "bookie(s)"
	if cfg.DurableNoop {
		kind = "durable no-op bookie(s) (checksum, write, fdatasync; nothing stored to read)"
	}
	l := cfg.Ledger
	return fmt.Sprintf("%d %s over %s, ledger E/Qw/Qa %d/%d/%d, %d-byte entries, %s, for %s, journal fsync %s",
		cfg.Bookies, kind, transport, l.EnsembleSize, l.WriteQuorum, l.AckQuorum, cfg.Load.EntrySize, mode, cfg.Load.Duration, sync)
}

// baselineBlock is the write size of the bandwidth baseline: the bytes
// the run's journal fsyncs covered on average (observed), or else what one
// full window of adds would make.
func baselineBlock(fsyncs, fsyncBytes int64, cfg perfBookieConfig) (block int, observed bool) {
	if fsyncs > 0 && fsyncBytes >= fsyncs {
		return int(fsyncBytes / fsyncs), true
	}
	maxGroup := cfg.Storage.Journal.MaxGroupBytes
	if maxGroup <= 0 {
		maxGroup = 512 << 10
	}
	return min(cfg.Load.InFlight*cfg.Load.EntrySize, maxGroup), false
}

// perfCluster is the in-process cluster a perf run adds to.
type perfCluster struct {
	store   *local.Store
	bookies []*bookie.Bookie
	noops   []*noopBookie // instead of bookies (perf-durable-noop)
	client  *client.Client
	journal *journalCounter // every bookie's journal OnSync
	dirs    []string        // the bookies' data and journal directories
}

// startPerfCluster starts cfg.Bookies bookies on 127.0.0.1:0 with data in
// dir/bookie<i> (journals in journalRoot/bookie<i> if journalRoot is set),
// or durable no-op bookies with their files there, registered in a local
// metadata store in dir/meta, and a client (calling the bookies in-process
// if cfg.InProcess).
func startPerfCluster(ctx context.Context, dir, journalRoot string, cfg perfBookieConfig, hostname func() (string, error), log *slog.Logger) (*perfCluster, error) {
	store, err := local.Open(filepath.Join(dir, "meta"), local.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	cl := &perfCluster{store: store, journal: &journalCounter{}}
	locals := map[string]client.Local{}
	for i := range cfg.Bookies {
		if cfg.DurableNoop {
			d := filepath.Join(cmp.Or(journalRoot, dir), fmt.Sprintf("noop%d", i))
			cl.dirs = append(cl.dirs, d)
			err := os.Mkdir(d, 0o755)
			var b *noopBookie
			if err == nil {
				b, err = startNoopBookie(ctx, d, store, func(n int) { cl.journal.onSync(0, 0, n) }, log)
			}
			if err != nil {
				cl.close()
				return nil, err
			}
			cl.noops = append(cl.noops, b)
			locals[b.id] = b.server
			continue
		}
		bo := cfg.Storage
		bo.Journal.OnSync = cl.journal.onSync
		bo.Dir = filepath.Join(dir, fmt.Sprintf("bookie%d", i))
		cl.dirs = append(cl.dirs, bo.Dir)
		if journalRoot != "" {
			bo.JournalDir = filepath.Join(journalRoot, fmt.Sprintf("bookie%d", i))
			cl.dirs = append(cl.dirs, bo.JournalDir)
		}
		b, err := startBookie(ctx, "127.0.0.1:0", "", hostname, bo, store, log)
		if err != nil {
			cl.close()
			return nil, err
		}
		cl.bookies = append(cl.bookies, b)
		locals[b.ID()] = b.Local()
	}
	cc := client.Config{Meta: store, Logger: log}
	if cfg.InProcess {
		cc.Local = func(addr string) client.Local { return locals[addr] }
	}
	if cl.client, err = client.New(cc); err != nil {
		cl.close()
		return nil, err
	}
	return cl, nil
}

// close stops the client, the bookies and the store; a second call does
// nothing.
func (cl *perfCluster) close() error {
	var err error
	if cl.client != nil {
		err = cl.client.Close()
		cl.client = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, b := range cl.bookies {
		err = errors.Join(err, b.Shutdown(ctx))
	}
	for _, b := range cl.noops {
		err = errors.Join(err, b.shutdown(ctx))
	}
	cl.bookies, cl.noops = nil, nil
	if cl.store != nil {
		err = errors.Join(err, cl.store.Close())
		cl.store = nil
	}
	return err
}

const progressHeader = "     time   entries/s      MB/s    p50 ms    p99 ms  p99.9 ms    max ms"

func printInterval(w io.Writer, iv loadInterval, entrySize int) {
	h := iv.Latency
	n := int64(h.Count())
	fmt.Fprintf(w, "%8.2fs %11.0f %9.2f %9.3f %9.3f %9.3f %9.3f\n", iv.At.Seconds(),
		perSecond(n, iv.Length), mbps(n*int64(entrySize), iv.Length),
		ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()))
}

func printSummary(w io.Writer, res *loadResult, entrySize int) {
	bytes := res.Entries * int64(entrySize)
	fmt.Fprintf(w, "summary: %d entries, %.2f MB in %.2fs: %.0f entries/s, %.2f MB/s\n",
		res.Entries, float64(bytes)/1e6, res.Elapsed.Seconds(),
		perSecond(res.Entries, res.Elapsed), mbps(bytes, res.Elapsed))
	h := &res.Latency
	fmt.Fprintf(w, "latency: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms, mean %.3f ms\n",
		ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Quantile(0.999)), ms(h.Max()), ms(h.Mean()))
}

// printRatios compares the run with the disk's limits (the goals are
// issue 3's): throughput with the raw bandwidth at the run's journal group
// size, and with what the disk allows a bookie that writes each byte to
// its journal and to an entry log; p99 with the raw fsync p99.
func printRatios(w io.Writer, res *loadResult, entrySize int, l *diskLimits) {
	got, raw := mbps(res.Entries*int64(entrySize), res.Elapsed), l.Raw()
	how := "through the page cache"
	if raw == l.Direct {
		how = "O_DIRECT"
	}
	fmt.Fprintf(w, "ratio: throughput %.2f MB/s ÷ raw %.2f MB/s (%s, the better) at %s = %.2f (goal ≥ 0.70 at full load)\n",
		got, raw.MBps(), how, kib(raw.Block), ratio(got, raw.MBps()))
	if l.Twice != nil {
		ceiling := ratio(l.Twice.MBps(), raw.MBps())
		verdict := "within it"
		if ceiling < 0.70 {
			verdict = "so the goal is unattainable on this disk"
		}
		fmt.Fprintf(w, "ratio: each byte twice %.2f MB/s ÷ raw = %.2f: the most a bookie with its journal and entry logs on this disk can reach, %s; throughput ÷ it = %.2f\n",
			l.Twice.MBps(), ceiling, verdict, ratio(got, l.Twice.MBps()))
	}
	p99, rawP99 := ms(res.Latency.Quantile(0.99)), ms(l.Latency.Latency.Quantile(0.99))
	fmt.Fprintf(w, "ratio: p99 %.3f ms ÷ raw fsync p99 %.3f ms = %.2f (goal ≤ 2 at half load)\n",
		p99, rawP99, ratio(p99, rawP99))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func kib(n int) string { return fmt.Sprintf("%.1f KiB", float64(n)/1024) }
