package client

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAppend measures pipelined appends (up to 256 in flight) to
// in-process bookies over loopback, with storage on disk without fsync.
// MB/s counts payload bytes.
func BenchmarkAppend(b *testing.B) {
	for _, q := range []struct{ e, qw, qa int }{{1, 1, 1}, {3, 2, 2}} {
		for _, size := range []int{1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("E%dQw%dQa%d/%dKiB", q.e, q.qw, q.qa, size>>10), func(b *testing.B) {
				c := newClusterOnDisk(b, q.e).client()
				ctx := context.Background()
				w, err := c.CreateLedger(ctx, LedgerOptions{EnsembleSize: q.e, WriteQuorum: q.qw, AckQuorum: q.qa})
				if err != nil {
					b.Fatal(err)
				}
				data := make([]byte, size)
				window := make(chan struct{}, 256)
				done := func(_ int64, err error) {
					if err != nil {
						b.Error(err)
					}
					<-window
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					window <- struct{}{}
					w.Append(data, done)
				}
				for range cap(window) {
					window <- struct{}{}
				}
				b.StopTimer()
				if err := w.Close(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

func newClusterOnDisk(b *testing.B, n int) *cluster {
	cl := newCluster(b, 0)
	cl.onDisk = true
	for range n {
		cl.addBookie()
	}
	return cl
}
