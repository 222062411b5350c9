package journal

import (
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// shortFS makes journal file writes short (half written, nil error) while
// armed.
type shortFS struct {
	vfs.FS
	armed *atomic.Bool
}

func (fs shortFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, cat)
	if err != nil {
		return nil, err
	}
	return shortFile{File: f, armed: fs.armed}, nil
}

type shortFile struct {
	vfs.File
	armed *atomic.Bool
}

func (fs shortFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, cat, opts...)
	if err != nil {
		return nil, err
	}
	return shortFile{File: f, armed: fs.armed}, nil
}

func (f shortFile) WriteAt(p []byte, off int64) (int, error) {
	if f.armed.Load() {
		return f.File.WriteAt(p[:len(p)/2], off)
	}
	return f.File.WriteAt(p, off)
}

// injectOn returns an errorfs filesystem over fs that fails the journal file
// operations of the given kinds while armed.
func injectOn(fs vfs.FS, armed *atomic.Bool, kinds ...errorfs.OpKind) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && strings.HasSuffix(op.Path, fileSuffix) {
			for _, k := range kinds {
				if op.Kind == k {
					return errorfs.ErrInjected
				}
			}
		}
		return nil
	}))
}

func TestWriteFailure(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wrap  func(vfs.FS, *atomic.Bool) vfs.FS
		cause error
	}{
		{"write", func(fs vfs.FS, a *atomic.Bool) vfs.FS {
			return injectOn(fs, a, errorfs.OpFileWrite, errorfs.OpFileWriteAt)
		}, errorfs.ErrInjected},
		{"sync", func(fs vfs.FS, a *atomic.Bool) vfs.FS {
			return injectOn(fs, a, errorfs.OpFileSync, errorfs.OpFileSyncData)
		}, errorfs.ErrInjected},
		{"short write", func(fs vfs.FS, a *atomic.Bool) vfs.FS { return shortFS{fs, a} }, io.ErrShortWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			var armed atomic.Bool
			logger, lb := newLogger()
			opts := Options{FS: tc.wrap(mem, &armed), Dir: memDir, Logger: logger}
			j, _ := openT(t, opts, Position{})
			var acked []rec
			for i := range 10 {
				body := testBody(0, i, 100)
				r := appendWait(t, j, 1, body)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				acked = append(acked, rec{r.End, 1, body})
			}

			armed.Store(true)
			r := appendWait(t, j, 1, testBody(0, 10, 100))
			if !errors.Is(r.Err, ErrFailed) || !errors.Is(r.Err, tc.cause) {
				t.Fatalf("append during the fault: %v; want ErrFailed wrapping %v", r.Err, tc.cause)
			}
			path := mem.PathJoin(memDir, fileName(acked[0].End.File))
			checkLogged(t, lb, "ERROR", path, acked[9].End.Offset)

			// The fault is gone, the journal stays failed; queued and later
			// records fail too, in order.
			armed.Store(false)
			results := make(chan result, 20)
			for i := range 20 {
				j.Append(1, testBody(0, 11+i, 100), func(end Position, err error) { results <- result{end, err} })
			}
			for range 20 {
				if r := recv(t, results, "done callback"); !errors.Is(r.Err, ErrFailed) || !errors.Is(r.Err, tc.cause) {
					t.Fatalf("append after the fault: %v; want ErrFailed wrapping %v", r.Err, tc.cause)
				}
			}
			if err := j.Close(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Close: %v, want ErrFailed", err)
			}
			if n := len(lb.lines("ERROR")); n != 1 {
				t.Fatalf("%d error lines, want 1:\n%s", n, lb)
			}

			// Nothing acknowledged is missing. (A failed record may or may
			// not be there: it was never acknowledged.)
			j, got := openT(t, Options{FS: mem, Dir: memDir, Logger: discardLogger}, Position{})
			defer j.Close()
			if len(got) < len(acked) {
				t.Fatalf("replayed %d records, %d acknowledged", len(got), len(acked))
			}
			checkRecs(t, got[:len(acked)], acked)
		})
	}
}

// A sync failing amid concurrent appends: every record acknowledged before
// it replays, and after the first error in done order there are only errors.
func TestSyncFailureUnderLoad(t *testing.T) {
	mem := vfs.NewMem()
	var syncs atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncData && syncs.Add(1) == 15 {
			return errorfs.ErrInjected
		}
		return nil
	}))
	opts := Options{FS: fs, Dir: memDir, Logger: discardLogger}
	j, _ := openT(t, opts, Position{})

	const G, N = 6, 100
	var (
		mu     sync.Mutex
		order  []error
		acked  = map[[2]int]bool{}
		failed bool
	)
	var wg sync.WaitGroup
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ack := make(chan struct{}, 1)
			for seq := range N {
				j.Append(1, testBody(g, seq, 200), func(_ Position, err error) {
					mu.Lock()
					order = append(order, err)
					if err == nil {
						acked[[2]int{g, seq}] = true
					}
					mu.Unlock()
					ack <- struct{}{}
				})
				<-ack
			}
		}()
	}
	wg.Wait()
	j.Close()

	for i, err := range order {
		if err != nil {
			if !errors.Is(err, ErrFailed) || !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("done %d: %v", i, err)
			}
			failed = true
		} else if failed {
			t.Fatalf("done %d succeeded after an earlier failure", i)
		}
	}
	if !failed || len(acked) == 0 {
		t.Fatalf("want some records acknowledged and then failures; acknowledged %d of %d", len(acked), len(order))
	}
	j, got := openT(t, Options{FS: mem, Dir: memDir, Logger: discardLogger}, Position{})
	defer j.Close()
	for _, r := range got {
		g, seq, err := parseBody(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		delete(acked, [2]int{g, seq})
	}
	if len(acked) > 0 {
		t.Fatalf("%d acknowledged records missing after reopen", len(acked))
	}
}

// A failure to start the next file fails later appends, not the group that
// filled the current one.
func TestRotationFailure(t *testing.T) {
	mem := vfs.NewMem()
	var armed atomic.Bool
	logger, lb := newLogger()
	opts := Options{FS: injectOn(mem, &armed, errorfs.OpCreate), Dir: memDir, MaxFileSize: 500, Logger: logger}
	j, _ := openT(t, opts, Position{})
	armed.Store(true)
	var acked []rec
	var r result
	for i := 0; ; i++ {
		body := testBody(0, i, 100)
		if r = appendWait(t, j, 1, body); r.Err != nil {
			break
		}
		acked = append(acked, rec{r.End, 1, body})
	}
	if !errors.Is(r.Err, ErrFailed) || !errors.Is(r.Err, errorfs.ErrInjected) {
		t.Fatalf("append after failed rotation: %v", r.Err)
	}
	if last := acked[len(acked)-1].End.Offset; last <= 500 {
		t.Fatalf("failed before the file was full (last record ends at %d)", last)
	}
	if len(lb.lines("ERROR")) != 1 {
		t.Fatalf("want one error line:\n%s", lb)
	}
	j.Close()
	j, got := openT(t, Options{FS: mem, Dir: memDir, Logger: discardLogger}, Position{})
	defer j.Close()
	checkRecs(t, got, acked)
}
