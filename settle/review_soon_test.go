package settle

import (
	"testing"

	"github.com/seed-e8569b35/ordo/fsm"
)

// proposedAllocsOf counts the Allocs of seq proposed since entry from.
func (r *rig) proposedAllocsOf(seq string, from int) int {
	n := 0
	for _, c := range r.log.Proposed()[from:] {
		for _, a := range c.Allocs {
			if a.Seq == seq {
				n++
			}
		}
	}
	return n
}

// A window marked "due soon" (Settler.soon) and then refilled on need
// (a call that did not fit: its window expired or was used up) is fresh:
// no call found it within three quarters of a window since that refill.
// Another sequence's refill must not take it along. Taken along, its
// Alloc starts at its fresh limit, and installWindow lifts its cursor
// there: the whole unused window is thrown away, and its next call's IDs
// lie most of a window ahead of the clock (1.7 s of a 2 s window here),
// where the next call should get the clock's tick.
func TestReviewSoonWindowRefilledOnNeedIsNotRefilledAgain(t *testing.T) {
	r := seqRig(t, []string{"a", "b"})
	l := *mustSeq(t, r, "b").Layout
	r.alloc("b", 1, "") // b's first window: to about 1.0
	// 0.3: b's call finds 0.7 of a window left, and marks it due soon.
	r.advance(DefaultWindow * 3 / 10)
	r.alloc("b", 1, "")
	// 1.1: a's first window (to about 2.1); b's has run out.
	r.advance(DefaultWindow * 8 / 10)
	r.alloc("a", 1, "")
	// 1.5: b's call does not fit; refilled on need, to about 2.5.
	r.advance(DefaultWindow * 4 / 10)
	r.alloc("b", 1, "")
	r.loopBarrier()
	r.barrier()
	// 1.65: a is due (0.45 left) and refilled ahead; b has 0.85 left
	// and nobody called it since its refill.
	r.advance(DefaultWindow * 15 / 100)
	before := len(r.log.Proposed())
	r.alloc("a", 1, "")
	r.loopBarrier()
	r.barrier()
	if n := r.proposedAllocsOf("b", before); n != 0 {
		t.Errorf("a's refill ahead of need took along b's fresh window (%d Allocs of b): b had 0.85 of a window left and no call since its refill", n)
	}
	now := l.TickAt(r.clock.Now())
	got := r.alloc("b", 1, "")
	if lead := got - now; got > now && lead > span/4 {
		t.Errorf("b's next call got tick %d, %d ticks (%.2f of a window) ahead of the clock's %d: its unused window was thrown away",
			got, lead, float64(lead)/float64(span), now)
	}
}

func mustSeq(t *testing.T, r *rig, name string) *fsm.Sequence {
	t.Helper()
	seq, ok := r.fsm.Sequence(name)
	if !ok {
		t.Fatalf("no sequence %q", name)
	}
	return &seq
}

// A refill asked ahead of need (a window due, or one taken along as due
// soon) extends the window: its Alloc starts at the window's limit when
// nothing else took the mark meanwhile, so the ticks left below the limit
// are still this window's. installWindow lifted the cursor to the
// Alloc's first all the same: every refill ahead threw away what was
// left (up to three quarters of a window for a window taken along), and
// the next call's IDs lay that far ahead of the clock.
func TestReviewRefillAheadKeepsWhatIsLeft(t *testing.T) {
	r := seqRig(t, []string{"a", "b"})
	l := *mustSeq(t, r, "b").Layout
	r.alloc("a", 1, "")
	r.alloc("b", 1, "")
	// 0.27: b's call finds 0.73 left and marks it due soon.
	r.advance(DefaultWindow * 27 / 100)
	r.alloc("b", 1, "")
	// 0.52: a is due (0.48 left); b, 0.48 left too, is taken along.
	r.advance(DefaultWindow / 4)
	r.alloc("a", 1, "")
	r.loopBarrier()
	r.barrier()
	now := l.TickAt(r.clock.Now())
	for _, name := range []string{"a", "b"} {
		got := r.alloc(name, 1, "")
		if lead := got - now; got > now && lead > span/16 {
			t.Errorf("%s's call after its refill ahead got tick %d, %d ticks (%.2f of a window) ahead of the clock's %d: what was left of its window was thrown away",
				name, got, lead, float64(lead)/float64(span), now)
		}
	}
}
