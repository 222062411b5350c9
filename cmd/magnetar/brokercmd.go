package main

// `magnetar broker`: a broker as its own process, on ZooKeeper, with its
// ledgers on `magnetar bookie` processes. It holds no data of its own.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/protocol/admin"
)

// brokerProcessSettings are the settings of `magnetar broker`: its own,
// then the broker's.
var brokerProcessSettings = append([]setting{
	{"pulsar-listen", "0.0.0.0:6650", "host:port", "Pulsar protocol listen address"},
	{"kafka-listen", "0.0.0.0:9092", "host:port", "Kafka protocol listen address"},
	{"http-listen", "0.0.0.0:8080", "host:port", "HTTP listen address: /status, /metrics, the admin REST API"},
	{"advertised-host", "", "host", "host that Pulsar lookups and Kafka Metadata tell clients to connect to (default: the host of each listen address, or this machine's hostname when it is 0.0.0.0 or ::)"},
	{"metadata-store", "", "url", "the cluster's ZooKeeper: zk:HOST:PORT[,HOST:PORT...][/CHROOT] (required)"},
	{"zk-session-timeout", "30s", "duration", "ZooKeeper session timeout, for zk: metadata stores"},
	{"cluster", "magnetar", "name", "the cluster this broker belongs to; it is created, with tenant public and namespace public/default, if missing"},
	{"managed-ledger-ensemble-size", "2", "count", "bookies each new ledger is striped over (E)"},
	{"managed-ledger-write-quorum", "2", "count", "bookies each entry is written to (Qw, at most E)"},
	{"managed-ledger-ack-quorum", "2", "count", "bookies that must acknowledge an entry before it is acknowledged (Qa, at most Qw)"},
	{"load-report-interval", "10s", "duration", "how often the broker writes its load (bundles, topics, message rates, CPU) into its registration, where new bundles are assigned from"},
	{"load-shed-interval", "1m", "duration", "how often the broker checks whether it is far above the cluster's average load and unloads a bundle (0: never)"},
	{"load-shed-threshold", "1.5", "ratio", "shed a bundle when this broker's bundles or message rate exceed this many times the cluster's average"},
}, brokerSettings...)

func newBrokerCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker on ZooKeeper, storing on the cluster's bookies",
		Example: `  magnetar broker --metadata-store zk:zk1:2181/magnetar --cluster prod
  magnetar broker --metadata-store zk:127.0.0.1:2181/m --managed-ledger-ensemble-size 3 --managed-ledger-write-quorum 2 --managed-ledger-ack-quorum 2`,
		Long: `Run a broker: it serves the Pulsar protocol on --pulsar-listen, the Kafka
protocol on --kafka-listen and HTTP (status, metrics, admin REST API) on
--http-listen, and keeps every topic on the bookies registered in the
metadata store (start them with magnetar bookie), each ledger replicated
E/Qw/Qa as the managed-ledger-* settings say. It holds no data itself.

On first start it creates the cluster --cluster, tenant public and
namespace public/default (later starts find them). It registers itself under
/brokers/<pulsar host:port> as an ephemeral node, with its load.

Run as many brokers as you like: each namespace is split into bundles, and
each bundle is served by one broker at a time, the one holding its node
under /namespace in ZooKeeper. Lookups (Pulsar LOOKUP, HTTP lookup, Kafka
Metadata) send clients to the owner; a bundle nobody owns goes to the least
loaded broker; when a broker stops or dies, the others take its bundles.
See docs/operations.md.

Stops on SIGTERM or SIGINT like magnetar standalone.
` + configHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := resolveBrokerProcess(a.vals)
			if err != nil {
				return err
			}
			return runtimeError(a.runBrokerProcess(cfg))
		},
	}
	a.addSettings(cmd, brokerProcessSettings)
	return cmd
}

type brokerProcessConfig struct {
	PulsarListen, KafkaListen, HTTPListen string
	AdvertisedHost                        string
	MetadataStore                         metadataStoreURL
	ZKSessionTimeout                      time.Duration
	Broker                                brokerConfig
}

