package settle

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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
		seq, _ := r.fsm.Sequence(asks[i].Name)
		asks[i].Seq = &seq
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
			seq, _ := r.fsm.Sequence(asks[i].Name)
			asks[i].Seq = &seq
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

// A sequence nobody calls commits nothing: not before its first call,
// and, once its first window is committed, not while calls fit in it
// (fewer than half of it taken), nor while no call comes.
func TestWindowIdleSequenceCommitsNothing(t *testing.T) {
	r := seqRig(t, []string{"a", "idle"})
	for range 3 {
		r.advance(time.Second)
	}
	r.loopBarrier()
	if n := r.allocEntries(); n != 0 {
		t.Fatalf("%d alloc entries before any call, want none", n)
	}
	last := r.alloc("a", 1, "")
	if n := r.allocEntries(); n != 1 {
		t.Fatalf("%d alloc entries after the first call, want its window's one", n)
	}
	const calls, count = 50, 100 // 5,000 ticks, under half a window
	for range calls {
		first := r.alloc("a", count, "")
		if first <= last {
			t.Fatalf("call from tick %d after one that ended at %d", first, last)
		}
		last = first + count - 1
	}
	if n := r.allocEntries(); n != 1 {
		t.Fatalf("%d alloc entries after %d calls within the first window, want 1", n, calls+1)
	}
	for range 3 {
		r.advance(100 * time.Millisecond)
	}
	r.loopBarrier()
	r.barrier()
	if n := r.allocEntries(); n != 1 {
		t.Fatalf("%d alloc entries once calls stopped, want still 1", n)
	}
	if seq, _ := r.fsm.Sequence("idle"); seq.Next != 1 {
		t.Fatalf("the sequence nobody called has mark %d, want 1: something was allocated for it", seq.Next)
	}
}

// A burst of concurrent calls within about one window makes its first
// window and at most one refill asked ahead of need, not an entry a
// call; every call gets ticks of its own.
func TestWindowBurstSharesRefills(t *testing.T) {
	r := seqRig(t, []string{"a"})
	const calls, count = 200, 200 // 40,000 ticks: past half a window, within one
	if calls*count >= span || calls*count <= span/2 {
		t.Fatalf("the burst's %d ticks must cross half a window and fit in one (%d)", calls*count, span)
	}
	firsts := make(chan uint64, calls)
	errs := make(chan error, calls)
	for range calls {
		go func() {
			first, err := r.s.Alloc(ctx(t), "a", count, fsm.Keyed{})
			firsts <- first
			errs <- err
		}()
	}
	var got []uint64
	for range calls {
		if err := within(t, "a call of the burst", errs); err != nil {
			t.Fatal(err)
		}
		got = append(got, within(t, "a call's first tick", firsts))
	}
	if n := r.allocEntries(); n > 2 {
		t.Fatalf("%d alloc entries for %d calls within one window, want at most 2 (the window, one refill ahead of need)", n, calls)
	}
	slices.Sort(got)
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1]+count {
			t.Fatalf("calls from ticks %d and %d overlap (%d ticks each)", got[i-1], got[i], count)
		}
	}
}

// One Grants on many cold sequences asks for all their windows at once:
// every refill is proposed before any commits (so they can share an
// entry), where waiting for each in turn would cost a commit a sequence.
// Held, the log commits nothing, so the test sees what is proposed while
// the first refill is still in flight.
func TestWindowColdSequencesRefillTogether(t *testing.T) {
	names := []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"}
	r := seqRig(t, names)
	r.log.Hold()
	asks := make([]Ask, len(names))
	for i, name := range names {
		asks[i] = Ask{Name: name, Count: 3}
	}
	done := make(chan []Grant, 1)
	go func() { done <- r.grants(asks...) }()
	eventually(t, "a refill proposed for every cold sequence while none committed", func() bool {
		asked := map[string]bool{}
		for _, c := range r.log.Proposed() {
			for _, a := range c.Allocs {
				asked[a.Seq] = true
			}
		}
		return len(asked) == len(names)
	})
	r.log.Release()
	for i, g := range within(t, "the grants", done) {
		if _, err := g.Result(); err != nil {
			t.Fatalf("grant of %s: %v", names[i], err)
		}
	}
}

