package ledger

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/bookie/client"
)

// Benchmarks run over in-process bookies on loopback with storage in a
// temporary directory without fsync (as bookie/client's BenchmarkAppend),
// so they measure the software, not the disk.

const benchPayload = 1 << 10

func newBenchCluster(b *testing.B, n int) *testCluster {
	tc := newTestCluster(b, 0)
	for range n {
		tc.addBookie(bookietest.Options{FS: vfs.Default, Dir: b.TempDir(), NoSync: true})
	}
	return tc
}

// BenchmarkAppend: pipelined 1 KiB appends (up to 256 in flight) through
// a managed ledger (E=Qw=Qa=1, default rollover). Compare with
// BenchmarkBookieClientAppend, the same appends straight to a ledger.
func BenchmarkAppend(b *testing.B) {
	env := newBenchCluster(b, 1).factory(func(c *Config) { c.MinLedgerAge = 0 })
	ml := env.open(b, "bench/append")
	data := make([]byte, benchPayload)
	window := make(chan struct{}, 256)
	done := func(_ Position, _ int64, err error) {
		if err != nil {
			b.Error(err)
		}
		<-window
	}
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	cpu := startCPU(b)
	for range b.N {
		window <- struct{}{}
		ml.Append(data, FormatKafka, 1, done)
	}
	for range cap(window) {
		window <- struct{}{}
	}
	cpu.report()
}

// cpuMeter reports the process's CPU time (user + system, every
// goroutine: appender, bookie client and in-process bookie) per op as
// cpu-µs/op. On a machine shared with other work, throughput follows the
// CPU the benchmark gets; CPU per op compares the managed ledger with the
// bare client whatever the neighbours do.
type cpuMeter struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) cpuMeter {
	b.ResetTimer()
	return cpuMeter{b, processCPU(b)}
}

func (m cpuMeter) report() {
	m.b.StopTimer()
	m.b.ReportMetric(float64((processCPU(m.b)-m.start).Microseconds())/float64(m.b.N), "cpu-µs/op")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBookieClientAppend is BenchmarkAppend on the bare bookie client.
func BenchmarkBookieClientAppend(b *testing.B) {
	tc := newBenchCluster(b, 1)
	c, _ := tc.client()
	ctx := context.Background()
	w, err := c.CreateLedger(ctx, client.LedgerOptions{EnsembleSize: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, benchPayload)
	window := make(chan struct{}, 256)
	done := func(_ int64, err error) {
		if err != nil {
			b.Error(err)
		}
		<-window
	}
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	cpu := startCPU(b)
	for range b.N {
		window <- struct{}{}
		w.Append(data, done)
	}
	for range cap(window) {
		window <- struct{}{}
	}
	cpu.report()
	w.Close(ctx)
}

// BenchmarkTailRead: a tailing reader waits in WaitNewEntries and reads
// each new entry (from the cache) as it is confirmed; one append at a
// time. ns/op is per entry; e2e-µs is from Append to the reader having
// the entry (the bookie write included); read-µs is the Read call that
// follows the wake-up; bookie-reads must stay 0.
func BenchmarkTailRead(b *testing.B) {
	env := newBenchCluster(b, 1).factory()
	ml := env.open(b, "bench/tail")
	ctx := context.Background()
	data := make([]byte, benchPayload)
	appendAt := make([]int64, b.N)
	var e2e, readNs int64
	readerDone := make(chan error, 1)
	last := ml.LastConfirmed()
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		readerDone <- func() error {
			for i := 0; i < b.N; {
				t0 := time.Now()
				es, err := ml.Read(ctx, Position{last.Ledger, last.Entry + 1}, 64)
				if err != nil {
					return err
				}
				if len(es) == 0 {
					if err := ml.WaitNewEntries(ctx, last); err != nil {
						return err
					}
					continue
				}
				now := time.Now()
				readNs += int64(now.Sub(t0))
				for _, e := range es {
					e2e += now.UnixNano() - atomic.LoadInt64(&appendAt[i])
					last = e.Position
					i++
				}
			}
			return nil
		}()
	}()
	for i := range b.N {
		ch := make(chan struct{})
		atomic.StoreInt64(&appendAt[i], time.Now().UnixNano())
		ml.Append(data, FormatKafka, 1, func(_ Position, _ int64, err error) {
			if err != nil {
				b.Error(err)
			}
			close(ch)
		})
		<-ch
	}
	if err := <-readerDone; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(e2e)/float64(b.N)/1e3, "e2e-µs")
	b.ReportMetric(float64(readNs)/float64(b.N)/1e3, "read-µs")
	b.ReportMetric(float64(env.bookies.reads.Load()), "bookie-reads")
}

