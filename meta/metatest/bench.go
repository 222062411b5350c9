package metatest

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/magnetar-io/magnetar/meta"
)

// benchValue is the value every benchmark reads or writes: the size of a
// small piece of metadata such as a cursor position.
var benchValue = make([]byte, 100)

// RunBenchmarks runs the Get, CAS-Set (Set with expected version, serial and
// parallel b.RunParallel), Create (serial and parallel) and Exists
// benchmarks as sub-benchmarks of b, with b.ReportAllocs().
func RunBenchmarks(b *testing.B, h Harness) {
	if h.Open == nil {
		b.Fatalf("metatest: Harness %q has no Open", h.Name)
	}
	b.Run("Get", func(b *testing.B) { benchGet(b, h) })
	b.Run("CASSet", func(b *testing.B) {
		b.Run("Serial", func(b *testing.B) { benchCASSetSerial(b, h) })
		b.Run("Parallel", func(b *testing.B) { benchCASSetParallel(b, h) })
	})
	b.Run("Create", func(b *testing.B) {
		b.Run("Serial", func(b *testing.B) { benchCreateSerial(b, h) })
		b.Run("Parallel", func(b *testing.B) { benchCreateParallel(b, h) })
	})
	b.Run("Exists", func(b *testing.B) { benchExists(b, h) })
}

func benchGet(b *testing.B, h Harness) {
	f := newFixture(b, h)
	p := f.create(f.s, f.path("node"), benchValue, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := f.s.Get(f.ctx, p); err != nil {
			b.Fatalf("Get: %v", err)
		}
	}
}

func benchExists(b *testing.B, h Harness) {
	f := newFixture(b, h)
	p := f.create(f.s, f.path("node"), benchValue, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := f.s.Exists(f.ctx, p); err != nil || !ok {
			b.Fatalf("Exists = %v, %v", ok, err)
		}
	}
}

func benchCASSetSerial(b *testing.B, h Harness) {
	f := newFixture(b, h)
	p := f.create(f.s, f.path("node"), benchValue, 0)
	var version meta.Version
	b.ReportAllocs()
	for b.Loop() {
		st, err := f.s.Set(f.ctx, p, benchValue, version)
		if err != nil {
			b.Fatalf("Set with version %d: %v", version, err)
		}
		version = st.Version
	}
}

// benchParallelism × GOMAXPROCS goroutines run the parallel benchmarks: a
// metadata store serves many clients at once, and batching (group commit,
// pipelined requests) only shows with more of them than cores.
const benchParallelism = 8

func benchCASSetParallel(b *testing.B, h Harness) {
	f := newFixture(b, h)
	// One node per goroutine, so that no Set fails on another's version.
	nodes := make([]string, benchParallelism*runtime.GOMAXPROCS(0))
	for i := range nodes {
		nodes[i] = f.create(f.s, f.path("node-"+strconv.Itoa(i)), benchValue, 0)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) - 1)
		var p string
		if i < len(nodes) {
			p = nodes[i]
		} else {
			var err error // more goroutines than expected: make a node, timed
			if p, err = f.s.Create(f.ctx, f.path("node-"+strconv.Itoa(i)), benchValue, 0); err != nil {
				b.Errorf("Create: %v", err)
				return
			}
		}
		var version meta.Version
		for pb.Next() {
			st, err := f.s.Set(f.ctx, p, benchValue, version)
			if err != nil {
				b.Errorf("Set(%q) with version %d: %v", p, version, err)
				return
			}
			version = st.Version
		}
	})
}

func benchCreateSerial(b *testing.B, h Harness) {
	f := newFixture(b, h)
	prefix := f.path("node-")
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.s.Create(f.ctx, prefix+strconv.Itoa(i), benchValue, 0); err != nil {
			b.Fatalf("Create: %v", err)
		}
		i++
	}
}

func benchCreateParallel(b *testing.B, h Harness) {
	f := newFixture(b, h)
	prefix := f.path("node-")
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p := prefix + strconv.FormatInt(next.Add(1), 10)
			if _, err := f.s.Create(f.ctx, p, benchValue, 0); err != nil {
				b.Errorf("Create(%q): %v", p, err)
				return
			}
		}
	})
}
