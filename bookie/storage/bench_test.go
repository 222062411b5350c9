package storage

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

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
