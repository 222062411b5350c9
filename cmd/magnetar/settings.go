package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// A setting is one configuration key. Its name is at once the flag
// (--data-dir), the config-file key (data-dir:) and, upper-cased with "-"
// turned into "_" and prefixed with MAGNETAR_, the environment variable
// (MAGNETAR_DATA_DIR). These lists are the only place keys are declared:
// flags, viper bindings, --help and the documentation test all read them.
type setting struct {
	name  string // flag name and config-file key
	def   string // default, written as on the command line
	typ   string // value kind shown in --help
	usage string // one line for --help
}

// env is the setting's environment variable.
func (s setting) env() string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

const envPrefix = "MAGNETAR_"

// globalSettings apply to every command (persistent flags of the root).
var globalSettings = []setting{
	{"config", "", "file", "YAML config file whose keys are the flag names (e.g. data-dir: ./data); it must exist"},
	{"log-level", "info", "level", "log level: debug, info, warn or error"},
	{"log-format", "text", "format", "log format: text (key=value) or json; one line per event, on stderr"},
}

// standaloneSettings are the settings of `magnetar standalone`: its own,
// then those of the broker and the bookie it runs in-process.
var standaloneSettings = append(append(standaloneOwnSettings, brokerSettings...), bookieStorageSettings...)

var standaloneOwnSettings = []setting{
	{"data-dir", "./data", "dir", "directory for all data; created if missing, must be writable"},
	{"pulsar-listen", "0.0.0.0:6650", "host:port", "Pulsar protocol listen address"},
	{"kafka-listen", "0.0.0.0:9092", "host:port", "Kafka protocol listen address"},
	{"http-listen", "0.0.0.0:8080", "host:port", "HTTP listen address: /status, /metrics"},
	{"advertised-host", "", "host", "host that Pulsar lookups and Kafka Metadata tell clients to connect to (default: the host of each listen address, or this machine's hostname when it is 0.0.0.0 or ::)"},
	{"metadata-store", "local:", "url", "metadata store: local: (embedded, in <data-dir>/meta), local:DIR, or zk:HOST:PORT[,HOST:PORT...][/CHROOT] for ZooKeeper"},
	{"zk-session-timeout", "30s", "duration", "ZooKeeper session timeout, for zk: metadata stores"},
	{"bookie-listen", "127.0.0.1:3181", "host:port", "listen address of the in-process bookie; its address is the bookie's identity in ledger metadata, so keep it stable"},
	{"pprof-listen", "", "host:port", "serve Go's net/http/pprof profiles (/debug/pprof/) on this address, e.g. 127.0.0.1:6060; unauthenticated, so keep it on loopback (default: off)"},
}

// allSettings lists the settings of every command.
var allSettings = [][]setting{globalSettings, standaloneSettings, brokerProcessSettings, bookieSettings, perfBookieSettings, perfProduceSettings, perfConsumeSettings, perfKafkaSettings, perfAllSettings, adminSettings, clientSettings, mirrorSettings}

// fileKeys are the keys a config file may hold: every command's settings
// except --config itself. One file can serve several commands, so a key
// another command uses is not an error.
func fileKeys() map[string]bool {
	keys := map[string]bool{}
	for _, list := range allSettings {
		for _, s := range list {
			if s.name != "config" {
				keys[s.name] = true
			}
		}
	}
	return keys
}

// configHelp closes the long help of every command.
const configHelp = `
Every flag can also be set in the environment as MAGNETAR_<FLAG>, upper
case with "-" turned into "_" (MAGNETAR_DATA_DIR, MAGNETAR_HTTP_LISTEN), or
in the YAML file given by --config under the flag's name (data-dir: ./data).
Precedence: flags, then environment, then config file, then defaults.
See docs/configuration.md.`

// textValue is a pflag.Value holding the raw text of a setting; it is
// parsed and checked once all sources are merged, so a bad value gets the
// same message whether it came from a flag, the environment or the file.
type textValue struct {
	s   string
	typ string
}

func (v *textValue) String() string { return v.s }
func (v *textValue) Type() string   { return v.typ }

// Set takes the flag's text as it is, but checks a bool's here: viper
// reads a flag of type "bool" through cast.ToBool, which turns anything
// it cannot parse ("yes", "1x") into false, so that a mistyped
// --journal-sync would turn fsync off instead of failing.
func (v *textValue) Set(s string) error {
	if v.typ == "bool" {
		if _, err := parseBool(s); err != nil {
			return err
		}
	}
	v.s = s
	return nil
}

