package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// waitTimeout bounds every wait in these tests: a hang fails, it never sleeps.
const waitTimeout = 30 * time.Second

// memDir is the journal directory on in-memory filesystems.
const memDir = "/journal"

// rec is a replayed or acknowledged record.
type rec struct {
	End  Position
	Typ  byte
	Body []byte
}

type result struct {
	End Position
	Err error
}

// logBuffer collects log output; the writer goroutine logs too.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the log lines at level (e.g. "WARN").
func (l *logBuffer) lines(level string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, "level="+level) {
			out = append(out, line)
		}
	}
	return out
}

func newLogger() (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// openT opens a journal and returns the records replayed (bodies copied).
func openT(t testing.TB, opts Options, from Position) (*Journal, []rec) {
	t.Helper()
	var got []rec
	j, err := Open(opts, from, func(end Position, typ byte, body []byte) error {
		got = append(got, rec{end, typ, bytes.Clone(body)})
		return nil
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j, got
}

// appendWait appends one record and waits for its done callback.
func appendWait(t testing.TB, j *Journal, typ byte, body []byte) result {
	t.Helper()
	ch := make(chan result, 1)
	j.Append(typ, body, func(end Position, err error) { ch <- result{end, err} })
	return recv(t, ch, "done callback")
}

// recv waits for a value on ch, failing the test after waitTimeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitUntil polls cond until it holds, failing the test after waitTimeout.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// waitWriterIdle waits until the writer waits for appends (or, with
// NoFlushWhenQueueEmpty, for its group to fill).
func waitWriterIdle(t testing.TB, j *Journal) {
	t.Helper()
	waitUntil(t, "the writer is idle", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.mu.writerIdle && j.mu.n == 0
	})
}

// testBody is the body of record seq from appender g: g and seq, then a
// pattern, size bytes in all (at least 8).
func testBody(g, seq, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b[0:], uint32(g))
	binary.BigEndian.PutUint32(b[4:], uint32(seq))
	for i := 8; i < size; i++ {
		b[i] = byte(g*7 + seq + i)
	}
	return b
}

// parseBody returns the appender and sequence number of a testBody and
// checks its pattern.
func parseBody(b []byte) (g, seq int, err error) {
	if len(b) < 8 {
		return 0, 0, fmt.Errorf("body of %d bytes", len(b))
	}
	g, seq = int(binary.BigEndian.Uint32(b[0:])), int(binary.BigEndian.Uint32(b[4:]))
	if !bytes.Equal(b, testBody(g, seq, len(b))) {
		return g, seq, fmt.Errorf("body of record %d/%d does not match its pattern", g, seq)
	}
	return g, seq, nil
}

// testSize and testType vary record sizes and types.
func testSize(g, seq int) int {
	sizes := [...]int{8, 9, 100, 1000, 4096, 5000, 20_000}
	return sizes[(g*31+seq*17)%len(sizes)]
}

func testType(g, seq int) byte { return byte(1 + (g*13+seq)%255) }

// journalFiles lists the journal file numbers in dir.
func journalFiles(t testing.TB, fs vfs.FS, dir string) []uint64 {
	t.Helper()
	return numbersOf(t, fs, dir, parseFileName)
}

// numbersOf lists, ascending, the numbers parse finds in the names of dir.
func numbersOf(t testing.TB, fs vfs.FS, dir string, parse func(string) (uint64, bool)) []uint64 {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var nums []uint64
	for _, n := range names {
		if num, ok := parse(n); ok {
			nums = append(nums, num)
		}
	}
	slices.Sort(nums)
	return nums
}

func readFile(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFile replaces path with data, durably.
func writeFile(t testing.TB, fs vfs.FS, path string, data []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Clone(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t testing.TB, fs vfs.FS, path string) int64 {
	t.Helper()
	fi, err := fs.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// gateFS counts file syncs and, while gated, holds each one until the test
// lets it through; while gatedWrites, it holds file writes instead.
type gateFS struct {
	vfs.FS
	syncs       atomic.Int64  // file syncs (not directory syncs)
	gated       atomic.Bool   // hold syncs until release
	gatedWrites atomic.Bool   // hold writes until release
	entered     chan struct{} // a held sync is waiting
	release     chan struct{} // closed: let held syncs through
}

func newGateFS(fs vfs.FS) *gateFS {
	return &gateFS{FS: fs, entered: make(chan struct{}, 1000), release: make(chan struct{})}
}

func (fs *gateFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil {
		return nil, err
	}
	return &gateFile{File: f, fs: fs}, nil
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (f *gateFile) hold() {
	f.fs.syncs.Add(1)
	if f.fs.gated.Load() {
		f.fs.entered <- struct{}{}
		<-f.fs.release
	}
}

func (f *gateFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.gatedWrites.Load() {
		f.fs.entered <- struct{}{}
		<-f.fs.release
	}
	return f.File.WriteAt(p, off)
}

func (f *gateFile) Sync() error     { f.hold(); return f.File.Sync() }
func (f *gateFile) SyncData() error { f.hold(); return f.File.SyncData() }
