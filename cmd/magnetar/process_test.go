package main

// Tests of the real binary: built once (with -race when the tests run
// under it), started as a process, driven over HTTP and signals.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123456789ab"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// magnetarBinary builds the binary on first use, with the version and
// commit stamped the way the Makefile does.
func magnetarBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "magnetar-test-bin-")
		if binErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		binPath = filepath.Join(binDir, "magnetar")
		args := []string{"build", "-o", binPath,
			"-ldflags", fmt.Sprintf("-X main.version=%s -X main.commit=%s", testVersion, testCommit)}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool, append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is a running magnetar process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, after exited
	mu     sync.Mutex
	stderr strings.Builder
	lines  chan string // stderr lines, as they come
}

// startMagnetar starts the binary with args and an environment without
// MAGNETAR_* settings.
func startMagnetar(t *testing.T, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(magnetarBinary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envPrefix) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, exited: make(chan struct{}), lines: make(chan string, 1000)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("magnetar stderr:\n%s", p.output())
		}
	})
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLine waits for a stderr line containing substr.
func (p *proc) waitLine(substr string, timeout time.Duration) string {
	p.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, substr) {
				return line
			}
		case <-p.exited:
			// Drain what was printed before the exit.
			for {
				select {
				case line := <-p.lines:
					if strings.Contains(line, substr) {
						return line
					}
				default:
					p.t.Fatalf("magnetar exited (%v) before logging %q", p.err, substr)
				}
			}
		case <-deadline:
			p.t.Fatalf("magnetar did not log %q within %v", substr, timeout)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.t.Fatalf("magnetar still running %v later", timeout)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("wait: %v", p.err)
	}
	return 0
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// readyLine is the JSON "ready" log line.
type readyLine struct {
	Msg              string `json:"msg"`
	Serving          string `json:"serving"`
	NotServingYet    string `json:"not-serving-yet"`
	HTTP             string `json:"http"`
	PulsarAdvertised string `json:"pulsar-advertised"`
	KafkaAdvertised  string `json:"kafka-advertised"`
	MetadataStore    string `json:"metadata-store"`
	Version          string `json:"version"`
}

// startStandaloneProc starts `magnetar standalone` on free loopback ports
// (the kernel picks them: port 0) and waits until it says it is ready.
func startStandaloneProc(t *testing.T, extra ...string) (*proc, readyLine) {
	t.Helper()
	args := append([]string{"standalone",
		"--data-dir", filepath.Join(t.TempDir(), "data"),
		"--http-listen", "127.0.0.1:0",
		"--bookie-listen", "127.0.0.1:0",
		"--pulsar-listen", "127.0.0.1:0",
		"--kafka-listen", "127.0.0.1:0",
		"--metadata-store", "local:",
		"--log-format", "json",
	}, extra...)
	p := startMagnetar(t, args...)
	line := p.waitLine(`"msg":"magnetar standalone ready"`, 60*time.Second)
	var r readyLine
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("ready line %q: %v", line, err)
	}
	return p, r
}

// eventually polls f until it succeeds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpGet(url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestStandaloneServesAndStops: the binary serves /status and /metrics
// with Go runtime, process and build metrics, and exits 0 promptly on
// SIGTERM or SIGINT.
func TestStandaloneServesAndStops(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p, ready := startStandaloneProc(t)
			if ready.Serving != "pulsar,kafka,http,bookie" || ready.NotServingYet != "" {
				t.Errorf("ready line says serving %q, not serving %q", ready.Serving, ready.NotServingYet)
			}
			// Pulsar and Kafka are served: their advertised ports are the ones bound.
			for _, adv := range []string{ready.PulsarAdvertised, ready.KafkaAdvertised} {
				if !strings.HasPrefix(adv, "127.0.0.1:") || strings.HasSuffix(adv, ":0") {
					t.Errorf("advertised pulsar %q kafka %q, want the listen hosts and bound ports", ready.PulsarAdvertised, ready.KafkaAdvertised)
				}
			}
			if !strings.HasPrefix(ready.MetadataStore, "local:") || !strings.HasSuffix(ready.MetadataStore, "meta") {
				t.Errorf("metadata store %q, want local:<data-dir>/meta", ready.MetadataStore)
			}
			base := "http://" + ready.HTTP
			eventually(t, 10*time.Second, func() error {
				code, body, err := httpGet(base + "/status")
				if err != nil {
					return err
				}
				if code != 200 || strings.TrimSpace(body) != "OK" {
					return fmt.Errorf("/status = %d %q", code, body)
				}
				return nil
			})
			code, body, err := httpGet(base + "/metrics")
			if err != nil || code != 200 {
				t.Fatalf("/metrics = %d, %v", code, err)
			}
			for _, w := range []string{
				"go_goroutines ",
				"process_cpu_seconds_total ",
				"process_resident_memory_bytes ",
				fmt.Sprintf(`magnetar_build_info{commit="%s",go_version="%s",version="%s"} 1`, testCommit, runtime.Version(), testVersion),
			} {
				if !strings.Contains(body, w) {
					t.Errorf("/metrics lacks %q", w)
				}
			}

			start := time.Now()
			p.signal(sig)
			if code := p.wait(10 * time.Second); code != 0 {
				t.Fatalf("exit code %d after %v, want 0", code, sig)
			}
			t.Logf("exited %v after %v", sig, time.Since(start).Round(time.Millisecond))
			if !strings.Contains(p.output(), `"msg":"shutdown complete"`) {
				t.Error("no shutdown complete line")
			}
			if _, err := net.DialTimeout("tcp", ready.HTTP, time.Second); err == nil {
				t.Error("http port still open after exit")
			}
		})
	}
}