// A busy sequence's refill ahead of need takes along every other window
// that calls found close to its end (within three quarters of a window
// of the clock): a thousand busy sequences then share an entry every
// fraction of a window, not one each. A sequence not called since its
// last refill is left alone: an idle sequence commits nothing.
func TestWindowRefillAheadTakesTheOthersDueSoon(t *testing.T) {
	busy := []string{"b0", "b1", "b2", "b3", "b4"}
	r := seqRig(t, append(slices.Clone(busy), "idle"))
	for _, name := range append(slices.Clone(busy), "idle") {
		r.alloc(name, 1, "")
	}
	r.loopBarrier()
	r.barrier()
	before, entries := len(r.log.Proposed()), r.allocEntries()
	// 0.3 of a window later: each busy window has 0.7 left, under three
	// quarters, and its call marks it; none is due yet.
	r.advance(DefaultWindow * 3 / 10)
	for _, name := range busy {
		r.alloc(name, 1, "")
	}
	r.loopBarrier()
	if n := r.allocEntries(); n != entries {
		t.Fatalf("%d alloc entries before any window was due, want still the %d of the first windows", n, entries)
	}
	// 0.25 later, 0.45 left: b0's call finds its window due, and every
	// marked one is refilled with it, before anyone calls them again.
	r.advance(DefaultWindow / 4)
	r.alloc(busy[0], 1, "")
	r.loopBarrier()
	r.barrier()
	refilled := map[string]bool{}
	for _, c := range r.log.Proposed()[before:] {
		for _, a := range c.Allocs {
			refilled[a.Seq] = true
		}
	}
	for _, name := range busy {
		if !refilled[name] {
			t.Errorf("busy sequence %s was not refilled with b0's (refilled: %v)", name, refilled)
		}
	}
	if refilled["idle"] {
		t.Errorf("the sequence nobody called since its first window was refilled")
	}
}

// Every call of one Grants served from windows, whatever its sequence,
// shares one confirmation round (one Enroll); calls decided in the log
// (keyed, dense) enroll nothing.
func TestWindowGrantsShareOneEnroll(t *testing.T) {
	r := seqRig(t, []string{"a", "b"}, "d")
	before := r.ids.Enrolls()
	gs := r.grants(Ask{Name: "a", Count: 2}, Ask{Name: "b", Count: 3}, Ask{Name: "a", Count: 1},
		Ask{Name: "d", Count: 4}, Ask{Name: "a", Count: 5, Key: keyed("k")}, Ask{Name: "b", Count: 1})
	if n := r.ids.Enrolls() - before; n != 1 {
		t.Fatalf("%d Enrolls for one Grants (new windows included), want 1", n)
	}
	type run struct{ seq, first, count uint64 }
	var runs []run
	for i, g := range gs {
		first, err := g.Result()
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		runs = append(runs, run{uint64(i), first, []uint64{2, 3, 1, 4, 5, 1}[i]})
	}
	if runs[0].first+2 > runs[2].first || runs[4].first < runs[2].first+1 {
		t.Fatalf("a's grants %+v, %+v, %+v: want them in order, apart", runs[0], runs[2], runs[4])
	}
	if runs[1].first+3 > runs[5].first {
		t.Fatalf("b's grants %+v, %+v: want them in order, apart", runs[1], runs[5])
	}
	if runs[3].first != 1 {
		t.Fatalf("d's grant from %d, want 1", runs[3].first)
	}
	before = r.ids.Enrolls()
	r.grants(Ask{Name: "a", Count: 1}, Ask{Name: "b", Count: 1}, Ask{Name: "a", Count: 1})
	if n := r.ids.Enrolls() - before; n != 1 {
		t.Fatalf("%d Enrolls for a Grants served from open windows, want 1", n)
	}
	before = r.ids.Enrolls()
	r.grants(Ask{Name: "d", Count: 1}, Ask{Name: "a", Count: 1, Key: keyed("k2")})
	if n := r.ids.Enrolls() - before; n != 0 {
		t.Fatalf("%d Enrolls for a Grants of calls the log decides, want none", n)
	}
}

// A new term drops every window: after this node leads again, its first
// call commits a window of its own, above everything handed out before,
// here by this node and by another leader in the term between. (Served
// from the old window, or from a new one whose cursor is not raised to
// its first tick, it would answer ticks below them.)
func TestWindowsDroppedOnTermChange(t *testing.T) {
	r := seqRig(t, []string{"a", "b"})
	var last uint64
	for range 10 {
		last = r.alloc("a", 1000, "") + 999
	}
	r.alloc("b", 1, "")
	entries := r.allocEntries()
	r.s.StepDown()
	if _, err := r.s.Alloc(ctx(t), "a", 1, fsm.Keyed{}); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("a call while not leading: %v, want sequencer.ErrNotLeader", err)
	}
	r.log.setTerm(2)
	other := r.otherLeader("a", 10)
	if other.First <= last {
		t.Fatalf("the other leader's window from %d, not above this node's %d", other.First, last)
	}
	r.relead(3)
	first := r.alloc("a", 1, "")
	if first <= other.First+9 {
		t.Fatalf("a after re-leading: tick %d, want above the other leader's last %d (and this node's %d)", first, other.First+9, last)
	}
	if n := r.allocEntries(); n != entries+1 {
		t.Fatalf("%d alloc entries after re-leading, want %d: a new window", n, entries+1)
	}
	// b, which the other leader never served, gets a new window too.
	mark, _ := r.fsm.Sequence("b")
	if got := r.alloc("b", 1, ""); got < mark.Next {
		t.Fatalf("b after re-leading: tick %d, below its mark %d", got, mark.Next)
	}
	if n := r.allocEntries(); n != entries+2 {
		t.Fatalf("%d alloc entries, want %d: b's new window", n, entries+2)
	}
	// Lead again in the same term (a failed round, say): the windows
	// stand.
	r.s.Lead()
	r.alloc("a", 1, "")
	if n := r.allocEntries(); n != entries+2 {
		t.Fatalf("%d alloc entries after leading again in the same term, want still %d", n, entries+2)
	}
}

