package main

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/bookie/journal"
	"github.com/magnetar-io/magnetar/bookie/storage"
)

// clearEnv unsets every MAGNETAR_* setting variable for the test, so the
// developer's environment cannot leak in.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, list := range allSettings {
		for _, s := range list {
			t.Setenv(s.env(), "")
		}
	}
}

// inProcess runs the command line args through the real command tree,
// with the standalone server replaced by a recorder.
type inProcess struct {
	code           int
	stdout, stderr string
	cfg            *standaloneConfig // set if standalone would have run
	app            *app
}

func run(t *testing.T, args ...string) inProcess {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := newApp(&stdout, &stderr)
	var res inProcess
	a.runStandalone = func(cfg standaloneConfig) error {
		res.cfg = &cfg
		return nil
	}
	res.code = execute(a, args)
	res.stdout, res.stderr, res.app = stdout.String(), stderr.String(), a
	return res
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loggerLevel names the lowest level the logger prints.
func loggerLevel(l *slog.Logger) string {
	for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if l.Enabled(context.Background(), lv) {
			return strings.ToLower(lv.String())
		}
	}
	return "error"
}

// TestPrecedence proves flag > environment > config file > default, for a
// standalone key and a global one, over every combination of sources.
func TestPrecedence(t *testing.T) {
	keys := []struct {
		name                 string
		def, file, env, flag string
		got                  func(inProcess) string
	}{
		{"http-listen", "0.0.0.0:8080", "127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003",
			func(r inProcess) string { return r.cfg.HTTPListen }},
		{"zk-session-timeout", "30s", "11s", "12s", "13s",
			func(r inProcess) string { return r.cfg.ZKSessionTimeout.String() }},
		{"log-level", "info", "warn", "error", "debug",
			func(r inProcess) string { return loggerLevel(r.app.logger) }},
		{"journal-direct-io", "true", "false", "true", "false",
			func(r inProcess) string { return strconv.FormatBool(!r.cfg.BookieStorage.Journal.BufferedIO) }},
		{"entry-log-direct-io", "true", "false", "true", "false",
			func(r inProcess) string { return strconv.FormatBool(r.cfg.BookieStorage.EntryLogDirectIO) }},
		{"entry-log-page-cache-keep", "0", "4194304", "8388608", "16777216",
			func(r inProcess) string { return strconv.FormatInt(r.cfg.BookieStorage.EntryLogPageCacheKeep, 10) }},
	}
	// Flags given in every case of a key: the page cache to keep needs the
	// entry logs written through it.
	also := map[string][]string{"entry-log-page-cache-keep": {"--entry-log-direct-io=false"}}
	for _, k := range keys {
		env := lookupSettingAll(k.name).env()
		for mask := 0; mask < 8; mask++ {
			useFile, useEnv, useFlag := mask&1 != 0, mask&2 != 0, mask&4 != 0
			name := k.name + "/" + strings.Join(filterTrue(map[string]bool{"file": useFile, "env": useEnv, "flag": useFlag}), "+")
			t.Run(name, func(t *testing.T) {
				clearEnv(t)
				args := append([]string{"standalone"}, also[k.name]...)
				want := k.def
				if useFile {
					args = append(args, "--config", writeFile(t, "m.yaml", k.name+": "+k.file+"\n"))
					want = k.file
				}
				if useEnv {
					t.Setenv(env, k.env)
					want = k.env
				}
				if useFlag {
					args = append(args, "--"+k.name+"="+k.flag)
					want = k.flag
				}
				r := run(t, args...)
				if r.code != 0 || r.cfg == nil {
					t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
				}
				if got := k.got(r); got != want {
					t.Errorf("%s = %q, want %q", k.name, got, want)
				}
			})
		}
	}
}

