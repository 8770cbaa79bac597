package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// trackedFSM is an FSM at cluster version 2 with a high-water mark.
func trackedFSM(t testing.TB, highWater uint64) *FSM {
	t.Helper()
	f := New(nil, nil)
	applyOK(t, f, Command{Op: OpReserve, UpTo: highWater}, 1)
	applyOK(t, f, Command{Op: OpClusterVersion, ClusterVersion: 2}, 1)
	return f
}

func settleOK(t testing.TB, f *FSM, frontier uint64, tracks ...Track) Result {
	t.Helper()
	return applyOK(t, f, Command{Op: OpSettle, Frontier: frontier, Tracks: tracks}, 1)
}

// modelRes is the reference model of one reservation: its fate and
// extension count, decided by the rules the issue states, not by the
// FSM's code.
type modelRes struct {
	first, count uint64
	fate         Fate
	ext          uint64
}

// step is one Track a test applies to reservation res of the model.
type step struct {
	do    Do
	res   int
	stale bool // an Expire judged before the last Extend
}

func (s step) track(m []modelRes) Track {
	r := m[s.res]
	tr := Track{Do: s.do, First: r.first, Count: r.count, TTLMs: 1000, Ext: r.ext}
	if s.stale {
		tr.Ext = r.ext + 1 // never the current count
	}
	return tr
}

// next is the model's fate after s, and the Outcome the FSM must give.
func (s step) next(r modelRes) (modelRes, Fate) {
	if r.fate != FateOpen {
		return r, r.fate // a closed reservation's fate never changes
	}
	switch {
	case s.do == DoComplete:
		r.fate = FateCompleted
	case s.do == DoAbandon:
		r.fate = FateAbandoned
	case s.do == DoExtend:
		r.ext++
	case s.do == DoExpire && !s.stale:
		r.fate = FateExpired
	}
	return r, r.fate
}

// modelW is W as the issue defines it: below the frontier, below every
// open reservation.
func modelW(m []modelRes, frontier uint64) uint64 {
	w := frontier
	for _, r := range m {
		if r.fate == FateOpen {
			w = min(w, r.first)
		}
	}
	return w
}

