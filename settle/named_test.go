package settle

import (
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
)

// namedRig is a leading Settler at cluster version 3 with dense
// sequences "a" and "c" (both from 1, so their IDs are equal) and layout
// sequence "b".
func namedRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	r := start(t, cfg, fsm.SequencesVersion)
	r.define(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "a", Kind: fsm.KindDense})
	r.define(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "b", Kind: "default", Group: 1})
	r.define(fsm.Command{Op: fsm.OpCreateSequence, Sequence: "c", Kind: fsm.KindDense})
	r.s.Lead()
	return r
}

// define applies c to the FSM directly, as an entry of term 1 the log
// committed before.
func (r *rig) define(c fsm.Command) {
	r.t.Helper()
	e, err := fsm.Entry(c)
	if err != nil {
		r.t.Fatal(err)
	}
	r.log.mu.Lock()
	r.log.index++
	e.Index, e.Term = r.log.index, 1
	r.log.mu.Unlock()
	if res := r.fsm.Apply(&e).(fsm.Result); res.Err != nil {
		r.t.Fatalf("%s %s: %v", c.Op, c.Sequence, res.Err)
	}
}

func (r *rig) reserveIn(seq string, count uint64, ttl time.Duration) Reservation {
	r.t.Helper()
	res, err := r.s.ReserveIn(ctx(r.t), seq, fsm.Keyed{}, count, ttl)
	if err != nil || res.Count != count || res.Fate != fsm.FateOpen {
		r.t.Fatalf("ReserveIn(%q, %d, %s): %+v, %v", seq, count, ttl, res, err)
	}
	return res
}

func (r *rig) decideIn(seq string, do fsm.Do, res Reservation, want fsm.Fate) uint64 {
	r.t.Helper()
	f, w, err := r.s.DecideIn(ctx(r.t), seq, do, res.First, res.Count, 0)
	if err != nil || f != want {
		r.t.Fatalf("%s of %q %d+%d: %s, %v; want %s", do, seq, res.First, res.Count, f, err, want)
	}
	return w
}

func (r *rig) watermarkOf(seq string) uint64 {
	r.t.Helper()
	w, err := r.s.WatermarkOf(ctx(r.t), seq)
	if err != nil {
		r.t.Fatalf("WatermarkOf(%q): %v", seq, err)
	}
	return w
}

// namedFate is the FSM's fate of a named sequence's reservation.
func (r *rig) namedFate(seq string, res Reservation) fsm.Fate {
	tk, _ := r.fsm.TrackedSequence(seq)
	if o, ok := tk.Open[res.First]; ok && o.Count == res.Count {
		return fsm.FateOpen
	}
	for _, s := range tk.Dead {
		if s.First <= res.First && res.First+res.Count <= s.End {
			return s.Fate
		}
	}
	if res.First+res.Count <= tk.Frontier {
		return fsm.FateCompleted
	}
	return fsm.FateUnknown
}

func (r *rig) wantNamedFate(seq string, res Reservation, want fsm.Fate) {
	r.t.Helper()
	if got := r.namedFate(seq, res); got != want {
		r.t.Fatalf("reservation %d+%d of %q: %s in the FSM, want %s", res.First, res.Count, seq, got, want)
	}
}

