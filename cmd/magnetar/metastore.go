package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
	"github.com/magnetar-io/magnetar/meta/zk"
)

// metadataStoreURL is a parsed --metadata-store:
//
//	local:                                  embedded store in <data-dir>/meta
//	local:DIR                               embedded store in DIR
//	zk:HOST:PORT[,HOST:PORT...][/CHROOT]    ZooKeeper ensemble, optionally chrooted
type metadataStoreURL struct {
	Kind    string   // "local" or "zk"
	Dir     string   // local: the store's directory; "" means <data-dir>/meta
	Servers []string // zk: "host:port" of each server
	Chroot  string   // zk: "" or the absolute path all nodes live under
}

const metadataStoreFormats = "want local:, local:DIR or zk:HOST:PORT[,HOST:PORT...][/CHROOT]"

// defaultZKPort is used for a zk: server given without a port.
const defaultZKPort = "2181"

func parseMetadataStore(s string) (metadataStoreURL, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return metadataStoreURL{}, errors.New(metadataStoreFormats)
	}
	switch kind {
	case "local":
		if rest == "" {
			return metadataStoreURL{Kind: "local"}, nil
		}
		return metadataStoreURL{Kind: "local", Dir: filepath.Clean(rest)}, nil
	case "zk":
		return parseZK(rest)
	}
	return metadataStoreURL{}, fmt.Errorf("unknown kind %q: %s", kind, metadataStoreFormats)
}

func parseZK(rest string) (metadataStoreURL, error) {
	if strings.HasPrefix(rest, "//") {
		return metadataStoreURL{}, errors.New("write zk:HOST:PORT, without //")
	}
	m := metadataStoreURL{Kind: "zk"}
	hosts := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		hosts, m.Chroot = rest[:i], rest[i:]
		if err := meta.ValidatePath(m.Chroot); err != nil {
			return metadataStoreURL{}, fmt.Errorf("chroot: %w", err)
		}
		if m.Chroot == "/" {
			m.Chroot = ""
		}
	}
	if hosts == "" {
		return metadataStoreURL{}, fmt.Errorf("no ZooKeeper server: %s", metadataStoreFormats)
	}
	for _, h := range strings.Split(hosts, ",") {
		server, err := parseZKServer(strings.TrimSpace(h))
		if err != nil {
			return metadataStoreURL{}, err
		}
		m.Servers = append(m.Servers, server)
	}
	return m, nil
}

func parseZKServer(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty ZooKeeper server in the list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Contains(h, ":") {
			return "", fmt.Errorf("ZooKeeper server %q: want HOST:PORT", h)
		}
		host, port = h, defaultZKPort
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return "", fmt.Errorf("ZooKeeper server %q: port %q is not a number from 1 to 65535", h, port)
	}
	if net.ParseIP(host) == nil && !validHostname(host) {
		return "", fmt.Errorf("ZooKeeper server %q: %q is not a host name or IP address", h, host)
	}
	return net.JoinHostPort(host, port), nil
}

// String returns the canonical form, which parses back to m.
func (m metadataStoreURL) String() string {
	if m.Kind == "zk" {
		return "zk:" + m.connect()
	}
	return "local:" + m.Dir
}

// connect is the ZooKeeper connect string "host:port,host:port/chroot".
func (m metadataStoreURL) connect() string {
	return strings.Join(m.Servers, ",") + m.Chroot
}

// localDir is the directory of a local store for the given data dir.
func (m metadataStoreURL) localDir(dataDir string) string {
	if m.Dir != "" {
		return m.Dir
	}
	return filepath.Join(dataDir, "meta")
}

// openMetadataStore opens the store m describes. ctx bounds connecting to
// ZooKeeper (cancelled by a signal during startup).
func openMetadataStore(ctx context.Context, m metadataStoreURL, dataDir string, zkSessionTimeout time.Duration, logger *slog.Logger) (meta.Store, error) {
	switch m.Kind {
	case "local":
		dir := m.localDir(dataDir)
		s, err := local.Open(dir, local.Options{Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("metadata store local:%s: %w", dir, err)
		}
		return s, nil
	case "zk":
		s, err := zk.Open(ctx, m.connect(), zk.Options{SessionTimeout: zkSessionTimeout, Logger: logger})
		if err != nil {
			return nil, fmt.Errorf("metadata store %s: %w", m, err)
		}
		return s, nil
	}
	return nil, fmt.Errorf("metadata store %s: unknown kind %q", m, m.Kind)
}
