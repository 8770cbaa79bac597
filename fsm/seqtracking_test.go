package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// The clock of the named tests' layout sequence.
var namedNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixMilli()

// namedFSM is an FSM at cluster version 3 with a dense sequence "a"
// (from 10) and a layout sequence "b".
func namedFSM(t testing.TB) *FSM {
	t.Helper()
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "a", Kind: KindDense, Start: 10}, 1)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "b", Kind: "default", Group: 3}, 1)
	return f
}

// namedOpen is an Open of count IDs of seq.
func namedOpen(seq string, count uint64) Track {
	return Track{Do: DoOpen, Seq: seq, Count: count, TTLMs: 1000}
}

// settleNamed applies tracks in one entry at the named tests' clock.
func settleNamed(t testing.TB, f *FSM, tracks ...Track) Result {
	t.Helper()
	return applyOK(t, f, Command{Op: OpSettle, Tracks: tracks, NowMs: namedNow}, 1)
}

func seqW(t testing.TB, f *FSM, name string) uint64 {
	t.Helper()
	w, ok := f.SequenceSettled(name)
	if !ok {
		t.Fatalf("no sequence %q", name)
	}
	return w
}

// namedModel is the reference model of the named test: reservations of
// sequences "a" and "b", each sequence's mark, decided by the rules the
// issue states.
type namedModel struct {
	res  []modelRes
	seqs []string // res[i]'s sequence
	mark map[string]uint64
}

// w is a sequence's W as the issue defines it: below its mark, below
// every open reservation of that sequence, and no other's.
func (m namedModel) w(seq string) uint64 {
	w := m.mark[seq]
	for i, r := range m.res {
		if m.seqs[i] == seq && r.fate == FateOpen {
			w = min(w, r.first)
		}
	}
	return w
}

// TestNamedTrackingEverySequence is TestTrackingEverySequence's model
// check for named sequences: two reservations of dense sequence "a"
// (with untracked IDs between them) and one of layout sequence "b", their
// IDs assigned by Apply, and every sequence of up to four Tracks over
// them, each applied alone, all in one entry, and across a snapshot and
// restore after each step. Each sequence's W must equal the model's,
// never go down, and never pass an open reservation of its own sequence;
// since the model's W of a sequence reads only that sequence's
// reservations, an open reservation of one never holding the other's W
// back is checked too.
func TestNamedTrackingEverySequence(t *testing.T) {
	var alphabet []step
	for res := range 3 {
		for _, do := range []Do{DoComplete, DoAbandon, DoExtend, DoExpire} {
			alphabet = append(alphabet, step{do: do, res: res})
		}
		alphabet = append(alphabet, step{do: DoExpire, res: res, stale: true})
	}
	base, model := namedBase(t)
	st := restored(t, base).state
	checked := 0
	var walk func(seq []step)
	walk = func(seq []step) {
		for _, mode := range []string{"alone", "one entry", "restored"} {
			checkNamedSequence(t, &st, model, seq, mode)
			checked++
		}
		if len(seq) == 4 {
			return
		}
		for _, s := range alphabet {
			walk(append(seq[:len(seq):len(seq)], s))
		}
	}
	walk(nil)
	if want := 3 * (1 + 15 + 15*15 + 15*15*15 + 15*15*15*15); checked != want {
		t.Fatalf("checked %d runs, want %d", checked, want)
	}
}

