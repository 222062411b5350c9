package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// A virtual machine's memory is backed by the host on first use: the
// first write to each page of a freshly booted guest costs a fault on the
// host too. Measured here (2026-11-30): 20 GiB touched at 555 MB/s the
// first time, 1,163 MB/s the second; 3 GB written through the page cache
// in 6.1 s on a fresh machine, 0.6 s once its pages had been written
// before. A load that runs first on a fresh machine pays this for every
// page of page cache or heap it takes; a broker that has run for a while
// does not. So perf all writes every free page once before the loads,
// and reports the speed as a limit.

// memTouchChunk is the unit in which free memory is touched and held.
const memTouchChunk = 256 << 20

// memTouchReserve is the free memory left untouched.
const memTouchReserve = 1 << 30

// errMemUnsupported: the system does not say how much memory is free.
var errMemUnsupported = errors.New("free memory not known on this system")

// parseTouchMemory reads perf-all-touch-memory: "all", or a count of MiB
// (0: none).
func parseTouchMemory(s string) (int64, error) {
	if s == "all" {
		return -1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<24 {
		return 0, fmt.Errorf("%q: want all, or a number of MiB from 0", s)
	}
	return n << 20, nil
}

// freeMemory is MemFree of /proc/meminfo, in bytes.
func freeMemory(meminfo string) (int64, error) {
	for _, line := range strings.Split(meminfo, "\n") {
		rest, ok := strings.CutPrefix(line, "MemFree:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("meminfo: %q: %w", line, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("meminfo: no MemFree line")
}

// touchMemory writes one byte in every page of n bytes of fresh memory,
// held in chunks, then returns it all to the system; it answers the
// speed in MB/s.
func touchMemory(ctx context.Context, n int64) (float64, error) {
	start := time.Now()
	var held [][]byte
	done := int64(0)
	for done < n {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		b := make([]byte, min(memTouchChunk, n-done))
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		held = append(held, b)
		done += int64(len(b))
	}
	elapsed := time.Since(start)
	runtime.KeepAlive(held)
	held = nil
	debug.FreeOSMemory()
	return float64(n) / 1e6 / elapsed.Seconds(), nil
}
