package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Shared is one server for all the tests of a package that do not need
// their own. It starts on the first call to Server, so a run whose -run
// filter selects none of them starts nothing. Its output goes to a file,
// kept (and named on stderr) when the package fails. Declare it at package
// level and hand TestMain to Run:
//
//	var shared = harness.NewShared()
//
//	func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }
type Shared struct {
	opts []Option

	once    sync.Once
	srv     *Server
	err     error
	dir     string // temp dir with the data dir and the log
	logPath string
	logFile *os.File
}

// NewShared declares a shared server started with opts.
func NewShared(opts ...Option) *Shared {
	return &Shared{opts: opts}
}

// Server returns the shared server, starting it on first use. It fails tb
// if the server could not start or is no longer running.
func (sh *Shared) Server(tb testing.TB) *Server {
	tb.Helper()
	sh.once.Do(sh.start)
	if sh.err != nil {
		tb.Fatalf("shared magnetar server: %v", sh.err)
	}
	if err := sh.srv.Running(); err != nil {
		tb.Fatalf("shared magnetar server (log %s): %v", sh.logPath, err)
	}
	return sh.srv
}

func (sh *Shared) start() {
	bin, err := build()
	if err != nil {
		sh.err = err
		return
	}
	sh.dir, err = os.MkdirTemp("", "magnetar-compat-shared-")
	if err != nil {
		sh.err = err
		return
	}
	sh.logPath = filepath.Join(sh.dir, "magnetar.log")
	sh.logFile, err = os.Create(sh.logPath)
	if err != nil {
		sh.err = err
		return
	}
	cfg := newConfig(sh.opts)
	if cfg.dataDir == "" {
		cfg.dataDir = filepath.Join(sh.dir, "data")
	}
	f := sh.logFile
	sh.srv, sh.err = newServer(bin, cfg, &sink{emit: func(l string) { fmt.Fprintln(f, l) }})
	if sh.err != nil {
		return
	}
	sh.err = sh.srv.start()
}

// Run runs the package's tests, then stops the shared server if it was
// started (its exit must be clean, or the run fails) and removes its files
// unless the run failed. It returns the exit code for os.Exit.
func (sh *Shared) Run(m *testing.M) int {
	return RunShared(m, sh)
}

// RunShared is Run for a package with several shared servers (started
// with different options).
func RunShared(m *testing.M, shareds ...*Shared) int {
	code := m.Run()
	for _, sh := range shareds {
		code = sh.finish(code)
	}
	removeBuild()
	return code
}

// finish stops the server if it was started and removes its files unless
// the run failed; it returns the run's exit code, 1 if the server did not
// stop cleanly.
func (sh *Shared) finish(code int) int {
	if sh.srv != nil {
		if err := sh.srv.shutdown(); err != nil {
			fmt.Fprintf(os.Stderr, "harness: shared magnetar server: %v\n", err)
			code = 1
		}
	}
	if sh.logFile != nil {
		sh.logFile.Close()
	}
	if sh.dir != "" {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "harness: shared magnetar server log kept in %s\n", sh.logPath)
		} else {
			os.RemoveAll(sh.dir)
		}
	}
	return code
}

// Run runs a package's tests and removes the binary built for them; use
// it from TestMain in packages without a Shared server.
func Run(m *testing.M) int {
	code := m.Run()
	removeBuild()
	return code
}
