package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns
	}
	os.Exit(m.Run())
}

func open(t *testing.T, dir string) *local.Store {
	t.Helper()
	s, err := local.Open(dir, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPersistsAcrossReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	if err := meta.EnsurePath(ctx, s, "/a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "/a/b", []byte("v1"), 0); err != nil {
		t.Fatal(err)
	}
	seq, err := s.Create(ctx, "/a/s-", []byte("x"), meta.Sequential)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/a/eph", nil, meta.Ephemeral); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "/gone", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "/gone", meta.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	v, st, err := s.Get(ctx, "/a/b")
	if err != nil || string(v) != "v1" || st.Version != 1 || st.Created.IsZero() || st.Modified.Before(st.Created) {
		t.Fatalf("after reopen: /a/b = %q, %+v, %v", v, st, err)
	}
	if _, ok, _ := s.Exists(ctx, "/a/eph"); ok {
		t.Fatal("ephemeral node survived a restart")
	}
	if _, ok, _ := s.Exists(ctx, "/gone"); ok {
		t.Fatal("deleted node came back")
	}
	if _, ok, _ := s.Exists(ctx, seq); !ok {
		t.Fatalf("sequential node %s lost", seq)
	}
	// The sequential counter persisted: the next name is after the first.
	next, err := s.Create(ctx, "/a/s-", nil, meta.Sequential)
	if err != nil || next <= seq {
		t.Fatalf("sequential after reopen: %s (first %s), %v", next, seq, err)
	}
	kids, err := s.Children(ctx, "/a")
	if err != nil || strings.Join(kids, ",") != "b,"+meta.Base(seq)+","+meta.Base(next) {
		t.Fatalf("children after reopen: %v, %v", kids, err)
	}
}

func TestSecondProcessRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	// bbolt's flock is per open file description, so a second Open in this
	// process is refused just as another process would be.
	_, err := local.Open(dir, local.Options{})
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open: %v", err)
	}
}

func TestCorruptRecordReported(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.Create(context.Background(), "/x", []byte("fine"), 0); err != nil {
		t.Fatal(err)
	}
	s.Close()

	db, err := bolt.Open(filepath.Join(dir, "meta.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("nodes")).Put([]byte("/x"), []byte{1, 2, 3})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	_, err = local.Open(dir, local.Options{})
	var ce *local.CorruptionError
	if !errors.As(err, &ce) || ce.Key != "/x" || !strings.Contains(err.Error(), "meta.db") {
		t.Fatalf("open of a corrupt store: %v", err)
	}
}

func TestFailedCommitRollsBack(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	defer s.Close()
	if _, err := s.Create(ctx, "/n", []byte("v0"), 0); err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := s.GetW(ctx, "/n")
	if err != nil {
		t.Fatal(err)
	}

	diskFull := errors.New("no space left on device")
	local.SetCommitHook(s, func(func(*bolt.Tx) error) error { return diskFull })
	if _, err := s.Set(ctx, "/n", []byte("v1"), 0); !errors.Is(err, diskFull) {
		t.Fatalf("set on a full disk: %v", err)
	}
	if _, err := s.Create(ctx, "/m", nil, 0); !errors.Is(err, diskFull) {
		t.Fatalf("create on a full disk: %v", err)
	}
	// Ephemeral nodes need no disk and still work.
	if _, err := s.Create(ctx, "/e", nil, meta.Ephemeral); err != nil {
		t.Fatalf("ephemeral create on a full disk: %v", err)
	}
	select {
	case ev := <-watch:
		t.Fatalf("watch fired for a write that failed: %+v", ev)
	default:
	}

	local.SetCommitHook(s, nil)
	v, st, err := s.Get(ctx, "/n")
	if err != nil || string(v) != "v0" || st.Version != 0 {
		t.Fatalf("failed set is visible: %q %+v %v", v, st, err)
	}
	// The writer's state was rolled back too: version 0 is still current.
	if _, err := s.Set(ctx, "/n", []byte("v1"), 0); err != nil {
		t.Fatalf("set after the disk recovered: %v", err)
	}
	if _, err := s.Create(ctx, "/m", nil, 0); err != nil {
		t.Fatalf("create after the disk recovered: %v", err)
	}
	if ev := <-watch; ev.Type != meta.EventDataChanged {
		t.Fatalf("watch after recovery: %+v", ev)
	}
}

// The crash test: a child process writes as fast as it can from several
// goroutines, printing each write once it is acknowledged; it is killed
// with SIGKILL, and every acknowledged write must be there on reopen.

const crashChildEnv = "MAGNETAR_LOCAL_CRASH_DIR"

func crashChild(dir string) {
	s, err := local.Open(dir, local.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	round := os.Getenv("MAGNETAR_LOCAL_CRASH_ROUND")
	if err := meta.EnsurePath(ctx, s, "/crash/r"+round); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	ack := func(line string) {
		mu.Lock()
		out.WriteString(line + "\n")
		out.Flush()
		mu.Unlock()
	}
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				p := fmt.Sprintf("/crash/r%s/g%d-%d", round, g, i)
				if _, err := s.Create(ctx, p, []byte(p), 0); err != nil {
					fmt.Fprintln(os.Stderr, "child create:", err)
					os.Exit(3)
				}
				ack("create " + p)
				st, err := s.Set(ctx, p, []byte("set"), 0)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child set:", err)
					os.Exit(3)
				}
				ack(fmt.Sprintf("set %s %d", p, st.Version))
			}
		}()
	}
	select {}
}

func TestCrashKeepsAcknowledgedWrites(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		acked := runAndKill(t, dir, round, 2000)
		s := open(t, dir)
		ctx := context.Background()
		for _, line := range acked {
			f := strings.Fields(line)
			v, st, err := s.Get(ctx, f[1])
			switch {
			case err != nil:
				t.Fatalf("round %d: acknowledged %q lost: %v", round, line, err)
			case f[0] == "create" && string(v) != f[1] && string(v) != "set":
				t.Fatalf("round %d: %s holds %q", round, f[1], v)
			case f[0] == "set" && (string(v) != "set" || strconv.Itoa(int(st.Version)) != f[2]):
				t.Fatalf("round %d: acknowledged %q, store has %q version %d", round, line, v, st.Version)
			}
		}
		// The store is writable after recovery.
		if _, err := s.Create(ctx, fmt.Sprintf("/crash/after%d", round), nil, 0); err != nil {
			t.Fatalf("round %d: write after recovery: %v", round, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d acknowledged writes survived SIGKILL", round, len(acked))
	}
}

// runAndKill starts the child, lets it acknowledge at least n writes, kills
// it and returns every line it acknowledged.
func runAndKill(t *testing.T, dir string, round, n int) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "MAGNETAR_LOCAL_CRASH_ROUND="+strconv.Itoa(round))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var acked []string
	deadline := time.After(60 * time.Second)
	for len(acked) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited early: %v", stderr.String())
			}
			acked = append(acked, l)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("child acknowledged only %d writes in 60s: %s", len(acked), stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for l := range lines { // what it printed before dying was acknowledged too
		acked = append(acked, l)
	}
	cmd.Wait()
	return acked
}

// BenchmarkFsync measures the machine's limit that bounds this store: one
// 4 KiB write plus fdatasync in a file of the test's directory.
func BenchmarkFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "fsync"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for b.Loop() {
		if _, err := f.WriteAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
}
