package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// checkRecs fails unless got equals want, record by record.
func checkRecs(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d records, want %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.End != w.End || g.Typ != w.Typ || !bytes.Equal(g.Body, w.Body) {
			t.Fatalf("record %d: got end %v type %d body %d bytes; want end %v type %d body %d bytes",
				i, g.End, g.Typ, len(g.Body), w.End, w.Typ, len(w.Body))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{FS: fs, Dir: memDir, MaxFileSize: 64 << 10, Logger: discardLogger}
	j, got := openT(t, opts, Position{})
	if len(got) != 0 {
		t.Fatalf("new journal replayed %d records", len(got))
	}

	const G, N = 8, 150
	var (
		mu    sync.Mutex
		acked []rec // in done order
		fails []error
	)
	var appenders, pending sync.WaitGroup
	pending.Add(G * N)
	for g := range G {
		appenders.Add(1)
		go func() {
			defer appenders.Done()
			for seq := range N {
				body := testBody(g, seq, testSize(g, seq))
				typ := testType(g, seq)
				ack := make(chan struct{})
				j.Append(typ, body, func(end Position, err error) {
					mu.Lock()
					if err != nil {
						fails = append(fails, err)
					} else {
						acked = append(acked, rec{end, typ, body})
					}
					mu.Unlock()
					pending.Done()
					close(ack)
				})
				// Even appenders wait for each record; odd ones pipeline.
				if g%2 == 0 {
					<-ack
				}
			}
		}()
	}
	appenders.Wait()
	allDone := make(chan struct{})
	go func() { pending.Wait(); close(allDone) }()
	recv(t, allDone, "all done callbacks")
	if err := j.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(fails) > 0 {
		t.Fatalf("%d appends failed, first: %v", len(fails), fails[0])
	}
	// Done order is end-position order, and each appender's own order.
	next := make([]int, G)
	for i, r := range acked {
		if i > 0 && !acked[i-1].End.Less(r.End) {
			t.Fatalf("done %d at %v after done at %v", i, r.End, acked[i-1].End)
		}
		g, seq, err := parseBody(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if seq != next[g] {
			t.Fatalf("appender %d: done for seq %d, want %d", g, seq, next[g])
		}
		next[g]++
	}
	if files := journalFiles(t, fs, memDir); len(files) < 4 {
		t.Fatalf("want several files (MaxFileSize 64 KiB), got %v", files)
	}

	j2, got := openT(t, opts, Position{})
	checkRecs(t, got, acked)
	if err := j2.Close(); err != nil {
		t.Fatal(err)
	}

	// From a mid position: only what follows.
	k := len(acked) / 2
	j3, got := openT(t, opts, acked[k].End)
	checkRecs(t, got, acked[k+1:])
	if err := j3.Close(); err != nil {
		t.Fatal(err)
	}

	// From the start of a file (an offset inside its header).
	file := acked[k].End.File
	var want []rec
	for _, r := range acked {
		if r.End.File >= file {
			want = append(want, r)
		}
	}
	j4, got := openT(t, opts, Position{File: file, Offset: 3})
	checkRecs(t, got, want)
	if err := j4.Close(); err != nil {
		t.Fatal(err)
	}
}

// A from past every file replays nothing, and new positions are above it.
func TestOpenFromBeyondLastFile(t *testing.T) {
	opts := Options{FS: vfs.NewMem(), Dir: memDir, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})
	if r := appendWait(t, j, 1, []byte("a")); r.Err != nil {
		t.Fatal(r.Err)
	}
	j.Close()

	from := Position{File: 1000, Offset: 5}
	j, got := openT(t, opts, from)
	if len(got) != 0 {
		t.Fatalf("replayed %d records", len(got))
	}
	r := appendWait(t, j, 1, []byte("b"))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if !from.Less(r.End) {
		t.Fatalf("new record at %v, not after %v", r.End, from)
	}
	j.Close()
}

func TestReplayError(t *testing.T) {
	opts := Options{FS: vfs.NewMem(), Dir: memDir, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})
	for i := range 3 {
		appendWait(t, j, 1, []byte{byte(i)})
	}
	j.Close()
	stop := errors.New("stop")
	n := 0
	_, err := Open(opts, Position{}, func(Position, byte, []byte) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || n != 2 {
		t.Fatalf("Open: err %v after %d records; want the replay error after 2", err, n)
	}
	// The failed Open released the directory.
	j, got := openT(t, opts, Position{})
	if len(got) != 3 {
		t.Fatalf("replayed %d records, want 3", len(got))
	}
	j.Close()
}

func TestAppendRefused(t *testing.T) {
	opts := Options{FS: vfs.NewMem(), Dir: memDir, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})

	refusedAtOnce := func(typ byte, body []byte, want error) {
		t.Helper()
		var got error
		called := 0
		j.Append(typ, body, func(_ Position, err error) { got = err; called++ })
		if called != 1 || !errors.Is(got, want) {
			t.Fatalf("Append(type %d, %d bytes): done called %d times before returning, err %v; want once with %v",
				typ, len(body), called, got, want)
		}
	}
	refusedAtOnce(1, make([]byte, MaxRecordSize+1), ErrTooLarge)
	refusedAtOnce(0, []byte("x"), ErrInvalidType)

	big := bytes.Repeat([]byte{0xa5}, MaxRecordSize)
	r := appendWait(t, j, 9, big)
	if r.Err != nil {
		t.Fatalf("append of MaxRecordSize bytes: %v", r.Err)
	}
	j.Append(2, []byte("no callback"), nil) // nil done is allowed
	r2 := appendWait(t, j, 3, nil)          // and so is an empty body
	if r2.Err != nil {
		t.Fatal(r2.Err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	refusedAtOnce(1, []byte("late"), ErrClosed)
	if err := j.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}

	j, got := openT(t, opts, Position{})
	defer j.Close()
	if len(got) != 3 || !bytes.Equal(got[0].Body, big) || string(got[1].Body) != "no callback" || len(got[2].Body) != 0 || got[2].End != r2.End {
		t.Fatalf("replayed %d records, want the big one, the one without callback and the empty one", len(got))
	}
}

// Close writes what is queued, including Appends blocked on a full queue
// when Close was called.
func TestCloseFlushesQueue(t *testing.T) {
	fs := newGateFS(vfs.NewMem())
	opts := Options{FS: fs, Dir: memDir, QueueSize: 4, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})

	const n = 10
	results := make(chan result, n)
	done := func(end Position, err error) { results <- result{end, err} }
	fs.gatedWrites.Store(true)
	j.Append(1, []byte("first"), done)
	recv(t, fs.entered, "the first group's write")
	for range 4 { // fills the queue
		j.Append(1, []byte("queued"), done)
	}
	for range n - 5 { // block on the full queue
		go j.Append(1, []byte("blocked"), done)
	}
	waitUntil(t, "appenders are blocked", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.mu.blocked == n-5
	})
	closed := make(chan error, 1)
	go func() { closed <- j.Close() }()
	waitUntil(t, "Close began", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.mu.closed
	})
	close(fs.release)
	for i := range n {
		if r := recv(t, results, "done callback"); r.Err != nil {
			t.Fatalf("record %d: %v", i, r.Err)
		}
	}
	if err := recv(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	fs.gatedWrites.Store(false)
	j, got := openT(t, opts, Position{})
	j.Close()
	if len(got) != n {
		t.Fatalf("replayed %d records, want %d", len(got), n)
	}
}

