package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolveBuild(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{
			Main:     debug.Module{Path: "github.com/magnetar-io/magnetar", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}},
		}
	}
	for _, tc := range []struct {
		name            string
		version, commit string
		info            *debug.BuildInfo
		wantV, wantC    string
	}{
		{"ldflags win", "v1.2.3", "abc123", vcs("0123456789abcdef0123", "false"), "v1.2.3", "abc123"},
		{"vcs stamp", "", "", vcs("0123456789abcdef0123", "false"), "dev", "0123456789ab"},
		{"dirty tree", "", "", vcs("0123456789abcdef0123", "true"), "dev", "0123456789ab-dirty"},
		{"go install", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0", "unknown"},
		{"nothing", "", "", nil, "dev", "unknown"},
	} {
		b := resolveBuild(tc.version, tc.commit, tc.info)
		if b.Version != tc.wantV || b.Commit != tc.wantC {
			t.Errorf("%s: version %q commit %q, want %q %q", tc.name, b.Version, b.Commit, tc.wantV, tc.wantC)
		}
		if b.GoVersion != runtime.Version() || b.OS != runtime.GOOS || b.Arch != runtime.GOARCH {
			t.Errorf("%s: %+v lacks the runtime's Go version and platform", tc.name, b)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	clearEnv(t)
	r := run(t, "version")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b := currentBuild()
	for _, w := range []string{"magnetar " + b.Version, "commit:", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("version output lacks %q:\n%s", w, r.stdout)
		}
	}
}
