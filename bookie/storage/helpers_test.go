package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// waitTimeout bounds every wait in these tests: a hang fails, it never
// sleeps.
const waitTimeout = 30 * time.Second

const memDir = "/bookie"

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// testOptions are in-memory options with the background loops off.
func testOptions(fs vfs.FS) Options {
	return Options{
		FS:                 fs,
		Dir:                memDir,
		CheckpointInterval: -1,
		GCInterval:         -1,
		DiskCheckInterval:  -1,
		Logger:             discardLogger,
	}
}

func openT(t testing.TB, opts Options) *Storage {
	t.Helper()
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func closeT(t testing.TB, s *Storage) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// payload is deterministic per (ledger, entry) and size, so reads can be
// checked without remembering what was written.
func payload(ledger, entryID int64, size int) []byte {
	p := make([]byte, size)
	seed := fmt.Sprintf("L%dE%d:", ledger, entryID)
	for i := range p {
		p[i] = seed[i%len(seed)]
	}
	return p
}

func mkEntry(ledger, entryID, lac int64, size int) []byte {
	return entry.Encode(nil, entry.Header{Ledger: ledger, Entry: entryID, LAC: lac, Length: (entryID + 1) * int64(size)},
		payload(ledger, entryID, size))
}

func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// add adds an entry and waits for its done.
func add(t testing.TB, s *Storage, e []byte) error {
	t.Helper()
	ch := make(chan error, 1)
	s.AddEntry(e, false, func(err error) { ch <- err })
	return await(t, ch, "AddEntry")
}

// mustAdd adds an entry and waits until it is applied too (adds are
// acknowledged once journaled), for tests that look at what applying did.
func mustAdd(t testing.TB, s *Storage, ledger, entryID, lac int64, size int) {
	t.Helper()
	if err := add(t, s, mkEntry(ledger, entryID, lac, size)); err != nil {
		t.Fatalf("add ledger %d entry %d: %v", ledger, entryID, err)
	}
	if err := s.awaitApplied(); err != nil {
		t.Fatalf("applying ledger %d entry %d: %v", ledger, entryID, err)
	}
}

// awaitFailure waits until the storage fails, and returns why.
func awaitFailure(t testing.TB, s *Storage) error {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for s.failure() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the storage did not fail")
		}
		time.Sleep(time.Millisecond)
	}
	return s.failure()
}

type fenceResult struct {
	lac, last int64
	err       error
}

func fence(t testing.TB, s *Storage, ledger int64) fenceResult {
	t.Helper()
	ch := make(chan fenceResult, 1)
	s.Fence(ledger, func(lac, last int64, err error) { ch <- fenceResult{lac, last, err} })
	return await(t, ch, "Fence")
}

func del(t testing.TB, s *Storage, ledger int64) error {
	t.Helper()
	ch := make(chan error, 1)
	s.Delete(ledger, func(err error) { ch <- err })
	return await(t, ch, "Delete")
}

// checkEntry reads an entry and checks it is the one mkEntry made.
func checkEntry(t testing.TB, s *Storage, ledger, entryID int64, size int) {
	t.Helper()
	got, err := s.ReadEntry(ledger, entryID)
	if err != nil {
		t.Fatalf("ReadEntry(%d, %d): %v", ledger, entryID, err)
	}
	h, err := entry.Verify(got)
	if err != nil {
		t.Fatalf("ReadEntry(%d, %d): %v", ledger, entryID, err)
	}
	if h.Ledger != ledger || h.Entry != entryID || !bytes.Equal(entry.Payload(got), payload(ledger, entryID, size)) {
		t.Fatalf("ReadEntry(%d, %d): got ledger %d entry %d, wrong payload", ledger, entryID, h.Ledger, h.Entry)
	}
}

func wantErr(t testing.TB, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got %v, want %v", what, err, target)
	}
}

// dirSize is the total size of the files in dir whose names end in suffix.
func dirSize(t testing.TB, fs vfs.FS, dir, suffix string) (total int64, files int) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	for _, n := range names {
		if !strings.HasSuffix(n, suffix) {
			continue
		}
		fi, err := fs.Stat(fs.PathJoin(dir, n))
		if err != nil {
			t.Fatalf("stat %s: %v", n, err)
		}
		total += fi.Size()
		files++
	}
	return total, files
}

// acked records entries acknowledged by done callbacks, concurrently.
type acked struct {
	mu      sync.Mutex
	entries map[[2]int64]int // (ledger, entry) → payload size
}

func (a *acked) add(ledger, entryID int64, size int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.entries == nil {
		a.entries = make(map[[2]int64]int)
	}
	a.entries[[2]int64{ledger, entryID}] = size
}

func (a *acked) snapshot() map[[2]int64]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[[2]int64]int, len(a.entries))
	for k, v := range a.entries {
		out[k] = v
	}
	return out
}

func (a *acked) checkAll(t testing.TB, s *Storage, entries map[[2]int64]int) {
	t.Helper()
	for k, size := range entries {
		checkEntry(t, s, k[0], k[1], size)
	}
}

func rngFor(seed int) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 7)) }

// checkIndex reads every entry the index points at: after recovery and GC
// the index must never point at missing or wrong bytes.
func checkIndex(t testing.TB, s *Storage) (n int) {
	t.Helper()
	err := s.idx.entries(func(ledger, entryID int64, loc location) error {
		n++
		_, err := s.readLoc(ledger, entryID, loc, maxReadAttempts)
		return err
	})
	if err != nil {
		t.Fatalf("index check after %d entries: %v", n, err)
	}
	return n
}
