package settle

import (
	"errors"
	"fmt"
	"testing"
	"time"

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

// A leader whose clock is behind the mark (its clock stepped back, or an
// earlier leader's ran ahead) must not ask for a window at every call:
// its windows are used up by calls alone, and asking ahead of need would
// carry the mark away to the lead bound, where every call is refused.
func TestWindowsDoNotRunAwayBehindTheMark(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	if res, err := r.log.Settle(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "s", Kind: "default"}).Result(); err != nil || res.Err != nil {
		t.Fatalf("create: %v, %v", err, res.Err)
	}
	r.s.Lead()
	if _, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	// The clock steps back, and the node leads again in a new term: its
	// first window starts at the mark, an hour ahead of its clock.
	r.clock.Advance(-time.Hour)
	r.ids.setTerm(2)
	r.log.setTerm(2)
	r.s.StepDown()
	r.s.Lead()
	before, _ := r.fsm.Sequence("s")
	for i := range 500 {
		if _, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{}); err != nil {
			t.Fatalf("call %d with the clock an hour back: %v", i, err)
		}
	}
	r.barrier()
	after, _ := r.fsm.Sequence("s")
	span := before.Layout.TicksIn(testConfig().Window)
	if grew := after.Next - before.Next; grew > span {
		t.Fatalf("500 calls of one ID moved the mark by %d ticks, more than a window (%d): windows were asked for ahead of need", grew, span)
	}
}

// Keyed and unkeyed calls of one layout sequence, mixed at a steady pace,
// keep its mark near the clock: a keyed call claims ticks of the window,
// so it neither ends the window nor moves the mark. (Decided at the mark,
// each keyed call ended the window and each new window started a whole
// window past the clock: the mark ran to the lead bound within a few
// seconds, and then every call failed OutOfRange.)
func TestKeyedCallsKeepTheMarkNearTheClock(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	if res, err := r.log.Settle(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "s", Kind: "default"}).Result(); err != nil || res.Err != nil {
		t.Fatalf("create: %v, %v", err, res.Err)
	}
	r.s.Lead()
	for i := range 200 {
		if _, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{Caller: "c", Key: fmt.Sprint("k", i)}); err != nil {
			t.Fatalf("keyed call %d: %v", i, err)
		}
		if _, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{}); err != nil {
			t.Fatalf("unkeyed call %d: %v", i, err)
		}
		r.clock.Advance(100 * time.Millisecond)
	}
	seq, _ := r.fsm.Sequence("s")
	now := seq.Layout.TickAt(r.clock.Now())
	if lead := seq.Layout.TicksIn(2 * testConfig().Window); seq.Next > now+lead {
		t.Fatalf("after 20 s of mixed calls the mark leads the clock by %d ticks, more than two windows (%d)", seq.Next-now, lead)
	}
}

// Reservations of a named layout sequence (decided at its mark) mixed
// with its plain calls at a steady pace keep the mark within the lead
// bound: no call is refused, however long it goes on.
func TestReservationsAndCallsKeepTheMarkNearTheClock(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	if res, err := r.log.Settle(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "s", Kind: "default"}).Result(); err != nil || res.Err != nil {
		t.Fatalf("create: %v, %v", err, res.Err)
	}
	r.s.Lead()
	for i := range 400 {
		if _, err := r.s.ReserveIn(ctx(t), "s", fsm.Keyed{}, 1, time.Hour); err != nil {
			t.Fatalf("reservation %d: %v", i, err)
		}
		if _, err := r.s.Alloc(ctx(t), "s", 1, fsm.Keyed{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		r.clock.Advance(50 * time.Millisecond)
	}
	seq, _ := r.fsm.Sequence("s")
	now := seq.Layout.TickAt(r.clock.Now())
	if lead := seq.Layout.TicksIn(2*testConfig().Window + time.Millisecond); seq.Next > now+lead {
		t.Fatalf("after 20 s of reservations and calls the mark leads the clock by %d ticks, more than two windows (%d)", seq.Next-now, lead)
	}
}

// Current holds from Lead in the sequencer's term until StepDown or a
// new term: only then does the state answer for the cluster.
func TestCurrentFollowsLeadAndTerm(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	if r.s.Current() {
		t.Fatal("current before Lead")
	}
	r.s.Lead()
	if !r.s.Current() {
		t.Fatal("not current after Lead")
	}
	r.ids.setTerm(2)
	if r.s.Current() {
		t.Fatal("current in a term Lead did not run in")
	}
	r.s.Lead()
	if !r.s.Current() {
		t.Fatal("not current after Lead in the new term")
	}
	r.s.StepDown()
	if r.s.Current() {
		t.Fatal("current after StepDown")
	}
}
