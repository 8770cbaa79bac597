// Package eventually waits, in tests, for a condition that the code under
// test makes true in its own time: a goroutine that has to catch up, a
// log that has to be truncated, a connection that has to close.
//
// A wait is always bounded: when the condition does not hold within the
// bound, the test fails and says what it waited for. The bound is a
// deadline for a bug, never a way to let something happen; poll state that
// the code under test changes, never the passing of time.
package eventually

import (
	"testing"
	"time"
)

// The first poll follows at once; then the pause between polls doubles
// from firstPause up to maxPause, so a condition that holds soon is seen
// soon and one that takes long does not spin.
const (
	firstPause = 100 * time.Microsecond
	maxPause   = 10 * time.Millisecond
)

// True polls cond until it holds. If it does not within the bound, True
// fails t with "timed out waiting for <what>" (t.Fatalf, so call it from
// the test's goroutine).
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !holds(within, cond) {
		t.Fatalf("timed out waiting for %s (%s)", what, within)
	}
}

// holds polls cond until it holds (true) or within passes (false).
func holds(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for pause := firstPause; !cond(); pause = min(2*pause, maxPause) {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		time.Sleep(min(pause, left))
	}
	return true
}
