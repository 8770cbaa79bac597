package eventually

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestHoldsOnceCondHolds(t *testing.T) {
	var polls atomic.Int64
	if !holds(10*time.Second, func() bool { return polls.Add(1) >= 5 }) {
		t.Fatal("holds gave up on a condition that came to hold")
	}
	if n := polls.Load(); n != 5 {
		t.Fatalf("cond polled %d times, want 5: it must stop once cond holds", n)
	}
}

func TestHoldsGivesUpAtTheBound(t *testing.T) {
	start := time.Now()
	if holds(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("holds reports a condition that never held")
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("holds gave up after %s, want about 50ms", d)
	}
}

// failRecorder records Fatalf instead of ending the test.
type failRecorder struct {
	testing.TB
	msg string
}

func (f *failRecorder) Helper() {}
func (f *failRecorder) Fatalf(format string, args ...any) {
	f.msg = format
}

func TestTrueFailsTheTest(t *testing.T) {
	f := &failRecorder{TB: t}
	True(f, time.Millisecond, "nothing", func() bool { return false })
	if f.msg == "" {
		t.Fatal("True did not fail the test for a condition that never held")
	}
	f.msg = ""
	True(f, time.Second, "something", func() bool { return true })
	if f.msg != "" {
		t.Fatal("True failed the test for a condition that held")
	}
}