// A named sequence's reservation takes its IDs from the sequence's mark;
// its decisions answer its own sequence's W, which stops at its oldest
// open reservation and holds back neither another sequence's W nor the
// default sequence's.
func TestNamedReserveDecideAndW(t *testing.T) {
	r := namedRig(t, testConfig())
	a1 := r.reserveIn("a", 2, time.Minute)
	a2 := r.reserveIn("a", 3, time.Minute)
	c1 := r.reserveIn("c", 2, time.Minute)
	if a1.First != 1 || a2.First != 3 || c1.First != 1 {
		t.Fatalf("IDs %d, %d, %d; want 1, 3 (a's mark) and 1 (c's)", a1.First, a2.First, c1.First)
	}
	if w := r.watermarkOf("a"); w != 1 {
		t.Fatalf("W of a %d, want 1 (a1 open)", w)
	}
	if w := r.decideIn("c", fsm.DoComplete, c1, fsm.FateCompleted); w != 3 {
		t.Fatalf("W of c after its only reservation completed: %d, want its mark 3", w)
	}
	if w := r.decideIn("a", fsm.DoComplete, a1, fsm.FateCompleted); w != 3 {
		t.Fatalf("W of a after a1 completed: %d, want 3 (a2 open)", w)
	}
	if w := r.decideIn("a", fsm.DoAbandon, a2, fsm.FateAbandoned); w != 6 {
		t.Fatalf("W of a after a2 abandoned: %d, want its mark 6", w)
	}
	if w := r.decideIn("a", fsm.DoAbandon, a2, fsm.FateAbandoned); w != 6 {
		t.Fatalf("abandon again: W %d", w)
	}
	if _, _, err := r.s.DecideIn(ctx(t), "a", fsm.DoComplete, a2.First, a2.Count, 0); !errors.Is(err, ErrAbandoned) {
		t.Fatalf("complete of an abandoned reservation: %v", err)
	}
	// IDs c never handed out name nothing. (A handle names its sequence,
	// so one of another sequence is refused before it gets here.)
	if _, _, err := r.s.DecideIn(ctx(t), "c", fsm.DoComplete, 10, 5, 0); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a handle above c's mark: %v, want ErrUnknown", err)
	}
	// b, a layout sequence, from the clock; the default sequence's W is
	// its frontier, whatever b holds open.
	b1 := r.reserveIn("b", 4, time.Minute)
	def, _ := r.fsm.Sequence("b")
	if tick := def.Layout.TickAt(r.clock.Now()); b1.First < tick {
		t.Fatalf("b's reservation from tick %d, before the clock's %d", b1.First, tick)
	}
	if w, f := r.watermark(), r.fsm.Tracked().Frontier; w != f {
		t.Fatalf("the default W %d, want its frontier %d", w, f)
	}
	if w := r.watermarkOf("b"); w != b1.First {
		t.Fatalf("W of b %d, want %d", w, b1.First)
	}
	if st := r.s.Stats(); st.Reserved != 4 || st.Completed != 2 || st.Abandoned != 1 || st.Open != 1 {
		t.Fatalf("stats %+v, counting every sequence", st)
	}
}

// Deadlines are kept per sequence and first ID: equal IDs of two
// sequences expire each on its own TTL, and only their own.
func TestNamedExpiryPerSequence(t *testing.T) {
	r := namedRig(t, testConfig())
	a := r.reserveIn("a", 2, 100*time.Millisecond)
	c := r.reserveIn("c", 2, 300*time.Millisecond)
	if a.First != c.First {
		t.Fatalf("a and c start at %d and %d; the test wants equal IDs", a.First, c.First)
	}
	if st := r.s.Stats(); st.Open != 2 {
		t.Fatalf("stats %+v: want two deadlines", st)
	}
	r.advance(110 * time.Millisecond)
	r.waitExpired(1)
	r.wantNamedFate("a", a, fsm.FateExpired)
	r.wantNamedFate("c", c, fsm.FateOpen)
	if _, _, err := r.s.DecideIn(ctx(t), "a", fsm.DoComplete, a.First, a.Count, 0); !errors.Is(err, ErrExpired) {
		t.Fatalf("complete of a expired: %v", err)
	}
	if w := r.watermarkOf("a"); w != 3 {
		t.Fatalf("W of a %d after its reservation expired, want 3", w)
	}
	if w := r.watermarkOf("c"); w != 1 {
		t.Fatalf("W of c %d, want 1 (c open)", w)
	}
	// An Extend of c moves c's deadline only.
	r.decideIn("c", fsm.DoExtend, c, fsm.FateOpen)
	r.advance(250 * time.Millisecond)
	r.barrier()
	r.wantNamedFate("c", c, fsm.FateOpen)
	r.advance(10 * time.Second)
	r.waitExpired(2)
	r.wantNamedFate("c", c, fsm.FateExpired)
	if w := r.watermarkOf("c"); w != 3 {
		t.Fatalf("W of c %d after it expired, want 3", w)
	}
}

// A new leader gives every open reservation of every sequence its full
// TTL from when it began to lead.
func TestNamedLeadGivesFullTTL(t *testing.T) {
	r := namedRig(t, testConfig())
	a := r.reserveIn("a", 1, 100*time.Millisecond)
	b := r.reserveIn("b", 1, 300*time.Millisecond)
	d := r.reserve(1, 100*time.Millisecond)
	r.s.StepDown()
	r.clock.Advance(time.Second) // all past their deadlines
	r.ids.setTerm(2)
	r.log.setTerm(2)
	r.s.Lead()
	if st := r.s.Stats(); st.Open != 3 {
		t.Fatalf("stats %+v after Lead: want three open", st)
	}
	r.advance(90 * time.Millisecond)
	r.barrier()
	r.wantNamedFate("a", a, fsm.FateOpen)
	r.advance(20 * time.Millisecond)
	r.waitExpired(2)
	r.wantNamedFate("a", a, fsm.FateExpired)
	r.wantFate(d, fsm.FateExpired)
	r.wantNamedFate("b", b, fsm.FateOpen)
	r.advance(200 * time.Millisecond)
	r.waitExpired(3)
	r.wantNamedFate("b", b, fsm.FateExpired)
}