// namedBase opens the model's reservations through Apply and checks the
// IDs it assigned: dense from the mark, layout from the clock.
func namedBase(t *testing.T) (*FSM, namedModel) {
	f := namedFSM(t)
	out := settleNamed(t, f, namedOpen("a", 2)).Outcomes
	allocs(t, f, namedNow, Alloc{Seq: "a", Count: 3}) // untracked: 12..14
	out = append(out, settleNamed(t, f, namedOpen("a", 3), namedOpen("b", 5)).Outcomes...)
	b, _ := f.Sequence("b")
	tick := b.Layout.TickAt(time.UnixMilli(namedNow))
	for i, want := range []uint64{10, 15, tick} {
		if out[i].Err != nil || out[i].First != want || out[i].Fate != FateOpen || !out[i].Changed {
			t.Fatalf("open %d: %+v, want IDs from %d", i, out[i], want)
		}
	}
	m := namedModel{
		res:  []modelRes{{first: 10, count: 2, fate: FateOpen}, {first: 15, count: 3, fate: FateOpen}, {first: tick, count: 5, fate: FateOpen}},
		seqs: []string{"a", "a", "b"},
		mark: map[string]uint64{"a": 18, "b": tick + 5},
	}
	for _, name := range []string{"a", "b"} {
		if w := seqW(t, f, name); w != m.w(name) {
			t.Fatalf("W of %q %d after the opens, want %d", name, w, m.w(name))
		}
	}
	return f, m
}

func (m namedModel) clone() namedModel {
	c := m
	c.res = append([]modelRes(nil), m.res...)
	return c
}

// copyState is a deep copy of the state's sequences and tracking, as
// Restore leaves them: the model check runs on States, not FSMs, so that
// its quarter of a million runs take seconds.
func copyState(s *State) *State {
	c := *s
	c.Tracking = s.Tracking.clone()
	c.Tracking.restore()
	c.Sequences = cloneSequences(s.Sequences)
	c.SeqTracking = cloneSeqTracking(s.SeqTracking)
	c.restoreNamed()
	return &c
}

// encodedState is s with its named tracking through a snapshot's
// encoding and Restore's decoding (the rest of the state the steps do not
// change).
func encodedState(t *testing.T, s *State) *State {
	t.Helper()
	c := copyState(s)
	b, err := json.Marshal(c.SeqTracking)
	if err != nil {
		t.Fatal(err)
	}
	c.SeqTracking = nil
	if err := json.Unmarshal(b, &c.SeqTracking); err != nil {
		t.Fatal(err)
	}
	c.restoreNamed()
	return c
}

// settleState applies tracks as one entry at the named tests' clock.
func settleState(t *testing.T, s *State, tracks ...Track) []Outcome {
	t.Helper()
	var r Result
	if err := s.settle(Command{Op: OpSettle, Tracks: tracks, NowMs: namedNow}, 1, &r); err != nil {
		t.Fatal(err)
	}
	return r.Outcomes
}

