// Package cluster_test runs real clients (pulsar-client-go, franz-go)
// against a cluster of magnetar processes on a real ZooKeeper: three
// `magnetar bookie`s and two or more `magnetar broker`s sharing the topics
// by bundle ownership. ZooKeeper is the test one (MAGNETAR_TEST_ZK, which
// `make test` sets); each test uses its own chroot.
package cluster_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/compat-tests/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Run(m)) }

// proc is a running magnetar process.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	lines  chan string
	exited chan struct{}
	err    error
}

// start runs the magnetar binary with args, its environment without
// MAGNETAR_* settings.
func start(t testing.TB, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(harness.Build(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAGNETAR_") {
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
		sc.Buffer(make([]byte, 64<<10), 1<<20)
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
			cmd.Process.Signal(syscall.SIGCONT)
			cmd.Process.Kill()
			<-p.exited
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("magnetar %s: the race detector reported a data race", args[0])
		}
		if t.Failed() {
			t.Logf("magnetar %s stderr:\n%s", args[0], p.stderr.String())
		}
	})
	return p
}

// waitLine waits for a stderr line containing substr and returns it.
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

// logged reports whether the process has written a stderr line
// containing substr so far.
func (p *proc) logged(substr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Contains(p.stderr.String(), substr)
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill() {
	p.t.Helper()
	p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Fatal("magnetar still running 10s after SIGKILL")
	}
}

// cli runs a magnetar command line to its end and returns its exit code
// and output.
func cli(t testing.TB, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(harness.Build(t), args...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return 0, string(out)
}

// bookieListen is the --bookie-listen of a test bookie: port 0, so that
// the bookie binds a free port itself and takes it as its identity. A port
// picked here and bound later by the process could be taken in between
// (an outgoing connection's ephemeral port), and was once.
const bookieListen = "127.0.0.1:0"

// testZK returns the test ZooKeeper's address and a fresh chroot.
func testZK(t testing.TB) (addr, chroot string) {
	t.Helper()
	addr = os.Getenv("MAGNETAR_TEST_ZK")
	if addr == "" {
		t.Fatal("MAGNETAR_TEST_ZK is not set: run `make test`, or `scripts/zookeeper.sh start` and export the address it prints")
	}
	var r [6]byte
	rand.Read(r[:])
	return addr, "/magnetar-cluster-compat/" + hex.EncodeToString(r[:])
}

// eventually polls f until it succeeds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
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

// readyLine is a broker's JSON "ready" log line.
type readyLine struct {
	HTTP             string `json:"http"`
	PulsarAdvertised string `json:"pulsar-advertised"`
	KafkaAdvertised  string `json:"kafka-advertised"`
}

// testCluster is a running cluster.
type testCluster struct {
	t       testing.TB
	store   string // zk:host:port/chroot
	brokers []*clusterBroker
}

type clusterBroker struct {
	p *proc
	r readyLine
}

func (b *clusterBroker) web() string { return "http://" + b.r.HTTP }

// startTestCluster starts 3 bookies and n brokers; extra are added to
// every broker's arguments.
func startTestCluster(t testing.TB, n int, extra ...string) *testCluster {
	t.Helper()
	zkAddr, chroot := testZK(t)
	c := &testCluster{t: t, store: "zk:" + zkAddr + chroot}
	for i := range 3 {
		p := start(t, "bookie", "--data-dir", filepath.Join(t.TempDir(), fmt.Sprint("b", i)),
			"--bookie-listen", bookieListen, "--metadata-store", c.store, "--zk-session-timeout", "4s", "--log-format", "json")
		p.waitLine(`"msg":"magnetar bookie ready"`, 60*time.Second)
	}
	for range n {
		c.startBroker(extra...)
	}
	return c
}

func (c *testCluster) startBroker(extra ...string) *clusterBroker {
	c.t.Helper()
	args := append([]string{"broker", "--metadata-store", c.store, "--zk-session-timeout", "3s", "--cluster", "test",
		"--pulsar-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--load-report-interval", "1s", "--log-format", "json"}, extra...)
	p := start(c.t, args...)
	line := p.waitLine(`"msg":"magnetar broker ready"`, 60*time.Second)
	b := &clusterBroker{p: p}
	if err := json.Unmarshal([]byte(line), &b.r); err != nil {
		c.t.Fatalf("ready line %q: %v", line, err)
	}
	c.brokers = append(c.brokers, b)
	return b
}

func (c *testCluster) pulsarURL(bs ...*clusterBroker) string {
	var hosts []string
	for _, b := range bs {
		hosts = append(hosts, b.r.PulsarAdvertised)
	}
	return "pulsar://" + strings.Join(hosts, ",")
}

// httpDo makes a request and returns the status and body (redirects are
// followed, as admin clients do).
func httpDo(t testing.TB, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type bundleOwnership struct {
	Bundle        string `json:"bundle"`
	Owner         string `json:"owner"`
	WebServiceURL string `json:"webServiceUrl"`
}

func ownership(t testing.TB, b *clusterBroker) []bundleOwnership {
	t.Helper()
	code, body := httpDo(t, "GET", b.web()+"/admin/v2/namespaces/public/default/ownership", "")
	var out []bundleOwnership
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil {
		t.Fatalf("ownership: %d %s", code, body)
	}
	return out
}

// setRetention keeps everything in public/default (a topic without
// subscriptions keeps nothing otherwise, as in Pulsar).
func setRetention(t testing.TB, b *clusterBroker) {
	t.Helper()
	if code, body := httpDo(t, "POST", b.web()+"/admin/v2/namespaces/public/default/retention",
		`{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}`); code != 204 {
		t.Fatalf("set retention: %d %s", code, body)
	}
}

func createPartitioned(t testing.TB, b *clusterBroker, name string, n int) {
	t.Helper()
	if code, body := httpDo(t, "PUT", b.web()+"/admin/v2/persistent/public/default/"+name+"/partitions", fmt.Sprint(n)); code != 204 {
		t.Fatalf("create %s: %d %s", name, code, body)
	}
}
