package api

import (
	"testing"

	"github.com/seed-e8569b35/ordo/layout"
)

// Several blocks rendered by one RunBuilder (its runs taken from one
// allocation, more when it runs out) are the runs Runs renders for each,
// in order, and no two runs share memory; a 128-bit layout's block past
// a run's count field splits into runs that hold it all.
func TestReviewRunBuilderRendersWhatRunsDoes(t *testing.T) {
	l := layout.MustPreset("default")
	for _, n := range []int{0, 1, 2, 5} {
		b := NewRunBuilder(n)
		var want []*IDRun
		blocks := [][2]uint64{{4095, 2}, {1 << 20, 9000}, {5, 1}, {7 << 12, 4096 * 3}, {1, 1}}
		for _, bl := range blocks {
			b.Add(l, 3, bl[0], bl[1])
			want = append(want, Runs(l, 3, bl[0], bl[1])...)
		}
		seen := map[*IDRun]bool{}
		if len(b.Runs) != len(want) {
			t.Fatalf("n=%d: %d runs, want %d", n, len(b.Runs), len(want))
		}
		for i, r := range b.Runs {
			if seen[r] {
				t.Fatalf("shared run")
			}
			seen[r] = true
			if r.First != want[i].First || r.Count != want[i].Count || r.Step != want[i].Step {
				t.Fatalf("n=%d run %d: %v want %v", n, i, r, want[i])
			}
		}
	}
	w := layout.MustPreset("uuidv7")
	var b RunBuilder
	b.Add(w, 0, 10, 1<<33)
	total := uint64(0)
	for _, r := range b.Runs {
		total += uint64(r.Count)
	}
	if total != 1<<33 {
		t.Fatalf("wide total %d", total)
	}
}