func checkNamedSequence(t *testing.T, base *State, model namedModel, seq []step, mode string) {
	s := copyState(base)
	m := model.clone()
	last := map[string]uint64{}
	checkW := func(when string) {
		for _, name := range []string{"a", "b"} {
			w, _ := s.sequenceSettled(name)
			if w < last[name] {
				t.Fatalf("%v %s %s: W of %q went down from %d to %d", seq, mode, when, name, last[name], w)
			}
			if want := m.w(name); w != want {
				t.Fatalf("%v %s %s: W of %q %d, want %d", seq, mode, when, name, w, want)
			}
			for i, r := range m.res {
				if m.seqs[i] == name && r.fate == FateOpen && w > r.first {
					t.Fatalf("%v %s %s: W of %q %d passed its open reservation at %d", seq, mode, when, name, w, r.first)
				}
			}
			last[name] = w
		}
	}
	checkW("at first")
	var batch []Track
	var want []Fate
	for i, st := range seq {
		tr := st.track(m.res)
		tr.Seq = m.seqs[st.res]
		var fate Fate
		m.res[st.res], fate = st.next(m.res[st.res])
		if mode == "one entry" {
			batch, want = append(batch, tr), append(want, fate)
			continue
		}
		o := settleState(t, s, tr)[0]
		if o.Fate != fate || o.Err != nil || (fate == FateOpen && o.Ext != m.res[st.res].ext) {
			t.Fatalf("%v step %d (%+v): outcome %+v, want fate %v ext %d", seq, i, tr, o, fate, m.res[st.res].ext)
		}
		checkW("after a step")
		if mode == "restored" {
			s = encodedState(t, s)
		}
	}
	if len(batch) > 0 {
		for i, o := range settleState(t, s, batch...) {
			if o.Fate != want[i] || o.Err != nil {
				t.Fatalf("%v in one entry: outcome %d %+v, want %v", seq, i, o, want[i])
			}
		}
		checkW("after the entry")
	}
	// Every fate reads back, and again after a restore.
	for _, g := range []*State{encodedState(t, s), s} {
		for i, r := range m.res {
			o := settleState(t, g, Track{Do: DoComplete, Seq: m.seqs[i], First: r.first, Count: r.count})[0]
			want := r.fate
			if want == FateOpen {
				want = FateCompleted
			}
			if o.Fate != want {
				t.Fatalf("%v %s: completing reservation %d at the end: %v, want %v", seq, mode, i, o.Fate, want)
			}
		}
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// The decision table of a named sequence's Tracks that are not the
// model's: an unknown or dropped sequence, a handle of another sequence
// or of the default one, untracked IDs, IDs above the mark, and a layout
// sequence's lead bound. Each refusal changes nothing.
func TestNamedTrackTable(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(f *FSM)
		track Track
		fate  Fate
		err   error
	}{
		{name: "open of an unknown sequence", track: namedOpen("nope", 1), err: ErrNoSequence},
		{name: "open of a dropped sequence", setup: drop("a"), track: namedOpen("a", 1), err: ErrNoSequence},
		{name: "open past the dense range", setup: func(f *FSM) {
			applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "full", Kind: KindDense, Start: ^uint64(0) - 1}, 1)
		}, track: namedOpen("full", 5), err: ErrSequenceFull},
		{name: "open past the lead bound", track: namedOpen("b", 1<<40), err: ErrSequenceFull},
		{name: "complete in an unknown sequence", track: Track{Do: DoComplete, Seq: "nope", First: 10, Count: 2}, err: ErrNoSequence},
		{name: "complete in a dropped sequence", setup: drop("a"), track: Track{Do: DoComplete, Seq: "a", First: 10, Count: 2}, fate: FateCompleted},
		{name: "abandon in a dropped sequence", setup: drop("a"), track: Track{Do: DoAbandon, Seq: "a", First: 10, Count: 2}, fate: FateAbandoned},
		{name: "extend in a dropped sequence", setup: drop("a"), track: Track{Do: DoExtend, Seq: "a", First: 10, Count: 2, TTLMs: 5}, fate: FateOpen},
		{name: "expire in a dropped sequence", setup: drop("a"), track: Track{Do: DoExpire, Seq: "a", First: 10, Count: 2}, fate: FateExpired},
		{name: "a's handle in b", track: Track{Do: DoComplete, Seq: "b", First: 10, Count: 2}, fate: FateUnknown},
		{name: "a's handle in the default sequence", track: Track{Do: DoComplete, First: 10, Count: 2}, fate: FateUnknown},
		{name: "a part of a reservation", track: Track{Do: DoComplete, Seq: "a", First: 10, Count: 1}, err: ErrUnknownReservation},
		{name: "untracked IDs below the mark", track: Track{Do: DoComplete, Seq: "a", First: 12, Count: 1}, fate: FateCompleted},
		{name: "IDs above the mark", track: Track{Do: DoComplete, Seq: "a", First: 100, Count: 1}, fate: FateUnknown},
		{name: "in a sequence never reserved, below its mark", setup: func(f *FSM) {
			applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "c", Kind: KindDense}, 1)
			allocs(t, f, 0, Alloc{Seq: "c", Count: 5})
		}, track: Track{Do: DoAbandon, Seq: "c", First: 1, Count: 2}, fate: FateCompleted},
		{name: "in a sequence never reserved, above its mark", setup: func(f *FSM) {
			applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "c", Kind: KindDense}, 1)
		}, track: Track{Do: DoAbandon, Seq: "c", First: 1, Count: 2}, fate: FateUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := namedFSM(t)
			settleNamed(t, f, namedOpen("a", 2))              // a: 10..11, open
			allocs(t, f, namedNow, Alloc{Seq: "a", Count: 3}) // 12..14 untracked
			if c.setup != nil {
				c.setup(f)
			}
			before := snapshotBytes(t, f)
			o := settleNamed(t, f, c.track).Outcomes[0]
			if !errors.Is(o.Err, c.err) || c.err == nil && o.Err != nil || o.Fate != c.fate {
				t.Fatalf("outcome %+v, want fate %v error %v", o, c.fate, c.err)
			}
			if !o.Changed && !bytes.Equal(before, snapshotBytes(t, f)) {
				t.Fatalf("an outcome that changed nothing changed the state:\n%s\n%s", before, snapshotBytes(t, f))
			}
		})
	}
}

