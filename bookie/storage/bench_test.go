package storage

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/magnetar-io/magnetar/bookie/entry"
)

// BenchmarkAddEntry adds entries from many goroutines (each waits for its
// add, as a connection with one add in flight would) on the real disk with
// fsync on: the journal's group commit is what makes it fast.
func BenchmarkAddEntry(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s := openT(b, Options{Dir: b.TempDir(), Logger: discardLogger, GCInterval: -1})
			defer closeT(b, s)
			p := payload(0, 0, size)
			b.SetBytes(int64(entry.HeaderSize + size))
			b.ReportAllocs()
			b.SetParallelism(16)
			var ledgers atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ledger := ledgers.Add(1)
				buf := make([]byte, 0, entry.HeaderSize+size)
				done := make(chan error, 1)
				cb := func(err error) { done <- err }
				for e := int64(0); pb.Next(); e++ {
					// One buffer per adder: reused once done says the add is over.
					buf = entry.Encode(buf[:0], entry.Header{Ledger: ledger, Entry: e, LAC: e - 1, Length: e}, p)
					s.AddEntry(buf, false, cb)
					if err := <-done; err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkAddEntryInFlight adds entries from one goroutine with up to 1000
// adds in flight (as `magnetar perf bookie` does at full load) on the real
// disk with fsync on and the default journal (O_DIRECT for large groups,
// zeros ahead): the storage's write path without the network. It reports
// the journal's fsyncs/s and the bytes each covered, the numbers the disk
// baseline (BenchmarkDiskBaseline) is compared at.
func BenchmarkAddEntryInFlight(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var syncs syncCounter
			o := Options{Dir: b.TempDir(), Logger: discardLogger, GCInterval: -1}
			o.Journal.OnSync = syncs.onSync
			s := openT(b, o)
			defer closeT(b, s)
			const inFlight = 1000
			p := payload(0, 0, size)
			bufs := make(chan []byte, inFlight)
			for range inFlight {
				bufs <- make([]byte, 0, entry.HeaderSize+size)
			}
			var failed atomic.Value
			b.SetBytes(int64(entry.HeaderSize + size))
			b.ReportAllocs()
			n0, bytes0 := syncs.n.Load(), syncs.bytes.Load()
			b.ResetTimer()
			start := time.Now()
			for e := range int64(b.N) {
				buf := <-bufs
				buf = entry.Encode(buf[:0], entry.Header{Ledger: 1, Entry: e, LAC: e - 1, Length: e}, p)
				s.AddEntry(buf, false, func(err error) {
					if err != nil {
						failed.Store(err)
					}
					bufs <- buf
				})
			}
			for range inFlight {
				<-bufs
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
			n, bytes := syncs.n.Load()-n0, syncs.bytes.Load()-bytes0
			b.ReportMetric(float64(n)/elapsed.Seconds(), "fsyncs/s")
			b.ReportMetric(float64(bytes)/float64(max(n, 1))/1024, "KiB/fsync")
		})
	}
}

// BenchmarkAddEntryAtRate adds 1 KiB entries open loop at fixed rates (b.N
// of them; -benchtime 500000x is 5 s at 100,000/s) on the real disk with
// fsync on: the storage's add latency without the network, from each
// add's due time to its acknowledgement, so the generator's own lateness
// counts. It reports p50 and p99 of that and the p99 of the journal's
// fsyncs (from the first write each covers), to compare with the disk's
// 4 KiB write + fdatasync (BenchmarkDiskBaseline): group commit makes an
// add wait for the fsync in progress and then its own.
func BenchmarkAddEntryAtRate(b *testing.B) {
	for _, rate := range []int{20_000, 100_000} {
		b.Run(fmt.Sprintf("%d-per-s", rate), func(b *testing.B) {
			var mu sync.Mutex
			var syncs []time.Duration
			o := Options{Dir: b.TempDir(), Logger: discardLogger, GCInterval: -1}
			o.Journal.OnSync = func(d time.Duration, _, _ int) {
				mu.Lock()
				syncs = append(syncs, d)
				mu.Unlock()
			}
			s := openT(b, o)
			defer closeT(b, s)
			p := payload(0, 0, 1<<10)
			lat := make([]time.Duration, b.N)
			var wg sync.WaitGroup
			var failed atomic.Value
			interval := time.Second / time.Duration(rate)
			b.SetBytes(int64(entry.HeaderSize + len(p)))
			b.ResetTimer()
			start := time.Now()
			for e := range b.N {
				due := start.Add(time.Duration(e) * interval)
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				buf := entry.Encode(nil, entry.Header{Ledger: 1, Entry: int64(e), LAC: int64(e) - 1, Length: int64(e)}, p)
				wg.Add(1)
				s.AddEntry(buf, false, func(err error) {
					if err != nil {
						failed.Store(err)
					}
					lat[e] = time.Since(due)
					wg.Done()
				})
			}
			wg.Wait()
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			b.ReportMetric(quantileMs(lat, 0.5), "p50-ms")
			b.ReportMetric(quantileMs(lat, 0.99), "p99-ms")
			b.ReportMetric(quantileMs(syncs, 0.99), "fsync-p99-ms")
		})
	}
}

// quantileMs sorts ds and returns its q quantile in milliseconds.
func quantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return float64(ds[int(q*float64(len(ds)-1))]) / 1e6
}

// syncCounter counts the journal's fsyncs and the bytes they covered (its
// Options.OnSync).
type syncCounter struct {
	n, bytes atomic.Int64
}

func (c *syncCounter) onSync(_ time.Duration, _, bytes int) {
	c.n.Add(1)
	c.bytes.Add(int64(bytes))
}

// BenchmarkReadEntry reads random entries of a filled storage on the real
// disk (page cache warm).
func BenchmarkReadEntry(b *testing.B) {
	const ledgers, perLedger, size = 10, 2000, 1 << 10
	s := openT(b, Options{Dir: b.TempDir(), Logger: discardLogger, GCInterval: -1, NoSync: true})
	defer closeT(b, s)
	done := make(chan error, 1)
	for e := int64(0); e < perLedger; e++ {
		for l := int64(1); l <= ledgers; l++ {
			s.AddEntry(mkEntry(l, e, e-1, size), false, func(err error) { done <- err })
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.Checkpoint(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(entry.HeaderSize + size)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		for pb.Next() {
			l, e := 1+rng.Int64N(ledgers), rng.Int64N(perLedger)
			if _, err := s.ReadEntry(l, e); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDiskBaseline measures the disk under the benchmarks: appends of
// a given size, each followed by fdatasync, as one journal group would be.
// It bounds what BenchmarkAddEntry can reach.
func BenchmarkDiskBaseline(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("write+fsync-%dKiB", size>>10), func(b *testing.B) {
			fs := vfs.Default
			f, err := fs.Create(fs.PathJoin(b.TempDir(), "baseline"), "test")
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.SyncData(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
