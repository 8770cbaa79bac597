package fsm

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// sequencedFSM is an FSM at cluster version 3.
func sequencedFSM(t testing.TB) *FSM {
	t.Helper()
	f := New(nil, nil)
	applyOK(t, f, Command{Op: OpReserve, UpTo: 1 << 40}, 1)
	applyOK(t, f, Command{Op: OpClusterVersion, ClusterVersion: 3}, 1)
	return f
}

func allocs(t testing.TB, f *FSM, nowMs int64, as ...Alloc) []Allocation {
	t.Helper()
	return applyOK(t, f, Command{Op: OpSettle, Allocs: as, NowMs: nowMs}, 1).Allocations
}

// A dense sequence hands out consecutive integers from its start, across
// entries, a snapshot and a restore; a layout sequence follows the
// proposer's clock and never goes back when it moves back.
func TestSequencesHandOutInLogOrder(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "orders", Kind: KindDense, Start: 100}, 1)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "events.t1", Kind: "default", Group: 7}, 1)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC).UnixMilli()
	got := allocs(t, f, now, Alloc{Seq: "orders", Count: 3}, Alloc{Seq: "events.t1", Count: 2}, Alloc{Seq: "orders", Count: 1})
	if got[0].First != 100 || got[2].First != 103 || got[0].Err != nil || got[2].Err != nil {
		t.Fatalf("dense: %+v, want 100 and 103", got)
	}
	l, _ := f.Sequence("events.t1")
	if tick := l.Layout.TickAt(time.UnixMilli(now)); got[1].First != tick {
		t.Fatalf("layout sequence first tick %d, want the clock's %d", got[1].First, tick)
	}
	f = restored(t, f)
	back := allocs(t, f, now-60_000, Alloc{Seq: "orders", Count: 2}, Alloc{Seq: "events.t1", Count: 1})
	if back[0].First != 104 || back[1].First != got[1].First+2 {
		t.Fatalf("after a restore and a clock a minute back: %+v, want 104 and %d", back, got[1].First+2)
	}
}

func TestSequencesRefuseBadDefinitionsAndCalls(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "a", Kind: KindDense}, 1)
	for _, c := range []struct {
		cmd  Command
		want error
	}{
		{Command{Op: OpCreateSequence, Sequence: "a", Kind: KindDense}, ErrSequenceExists},
		{Command{Op: OpDropSequence, Sequence: "b"}, ErrNoSequence},
	} {
		if r := applyCmd(t, f, c.cmd, 1); !errors.Is(r.Err, c.want) {
			t.Errorf("%+v: %v, want %v", c.cmd, r.Err, c.want)
		}
	}
	for _, c := range []Command{
		{Op: OpCreateSequence, Sequence: "Upper", Kind: KindDense},
		{Op: OpCreateSequence, Sequence: "", Kind: KindDense},
		{Op: OpCreateSequence, Sequence: "x", Kind: "nonsense"},
		{Op: OpCreateSequence, Sequence: "x", Kind: KindDense, Group: 1},
		{Op: OpCreateSequence, Sequence: "x", Kind: "default", Start: 5},
		{Op: OpCreateSequence, Sequence: "x", Kind: "default", Group: 1 << 20},
		{Op: OpSettle, Allocs: []Alloc{{Seq: "a", Count: 0}}},
		{Op: OpSettle, Allocs: []Alloc{{Seq: "-a", Count: 1}}},
	} {
		b, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v decodes: %v, want ErrInvalid", c, err)
		}
	}
	if got := allocs(t, f, 0, Alloc{Seq: "nope", Count: 1})[0]; !errors.Is(got.Err, ErrNoSequence) {
		t.Errorf("alloc of an unknown sequence: %+v", got)
	}
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "big", Kind: KindDense, Start: 1<<64 - 3}, 1)
	if got := allocs(t, f, 0, Alloc{Seq: "big", Count: 5})[0]; !errors.Is(got.Err, ErrSequenceFull) {
		t.Errorf("alloc past 2^64: %+v, want ErrSequenceFull", got)
	}
	if got := allocs(t, f, 0, Alloc{Seq: "big", Count: 2})[0]; got.Err != nil || got.First != 1<<64-3 {
		t.Errorf("alloc that fits after a refused one: %+v; a refusal must change nothing", got)
	}
}

// A dropped sequence refuses calls; created again it starts above its old
// mark, and only with its kind.
func TestDroppedSequenceComesBackAboveItsMark(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "s", Kind: KindDense}, 1)
	allocs(t, f, 0, Alloc{Seq: "s", Count: 10})
	applyOK(t, f, Command{Op: OpDropSequence, Sequence: "s"}, 1)
	if got := allocs(t, f, 0, Alloc{Seq: "s", Count: 1})[0]; !errors.Is(got.Err, ErrNoSequence) {
		t.Fatalf("alloc of a dropped sequence: %+v", got)
	}
	if r := applyCmd(t, f, Command{Op: OpCreateSequence, Sequence: "s", Kind: "default"}, 1); !errors.Is(r.Err, ErrSequenceKind) {
		t.Fatalf("created again as another kind: %v", r.Err)
	}
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "s", Kind: KindDense}, 1)
	if got := allocs(t, f, 0, Alloc{Seq: "s", Count: 1})[0]; got.First != 11 {
		t.Fatalf("created again: first %d, want 11 (above the old mark)", got.First)
	}
}

// Before cluster version 3 no node may meet a sequence op it cannot read.
func TestSequencesNeedClusterVersion3(t *testing.T) {
	f := trackedFSM(t, 100) // version 2
	if r := applyCmd(t, f, Command{Op: OpCreateSequence, Sequence: "s", Kind: KindDense}, 1); !errors.Is(r.Err, ErrClusterVersion) {
		t.Fatalf("create at version 2: %v", r.Err)
	}
	if r := applyCmd(t, f, Command{Op: OpSettle, Allocs: []Alloc{{Seq: "s", Count: 1}}}, 1); !errors.Is(r.Err, ErrClusterVersion) {
		t.Fatalf("alloc at version 2: %v", r.Err)
	}
}

// 10,000 sequences snapshot in well under 10 MB.
func TestSnapshotOfManySequencesIsSmall(t *testing.T) {
	f := sequencedFSM(t)
	for i := range 10_000 {
		kind := KindDense
		if i%2 == 1 {
			kind = "default"
		}
		applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "tenant-" + string(rune('a'+i%26)) + "-" + itoa(i), Kind: kind}, 1)
	}
	if n := len(snapshotBytes(t, f)); n > 10<<20 {
		t.Fatalf("snapshot of 10,000 sequences: %d bytes", n)
	} else {
		t.Logf("snapshot of 10,000 sequences: %d bytes", n)
	}
}

func itoa(i int) string { return fmt.Sprint(i) }
