package settle

import "testing"

// A window's Alloc reaches span past the clock, from the mark or the
// clock, whichever is later; at least what the call needs, and at least a
// sixteenth of a span.
func TestReachTable(t *testing.T) {
	const span = 1600
	for _, tc := range []struct {
		need, mark, now, want uint64
	}{
		{0, 0, 1000, span},                // idle sequence: from the clock
		{0, 1000, 1000, span},             // mark at the clock
		{0, 1500, 1000, span - 500},       // mark ahead: up to now+span
		{5, 1500, 1000, span - 500},       // a small need fits
		{2000, 1500, 1000, 2000},          // a large need is met
		{0, 1000 + span, 1000, span / 16}, // mark a span ahead: a sixteenth
		{0, 1000 + 5*span, 1000, span / 16},
		{7, 1000 + 5*span, 1000, span / 16},
		{0, 0, 0, span},
	} {
		if got := reach(tc.need, tc.mark, tc.now, span); got != tc.want {
			t.Errorf("reach(need %d, mark %d, now %d, span %d) = %d, want %d", tc.need, tc.mark, tc.now, span, got, tc.want)
		}
	}
	if got := reach(0, 10, 10, 1); got != 1 {
		t.Errorf("reach with a span of 1 tick = %d, want 1", got)
	}
}

// Leader changes in quick succession (each new leader's first window
// starts at the mark, where the last one's limit left it) must not carry
// the mark away from the clock: with a change every tenth of a span, the
// mark stays within two spans of the clock, far inside the FSM's lead
// bound. A window sized from the mark, not the clock, would lead by
// another span at every change.
func TestReachBoundsTheLeadAcrossLeaderChanges(t *testing.T) {
	const span = 1600
	mark, now := uint64(0), uint64(1000)
	for change := 0; change < 1000; change++ {
		from := max(mark, now)
		mark = from + reach(1, mark, now, span)
		if lead := mark - now; lead > 2*span {
			t.Fatalf("after %d leader changes the mark leads the clock by %d ticks, more than two spans (%d)", change+1, lead, 2*span)
		}
		now += span / 10
	}
}
