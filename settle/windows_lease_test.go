package settle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// roundLog is a sequencer.Log whose reservation always commits and whose
// rounds fail while deposed is set: the voters promised another leader.
type roundLog struct{ deposed atomic.Bool }

var errDeposed = errors.New("injected: the voters answer another leader")

func (*roundLog) Reserve(context.Context, uint64, uint64) (sequencer.Reservation, error) {
	return sequencer.Reservation{Prev: 1, HighWater: 1 << 40, Term: 1}, nil
}

func (l *roundLog) Confirm(context.Context, bool) (sequencer.Confirmation, error) {
	if l.deposed.Load() {
		return sequencer.Confirmation{}, errDeposed
	}
	return sequencer.Confirmation{Term: 1}, nil
}

// leaseIDs is the fake sequencer whose Vouch is a real sequencer's under
// the lease (one that holds no lease now): what an entry decided waits
// for a round.
type leaseIDs struct {
	*fakeIDs
	seq *sequencer.Sequencer
}

func (l leaseIDs) Vouch() sequencer.Ticket { return l.seq.Vouch() }

// Under the lease a newer leader can commit while an older one still
// answers from its lease (docs/design.md), and the older one answers a
// layout sequence's unkeyed calls from its window. So a keyed call of a
// layout sequence, which the log decides, must wait for this leader's
// round (Vouch) before it is answered, as a keyed call of the default
// sequence does: answered at once, a caller could then get lower IDs of
// the sequence from the older leader's window. A dense sequence is
// served from no window: its calls are answered at the commit, and
// failing them would be a gap.
func TestWindowKeyedCallWaitsForTheLeasesRound(t *testing.T) {
	r := seqRig(t, []string{"a"}, "d")
	log := &roundLog{}
	seq := sequencer.New(layout.MustPreset("default"), time.Second, time.Now, log, hclog.NewNullLogger(),
		sequencer.Lease{Duration: time.Hour, Clock: func() time.Duration { return time.Hour }})
	t.Cleanup(seq.Close)
	if err := seq.Lead(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	s, err := New(testConfig(), leaseIDs{fakeIDs: r.ids, seq: seq}, r.log, r.fsm, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	s.clock = r.clock.Now
	t.Cleanup(s.Close)
	s.Lead()

	log.deposed.Store(true)
	if _, err := s.Alloc(ctx(t), "d", 2, fsm.Keyed{}); err != nil {
		t.Fatalf("dense call, committed, its round refused: %v, want its values (no window serves a dense sequence)", err)
	}
	if err := seq.Lead(ctx(t), 0); err != nil { // the failed round stepped it down
		t.Fatal(err)
	}
	if first, err := s.Alloc(ctx(t), "a", 3, keyed("k")); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("keyed call of a, its round refused: ticks from %d, %v; want sequencer.ErrNotLeader", first, err)
	}

	// Confirmed again: the retry answers what the key holds.
	log.deposed.Store(false)
	if err := seq.Lead(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	first, err := s.Alloc(ctx(t), "a", 3, keyed("k"))
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if again, err := s.Alloc(ctx(t), "a", 3, keyed("k")); err != nil || again != first {
		t.Fatalf("second retry: %d, %v; want %d again", again, err, first)
	}
}