func drop(name string) func(*FSM) {
	return func(f *FSM) {
		applyOK(&testing.T{}, f, Command{Op: OpDropSequence, Sequence: name}, 1)
	}
}

// Sequences are independent: W of one moves past its untracked IDs and
// its settled reservations while another's reservation stays open, and a
// dropped sequence keeps its reservations and W; created again, it goes
// on from both.
func TestNamedTrackingIsPerSequence(t *testing.T) {
	f := namedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "c", Kind: KindDense}, 1)
	if w := seqW(t, f, "c"); w != 1 {
		t.Fatalf("W of a sequence never used %d, want its mark 1", w)
	}
	r := settleNamed(t, f, namedOpen("a", 2), namedOpen("c", 4))
	if w := r.SeqSettled; w["a"] != 10 || w["c"] != 1 || len(w) != 2 {
		t.Fatalf("W after the opens %v, want a:10 c:1", w)
	}
	if _, ok := f.TrackedSequence("b"); ok {
		t.Fatal("b has tracking, though never reserved")
	}
	// c settles; a's open reservation holds back only a.
	r = settleNamed(t, f, Track{Do: DoComplete, Seq: "c", First: 1, Count: 4})
	if r.SeqSettled["c"] != 5 || seqW(t, f, "a") != 10 {
		t.Fatalf("W of c %d (want 5), of a %d (want 10)", r.SeqSettled["c"], seqW(t, f, "a"))
	}
	// Untracked IDs of c move its W with the mark; of a, not past its open one.
	r = applyOK(t, f, Command{Op: OpSettle, Allocs: []Alloc{{Seq: "c", Count: 3}, {Seq: "a", Count: 3}}}, 1)
	if r.SeqSettled["c"] != 8 || r.SeqSettled["a"] != 10 {
		t.Fatalf("W after untracked IDs %v, want c:8 a:10", r.SeqSettled)
	}
	// The default sequence's W is the default's alone.
	if w := f.Settled(); w != 0 {
		t.Fatalf("the default sequence's W %d, want 0: nothing of it was tracked", w)
	}
	applyOK(t, f, Command{Op: OpDropSequence, Sequence: "a"}, 1)
	if w := seqW(t, f, "a"); w != 10 {
		t.Fatalf("W of dropped a %d, want 10", w)
	}
	settleNamed(t, f, Track{Do: DoAbandon, Seq: "a", First: 10, Count: 2})
	if w := seqW(t, f, "a"); w != 15 {
		t.Fatalf("W of dropped a after its reservation was abandoned %d, want its mark 15", w)
	}
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "a", Kind: KindDense, Start: 10}, 1)
	o := settleNamed(t, f, namedOpen("a", 1), Track{Do: DoComplete, Seq: "a", First: 10, Count: 2}).Outcomes
	if o[0].First != 15 || o[1].Fate != FateAbandoned {
		t.Fatalf("a created again: %+v, want IDs from 15 and the old reservation still abandoned", o)
	}
}

