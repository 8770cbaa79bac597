package sequencer

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/layout"
)

// ---- the sequencer's lease -------------------------------------------------

// fakeLeaseClock is a lease clock the test moves.
type fakeLeaseClock struct{ now atomic.Int64 }

func (c *fakeLeaseClock) read() time.Duration { return time.Duration(c.now.Load()) }
func (c *fakeLeaseClock) add(d time.Duration) { c.now.Add(int64(d)) }

func (h *seqHarness) leaseEpoch() uint64 {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.leaseEpoch
}

func (h *seqHarness) confirms() int {
	_, c := h.log.calls()
	return c
}

// mustLeaseHarness is a serving sequencer with a lease of an hour, on a
// lease clock that moves only when the test moves it: its renewals then
// never start on their own.
func mustLeaseHarness(t *testing.T) (*seqHarness, *fakeLeaseClock) {
	t.Helper()
	l := layout.MustPreset("default")
	clock := &fakeLeaseClock{}
	clock.now.Store(int64(time.Hour))
	h := &seqHarness{t: t, l: l, log: newSeqFakeLog(1), clock: &seqFakeClock{now: seqTestStart},
		window: testReserveWindow, w: l.TicksIn(testReserveWindow)}
	h.log.lease = time.Hour
	h.s = newSequencer(l, h.window, h.clock.Now, h.log, hclog.NewNullLogger(), 1, Lease{Duration: time.Hour, Clock: clock.read})
	t.Cleanup(h.s.Close)
	t.Cleanup(func() { close(h.log.unblock) })
	h.lead(0)
	return h, clock
}

func TestSequencerServesFromTheLease(t *testing.T) {
	h, clock := mustLeaseHarness(t)
	h.next(1) // the first request waits for a round, which asks for a lease
	if got := h.confirms(); got != 1 {
		t.Fatalf("%d rounds for the first request, want 1", got)
	}
	if left := h.s.LeaseLeft(); left != time.Hour-leaseMargin(time.Hour) {
		t.Fatalf("lease left %s, want the hour promised less the margin", left)
	}
	for range 100 {
		h.next(3)
	}
	if got := h.confirms(); got != 1 {
		t.Fatalf("%d rounds after 100 requests under a lease, want still 1", got)
	}
	// The lease counts from before the round, less the drift margin.
	clock.add(time.Hour - leaseMargin(time.Hour))
	if left := h.s.LeaseLeft(); left != 0 {
		t.Fatalf("lease left %s after it ran out", left)
	}
	h.next(1)
	if got := h.confirms(); got != 2 {
		t.Fatalf("%d rounds once the lease ran out, want 2", got)
	}
	h.log.set(func(f *seqFakeLog) {
		if f.leaseAsks != 2 {
			t.Errorf("%d rounds asked for a lease, want 2", f.leaseAsks)
		}
	})
}

func TestSequencerWithoutPromisesConfirmsEachRequest(t *testing.T) {
	h, _ := mustLeaseHarness(t)
	h.log.set(func(f *seqFakeLog) { f.lease = 0 }) // voters without --lease
	for i := range 5 {
		h.next(1)
		if got := h.confirms(); got != i+1 {
			t.Fatalf("request %d: %d rounds, want one each", i, got)
		}
	}
}

func TestSequencerEndLease(t *testing.T) {
	h, _ := mustLeaseHarness(t)
	h.next(1)
	h.s.EndLease()
	for i := range 3 {
		h.next(1)
		if got := h.confirms(); got != i+2 {
			t.Fatalf("request %d after EndLease: %d rounds, want one each", i, got)
		}
	}
	h.log.set(func(f *seqFakeLog) {
		if f.leaseAsks != 1 {
			t.Errorf("%d rounds asked for a lease, want only the one before EndLease", f.leaseAsks)
		}
	})
	// A new serving period asks again.
	h.s.StepDown()
	h.lead(h.log.highWater())
	h.next(1)
	h.next(1)
	if r := h.confirms(); r != 5 {
		t.Fatalf("%d rounds, want 5: one for the new period's first request, none for the second", r)
	}
}

// TestSequencerDroppedLeaseIgnoresEarlierRounds: a round asked before a
// membership change, or before the period ended, does not bring the lease
// back when it answers.
func TestSequencerDroppedLeaseIgnoresEarlierRounds(t *testing.T) {
	for _, tt := range []struct {
		name string
		drop func(h *seqHarness)
	}{
		{"DropLease", func(h *seqHarness) { h.s.DropLease() }},
		{"EndLease", func(h *seqHarness) { h.s.EndLease() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := mustLeaseHarness(t)
			gate, first := h.holdFirstRound()
			epoch := h.leaseEpoch()
			dropped := make(chan struct{})
			go func() {
				defer close(dropped)
				tt.drop(h)
			}()
			// EndLease returns only after the held round; it drops the
			// lease before it waits.
			eventually.True(t, seqTestWait, "the lease to be dropped", func() bool { return h.leaseEpoch() != epoch })
			release(t, gate)
			if r := await(t, first); r.err != nil {
				t.Fatal(r.err)
			}
			select {
			case <-dropped:
			case <-time.After(seqTestWait):
				t.Fatalf("%s still waits after the round ended", tt.name)
			}
			h.log.set(func(f *seqFakeLog) { f.confirm.gate = nil })
			h.next(1)
			if r := h.confirms(); r != 2 {
				t.Fatalf("%d rounds, want 2: the first round's promises must not count after %s", r, tt.name)
			}
		})
	}
}

