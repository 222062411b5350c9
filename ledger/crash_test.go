package ledger

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

// The crash test: a child process (this test binary, re-executed) runs
// three bookies on fixed loopback ports over fsync'd storage in a
// directory, a meta/local store in the same directory, and a managed
// ledger appending as fast as it can; it prints every acknowledged entry.
// The parent SIGKILLs it, brings the same bookies and store up in-process,
// reopens the managed ledger and checks that every acknowledged entry
// reads back at its offset and that offsets go on without gaps or repeats.

const (
	crashDirEnv   = "LEDGER_CRASH_DIR"
	crashPortsEnv = "LEDGER_CRASH_PORTS"
	crashRoundEnv = "LEDGER_CRASH_ROUND"
	crashName     = "public/default/persistent/crash-partition-0"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir, strings.Split(os.Getenv(crashPortsEnv), ","), os.Getenv(crashRoundEnv)) // never returns
	}
	os.Exit(m.Run())
}

// crashNode is the bookies and store of one process over the directory.
type crashNode struct {
	store   *local.Store
	bookies []*testBookie
	env     *testEnv
}

func startCrashNode(dir string, addrs []string) (*crashNode, error) {
	store, err := local.Open(filepath.Join(dir, "meta"), local.Options{Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	n := &crashNode{store: store}
	if err := meta.EnsurePath(context.Background(), store, meta.BookiesAvailableRoot); err != nil {
		return nil, err
	}
	for i, a := range addrs {
		b, err := startBookie(store, bookieOptions{fs: vfs.Default, dir: filepath.Join(dir, fmt.Sprintf("bookie%d", i)), addr: a})
		if err != nil {
			return nil, err
		}
		n.bookies = append(n.bookies, b)
	}
	c, err := client.New(client.Config{Meta: store, Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	cache, err := NewCache(CacheConfig{MaxBytes: 32 << 20, Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	bk := &countingBookies{Bookies: ClientBookies(c)}
	f, err := NewFactory(Config{Bookies: bk, Meta: store, Cache: cache, Logger: testLogger(),
		EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, MaxEntriesPerLedger: 300, MinLedgerAge: -1})
	if err != nil {
		return nil, err
	}
	n.env = &testEnv{f: f, bookies: bk, cache: cache, meta: store}
	return n, nil
}

func crashChild(dir string, addrs []string, round string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	n, err := startCrashNode(dir, addrs)
	if err != nil {
		fail(err)
	}
	ml, err := n.env.f.Open(context.Background(), crashName)
	if err != nil {
		fail(err)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	window := make(chan struct{}, 64)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := 0; ; i++ {
		window <- struct{}{}
		payload := fmt.Sprintf("r%s-%d", round, i)
		msgs := int32(1 + rng.IntN(10))
		ml.Append([]byte(payload), FormatKafka, msgs, func(pos Position, off int64, err error) {
			if err != nil {
				fail(err)
			}
			mu.Lock()
			fmt.Fprintf(out, "%d %d %d %d %s\n", pos.Ledger, pos.Entry, off, msgs, payload)
			out.Flush()
			mu.Unlock()
			<-window
		})
	}
}

type crashAck struct {
	pos      Position
	offset   int64
	messages int32
	payload  string
}

func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	addrs := freePorts(t, 3)
	var all []crashAck
	for round := range 3 {
		acked := runCrashChild(t, dir, addrs, round, 1500)
		n, err := startCrashNode(dir, addrs)
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		ml, err := n.env.f.Open(ctx, crashName)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, acked...)
		for i, a := range all {
			es, err := ml.Read(ctx, a.pos, 1)
			if err != nil || len(es) != 1 {
				t.Fatalf("round %d: acknowledged %+v: %v %v", round, a, es, err)
			}
			h := es[0].Header
			if h.FirstOffset != a.offset || h.Messages != a.messages || string(es[0].Payload) != a.payload {
				t.Fatalf("round %d: acknowledged %+v, read %+v %q", round, a, h, es[0].Payload)
			}
			if i > 0 && all[i-1].offset+int64(all[i-1].messages) != a.offset && all[i-1].pos.Ledger == a.pos.Ledger {
				t.Fatalf("round %d: acknowledged offsets jump within a ledger: %+v then %+v", round, all[i-1], a)
			}
		}
		entries := checkContinuous(t, ctx, ml)
		last := all[len(all)-1]
		next := ml.NextOffset()
		if next < last.offset+int64(last.messages) {
			t.Fatalf("round %d: next offset %d, last acknowledged entry ends at %d", round, next, last.offset+int64(last.messages))
		}
		r := appendSync(t, ml, "after", 1)
		if r.err != nil || r.offset != next {
			t.Fatalf("round %d: append after recovery: %+v, want offset %d", round, r, next)
		}
		t.Logf("round %d: %d acknowledged entries survived SIGKILL (%d entries recovered, %d ledgers); next offset %d",
			round, len(acked), len(entries), len(ml.Ledgers()), next)
		// The appended entry must count for the next round's continuity.
		all = append(all, crashAck{r.pos, r.offset, 1, "after"})
		n.stop(t)
	}
}

func (n *crashNode) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.env.f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n.env.cache.Close()
	for _, b := range n.bookies {
		b.server.Shutdown(ctx)
		b.st.Close()
	}
	n.store.Close()
}

// freePorts returns n loopback addresses that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	var addrs []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// runCrashChild runs the child until it acknowledged at least n entries,
// SIGKILLs it and returns every entry it acknowledged.
func runCrashChild(t *testing.T, dir string, addrs []string, round, n int) []crashAck {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashPortsEnv+"="+strings.Join(addrs, ","),
		crashRoundEnv+"="+strconv.Itoa(round))
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
	var acked []crashAck
	parse := func(l string) {
		var a crashAck
		if _, err := fmt.Sscanf(l, "%d %d %d %d %s", &a.pos.Ledger, &a.pos.Entry, &a.offset, &a.messages, &a.payload); err != nil {
			t.Fatalf("child printed %q: %v", l, err)
		}
		acked = append(acked, a)
	}
	deadline := time.After(90 * time.Second)
	for len(acked) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited early: %s", stderr.String())
			}
			parse(l)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("child acknowledged only %d entries in 90s: %s", len(acked), stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for l := range lines { // printed before it died: acknowledged too
		parse(l)
	}
	cmd.Wait()
	return acked
}
