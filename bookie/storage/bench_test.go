package storage

import (
	"fmt"
	"math/rand/v2"
	"strings"
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
// disk with fsync on: the storage's write path without the network. It
// reports the journal's average group and syncs/s, the numbers the disk
// baseline (BenchmarkDiskBaseline) is compared at.
func BenchmarkAddEntryInFlight(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			fs := &groupCounter{FS: vfs.Default}
			s := openT(b, Options{FS: fs, Dir: b.TempDir(), Logger: discardLogger, GCInterval: -1})
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
			writes, bytes := fs.writes.Load(), fs.bytes.Load()
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
			writes, bytes = fs.writes.Load()-writes, fs.bytes.Load()-bytes
			b.ReportMetric(float64(writes)/elapsed.Seconds(), "groups/s")
			b.ReportMetric(float64(bytes)/float64(max(writes, 1))/1024, "KiB/group")
		})
	}
}

// groupCounter counts the writes to journal files: the journal writes a
// group with one Write.
type groupCounter struct {
	vfs.FS
	writes, bytes atomic.Int64
}

func (fs *groupCounter) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	if err != nil || !strings.HasSuffix(name, ".jnl") {
		return f, err
	}
	return countedFile{File: f, fs: fs}, nil
}

type countedFile struct {
	vfs.File
	fs *groupCounter
}

func (f countedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.fs.writes.Add(1)
	f.fs.bytes.Add(int64(n))
	return n, err
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