// A keyed call takes its ticks from the window, as an unkeyed one does,
// and claims them in the log: the calls around it are ordered with it,
// and a retry replays the claimed ticks.
func TestWindowKeyedCallOrderedBetweenUnkeyed(t *testing.T) {
	r := seqRig(t, []string{"a"})
	u1 := r.alloc("a", 10, "")
	k := r.alloc("a", 10, "k")
	if k <= u1+9 {
		t.Fatalf("keyed call from %d after an unkeyed one that ended at %d", k, u1+9)
	}
	u2 := r.alloc("a", 10, "")
	if u2 <= k+9 {
		t.Fatalf("unkeyed call from %d after a keyed one answered %d to %d", u2, k, k+9)
	}
	// Its retry replays it (the window's ticks it took are a gap).
	if again := r.alloc("a", 10, "k"); again != k {
		t.Fatalf("retry of the keyed call: %d, want %d", again, k)
	}
	if u3 := r.alloc("a", 1, ""); u3 <= u2+9 {
		t.Fatalf("unkeyed call after the replay: %d, want above the last unkeyed call's %d", u3, u2+9)
	}
}

// A refill that fails fails the calls that wait for it (none gets
// ticks); the next call asks again. A refill asked ahead of need that
// fails fails no call: the next one asks again.
func TestWindowRefillFailure(t *testing.T) {
	r := seqRig(t, []string{"a"})
	var failing atomic.Bool
	failing.Store(true)
	r.log.setFail(func(c fsm.Command) bool { return failing.Load() && len(c.Allocs) > 0 })
	r.log.Hold()
	const calls = 5
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := r.s.Alloc(ctx(t), "a", 1, fsm.Keyed{})
			errs <- err
		}()
	}
	eventually(t, "the refill proposed", func() bool { return r.log.Held() >= 1 })
	r.log.Release()
	for range calls {
		if err := within(t, "a call waiting for the refill", errs); !errors.Is(err, errInjected) {
			t.Fatalf("a call waiting for a refill that failed: %v, want the refill's failure", err)
		}
	}
	if seq, _ := r.fsm.Sequence("a"); seq.Next != 1 {
		t.Fatalf("mark %d after refills that failed, want 1", seq.Next)
	}
	failing.Store(false)
	first := r.alloc("a", 1, "")
	failed := r.allocEntries()

	// Ahead of need: the clock comes within half a window of the limit.
	failing.Store(true)
	r.clock.Advance(testConfig().Window/2 + testConfig().Window/10)
	next := r.alloc("a", 1, "")
	if next <= first {
		t.Fatalf("call from %d, want above the first call's %d", next, first)
	}
	eventually(t, "the refill ahead of need proposed", func() bool { return r.allocEntries() == failed+1 })
	r.barrier() // answered, failed
	failing.Store(false)
	if got := r.alloc("a", 1, ""); got != next+1 {
		t.Fatalf("call after the refill ahead of need failed: %d, want the window's next %d", got, next+1)
	}
	eventually(t, "the refill asked again", func() bool { return r.allocEntries() == failed+2 })
	r.barrier()
	mark, _ := r.fsm.Sequence("a")
	if mark.Next < next+span/2 {
		t.Fatalf("mark %d after the refill asked again, want a second window's (at least %d)", mark.Next, next+span/2)
	}
}

// Demand far above what the layout's time field holds runs the windows
// ahead of a clock that stands still, until the FSM's lead bound refuses
// a refill: calls then fail (fsm.ErrSequenceFull), and none ever gets a
// tick past the mark the log holds or more than the bound ahead of the
// clock. Once the clock catches up, calls are served again.
func TestWindowLeadBound(t *testing.T) {
	r := seqRig(t, []string{"a"})
	l := layout.MustPreset(windowKind)
	bound := l.TickAt(r.clock.Now()) + l.TicksIn(10*time.Second)
	const count = 20_000
	var refused error
	for i := 0; i < 100 && refused == nil; i++ {
		first, err := r.s.Alloc(ctx(t), "a", count, fsm.Keyed{})
		if err != nil {
			refused = err
			break
		}
		mark, _ := r.fsm.Sequence("a")
		if last := first + count - 1; last >= mark.Next || last > bound {
			t.Fatalf("call %d got ticks to %d: the mark is %d, the lead bound %d", i, last, mark.Next, bound)
		}
	}
	if !errors.Is(refused, fsm.ErrSequenceFull) {
		t.Fatalf("100 calls of %d ticks with the clock standing: %v, want fsm.ErrSequenceFull", count, refused)
	}
	if _, err := r.s.Alloc(ctx(t), "a", count, fsm.Keyed{}); !errors.Is(err, fsm.ErrSequenceFull) {
		t.Fatalf("again: %v, want fsm.ErrSequenceFull", err)
	}
	r.clock.Advance(20 * time.Second)
	if first := r.alloc("a", count, ""); first < l.TickAt(r.clock.Now()) {
		t.Fatalf("after the clock caught up: tick %d, below the clock's %d", first, l.TickAt(r.clock.Now()))
	}
}
