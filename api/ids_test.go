package api

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/seed-e8569b35/ordo/layout"
)

func TestExpandRuns(t *testing.T) {
	runs := []*IDRun{{First: 10, Count: 3, Step: 2}, {First: 17, Count: 1, Step: 0}, {First: 100, Count: 2, Step: 1}}
	ids, err := ExpandRuns(runs, 6)
	if want := []uint64{10, 12, 14, 17, 100, 101}; err != nil || !slices.Equal(ids, want) {
		t.Fatalf("ExpandRuns = %v, %v; want %v", ids, err, want)
	}
}

// TestExpandRunsRefuses: runs that are not exactly the IDs asked for,
// strictly increasing and within 64 bits, give ErrBadRuns and no IDs.
func TestExpandRunsRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    uint64
		runs []*IDRun
	}{
		{"no runs", 1, nil},
		{"too few IDs", 3, []*IDRun{{First: 1, Count: 2, Step: 1}}},
		{"too many IDs in one run", 2, []*IDRun{{First: 1, Count: 3, Step: 1}}},
		{"too many IDs across runs", 2, []*IDRun{{First: 1, Count: 2, Step: 1}, {First: 10, Count: 1, Step: 1}}},
		{"zero count", 1, []*IDRun{{First: 5, Count: 0, Step: 1}, {First: 6, Count: 1, Step: 1}}},
		{"nil run", 1, []*IDRun{nil}},
		{"step 0", 2, []*IDRun{{First: 5, Count: 2, Step: 0}}},
		{"runs going down", 2, []*IDRun{{First: 10, Count: 1, Step: 1}, {First: 5, Count: 1, Step: 1}}},
		{"runs repeating an ID", 3, []*IDRun{{First: 10, Count: 2, Step: 1}, {First: 11, Count: 1, Step: 1}}},
		{"run wraps past 2^64", 2, []*IDRun{{First: math.MaxUint64, Count: 2, Step: 1}}},
		{"step wraps past 2^64", 2, []*IDRun{{First: 10, Count: 2, Step: math.MaxUint64}}},
		{"count times step past 2^64", 3, []*IDRun{{First: 0, Count: 3, Step: 1 << 63}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ids, err := ExpandRuns(tt.runs, tt.n)
			if !errors.Is(err, ErrBadRuns) || ids != nil {
				t.Fatalf("ExpandRuns(%d) = %v, %v; want nil, ErrBadRuns", tt.n, ids, err)
			}
		})
	}
}

// TestRunReaderSkips: IDs skipped are checked as IDs taken are, and a
// skip moves the reader past them without holding them.
func TestRunReaderSkips(t *testing.T) {
	r := NewRunReader([]*IDRun{{First: 1, Count: 4, Step: 1}, {First: 10, Count: 2, Step: 5}})
	if err := r.Skip(3); err != nil {
		t.Fatal(err)
	}
	ids, err := r.Take(2, nil)
	if want := []uint64{4, 10}; err != nil || !slices.Equal(ids, want) {
		t.Fatalf("Take after Skip = %v, %v; want %v", ids, err, want)
	}
	if r.Done() {
		t.Fatal("Done with one ID left")
	}
	if err := r.Skip(2); !errors.Is(err, ErrBadRuns) {
		t.Fatalf("Skip past the end = %v, want ErrBadRuns", err)
	}

	bad := NewRunReader([]*IDRun{{First: 5, Count: 1, Step: 1}, {First: 5, Count: 1, Step: 1}})
	if err := bad.Skip(2); !errors.Is(err, ErrBadRuns) {
		t.Fatalf("Skip over a repeated ID = %v, want ErrBadRuns", err)
	}
}