// A keyed Reserve of a named sequence: its retry, on this leader or the
// next, answers the first reservation with its fate now and opens
// nothing; the key in another sequence is fsm.ErrKeyReused.
func TestNamedKeyedReserve(t *testing.T) {
	r := namedRig(t, testConfig())
	key := fsm.Keyed{Caller: "CN=w", Key: "k"}
	first, err := r.s.ReserveIn(ctx(t), "a", key, 2, time.Minute)
	if err != nil || first.First != 1 || first.Fate != fsm.FateOpen {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := r.s.ReserveIn(ctx(t), "a", key, 2, 0)
	if err != nil || again != first {
		t.Fatalf("retry naming no TTL: %+v, %v; want %+v", again, err, first)
	}
	if _, err := r.s.ReserveIn(ctx(t), "c", key, 2, time.Minute); !errors.Is(err, fsm.ErrKeyReused) {
		t.Fatalf("the key in c: %v, want ErrKeyReused", err)
	}
	if _, err := r.s.ReserveKeyed(ctx(t), key, 2, time.Minute); !errors.Is(err, fsm.ErrKeyReused) {
		t.Fatalf("the key in the default sequence: %v, want ErrKeyReused", err)
	}
	r.decideIn("a", fsm.DoComplete, first, fsm.FateCompleted)
	r.s.StepDown()
	r.ids.setTerm(2)
	r.log.setTerm(2)
	r.s.Lead()
	again, err = r.s.ReserveIn(ctx(t), "a", key, 2, time.Minute)
	if err != nil || again.First != 1 || again.Fate != fsm.FateCompleted {
		t.Fatalf("retry on the next leader after complete: %+v, %v", again, err)
	}
	if s, _ := r.fsm.Sequence("a"); s.Next != 3 {
		t.Fatalf("a's mark %d, want 3: retries take no IDs", s.Next)
	}
	if st := r.s.Stats(); st.Reserved != 1 {
		t.Fatalf("stats %+v: one reservation opened", st)
	}
}

// A layout sequence's reservation lies above every ID its window handed
// out, and the window hands out above it once it is answered.
func TestNamedReserveLiftsTheWindow(t *testing.T) {
	r := namedRig(t, testConfig())
	def, _ := r.fsm.Sequence("b")
	grant := func() uint64 {
		t.Helper()
		g := r.s.Grants(ctx(t), []Ask{{Name: "b", Seq: &def, Count: 3}})[0]
		<-g.Done()
		first, err := g.Result()
		if err != nil {
			t.Fatal(err)
		}
		return first
	}
	g1 := grant()
	res := r.reserveIn("b", 5, time.Minute)
	if res.First < g1+3 {
		t.Fatalf("reservation from %d, below the window's IDs %d..%d", res.First, g1, g1+2)
	}
	if g2 := grant(); g2 < res.First+res.Count {
		t.Fatalf("window IDs from %d after the reservation %d+%d was answered", g2, res.First, res.Count)
	}
}

// Every bad input is refused with its error and changes nothing: an
// unknown sequence, a dropped one (for Reserve; its reservations are
// still decided, and its W read), a malformed name, a cluster below
// version 3; MaxOpen counts every sequence's reservations.
func TestNamedRefusals(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 2
	r := namedRig(t, cfg)
	a := r.reserveIn("a", 1, time.Minute)
	r.define(fsm.Command{Op: fsm.OpDropSequence, Sequence: "a"})
	proposed := len(r.log.Proposed())
	for name, err := range map[string]error{
		"reserve of an unknown sequence": func() error { _, err := r.s.ReserveIn(ctx(t), "nope", fsm.Keyed{}, 1, 0); return err }(),
		"reserve of a dropped sequence":  func() error { _, err := r.s.ReserveIn(ctx(t), "a", fsm.Keyed{}, 1, 0); return err }(),
		"W of an unknown sequence":       func() error { _, err := r.s.WatermarkOf(ctx(t), "nope"); return err }(),
	} {
		if !errors.Is(err, fsm.ErrNoSequence) {
			t.Errorf("%s: %v, want fsm.ErrNoSequence", name, err)
		}
	}
	if _, _, err := r.s.DecideIn(ctx(t), "nope", fsm.DoComplete, 1, 1, 0); !errors.Is(err, ErrUnknown) || !errors.Is(err, fsm.ErrNoSequence) {
		t.Errorf("complete in an unknown sequence: %v", err)
	}
	for name, err := range map[string]error{
		"reserve": func() error { _, err := r.s.ReserveIn(ctx(t), "Bad Name", fsm.Keyed{}, 1, 0); return err }(),
		"decide":  func() error { _, _, err := r.s.DecideIn(ctx(t), "Bad Name", fsm.DoComplete, 1, 1, 0); return err }(),
		"W":       func() error { _, err := r.s.WatermarkOf(ctx(t), "Bad Name"); return err }(),
	} {
		if !errors.Is(err, fsm.ErrInvalid) {
			t.Errorf("%s of a malformed name: %v, want fsm.ErrInvalid", name, err)
		}
	}
	// The unknown and dropped Reserves, and the unknown Decide, are the
	// log's to refuse (the state may change before their entry); the rest
	// propose nothing.
	if got := len(r.log.Proposed()); got > proposed+3 {
		t.Fatalf("%d entries proposed for the refusals, want at most 3", got-proposed)
	}
	if tk, _ := r.fsm.TrackedSequence("a"); len(tk.Open) != 1 {
		t.Fatalf("a's open reservations %v after refusals, want a's one", tk.Open)
	}
	if w := r.watermarkOf("a"); w != 1 {
		t.Fatalf("W of dropped a %d, want 1", w)
	}
	r.reserve(1, 0)
	if _, err := r.s.ReserveIn(ctx(t), "c", fsm.Keyed{}, 1, 0); !errors.Is(err, ErrTooManyOpen) {
		t.Fatalf("a third open reservation across sequences with MaxOpen 2: %v", err)
	}
	r.decideIn("a", fsm.DoComplete, a, fsm.FateCompleted) // dropped, still decided
	r.reserveIn("c", 1, 0)

	v2 := newRig(t, testConfig())
	for name, err := range map[string]error{
		"reserve": func() error { _, err := v2.s.ReserveIn(ctx(t), "a", fsm.Keyed{}, 1, 0); return err }(),
		"decide":  func() error { _, _, err := v2.s.DecideIn(ctx(t), "a", fsm.DoComplete, 1, 1, 0); return err }(),
		"W":       func() error { _, err := v2.s.WatermarkOf(ctx(t), "a"); return err }(),
	} {
		if !errors.Is(err, ErrClusterVersion) {
			t.Errorf("%s at version 2: %v, want ErrClusterVersion", name, err)
		}
	}
	if n := len(v2.log.Proposed()); n != 0 {
		t.Fatalf("%d entries proposed at version 2", n)
	}
}

// A watcher of a sequence's W hears it rise from the entries this leader
// commits, and only its own sequence's W.
func TestNamedWatch(t *testing.T) {
	r := namedRig(t, testConfig())
	a := r.reserveIn("a", 2, time.Minute)
	w, changed := r.s.WatchOf("a")
	if w != 1 {
		t.Fatalf("watched W of a %d, want 1", w)
	}
	r.decideIn("a", fsm.DoComplete, a, fsm.FateCompleted)
	within(t, "W of a rose", changed)
	if w, _ := r.s.WatchOf("a"); w != 3 {
		t.Fatalf("watched W of a %d, want 3", w)
	}
	if w, _ := r.s.WatchOf("c"); w != 0 {
		t.Fatalf("watched W of c %d, want none seen", w)
	}
}

// A named reservation is answered from an entry of any term: its IDs are
// the log's, as an Alloc's.
func TestNamedReserveCommittedInAnotherTerm(t *testing.T) {
	r := namedRig(t, testConfig())
	r.log.setTerm(2)
	res, err := r.s.ReserveIn(ctx(t), "a", fsm.Keyed{}, 1, time.Minute)
	if err != nil || res.First != 1 {
		t.Fatalf("a named reservation committed in term 2, proposed in term 1: %+v, %v", res, err)
	}
}
