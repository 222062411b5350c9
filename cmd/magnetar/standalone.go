package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/bookie/storage"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/protocol/admin"
)

// Shutdown budget: the whole shutdown fits in shutdownTimeout, leaving
// margin under the 10 s an orchestrator typically waits before SIGKILL.
// HTTP connections get at most httpDrainTimeout of it, so closing the
// metadata store keeps the rest.
const (
	shutdownTimeout  = 9 * time.Second
	httpDrainTimeout = 5 * time.Second
)

// nodeConfig holds the settings every server process has: where its data
// is, how it is reached, and its metadata store.
type nodeConfig struct {
	DataDir          string
	AdvertisedHost   string // "" means: per listener (see advertisedHost)
	MetadataStore    metadataStoreURL
	ZKSessionTimeout time.Duration
}

// resolveNode checks the node settings, as declared in list.
func resolveNode(sv *settingValues, list []setting) (nodeConfig, error) {
	var cfg nodeConfig
	var err error
	s := func(name string) setting { return lookupSetting(list, name) }
	if cfg.DataDir, err = check(sv, s("data-dir"), nonEmpty); err != nil {
		return cfg, err
	}
	if cfg.AdvertisedHost, err = check(sv, s("advertised-host"), parseAdvertisedHost); err != nil {
		return cfg, err
	}
	if cfg.MetadataStore, err = check(sv, s("metadata-store"), parseMetadataStore); err != nil {
		return cfg, err
	}
	cfg.ZKSessionTimeout, err = check(sv, s("zk-session-timeout"), parsePositiveDuration)
	return cfg, err
}

// standaloneConfig is the checked configuration of `magnetar standalone`.
type standaloneConfig struct {
	nodeConfig
	PulsarListen  string // host:port
	KafkaListen   string // host:port
	HTTPListen    string // host:port
	BookieListen  string
	PprofListen   string // host:port; "" serves no profiles
	BookieStorage storage.Options
	Broker        brokerConfig
}

func newStandaloneCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use: "standalone",
		Example: `  magnetar standalone                                  # data in ./data, Pulsar on :6650, HTTP on :8080
  magnetar standalone --data-dir /var/lib/magnetar --http-listen 127.0.0.1:8080
  magnetar standalone --metadata-store zk:127.0.0.1:2181/magnetar
  magnetar standalone --auto-topic-creation partitioned --auto-topic-partitions 4
  MAGNETAR_BROKER_DEDUPLICATION_ENABLED=true magnetar standalone --config magnetar.yaml`,
		Short: "Run Magnetar in one process, with all its data in one directory",
		Long: `Run Magnetar in one process, with all data under --data-dir.

Serves HTTP on --http-listen: GET /status (200 while serving) and
GET /metrics (Prometheus), and the Pulsar binary protocol on --pulsar-listen
(topics in persistent://tenant/namespace/topic; public/default is always
there), and the Kafka protocol on --kafka-listen (a Kafka topic "foo" is
persistent://public/default/foo; see --kafka-namespace).

Stops on SIGTERM or SIGINT: stops accepting, finishes requests in flight,
closes the metadata store and exits 0 within 10 seconds. A second signal
exits at once with code 1.
` + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveStandalone(a.vals)
			if err != nil {
				return err
			}
			return a.runStandalone(cfg)
		},
	}
	a.addSettings(cmd, standaloneSettings)
	return cmd
}

// resolveStandalone checks the merged settings of standalone.
func resolveStandalone(sv *settingValues) (standaloneConfig, error) {
	var cfg standaloneConfig
	var err error
	if cfg.nodeConfig, err = resolveNode(sv, standaloneSettings); err != nil {
		return cfg, err
	}
	s := func(name string) setting { return lookupSetting(standaloneSettings, name) }
	for _, l := range []struct {
		name string
		dst  *string
	}{{"pulsar-listen", &cfg.PulsarListen}, {"kafka-listen", &cfg.KafkaListen}, {"http-listen", &cfg.HTTPListen}, {"bookie-listen", &cfg.BookieListen}} {
		if *l.dst, err = check(sv, s(l.name), parseListen); err != nil {
			return cfg, err
		}
	}
	if cfg.PprofListen, err = check(sv, s("pprof-listen"), parseOptionalListen); err != nil {
		return cfg, err
	}
	if cfg.Broker, err = resolveBroker(sv, standaloneSettings); err != nil {
		return cfg, err
	}
	cfg.BookieStorage, err = resolveStorage(sv, cfg.DataDir)
	return cfg, err
}

