package api

import (
	"errors"
	"math"
	"slices"
	"testing"
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
