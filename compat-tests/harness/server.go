// Package harness runs the real magnetar binary for the compatibility
// tests: it builds it once per test process, starts `magnetar standalone`
// on free loopback ports, waits until it serves, streams its output into
// the test log, and stops it (SIGTERM, or SIGKILL to simulate a crash).
// Tests talk to it over the network only, with unmodified clients.
//
// A test that needs a server of its own calls Start; a package whose tests
// can share one server declares a Shared and runs it from TestMain.
package harness

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// stopGrace is how long a SIGTERM'd server may take to exit before it
	// is killed. The server promises 10 s; the rest is margin for a
	// loaded machine.
	stopGrace = 15 * time.Second
	// defaultStartTimeout bounds the wait for /status to answer 200.
	defaultStartTimeout = 60 * time.Second
	// envPrefix marks the server's configuration variables, which are
	// removed from its environment so a developer's settings do not leak
	// into the tests.
	envPrefix = "MAGNETAR_"
)

// An Option configures a server started by Start or Shared.
type Option func(*config)

type config struct {
	args         []string
	dataDir      string
	startTimeout time.Duration
}

// WithArgs appends arguments to the standalone command line, after the
// data dir and listen addresses the harness sets (so a flag given here
// wins over the harness's own).
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithDataDir runs the server on dir instead of a fresh temp dir, e.g. to
// start a second server on the data a first one left.
func WithDataDir(dir string) Option {
	return func(c *config) { c.dataDir = dir }
}

// WithStartTimeout bounds how long Start and Restart wait for /status
// (default 60 s).
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) { c.startTimeout = d }
}

func newConfig(opts []Option) config {
	c := config{startTimeout: defaultStartTimeout}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Server is a magnetar standalone process and the addresses and data dir
// it keeps across restarts. Its methods are safe for concurrent use, but a
// lifecycle (Stop, Kill, Restart) is meant to be driven by one test.
type Server struct {
	bin     string
	cfg     config
	dataDir string
	pulsar  string // host:port of each listener, fixed for the Server's life
	http    string
	kafka   string
	bookie  string
	out     *sink

	mu   sync.Mutex
	proc *process // the current (or last) process; nil before the first start
	runs int      // processes started so far
}

// process is one run of the binary.
type process struct {
	cmd      *exec.Cmd
	out      *lineWriter
	done     chan struct{} // closed once the process has exited and its output is flushed
	err      error         // Wait's result, set before done is closed
	signaled bool          // the harness signaled it (an exit is expected); guarded by Server.mu
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// status describes how the process ended; call after done.
func (p *process) status() string {
	if p.cmd.ProcessState != nil {
		return p.cmd.ProcessState.String()
	}
	return fmt.Sprint(p.err)
}

// Start builds the binary if needed and starts `magnetar standalone` on
// free loopback ports with a temp data dir (or WithDataDir's), its output
// streamed into tb's log. It returns once GET /status answers 200, and
// fails tb if the server exits first or does not serve in time.
//
// At cleanup the server is stopped with SIGTERM (SIGKILL after 15 s), and
// tb fails if it does not exit 0, or if it had exited during the test
// without the harness asking it to.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := newConfig(opts)
	bin := Build(tb)
	if cfg.dataDir == "" {
		cfg.dataDir = filepath.Join(tb.TempDir(), "data")
	}
	s, err := newServer(bin, cfg, testSink(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.shutdown(); err != nil {
			tb.Error(err)
		}
		s.out.close()
	})
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// newServer picks the ports; it starts nothing.
func newServer(bin string, cfg config, out *sink) (*Server, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	return &Server{
		bin:     bin,
		cfg:     cfg,
		dataDir: cfg.dataDir,
		pulsar:  ports[0],
		http:    ports[1],
		kafka:   ports[2],
		bookie:  ports[3],
		out:     out,
	}, nil
}

// freePorts returns n distinct loopback addresses that were free a moment
// ago. The server binds them itself later, and again on restart, so they
// cannot be held open here; another process taking one in between is
// possible but unlikely on a test machine.
func freePorts(n int) ([]string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("harness: picking a free port: %w", err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// PulsarURL is the Pulsar service URL, pulsar://127.0.0.1:port.
func (s *Server) PulsarURL() string { return "pulsar://" + s.pulsar }

// PulsarAddr is the Pulsar listener's host:port.
func (s *Server) PulsarAddr() string { return s.pulsar }

// HTTPURL is the base URL of the HTTP listener, http://127.0.0.1:port.
func (s *Server) HTTPURL() string { return "http://" + s.http }

// KafkaAddr is the Kafka listener's host:port.
func (s *Server) KafkaAddr() string { return s.kafka }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// args is the command line of every run.
func (s *Server) args() []string {
	return append([]string{"standalone",
		"--data-dir", s.dataDir,
		"--pulsar-listen", s.pulsar,
		"--http-listen", s.http,
		"--kafka-listen", s.kafka,
		"--bookie-listen", s.bookie,
	}, s.cfg.args...)
}

// start runs the binary and waits until it serves. On failure the process
// is killed and the error carries its last output lines.
func (s *Server) start() error {
	s.mu.Lock()
	if s.proc != nil && !s.proc.exited() {
		s.mu.Unlock()
		return errors.New("harness: start: magnetar is already running")
	}
	s.runs++
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Env = serverEnv()
	cmd.SysProcAttr = sysProcAttr()
	p := &process{cmd: cmd, out: s.out.writer(fmt.Sprintf("magnetar#%d: ", s.runs)), done: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	// If the server leaves a child holding its output open, do not wait
	// for the copy forever once it has exited.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("harness: starting %s: %w", s.bin, err)
	}
	s.proc = p
	s.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		p.out.flush()
		close(p.done)
	}()

	if err := s.waitServing(p); err != nil {
		s.mu.Lock()
		p.signaled = true
		s.mu.Unlock()
		cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%w\nmagnetar command: %s\nlast output:\n%s", err, strings.Join(cmd.Args, " "), s.out.lastLines())
	}
	return nil
}

// serverEnv is this process's environment without MAGNETAR_* variables.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			env = append(env, kv)
		}
	}
	return env
}