// startPartialRequest opens a connection and sends part of a request's
// headers. net/http's Shutdown waits for such a connection (up to 5 s)
// before it gives up on it, which holds the process in shutdown. (Requests
// whose handler is running are drained to completion: protocol/admin's
// TestShutdownDrains proves that.)
func startPartialRequest(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: magnetar\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server accepts connections in order, so once a request on a later
	// connection is answered, this one has been accepted and is tracked:
	// a shutdown now cannot miss it.
	if code, _, err := httpGet("http://" + addr + "/status"); err != nil || code != 200 {
		t.Fatalf("/status = %d, %v", code, err)
	}
}

// TestStandaloneSecondSignal: while shutdown waits for an in-flight
// request, a second signal makes the process exit at once with code 1.
func TestStandaloneSecondSignal(t *testing.T) {
	p, ready := startStandaloneProc(t)
	startPartialRequest(t, ready.HTTP)
	p.signal(syscall.SIGTERM)
	p.waitLine(`"msg":"shutting down"`, 10*time.Second)
	// The drain now waits up to 5 s for the partial request.
	start := time.Now()
	p.signal(syscall.SIGINT)
	if code := p.wait(httpDrainTimeout); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if elapsed := time.Since(start); elapsed > httpDrainTimeout/2 {
		t.Errorf("exit took %v after the second signal; want at once", elapsed)
	}
	out := p.output()
	if !strings.Contains(out, "second signal") || !strings.Contains(out, `"signal":"interrupt"`) {
		t.Errorf("second signal not logged")
	}
}

// TestStandalonePortInUse: a busy http port fails startup with exit 1 and
// a message naming the listener and address.
func TestStandalonePortInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	p := startMagnetar(t, "standalone", "--data-dir", t.TempDir(), "--http-listen", addr, "--bookie-listen", "127.0.0.1:0")
	if code := p.wait(30 * time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	want := "magnetar standalone: http listener " + addr + ": address already in use"
	if !strings.Contains(p.output(), want) {
		t.Errorf("stderr lacks %q", want)
	}
}

// TestStandaloneUnwritableDataDir: a data dir that cannot be created or
// written fails startup with exit 1 and a message naming it. Tests run as
// root, which ignores permission bits, so the dir sits under a regular
// file; the permission case runs only for other users.
func TestStandaloneUnwritableDataDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, dir, want string }{
		{"under a file", filepath.Join(file, "data"), "data dir " + filepath.Join(file, "data") + ": cannot create it: "},
		{"is a file", file, "data dir " + file + ": cannot create it: "},
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, dir, want string }{"read-only", ro, "data dir " + ro + ": not writable: "})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startMagnetar(t, "standalone", "--data-dir", tc.dir, "--http-listen", "127.0.0.1:0", "--bookie-listen", "127.0.0.1:0")
			if code := p.wait(30 * time.Second); code != 1 {
				t.Fatalf("exit code %d, want 1", code)
			}
			if !strings.Contains(p.output(), tc.want) {
				t.Errorf("stderr lacks %q", tc.want)
			}
		})
	}
}

// TestBinaryUsageError: a bad setting exits 2 before anything starts.
func TestBinaryUsageError(t *testing.T) {
	p := startMagnetar(t, "standalone", "--log-level", "verbose")
	if code := p.wait(30 * time.Second); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(p.output(), `invalid log-level "verbose"`) {
		t.Error("stderr lacks the invalid value")
	}
}

// TestBinaryVersion: the version and commit come from -ldflags.
func TestBinaryVersion(t *testing.T) {
	out, err := exec.CommandContext(context.Background(), magnetarBinary(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"magnetar " + testVersion + "\n",
		"commit:     " + testCommit + "\n",
		"go version: " + runtime.Version() + "\n",
		"os/arch:    " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
	} {
		if !strings.Contains(string(out), w) {
			t.Errorf("version output lacks %q:\n%s", w, out)
		}
	}
}

// TestBinaryHelp: every command's --help, from the binary, lists its keys.
func TestBinaryHelp(t *testing.T) {
	for _, path := range commandPaths() {
		out, err := exec.Command(magnetarBinary(t), append(path, "--help")...).Output()
		if err != nil {
			t.Fatalf("%v --help: %v", path, err)
		}
		a := newApp(io.Discard, io.Discard)
		cmd, _, err := newRootCommand(a).Find(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range a.settingsOf(cmd) {
			if !strings.Contains(string(out), "--"+s.name+" ") {
				t.Errorf("magnetar %v --help lacks --%s", path, s.name)
			}
		}
	}
}
