package fsm

// Review findings (issue 24): each test states what the design claims and
// fails while the code does not keep it.

import (
	"errors"
	"testing"
)

// Tracking.order keeps every reservation opened since the oldest one
// still open: closed ones are dropped only from its head. One reservation
// kept open (a writer that Extends a long write, or one that vanished with
// a long TTL) makes every node's FSM keep 8 bytes for every reservation
// opened after it, for as long as it stays open, whatever MaxOpen says:
// at 20,000 reservations a second under a 1 h TTL that is 72 million
// entries (576 MB) on every node. The order slice should stay in
// proportion to the open set.
func TestReviewOrderStaysInProportionToTheOpenSet(t *testing.T) {
	const n = 20_000
	f := trackedFSM(t, 1<<40)
	// One long-lived reservation at the head.
	settleOK(t, f, 2, Track{Do: DoOpen, First: 1, Count: 1, TTLMs: 3_600_000})
	for i := uint64(0); i < n; i++ {
		first := 2 + i
		settleOK(t, f, first+1,
			Track{Do: DoOpen, First: first, Count: 1, TTLMs: 1000},
			Track{Do: DoComplete, First: first, Count: 1})
	}
	f.mu.RLock()
	open, order := len(f.state.Tracking.Open), len(f.state.Tracking.order)
	f.mu.RUnlock()
	if open != 1 {
		t.Fatalf("%d open, want 1", open)
	}
	if order > 2*open+1024 {
		t.Fatalf("order holds %d keys for %d open reservation(s): it grows with every reservation opened behind the oldest open one", order, open)
	}
}

// A handle for a part of an open reservation, or one that covers a
// completed reservation and runs into an expired one, answers "completed":
// fate() falls through to "below the frontier" because the handle's first
// tick is neither an open reservation's first tick nor inside a dead span.
// The design table says such a handle is "not found"; the Count field is
// there so that "a handle for a part of a reservation is not taken for the
// whole". A caller told "completed" publishes (client.Complete's doc).
func TestReviewPartialHandlesAreNotCompleted(t *testing.T) {
	f := trackedFSM(t, 100)
	settleOK(t, f, 40,
		Track{Do: DoOpen, First: 10, Count: 5, TTLMs: 1}, // stays open
		Track{Do: DoOpen, First: 20, Count: 2, TTLMs: 1}, // completed
		Track{Do: DoOpen, First: 22, Count: 2, TTLMs: 1}) // expired
	settleOK(t, f, 40, Track{Do: DoComplete, First: 20, Count: 2}, Track{Do: DoExpire, First: 22, Count: 2})
	for _, tr := range []Track{
		{Do: DoComplete, First: 11, Count: 2}, // inside the open reservation
		{Do: DoComplete, First: 20, Count: 4}, // the completed one and the expired one
	} {
		o := settleOK(t, f, 40, tr).Outcomes[0]
		if o.Err == nil && o.Fate == FateCompleted {
			t.Errorf("%+v: answered %s; want not found (or the expired fate), never completed", tr, o.Fate)
		}
	}
	if o := f.Tracked().Open[10]; o.Count != 5 {
		t.Fatalf("the open reservation is gone: %+v", f.Tracked().Open)
	}
}

// Dead spans are kept for good and merge only with a neighbour of the
// same fate; a completed reservation between two abandoned ones keeps
// them apart. So the replicated state, every snapshot and every node's
// memory grow with every abandon or expiry ever made, without bound: at
// 100 abandons a second (1% of 10,000 reservations a second), 8.6 million
// spans a day, about 350 MB of snapshot a day. Old dead spans far below W
// need a horizon (answered as "too old to tell", never "completed").
func TestReviewDeadSpansStayBounded(t *testing.T) {
	const n = 10_000
	defer func(was int) { maxDeadSpans = was }(maxDeadSpans)
	maxDeadSpans = 1000
	f := trackedFSM(t, 1<<40)
	for i := uint64(0); i < n; i++ {
		first := 1 + 2*i
		settleOK(t, f, first+2,
			Track{Do: DoOpen, First: first, Count: 1, TTLMs: 1000},
			Track{Do: DoOpen, First: first + 1, Count: 1, TTLMs: 1000},
			Track{Do: DoComplete, First: first, Count: 1},
			Track{Do: DoAbandon, First: first + 1, Count: 1})
	}
	tk := f.Tracked()
	if len(tk.Open) != 0 || tk.Settled != 1+2*n {
		t.Fatalf("%d open, W %d", len(tk.Open), tk.Settled)
	}
	if d := len(tk.Dead); d > 1000 {
		t.Fatalf("%d dead spans kept with nothing open and W at %d: the state grows with every abandon ever made", d, tk.Settled)
	}
	// Below what was dropped, a fate is unknown, never completed: the
	// first reservation was completed, the second abandoned.
	for _, first := range []uint64{1, 2} {
		o := settleOK(t, f, 1+2*n, Track{Do: DoComplete, First: first, Count: 1}).Outcomes[0]
		if !errors.Is(o.Err, ErrForgotten) {
			t.Errorf("complete of a reservation below the dropped spans: %+v, want ErrForgotten", o)
		}
	}
	if o := settleOK(t, f, 1+2*n, Track{Do: DoComplete, First: 2*n - 1, Count: 1}).Outcomes[0]; o.Fate != FateCompleted {
		t.Errorf("complete of a recent completed reservation: %+v, want completed", o)
	}
	if o := settleOK(t, f, 1+2*n, Track{Do: DoComplete, First: 2 * n, Count: 1}).Outcomes[0]; o.Fate != FateAbandoned {
		t.Errorf("complete of a recent abandoned reservation: %+v, want abandoned", o)
	}
}
