package history

import (
	"strings"
	"testing"
	"time"
)

// denseOK is an OK call over [start, end] ms holding ids.
func denseOK(start, end int, ids ...uint64) Op {
	return Op{Start: time.Duration(start) * time.Millisecond, End: time.Duration(end) * time.Millisecond, Outcome: OK, IDs: ids, Asked: len(ids)}
}

// denseLost is a call over [start, end] ms asking for n that ended as o.
func denseLost(start, end int, o Outcome, n int) Op {
	return Op{Start: time.Duration(start) * time.Millisecond, End: time.Duration(end) * time.Millisecond, Outcome: o, Asked: n, Err: "lost"}
}

func TestCheckDense(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start uint64
		ops   []Op
		// gaps, bad gaps, unexplained and below start expected.
		missing, badGaps, unexplained uint64
		below                         int
	}{
		{name: "consecutive", ops: []Op{denseOK(0, 1, 1, 2), denseOK(2, 3, 3), denseOK(2, 4, 4, 5, 6)}},
		{name: "from a start", start: 10, ops: []Op{denseOK(0, 1, 10, 11), denseOK(2, 3, 12)}},
		{name: "nothing answered", ops: []Op{denseLost(0, 1, Unknown, 3)}},
		{
			// The cluster skipped 3 and 4: nobody asked for them.
			name: "gap the cluster made", ops: []Op{denseOK(0, 1, 1, 2), denseOK(2, 3, 5)},
			missing: 2, badGaps: 1, unexplained: 2,
		},
		{
			name: "gap at the start", ops: []Op{denseOK(0, 1, 2, 3)},
			missing: 1, badGaps: 1, unexplained: 1,
		},
		{
			// A timed-out call of 2 took 3 and 4.
			name: "gap of a lost call", ops: []Op{denseOK(0, 1, 1, 2), denseLost(1, 5, Unknown, 2), denseOK(2, 3, 5)},
			missing: 2,
		},
		{
			name: "gap of two lost calls", ops: []Op{denseOK(0, 1, 1), denseLost(0, 9, Unknown, 2), denseLost(0, 9, Unknown, 3), denseOK(5, 6, 7), denseOK(7, 8, 8)},
			missing: 5,
		},
		{
			// Two calls of 2 cannot leave a gap of 3: each took 2 or none.
			name: "gap no lost calls fill exactly", ops: []Op{denseOK(0, 1, 1), denseLost(0, 9, Unknown, 2), denseLost(0, 9, Unknown, 2), denseOK(5, 6, 5)},
			missing: 3, badGaps: 1,
		},
		{
			// A refused call took nothing.
			name: "gap of a refused call", ops: []Op{denseOK(0, 1, 1), denseLost(1, 2, Failed, 1), denseOK(3, 4, 3)},
			missing: 1, badGaps: 1, unexplained: 1,
		},
		{
			// The lost call began after the call holding 5 ended: it came
			// after 5, so it cannot have taken 3 and 4.
			name: "lost call after the gap", ops: []Op{denseOK(0, 1, 1, 2), denseOK(2, 3, 5), denseLost(4, 9, Unknown, 2)},
			missing: 2, badGaps: 1,
		},
		{
			// The lost call ended before the call holding 2 began.
			name: "lost call before the gap", ops: []Op{denseLost(0, 1, Unknown, 2), denseOK(2, 3, 1, 2), denseOK(4, 5, 5)},
			missing: 2, badGaps: 1,
		},
		{
			// One lost call of 2 explains one gap of 2, not two.
			name: "one lost call for two gaps", ops: []Op{denseOK(0, 1, 1), denseLost(0, 9, Unknown, 2), denseOK(2, 3, 4), denseOK(4, 5, 7)},
			missing: 4, unexplained: 2,
		},
		{
			// A lost call of unknown count may have taken any number.
			name: "lost call of unknown count", ops: []Op{denseOK(0, 1, 1), denseLost(0, 9, Unknown, 0), denseOK(2, 3, 9)},
			missing: 7,
		},
		{
			name: "below the start", start: 5, ops: []Op{denseOK(0, 1, 4, 5)},
			below: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckDense(tc.ops, tc.start)
			if rep.Missing != tc.missing || uint64(rep.BadGaps) != tc.badGaps || rep.Unexplained != tc.unexplained || rep.BelowStart != tc.below {
				t.Fatalf("missing=%d bad-gaps=%d unexplained=%d below=%d, want %d %d %d %d\n%s",
					rep.Missing, rep.BadGaps, rep.Unexplained, rep.BelowStart, tc.missing, tc.badGaps, tc.unexplained, tc.below, rep)
			}
			wantOK := tc.badGaps == 0 && tc.unexplained == 0 && tc.below == 0
			if rep.OK() != wantOK || (!wantOK && len(rep.Examples) == 0) {
				t.Fatalf("OK()=%v, want %v\n%s", rep.OK(), wantOK, rep)
			}
			if !wantOK && !strings.Contains(rep.String(), "dense FAIL") {
				t.Fatalf("report does not say FAIL: %s", rep)
			}
		})
	}
}

// TestCheckDenseRecorded checks a history recorded through a Caller: the
// count asked for reaches the op, so a lost call explains its gap.
func TestCheckDenseRecorded(t *testing.T) {
	rec := NewRecorder()
	c := Caller{Rec: rec, Client: 1}
	c.CallN(2, func() ([]uint64, []string, error) { return []uint64{1, 2}, nil, nil })
	c.CallN(3, func() ([]uint64, []string, error) { return nil, nil, errLost })
	c.CallN(1, func() ([]uint64, []string, error) { return []uint64{6}, nil, nil })
	ops := rec.Ops()
	if ops[1].Asked != 3 {
		t.Fatalf("asked %d, want 3", ops[1].Asked)
	}
	if rep := CheckDense(ops, 1); !rep.OK() || rep.Missing != 3 {
		t.Fatalf("%s", rep)
	}
}

var errLost = lostError{}

type lostError struct{}

func (lostError) Error() string { return "deadline exceeded" }