func TestSequencerLostRoundEndsTheLease(t *testing.T) {
	h, clock := mustLeaseHarness(t)
	h.next(1)
	// A renewal round fails: this node no longer leads.
	clock.add(time.Hour / 2)
	h.log.set(func(f *seqFakeLog) { f.confirm.err = ErrNotLeader })
	h.s.renewLease()
	eventually.True(t, seqTestWait, "the sequencer to stop serving after a failed renewal", func() bool { return !h.s.Serving() })
	if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Next after a failed renewal: %v, want ErrNotLeader", err)
	}
}

func TestSequencerRenewsBeforeTheLeaseRunsOut(t *testing.T) {
	h, clock := mustLeaseHarness(t)
	h.next(1)
	h.s.renewLease() // plenty left: no round
	if r := h.confirms(); r != 1 {
		t.Fatalf("%d rounds with most of the lease left, want 1", r)
	}
	clock.add(time.Hour / 2)
	h.s.renewLease()
	eventually.True(t, seqTestWait, "a renewal round", func() bool { return h.confirms() == 2 })
	// Served from the renewed lease, past the first one's end.
	clock.add(time.Hour/2 - leaseMargin(time.Hour) + time.Minute)
	eventually.True(t, seqTestWait, "the renewed lease", func() bool {
		h.s.mu.Lock()
		defer h.s.mu.Unlock()
		return h.s.leaseHoldsLocked()
	})
	h.next(1)
	if r := h.confirms(); r != 2 {
		t.Fatalf("%d rounds, want 2: the request is served from the renewed lease", r)
	}
}

// TestSequencerEndLeaseWaitsForRoundsAskingForALease: a round decides to
// ask for a lease before Log.Confirm numbers it. A hand-over (EndLease,
// then the release of the voters' promises, numbered as rounds are) that
// comes in between must not leave that round numbered after the release:
// the voters, who refuse only rounds numbered before a release, would
// promise it, and the next leader would wait the promises out.
func TestSequencerEndLeaseWaitsForRoundsAskingForALease(t *testing.T) {
	h, _ := mustLeaseHarness(t)
	// The round has decided to ask, and waits before it is numbered.
	gate, first := h.holdFirstRound()
	handedOver := make(chan uint64, 1)
	go func() {
		h.s.EndLease()
		handedOver <- h.log.releaseLease()
	}()
	// A look, not a wait: EndLease that returns at once is numbered before
	// the round; one that waits for the round shows up only after it. A
	// slow look can only let the bug slip by, never fail a correct run.
	var released uint64
	select {
	case released = <-handedOver:
	case <-time.After(100 * time.Millisecond):
	}
	release(t, gate)
	if r := await(t, first); r.err != nil {
		t.Fatal(r.err)
	}
	if released == 0 {
		select {
		case released = <-handedOver:
		case <-time.After(seqTestWait):
			t.Fatal("EndLease still waits after the round ended")
		}
	}
	h.log.set(func(f *seqFakeLog) {
		for _, n := range f.leaseRounds {
			if n > released {
				t.Errorf("round %d asked for a lease after the release (%d) of a hand-over: the next leader would wait its promises out", n, released)
			}
		}
	})
}

// Vouch: under the lease, what a commit decided waits for a round unless
// the lease holds (a newer leader may commit while an older one still
// answers from its lease); without the lease a commit alone is enough.
func TestVouchAsksForARoundOnlyUnderALeaseThatDoesNotHold(t *testing.T) {
	h, clock := mustLeaseHarness(t)
	v := h.s.Vouch()
	select {
	case <-v.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Vouch's round did not end")
	}
	if err := v.Err(); err != nil || h.confirms() != 1 {
		t.Fatalf("Vouch with no lease held: %v after %d rounds, want a round", err, h.confirms())
	}
	if v := h.s.Vouch(); v.Done() != closedChan || h.confirms() != 1 {
		t.Fatalf("Vouch while the lease holds asked for a round (%d rounds)", h.confirms())
	}
	clock.add(time.Hour)
	if v := h.s.Vouch(); v.Done() == closedChan {
		t.Fatal("Vouch once the lease ran out asks for no round")
	}

	plain := newDefaultHarness(t, testReserveWindow)
	plain.lead(0)
	if v := plain.s.Vouch(); v.Done() != closedChan {
		t.Fatal("Vouch without the lease asks for a round: a commit in the term is enough")
	}
}
