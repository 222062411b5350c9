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

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

// The crash test: a child process (this test binary, re-executed) runs
// three bookies on fixed loopback ports over fsync'd storage in a
// directory, a meta/local store in the same directory, and a managed
// ledger appending as fast as it can; it prints every acknowledged entry.
// It also consumes through a durable cursor, acknowledging entries one by
// one, some late, and now and then cumulatively; it prints each
// acknowledgement before making it and each cursor state once it is
// written. The parent SIGKILLs it, brings the same bookies and store up
// in-process, reopens the managed ledger and checks that every
// acknowledged entry reads back at its offset and that offsets go on
// without gaps or repeats; and that the cursor is at least where it was
// last written and acknowledges nothing that was not acknowledged, so
// that every other entry is read again.

const (
	crashDirEnv   = "LEDGER_CRASH_DIR"
	crashPortsEnv = "LEDGER_CRASH_PORTS"
	crashRoundEnv = "LEDGER_CRASH_ROUND"
	crashName     = "public/default/persistent/crash-partition-0"
	crashCursor   = "crash-sub"
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
	bookies []*bookietest.Bookie
	env     *testEnv
}

func startCrashNode(dir string, addrs []string, writing, written func(*Cursor, storedCursor)) (*crashNode, error) {
	store, err := local.Open(filepath.Join(dir, "meta"), local.Options{Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	n := &crashNode{store: store}
	if err := meta.EnsurePath(context.Background(), store, meta.BookiesAvailableRoot); err != nil {
		return nil, err
	}
	for i, a := range addrs {
		b, err := bookietest.Start(store, bookietest.Options{FS: vfs.Default, Dir: filepath.Join(dir, fmt.Sprintf("bookie%d", i)), Addr: a, Logger: testLogger()})
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
		EnsembleSize: 3, WriteQuorum: 2, AckQuorum: 2, MaxEntriesPerLedger: 300, MinLedgerAge: -1,
		RetentionTime: -1, RetentionSize: -1, CursorFlushInterval: 20 * time.Millisecond,
		cursorWriting: writing, cursorWritten: written})
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
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	printf := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format, args...)
		out.Flush()
		mu.Unlock()
	}
	state := func(kind string) func(*Cursor, storedCursor) {
		return func(_ *Cursor, s storedCursor) {
			var b strings.Builder
			fmt.Fprintf(&b, "%s %d %d", kind, s.MarkDelete.Ledger, s.MarkDelete.Entry)
			for _, a := range s.Acked {
				fmt.Fprintf(&b, " %d %d %d %d", a[0], a[1], a[2], a[3])
			}
			printf("%s\n", b.String())
		}
	}
	// "W": about to be written; "P": written.
	n, err := startCrashNode(dir, addrs, state("W"), state("P"))
	if err != nil {
		fail(err)
	}
	ml, err := n.env.f.Open(context.Background(), crashName)
	if err != nil {
		fail(err)
	}
	c, err := ml.OpenCursor(context.Background(), crashCursor, StartEarliest)
	if err != nil {
		fail(err)
	}
	go crashConsume(c, printf, fail)
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
			printf("%d %d %d %d %s\n", pos.Ledger, pos.Entry, off, msgs, payload)
			<-window
		})
	}
}

// crashConsume reads through c and acknowledges: most entries at once
// ("K ledger entry" printed first), the others late, and now and then
// cumulatively up to a late one ("M ledger entry").
func crashConsume(c *Cursor, printf func(string, ...any), fail func(error)) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	var late []Position
	ack := func(p Position) {
		printf("K %d %d\n", p.Ledger, p.Entry)
		if err := c.Delete(p); err != nil {
			fail(err)
		}
	}
	for {
		es, err := c.ReadEntriesOrWait(ctx, 20)
		if err != nil {
			fail(err)
		}
		for _, e := range es {
			if rng.IntN(10) < 7 {
				ack(e.Position)
			} else {
				late = append(late, e.Position)
			}
		}
		for len(late) > 8 {
			ack(late[0])
			late = late[1:]
		}
		if len(late) > 0 && rng.IntN(10) == 0 {
			k := rng.IntN(len(late))
			printf("M %d %d\n", late[k].Ledger, late[k].Entry)
			if err := c.MarkDelete(late[k], map[string]string{"late": strconv.Itoa(len(late))}); err != nil {
				fail(err)
			}
			late = late[k+1:]
		}
	}
}

// crashRun is what a child printed before it was killed.
type crashRun struct {
	appended []crashAck
	acked    map[Position]bool // individually
	markDel  Position          // the highest cumulative acknowledgement
	// states are the cursor states the child wrote, in order: the last
	// one reported written, then any it was writing when it died.
	states    []crashState
	persisted *storedCursor // the last state reported written
}

type crashState struct {
	s       *storedCursor
	written bool
}

// ackedIn reports whether s acknowledges p.
func ackedIn(s *storedCursor, p Position) bool {
	if p.Compare(s.MarkDelete) <= 0 {
		return true
	}
	for _, a := range s.Acked {
		if p.Compare(Position{a[0], a[1]}) >= 0 && p.Compare(Position{a[2], a[3]}) <= 0 {
			return true
		}
	}
	return false
}

// everAcked reports whether p was acknowledged in any round.
func everAcked(p Position, acked map[Position]bool, md Position) bool {
	return acked[p] || p.Compare(md) <= 0
}