// waitServing polls GET /status until it answers 200, the process exits,
// or the start timeout passes.
func (s *Server) waitServing(p *process) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(s.cfg.startTimeout)
	url := s.HTTPURL() + "/status"
	var last error
	for {
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /status: %s", resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("harness: magnetar exited (%s) before serving /status", p.status())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: magnetar did not serve %s within %v: %v", url, s.cfg.startTimeout, last)
		}
	}
}

// current returns the current process, or nil if none was started.
func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// signal sends sig to the running process and marks its exit expected.
func (s *Server) signal(sig syscall.Signal) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return nil, errors.New("harness: magnetar was never started")
	}
	if p.exited() {
		if p.signaled {
			return nil, errors.New("harness: magnetar is not running (already stopped)")
		}
		return nil, fmt.Errorf("harness: magnetar is not running: it exited by itself (%s)\nlast output:\n%s", p.status(), s.out.lastLines())
	}
	p.signaled = true
	if err := p.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("harness: signal %v: %w", sig, err)
	}
	return p, nil
}

// terminate sends SIGTERM and waits up to stopGrace for the exit, then
// SIGKILLs. It fails unless the process exited 0 within the grace period.
func (s *Server) terminate() error {
	p, err := s.signal(syscall.SIGTERM)
	if err != nil {
		return err
	}
	start := time.Now()
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("harness: magnetar did not exit within %v of SIGTERM; killed it\nlast output:\n%s", stopGrace, s.out.lastLines())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("harness: magnetar exited with %s after SIGTERM (%v), want exit status 0\nlast output:\n%s",
			p.status(), time.Since(start).Round(time.Millisecond), s.out.lastLines())
	}
	return nil
}

// Stop sends SIGTERM and waits for the process to exit; it fails tb unless
// the process exits 0 within 15 s (it is killed after that).
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	if err := s.terminate(); err != nil {
		tb.Fatal(err)
	}
}

// Kill sends SIGKILL, a crash, and waits for the process to be gone.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	p, err := s.signal(syscall.SIGKILL)
	if err != nil {
		tb.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		tb.Fatalf("harness: magnetar still running %v after SIGKILL", stopGrace)
	}
}

// Restart starts the server again on the same data dir, ports and
// arguments, after Stop or Kill, and waits until it serves.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
}

// Running reports an error if the server is not running: never started,
// stopped, or exited by itself (then with its last output).
func (s *Server) Running() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	switch {
	case p == nil:
		return errors.New("harness: magnetar was never started")
	case !p.exited():
		return nil
	case p.signaled:
		return errors.New("harness: magnetar was stopped")
	default:
		return fmt.Errorf("harness: magnetar exited by itself (%s)\nlast output:\n%s", p.status(), s.out.lastLines())
	}
}

// shutdown ends the server at the end of its life: SIGTERM if it is
// running (which must exit 0), nothing if the harness already stopped
// it, an error if it exited without being asked to.
func (s *Server) shutdown() error {
	p := s.current()
	if p == nil {
		return nil
	}
	s.mu.Lock()
	exited, signaled := p.exited(), p.signaled
	s.mu.Unlock()
	switch {
	case !exited:
		return s.terminate()
	case !signaled:
		return fmt.Errorf("harness: magnetar exited during the test without being asked to (%s)\nlast output:\n%s", p.status(), s.out.lastLines())
	}
	return nil
}
