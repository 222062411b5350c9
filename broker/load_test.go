package broker

import (
	"os/exec"
	"testing"
	"time"
)

// TestProcessCPU: a child's CPU time read from /proc grows as it spins;
// a process that does not exist is an error.
func TestProcessCPU(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	start, err := ProcessCPU(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the condition (the CPU time /proc reports), bounded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, err := ProcessCPU(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if now-start >= 100*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a spinning child used %v of CPU in 30 s by /proc", now-start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := ProcessCPU(-1); err == nil {
		t.Error("ProcessCPU(-1): no error")
	}
}
