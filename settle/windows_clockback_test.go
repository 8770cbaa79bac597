package settle

import (
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
)

// A new leader whose clock is behind the last one's by more than a window
// (here 3 s, with 2 s windows) finds the mark leading its clock by more
// than two windows: the last leader's window reached a window past its
// own clock. The mark is still far inside the FSM's lead bound, which
// counts from the highest clock reading the sequence has seen
// (Sequence.ClockHigh), not from this leader's clock. Windows capped at
// two spans past this leader's clock are one call's need, so every call
// of the sequence waits for a commit of its own, one after another, until
// this leader's clock catches up. Calls must keep sharing windows.
func TestWindowsServeManyCallsPerCommitUnderALeaderWhoseClockIsBehind(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	if res, err := r.log.Settle(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "s", Kind: "default"}).Result(); err != nil || res.Err != nil {
		t.Fatalf("create: %v, %v", err, res.Err)
	}
	// The last leader's clock, 3 s ahead of the next one's.
	r.clock.Advance(3 * time.Second)
	r.s.Lead()
	if _, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{}); err != nil {
		t.Fatalf("call of the first leader: %v", err)
	}
	// The next leader, whose clock is 3 s behind.
	r.clock.Advance(-3 * time.Second)
	r.ids.setTerm(2)
	r.log.setTerm(2)
	r.s.StepDown()
	r.s.Lead()
	before := len(r.log.Proposed())
	var last uint64
	for i := range 200 {
		got, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{})
		if err != nil {
			t.Fatalf("call %d of the leader whose clock is behind: %v", i, err)
		}
		if got <= last {
			t.Fatalf("call %d got %d, not above %d", i, got, last)
		}
		last = got
		r.clock.Advance(time.Millisecond)
	}
	if commits := len(r.log.Proposed()) - before; commits > 10 {
		t.Fatalf("200 calls of one ID (0.2 s) cost %d commits: each window held one call's need", commits)
	}
}
