package main

import (
	"bytes"
	"os"
	"strconv"
)

// hostCPU is the machine's CPU time so far, in clock ticks, as Linux's
// /proc/stat counts it on its "cpu" line: all of it (user, nice, system,
// idle, iowait, irq, softirq and steal; guest time is inside user and
// nice) and the part stolen, the time a virtual CPU wanted to run while
// the hypervisor ran something else. On a shared virtual machine steal is
// the one limit of the machine that changes from minute to minute, and it
// lands on whichever load runs then: perf all gives it for each load.
type hostCPU struct {
	total, steal uint64
}

// procStat is the file readHostCPU reads (a variable for tests).
var procStat = "/proc/stat"

// readHostCPU reads the machine's CPU time; false where the system does
// not say (no /proc/stat, or a kernel too old to count steal).
func readHostCPU() (hostCPU, bool) {
	b, err := os.ReadFile(procStat)
	if err != nil {
		return hostCPU{}, false
	}
	return parseHostCPU(b)
}

// parseHostCPU reads the "cpu" line of /proc/stat's contents.
func parseHostCPU(stat []byte) (hostCPU, bool) {
	for line := range bytes.Lines(stat) {
		fields := bytes.Fields(line)
		if len(fields) == 0 || string(fields[0]) != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]
		if len(fields) < 9 {
			return hostCPU{}, false
		}
		var h hostCPU
		for i, f := range fields[1:9] {
			v, err := strconv.ParseUint(string(f), 10, 64)
			if err != nil {
				return hostCPU{}, false
			}
			h.total += v
			if i == 7 {
				h.steal = v
			}
		}
		return h, true
	}
	return hostCPU{}, false
}

// stealSince is the fraction of the machine's CPU time stolen between
// earlier and h; false if no time passed (or the counters went back).
func (h hostCPU) stealSince(earlier hostCPU) (float64, bool) {
	if h.total <= earlier.total || h.steal < earlier.steal {
		return 0, false
	}
	return float64(h.steal-earlier.steal) / float64(h.total-earlier.total), true
}