// parseOptionalListen is parseListen, with "" for no listener.
func parseOptionalListen(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	return parseListen(s)
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("want a duration such as 30s or 1m")
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

// standalone runs `magnetar standalone` until a signal stops it.
func (a *app) standalone(cfg standaloneConfig) error {
	sigs, stopSignals := a.notify()
	defer stopSignals()
	log := a.logger

	// A signal during startup cancels it and the process exits 0 without
	// serving.
	startCtx, started := watchStartup(sigs)
	s, err := startStandalone(startCtx, cfg, log, a.hostname)
	startSignal := started()
	if startSignal != nil {
		log.Info("signal during startup; stopping", "signal", startSignal.String())
		switch {
		case err == nil:
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			return runtimeError(s.shutdown(ctx))
		case errors.Is(err, context.Canceled):
			return nil // startup cut short, as asked
		}
	}
	if err != nil {
		return runtimeError(err)
	}
	s.logReady()
	return runtimeError(awaitShutdown(log, sigs, s.served, s.shutdown, shutdownTimeout))
}

// runningStandalone is a started standalone server.
type runningStandalone struct {
	cfg    standaloneConfig
	log    *slog.Logger
	store  meta.Store
	bookie *bookie.Bookie
	broker *brokerStack
	http   *admin.Server
	pprof  *pprofServer // nil without pprof-listen
	served chan error   // receives Serve's result

	pulsarAdvertised, kafkaAdvertised string
}

// startStandalone checks the data dir, opens the metadata store and every
// listener, and starts serving. On error it closes what it opened.
func startStandalone(ctx context.Context, cfg standaloneConfig, log *slog.Logger, hostname func() (string, error)) (_ *runningStandalone, err error) {
	s := &runningStandalone{cfg: cfg, log: log, served: make(chan error, 1)}
	pulsarHost, err := advertisedHost(cfg.AdvertisedHost, cfg.PulsarListen, hostname)
	if err != nil {
		return nil, fmt.Errorf("pulsar listener: %w", err)
	}
	kafkaHost, err := advertisedHost(cfg.AdvertisedHost, cfg.KafkaListen, hostname)
	if err != nil {
		return nil, fmt.Errorf("kafka listener: %w", err)
	}
	s.pulsarAdvertised = advertisedAddr(pulsarHost, cfg.PulsarListen)
	s.kafkaAdvertised = advertisedAddr(kafkaHost, cfg.KafkaListen)

	if err := prepareDataDir(cfg.DataDir); err != nil {
		return nil, err
	}

	// Listeners before the store: a busy port is the likeliest mistake and
	// should not wait for a ZooKeeper connection.
	httpLn, err := listen("http", cfg.HTTPListen)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			httpLn.Close()
		}
	}()

	s.store, err = openMetadataStore(ctx, cfg.MetadataStore, cfg.DataDir, cfg.ZKSessionTimeout, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.store.Close()
		}
	}()

	reg := newMetricsRegistry(currentBuild())
	if cfg.BookieStorage.Journal.OnSync, err = journalSyncLatency(reg); err != nil {
		return nil, err
	}
	s.bookie, err = startBookie(ctx, cfg.BookieListen, "", hostname, cfg.BookieStorage, s.store, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.bookie.Shutdown(context.Background())
		}
	}()

	pulsarLn, err := listen("pulsar", cfg.PulsarListen)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pulsarLn.Close()
		}
	}()
	s.pulsarAdvertised = advertisedAddr(pulsarHost, pulsarLn.Addr().String())
	httpHost, err := advertisedHost(cfg.AdvertisedHost, cfg.HTTPListen, hostname)
	if err != nil {
		return nil, fmt.Errorf("http listener: %w", err)
	}
	webServiceURL := "http://" + advertisedAddr(httpHost, httpLn.Addr().String())
	cfg.Broker.ServiceURL = webServiceURL
	kafkaLn, err := listen("kafka", cfg.KafkaListen)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			kafkaLn.Close()
		}
	}()
	s.kafkaAdvertised = advertisedAddr(kafkaHost, kafkaLn.Addr().String())
	// The broker calls the in-process bookie directly (no socket, no
	// framing); other clients use its TCP listener.
	local := func(addr string) client.Local {
		if addr == s.bookie.ID() {
			return s.bookie.Local()
		}
		return nil
	}
	s.broker, err = startBroker(cfg.Broker, "standalone", s.store, brokerListeners{pulsar: pulsarLn, kafka: kafkaLn,
		pulsarAdvertised: s.pulsarAdvertised, kafkaAdvertised: s.kafkaAdvertised, localBookie: local}, reg, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.broker.close(context.Background())
		}
	}()

	s.http, err = admin.New(admin.Config{
		Listener: httpLn,
		Gatherer: reg,
		Logger:   log.With("component", "http"),
	})
	if err != nil {
		return nil, err
	}
	if err = admin.RegisterAPI(s.http, admin.APIConfig{Broker: s.broker.broker, Cluster: standaloneCluster,
		BrokerServiceURL: "pulsar://" + s.pulsarAdvertised,
		WebServiceURL:    webServiceURL,
		Meta:             s.store,
		Logger:           log.With("component", "admin")}); err != nil {
		return nil, err
	}
	if cfg.PprofListen != "" {
		if s.pprof, err = startPprof(cfg.PprofListen, log); err != nil {
			return nil, err
		}
	}
	go func() { s.served <- s.http.Serve() }()
	return s, nil
}