// defineFlags adds a flag for each setting to fs. A bool flag alone
// turns its setting on (--perf-in-process); =false turns it off, as with
// every Go and most Kafka and Pulsar tools.
func defineFlags(fs *pflag.FlagSet, list []setting) {
	for _, s := range list {
		usage := s.usage + " (env " + s.env() + ")"
		fs.Var(&textValue{s: s.def, typ: s.typ}, s.name, usage)
		if s.typ == "bool" {
			fs.Lookup(s.name).NoOptDefVal = "true"
		}
	}
}

// settingValues are the merged values of a command's settings.
type settingValues struct {
	v        *viper.Viper
	flags    *pflag.FlagSet
	file     *viper.Viper // nil without --config
	filePath string
}

// loadSettings merges the settings in list for a command whose flags have
// been parsed into flags: flag > MAGNETAR_* environment > config file >
// default. The config file is read if --config (or MAGNETAR_CONFIG) names
// one; it must exist and hold only known keys with single values.
func loadSettings(flags *pflag.FlagSet, list []setting) (*settingValues, error) {
	v := viper.New()
	for _, s := range list {
		v.SetDefault(s.name, s.def)
		if f := flags.Lookup(s.name); f != nil {
			if err := v.BindPFlag(s.name, f); err != nil {
				return nil, err
			}
		}
		if err := v.BindEnv(s.name, s.env()); err != nil {
			return nil, err
		}
	}
	sv := &settingValues{v: v, flags: flags}
	if path := v.GetString("config"); path != "" {
		file, err := readConfigFile(path)
		if err != nil {
			return nil, err
		}
		if err := v.MergeConfigMap(file.AllSettings()); err != nil {
			return nil, fmt.Errorf("config file %s: %w", path, err)
		}
		sv.file, sv.filePath = file, path
	}
	return sv, nil
}

// readConfigFile reads a YAML config file and checks its keys.
func readConfigFile(path string) (*viper.Viper, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("config file %s does not exist", path)
	case err != nil:
		return nil, fmt.Errorf("config file: %w", err)
	case st.IsDir():
		return nil, fmt.Errorf("config file %s is a directory", path)
	}
	f := viper.New()
	f.SetConfigFile(path)
	f.SetConfigType("yaml")
	if err := f.ReadInConfig(); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	known := fileKeys()
	keys := f.AllKeys()
	slices.Sort(keys)
	for _, k := range keys {
		if !known[k] {
			return nil, fmt.Errorf("config file %s: unknown key %q (known keys: %s)", path, k, strings.Join(sortedKeys(known), ", "))
		}
		switch val := f.Get(k); val.(type) {
		case string, bool, int, int64, uint64, float64:
		case nil:
			return nil, fmt.Errorf("config file %s: key %q has no value (remove it to use the default)", path, k)
		default:
			return nil, fmt.Errorf("config file %s: key %q: want a single value, got %T", path, k, val)
		}
	}
	return f, nil
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// get returns the merged value of a setting.
func (sv *settingValues) get(name string) string { return sv.v.GetString(name) }

// source names where a setting's value came from, for error messages.
func (sv *settingValues) source(s setting) string {
	if f := sv.flags.Lookup(s.name); f != nil && f.Changed {
		return "flag --" + s.name
	}
	if os.Getenv(s.env()) != "" {
		return "environment " + s.env()
	}
	if sv.file != nil && sv.file.IsSet(s.name) {
		return "config file " + sv.filePath
	}
	return "default"
}

// check parses the value of s with parse and, on failure, returns an
// error naming the setting, the value and where it came from.
func check[T any](sv *settingValues, s setting, parse func(string) (T, error)) (T, error) {
	raw := sv.get(s.name)
	val, err := parse(raw)
	if err != nil {
		return val, fmt.Errorf("invalid %s %q (from %s): %w", s.name, raw, sv.source(s), err)
	}
	return val, nil
}

// lookupSetting returns the setting called name in list; it panics if
// there is none, which is a programming error.
func lookupSetting(list []setting, name string) setting {
	for _, s := range list {
		if s.name == name {
			return s
		}
	}
	panic("magnetar: no setting " + name)
}

// settingsOf returns the settings cmd accepts: the global ones and its own.
func (a *app) settingsOf(cmd *cobra.Command) []setting {
	return append(slices.Clone(globalSettings), a.own[cmd]...)
}
