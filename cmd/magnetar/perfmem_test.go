package main

import (
	"context"
	"testing"
)

func TestParseTouchMemory(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"all", -1, true}, {"0", 0, true}, {"64", 64 << 20, true}, {"-1", 0, false}, {"lots", 0, false}, {"", 0, false}} {
		got, err := parseTouchMemory(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseTouchMemory(%q) = %d, %v; want %d, ok %t", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestFreeMemory(t *testing.T) {
	const meminfo = "MemTotal:       24684044 kB\nMemFree:        22869000 kB\nMemAvailable:   23506000 kB\n"
	if got, err := freeMemory(meminfo); err != nil || got != 22869000<<10 {
		t.Errorf("freeMemory = %d, %v; want %d", got, err, int64(22869000)<<10)
	}
	for _, bad := range []string{"MemTotal: 1 kB\n", "MemFree: many kB\n"} {
		if _, err := freeMemory(bad); err == nil {
			t.Errorf("freeMemory(%q): no error", bad)
		}
	}
	if free, err := systemFreeMemory(); err != nil || free <= 0 {
		t.Errorf("systemFreeMemory = %d, %v", free, err)
	}
}

func TestTouchMemory(t *testing.T) {
	mbps, err := touchMemory(context.Background(), memTouchChunk+5<<20)
	if err != nil || mbps <= 0 {
		t.Fatalf("touchMemory = %g, %v", mbps, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := touchMemory(ctx, 1<<20); err == nil {
		t.Error("touchMemory with its context ended: no error")
	}
}
