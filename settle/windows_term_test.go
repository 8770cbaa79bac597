package settle

import (
	"errors"
	"testing"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// enrollHookIDs runs a hook once, inside the next Enroll, before it
// reads the term: what happens between a call's assignment from a window
// and its round.
type enrollHookIDs struct {
	*fakeIDs
	hook func()
}

func (f *enrollHookIDs) Enroll() (sequencer.Ticket, uint64) {
	if h := f.hook; h != nil {
		f.hook = nil
		h()
	}
	return f.fakeIDs.Enroll()
}

// A call assigned from a window committed in term 1, whose node then
// loses leadership and leads again in term 3 before the call's round,
// must not be answered: a leader of term 2 may have answered calls from
// windows above it. The call fails (Unavailable, retried), and the next
// call takes a window of term 3, above everything.
func TestWindowOfAnOlderTermIsNotAnswered(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	r.s.Close()
	ids := &enrollHookIDs{fakeIDs: r.ids}
	s, err := New(testConfig(), ids, r.log, r.fsm, r.s.logger)
	if err != nil {
		t.Fatal(err)
	}
	s.clock = r.clock.Now
	r.s = s
	if res, err := r.log.Settle(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "s", Kind: "default"}).Result(); err != nil || res.Err != nil {
		t.Fatalf("create: %v, %v", err, res.Err)
	}
	s.Lead()
	first, err := s.Alloc(ctx(t), "s", 1, fsm.Keyed{})
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	ids.hook = func() {
		r.ids.setTerm(3)
		r.log.setTerm(3)
		s.StepDown()
		s.Lead()
	}
	if got, err := s.Alloc(ctx(t), "s", 1, fsm.Keyed{}); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("a call assigned from a term-1 window and confirmed in term 3 = %d, %v; want ErrNotLeader", got, err)
	}
	seq, _ := r.fsm.Sequence("s")
	next, err := s.Alloc(ctx(t), "s", 1, fsm.Keyed{})
	if err != nil || next <= first || next < seq.Next {
		t.Fatalf("the call after re-leading = %d, %v; want above the first call's %d and the term-1 mark %d", next, err, first, seq.Next)
	}
}
