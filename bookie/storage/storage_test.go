package storage

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestRoundTrip(t *testing.T) {
	const ledgers, entries, size = 8, 60, 300
	for _, tc := range []struct {
		name         string
		maxLog       int64
		buffer       int
		wantLogs     int // at least this many entry logs
		wantBuffered bool
	}{
		{name: "buffered", buffer: 1 << 20, wantLogs: 1, wantBuffered: true},
		{name: "written", buffer: 1024, wantLogs: 1},
		{name: "rotating", maxLog: 16 << 10, buffer: 4096, wantLogs: 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := testOptions(fs)
			opts.EntryLogMaxSize, opts.WriteBufferSize = tc.maxLog, tc.buffer
			s := openT(t, opts)
			for e := int64(0); e < entries; e++ {
				for l := int64(1); l <= ledgers; l++ {
					mustAdd(t, s, l, e, e-1, size)
				}
			}
			logDir := fs.PathJoin(memDir, "entrylogs")
			onDisk, logs := dirSize(t, fs, logDir, logSuffix)
			if logs < tc.wantLogs {
				t.Fatalf("%d entry logs, want at least %d", logs, tc.wantLogs)
			}
			if tc.wantBuffered && onDisk != 0 {
				t.Fatalf("entry logs hold %d bytes on disk, want everything still buffered", onDisk)
			}
			check := func(s *Storage) {
				for l := int64(1); l <= ledgers; l++ {
					for e := int64(0); e < entries; e++ {
						checkEntry(t, s, l, e, size)
					}
				}
				got, err := s.Ledgers()
				if err != nil || !slices.Equal(got, []int64{1, 2, 3, 4, 5, 6, 7, 8}) {
					t.Fatalf("Ledgers() = %v, %v", got, err)
				}
			}
			check(s)
			closeT(t, s)
			s = openT(t, opts)
			defer closeT(t, s)
			check(s)
		})
	}
}

func TestAddRefusesBadEntries(t *testing.T) {
	s := openT(t, testOptions(vfs.NewMem()))
	defer closeT(t, s)

	e := mkEntry(1, 0, -1, 100)
	e[len(e)-1] ^= 1
	wantErr(t, add(t, s, e), ErrChecksum, "add with a flipped payload bit")
	wantErr(t, add(t, s, e[:10]), ErrMalformed, "add of 10 bytes")
	wantErr(t, add(t, s, mkEntry(-1, 0, -1, 10)), ErrMalformed, "add to ledger -1")
	wantErr(t, add(t, s, mkEntry(1, -5, -1, 10)), ErrMalformed, "add of entry -5")

	_, err := s.ReadEntry(1, 0)
	wantErr(t, err, ErrNoLedger, "read after refused adds")
	if got, err := s.Ledgers(); err != nil || len(got) != 0 {
		t.Fatalf("Ledgers() = %v, %v; want none", got, err)
	}
}

func TestNoLedgerNoEntry(t *testing.T) {
	s := openT(t, testOptions(vfs.NewMem()))
	defer closeT(t, s)
	mustAdd(t, s, 7, 0, -1, 10)
	mustAdd(t, s, 7, 2, -1, 10)

	_, err := s.ReadEntry(8, 0)
	wantErr(t, err, ErrNoLedger, "ReadEntry(8, 0)")
	_, err = s.ReadEntry(7, 1)
	wantErr(t, err, ErrNoEntry, "ReadEntry(7, 1)")
	_, _, err = s.LastAddConfirmed(8)
	wantErr(t, err, ErrNoLedger, "LastAddConfirmed(8)")
	_, err = s.IsFenced(8)
	wantErr(t, err, ErrNoLedger, "IsFenced(8)")
	checkEntry(t, s, 7, 2, 10)
}

func TestLastAddConfirmed(t *testing.T) {
	fs := vfs.NewMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	// Entries out of order, as a recovery writer may send them.
	mustAdd(t, s, 1, 0, -1, 10)
	mustAdd(t, s, 1, 1, 0, 10)
	mustAdd(t, s, 1, 3, 1, 10)
	mustAdd(t, s, 1, 2, 1, 10)
	mustAdd(t, s, 2, 0, -1, 10)
	want := map[int64][2]int64{1: {1, 3}, 2: {-1, 0}}
	check := func(s *Storage) {
		t.Helper()
		for l, w := range want {
			lac, last, err := s.LastAddConfirmed(l)
			if err != nil || lac != w[0] || last != w[1] {
				t.Fatalf("LastAddConfirmed(%d) = %d, %d, %v; want %d, %d", l, lac, last, err, w[0], w[1])
			}
		}
	}
	check(s)
	mustAdd(t, s, 1, 4, 3, 10)
	want[1] = [2]int64{3, 4}
	check(s)
	closeT(t, s)

	s = openT(t, opts)
	check(s) // rebuilt from the index and the last entries' headers
	mustAdd(t, s, 1, 5, 4, 10)
	want[1] = [2]int64{4, 5}
	check(s)
	closeT(t, s)
}

