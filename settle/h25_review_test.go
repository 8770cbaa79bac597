package settle

import (
	"context"
	"errors"
	"testing"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// flipIDs is a sequencer that assigns a claim's ticks in term 1 and then
// loses and regains leadership (term 3) before the settle loop reads the
// frontier and proposes: the entry carries ticks of term 1 and commits in
// term 3. (In a real node: a deposed leader that assigned from its old
// reservation, then is elected again while another call of the batch
// waits in AssignTracked for a reservation.)
type flipIDs struct {
	*fakeIDs
	flipped bool
}

func (f *flipIDs) AssignTracked(ctx context.Context, n uint64) (sequencer.Block, uint64, error) {
	b, term, err := f.fakeIDs.AssignTracked(ctx, n)
	if !f.flipped {
		f.flipped = true
		f.fakeIDs.setTerm(3)
	}
	return b, term, err
}

// Settler refuses a keyed call whose ticks were assigned in another term
// than its entry committed in (nothing proves no newer leader handed out
// higher IDs meanwhile). But the FSM kept those ticks under the key, and
// the retry gets them as a replay, with no error: the refused answer is
// handed out after all, unvouched.
func TestH25ReviewRefusedClaimIsNotReplayed(t *testing.T) {
	r := start(t, testConfig(), fsm.SequencesVersion)
	ids := &flipIDs{fakeIDs: r.ids}
	s, err := New(testConfig(), ids, r.log, r.fsm, r.s.logger)
	if err != nil {
		t.Fatal(err)
	}
	s.clock = r.clock.Now
	r.s = s
	r.log.setTerm(3)
	s.Lead()
	key := fsm.Keyed{Caller: "CN=writer", Key: "k"}
	first, err := s.Claim(ctx(t), key, 5)
	if !errors.Is(err, fsm.ErrClaimTerm) {
		t.Fatalf("first attempt: %d, %v; want fsm.ErrClaimTerm (assigned in term 1, committed in term 3)", first, err)
	}
	again, err := s.Claim(ctx(t), key, 5)
	if err == nil && again == firstTick {
		t.Fatalf("retry got ticks %d with no error: the ticks refused to the first attempt (assigned in term 1, never vouched) are answered by the replay", again)
	}
}
