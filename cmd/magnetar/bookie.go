package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta"
)

// bookieStorageSettings tune a bookie's storage; `magnetar bookie` and
// `magnetar standalone` (which runs one in-process) share them.
var bookieStorageSettings = []setting{
	{"journal-dir", "", "dir", "bookie journal directory, ideally on its own disk (default: <data-dir>/bookie/journal)"},
	{"journal-sync", "true", "bool", "fsync the journal before acknowledging adds; false risks losing acknowledged entries on power loss or a machine crash (throughput tests only)"},
	{"journal-max-group-bytes", "524288", "bytes", "group commit: flush the journal when a group of adds reaches this many bytes"},
	{"journal-max-group-wait", "1ms", "duration", "group commit: longest an add waits for its group to fill (only with journal-flush-when-queue-empty=false)"},
	{"journal-flush-when-queue-empty", "true", "bool", "group commit: flush as soon as no more adds are queued (lowest latency)"},
	{"journal-direct-io", "true", "bool", "write journal records with O_DIRECT (not through the page cache, which only recovery would read); where the file system refuses it (at open or at the first write), the bookie logs a warning and uses the page cache"},
	{"journal-reuse-files", "8", "count", "journal files a checkpoint released that are kept to be written over by later files (cheaper fsyncs, no deletions on the write path); others are deleted gradually; 0 deletes them all"},
	{"entry-log-max-size", "1073741824", "bytes", "start a new entry log when the current one passes this size"},
	{"entry-log-direct-io", "true", "bool", "write entry logs with O_DIRECT, not through the page cache (less CPU per byte written, no page-cache writeback stalls; catching-up reads come from the disk, with O_DIRECT too); false writes and reads them through the page cache; where the file system refuses O_DIRECT (at open or at a write), the bookie logs a warning and uses the page cache"},
	{"entry-log-page-cache-keep", "0", "bytes", "with entry-log-direct-io=false: keep only the newest this many written bytes of entry logs in the page cache, dropping older pages once written back (Linux); reads of older entries then go to the disk; 0 leaves the page cache to the kernel"},
	{"checkpoint-interval", "10s", "duration", "how often entry logs and index are made durable and old journal files released; a checkpoint also follows each finished entry log (entry-log-max-size), so that heavy writes keep about one entry log of journal"},
	{"gc-interval", "60s", "duration", "how often the space of deleted ledgers is reclaimed"},
	{"gc-min-live-ratio", "0.5", "ratio", "compact an entry log when less than this fraction of it is still live"},
	{"disk-usage-threshold", "0.95", "ratio", "when the disk of a bookie directory is fuller than this share, the bookie refuses adds (clients see it read-only and write elsewhere) until the disk is back under disk-usage-warn-threshold; reads, fences and deletes go on; 1 never refuses"},
	{"disk-usage-warn-threshold", "0.90", "ratio", "log a warning when the disk of a bookie directory is fuller than this share; also the level a full disk must get back under before the bookie takes adds again"},
	{"disk-check-interval", "10s", "duration", "how often the bookie looks at the usage of its directories' disks"},
}

// bookieSettings are the settings of `magnetar bookie`.
var bookieSettings = append([]setting{
	{"data-dir", "./data", "dir", "directory for the bookie's data (<data-dir>/bookie); created if missing"},
	{"bookie-listen", "0.0.0.0:3181", "host:port", "bookie protocol listen address"},
	{"advertised-host", "", "host", "host clients dial and the bookie's identity (default: the host of bookie-listen, or this machine's hostname for 0.0.0.0)"},
	{"metadata-store", "local:", "url", "metadata store: zk:HOST:PORT[,HOST:PORT...][/CHROOT] for a cluster; local: (embedded, in <data-dir>/meta) for a single machine"},
	{"zk-session-timeout", "30s", "duration", "ZooKeeper session timeout, for zk: metadata stores"},
	{"autorecovery", "true", "bool", "run auto-recovery: take part in the election of the cluster's auditor, and re-replicate the ledgers of lost bookies"},
	{"autorecovery-audit-interval", "60s", "duration", "auto-recovery: how often the auditor checks every ledger (besides on every change of the available bookies)"},
	{"autorecovery-grace-period", "30s", "duration", "auto-recovery: how long a bookie must be gone before its ledgers are re-replicated (a restart within it copies nothing)"},
}, bookieStorageSettings...)

func newBookieCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie: a storage node that keeps ledger entries",
		Example: `  magnetar bookie --metadata-store zk:zk1:2181,zk2:2181/magnetar --data-dir /data/bookie
  magnetar bookie --metadata-store zk:zk1:2181/magnetar --journal-dir /ssd/journal --bookie-listen 0.0.0.0:3181`,
		Long: `Run a bookie: a storage node that keeps ledger entries durably.

Adds are acknowledged once fsync'd to the journal (group commit); entries are
also written to entry logs and indexed. The bookie registers itself in the
metadata store under /bookies/available/<host:port> and checks the cookie in
its directories against the metadata store, so a bookie whose disk was wiped
cannot rejoin under its old identity.

With autorecovery (the default), bookies elect one auditor among them that
marks the ledgers of bookies gone for longer than the grace period, and each
bookie re-replicates marked ledgers to the others (docs/bookies.md).

Stops on SIGTERM or SIGINT: deregisters, answers requests in flight, closes
storage. A second signal exits at once.
` + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveBookie(a.vals)
			if err != nil {
				return err
			}
			return runtimeError(a.runBookie(cfg))
		},
	}
	a.addSettings(cmd, bookieSettings)
	return cmd
}

type bookieConfig struct {
	nodeConfig
	Listen       string
	Storage      storage.Options
	AutoRecovery bool
	// AuditInterval and GracePeriod configure auto-recovery.
	AuditInterval, GracePeriod time.Duration
}

func parseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("want true or false")
	}
	return b, nil
}

func parsePositiveInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive whole number")
	}
	return n, nil
}

func parsePageCacheKeep(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 0 && n < storage.MinEntryLogPageCacheKeep {
		return 0, fmt.Errorf("want 0 (off) or a number of bytes from %d", storage.MinEntryLogPageCacheKeep)
	}
	return n, nil
}

func parseRatio(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, errors.New("want a number from 0 to 1")
	}
	return f, nil
}

// resolveStorage reads the bookie storage settings; dataDir is the
// command's data directory.
func resolveStorage(sv *settingValues, dataDir string) (storage.Options, error) {
	s := func(name string) setting { return lookupSetting(bookieStorageSettings, name) }
	o := storage.Options{Dir: filepath.Join(dataDir, "bookie")}
	var err error
	if o.JournalDir, err = check(sv, s("journal-dir"), func(v string) (string, error) { return v, nil }); err != nil {
		return o, err
	}
	sync, err := check(sv, s("journal-sync"), parseBool)
	if err != nil {
		return o, err
	}
	o.NoSync = !sync
	groupBytes, err := check(sv, s("journal-max-group-bytes"), parsePositiveInt)
	if err != nil {
		return o, err
	}
	groupWait, err := check(sv, s("journal-max-group-wait"), parsePositiveDuration)
	if err != nil {
		return o, err
	}
	flushEmpty, err := check(sv, s("journal-flush-when-queue-empty"), parseBool)
	if err != nil {
		return o, err
	}
	direct, err := check(sv, s("journal-direct-io"), parseBool)
	if err != nil {
		return o, err
	}
	reuse, err := check(sv, s("journal-reuse-files"), parseIntRange(0, 1000))
	if err != nil {
		return o, err
	}
	if reuse == 0 {
		reuse = -1 // journal.Options: negative for none
	}
	o.Journal = journal.Options{MaxGroupBytes: int(groupBytes), MaxGroupWait: groupWait, NoFlushWhenQueueEmpty: !flushEmpty,
		RecycledFiles: reuse, BufferedIO: !direct}
	if o.EntryLogMaxSize, err = check(sv, s("entry-log-max-size"), parsePositiveInt); err != nil {
		return o, err
	}
	logDirect, err := check(sv, s("entry-log-direct-io"), parseBool)
	if err != nil {
		return o, err
	}
	o.EntryLogDirectIO = logDirect
	if o.EntryLogPageCacheKeep, err = check(sv, s("entry-log-page-cache-keep"), parsePageCacheKeep); err != nil {
		return o, err
	}
	if o.EntryLogDirectIO && o.EntryLogPageCacheKeep > 0 {
		return o, fmt.Errorf("entry-log-page-cache-keep %d (from %s) needs entry-log-direct-io=false: with O_DIRECT (the default) the entry logs take no page cache to keep",
			o.EntryLogPageCacheKeep, sv.source(s("entry-log-page-cache-keep")))
	}
	if o.CheckpointInterval, err = check(sv, s("checkpoint-interval"), parsePositiveDuration); err != nil {
		return o, err
	}
	if o.GCInterval, err = check(sv, s("gc-interval"), parsePositiveDuration); err != nil {
		return o, err
	}
	if o.GCMinLiveRatio, err = check(sv, s("gc-min-live-ratio"), parseRatio); err != nil {
		return o, err
	}
	if o.DiskUsageThreshold, err = check(sv, s("disk-usage-threshold"), parseShare); err != nil {
		return o, err
	}
	if o.DiskUsageWarnThreshold, err = check(sv, s("disk-usage-warn-threshold"), parseShare); err != nil {
		return o, err
	}
	if o.DiskUsageWarnThreshold > o.DiskUsageThreshold && sv.source(s("disk-usage-warn-threshold")) == "default" {
		o.DiskUsageWarnThreshold = o.DiskUsageThreshold // as the storage does with its own default
	}
	if o.DiskUsageWarnThreshold > o.DiskUsageThreshold {
		return o, fmt.Errorf("disk-usage-warn-threshold %g (from %s) is above disk-usage-threshold %g (from %s): the warning comes first",
			o.DiskUsageWarnThreshold, sv.source(s("disk-usage-warn-threshold")), o.DiskUsageThreshold, sv.source(s("disk-usage-threshold")))
	}
	if o.DiskCheckInterval, err = check(sv, s("disk-check-interval"), parsePositiveDuration); err != nil {
		return o, err
	}
	return o, nil
}

