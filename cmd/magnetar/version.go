package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
// When empty, the module version and VCS revision that the Go toolchain
// stamps into the binary are used instead.
var (
	version string
	commit  string
)

// buildInfo identifies the running binary.
type buildInfo struct {
	Version   string // release version, or "dev"
	Commit    string // VCS revision, or "unknown"
	GoVersion string
	OS, Arch  string
}

func currentBuild() buildInfo {
	info, _ := debug.ReadBuildInfo()
	return resolveBuild(version, commit, info)
}

// resolveBuild fills in what -ldflags did not set from the toolchain's
// build information (which may be nil).
func resolveBuild(version, commit string, info *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if info != nil {
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		if b.Commit == "" {
			var rev, modified string
			for _, s := range info.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value
				}
			}
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if rev != "" && modified == "true" {
				rev += "-dirty"
			}
			b.Commit = rev
		}
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func newVersionCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "version",
		Example: "  magnetar version",
		Short:   "Print the version, git commit, Go version and platform",
		Long:    "Print the version, git commit, Go version and platform of this binary.\n" + configHelp,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := currentBuild()
			fmt.Fprintf(a.stdout, "magnetar %s\ncommit:     %s\ngo version: %s\nos/arch:    %s/%s\n",
				b.Version, b.Commit, b.GoVersion, b.OS, b.Arch)
			return nil
		},
	}
	a.addSettings(cmd, nil)
	return cmd
}
