package settle

import (
	"errors"
	"slices"
	"testing"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// The named layout sequences' windows (windows.go), over the rig: a real
// FSM behind the fake log, the fake sequencer's Enroll counted.

// windowKind is the layout of the tests' layout sequences: sonyflake's
// 10 ms units of 256 ticks keep the numbers small (a window of 2 s is
// 51,200 ticks, the FSM's lead bound of 10 s 256,000).
const windowKind = "sonyflake"

// span is a window's ticks under testConfig.
var span = layout.MustPreset(windowKind).TicksIn(DefaultWindow)

// seqRig is a leading Settler at the cluster version that reads named
// sequences, with layout sequences named layouts (groups 1, 2, ...) and
// dense sequences named dense (from 1).
func seqRig(t *testing.T, layouts []string, dense ...string) *rig {
	t.Helper()
	r := start(t, testConfig(), fsm.SequencesVersion)
	for i, name := range layouts {
		r.mustApply(fsm.Command{Op: fsm.OpCreateSequence, Sequence: name, Kind: windowKind, Group: uint64(i + 1)})
	}
	for _, name := range dense {
		r.mustApply(fsm.Command{Op: fsm.OpCreateSequence, Sequence: name, Kind: fsm.KindDense})
	}
	r.s.Lead()
	return r
}

// apply applies c as the log's next entry, in its current term, behind
// the Settler's back: an admin call, or another leader's entry. It is not
// counted as proposed.
func (r *rig) apply(c fsm.Command) fsm.Result {
	r.t.Helper()
	e, err := fsm.Entry(c)
	if err != nil {
		r.t.Fatalf("entry %+v: %v", c, err)
	}
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.index++
	e.Index, e.Term = r.log.index, r.log.term
	return r.fsm.Apply(&e).(fsm.Result)
}

func (r *rig) mustApply(c fsm.Command) fsm.Result {
	r.t.Helper()
	res := r.apply(c)
	if res.Err != nil {
		r.t.Fatalf("apply %+v: %v", c, res.Err)
	}
	return res
}

// otherLeader commits, as another leader of the log's current term would,
// an Alloc of count IDs of seq (the window it serves from, or a call it
// answers), and returns what it got.
func (r *rig) otherLeader(seq string, count uint64) fsm.Allocation {
	r.t.Helper()
	res := r.mustApply(fsm.Command{Op: fsm.OpSettle, Allocs: []fsm.Alloc{{Seq: seq, Count: count}}, NowMs: r.clock.Now().UnixMilli()})
	if a := res.Allocations[0]; a.Err != nil {
		r.t.Fatalf("another leader's alloc of %s: %v", seq, a.Err)
	}
	return res.Allocations[0]
}

// relead steps the Settler down and makes it lead again in term, as a
// node that lost leadership and won it back.
func (r *rig) relead(term uint64) {
	r.s.StepDown()
	r.ids.setTerm(term)
	r.log.setTerm(term)
	r.s.Lead()
}

// alloc hands out count IDs of seq (keyed when key is set) and returns the
// first, failing the test on error.
func (r *rig) alloc(seq string, count uint64, key string) uint64 {
	r.t.Helper()
	first, err := r.s.Alloc(ctx(r.t), seq, count, keyed(key))
	if err != nil {
		r.t.Fatalf("Alloc(%s, %d, key %q): %v", seq, count, key, err)
	}
	return first
}

func keyed(key string) fsm.Keyed {
	if key == "" {
		return fsm.Keyed{}
	}
	return fsm.Keyed{Caller: "CN=test", Key: key}
}

// grants starts asks (their sequences' definitions read from the state)
// and waits for every grant.
func (r *rig) grants(asks ...Ask) []Grant {
	r.t.Helper()
	for i := range asks {
		asks[i].Seq, _ = r.fsm.Sequence(asks[i].Name)
	}
	gs := r.s.Grants(ctx(r.t), asks)
	for i, g := range gs {
		within(r.t, "grant "+asks[i].Name, g.Done())
	}
	return gs
}

// allocEntries counts the settle entries proposed that carried Allocs.
func (r *rig) allocEntries() int {
	n := 0
	for _, c := range r.log.Proposed() {
		if len(c.Allocs) > 0 {
			n++
		}
	}
	return n
}

func (f *fakeIDs) Enrolls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enrolls
}

// A window's ticks answer only in the term they were assigned in. Here
// this node still believes it leads term 1 when a call for a and b
// begins; another leader (term 2) has meanwhile answered IDs of a above
// this node's window. a's ticks come from the stale window; b has none,
// and waits for a refill, which this node proposed in term 1; before it
// fails, the node learns of term 2 and is elected in term 3. The call
// must not answer a's ticks of term 1 with a round of term 3: it began
// after the other leader answered higher IDs of a.
func TestWindowTicksOfAnEarlierTermAreNotAnswered(t *testing.T) {
	r := seqRig(t, []string{"a", "b"})
	r.alloc("a", 1, "") // a's window, in term 1
	r.log.setTerm(2)
	other := r.otherLeader("a", 100)
	r.log.setFail(func(c fsm.Command) bool {
		return slices.ContainsFunc(c.Allocs, func(a fsm.Alloc) bool { return a.Seq == "b" })
	})
	r.log.Hold()
	done := make(chan []Grant, 1)
	go func() {
		asks := []Ask{{Name: "a", Count: 1}, {Name: "b", Count: 1}}
		for i := range asks {
			asks[i].Seq, _ = r.fsm.Sequence(asks[i].Name)
		}
		done <- r.s.Grants(ctx(t), asks)
	}()
	eventually(t, "b's refill proposed", func() bool { return r.log.Held() == 1 })
	r.relead(3)
	r.log.Release()
	gs := within(t, "Grants", done)
	within(t, "a's grant", gs[0].Done())
	first, err := gs[0].Result()
	if err == nil {
		t.Fatalf("a's grant answered tick %d, assigned from a window of term 1 and confirmed in term 3; another leader answered ticks from %d before the call began", first, other.First)
	}
	if !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("a's grant: %v, want sequencer.ErrNotLeader", err)
	}
	within(t, "b's grant", gs[1].Done())
	if _, err := gs[1].Result(); !errors.Is(err, errInjected) {
		t.Fatalf("b's grant: %v, want its refill's failure", err)
	}
	// The next call of a takes a window of term 3, above the other
	// leader's.
	if got := r.alloc("a", 1, ""); got <= other.First+99 {
		t.Fatalf("a after re-leading: tick %d, want above the other leader's %d", got, other.First+99)
	}
}