// TestRunReaderApart: after Apart, the IDs read next (another sequence's)
// need not be above those read before, but must begin a run; within a
// call they are checked as ever. Apart inside a run is refused.
func TestRunReaderApart(t *testing.T) {
	r := NewRunReader([]*IDRun{{First: 100, Count: 2, Step: 1}, {First: 5, Count: 2, Step: 1}, {First: 9, Count: 1, Step: 1}, {First: 1, Count: 1, Step: 1}})
	if err := r.Apart(); err != nil {
		t.Fatalf("Apart at the start: %v", err)
	}
	first, err := r.Take(2, nil)
	if err != nil || !slices.Equal(first, []uint64{100, 101}) {
		t.Fatalf("first call: %v, %v", first, err)
	}
	if err := r.Apart(); err != nil {
		t.Fatalf("Apart at a run's start: %v", err)
	}
	second, err := r.Take(3, nil)
	if err != nil || !slices.Equal(second, []uint64{5, 6, 9}) {
		t.Fatalf("second call, below the first: %v, %v; want [5 6 9]", second, err)
	}
	if _, err := r.Take(1, nil); !errors.Is(err, ErrBadRuns) {
		t.Fatalf("a run going down within a call, without Apart: %v, want ErrBadRuns", err)
	}

	inside := NewRunReader([]*IDRun{{First: 100, Count: 5, Step: 1}})
	if _, err := inside.Take(2, nil); err != nil {
		t.Fatal(err)
	}
	if err := inside.Apart(); !errors.Is(err, ErrBadRuns) {
		t.Fatalf("Apart inside a run: %v, want ErrBadRuns", err)
	}
}

// TestRuns: a block across time units is one run per unit, and the
// clients' decoder reads back every tick in order, in the group asked.
func TestRuns(t *testing.T) {
	for _, name := range []string{"default", "sonyflake", "instagram"} {
		t.Run(name, func(t *testing.T) {
			l := layout.MustPreset(name)
			perUnit := uint64(1) << l.SeqBits
			first, count := 7*perUnit+perUnit-3, 2*perUnit+5
			runs := Runs(l, 1, first, count)
			if len(runs) != 4 {
				t.Fatalf("%d runs, want 4 (3 IDs, a full unit, a full unit, 2 IDs)", len(runs))
			}
			ids, err := ExpandRuns(runs, count)
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				if got, want := l.Tick(id), first+uint64(i); got != want {
					t.Fatalf("ID %d has tick %d, want %d", i, got, want)
				}
				if g := l.Decode(id).Group; g != 1 {
					t.Fatalf("ID %d has group %d, want 1", i, g)
				}
			}
		})
	}
}

// TestWideRuns checks that a 128-bit layout's block goes out as ticks,
// step 1, in one run across time units.
func TestWideRuns(t *testing.T) {
	type block struct{ First, Count uint64 }
	l := layout.MustPreset("uuidv7")
	perUnit := uint64(1) << l.SeqBits
	b := block{First: 7*perUnit + perUnit - 3, Count: 2*perUnit + 5}
	runs := Runs(l, 1, b.First, b.Count)
	if len(runs) != 1 || runs[0].First != b.First || uint64(runs[0].Count) != b.Count || runs[0].Step != 1 {
		t.Fatalf("runs %v, want one run of ticks %d..+%d", runs, b.First, b.Count)
	}
	// Only the count field's width splits ticks, wherever the block starts.
	for _, b := range []block{{First: 3*math.MaxUint32 - 1, Count: 5}, {First: 1 << 40, Count: math.MaxUint32 + 3}} {
		runs := Runs(l, 1, b.First, b.Count)
		want := []uint64{b.Count}
		if b.Count > math.MaxUint32 {
			want = []uint64{math.MaxUint32, b.Count - math.MaxUint32}
		}
		next := b.First
		for i, r := range runs {
			if i >= len(want) || r.First != next || uint64(r.Count) != want[i] || r.Step != 1 {
				t.Fatalf("block %+v: runs %v, want counts %v from %d", b, runs, want, b.First)
			}
			next += uint64(r.Count)
		}
		if len(runs) != len(want) {
			t.Fatalf("block %+v: runs %v, want counts %v", b, runs, want)
		}
	}
}
