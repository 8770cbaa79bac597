package server

import (
	"testing"
	"time"
)

// seqTestWait bounds every wait in these tests. It is a deadline, never a
// way to let something happen.
const seqTestWait = 10 * time.Second

// waitFor polls cond until it holds or the deadline passes. It polls state
// that the code under test changes; it never waits for time to pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	deadline := time.After(seqTestWait)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