// A keyed named Reserve answers its first reservation, in its sequence,
// with where it stands now; the key with another sequence, the default
// one, a call for IDs, or another count is ErrKeyReused; a retry after
// the sequence was dropped still answers the kept reservation.
func TestNamedKeyedOpen(t *testing.T) {
	f := namedFSM(t)
	k := Keyed{Caller: "CN=w", Key: "order-1"}
	keyed := func(seq string, count uint64) Track {
		tr := namedOpen(seq, count)
		tr.Keyed = k
		return tr
	}
	o := settleNamed(t, f, keyed("a", 2), keyed("a", 2)).Outcomes
	if o[0].First != 10 || !o[0].Changed || o[1].First != 10 || o[1].Changed || o[1].Fate != FateOpen {
		t.Fatalf("a keyed open and its retry in one entry: %+v", o)
	}
	if s, _ := f.Sequence("a"); s.Next != 12 {
		t.Fatalf("mark of a %d after a keyed open and its retry, want 12: a retry takes no IDs", s.Next)
	}
	for _, c := range []struct {
		name  string
		track Track
	}{
		{"another sequence", keyed("b", 2)},
		{"another count", keyed("a", 3)},
		{"the default sequence", Track{Do: DoOpen, First: 1 << 30, Count: 2, TTLMs: 1000, Keyed: k, Term: 1}},
	} {
		r := applyOK(t, f, Command{Op: OpSettle, Tracks: []Track{c.track}, Frontier: 1<<30 + 10, NowMs: namedNow}, 1)
		if !errors.Is(r.Outcomes[0].Err, ErrKeyReused) {
			t.Errorf("%s: %+v, want ErrKeyReused", c.name, r.Outcomes[0])
		}
	}
	if got := allocs(t, f, namedNow, Alloc{Seq: "a", Count: 2, Keyed: k})[0]; !errors.Is(got.Err, ErrKeyReused) {
		t.Fatalf("alloc with a named reservation's key: %+v", got)
	}
	// A key first used for the default sequence's reservation, or for IDs,
	// is refused for a named one.
	k2 := Keyed{Key: "default-one"}
	if o := applyOK(t, f, Command{Op: OpSettle, Frontier: 1<<31 + 10, Tracks: []Track{{Do: DoOpen, First: 1 << 31, Count: 2, TTLMs: 1000, Keyed: k2, Term: 1}}}, 1).Outcomes[0]; o.Err != nil {
		t.Fatal(o.Err)
	}
	allocs(t, f, namedNow, Alloc{Seq: "b", Count: 1, Keyed: Keyed{Key: "ids"}})
	for _, key := range []Keyed{k2, {Key: "ids"}} {
		tr := namedOpen("a", 2)
		tr.Keyed = key
		if o := settleNamed(t, f, tr).Outcomes[0]; !errors.Is(o.Err, ErrKeyReused) {
			t.Errorf("named open with key %q used before: %+v, want ErrKeyReused", key.Key, o)
		}
	}
	settleNamed(t, f, Track{Do: DoComplete, Seq: "a", First: 10, Count: 2})
	applyOK(t, f, Command{Op: OpDropSequence, Sequence: "a"}, 1)
	f = restored(t, f)
	if o := settleNamed(t, f, keyed("a", 2)).Outcomes[0]; o.Err != nil || o.First != 10 || o.Fate != FateCompleted || o.TTLMs != 1000 {
		t.Fatalf("retry after complete, drop and restore: %+v, want the completed reservation at 10", o)
	}
}