func TestWaitLAC(t *testing.T) {
	s := openT(t, testOptions(vfs.NewMem()))
	blocked := make(chan struct{}, 10) // a WaitLAC is about to block
	s.testHookWaitLAC = func() { blocked <- struct{}{} }
	mustAdd(t, s, 1, 0, -1, 10)

	type res struct {
		lac int64
		err error
	}
	wait := func(ctx context.Context, ledger, after int64) <-chan res {
		ch := make(chan res, 1)
		go func() {
			lac, err := s.WaitLAC(ctx, ledger, after)
			ch <- res{lac, err}
		}()
		return ch
	}
	// Already past: returns at once.
	if r := await(t, wait(context.Background(), 1, -2), "WaitLAC"); r.err != nil || r.lac != -1 {
		t.Fatalf("WaitLAC(after -2) = %+v", r)
	}
	ch := wait(context.Background(), 1, -1)
	await(t, blocked, "WaitLAC to block")
	mustAdd(t, s, 1, 1, -1, 10) // LAC unchanged: the waiter keeps waiting
	select {
	case r := <-ch:
		t.Fatalf("WaitLAC returned %+v before the LAC rose", r)
	case <-blocked:
		t.Fatal("WaitLAC woken by an add that did not raise the LAC")
	default:
	}
	mustAdd(t, s, 1, 2, 1, 10)
	if r := await(t, ch, "WaitLAC"); r.err != nil || r.lac != 1 {
		t.Fatalf("WaitLAC = %+v, want LAC 1", r)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ch = wait(ctx, 1, 1)
	await(t, blocked, "WaitLAC to block")
	cancel()
	if r := await(t, ch, "WaitLAC"); !errors.Is(r.err, context.Canceled) || r.lac != 1 {
		t.Fatalf("WaitLAC with a canceled context = %+v", r)
	}

	_, err := s.WaitLAC(context.Background(), 99, 0)
	wantErr(t, err, ErrNoLedger, "WaitLAC on an unknown ledger")

	ch = wait(context.Background(), 1, 1)
	await(t, blocked, "WaitLAC to block")
	if r := fence(t, s, 1); r.err != nil {
		t.Fatal(r.err)
	}
	r := await(t, ch, "WaitLAC woken by the fence")
	wantErr(t, r.err, ErrFenced, "WaitLAC on a fenced ledger")

	mustAdd(t, s, 2, 0, -1, 10)
	ch = wait(context.Background(), 2, 5)
	await(t, blocked, "WaitLAC to block")
	if err := del(t, s, 2); err != nil {
		t.Fatal(err)
	}
	wantErr(t, await(t, ch, "WaitLAC woken by the delete").err, ErrNoLedger, "WaitLAC on a deleted ledger")

	mustAdd(t, s, 3, 0, -1, 10)
	ch = wait(context.Background(), 3, 5)
	await(t, blocked, "WaitLAC to block")
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	wantErr(t, await(t, ch, "WaitLAC woken by Close").err, ErrClosed, "WaitLAC during Close")
	if err := await(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
}

func TestFence(t *testing.T) {
	for _, restart := range []string{"none", "close", "crash", "checkpoint+crash"} {
		t.Run(restart, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := testOptions(fs)
			s := openT(t, opts)
			mustAdd(t, s, 1, 0, -1, 10)
			mustAdd(t, s, 1, 1, 0, 10)
			if r := fence(t, s, 1); r.err != nil || r.lac != 0 || r.last != 1 {
				t.Fatalf("Fence = %+v, want LAC 0, last 1", r)
			}
			if r := fence(t, s, 5); r.err != nil || r.lac != -1 || r.last != -1 {
				t.Fatalf("Fence of an unknown ledger = %+v", r)
			}
			mustAdd(t, s, 2, 0, -1, 10)
			switch restart {
			case "close":
				closeT(t, s)
				s = openT(t, opts)
			case "crash", "checkpoint+crash":
				if restart == "checkpoint+crash" {
					if err := s.Checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				crashed := fs.CrashClone(vfs.CrashCloneCfg{})
				closeT(t, s)
				opts.FS = crashed
				s = openT(t, opts)
			}
			defer closeT(t, s)
			wantErr(t, add(t, s, mkEntry(1, 2, 1, 10)), ErrFenced, "add to fenced ledger 1")
			wantErr(t, add(t, s, mkEntry(5, 0, -1, 10)), ErrFenced, "add to fenced ledger 5")
			mustAdd(t, s, 2, 1, 0, 10)
			for l, want := range map[int64]bool{1: true, 2: false, 5: true} {
				if f, err := s.IsFenced(l); err != nil || f != want {
					t.Fatalf("IsFenced(%d) = %v, %v; want %v", l, f, err, want)
				}
			}
			if r := fence(t, s, 1); r.err != nil || r.lac != 0 || r.last != 1 {
				t.Fatalf("second Fence = %+v, want LAC 0, last 1", r)
			}
			checkEntry(t, s, 1, 1, 10)
			if got, err := s.Ledgers(); err != nil || !slices.Equal(got, []int64{1, 2, 5}) {
				t.Fatalf("Ledgers() = %v, %v", got, err)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	for _, restart := range []string{"none", "close", "crash", "checkpoint+crash"} {
		t.Run(restart, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			opts := testOptions(fs)
			s := openT(t, opts)
			for e := int64(0); e < 20; e++ {
				mustAdd(t, s, 1, e, e-1, 50)
				mustAdd(t, s, 2, e, e-1, 50)
			}
			if restart == "checkpoint+crash" {
				// The entries are checkpointed; the delete is only journaled.
				if err := s.Checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			if err := del(t, s, 1); err != nil {
				t.Fatal(err)
			}
			switch restart {
			case "close":
				closeT(t, s)
				s = openT(t, opts)
			case "crash", "checkpoint+crash":
				crashed := fs.CrashClone(vfs.CrashCloneCfg{})
				closeT(t, s)
				opts.FS = crashed
				s = openT(t, opts)
			}
			defer closeT(t, s)
			for e := int64(0); e < 20; e++ {
				_, err := s.ReadEntry(1, e)
				wantErr(t, err, ErrNoLedger, "read of a deleted ledger")
				checkEntry(t, s, 2, e, 50)
			}
			_, _, err := s.LastAddConfirmed(1)
			wantErr(t, err, ErrNoLedger, "LastAddConfirmed of a deleted ledger")
			wantErr(t, add(t, s, mkEntry(1, 20, 19, 10)), ErrNoLedger, "add to a deleted ledger")
			r := fence(t, s, 1)
			wantErr(t, r.err, ErrNoLedger, "fence of a deleted ledger")
			if err := del(t, s, 1); err != nil {
				t.Fatalf("second delete: %v", err)
			}
			if got, err := s.Ledgers(); err != nil || !slices.Equal(got, []int64{2}) {
				t.Fatalf("Ledgers() = %v, %v", got, err)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	s := openT(t, testOptions(vfs.NewMem()))
	mustAdd(t, s, 1, 0, -1, 10)
	closeT(t, s)
	wantErr(t, s.Close(), ErrClosed, "second Close")
	wantErr(t, add(t, s, mkEntry(1, 1, 0, 10)), ErrClosed, "add after Close")
	_, err := s.ReadEntry(1, 0)
	wantErr(t, err, ErrClosed, "read after Close")
	wantErr(t, s.Checkpoint(), ErrClosed, "Checkpoint after Close")
	wantErr(t, s.GC(), ErrClosed, "GC after Close")
}

// Recovery adds re-replicate a fenced ledger's tail: they are accepted after
// the fence, live and in replay after a crash, while ordinary adds are not.
func TestRecoveryAddOnFencedLedger(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	mustAdd(t, s, 1, 0, -1, 10)
	if r := fence(t, s, 1); r.err != nil {
		t.Fatal(r.err)
	}
	wantErr(t, add(t, s, mkEntry(1, 1, 0, 10)), ErrFenced, "ordinary add after the fence")
	ch := make(chan error, 1)
	s.AddEntry(mkEntry(1, 1, 0, 10), true, func(err error) { ch <- err })
	if err := await(t, ch, "recovery AddEntry"); err != nil {
		t.Fatalf("recovery add to a fenced ledger: %v", err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	closeT(t, s)
	opts.FS = crashed
	s = openT(t, opts)
	defer closeT(t, s)
	checkEntry(t, s, 1, 1, 10)
	if f, err := s.IsFenced(1); err != nil || !f {
		t.Fatalf("IsFenced after replay = %v, %v", f, err)
	}
	wantErr(t, add(t, s, mkEntry(1, 2, 1, 10)), ErrFenced, "ordinary add after replay")
}
