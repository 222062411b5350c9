package storage

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Adds racing a fence: every add acknowledged was journaled before the
// fence (the fence's last entry covers it, and it is readable), every add
// after the fence is refused, and a restart agrees. An add acknowledged
// once journaled but after the fence would be one the applier refuses.
func TestAcksNeverFollowAFence(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := testOptions(fs)
	s := openT(t, opts)
	var next atomic.Int64
	for ledger := int64(1); ledger <= 20; ledger++ {
		var mu sync.Mutex
		var acked []int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					e := next.Add(1)
					done := make(chan error, 1)
					s.AddEntry(mkEntry(ledger, e, -1, 100), false, func(err error) { done <- err })
					switch err := <-done; {
					case err == nil:
						mu.Lock()
						acked = append(acked, e)
						mu.Unlock()
					case errors.Is(err, ErrFenced):
						return
					default:
						t.Errorf("ledger %d entry %d: %v", ledger, e, err)
						return
					}
				}
			}()
		}
		// The fence comes after 0 to 30 acknowledged adds, adds racing it.
		for deadline := time.Now().Add(waitTimeout); ; time.Sleep(100 * time.Microsecond) {
			mu.Lock()
			n := len(acked)
			mu.Unlock()
			if n >= int(ledger%4)*10 || time.Now().After(deadline) {
				break
			}
		}
		fr := fence(t, s, ledger)
		wg.Wait()
		if fr.err != nil {
			t.Fatalf("fence ledger %d: %v", ledger, fr.err)
		}
		for _, e := range acked {
			if e > fr.last {
				t.Fatalf("ledger %d: entry %d acknowledged, but the fence's last entry is %d", ledger, e, fr.last)
			}
			checkEntry(t, s, ledger, e, 100)
		}
		wantErr(t, add(t, s, mkEntry(ledger, next.Add(1), -1, 100)), ErrFenced, "add after the fence")
	}
	s, _ = crashOpen(t, s, fs, opts, vfs.CrashCloneCfg{})
	defer closeT(t, s)
	for ledger := int64(1); ledger <= 20; ledger++ {
		wantErr(t, add(t, s, mkEntry(ledger, next.Add(1), -1, 100)), ErrFenced, "add after the fence, after a restart")
	}
}
