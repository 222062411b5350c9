package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// rootModule is the module path of the repository whose binary the
// compat tests run.
const rootModule = "github.com/magnetar-io/magnetar"

var (
	buildOnce sync.Once
	buildPath string
	buildDir  string // temp dir holding buildPath; removed by Run
	buildErr  error
)

// Build returns the path of the magnetar binary, building it on first use
// (once per test process) from the repository that contains this module.
//
// Environment:
//
//	MAGNETAR_BIN=path        use this binary instead of building one
//	MAGNETAR_COMPAT_RACE=1   build it with -race
func Build(tb testing.TB) string {
	tb.Helper()
	path, err := build()
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

func build() (string, error) {
	buildOnce.Do(func() {
		if bin := os.Getenv("MAGNETAR_BIN"); bin != "" {
			if _, err := os.Stat(bin); err != nil {
				buildErr = fmt.Errorf("MAGNETAR_BIN: %w", err)
				return
			}
			buildPath = bin
			return
		}
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		buildDir, err = os.MkdirTemp("", "magnetar-compat-bin-")
		if err != nil {
			buildErr = err
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		path := filepath.Join(buildDir, "magnetar")
		args := []string{"build", "-o", path}
		if os.Getenv("MAGNETAR_COMPAT_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/magnetar")
		cmd := exec.Command(goTool, args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building magnetar (go %s in %s): %v\n%s", strings.Join(args, " "), root, err, out)
			return
		}
		buildPath = path
	})
	return buildPath, buildErr
}

// removeBuild deletes the binary built by this process, if any.
func removeBuild() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// repoRoot finds the repository root: the nearest directory above the
// working directory (a package of this module when under go test) whose
// go.mod declares rootModule.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRootModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("harness: no go.mod of module " + rootModule + " above the working directory; set MAGNETAR_BIN")
		}
		dir = parent
	}
}

func isRootModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == rootModule
		}
	}
	return false
}
