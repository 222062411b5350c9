package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestFillSize(t *testing.T) {
	for _, tc := range []struct {
		name          string
		avail, free   int64
		want          int64
		skippedSaying string
	}{
		{"memory bound", 24 * gib, 80 * gib, 23 * gib, ""},
		{"disk bound", 24 * gib, 50 * gib, 9 * gib, ""},
		{"rounded to whole writes", 3*gib + 12345, 80 * gib, 2 * gib, ""},
		{"too little memory", 1*gib + fillMin - 1, 80 * gib, 0, "2.0 GiB of memory available"},
		{"too little disk", 24 * gib, 41 * gib, 0, "41.0 GiB of disk free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, why := fillSize(tc.avail, tc.free)
			if n != tc.want || (tc.skippedSaying == "") != (why == "") || !strings.Contains(why, tc.skippedSaying) {
				t.Errorf("fillSize(%d, %d) = %d, %q; want %d and a reason saying %q", tc.avail, tc.free, n, why, tc.want, tc.skippedSaying)
			}
		})
	}
}

func TestMemAvailable(t *testing.T) {
	const meminfo = "MemTotal:       24684388 kB\nMemFree:        23374676 kB\nMemAvailable:   24147440 kB\nBuffers:           10248 kB\n"
	n, err := memAvailable(strings.NewReader(meminfo))
	if err != nil || n != 24147440<<10 {
		t.Fatalf("memAvailable = %d, %v; want %d", n, err, int64(24147440)<<10)
	}
	for _, bad := range []string{"MemTotal: 1 kB\n", "MemAvailable: 12 MB\n", "MemAvailable: x kB\n", ""} {
		if n, err := memAvailable(strings.NewReader(bad)); err == nil {
			t.Errorf("memAvailable(%q) = %d, want an error", bad, n)
		}
	}
	if runtime.GOOS == "linux" {
		f, err := os.Open("/proc/meminfo")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if n, err := memAvailable(f); err != nil || n <= 0 {
			t.Fatalf("this machine's MemAvailable: %d, %v", n, err)
		}
	}
}

// writeFill writes both files whole, synced, and measures the CPU of each.
func TestWriteFill(t *testing.T) {
	dir := t.TempDir()
	fill, err := writeFill(context.Background(), dir, 32<<20, 8<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int64{"page-cache-fill": 32 << 20, "page-cache-full": 8 << 20} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Size() != size {
			t.Errorf("%s: %v, %v; want %d bytes", name, fi, err, size)
		}
	}
	if fill.Bytes != 32<<20 || fill.Elapsed <= 0 || fill.Skipped != "" {
		t.Errorf("fill %+v: want 32 MiB written, its time, not skipped", fill)
	}
	if _, ok := threadCPU(); ok && (fill.GrowCPU <= 0 || fill.FullCPU <= 0) {
		t.Errorf("CPU per MB %g and %g: want both measured", fill.GrowCPU, fill.FullCPU)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := writeFill(ctx, t.TempDir(), 8<<20, 0, nil); err == nil {
		t.Error("a cancelled fill did not fail")
	}
}

// The table shows the fill's two figures as limits, and "-" for a fill
// skipped or not asked for.
func TestPerfAllPageCacheRows(t *testing.T) {
	const grow, full = "limit: page-cache writes growing the cache into free memory (the fill), CPU per MB, ms", "limit: page-cache writes with the cache full, CPU per MB, ms"
	cfg := perfAllConfig{Topics: 10, Partitions: 10}
	for _, tc := range []struct {
		name       string
		fill       *pageCacheFill
		grow, full string
	}{
		{"filled", &pageCacheFill{Bytes: gib, GrowCPU: 1.6251, FullCPU: 0.3}, "1.625", "0.300"},
		{"skipped", &pageCacheFill{Skipped: "too little"}, "-", "-"},
		{"not asked", nil, "-", "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := benchTable(&benchResults{pageCache: tc.fill}, cfg)
			if g, f := tableCell(tab, grow, 1), tableCell(tab, full, 1); g != tc.grow || f != tc.full {
				t.Errorf("rows %q, %q; want %q, %q", g, f, tc.grow, tc.full)
			}
		})
	}
}
