package journal

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkAppend appends from 16×GOMAXPROCS goroutines, each waiting for
// its record to be durable before the next, to a journal in a temporary
// directory on the real disk (vfs.Default). MB/s is acknowledged body bytes.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		for _, noSync := range []bool{false, true} {
			mode := "fsync"
			if noSync {
				mode = "NoSync"
			}
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, mode), func(b *testing.B) {
				benchmarkAppend(b, size, noSync)
			})
		}
	}
}

func benchmarkAppend(b *testing.B, size int, noSync bool) {
	j, err := Open(Options{Dir: b.TempDir(), NoSync: noSync, Logger: discardLogger}, Position{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.UintN(256))
	}
	syncs, groups := j.syncs.Load(), j.groups.Load()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		acked := make(chan error, 1)
		done := func(_ Position, err error) { acked <- err }
		for pb.Next() {
			j.Append(1, body, done)
			if err := <-acked; err != nil {
				b.Error(err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	syncs, groups = j.syncs.Load()-syncs, j.groups.Load()-groups
	b.ReportMetric(float64(syncs)/elapsed.Seconds(), "syncs/s")
	b.ReportMetric(float64(b.N)/float64(max(groups, 1)), "records/group")
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
}
