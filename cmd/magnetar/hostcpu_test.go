package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseHostCPU(t *testing.T) {
	const stat = "cpu  100 5 50 800 20 3 2 20 7 0\ncpu0 50 2 25 400 10 1 1 10 3 0\nintr 12345\n"
	h, ok := parseHostCPU([]byte(stat))
	if !ok || h.total != 1000 || h.steal != 20 {
		t.Fatalf("parseHostCPU = %+v, %t; want total 1000 (guest time left out), steal 20", h, ok)
	}
	later, ok := parseHostCPU([]byte("cpu  150 5 80 1000 30 3 2 50 7 0\n"))
	if !ok {
		t.Fatal("the later line did not parse")
	}
	if f, ok := later.stealSince(h); !ok || math.Abs(f-30.0/320) > 1e-12 {
		t.Errorf("stealSince = %g, %t; want %g", f, ok, 30.0/320)
	}
	if _, ok := h.stealSince(h); ok {
		t.Error("stealSince over no time said it measured something")
	}
	if _, ok := h.stealSince(later); ok {
		t.Error("stealSince with the counters going back said it measured something")
	}
	for _, bad := range []string{
		"",
		"intr 1 2 3\n",
		"cpu  100 5 50 800 20 3 2\n", // a kernel that does not count steal
		"cpu  100 5 50 800 20 3 2 x 0 0\n",
		"cpu0 1 2 3 4 5 6 7 8 9 10\n", // a CPU's line, not the machine's
	} {
		if h, ok := parseHostCPU([]byte(bad)); ok {
			t.Errorf("parseHostCPU(%q) = %+v, true; want false", bad, h)
		}
	}
}

func TestReadHostCPU(t *testing.T) {
	h, ok := readHostCPU()
	if !ok || h.total == 0 {
		t.Fatalf("readHostCPU on this Linux machine = %+v, %t", h, ok)
	}
	old := procStat
	t.Cleanup(func() { procStat = old })
	procStat = filepath.Join(t.TempDir(), "missing")
	if _, ok := readHostCPU(); ok {
		t.Error("readHostCPU without /proc/stat said it measured something")
	}
}

func TestStealLogTable(t *testing.T) {
	s := newStealLog()
	if s.table() != nil {
		t.Fatal("an empty log made a table")
	}
	s.record("no-op pulsar", "pulsar-publish-5000", 0.01)
	s.record("magnetar", "kafka-produce-4p", 0.125)
	s.record("magnetar", "pulsar-publish-5000", 0.2)
	got := s.table().text()
	want := []string{
		"load: the host's CPU steal, %  no-op pulsar  magnetar",
		"pulsar-publish-5000                     1.0      20.0",
		"kafka-produce-4p                                 12.5",
	}
	if strings.Join(want, "\n")+"\n" != got {
		t.Errorf("table:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