// TestTrackingEverySequence is a model check: three reservations (with an
// untracked gap between two of them) and every sequence of up to four
// Tracks over them, each applied alone or all in one entry, and again
// across a snapshot and restore taken after each step. On each it checks
// every Outcome against the model, that W equals the model's and never
// goes down, that a closed fate never changes (so nothing completes after
// it expired), and that W never passes an open reservation.
func TestTrackingEverySequence(t *testing.T) {
	var alphabet []step
	for res := range 3 {
		for _, do := range []Do{DoComplete, DoAbandon, DoExtend, DoExpire} {
			alphabet = append(alphabet, step{do: do, res: res})
		}
		alphabet = append(alphabet, step{do: DoExpire, res: res, stale: true})
	}
	checked := 0
	var walk func(seq []step)
	walk = func(seq []step) {
		for _, mode := range []string{"alone", "one entry", "restored"} {
			checkSequence(t, seq, mode)
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

func checkSequence(t *testing.T, seq []step, mode string) {
	const frontier, highWater = 40, 100
	m := []modelRes{{first: 10, count: 2, fate: FateOpen}, {first: 12, count: 3, fate: FateOpen}, {first: 20, count: 5, fate: FateOpen}}
	tk := &Tracking{}
	var opens []Track
	for _, r := range m {
		opens = append(opens, Track{Do: DoOpen, First: r.first, Count: r.count, TTLMs: 1000})
	}
	settleTracks(t, tk, frontier, highWater, opens...)
	lastW := checkW(t, seq, tk.Settled, 0, m, frontier)
	var batch []Track
	var want []Fate
	for i, s := range seq {
		tr := s.track(m)
		var fate Fate
		m[s.res], fate = s.next(m[s.res])
		if mode == "one entry" {
			batch, want = append(batch, tr), append(want, fate)
			continue
		}
		o := settleTracks(t, tk, frontier, highWater, tr)[0]
		if o.Fate != fate || o.Err != nil || (fate == FateOpen && o.Ext != m[s.res].ext) {
			t.Fatalf("%v step %d (%+v): outcome %+v, want fate %v ext %d", seq, i, tr, o, fate, m[s.res].ext)
		}
		lastW = checkW(t, seq, tk.Settled, lastW, m, frontier)
		if mode == "restored" {
			tk = restoredTracking(t, tk)
		}
	}
	if mode == "one entry" && len(batch) > 0 {
		for i, o := range settleTracks(t, tk, frontier, highWater, batch...) {
			if o.Fate != want[i] || o.Err != nil {
				t.Fatalf("%v in one entry: outcome %d %+v, want %v", seq, i, o, want[i])
			}
		}
		checkW(t, seq, tk.Settled, lastW, m, frontier)
	}
	// Every fate reads back, and again after a restore.
	for _, g := range []*Tracking{restoredTracking(t, tk), tk} {
		for i, r := range m {
			o := settleTracks(t, g, frontier, highWater, Track{Do: DoComplete, First: r.first, Count: r.count})[0]
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

func settleTracks(t *testing.T, tk *Tracking, frontier, highWater uint64, tracks ...Track) []Outcome {
	t.Helper()
	out, err := tk.settle(tracks, frontier, highWater, &Keys{}, 1)
	if err != nil {
		t.Fatalf("settle %+v: %v", tracks, err)
	}
	return out
}

// restoredTracking is tk through a snapshot's encoding and a restore.
func restoredTracking(t *testing.T, tk *Tracking) *Tracking {
	t.Helper()
	b, err := json.Marshal(tk.clone())
	if err != nil {
		t.Fatal(err)
	}
	var g Tracking
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	g.restore()
	return &g
}

func checkW(t *testing.T, seq []step, w, last uint64, m []modelRes, frontier uint64) uint64 {
	t.Helper()
	if w < last {
		t.Fatalf("%v: W went down from %d to %d", seq, last, w)
	}
	if want := modelW(m, frontier); w != want {
		t.Fatalf("%v: W %d, want %d", seq, w, want)
	}
	for _, r := range m {
		if r.fate == FateOpen && w > r.first {
			t.Fatalf("%v: W %d passed open reservation at %d", seq, w, r.first)
		}
	}
	return w
}

// restored is a new FSM restored from f's snapshot.
func restored(t testing.TB, f *FSM) *FSM {
	t.Helper()
	g := New(nil, nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return g
}

func TestTrackingRefusesWhatABrokenLeaderSends(t *testing.T) {
	for _, c := range []struct {
		name        string
		frontier, w uint64
		tracks      []Track
	}{
		{"open below the frontier", 50, 50, []Track{{Do: DoOpen, First: 35, Count: 1, TTLMs: 1}}},
		{"open past its entry's frontier", 50, 50, []Track{{Do: DoOpen, First: 45, Count: 10, TTLMs: 1}}},
		{"opens out of order", 60, 50, []Track{{Do: DoOpen, First: 50, Count: 1, TTLMs: 1}, {Do: DoOpen, First: 45, Count: 1, TTLMs: 1}}},
	} {
		f := trackedFSM(t, 100)
		settleOK(t, f, 40)
		r := settleOK(t, f, c.frontier, c.tracks...)
		last := r.Outcomes[len(r.Outcomes)-1]
		if !errors.Is(last.Err, ErrBelowFrontier) {
			t.Errorf("%s: outcome %+v, want ErrBelowFrontier", c.name, last)
		}
		if w := f.Settled(); w != c.w {
			t.Errorf("%s: W %d, want %d", c.name, w, c.w)
		}
	}
	f := trackedFSM(t, 100)
	if r := applyCmd(t, f, Command{Op: OpSettle, Frontier: 101}, 1); !errors.Is(r.Err, ErrInvalid) || f.Settled() != 0 {
		t.Errorf("a frontier above the high-water mark: %v, W %d; want ErrInvalid and W 0", r.Err, f.Settled())
	}
}

func TestTrackingNamesAReservationByItsFirstTickAndCount(t *testing.T) {
	f := trackedFSM(t, 100)
	settleOK(t, f, 40, Track{Do: DoOpen, First: 10, Count: 5, TTLMs: 1})
	for _, c := range []struct {
		tr   Track
		fate Fate
		err  error
	}{
		{Track{Do: DoComplete, First: 10, Count: 4}, 0, ErrUnknownReservation},
		{Track{Do: DoComplete, First: 50, Count: 1}, FateUnknown, nil},   // above the frontier
		{Track{Do: DoComplete, First: 30, Count: 1}, FateCompleted, nil}, // below it, untracked
		{Track{Do: DoAbandon, First: 10, Count: 5}, FateAbandoned, nil},
		{Track{Do: DoComplete, First: 11, Count: 2}, FateAbandoned, nil}, // inside a dead span
		{Track{Do: DoComplete, First: 14, Count: 2}, FateUnknown, nil},   // across its end
	} {
		o := settleOK(t, f, 40, c.tr).Outcomes[0]
		if o.Fate != c.fate || !errors.Is(o.Err, c.err) || (c.err == nil && o.Err != nil) {
			t.Errorf("%+v: outcome %+v, want fate %v err %v", c.tr, o, c.fate, c.err)
		}
	}
}

// Dead reservations side by side are kept as one span, so a long run of
// expiries costs one entry; fates of different kinds stay apart.
func TestDeadSpansMerge(t *testing.T) {
	f := trackedFSM(t, 100)
	var opens []Track
	for first := uint64(10); first < 20; first += 2 {
		opens = append(opens, Track{Do: DoOpen, First: first, Count: 2, TTLMs: 1})
	}
	settleOK(t, f, 40, opens...)
	for _, first := range []uint64{14, 10, 18, 12} {
		settleOK(t, f, 40, Track{Do: DoExpire, First: first, Count: 2})
	}
	settleOK(t, f, 40, Track{Do: DoAbandon, First: 16, Count: 2})
	want := []Span{{10, 16, FateExpired}, {16, 18, FateAbandoned}, {18, 20, FateExpired}}
	if got := f.Tracked().Dead; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("dead spans %+v, want %+v", got, want)
	}
	if w := f.Settled(); w != 40 {
		t.Fatalf("W %d, want 40", w)
	}
}

// Before the cluster version that reads them, settles are refused by the
// state, as every node refuses them, and the state is unchanged.
func TestSettleNeedsClusterVersion2(t *testing.T) {
	f := New(nil, nil)
	applyOK(t, f, Command{Op: OpReserve, UpTo: 100}, 1)
	if v := f.ClusterVersion(); v != 1 {
		t.Fatalf("ClusterVersion() = %d, want 1", v)
	}
	r := applyCmd(t, f, Command{Op: OpSettle, Frontier: 50}, 1)
	if !errors.Is(r.Err, ErrClusterVersion) || f.Settled() != 0 {
		t.Fatalf("settle at version 1: %v, W %d; want ErrClusterVersion, W 0", r.Err, f.Settled())
	}
	if !strings.Contains(string(snapshotBytes(t, f)), `"high_water"`) || strings.Contains(string(snapshotBytes(t, f)), "tracking") {
		t.Fatalf("a snapshot of a cluster that never tracked carries a tracking field, which older nodes cannot read: %s", snapshotBytes(t, f))
	}
	applyOK(t, f, Command{Op: OpClusterVersion, ClusterVersion: 2}, 1)
	applyOK(t, f, Command{Op: OpClusterVersion, ClusterVersion: 1}, 1)
	if v := f.ClusterVersion(); v != 2 {
		t.Fatalf("ClusterVersion() = %d after raising to 2 and asking for 1, want 2", v)
	}
	if _, err := Decode([]byte(fmt.Sprintf(`{"v":1,"op":"cluster_version","cluster_version":%d}`, Reads+1))); !unreadable(err) {
		t.Fatalf("a cluster version above Reads decodes: %v; a node must stop on it", err)
	}
}

// 100,000 open reservations must snapshot in under 10 MB (issue 24).
func TestSnapshotOfManyOpenReservationsIsSmall(t *testing.T) {
	f := trackedFSM(t, 1<<40)
	const n = 100_000
	tracks := make([]Track, n)
	for i := range tracks {
		tracks[i] = Track{Do: DoOpen, First: 1<<30 + uint64(i)*4096, Count: 64, TTLMs: 30_000}
	}
	settleOK(t, f, 1<<30+n*4096, tracks...)
	b := snapshotBytes(t, f)
	if len(b) > 10<<20 {
		t.Fatalf("snapshot of %d open reservations is %d bytes, over 10 MB", n, len(b))
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil || len(s.Tracking.Open) != n {
		t.Fatalf("snapshot holds %d open reservations (%v), want %d", len(s.Tracking.Open), err, n)
	}
	t.Logf("snapshot of %d open reservations: %d bytes", n, len(b))
}

// An Outcome is Changed only for the Track that changed the reservation:
// a retry, or an Expire judged before an Extend, reads a fate it did not
// set (the leader counts decisions by it).
func TestTrackingOutcomeChangedOnlyByTheDecision(t *testing.T) {
	f := trackedFSM(t, 100)
	open := func(first uint64) Track { return Track{Do: DoOpen, First: first, Count: 1, TTLMs: 1} }
	for i, o := range settleOK(t, f, 40, open(10), open(11), open(12)).Outcomes {
		if o.Err != nil || o.Fate != FateOpen || !o.Changed {
			t.Errorf("open %d: outcome %+v, want open, changed", i, o)
		}
	}
	for i, c := range []struct {
		tr      Track
		fate    Fate
		changed bool
	}{
		{Track{Do: DoComplete, First: 10, Count: 1}, FateCompleted, true},
		{Track{Do: DoComplete, First: 10, Count: 1}, FateCompleted, false},
		{Track{Do: DoAbandon, First: 11, Count: 1}, FateAbandoned, true},
		{Track{Do: DoAbandon, First: 11, Count: 1}, FateAbandoned, false},
		{Track{Do: DoExtend, First: 12, Count: 1, TTLMs: 5}, FateOpen, true},
		{Track{Do: DoExpire, First: 12, Count: 1, Ext: 0}, FateOpen, false}, // judged before the Extend
		{Track{Do: DoExpire, First: 12, Count: 1, Ext: 1}, FateExpired, true},
		{Track{Do: DoExpire, First: 12, Count: 1, Ext: 1}, FateExpired, false},
		{Track{Do: DoAbandon, First: 12, Count: 1}, FateExpired, false},
		{Track{Do: DoComplete, First: 30, Count: 1}, FateCompleted, false}, // untracked
	} {
		o := settleOK(t, f, 40, c.tr).Outcomes[0]
		if o.Err != nil || o.Fate != c.fate || o.Changed != c.changed {
			t.Errorf("%d: %+v: outcome %+v, want fate %s, changed %v", i, c.tr, o, c.fate, c.changed)
		}
	}
}