// A bool flag alone turns its setting on, over the environment and the
// file; given a separate word instead of =value, it is a usage error, not
// a silent true with a stray argument.
func TestBareBoolFlag(t *testing.T) {
	clearEnv(t)
	t.Setenv("MAGNETAR_JOURNAL_DIRECT_IO", "false")
	r := run(t, "standalone", "--journal-direct-io")
	if r.code != 0 || r.cfg == nil {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r.cfg.BookieStorage.Journal.BufferedIO {
		t.Errorf("--journal-direct-io alone left direct I/O off")
	}
	r = run(t, "standalone", "--journal-sync", "false")
	if r.code != exitUsage || r.cfg != nil {
		t.Fatalf("--journal-sync false: exit %d (want %d), ran: %v", r.code, exitUsage, r.cfg != nil)
	}
	if !strings.Contains(r.stderr, `unknown command "false"`) {
		t.Errorf("stderr does not name the stray argument:\n%s", r.stderr)
	}
}

func filterTrue(m map[string]bool) []string {
	var out []string
	for _, k := range []string{"file", "env", "flag"} {
		if m[k] {
			out = append(out, k)
		}
	}
	if out == nil {
		return []string{"default"}
	}
	return out
}

func lookupSettingAll(name string) setting {
	for _, list := range allSettings {
		for _, s := range list {
			if s.name == name {
				return s
			}
		}
	}
	panic(name)
}

// TestConfigFileFromEnv: MAGNETAR_CONFIG names the file; --config wins.
func TestConfigFileFromEnv(t *testing.T) {
	clearEnv(t)
	envFile := writeFile(t, "env.yaml", "data-dir: /from/env-file\n")
	flagFile := writeFile(t, "flag.yaml", "data-dir: /from/flag-file\n")
	t.Setenv("MAGNETAR_CONFIG", envFile)
	if r := run(t, "standalone"); r.code != 0 || r.cfg.DataDir != "/from/env-file" {
		t.Fatalf("with MAGNETAR_CONFIG: exit %d, cfg %+v, stderr %s", r.code, r.cfg, r.stderr)
	}
	if r := run(t, "standalone", "--config", flagFile); r.code != 0 || r.cfg.DataDir != "/from/flag-file" {
		t.Fatalf("with --config and MAGNETAR_CONFIG: exit %d, cfg %+v, stderr %s", r.code, r.cfg, r.stderr)
	}
}

func TestDefaults(t *testing.T) {
	clearEnv(t)
	r := run(t, "standalone")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := standaloneConfig{
		nodeConfig: nodeConfig{
			DataDir:          "./data",
			MetadataStore:    metadataStoreURL{Kind: "local"},
			ZKSessionTimeout: 30 * time.Second,
		},
		PulsarListen: "0.0.0.0:6650",
		KafkaListen:  "0.0.0.0:9092",
		HTTPListen:   "0.0.0.0:8080",
		BookieListen: "127.0.0.1:3181",
		BookieStorage: storage.Options{
			Dir:                    filepath.Join("data", "bookie"),
			Journal:                journal.Options{MaxGroupBytes: 512 << 10, MaxGroupWait: time.Millisecond, RecycledFiles: 8},
			EntryLogMaxSize:        1 << 30,
			EntryLogDirectIO:       true,
			CheckpointInterval:     10 * time.Second,
			GCInterval:             time.Minute,
			GCMinLiveRatio:         0.5,
			DiskUsageThreshold:     0.95,
			DiskUsageWarnThreshold: 0.90,
			DiskCheckInterval:      10 * time.Second,
		},
	}
	if !equalConfig(*r.cfg, want) {
		t.Errorf("defaults = %+v, want %+v", *r.cfg, want)
	}
	if lv := loggerLevel(r.app.logger); lv != "info" {
		t.Errorf("default log level %s, want info", lv)
	}
}

func equalConfig(a, b standaloneConfig) bool {
	return a.DataDir == b.DataDir && a.PulsarListen == b.PulsarListen && a.KafkaListen == b.KafkaListen &&
		a.HTTPListen == b.HTTPListen && a.AdvertisedHost == b.AdvertisedHost &&
		a.MetadataStore.String() == b.MetadataStore.String() && a.ZKSessionTimeout == b.ZKSessionTimeout &&
		a.BookieListen == b.BookieListen && a.BookieStorage.Dir == b.BookieStorage.Dir &&
		a.BookieStorage.NoSync == b.BookieStorage.NoSync && equalJournal(a.BookieStorage.Journal, b.BookieStorage.Journal) &&
		a.BookieStorage.EntryLogMaxSize == b.BookieStorage.EntryLogMaxSize &&
		a.BookieStorage.EntryLogPageCacheKeep == b.BookieStorage.EntryLogPageCacheKeep &&
		a.BookieStorage.EntryLogDirectIO == b.BookieStorage.EntryLogDirectIO &&
		a.BookieStorage.CheckpointInterval == b.BookieStorage.CheckpointInterval &&
		a.BookieStorage.GCInterval == b.BookieStorage.GCInterval && a.BookieStorage.GCMinLiveRatio == b.BookieStorage.GCMinLiveRatio &&
		a.BookieStorage.DiskUsageThreshold == b.BookieStorage.DiskUsageThreshold &&
		a.BookieStorage.DiskUsageWarnThreshold == b.BookieStorage.DiskUsageWarnThreshold &&
		a.BookieStorage.DiskCheckInterval == b.BookieStorage.DiskCheckInterval
}

// equalJournal compares journal options but for OnSync, a func (set when
// the standalone starts, not by configuration).
func equalJournal(a, b journal.Options) bool {
	a.OnSync, b.OnSync = nil, nil
	return reflect.DeepEqual(a, b)
}

// TestDiskUsageThresholdAlone: a threshold under the default warning
// threshold, given alone, brings the warning threshold down with it.
func TestDiskUsageThresholdAlone(t *testing.T) {
	clearEnv(t)
	r := run(t, "standalone", "--disk-usage-threshold", "0.85")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if o := r.cfg.BookieStorage; o.DiskUsageThreshold != 0.85 || o.DiskUsageWarnThreshold != 0.85 {
		t.Errorf("thresholds %g and %g, want 0.85 and 0.85", o.DiskUsageThreshold, o.DiskUsageWarnThreshold)
	}
}

// TestInvalidInvocations: each mistake exits 2 with a message that names
// the setting, the value and where it came from.
func TestInvalidInvocations(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string // config file content; passed with --config
		want []string
	}{
		{name: "log level", args: []string{"standalone", "--log-level", "loud"},
			want: []string{`invalid log-level "loud" (from flag --log-level): want debug, info, warn or error`}},
		{name: "log format", args: []string{"version", "--log-format", "xml"},
			want: []string{`invalid log-format "xml"`, "want text or json"}},
		{name: "listen from env", args: []string{"standalone"}, env: map[string]string{"MAGNETAR_HTTP_LISTEN": "localhost"},
			want: []string{`invalid http-listen "localhost" (from environment MAGNETAR_HTTP_LISTEN): want host:port`, "missing port"}},
		{name: "listen port from file", args: []string{"standalone"}, file: "pulsar-listen: 1.2.3.4:99999\n",
			want: []string{`invalid pulsar-listen "1.2.3.4:99999" (from config file `, `port "99999" is not a number from 0 to 65535`}},
		{name: "listen host", args: []string{"standalone", "--kafka-listen", "bad host!:9092"},
			want: []string{`host "bad host!" is not an IP address or host name`}},
		{name: "metadata store kind", args: []string{"standalone", "--metadata-store", "etcd:foo"},
			want: []string{`invalid metadata-store "etcd:foo"`, `unknown kind "etcd"`, "zk:HOST:PORT"}},
		{name: "metadata store zk//", args: []string{"standalone", "--metadata-store", "zk://h:2181"},
			want: []string{"without //"}},
		{name: "metadata store chroot", args: []string{"standalone", "--metadata-store", "zk:h:2181/a//b"},
			want: []string{"chroot", "invalid path"}},
		{name: "session timeout", args: []string{"standalone", "--zk-session-timeout", "30"},
			want: []string{`invalid zk-session-timeout "30"`, "want a duration"}},
		{name: "advertised host with port", args: []string{"standalone", "--advertised-host", "h:6650"},
			want: []string{"without a port"}},
		{name: "empty data dir", args: []string{"standalone", "--data-dir", ""},
			want: []string{"invalid data-dir", "must not be empty"}},
		{name: "unknown flag", args: []string{"standalone", "--data-directory", "x"},
			want: []string{"unknown flag: --data-directory"}},
		{name: "extra argument", args: []string{"standalone", "now"},
			want: []string{`unknown command "now"`}},
		{name: "unknown command", args: []string{"brokr"},
			want: []string{`unknown command "brokr"`}},
		{name: "missing config file", args: []string{"standalone", "--config", "/nonexistent/magnetar.yaml"},
			want: []string{"config file /nonexistent/magnetar.yaml does not exist"}},
		{name: "unknown config key", args: []string{"standalone"}, file: "data-dir: /x\ndata-dirr: /y\n",
			want: []string{`unknown key "data-dirr"`, "known keys: advertised-host, auto-topic-creation, auto-topic-partitions, autorecovery, autorecovery-audit-interval, autorecovery-grace-period, backlog-quota-check-interval, bookie-listen"}},
		{name: "nested config key", args: []string{"standalone"}, file: "data-dir:\n  path: /x\n",
			want: []string{`unknown key "data-dir.path"`}},
		{name: "config key without value", args: []string{"standalone"}, file: "data-dir:\n",
			want: []string{`key "data-dir" has no value`}},
		{name: "config key with list", args: []string{"standalone"}, file: "data-dir: [a, b]\n",
			want: []string{`key "data-dir": want a single value`}},
		{name: "config not YAML", args: []string{"standalone"}, file: "data-dir: [\n",
			want: []string{"config file "}},
		{name: "config key --config", args: []string{"standalone"}, file: "config: other.yaml\n",
			want: []string{`unknown key "config"`}},
		// Not false: a bool viper cannot parse would otherwise read as false.
		{name: "bool flag", args: []string{"standalone", "--journal-sync=yes"},
			want: []string{`invalid argument "yes" for "--journal-sync" flag: want true or false`}},
		{name: "bool from env", args: []string{"standalone"}, env: map[string]string{"MAGNETAR_JOURNAL_SYNC": "yes"},
			want: []string{`invalid journal-sync "yes" (from environment MAGNETAR_JOURNAL_SYNC): want true or false`}},
		{name: "bool from file", args: []string{"standalone"}, file: "journal-sync: yes please\n",
			want: []string{`invalid journal-sync "yes please" (from config file `}},
		{name: "page cache keep too small", args: []string{"standalone", "--entry-log-page-cache-keep", "4096"},
			want: []string{`invalid entry-log-page-cache-keep "4096" (from flag --entry-log-page-cache-keep): want 0 (off) or a number of bytes from 2097152`}},
		{name: "page cache keep with direct entry logs", args: []string{"standalone"}, env: map[string]string{"MAGNETAR_ENTRY_LOG_PAGE_CACHE_KEEP": "4194304"},
			want: []string{`entry-log-page-cache-keep 4194304 (from environment MAGNETAR_ENTRY_LOG_PAGE_CACHE_KEEP) needs entry-log-direct-io=false`}},
		{name: "page cache keep negative", args: []string{"bookie"}, env: map[string]string{"MAGNETAR_ENTRY_LOG_PAGE_CACHE_KEEP": "-1"},
			want: []string{`invalid entry-log-page-cache-keep "-1" (from environment MAGNETAR_ENTRY_LOG_PAGE_CACHE_KEEP)`}},
		{name: "disk usage threshold", args: []string{"standalone", "--disk-usage-threshold", "95"},
			want: []string{`invalid disk-usage-threshold "95" (from flag --disk-usage-threshold): want a number above 0 and at most 1`}},
		{name: "disk usage threshold NaN", args: []string{"bookie"}, env: map[string]string{"MAGNETAR_DISK_USAGE_THRESHOLD": "NaN"},
			want: []string{`invalid disk-usage-threshold "NaN" (from environment MAGNETAR_DISK_USAGE_THRESHOLD): want a number above 0 and at most 1`}},
		{name: "disk usage warning above the threshold", args: []string{"bookie", "--disk-usage-threshold", "0.8"},
			file: "disk-usage-warn-threshold: 0.85\n",
			want: []string{`disk-usage-warn-threshold 0.85 (from config file `, `is above disk-usage-threshold 0.8 (from flag --disk-usage-threshold)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := tc.args
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, "m.yaml", tc.file))
			}
			r := run(t, args...)
			if r.code != exitUsage {
				t.Errorf("exit code %d, want %d (usage)", r.code, exitUsage)
			}
			if r.cfg != nil {
				t.Errorf("standalone ran with %+v", *r.cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if !strings.Contains(r.stderr, "--help' for usage") {
				t.Errorf("stderr lacks the --help hint:\n%s", r.stderr)
			}
		})
	}
}

// TestRuntimeErrorExitCode: failures of the running server exit 1 and
// print no usage hint.
func TestRuntimeErrorExitCode(t *testing.T) {
	clearEnv(t)
	var stdout, stderr bytes.Buffer
	a := newApp(&stdout, &stderr)
	a.runStandalone = func(standaloneConfig) error { return runtimeError(os.ErrPermission) }
	if code := execute(a, []string{"standalone"}); code != exitRuntime {
		t.Fatalf("exit code %d, want %d", code, exitRuntime)
	}
	if got := stderr.String(); !strings.Contains(got, "magnetar standalone: permission denied") || strings.Contains(got, "--help") {
		t.Errorf("stderr = %q", got)
	}
}

// commandPaths lists every command's path below the root, root first,
// subcommands after their parent.
func commandPaths() [][]string {
	root := newRootCommand(newApp(&bytes.Buffer{}, &bytes.Buffer{}))
	paths := [][]string{nil}
	var walk func(parent []string, cmd *cobra.Command)
	walk = func(parent []string, cmd *cobra.Command) {
		for _, c := range cmd.Commands() {
			if c.Name() != "help" {
				path := append(slices.Clone(parent), c.Name())
				paths = append(paths, path)
				walk(path, c)
			}
		}
	}
	walk(nil, root)
	return paths
}

// TestHelpListsEverySetting: --help of every command shows each of its
// settings with its environment variable, and its default.
func TestHelpListsEverySetting(t *testing.T) {
	clearEnv(t)
	paths := commandPaths()
	if len(paths) < 3 {
		t.Fatalf("commands = %v, want at least root, standalone, version", paths)
	}
	for _, path := range paths {
		t.Run("magnetar "+strings.Join(path, " "), func(t *testing.T) {
			r := run(t, append(path, "--help")...)
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			root := newRootCommand(r.app)
			cmd, _, err := root.Find(path)
			if err != nil {
				t.Fatal(err)
			}
			list := r.app.settingsOf(cmd)
			if len(path) > 0 && path[0] == "standalone" && len(list) != len(globalSettings)+len(standaloneSettings) {
				t.Fatalf("standalone has %d settings, want %d", len(list), len(globalSettings)+len(standaloneSettings))
			}
			for _, s := range list {
				for _, w := range []string{"--" + s.name + " ", s.env()} {
					if !strings.Contains(r.stdout, w) {
						t.Errorf("--help lacks %q:\n%s", w, r.stdout)
					}
				}
				// pflag shows no default of "", "0" or "false"; the usage says what they mean.
				if s.def != "" && s.def != "0" && s.def != "false" && !strings.Contains(r.stdout, "(default "+s.def+")") {
					t.Errorf("--help lacks the default of --%s (%s)", s.name, s.def)
				}
			}
		})
	}
}

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConfigurationDocs: docs/configuration.md has a table row for every
// key with its environment variable and default.
func TestConfigurationDocs(t *testing.T) {
	doc := repoFile(t, "docs/configuration.md")
	// A key used by several commands may have a row in each command's table.
	rows := map[string][]string{}
	for _, line := range strings.Split(doc, "\n") {
		if m := regexp.MustCompile("^\\| `([a-z-]+)` \\|").FindStringSubmatch(line); m != nil {
			rows[m[1]] = append(rows[m[1]], line)
		}
	}
	anyRow := func(rows []string, want string) bool {
		for _, r := range rows {
			if strings.Contains(r, want) {
				return true
			}
		}
		return false
	}
	for _, list := range allSettings {
		for _, s := range list {
			row, ok := rows[s.name]
			if !ok {
				t.Errorf("docs/configuration.md has no table row for %s", s.name)
				continue
			}
			if !anyRow(row, "`"+s.env()+"`") {
				t.Errorf("docs/configuration.md row of %s lacks `%s`", s.name, s.env())
			}
			if s.def != "" && !anyRow(row, "`"+s.def+"`") {
				t.Errorf("docs/configuration.md row of %s lacks its default `%s`", s.name, s.def)
			}
		}
	}
	for name := range rows {
		if _, ok := fileKeys()[name]; !ok && name != "config" {
			t.Errorf("docs/configuration.md documents %s, which is no setting", name)
		}
	}
}

// TestExampleConfig: magnetar.example.yaml holds every file key, commented
// out at its default; uncommented, it is a valid file that changes nothing.
func TestExampleConfig(t *testing.T) {
	clearEnv(t)
	example := repoFile(t, "magnetar.example.yaml")
	keyLine := regexp.MustCompile(`^#([a-z][a-z-]*):(.*)$`)
	var uncommented strings.Builder
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(example))
	for sc.Scan() {
		if m := keyLine.FindStringSubmatch(sc.Text()); m != nil {
			seen[m[1]] = true
			uncommented.WriteString(m[1] + ":" + m[2] + "\n")
		}
	}
	for k := range fileKeys() {
		if !seen[k] {
			t.Errorf("magnetar.example.yaml lacks #%s:", k)
		}
	}
	// As shipped (all commented out), and uncommented: both equal the defaults.
	plain := run(t, "standalone", "--config", "../../magnetar.example.yaml")
	full := run(t, "standalone", "--config", writeFile(t, "full.yaml", uncommented.String()))
	def := run(t, "standalone")
	for _, r := range []inProcess{plain, full, def} {
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	}
	if !equalConfig(*full.cfg, *def.cfg) || !equalConfig(*plain.cfg, *def.cfg) {
		t.Errorf("example config gives %+v (uncommented) and %+v (as is), defaults are %+v", *full.cfg, *plain.cfg, *def.cfg)
	}
	if loggerLevel(full.app.logger) != "info" {
		t.Errorf("uncommented example sets log level %s, want info", loggerLevel(full.app.logger))
	}
}