func TestOptions(t *testing.T) {
	if _, err := Open(Options{FS: vfs.NewMem()}, Position{}, nil); err == nil {
		t.Error("Open without Dir succeeded")
	}
	if _, err := Open(Options{FS: vfs.NewMem(), Dir: memDir, MaxGroupBytes: -1}, Position{}, nil); err == nil {
		t.Error("Open with negative MaxGroupBytes succeeded")
	}
	fs := vfs.NewMem()
	j, err := Open(Options{FS: fs, Dir: "/a/b/journal", Logger: discardLogger}, Position{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o := j.opts; o.MaxGroupBytes != defaultMaxGroupBytes || o.MaxGroupWait != defaultMaxGroupWait ||
		o.MaxFileSize != defaultMaxFileSize || o.QueueSize != defaultQueueSize {
		t.Errorf("defaults not applied: %+v", o)
	}
	if _, err := Open(Options{FS: fs, Dir: "/a/b/journal", Logger: discardLogger}, Position{}, nil); err == nil {
		t.Error("second Open of a directory in use succeeded")
	}
	j.Close()
}

func TestPositionLess(t *testing.T) {
	ps := []Position{{0, 0}, {0, 8}, {1, 0}, {1, 7}, {2, 0}}
	for i, p := range ps {
		for k, q := range ps {
			if got := p.Less(q); got != (i < k) {
				t.Errorf("%v.Less(%v) = %v", p, q, got)
			}
		}
	}
}

func TestFileNames(t *testing.T) {
	for _, num := range []uint64{0, 1, 0xabcdef, 1<<64 - 1} {
		name := fileName(num)
		if got, ok := parseFileName(name); !ok || got != num {
			t.Errorf("parseFileName(%q) = %d, %v", name, got, ok)
		}
	}
	for _, name := range []string{"LOCK", "000000000000000A.jnl", "00000000000000001.jnl", "0000000000000001.jnl.tmp", "000000000000000g.jnl", "+000000000000001.jnl"} {
		if _, ok := parseFileName(name); ok {
			t.Errorf("parseFileName(%q) accepted", name)
		}
	}
}

// OnSync sees every group that was written and synced, with its records.
func TestOnSync(t *testing.T) {
	var calls, records atomic.Int64
	opts := Options{FS: vfs.NewMem(), Dir: memDir, Logger: discardLogger, OnSync: func(d time.Duration, n, bytes int) {
		if bytes < n*recordHeaderSize {
			t.Errorf("OnSync: %d bytes for %d records", bytes, n)
		}
		if d < 0 || n < 1 {
			t.Errorf("OnSync(%v, %d)", d, n)
		}
		calls.Add(1)
		records.Add(int64(n))
	}}
	j, _ := openT(t, opts, Position{})
	for i := range 10 {
		if r := appendWait(t, j, 1, testBody(0, i, 10)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// OnSync runs after a group's callbacks; Close waits for the syncer,
	// so every call has been made once it returns.
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() < 1 || records.Load() != 10 || calls.Load() != j.syncs.Load() {
		t.Fatalf("OnSync: %d calls, %d records; want 10 records in %d syncs", calls.Load(), records.Load(), j.syncs.Load())
	}
}

// AppendKnown: a record whose checksum is combined from its tail's
// CRC-32C replays as one written by Append; a wrong tail CRC makes a
// record replay refuses (the rest of the file skipped, logged); a
// tail outside the body is refused at once.
func TestAppendKnown(t *testing.T) {
	logger, logs := newLogger()
	opts := Options{FS: vfs.NewMem(), Dir: memDir, Logger: logger}
	j, _ := openT(t, opts, Position{})
	var want [][]byte
	for i, n := range []int{0, 1, 36, 100, 40 << 10, 1<<20 + 3} {
		body := testBody(1, i, max(n, 8))[:n]
		for _, from := range []int{0, min(36, n), n} {
			if r := knownWait(t, j, 7, body, from, crc32.Checksum(body[from:], castagnoli)); r.Err != nil {
				t.Fatalf("AppendKnown(%d bytes, from %d): %v", n, from, r.Err)
			}
			want = append(want, body)
		}
		if r := appendWait(t, j, 8, body); r.Err != nil {
			t.Fatal(r.Err)
		}
		want = append(want, body)
	}
	var refused error
	j.AppendKnown(7, []byte("short"), 6, 0, func(_ Position, err error) { refused = err })
	if refused == nil {
		t.Error("AppendKnown with its tail past the body's end: no error")
	}
	bad := testBody(2, 0, 64<<10)
	if r := knownWait(t, j, 7, bad, 36, crc32.Checksum(bad[37:], castagnoli)); r.Err != nil {
		t.Fatal(r.Err) // written: the journal cannot tell
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, got := openT(t, opts, Position{})
	defer j.Close()
	if len(got) != len(want) {
		t.Fatalf("replayed %d records, want %d (all but the one with a wrong tail CRC)", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].Body, want[i]) {
			t.Fatalf("record %d: %d bytes replayed, differ from the %d written", i, len(got[i].Body), len(want[i]))
		}
	}
	if e := logs.lines("ERROR"); len(e) != 1 || !strings.Contains(e[0], "checksum mismatch") {
		t.Fatalf("replay errors %q, want one: the record with a wrong checksum cut off\n%s", e, logs.String())
	}
}

func knownWait(t testing.TB, j *Journal, typ byte, body []byte, from int, tailCRC uint32) result {
	t.Helper()
	ch := make(chan result, 1)
	j.AppendKnown(typ, body, from, tailCRC, func(end Position, err error) { ch <- result{end, err} })
	return recv(t, ch, "done callback")
}

// A record's checksum covers its length, type and body as the format
// says (CRC-32C over the 4-byte big-endian length, the type, the body),
// however the journal computes it, and takes no allocation.
func TestRecordCRC(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 70_000, MaxRecordSize} {
		body := bytes.Repeat([]byte{0xa5}, n)
		want := crc32.Checksum(append(binary.BigEndian.AppendUint32(nil, uint32(n)), 7), castagnoli)
		want = crc32.Update(want, castagnoli, body)
		if got := recordCRC(7, body); got != want {
			t.Fatalf("%d-byte body: recordCRC %08x, want %08x", n, got, want)
		}
		if n > 10 {
			if got := recordCRCKnown(7, body, 10, crc32.Checksum(body[10:], castagnoli)); got != want {
				t.Fatalf("%d-byte body: recordCRCKnown %08x, want %08x", n, got, want)
			}
		}
	}
	body := make([]byte, 1024)
	if allocs := testing.AllocsPerRun(100, func() { recordCRC(1, body) }); allocs != 0 {
		t.Fatalf("recordCRC: %v allocations, want 0", allocs)
	}
}
