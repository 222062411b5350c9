package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseMetadataStore(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    metadataStoreURL
		str     string // canonical form
		wantErr string
	}{
		{in: "local:", want: metadataStoreURL{Kind: "local"}, str: "local:"},
		{in: "local:/var/lib/magnetar/meta", want: metadataStoreURL{Kind: "local", Dir: "/var/lib/magnetar/meta"}, str: "local:/var/lib/magnetar/meta"},
		{in: "local:meta/../m/", want: metadataStoreURL{Kind: "local", Dir: "m"}, str: "local:m"},
		{in: "zk:127.0.0.1:2181", want: metadataStoreURL{Kind: "zk", Servers: []string{"127.0.0.1:2181"}}, str: "zk:127.0.0.1:2181"},
		{in: "zk:zk1:2181,zk2:2182,zk3:2183/magnetar/prod",
			want: metadataStoreURL{Kind: "zk", Servers: []string{"zk1:2181", "zk2:2182", "zk3:2183"}, Chroot: "/magnetar/prod"},
			str:  "zk:zk1:2181,zk2:2182,zk3:2183/magnetar/prod"},
		{in: "zk:zk1, zk2:2888", want: metadataStoreURL{Kind: "zk", Servers: []string{"zk1:2181", "zk2:2888"}}, str: "zk:zk1:2181,zk2:2888"},
		{in: "zk:[::1]:2181/", want: metadataStoreURL{Kind: "zk", Servers: []string{"[::1]:2181"}}, str: "zk:[::1]:2181"},
		{in: "", wantErr: "want local:, local:DIR or zk:"},
		{in: "local", wantErr: "want local:"},
		{in: "etcd:h:2379", wantErr: `unknown kind "etcd"`},
		{in: "zk:", wantErr: "no ZooKeeper server"},
		{in: "zk:/chroot", wantErr: "no ZooKeeper server"},
		{in: "zk://zk1:2181", wantErr: "without //"},
		{in: "zk:zk1:2181,,zk2:2181", wantErr: "empty ZooKeeper server"},
		{in: "zk:zk1:port", wantErr: `port "port"`},
		{in: "zk:zk1:0", wantErr: `port "0"`},
		{in: "zk:::1", wantErr: "want HOST:PORT"},
		{in: "zk:bad host:2181", wantErr: "not a host name or IP address"},
		{in: "zk:zk1:2181/a/", wantErr: "chroot"},
	} {
		got, err := parseMetadataStore(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseMetadataStore(%q) = %+v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseMetadataStore(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.str {
			t.Errorf("parseMetadataStore(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
		if again, err := parseMetadataStore(got.String()); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("canonical form %q parses to %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}

func TestZKConnectString(t *testing.T) {
	m, err := parseMetadataStore("zk:a:1,b:2/x/y")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.connect(); got != "a:1,b:2/x/y" {
		t.Errorf("connect() = %q", got)
	}
}

func TestLocalDir(t *testing.T) {
	if got := (metadataStoreURL{Kind: "local"}).localDir("/data"); got != filepath.Join("/data", "meta") {
		t.Errorf("default local dir = %q", got)
	}
	if got := (metadataStoreURL{Kind: "local", Dir: "/elsewhere"}).localDir("/data"); got != "/elsewhere" {
		t.Errorf("explicit local dir = %q", got)
	}
}

// TestOpenLocalMetadataStore opens the embedded store and sees it work.
func TestOpenLocalMetadataStore(t *testing.T) {
	dataDir := t.TempDir()
	s, err := openMetadataStore(context.Background(), metadataStoreURL{Kind: "local"}, dataDir, time.Second, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(context.Background(), "/probe", []byte("x"), 0); err != nil {
		t.Errorf("Create: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "meta")); err != nil {
		t.Errorf("store not in <data-dir>/meta: %v", err)
	}
}

// TestOpenZKMetadataStore connects to the test ZooKeeper named by
// MAGNETAR_TEST_ZK (make test starts one), under a chroot of its own.
func TestOpenZKMetadataStore(t *testing.T) {
	addr := os.Getenv("MAGNETAR_TEST_ZK")
	if addr == "" {
		t.Fatal("MAGNETAR_TEST_ZK is not set: run `make test`, or `scripts/zookeeper.sh start` and export the address it prints")
	}
	chroot := "/magnetar-cmd-test/" + strings.ReplaceAll(t.Name(), "/", "_") + "-" + time.Now().Format("150405.000000000")
	m, err := parseMetadataStore("zk:" + addr + chroot)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := openMetadataStore(ctx, m, t.TempDir(), 10*time.Second, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/probe", []byte("x"), 0); err != nil {
		t.Errorf("Create: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
