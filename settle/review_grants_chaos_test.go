package settle

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// Grants of several calls at once (the same sequence twice, cold and warm
// windows, calls that fit and calls that need a refill) from concurrent
// callers, while the node loses leadership and wins it back (another
// leader serving calls in the term between), entries are held (so calls
// wait for refills across a term change, between Grants' take and retry
// passes) or fail, and the clock moves. Every call is recorded in its
// sequence's history: unique IDs, and a call that began after another
// ended has higher ones. The fake sequencer stops serving (term 0) when
// the Settler steps down, as the real one does before another leader can
// answer, so a round enrolled meanwhile fails.
func TestReviewGrantsAcrossTermChangesKeepOrder(t *testing.T) {
	seqs := []string{"s0", "s1", "s2", "s3"}
	r := seqRig(t, seqs)
	r.s.Close()
	ids := &partitionIDs{fakeIDs: r.ids}
	s, err := New(testConfig(), ids, r.log, r.fsm, r.s.logger)
	if err != nil {
		t.Fatal(err)
	}
	s.clock = r.clock.Now
	r.s = s
	s.Lead()
	recs := map[string]*history.Recorder{}
	for _, s := range seqs {
		recs[s] = history.NewRecorder()
	}
	var failing atomic.Int32
	r.log.setFail(func(c fsm.Command) bool {
		if len(c.Allocs) == 0 {
			return false
		}
		for {
			n := failing.Load()
			if n <= 0 {
				return false
			}
			if failing.CompareAndSwap(n, n-1) {
				return true
			}
		}
	})
	const workers, runFor = 6, 400 * time.Millisecond
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 77))
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + rng.IntN(5)
				asks := make([]Ask, n)
				pend := make([]history.Pending, n)
				for i := range asks {
					name := seqs[rng.IntN(len(seqs))]
					if i > 0 && rng.IntN(3) == 0 {
						name = asks[i-1].Name // the same sequence twice
					}
					count := 1 + uint64(rng.IntN(40))
					if rng.IntN(16) == 0 {
						count = 1 + uint64(rng.IntN(int(span/3))) // needs a refill
					}
					def, _ := r.fsm.Sequence(name)
					asks[i] = Ask{Name: name, Seq: &def, Count: count}
					pend[i] = recs[name].BeginN(w*10+i, int(count))
				}
				c, cancel := context.WithTimeout(context.Background(), waitLimit)
				gs := r.s.Grants(c, asks)
				for i, g := range gs {
					select {
					case <-g.Done():
					case <-time.After(waitLimit):
						cancel()
						t.Errorf("grant of %s: nothing after %s", asks[i].Name, waitLimit)
						return
					}
					first, err := g.Result()
					if err != nil {
						pend[i].Unknown(err)
						failed.Add(1)
						continue
					}
					ids := make([]uint64, asks[i].Count)
					for k := range ids {
						ids[k] = first + uint64(k)
					}
					pend[i].OK(ids)
					ok.Add(1)
				}
				cancel()
			}
		}()
	}
	// The chaos, until the workers are done.
	chaos := make(chan struct{})
	var releads, others int
	go func() {
		defer close(chaos)
		rng := rand.New(rand.NewPCG(99, 1))
		term := uint64(1)
		for {
			select {
			case <-stop:
				r.log.Release()
				return
			default:
			}
			switch n := rng.IntN(12); {
			case n >= 10:
				// A partition: this node still believes it leads (its
				// windows serve, its refills are proposed and held), but
				// its rounds fail; another leader answers above its
				// windows; then this node leads again, in a later term,
				// while calls that took ticks from its old windows wait
				// for refills.
				r.log.Hold()
				ids.partitioned.Store(true)
				term++
				r.log.setTerm(term)
				name := seqs[rng.IntN(len(seqs))]
				rec := recs[name].BeginN(-1-others, 50)
				if otherLeaderAllocs(r, name, rec) {
					others++
				}
				time.Sleep(time.Duration(1+rng.IntN(2)) * time.Millisecond)
				term++
				r.relead(term)
				ids.partitioned.Store(false)
				r.log.Release()
				releads++
			case n < 3:
				r.advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			case n < 5:
				failing.Add(1)
			case n < 8:
				// Hold the log, so refills wait, then change terms under
				// them.
				r.log.Hold()
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				r.s.StepDown()
				r.ids.setTerm(0)
				if rng.IntN(2) == 0 {
					term++
					r.log.setTerm(term)
					name := seqs[rng.IntN(len(seqs))]
					rec := recs[name].BeginN(-1-others, 50)
					r.log.Release() // the held entries commit in the old term first
					if otherLeaderAllocs(r, name, rec) {
						others++
					}
				}
				term++
				r.relead(term)
				r.log.Release()
				releads++
			default:
				time.Sleep(time.Millisecond)
			}
		}
	}()
	time.Sleep(runFor)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	within(t, "the workers to stop", done)
	within(t, "the chaos to stop", chaos)
	t.Logf("%d calls answered, %d failed; %d re-leads, %d with another leader between", ok.Load(), failed.Load(), releads, others)
	if ok.Load() == 0 || failed.Load() == 0 || releads == 0 {
		t.Fatalf("the run did too little to check")
	}
	for _, s := range seqs {
		if rep := history.Check(recs[s].Ops()); !rep.OK() {
			t.Errorf("sequence %s: %s", s, rep)
		}
	}
}