// checkCrashCursor checks the recovered cursor against what the children
// acknowledged (acked, md: over every round so far) and the states this
// round's child wrote (prev: the state it started from). It returns the
// recovered state.
func checkCrashCursor(t *testing.T, ctx context.Context, ml *ManagedLedger, round int, all []crashAck,
	acked map[Position]bool, md Position, run crashRun, prev *storedCursor) *storedCursor {
	t.Helper()
	c, err := ml.OpenCursor(ctx, crashCursor, StartEarliest)
	if err != nil {
		t.Fatal(err)
	}
	got := c.MarkDeletePosition()
	// The cursor is in a state that was written: the last one reported
	// written (or the one the round began with, if none was), or one
	// being written at the kill.
	candidates := []*storedCursor{prev}
	for _, st := range run.states {
		if st.written {
			candidates = candidates[:0]
		}
		candidates = append(candidates, st.s)
	}
	match := false
	for _, s := range candidates {
		same := true
		for _, e := range all {
			if ackedIn(s, e.pos) != c.IsAcked(e.pos) {
				same = false
				break
			}
		}
		match = match || same
	}
	if !match {
		t.Fatalf("round %d: recovered cursor (mark-delete %v, ranges %v) is none of the states written last: %+v",
			round, got, c.AckedRanges(), candidates)
	}
	if run.persisted != nil && got.Before(run.persisted.MarkDelete) {
		t.Fatalf("round %d: cursor at %v, but %v was written", round, got, run.persisted.MarkDelete)
	}
	// Nothing skipped: whatever the cursor counts acknowledged was, and
	// every other entry is read again, in order.
	known := make(map[Position]bool, len(all))
	var want []Position
	for _, e := range all {
		known[e.pos] = true
		switch {
		case !c.IsAcked(e.pos):
			want = append(want, e.pos)
		case !everAcked(e.pos, acked, md):
			t.Fatalf("round %d: %v is acknowledged in the recovered cursor (mark-delete %v), but never was", round, e.pos, got)
		}
	}
	c.Rewind()
	var read []Position
	for {
		es, err := c.ReadEntries(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if known[e.Position] { // others were appended but not yet reported
				read = append(read, e.Position)
			}
		}
	}
	if fmt.Sprint(read) != fmt.Sprint(want) {
		t.Fatalf("round %d: read again %d entries, want the %d not acknowledged", round, len(read), len(want))
	}
	t.Logf("round %d: cursor recovered at %v with %d ranges, %d states written; %d entries to deliver again",
		round, got, len(c.AckedRanges()), len(run.states), len(want))
	s := &storedCursor{MarkDelete: got}
	for _, r := range c.AckedRanges() {
		s.Acked = append(s.Acked, [6]int64{r[0].Ledger, r[0].Entry, r[1].Ledger, r[1].Entry, -1, -1})
	}
	return s
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
	everAck := make(map[Position]bool)
	var everMD Position
	// The state the cursor is created in: nothing acknowledged.
	prev := &storedCursor{MarkDelete: Position{-1, -1}}
	for round := range 3 {
		run := runCrashChild(t, dir, addrs, round, 1500)
		acked := run.appended
		n, err := startCrashNode(dir, addrs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		ml, err := n.env.f.Open(ctx, crashName)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, acked...)
		for p := range run.acked {
			everAck[p] = true
		}
		if everMD.Before(run.markDel) {
			everMD = run.markDel
		}
		prev = checkCrashCursor(t, ctx, ml, round, all, everAck, everMD, run, prev)
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
		b.Stop()
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
// SIGKILLs it and returns what it printed.
func runCrashChild(t *testing.T, dir string, addrs []string, round, n int) crashRun {
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
	run := crashRun{acked: make(map[Position]bool)}
	parse := func(l string) {
		f := strings.Fields(l)
		nums := make([]int64, 0, len(f))
		for _, x := range f[1:] {
			if v, err := strconv.ParseInt(x, 10, 64); err == nil {
				nums = append(nums, v)
			}
		}
		switch {
		case f[0] == "K" && len(nums) == 2:
			run.acked[Position{nums[0], nums[1]}] = true
		case f[0] == "M" && len(nums) == 2:
			if p := (Position{nums[0], nums[1]}); run.markDel.Before(p) {
				run.markDel = p
			}
		case (f[0] == "W" || f[0] == "P") && len(nums) >= 2 && len(nums)%4 == 2:
			s := &storedCursor{MarkDelete: Position{nums[0], nums[1]}}
			for i := 2; i < len(nums); i += 4 {
				s.Acked = append(s.Acked, [6]int64{nums[i], nums[i+1], nums[i+2], nums[i+3], -1, -1})
			}
			if f[0] == "P" {
				run.persisted = s
			}
			run.states = append(run.states, crashState{s, f[0] == "P"})
		default:
			var a crashAck
			if _, err := fmt.Sscanf(l, "%d %d %d %d %s", &a.pos.Ledger, &a.pos.Entry, &a.offset, &a.messages, &a.payload); err != nil {
				t.Fatalf("child printed %q: %v", l, err)
			}
			run.appended = append(run.appended, a)
		}
	}
	deadline := time.After(90 * time.Second)
	for len(run.appended) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited early: %s", stderr.String())
			}
			parse(l)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("child acknowledged only %d entries in 90s: %s", len(run.appended), stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for l := range lines { // printed before it died: acknowledged too
		parse(l)
	}
	cmd.Wait()
	return run
}
