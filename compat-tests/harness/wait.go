package harness

import (
	"testing"
	"time"
)

// pollInterval is how often WaitFor checks its condition.
const pollInterval = 10 * time.Millisecond

// WaitFor polls cond until it returns true, failing tb with msg if it has
// not within timeout.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() bool, msg string) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, msg)
		}
		time.Sleep(pollInterval)
	}
}