// partitionIDs is the fake sequencer whose rounds fail while partitioned:
// the node still believes it leads its term, and another leader may
// answer.
type partitionIDs struct {
	*fakeIDs
	partitioned atomic.Bool
}

func (p *partitionIDs) Enroll() (sequencer.Ticket, uint64) {
	t, term := p.fakeIDs.Enroll()
	if p.partitioned.Load() {
		return t, 0 // the round fails: no term confirmed
	}
	return t, term
}

// A Grants whose caller gives up while its calls wait for refills (held
// entries) returns at once: the calls that fit are served, those waiting
// fail with the context's error; the refills, which hold no caller's
// context, still commit and serve the next calls.
func TestReviewGrantsCancelledWhileWaitingForRefills(t *testing.T) {
	r := seqRig(t, []string{"a", "b", "c"})
	r.alloc("a", 1, "")
	r.log.Hold()
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan []Grant, 1)
	go func() {
		asks := []Ask{{Name: "a", Count: 1}, {Name: "b", Count: 1}, {Name: "a", Count: span * 2}, {Name: "c", Count: 1}}
		for i := range asks {
			seq, _ := r.fsm.Sequence(asks[i].Name)
			asks[i].Seq = &seq
		}
		done <- r.s.Grants(c, asks)
	}()
	eventually(t, "the refills of b, c and a proposed", func() bool { return r.log.Held() >= 1 })
	cancel()
	gs := within(t, "Grants once its caller gave up", done)
	for i, g := range gs {
		within(t, "a grant", g.Done())
		first, err := g.Result()
		switch {
		case i == 0 && err != nil:
			t.Errorf("the call that fit a's window: %v", err)
		case i > 0 && !errors.Is(err, context.Canceled):
			t.Errorf("call %d, waiting for a refill: %d, %v; want context.Canceled", i, first, err)
		}
	}
	r.log.Release()
	r.loopBarrier()
	r.barrier()
	entries := r.allocEntries()
	r.alloc("b", 1, "")
	r.alloc("c", 1, "")
	if n := r.allocEntries(); n != entries {
		t.Errorf("the calls after the refills committed proposed %d more alloc entries, want none: the refills serve them", n-entries)
	}
}

// otherLeaderAllocs commits, as another leader would, an Alloc of 50 IDs
// of name and records its outcome in rec; it reports whether it got
// them. Not otherLeader, which fails the test from this goroutine: the
// calls may have run the mark to the lead bound, and this one is then
// refused.
func otherLeaderAllocs(r *rig, name string, rec history.Pending) bool {
	res := r.apply(fsm.Command{Op: fsm.OpSettle, Allocs: []fsm.Alloc{{Seq: name, Count: 50}}, NowMs: r.clock.Now().UnixMilli()})
	if res.Err != nil {
		rec.Fail(res.Err)
		return false
	}
	a := res.Allocations[0]
	if a.Err != nil {
		rec.Fail(a.Err)
		return false
	}
	ids := make([]uint64, 50)
	for k := range ids {
		ids[k] = a.First + uint64(k)
	}
	rec.OK(ids)
	return true
}
