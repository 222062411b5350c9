package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The page-cache fill of `perf all` (design note 0010, "page cache").
//
// A broker that has run for a while has a full page cache: every byte it
// writes takes a page the kernel reclaims from older data. A freshly
// booted machine, or one whose free memory went back to its host, has
// free memory instead, and the page cache grows into it. On a virtual
// machine whose host backs guest memory at first touch (and takes freed
// memory back, as a balloon with free-page reporting does), a page the
// cache grows into costs the host's work too: measured on the benchmark
// machine, 1.6–1.9 ms of CPU per MB written against 0.3 once the cache is
// full. Every load that writes (the broker's, but also the limits'
// page-cache writes and the no-op brokers') then pays a cost that
// depends on the machine's memory history, not on the load. So the run
// first fills the page cache with a file it keeps to the end, as a broker
// that has run for a while finds it, and shows both costs as limits.

const (
	// fillMemoryReserve is memory left available beyond the fill.
	fillMemoryReserve = 1 << 30
	// fillDiskReserve is disk space left free beyond the fill, for the
	// loads' data (the standalone's journal and entry logs, the no-op
	// brokers' files).
	fillDiskReserve = 40 << 30
	// fillMin: a fill smaller than this is not worth its time.
	fillMin = 1 << 30
	// fillFullBytes are written after the fill, the cache full, to
	// measure the cost of a write then.
	fillFullBytes = 1 << 30
	fillBlock     = 1 << 20
)

// pageCacheFill is what the fill wrote and measured.
type pageCacheFill struct {
	// Skipped says why nothing was written ("" if the fill ran).
	Skipped string
	// Bytes were written by the fill in Elapsed, with GrowCPU of CPU per
	// MB (ms): the page cache growing into free memory.
	Bytes   int64
	Elapsed time.Duration
	GrowCPU float64
	// FullCPU is the CPU per MB (ms) of fillFullBytes written after it,
	// the page cache full; 0 if not measured.
	FullCPU float64
}

// fillSize is how much to write to fill the page cache: the memory
// available less fillMemoryReserve, no more than the disk has free beyond
// fillDiskReserve; 0 and why when that is under fillMin.
func fillSize(memAvailable, diskFree int64) (int64, string) {
	n := min(memAvailable-fillMemoryReserve, diskFree-fillDiskReserve-fillFullBytes)
	if n < fillMin {
		return 0, fmt.Sprintf("%.1f GiB of memory available and %.1f GiB of disk free: too little to fill the page cache (it takes the memory available less %d GiB, and the disk must keep %d GiB free besides)",
			float64(memAvailable)/gib, float64(diskFree)/gib, fillMemoryReserve>>30, fillDiskReserve>>30)
	}
	return n &^ (fillBlock - 1), ""
}

const gib = 1 << 30

// memAvailable reads MemAvailable from meminfo (/proc/meminfo's format),
// in bytes.
func memAvailable(meminfo io.Reader) (int64, error) {
	sc := bufio.NewScanner(meminfo)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "MemAvailable" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("MemAvailable: unexpected %q", rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("MemAvailable: %w", err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no MemAvailable")
}

// fillPageCache writes the fill into dir (the files stay until the scratch
// directory is removed), sized by fillSize from this machine's memory and
// dir's free space; where these are not known (not Linux) it writes
// nothing and says why.
func fillPageCache(ctx context.Context, dir string, progress func(written, total int64)) (*pageCacheFill, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return &pageCacheFill{Skipped: "the memory available is not known here: " + err.Error()}, nil
	}
	avail, err := memAvailable(f)
	f.Close()
	if err != nil {
		return &pageCacheFill{Skipped: "the memory available is not known here: " + err.Error()}, nil
	}
	free, err := diskFree(dir)
	if err != nil {
		return &pageCacheFill{Skipped: "the disk's free space is not known here: " + err.Error()}, nil
	}
	n, why := fillSize(avail, free)
	if n == 0 {
		return &pageCacheFill{Skipped: why}, nil
	}
	return writeFill(ctx, dir, n, fillFullBytes, progress)
}

// writeFill writes n bytes to dir/page-cache-fill, then full bytes to
// dir/page-cache-full (0: none), each through the page cache and
// fdatasync'd at the end (so their pages are clean, and the kernel can
// reclaim them at once for the loads), measuring the CPU per MB of each.
func writeFill(ctx context.Context, dir string, n, full int64, progress func(written, total int64)) (*pageCacheFill, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := &pageCacheFill{Bytes: n}
	start := time.Now()
	cpu, err := writeMeasured(ctx, filepath.Join(dir, "page-cache-fill"), n, progress)
	if err != nil {
		return nil, fmt.Errorf("page-cache fill: %w", err)
	}
	r.Elapsed = time.Since(start)
	r.GrowCPU = cpu
	if full > 0 {
		if r.FullCPU, err = writeMeasured(ctx, filepath.Join(dir, "page-cache-full"), full, nil); err != nil {
			return nil, fmt.Errorf("page-cache fill: %w", err)
		}
	}
	return r, nil
}

// writeMeasured writes n bytes to a new file at path in fillBlock writes,
// then fdatasyncs it, and returns the writes' CPU per MB (ms; 0 if the
// system does not say). The caller locks the goroutine to its thread.
func writeMeasured(ctx context.Context, path string, n int64, progress func(written, total int64)) (float64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, fillBlock)
	fillPattern(buf)
	var cpu time.Duration
	cpu0, ok := threadCPU()
	next := time.Now().Add(time.Second)
	for written := int64(0); written < n; {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		k, err := f.Write(buf[:min(int64(len(buf)), n-written)])
		written += int64(k)
		if err != nil {
			return 0, fmt.Errorf("write %s: %w", path, err)
		}
		if progress != nil && time.Now().After(next) {
			progress(written, n)
			next = next.Add(time.Second)
		}
	}
	cpu1, _ := threadCPU()
	cpu = cpu1 - cpu0
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("fsync %s: %w", path, err)
	}
	if !ok {
		return 0, nil
	}
	return ms(cpu) / (float64(n) / 1e6), nil
}