// Tracks of named sequences need cluster version 3; Decode refuses a
// named open that names IDs or a term, a bad name, and reads what was
// written before named reservations as the default sequence's.
func TestNamedTracksVersionAndDecode(t *testing.T) {
	f := trackedFSM(t, 1<<40)
	if r := applyCmd(t, f, Command{Op: OpSettle, Tracks: []Track{{Do: DoComplete, Seq: "a", First: 1, Count: 1}}}, 1); !errors.Is(r.Err, ErrClusterVersion) {
		t.Fatalf("a named track at cluster version 2: %v, want ErrClusterVersion", r.Err)
	}
	for _, tr := range []string{
		`{"do":"open","seq":"a","first":1,"count":1,"ttl_ms":1}`,
		`{"do":"open","seq":"a","count":0,"ttl_ms":1}`,
		`{"do":"open","seq":"a","count":1,"ttl_ms":0}`,
		`{"do":"open","seq":"a","count":1,"ttl_ms":1,"term":2}`,
		`{"do":"open","seq":"a","count":1,"ttl_ms":1,"key":"k","term":2}`,
		`{"do":"open","seq":"a","count":1,"ttl_ms":1,"any_ttl":true}`,
		`{"do":"open","seq":"A","count":1,"ttl_ms":1}`,
		`{"do":"complete","seq":"a","first":0,"count":1}`,
		`{"do":"complete","seq":"a b","first":1,"count":1}`,
		`{"do":"complete","seq":"a","first":1,"count":1,"key":"k"}`,
	} {
		if _, err := Decode([]byte(`{"v":1,"op":"settle","tracks":[` + tr + `]}`)); !errors.Is(err, ErrInvalid) {
			t.Errorf("track %s: %v, want ErrInvalid", tr, err)
		}
	}
	for _, tr := range []Track{
		{Do: DoOpen, Seq: "a", Count: 3, TTLMs: 5},
		{Do: DoOpen, Seq: "a", Count: 3, TTLMs: 5, Keyed: Keyed{Caller: "c", Key: "k"}, AnyTTL: true},
		{Do: DoExpire, Seq: "a.b-c_d", First: 7, Count: 3, Ext: 2},
	} {
		c := Command{Op: OpSettle, Tracks: []Track{tr}}
		got, err := Decode(mustEncode(t, c))
		if err != nil || got.Tracks[0] != tr {
			t.Errorf("round trip of %+v: %+v, %v", tr, got.Tracks, err)
		}
	}
	old := `{"v":1,"op":"settle","tracks":[{"do":"open","first":10,"count":2,"ttl_ms":1000}],"frontier":20}`
	if c, err := Decode([]byte(old)); err != nil || c.Tracks[0].Seq != "" {
		t.Fatalf("a track written before named reservations: %+v, %v; want the default sequence's", c.Tracks, err)
	}
}

// A snapshot carries each named sequence's tracking, State() leaves it
// out, a snapshot of a cluster that never reserved a named sequence has
// no field for it (an older node reads it), and a snapshot written
// before named reservations loads.
func TestNamedTrackingSnapshots(t *testing.T) {
	f := namedFSM(t)
	if b := snapshotBytes(t, f); bytes.Contains(b, []byte("sequence_tracking")) {
		t.Fatalf("a snapshot without named reservations names them: %s", b)
	}
	settleNamed(t, f, namedOpen("a", 2), namedOpen("a", 1), namedOpen("b", 1))
	settleNamed(t, f, Track{Do: DoAbandon, Seq: "a", First: 10, Count: 2})
	if st := f.State(); st.SeqTracking != nil {
		t.Fatalf("State() carries the named tracking: %v", st.SeqTracking)
	}
	g := restored(t, f)
	for _, name := range []string{"a", "b"} {
		want, _ := f.TrackedSequence(name)
		got, ok := g.TrackedSequence(name)
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if !ok || !bytes.Equal(wj, gj) {
			t.Fatalf("tracking of %q after a restore: %s, want %s", name, gj, wj)
		}
	}
	if got := g.TrackedSequences(); len(got) != 2 || len(got["a"].Open) != 1 || len(got["a"].Dead) != 1 {
		t.Fatalf("TrackedSequences after a restore: %+v", got)
	}
	old := `{"high_water":100,"group":0,"nodes":{},"cluster_version":3,"tracking":{"settled":5,"frontier":5},"sequences":{"a":{"kind":"dense","start":1,"next":4}}}`
	h := New(nil, nil)
	if err := h.Restore(nopCloser{bytes.NewReader([]byte(old))}); err != nil {
		t.Fatalf("a snapshot written before named reservations: %v", err)
	}
	if w := seqW(t, h, "a"); w != 4 {
		t.Fatalf("W of a from an old snapshot %d, want its mark 4", w)
	}
	if o := settleNamed(t, h, namedOpen("a", 1)).Outcomes[0]; o.First != 4 || o.Err != nil {
		t.Fatalf("the first named reservation after an old snapshot: %+v", o)
	}
}