// parseShare is a share of a whole: above 0, at most 1.
func parseShare(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0 && f <= 1) { // NaN too
		return 0, errors.New("want a number above 0 and at most 1")
	}
	return f, nil
}

func resolveBookie(sv *settingValues) (bookieConfig, error) {
	var cfg bookieConfig
	var err error
	if cfg.nodeConfig, err = resolveNode(sv, bookieSettings); err != nil {
		return cfg, err
	}
	s := func(name string) setting { return lookupSetting(bookieSettings, name) }
	if cfg.Listen, err = check(sv, s("bookie-listen"), parseListen); err != nil {
		return cfg, err
	}
	if cfg.AutoRecovery, err = check(sv, s("autorecovery"), parseBool); err != nil {
		return cfg, err
	}
	if cfg.AuditInterval, err = check(sv, s("autorecovery-audit-interval"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.GracePeriod, err = check(sv, s("autorecovery-grace-period"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	cfg.Storage, err = resolveStorage(sv, cfg.DataDir)
	return cfg, err
}

func nonEmpty(v string) (string, error) {
	if v == "" {
		return "", errors.New("must not be empty")
	}
	return v, nil
}

// startBookie listens and starts a bookie on store. Its identity is the
// advertised address, which must stay the same across restarts: ledger
// metadata names bookies by it.
func startBookie(ctx context.Context, listenAddr, configuredHost string, hostname func() (string, error), o storage.Options, store meta.Store, log *slog.Logger) (*bookie.Bookie, error) {
	host, err := advertisedHost(configuredHost, listenAddr, hostname)
	if err != nil {
		return nil, fmt.Errorf("bookie listener: %w", err)
	}
	ln, err := listen("bookie", listenAddr)
	if err != nil {
		return nil, err
	}
	// With port 0 (tests), the identity is the port actually bound.
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	b, err := bookie.Start(ctx, bookie.Config{
		Listener: ln,
		ID:       net.JoinHostPort(host, port),
		Storage:  o,
		Meta:     store,
		Logger:   log.With("component", "bookie"),
		Version:  currentBuild().Version,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	return b, nil
}

// bookieProcess runs `magnetar bookie`.
func (a *app) bookie(cfg bookieConfig) error {
	sigs, stopSignals := a.notify()
	defer stopSignals()
	log := a.logger
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	ctx, started := watchStartup(sigs)
	store, err := openMetadataStore(ctx, cfg.MetadataStore, cfg.DataDir, cfg.ZKSessionTimeout, log)
	if err != nil {
		started()
		return err
	}
	b, err := startBookie(ctx, cfg.Listen, cfg.AdvertisedHost, a.hostname, cfg.Storage, store, log)
	if sig := started(); sig != nil {
		log.Info("signal during startup; stopping", "signal", sig.String())
		switch {
		case err == nil:
			err = b.Shutdown(context.Background())
		case errors.Is(err, context.Canceled):
			err = nil // startup cut short, as asked
		}
		return errors.Join(err, store.Close())
	}
	if err != nil {
		store.Close()
		return err
	}
	stopRecovery := func() {}
	if cfg.AutoRecovery {
		if stopRecovery, err = startAutoRecovery(cfg, b.ID(), store, log); err != nil {
			return errors.Join(err, b.Shutdown(context.Background()), store.Close())
		}
	}
	log.Info("magnetar bookie ready", "id", b.ID(), "listen", cfg.Listen, "data-dir", cfg.DataDir,
		"metadata-store", cfg.MetadataStore.String(), "autorecovery", cfg.AutoRecovery)
	return awaitShutdown(log, sigs, nil, func(ctx context.Context) error {
		stopRecovery()
		return errors.Join(b.Shutdown(ctx), store.Close())
	}, shutdownTimeout)
}

// startAutoRecovery starts the auditor candidate and the replication
// worker of bookie id (see bookie/autorecovery) and returns what stops
// them.
func startAutoRecovery(cfg bookieConfig, id string, store meta.Store, log *slog.Logger) (stop func(), err error) {
	c, err := client.New(client.Config{Meta: store, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("auto-recovery: %w", err)
	}
	svc, err := autorecovery.Start(autorecovery.Config{Meta: store, Client: c, BookieID: id,
		AuditInterval: cfg.AuditInterval, GracePeriod: cfg.GracePeriod, Logger: log.With("component", "autorecovery")})
	if err != nil {
		c.Close()
		return nil, err
	}
	return func() {
		svc.Close()
		c.Close()
	}, nil
}
