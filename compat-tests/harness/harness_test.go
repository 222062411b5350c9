package harness

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

func getStatus(t *testing.T, s *Server) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(s.HTTPURL() + "/status")
	if err != nil {
		t.Fatalf("GET /status: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func portClosed(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// TestServerLifecycle drives the whole lifecycle against the real binary:
// start, /status, SIGTERM (exit 0), restart on the same data dir and
// ports, SIGKILL, and a restart after the crash.
func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.PulsarURL(), "pulsar://127.0.0.1:") || !strings.HasPrefix(s.HTTPURL(), "http://127.0.0.1:") {
		t.Fatalf("urls %s %s, want loopback", s.PulsarURL(), s.HTTPURL())
	}
	if code, body := getStatus(t, s); code != 200 {
		t.Fatalf("/status = %d %q, want 200", code, body)
	}
	if err := s.Running(); err != nil {
		t.Fatal(err)
	}
	pulsarURL, httpURL, dataDir := s.PulsarURL(), s.HTTPURL(), s.DataDir()
	entries, err := os.ReadDir(dataDir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("data dir %s: %v entries, err %v; want the server's files", dataDir, len(entries), err)
	}

	s.Stop(t)
	if s.Running() == nil {
		t.Fatal("Running() = nil after Stop")
	}
	if !portClosed(strings.TrimPrefix(httpURL, "http://")) {
		t.Error("http port still open after Stop")
	}
	// A marker in the data dir shows the restart uses the same one.
	marker := filepath.Join(dataDir, "harness-marker")
	if err := os.WriteFile(marker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	s.Restart(t)
	if s.PulsarURL() != pulsarURL || s.HTTPURL() != httpURL || s.DataDir() != dataDir {
		t.Fatalf("after restart: %s %s %s, want %s %s %s", s.PulsarURL(), s.HTTPURL(), s.DataDir(), pulsarURL, httpURL, dataDir)
	}
	if code, _ := getStatus(t, s); code != 200 {
		t.Fatalf("/status after restart = %d", code)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("marker gone after restart: %v", err)
	}

	s.Kill(t)
	if s.Running() == nil {
		t.Fatal("Running() = nil after Kill")
	}
	if !portClosed(strings.TrimPrefix(httpURL, "http://")) {
		t.Error("http port still open after Kill")
	}

	// It recovers from the crash on the same data dir; cleanup then stops
	// it with SIGTERM and checks the exit status.
	s.Restart(t)
	if code, _ := getStatus(t, s); code != 200 {
		t.Fatalf("/status after restart from SIGKILL = %d", code)
	}
}

// TestStartFailureIsFast: a server that exits during startup is reported
// at once, with its output, not after the start timeout.
func TestStartFailureIsFast(t *testing.T) {
	bin := Build(t)
	out := &sink{emit: func(l string) { t.Log(l) }}
	defer out.close()
	cfg := newConfig([]Option{WithArgs("--log-level", "verbose"), WithDataDir(t.TempDir())})
	s, err := newServer(bin, cfg, out)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.start()
	if err == nil {
		s.shutdown()
		t.Fatal("start with a bad flag succeeded")
	}
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Errorf("start failed after %v; want at once", elapsed)
	}
	for _, want := range []string{"exited", "before serving", `invalid log-level "verbose"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := s.shutdown(); err != nil {
		t.Errorf("shutdown after a failed start: %v", err)
	}
}

// TestUnexpectedExitIsReported: a server that exits without the harness
// asking (here: killed behind its back) is reported by Running and by the
// end-of-test shutdown.
func TestUnexpectedExitIsReported(t *testing.T) {
	bin := Build(t)
	out := &sink{emit: func(l string) { t.Log(l) }}
	defer out.close()
	s, err := newServer(bin, newConfig([]Option{WithDataDir(t.TempDir())}), out)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	p := s.current()
	p.cmd.Process.Kill()
	<-p.done
	if err := s.Running(); err == nil || !strings.Contains(err.Error(), "exited by itself") {
		t.Errorf("Running() = %v, want an exited-by-itself error", err)
	}
	if err := s.shutdown(); err == nil || !strings.Contains(err.Error(), "without being asked") {
		t.Errorf("shutdown() = %v, want an unexpected-exit error", err)
	}
}

func TestWaitFor(t *testing.T) {
	start := time.Now()
	n := 0
	WaitFor(t, 5*time.Second, func() bool { n++; return n == 3 }, "the third poll")
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("WaitFor took %v", time.Since(start))
	}
}

func TestName(t *testing.T) {
	t.Run("Sub Test/With_Odd chars", func(t *testing.T) {
		a, b := Name(t), Name(t)
		if a == b {
			t.Errorf("Name returned %q twice", a)
		}
		prefix := "testname-sub-test-with-odd-chars-"
		if !strings.HasPrefix(a, prefix) || len(a) != len(prefix)+8 {
			t.Errorf("Name = %q, want %s<8 hex digits>", a, prefix)
		}
	})
}

// TestNewClient: a client can be made (it connects lazily) and is closed
// at cleanup without logging into a finished test.
func TestNewClient(t *testing.T) {
	c := NewClient(t, "pulsar://127.0.0.1:1")
	if c == nil {
		t.Fatal("nil client")
	}
}
