package settle

// Review findings (issue 24): each test states what the design claims and
// fails while the code does not keep it.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/fsm"
)

// countingIDs counts the loop's flushes that got as far as the frontier.
type countingIDs struct {
	*fakeIDs
	frontiers atomic.Int64
}

func (c *countingIDs) Frontier() (uint64, uint64) {
	c.frontiers.Add(1)
	return c.fakeIDs.Frontier()
}

// The sequencer stops serving before the Settler hears (a failed
// confirmation round: sequencer.stepDownFrom; the server calls
// Settler.StepDown only on Raft's leadership notification, and the lead
// loop takes Barrier, a round and a commit before the sequencer serves
// again). If an expiry falls due meanwhile, flush proposes it, finds
// term 0, and fail() re-arms it due now and wakes the loop: the loop spins
// on one core for as long as the sequencer does not serve (up to Raft's
// leader lease timeout, or an apply timeout per attempt of becomeReady).
func TestReviewNoBusyLoopWhileTheSequencerDoesNotServe(t *testing.T) {
	r := start(t, testConfig(), 2) // its own Settler never leads
	ids := &countingIDs{fakeIDs: r.ids}
	s, err := New(testConfig(), ids, r.log, r.fsm, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	s.clock = r.clock.Now
	defer s.Close()
	s.Lead()
	if _, err := s.Reserve(ctx(t), 1, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r.ids.setTerm(0) // the sequencer stepped down; the Settler still leads
	r.clock.Advance(150 * time.Millisecond)
	before := ids.frontiers.Load()
	s.wakeUp()
	time.Sleep(200 * time.Millisecond)
	if n := ids.frontiers.Load() - before; n > 20 {
		t.Fatalf("the settle loop flushed %d times in 200ms with one expiry due and the sequencer not serving: a busy loop", n)
	}
}

// The server calls Settler.Lead each time the sequencer serves again
// (becomeReady), also within one Raft leadership, after a failed
// confirmation round stopped the sequencer; the Settler is not stepped
// down in between. Lead then gives every open reservation its full TTL
// again. A reservation whose writer vanished is then held open for as
// long as rounds keep failing at least once a TTL (a flapping connection
// to the one follower a 3-node cluster with a node down has left): W
// never passes it. Design: "a writer that vanished holds W back by at
// most its TTL after a leader change"; here there is no leader change.
func TestReviewReLeadWithoutStepDownKeepsDeadlines(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 100*time.Millisecond)
	r.advance(90 * time.Millisecond)
	r.barrier()
	// The sequencer stepped down after a failed round and served again:
	// server.becomeReady calls Lead, with no StepDown (watchLeadership
	// saw no change of Raft leadership).
	r.s.Lead()
	r.advance(20 * time.Millisecond) // 110ms after a opened
	r.barrier()
	r.loopBarrier()
	r.barrier()
	if got := r.fate(a); got != fsm.FateExpired {
		t.Fatalf("reservation 110ms after it opened with a 100ms TTL, one leader throughout: %s, want expired", got)
	}
}

// The deadline heap drops a closed reservation's entry only when it
// reaches the head. Behind one reservation that stays open (a writer that
// vanished), every reservation opened later with a later deadline keeps
// its entry after it completes, until the vanished one expires: the
// leader's memory grows with rate x TTL, not with the open reservations
// MaxOpen bounds (10,000 Reserve+Complete a second behind a vanished
// writer of a 1 h TTL: 36 million entries of 48 bytes, about 1.7 GB).
func TestReviewDeadlineHeapStaysInProportionToTheOpenSet(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 100
	r := newRig(t, cfg)
	r.reserve(1, time.Hour) // its writer vanished
	for range 2_000 {
		a := r.reserve(1, time.Hour)
		r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted)
	}
	r.s.mu.Lock()
	heapLen, open := len(r.s.due), len(r.s.clocks)
	r.s.mu.Unlock()
	if heapLen > 2*open+1024 {
		t.Fatalf("the deadline heap holds %d entries with %d open reservations (MaxOpen %d)", heapLen, open, cfg.MaxOpen)
	}
}

// A Complete that reached the leader well within the TTL is refused as
// expired when commits are slow: the loop gathers it only once an entry
// slot is free, judges expiry at that moment, and puts the expiries
// before the calls in the entry, so the Expire wins the log order over a
// Complete that arrived first. Safety holds (the log decides), but a
// writer that completed in time is told "expired: do not publish", and
// W passes it as expired: on a slow disk, spurious expiries. Putting the
// gathered calls before the expiries judged after them (or judging expiry
// at the calls' arrival) keeps "within its TTL" meaning what the writer
// did.
func TestReviewCompleteReceivedBeforeTheDeadlineIsNotExpired(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 100*time.Millisecond)
	b := r.reserve(1, time.Hour)
	r.loopBarrier()
	r.watermark()
	r.log.Hold()
	// Fill the pipeline: one entry answering, two queued, one waiting.
	var fill []<-chan error
	for i := range 2 + inFlight {
		fill = append(fill, async(func() error {
			_, _, err := r.decide(fsm.DoExtend, b, time.Hour)
			return err
		}))
		eventually(t, "an Extend proposed", func() bool { return r.log.Held() == i+1 })
	}
	r.clock.Advance(50 * time.Millisecond) // half the TTL
	done := async(func() error { _, _, err := r.decide(fsm.DoComplete, a, 0); return err })
	eventually(t, "the Complete queued", func() bool { return len(r.s.queue) == 1 })
	r.clock.Advance(100 * time.Millisecond) // the commits were slow
	r.log.Release()
	for _, ch := range fill {
		if err := within(t, "Extend", ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := within(t, "Complete", done); err != nil {
		t.Fatalf("Complete received 50ms into a 100ms TTL: %v", err)
	}
}

// The same spin while the log refuses every entry at once: Raft lost
// leadership (ApplyLog answers ErrNotLeader at once) and the Settler has
// not been stepped down yet (watchLeadership first waits for the lead
// goroutine, which may sit in a Barrier or an apply for up to the apply
// timeout). Each failed entry re-arms its expiry due now and wakes the
// loop, which proposes it again, logging "settle entry failed" each time.
func TestReviewNoBusyLoopWhileEntriesFail(t *testing.T) {
	r := newRig(t, testConfig())
	r.reserve(1, 100*time.Millisecond)
	r.log.setFail(func(fsm.Command) bool { return true })
	before := len(r.log.Proposed())
	r.advance(150 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	if n := len(r.log.Proposed()) - before; n > 20 {
		t.Fatalf("%d entries proposed in 200ms for one expiry while the log refuses them: a busy loop", n)
	}
}