// pprofServer serves net/http/pprof's handlers on a listener of its own,
// apart from the admin HTTP server (for `magnetar perf all` profiles).
type pprofServer struct {
	srv *http.Server
	ln  net.Listener
}

func startPprof(addr string, log *slog.Logger) (*pprofServer, error) {
	ln, err := listen("pprof", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also allocs, heap, goroutine, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	p := &pprofServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln: ln}
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener stopped", "err", err)
		}
	}()
	return p, nil
}

// close stops serving at once: profiles under way are cut short.
func (p *pprofServer) close() error {
	if p == nil {
		return nil
	}
	return p.srv.Close()
}

// standaloneCluster is the cluster name of magnetar standalone, as in
// Pulsar's standalone.
const standaloneCluster = "standalone"

// logReady logs the one line that says the server is up, what it serves
// and what it advertises.
func (s *runningStandalone) logReady() {
	s.log.Info("magnetar standalone ready",
		"serving", "pulsar,kafka,http,bookie",
		"bookie", s.bookie.ID(),
		"http", boundAddr(s.cfg.HTTPListen, s.http.Addr()),
		"pulsar-advertised", s.pulsarAdvertised,
		"kafka-advertised", s.kafkaAdvertised,
		"data-dir", s.cfg.DataDir,
		"pprof", s.pprofAddr(),
		"metadata-store", s.metadataStore(),
		"version", currentBuild().Version,
	)
}

// pprofAddr is the bound address of the pprof listener, "" if none.
func (s *runningStandalone) pprofAddr() string {
	if s.pprof == nil {
		return ""
	}
	return boundAddr(s.cfg.PprofListen, s.pprof.ln.Addr())
}

// metadataStore describes the store in use, with a local store's
// directory filled in.
func (s *runningStandalone) metadataStore() string {
	m := s.cfg.MetadataStore
	if m.Kind == "local" {
		m.Dir = m.localDir(s.cfg.DataDir)
	}
	return m.String()
}

// shutdown drains HTTP, then closes the broker (Pulsar connections,
// topics, managed ledgers), the bookie and the metadata store, all within
// ctx.
func (s *runningStandalone) shutdown(ctx context.Context) error {
	drainCtx, cancel := context.WithTimeout(ctx, httpDrainTimeout)
	defer cancel()
	httpErr := s.http.Shutdown(drainCtx)
	s.pprof.close()
	if httpErr != nil {
		s.log.Warn("http connections did not drain in time; closed them", "err", httpErr)
	}
	closed := make(chan error, 1)
	go func() { closed <- errors.Join(s.broker.close(ctx), s.bookie.Shutdown(ctx), s.store.Close()) }()
	select {
	case err := <-closed:
		if err != nil {
			return errors.Join(httpErr, fmt.Errorf("closing bookie and metadata store: %w", err))
		}
	case <-ctx.Done():
		return errors.Join(httpErr, fmt.Errorf("closing bookie and metadata store: %w", ctx.Err()))
	}
	return httpErr
}

// prepareDataDir creates dir if needed and checks that files can be
// created and removed in it.
func prepareDataDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data dir %s: cannot create it: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return fmt.Errorf("data dir %s: not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("data dir %s: not writable: %w", dir, err)
	}
	return nil
}

// newMetricsRegistry returns the registry /metrics serves: Go runtime and
// process metrics and magnetar_build_info.
func newMetricsRegistry(b buildInfo) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "magnetar_build_info",
		Help: "Always 1; the labels identify the running build.",
		ConstLabels: prometheus.Labels{
			"version":    b.Version,
			"commit":     b.Commit,
			"go_version": b.GoVersion,
		},
	})
	buildInfo.Set(1)
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
	)
	return reg
}
