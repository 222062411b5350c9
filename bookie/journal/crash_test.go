package journal

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestPowerLoss takes a crash clone of the filesystem while appends stream
// in, then recovers from the clone: every record acknowledged before the
// clone began must replay. With unsynced data partly surviving, the clone's
// tails are torn in every way the simulated disk allows.
func TestPowerLoss(t *testing.T) {
	t.Run("synced data only", func(t *testing.T) { powerLoss(t, vfs.CrashCloneCfg{}) })
	for seed := range uint64(12) {
		t.Run(fmt.Sprintf("unsynced 50%% seed %d", seed), func(t *testing.T) {
			powerLoss(t, vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 0x6a))})
		})
	}
}

func powerLoss(t *testing.T, cfg vfs.CrashCloneCfg) {
	mem := vfs.NewCrashableMem()
	opts := Options{FS: mem, Dir: memDir, MaxFileSize: 32 << 10, Logger: discardLogger}
	// An earlier run leaves a complete file behind.
	earlier := writeRecords(t, opts, 5)

	j, _ := openT(t, opts, Position{})
	const G, clonePoint, inFlight = 6, 400, 8
	var (
		acked   [G]atomic.Int64 // per appender: records acknowledged, a prefix
		total   atomic.Int64
		reached = make(chan struct{})
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, inFlight)
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				case slots <- struct{}{}:
				}
				body := testBody(10+g, seq, testSize(g, seq))
				j.Append(testType(g, seq), body, func(_ Position, err error) {
					if err == nil {
						acked[g].Add(1)
						if total.Add(1) == clonePoint {
							close(reached)
						}
					}
					<-slots
				})
			}
		}()
	}
	recv(t, reached, fmt.Sprintf("%d acknowledged records", clonePoint))
	var before [G]int64
	for g := range G {
		before[g] = acked[g].Load()
	}
	crashed := mem.CrashClone(cfg) // appends go on meanwhile
	close(stop)
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	check := func(run string, got []rec, lb *logBuffer) {
		t.Helper()
		next := [G]int64{}
		for i, r := range got {
			g, seq, err := parseBody(r.Body)
			if err != nil {
				t.Fatalf("%s: record %d: %v", run, i, err)
			}
			if i < len(earlier) {
				if g != 1 || seq != i {
					t.Fatalf("%s: record %d is %d/%d, want the earlier run's", run, i, g, seq)
				}
				continue
			}
			g -= 10
			if g < 0 || g >= G || int64(seq) != next[g] {
				t.Fatalf("%s: record %d is %d/%d: out of order or unknown", run, i, g, seq)
			}
			next[g]++
		}
		for g := range G {
			if next[g] < before[g] {
				t.Fatalf("%s: appender %d: %d records replayed, %d acknowledged before the crash", run, g, next[g], before[g])
			}
		}
		// Files are complete and synced before the next one is created, so
		// no damage in an earlier file.
		if n := len(lb.lines("ERROR")); n > 0 {
			t.Fatalf("%s: error log:\n%s", run, lb)
		}
	}
	logger, lb := newLogger()
	opts = Options{FS: crashed, Dir: memDir, MaxFileSize: 32 << 10, Logger: logger}
	j, got := openT(t, opts, Position{})
	check("recovery", got, lb)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	// Recovery cut what it found: a second run replays the same, quietly.
	logger, lb = newLogger()
	opts.Logger = logger
	j, again := openT(t, opts, Position{})
	defer j.Close()
	check("second recovery", again, lb)
	checkQuiet(t, lb)
	checkRecs(t, again, got)
}
