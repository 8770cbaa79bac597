package history

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// read, reserve, complete and abandon build settled-order calls tersely,
// times in plain nanoseconds as in history_test.go.
func read(client int, start, end time.Duration, w uint64) SettleOp {
	return SettleOp{Call: CallWatermark, Client: client, Start: start, End: end, Outcome: OK, Mark: w}
}

func reserve(client int, start, end time.Duration, first, count uint64) SettleOp {
	return SettleOp{Call: CallReserve, Client: client, Start: start, End: end, Outcome: OK, First: first, Count: count}
}

func complete(client int, start, end time.Duration, o Outcome, first, count uint64) SettleOp {
	return SettleOp{Call: CallComplete, Client: client, Start: start, End: end, Outcome: o, First: first, Count: count}
}

func abandon(client int, start, end time.Duration, o Outcome, first, count uint64) SettleOp {
	return SettleOp{Call: CallAbandon, Client: client, Start: start, End: end, Outcome: o, First: first, Count: count}
}

// settledTally is a SettledReport without its examples.
type settledTally struct {
	Reads, Reserves, Completes, Abandons             CallCounts
	WatermarkDown, CompletedSettled, ReservedSettled int
}

func settledCounts(r SettledReport) settledTally {
	return settledTally{r.Reads, r.Reserves, r.Completes, r.Abandons, r.WatermarkDown, r.CompletedSettled, r.ReservedSettled}
}

// bruteSettled is the O(n²) reference: each property transcribed pair by
// pair, too plain to be wrong.
func bruteSettled(ops []SettleOp) SettledReport {
	var r SettledReport
	for _, op := range ops {
		r.tally(op)
	}
	// seenAbove reports whether an OK read above tick ended before t.
	seenAbove := func(tick uint64, t time.Duration) bool {
		for _, a := range ops {
			if a.Call == CallWatermark && a.Outcome == OK && a.End < t && a.Mark > tick {
				return true
			}
		}
		return false
	}
	for _, b := range ops {
		if b.Outcome != OK {
			continue
		}
		switch b.Call {
		case CallWatermark:
			for _, a := range ops {
				if a.Call == CallWatermark && a.Outcome == OK && a.End < b.Start && a.Mark > b.Mark {
					r.WatermarkDown++
					break
				}
			}
		case CallReserve:
			if seenAbove(b.First, b.Start) {
				r.ReservedSettled++
			}
		}
	}
	// A reservation counts once: some Complete of it answered OK, and a
	// read above it ended before every Complete of it that was not
	// refused began.
	done := map[[2]uint64]bool{}
	for _, c := range ops {
		key := [2]uint64{c.First, c.Count}
		if c.Call != CallComplete || c.Outcome != OK || done[key] {
			continue
		}
		done[key] = true
		violated := true
		for _, d := range ops {
			if d.Call == CallComplete && d.Outcome != Failed && d.First == c.First && d.Count == c.Count && !seenAbove(c.First, d.Start) {
				violated = false
			}
		}
		if violated {
			r.CompletedSettled++
		}
	}
	return r
}

// mustMatchBruteSettled checks ops with CheckSettled and fails unless its
// counts equal the reference's and every example is a genuine violation.
func mustMatchBruteSettled(t *testing.T, ops []SettleOp) SettledReport {
	t.Helper()
	got := CheckSettled(ops)
	if want := settledCounts(bruteSettled(ops)); settledCounts(got) != want {
		t.Fatalf("CheckSettled disagrees with brute force\n got: %+v\nwant: %+v\nops: %+v", settledCounts(got), want, ops)
	}
	mustGenuineSettledExamples(t, ops, got)
	return got
}

