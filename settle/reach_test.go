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
		{0, 1000 + 2*span - 10, 1000, 10}, // near two spans: up to them
		{0, 1000 + 2*span, 1000, 1},       // at two spans: need alone
		{0, 1000 + 5*span, 1000, 1},
		{7, 1000 + 5*span, 1000, 7},
		{0, 0, 0, span},
	} {
		if got := reach(tc.need, tc.mark, tc.now, 0, span); got != tc.want {
			t.Errorf("reach(need %d, mark %d, now %d, span %d) = %d, want %d", tc.need, tc.mark, tc.now, span, got, tc.want)
		}
	}
	if got := reach(0, 10, 10, 0, 1); got != 1 {
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
		mark = from + reach(1, mark, now, now, span)
		if lead := mark - now; lead > 2*span {
			t.Fatalf("after %d leader changes the mark leads the clock by %d ticks, more than two spans (%d)", change+1, lead, 2*span)
		}
		now += span / 10
	}
}

// Reservations decided at the mark between a window's calls (each one
// lifts the cursor past the mark, so the next call needs a new window)
// must not carry the mark away, however many come, as long as they ask
// for fewer IDs than the clock makes (more than that, no sizing keeps up).
func TestReachBoundsTheLeadUnderReservations(t *testing.T) {
	const span, count = 1600, 3
	mark, now := uint64(0), uint64(1000)
	for i := 0; i < 100_000; i++ {
		mark = max(mark, now) + count                          // a reservation at the mark
		mark = max(mark, now) + reach(1, mark, now, now, span) // the next call's window
		if lead := mark - now; lead > 2*span+count+1 {
			t.Fatalf("after %d reservations the mark leads the clock by %d ticks, more than two spans (%d)", i+1, lead, 2*span)
		}
		now += 2 * (count + 1) // IDs asked for: half what the clock makes
	}
}

// The cap counts from the highest clock reading the sequence has seen
// when this leader's clock is behind it: the mark may lead this clock by
// more than two spans and the windows still serve many calls, never past
// two spans ahead of that reading.
func TestReachCapCountsFromTheHighestReading(t *testing.T) {
	const span = 1600
	for _, tc := range []struct {
		need, mark, now, seen, want uint64
	}{
		{0, 1000 + 3*span, 1000, 1000, 1},                  // seen is this clock: need alone
		{0, 1000 + 3*span, 1000, 1000 + 2*span, span / 16}, // a clock behind the last leader's
		{0, 1000 + 4*span - 10, 1000, 1000 + 2*span, 10},   // near two spans past seen
		{0, 1000 + 4*span, 1000, 1000 + 2*span, 1},         // at two spans past seen: need alone
		{0, 1000, 1000, 500, span},                         // seen behind the clock: the clock
	} {
		if got := reach(tc.need, tc.mark, tc.now, tc.seen, span); got != tc.want {
			t.Errorf("reach(need %d, mark %d, now %d, seen %d, span %d) = %d, want %d", tc.need, tc.mark, tc.now, tc.seen, span, got, tc.want)
		}
	}
}