// Two FSMs that apply the same entries, one of them restored from a
// snapshot midway, hold the same state, byte for byte.
func TestNamedTrackingIsDeterministic(t *testing.T) {
	entries := []Command{
		{Op: OpSettle, Tracks: []Track{namedOpen("a", 2), namedOpen("b", 3), namedOpen("a", 1)}, NowMs: namedNow},
		{Op: OpSettle, Allocs: []Alloc{{Seq: "a", Count: 2}, {Seq: "b", Count: 2}}, NowMs: namedNow + 5},
		{Op: OpSettle, Tracks: []Track{{Do: DoAbandon, Seq: "a", First: 10, Count: 2}, {Do: DoExtend, Seq: "a", First: 12, Count: 1, TTLMs: 9}}, NowMs: namedNow},
		{Op: OpSettle, Tracks: []Track{{Do: DoExpire, Seq: "a", First: 12, Count: 1}, {Do: DoExpire, Seq: "a", First: 12, Count: 1, Ext: 1}, namedOpen("b", 1)}, NowMs: namedNow - 1000},
	}
	f, g := namedFSM(t), namedFSM(t)
	for i, c := range entries {
		applyOK(t, f, c, 1)
		applyOK(t, g, c, 1)
		if i == 1 {
			g = restored(t, g)
		}
	}
	if a, b := snapshotBytes(t, f), snapshotBytes(t, g); !bytes.Equal(a, b) {
		t.Fatalf("states differ:\n%s\n%s", a, b)
	}
}

// The dead spans of every named sequence together are bounded: past the
// bound the sequence that buried one forgets its lowest, whose fate is
// then unknown, not completed.
func TestNamedDeadSpansBoundedTogether(t *testing.T) {
	defer func(n int) { maxDeadSpans = n }(maxDeadSpans)
	maxDeadSpans = 4
	f := namedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "c", Kind: KindDense}, 1)
	var handles []Track
	for _, seq := range []string{"a", "c", "a"} {
		for range 2 {
			o := settleNamed(t, f, namedOpen(seq, 1)).Outcomes[0]
			allocs(t, f, 0, Alloc{Seq: seq, Count: 1}) // a gap, so spans do not merge
			handles = append(handles, Track{Do: DoAbandon, Seq: seq, First: o.First, Count: 1})
		}
	}
	for _, h := range handles {
		settleNamed(t, f, h)
	}
	a, _ := f.TrackedSequence("a")
	c, _ := f.TrackedSequence("c")
	if n := len(a.Dead) + len(c.Dead); n != 4 {
		t.Fatalf("%d dead spans kept, want the bound 4", n)
	}
	if len(a.Dead) != 2 || a.Forgotten != 13 {
		t.Fatalf("a kept %v, forgotten %d; want its two newest and 13", a.Dead, a.Forgotten)
	}
	o := settleNamed(t, f, Track{Do: DoComplete, Seq: "a", First: 10, Count: 1}).Outcomes[0]
	if !errors.Is(o.Err, ErrForgotten) {
		t.Fatalf("complete of a forgotten reservation: %+v, want ErrForgotten", o)
	}
	g := restored(t, f)
	if g.state.namedDead != 4 {
		t.Fatalf("after a restore %d dead spans counted, want 4", g.state.namedDead)
	}
	if !strings.Contains(o.Err.Error(), "no longer known") {
		t.Fatalf("message %q", o.Err)
	}
}
