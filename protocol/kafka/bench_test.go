package kafka

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Benchmarks of the Kafka produce and fetch paths through the server, over
// loopback, down to an in-process bookie (fsync off): what the broker
// costs per request. Each runs with batches of 1, 10 and 100 records of
// 1 KiB: "allocs/record" is the heap allocations of the whole process per
// record. Same-protocol produce and fetch store and serve record batches
// as they are, so the allocations per request must not grow with the
// records in it (issue 10: no per-record allocation). The request
// latency histogram is on, as in magnetar standalone and broker.

func benchValues(n int) []string {
	v := strings.Repeat("x", 1024)
	out := make([]string, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// benchLatency is a request latency histogram for a benchmark's server.
func benchLatency() prometheus.ObserverVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "request_latency_seconds",
		Buckets: prometheus.ExponentialBuckets(0.0001, 1.25, 45)}, []string{"request"})
}

// mallocs is the number of heap allocations so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func BenchmarkProduce(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprint("records=", n), func(b *testing.B) {
			s := startServer(b, func(c *Config) { c.MaxMessageSize, c.RequestLatency = 1<<20, benchLatency() })
			c := s.dial(b)
			createTopic(b, c, "bench", 1)
			batch := plainBatch(benchValues(n)...)
			frame := encode(produceReq(9, -1, "bench", 0, batch), 1)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			b.ResetTimer()
			start := mallocs()
			for range b.N {
				c.nc.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.nc.Write(frame); err != nil {
					b.Fatal(err)
				}
				if _, _, err := readFrame(c.nc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(mallocs()-start)/float64(b.N*n), "allocs/record")
		})
	}
}

func BenchmarkFetch(b *testing.B) {
	const entries = 20 // batches read by each fetch
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprint("records=", n), func(b *testing.B) {
			s := startServer(b, func(c *Config) {
				c.MaxMessageSize, c.MaxRequestSize, c.RequestLatency = 1<<20, 8<<20, benchLatency()
			})
			c := s.dial(b)
			createTopic(b, c, "bench", 1)
			batch := plainBatch(benchValues(n)...)
			for range entries {
				if p := produce(b, c, "bench", batch); p.ErrorCode != 0 {
					b.Fatalf("produce: error %d", p.ErrorCode)
				}
			}
			req := fetchReq("bench", 0, 0)
			req.MaxBytes = 64 << 20
			req.Topics[0].Partitions[0].PartitionMaxBytes = 64 << 20
			frame := encode(req, 1)
			b.SetBytes(int64(entries * len(batch)))
			b.ReportAllocs()
			b.ResetTimer()
			start := mallocs()
			for range b.N {
				c.nc.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.nc.Write(frame); err != nil {
					b.Fatal(err)
				}
				_, body, err := readFrame(c.nc)
				if err != nil {
					b.Fatal(err)
				}
				if len(body) < entries*len(batch) {
					b.Fatalf("fetch answered %d bytes, want at least %d", len(body), entries*len(batch))
				}
			}
			b.ReportMetric(float64(mallocs()-start)/float64(b.N*entries*n), "allocs/record")
		})
	}
}