func resolveBrokerProcess(sv *settingValues) (brokerProcessConfig, error) {
	var cfg brokerProcessConfig
	var err error
	s := func(name string) setting { return lookupSetting(brokerProcessSettings, name) }
	for _, l := range []struct {
		name string
		dst  *string
	}{{"pulsar-listen", &cfg.PulsarListen}, {"kafka-listen", &cfg.KafkaListen}, {"http-listen", &cfg.HTTPListen}} {
		if *l.dst, err = check(sv, s(l.name), parseListen); err != nil {
			return cfg, err
		}
	}
	if cfg.AdvertisedHost, err = check(sv, s("advertised-host"), parseAdvertisedHost); err != nil {
		return cfg, err
	}
	if cfg.MetadataStore, err = check(sv, s("metadata-store"), func(v string) (metadataStoreURL, error) {
		if v == "" {
			return metadataStoreURL{}, errors.New("required: the cluster's ZooKeeper, zk:HOST:PORT[/CHROOT]")
		}
		m, err := parseMetadataStore(v)
		if err == nil && m.Kind != "zk" {
			return m, errors.New("a broker needs the cluster's ZooKeeper (zk:HOST:PORT[/CHROOT]); use magnetar standalone for one machine")
		}
		return m, err
	}); err != nil {
		return cfg, err
	}
	if cfg.ZKSessionTimeout, err = check(sv, s("zk-session-timeout"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.Broker, err = resolveBroker(sv, brokerProcessSettings); err != nil {
		return cfg, err
	}
	if cfg.Broker.Cluster, err = check(sv, s("cluster"), parseClusterName); err != nil {
		return cfg, err
	}
	var q [3]int
	for i, name := range []string{"managed-ledger-ensemble-size", "managed-ledger-write-quorum", "managed-ledger-ack-quorum"} {
		if q[i], err = check(sv, s(name), parseCount(64)); err != nil {
			return cfg, err
		}
	}
	if !(q[0] >= q[1] && q[1] >= q[2] && q[2] >= 1) {
		return cfg, fmt.Errorf("managed-ledger quorums %d/%d/%d: want ensemble ≥ write quorum ≥ ack quorum ≥ 1", q[0], q[1], q[2])
	}
	cfg.Broker.EnsembleSize, cfg.Broker.WriteQuorum, cfg.Broker.AckQuorum = q[0], q[1], q[2]
	cfg.Broker.OwnershipLossTimeout = cfg.ZKSessionTimeout
	if cfg.Broker.LoadReportInterval, err = check(sv, s("load-report-interval"), parsePositiveDuration); err != nil {
		return cfg, err
	}
	if cfg.Broker.LoadShedInterval, err = check(sv, s("load-shed-interval"), parseDurationMin0); err != nil {
		return cfg, err
	}
	if cfg.Broker.LoadShedInterval == 0 {
		cfg.Broker.LoadShedInterval = -1 // never, as asked
	}
	cfg.Broker.LoadShedThreshold, err = check(sv, s("load-shed-threshold"), func(v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 1 {
			return 0, errors.New("want a ratio of at least 1, such as 1.5")
		}
		return f, nil
	})
	return cfg, err
}

func parseClusterName(v string) (string, error) {
	if v == "" || strings.ContainsAny(v, "/ ") {
		return "", errors.New("want a name of letters, digits and -_.")
	}
	return v, nil
}

func (a *app) runBrokerProcess(cfg brokerProcessConfig) error {
	sigs, stopSignals := a.notify()
	defer stopSignals()
	log := a.logger
	startCtx, started := watchStartup(sigs)
	r, err := startBrokerProcess(startCtx, cfg, log, a.hostname)
	if sig := started(); sig != nil {
		log.Info("signal during startup; stopping", "signal", sig.String())
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			return r.shutdown(ctx)
		}
		if errors.Is(err, context.Canceled) {
			return nil
		}
	}
	if err != nil {
		return err
	}
	log.Info("magnetar broker ready", "serving", "pulsar,kafka,http", "cluster", cfg.Broker.Cluster,
		"http", boundAddr(cfg.HTTPListen, r.http.Addr()), "pulsar-advertised", r.pulsarAdvertised,
		"kafka-advertised", r.kafkaAdvertised, "metadata-store", cfg.MetadataStore.String(),
		"ledger-quorums", fmt.Sprintf("%d/%d/%d", cfg.Broker.EnsembleSize, cfg.Broker.WriteQuorum, cfg.Broker.AckQuorum),
		"version", currentBuild().Version)
	return awaitShutdown(log, sigs, r.served, r.shutdown, shutdownTimeout)
}

type runningBroker struct {
	log                               *slog.Logger
	store                             meta.Store
	broker                            *brokerStack
	http                              *admin.Server
	served                            chan error
	pulsarAdvertised, kafkaAdvertised string
}

func startBrokerProcess(ctx context.Context, cfg brokerProcessConfig, log *slog.Logger, hostname func() (string, error)) (_ *runningBroker, err error) {
	r := &runningBroker{log: log, served: make(chan error, 1)}
	host := func(listen, what string) (string, error) {
		h, err := advertisedHost(cfg.AdvertisedHost, listen, hostname)
		if err != nil {
			return "", fmt.Errorf("%s listener: %w", what, err)
		}
		return h, nil
	}
	pulsarHost, err := host(cfg.PulsarListen, "pulsar")
	if err != nil {
		return nil, err
	}
	kafkaHost, err := host(cfg.KafkaListen, "kafka")
	if err != nil {
		return nil, err
	}
	httpHost, err := host(cfg.HTTPListen, "http")
	if err != nil {
		return nil, err
	}
	var closers []func()
	defer func() {
		if err != nil {
			for _, c := range slices.Backward(closers) {
				c()
			}
		}
	}()
	httpLn, err := listen("http", cfg.HTTPListen)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { httpLn.Close() })
	pulsarLn, err := listen("pulsar", cfg.PulsarListen)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { pulsarLn.Close() })
	kafkaLn, err := listen("kafka", cfg.KafkaListen)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { kafkaLn.Close() })
	r.pulsarAdvertised = advertisedAddr(pulsarHost, pulsarLn.Addr().String())
	r.kafkaAdvertised = advertisedAddr(kafkaHost, kafkaLn.Addr().String())
	webURL := "http://" + advertisedAddr(httpHost, httpLn.Addr().String())

	if r.store, err = openMetadataStore(ctx, cfg.MetadataStore, "", cfg.ZKSessionTimeout, log); err != nil {
		return nil, err
	}
	closers = append(closers, func() { r.store.Close() })
	self := r.pulsarAdvertised

	cfg.Broker.ServiceURL = webURL
	reg := newMetricsRegistry(currentBuild())
	if r.broker, err = startBroker(cfg.Broker, "broker-"+self, r.store, brokerListeners{pulsar: pulsarLn, kafka: kafkaLn,
		pulsarAdvertised: r.pulsarAdvertised, kafkaAdvertised: r.kafkaAdvertised}, reg, log); err != nil {
		return nil, err
	}
	closers = append(closers, func() { r.broker.close(context.Background()) })
	if r.http, err = admin.New(admin.Config{Listener: httpLn, Gatherer: reg, Logger: log.With("component", "http")}); err != nil {
		return nil, err
	}
	if err = admin.RegisterAPI(r.http, admin.APIConfig{Broker: r.broker.broker, Cluster: cfg.Broker.Cluster,
		BrokerServiceURL: "pulsar://" + r.pulsarAdvertised, WebServiceURL: webURL, Meta: r.store,
		Logger: log.With("component", "admin")}); err != nil {
		return nil, err
	}
	go func() { r.served <- r.http.Serve() }()
	return r, nil
}

func (r *runningBroker) shutdown(ctx context.Context) error {
	drainCtx, cancel := context.WithTimeout(ctx, httpDrainTimeout)
	defer cancel()
	httpErr := r.http.Shutdown(drainCtx)
	closed := make(chan error, 1)
	go func() { closed <- errors.Join(r.broker.close(ctx), r.store.Close()) }()
	select {
	case err := <-closed:
		return errors.Join(httpErr, err)
	case <-ctx.Done():
		return errors.Join(httpErr, fmt.Errorf("closing the broker and metadata store: %w", ctx.Err()))
	}
}