// mustGenuineSettledExamples verifies that each example is a violation of
// its kind, and that each kind counted has between 1 and maxExamples.
func mustGenuineSettledExamples(t *testing.T, ops []SettleOp, r SettledReport) {
	t.Helper()
	per := map[string]int{}
	for _, v := range r.Examples {
		per[v.Kind]++
		if v.A < 0 || v.A >= len(ops) || v.B < 0 || v.B >= len(ops) {
			t.Fatalf("example %v: index out of range", v)
		}
		a, b := ops[v.A], ops[v.B]
		if a.Call != CallWatermark || a.Outcome != OK || b.Outcome != OK || !(a.End < b.Start) {
			t.Fatalf("example %v: %+v does not precede %+v as an OK read", v, a, b)
		}
		var genuine bool
		switch v.Kind {
		case KindWatermarkDown:
			genuine = b.Call == CallWatermark && b.Mark < a.Mark
		case KindCompletedSettled:
			genuine = b.Call == CallComplete && a.Mark > b.First
		case KindReservedSettled:
			genuine = b.Call == CallReserve && a.Mark > b.First
		}
		if !genuine {
			t.Fatalf("example %v: not a violation of its kind: %+v then %+v", v, a, b)
		}
	}
	for kind, n := range map[string]int{
		KindWatermarkDown:    r.WatermarkDown,
		KindCompletedSettled: r.CompletedSettled,
		KindReservedSettled:  r.ReservedSettled,
	} {
		if (n > 0) != (per[kind] > 0) || per[kind] > maxExamples {
			t.Fatalf("kind %s: count %d but %d examples", kind, n, per[kind])
		}
	}
}

// TestCheckSettledBadHistories: each property's violation is caught, by
// its kind, pointing at the two calls; the near misses are not.
func TestCheckSettledBadHistories(t *testing.T) {
	tests := []struct {
		name string
		ops  []SettleOp
		kind string // "" for a valid history
		a, b int
	}{
		{
			name: "W goes down from one read to the next",
			ops:  []SettleOp{read(0, 0, 10, 50), read(1, 20, 30, 40)},
			kind: KindWatermarkDown, a: 0, b: 1,
		},
		{
			name: "W goes down behind an intervening equal read",
			ops:  []SettleOp{read(0, 0, 10, 50), read(1, 12, 15, 50), read(2, 20, 30, 49)},
			kind: KindWatermarkDown, a: 0, b: 2,
		},
		{
			name: "overlapping reads may answer in either order",
			ops:  []SettleOp{read(0, 0, 10, 50), read(1, 10, 30, 40), read(2, 5, 12, 30)},
		},
		{
			name: "a Complete answered OK after W passed its reservation",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), read(1, 20, 30, 101), complete(0, 40, 50, OK, 100, 4),
			},
			kind: KindCompletedSettled, a: 1, b: 2,
		},
		{
			name: "W passes a reservation completed later (the same pair, seen from the Complete)",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), complete(0, 40, 50, OK, 100, 4), read(1, 20, 30, 104),
			},
			kind: KindCompletedSettled, a: 2, b: 1,
		},
		{
			name: "W at the reservation's first tick does not pass it",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), read(1, 20, 30, 100), complete(0, 40, 50, OK, 100, 4),
			},
		},
		{
			name: "a Complete after W passed it that fails is right",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), read(1, 20, 30, 200), complete(0, 40, 50, Failed, 100, 4),
				complete(0, 60, 70, Unknown, 100, 4),
			},
		},
		{
			name: "a Complete concurrent with the read may have taken effect first",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), read(1, 20, 30, 200), complete(0, 25, 50, OK, 100, 4),
			},
		},
		{
			name: "a retried Complete finds the reservation completed by the first",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), complete(0, 15, 35, Unknown, 100, 4), read(1, 20, 30, 200),
				complete(0, 40, 50, OK, 100, 4),
			},
		},
		{
			name: "a refused Complete before the read completed nothing",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), complete(0, 15, 18, Failed, 100, 4), read(1, 20, 30, 200),
				complete(0, 40, 50, OK, 100, 4),
			},
			kind: KindCompletedSettled, a: 2, b: 3,
		},
		{
			name: "a read that failed or is unknown constrains nothing",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4),
				{Call: CallWatermark, Client: 1, Start: 20, End: 30, Outcome: Unknown, Mark: 200},
				{Call: CallWatermark, Client: 1, Start: 20, End: 30, Outcome: Failed, Mark: 200},
				complete(0, 40, 50, OK, 100, 4), read(2, 60, 70, 5),
			},
		},
		{
			name: "an Abandon after W passed the reservation is fine",
			ops: []SettleOp{
				reserve(0, 0, 10, 100, 4), read(1, 20, 30, 200), abandon(0, 40, 50, OK, 100, 4),
			},
		},
		{
			name: "a reservation handed out below a W already read",
			ops:  []SettleOp{read(1, 0, 10, 200), reserve(0, 20, 30, 150, 4)},
			kind: KindReservedSettled, a: 0, b: 1,
		},
		{
			name: "a reservation at W is fine",
			ops:  []SettleOp{read(1, 0, 10, 200), reserve(0, 20, 30, 200, 4)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustMatchBruteSettled(t, tt.ops)
			if got.OK() != (tt.kind == "") {
				t.Fatalf("OK() = %v for %v", got.OK(), got)
			}
			if tt.kind == "" {
				return
			}
			for _, v := range got.Examples {
				if v.Kind == tt.kind && v.A == tt.a && v.B == tt.b {
					return
				}
			}
			t.Fatalf("missing example %s %d, %d in %v", tt.kind, tt.a, tt.b, got)
		})
	}
}