// BenchmarkCatchUpRead: reading 1 KiB entries back from the bookies with a
// cold cache (a second broker's view), 256 entries per Read.
func BenchmarkCatchUpRead(b *testing.B) {
	tc := newBenchCluster(b, 1)
	writer := tc.factory(func(c *Config) { c.MaxEntriesPerLedger = 5000 })
	ml := writer.open(b, "bench/catchup")
	const n = 20000
	data := make([]byte, benchPayload)
	window := make(chan struct{}, 256)
	for range n {
		window <- struct{}{}
		ml.Append(data, FormatKafka, 1, func(_ Position, _ int64, err error) {
			if err != nil {
				b.Error(err)
			}
			<-window
		})
	}
	for range cap(window) {
		window <- struct{}{}
	}
	ctx := context.Background()
	if err := ml.Close(ctx); err != nil {
		b.Fatal(err)
	}
	reader := tc.factory()
	ml = reader.open(b, "bench/catchup")
	start := ml.FirstPosition()
	b.SetBytes(benchPayload)
	b.ReportAllocs()
	b.ResetTimer()
	pos := start
	for read := 0; read < b.N; {
		es, err := ml.Read(ctx, pos, min(256, b.N-read))
		if err != nil {
			b.Fatal(err)
		}
		if len(es) == 0 {
			pos = start
			continue
		}
		read += len(es)
		last := es[len(es)-1].Position
		pos = Position{last.Ledger, last.Entry + 1}
	}
	b.StopTimer()
	if reader.bookies.entries.Load() < int64(b.N) {
		b.Fatalf("only %d entries came from bookies", reader.bookies.entries.Load())
	}
}

// BenchmarkFindOffset: offset lookups over 100,000 entries (10 ledgers),
// written by this instance, so the sparse index and the cache answer.
func BenchmarkFindOffset(b *testing.B) {
	env := newBenchCluster(b, 1).factory(func(c *Config) { c.MaxEntriesPerLedger = 10000 })
	ml := env.open(b, "bench/find")
	const n = 100_000
	window := make(chan struct{}, 256)
	data := make([]byte, 100)
	for range n {
		window <- struct{}{}
		ml.Append(data, FormatKafka, 5, func(_ Position, _ int64, err error) {
			if err != nil {
				b.Error(err)
			}
			<-window
		})
	}
	for range cap(window) {
		window <- struct{}{}
	}
	ctx := context.Background()
	end := ml.NextOffset()
	rng := rand.New(rand.NewPCG(1, 2))
	reads := env.bookies.entries.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		off := rng.Int64N(end)
		if _, err := ml.FindOffset(ctx, off); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(env.bookies.entries.Load()-reads)/float64(b.N), "bookie-reads/op")
	b.ReportMetric(float64(len(ml.Ledgers())), "ledgers")
}

// BenchmarkFindOffsetAfterReopen: the same lookups by a new instance, whose
// index has only the ledger list: the first lookups in a ledger read from
// the bookies and the index learns.
func BenchmarkFindOffsetAfterReopen(b *testing.B) {
	tc := newBenchCluster(b, 1)
	env := tc.factory(func(c *Config) { c.MaxEntriesPerLedger = 10000 })
	ml := env.open(b, "bench/find2")
	const n = 100_000
	window := make(chan struct{}, 256)
	data := make([]byte, 100)
	for range n {
		window <- struct{}{}
		ml.Append(data, FormatKafka, 5, func(_ Position, _ int64, err error) {
			if err != nil {
				b.Error(err)
			}
			<-window
		})
	}
	for range cap(window) {
		window <- struct{}{}
	}
	ctx := context.Background()
	if err := ml.Close(ctx); err != nil {
		b.Fatal(err)
	}
	env2 := tc.factory()
	ml = env2.open(b, "bench/find2")
	end := ml.NextOffset()
	rng := rand.New(rand.NewPCG(1, 2))
	reads := env2.bookies.entries.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := ml.FindOffset(ctx, rng.Int64N(end)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(env2.bookies.entries.Load()-reads)/float64(b.N), "bookie-reads/op")
}