// TestCheckSettledCountsExactly: each read that saw W go down counts
// once however many reads before it were higher, and each reservation
// once however many Completes answered OK.
func TestCheckSettledCountsExactly(t *testing.T) {
	ops := []SettleOp{
		read(0, 0, 10, 50), read(1, 0, 10, 60),
		read(2, 20, 30, 40), read(3, 20, 30, 55), read(4, 20, 30, 60),
		complete(5, 40, 50, OK, 10, 1), complete(5, 60, 70, OK, 10, 1), complete(6, 40, 50, OK, 59, 2),
		complete(7, 40, 50, OK, 60, 1),
	}
	r := mustMatchBruteSettled(t, ops)
	if r.WatermarkDown != 2 || r.CompletedSettled != 2 || r.ReservedSettled != 0 {
		t.Fatalf("counts %+v, want 2 reads down and 2 reservations completed past W", settledCounts(r))
	}
	if r.Reads.OK != 5 || r.Completes.OK != 4 {
		t.Fatalf("tallies %+v", settledCounts(r))
	}
}

// validSettled simulates a correct cluster: every call takes effect at
// its own point inside its interval, in order; W rises to the oldest
// open reservation whenever one closes, and only open reservations are
// completed. The checker must find nothing.
func validSettled(rng *rand.Rand, n int) []SettleOp {
	var ops []SettleOp
	next, w := uint64(1), uint64(1)
	open := map[uint64]uint64{} // first -> count
	var handed [][2]uint64      // in tick order
	oldest := 0                 // handed[:oldest] are all closed
	for i := range n {
		p := time.Duration(10 * i)
		start, end := p-time.Duration(rng.IntN(40)), p+time.Duration(rng.IntN(40))
		switch k := rng.IntN(10); {
		case k < 3:
			c := 1 + uint64(rng.IntN(4))
			open[next] = c
			handed = append(handed, [2]uint64{next, c})
			ops = append(ops, reserve(i%8, start, end, next, c))
			next += c
		case k < 6 && len(handed) > 0:
			h := handed[rng.IntN(len(handed))]
			if _, isOpen := open[h[0]]; isOpen {
				delete(open, h[0])
				ops = append(ops, complete(i%8, start, end, OK, h[0], h[1]))
			} else {
				ops = append(ops, complete(i%8, start, end, Failed, h[0], h[1]))
			}
		case k < 7 && len(handed) > 0:
			h := handed[rng.IntN(len(handed))]
			delete(open, h[0]) // abandoned, or expired: settled either way
			ops = append(ops, abandon(i%8, start, end, OK, h[0], h[1]))
		default:
			next++ // a plain Next: settled when handed out
			ops = append(ops, read(i%8, start, end, w))
		}
		// W is the oldest open reservation, or next if none is open.
		for ; oldest < len(handed); oldest++ {
			if _, isOpen := open[handed[oldest][0]]; isOpen {
				break
			}
		}
		w = next
		if oldest < len(handed) {
			w = handed[oldest][0]
		}
	}
	return ops
}

func TestCheckSettledValidHistory(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 5))
	ops := validSettled(rng, 3000)
	r := mustMatchBruteSettled(t, ops)
	if !r.OK() || len(r.Examples) != 0 {
		t.Fatalf("valid history rejected: %v", r)
	}
	if r.Reads.OK == 0 || r.Reserves.OK == 0 || r.Completes.OK == 0 || r.Completes.Failed == 0 {
		t.Fatalf("the simulation made too few calls of some kind: %+v", settledCounts(r))
	}
}

func TestCheckSettledMatchesBruteForceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(20260424, 9))
	outcomes := []Outcome{OK, OK, OK, Failed, Unknown}
	for iter := range 3000 {
		ops := make([]SettleOp, rng.IntN(14))
		for i := range ops {
			// Small ranges make equal times and marks common, where
			// off-by-one bugs hide.
			start := time.Duration(rng.IntN(20))
			end := start + time.Duration(rng.IntN(8))
			if rng.IntN(40) == 0 {
				end = start - 1 // malformed, but the two must still agree
			}
			first, count := uint64(rng.IntN(6)), uint64(1+rng.IntN(2))
			o := outcomes[rng.IntN(len(outcomes))]
			switch rng.IntN(4) {
			case 0:
				ops[i] = read(i, start, end, uint64(rng.IntN(8)))
			case 1:
				ops[i] = reserve(i, start, end, first, count)
			case 2:
				ops[i] = complete(i, start, end, o, first, count)
			default:
				ops[i] = abandon(i, start, end, o, first, count)
			}
			if ops[i].Call != CallComplete && ops[i].Call != CallAbandon {
				ops[i].Outcome = o
			}
		}
		t.Run(fmt.Sprint(iter), func(t *testing.T) { mustMatchBruteSettled(t, ops) })
		if t.Failed() {
			return
		}
	}
}

func TestCheckSettledExamplesBounded(t *testing.T) {
	var ops []SettleOp
	for i := range 1000 {
		at := time.Duration(100 * i)
		ops = append(ops, read(0, at, at+1, uint64(1000-i)), complete(1, at+2, at+3, OK, uint64(i), 1))
	}
	r := CheckSettled(ops)
	mustGenuineSettledExamples(t, ops, r)
	if r.WatermarkDown != 999 {
		t.Fatalf("WatermarkDown = %d, want 999", r.WatermarkDown)
	}
}

// TestReportOKIncludesSettled: a settled-order violation fails the whole
// report, and its summary and examples are printed with it.
func TestReportOKIncludesSettled(t *testing.T) {
	r := Check([]Op{ok(0, 0, 10, 5)})
	r.Settled = CheckSettled([]SettleOp{read(0, 0, 10, 50), read(1, 20, 30, 40)})
	if r.OK() {
		t.Fatal("a report whose W went down is OK")
	}
	s := r.String()
	if !strings.HasPrefix(s, "history FAIL:") || !strings.Contains(s, "watermark-down=1") || !strings.Contains(s, KindWatermarkDown+": ops 0, 1") {
		t.Fatalf("unexpected report:\n%s", s)
	}
	if s := Check(nil).String(); strings.Contains(s, "settled") {
		t.Fatalf("a history without settled-order calls reports them: %q", s)
	}
}

func TestSettleRecorder(t *testing.T) {
	rec := NewRecorder()
	p := rec.BeginSettle(3, CallComplete, 100, 4)
	ops := rec.SettleOps()
	if len(ops) != 1 || ops[0].Outcome != Unknown || ops[0].Err != InFlight || ops[0].First != 100 || ops[0].Count != 4 {
		t.Fatalf("in-flight call recorded as %+v", ops)
	}
	rec.BeginSettle(1, CallWatermark, 0, 0).Mark(77)
	rec.BeginSettle(2, CallReserve, 0, 0).Reserved(200, 3)
	rec.BeginSettle(2, CallAbandon, 200, 3).Fail(errors.New("completed"))
	p.OK()
	ops = rec.SettleOps()
	want := []SettleOp{
		{Call: CallComplete, Client: 3, Outcome: OK, First: 100, Count: 4},
		{Call: CallWatermark, Client: 1, Outcome: OK, Mark: 77},
		{Call: CallReserve, Client: 2, Outcome: OK, First: 200, Count: 3},
		{Call: CallAbandon, Client: 2, Outcome: Failed, First: 200, Count: 3, Err: "completed"},
	}
	for i, op := range ops {
		if op.End < op.Start || (i > 0 && op.Start < ops[i-1].Start) {
			t.Fatalf("call %d: times out of order: %+v", i, ops)
		}
		op.Start, op.End = 0, 0
		if op != want[i] {
			t.Fatalf("call %d recorded as %+v, want %+v", i, op, want[i])
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("ending a call twice did not panic")
		}
	}()
	p.Unknown(errors.New("again"))
}

func BenchmarkCheckSettled(b *testing.B) {
	ops := validSettled(rand.New(rand.NewPCG(3, 4)), 1e6)
	b.ReportAllocs()
	for b.Loop() {
		if r := CheckSettled(ops); !r.OK() {
			b.Fatal(r)
		}
	}
}
