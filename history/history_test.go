package history

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// ok, failed and unknown build ops tersely; times are plain nanoseconds so
// crafted histories read as small integers.
func ok(client int, start, end time.Duration, ids ...uint64) Op {
	return Op{Client: client, Start: start, End: end, Outcome: OK, IDs: ids}
}

func failed(client int, start, end time.Duration, ids ...uint64) Op {
	return Op{Client: client, Start: start, End: end, Outcome: Failed, IDs: ids, Err: "rejected"}
}

func unknown(client int, start, end time.Duration, ids ...uint64) Op {
	return Op{Client: client, Start: start, End: end, Outcome: Unknown, IDs: ids, Err: "timeout"}
}

// tally is a Report without its examples, so counts compare with ==.
type tally struct {
	Attempted, Acknowledged, Failed, Unknown, IDs int
	Duplicates                                    int
	OrderViolations                               int64
	NotIncreasing, Interleaved                    int
}

func counts(r Report) tally {
	return tally{r.Attempted, r.Acknowledged, r.Failed, r.Unknown, r.IDs,
		r.Duplicates, r.OrderViolations, r.NotIncreasing, r.Interleaved}
}

// bruteCheck is the O(n²)-and-worse reference: a direct transcription of the
// four properties, trusted because it is too simple to be wrong.
func bruteCheck(ops []Op) Report {
	var r Report
	r.Attempted = len(ops)
	var acked []int
	for i, op := range ops {
		switch op.Outcome {
		case OK:
			r.Acknowledged++
			if len(op.IDs) > 0 {
				acked = append(acked, i)
			}
		case Failed:
			r.Failed++
		default:
			r.Unknown++
		}
	}
	minOf := func(ids []uint64) uint64 {
		m := ids[0]
		for _, id := range ids {
			m = min(m, id)
		}
		return m
	}
	maxOf := func(ids []uint64) uint64 {
		m := ids[0]
		for _, id := range ids {
			m = max(m, id)
		}
		return m
	}
	seen := map[uint64]int{}
	for _, i := range acked {
		ids := ops[i].IDs
		r.IDs += len(ids)
		for _, id := range ids {
			if seen[id] > 0 {
				r.Duplicates++
			}
			seen[id]++
		}
		for j := 1; j < len(ids); j++ {
			if ids[j] <= ids[j-1] {
				r.NotIncreasing++
				break
			}
		}
	}
	for _, a := range acked {
		for _, b := range acked {
			if a != b && ops[a].End < ops[b].Start && minOf(ops[b].IDs) <= maxOf(ops[a].IDs) {
				r.OrderViolations++
			}
		}
	}
	for _, a := range acked {
		lo, hi := minOf(ops[a].IDs), maxOf(ops[a].IDs)
		inside := false
		for _, b := range acked {
			if a == b {
				continue
			}
			for _, id := range ops[b].IDs {
				if lo < id && id < hi {
					inside = true
				}
			}
		}
		if inside {
			r.Interleaved++
		}
	}
	return r
}

// mustMatchBrute checks ops with Check and fails unless its counts equal
// the brute-force reference and every example is a genuine violation.
func mustMatchBrute(t *testing.T, ops []Op) Report {
	t.Helper()
	got := Check(ops)
	if want := counts(bruteCheck(ops)); counts(got) != want {
		t.Fatalf("Check disagrees with brute force\n got: %+v\nwant: %+v\nops: %+v", counts(got), want, ops)
	}
	mustGenuineExamples(t, ops, got)
	return got
}

// mustGenuineExamples verifies that every example really is a violation of
// its kind, that each kind with a nonzero count has at least one example,
// and that no kind exceeds maxExamples.
func mustGenuineExamples(t *testing.T, ops []Op, r Report) {
	t.Helper()
	per := map[string]int{}
	inRange := func(i int) bool { return i >= 0 && i < len(ops) }
	for _, v := range r.Examples {
		per[v.Kind]++
		if !inRange(v.A) || (v.B != -1 && !inRange(v.B)) {
			t.Fatalf("example %v: index out of range", v)
		}
		a := ops[v.A]
		switch v.Kind {
		case KindDuplicate:
			b := ops[v.B]
			shared := 0
			for _, x := range a.IDs {
				for _, y := range b.IDs {
					if x == y {
						shared++
					}
				}
			}
			// Within one response an ID shared with itself counts once per
			// copy, so a genuine in-response duplicate yields more than len.
			if (v.A != v.B && shared == 0) || (v.A == v.B && shared <= len(a.IDs)) {
				t.Fatalf("example %v: no shared id", v)
			}
		case KindOrder:
			b := ops[v.B]
			if v.A == v.B || !(a.End < b.Start) || slicesMin(b.IDs) > slicesMax(a.IDs) {
				t.Fatalf("example %v: not an order violation", v)
			}
		case KindNotIncreasing:
			bad := false
			for j := 1; j < len(a.IDs); j++ {
				bad = bad || a.IDs[j] <= a.IDs[j-1]
			}
			if v.B != -1 || !bad {
				t.Fatalf("example %v: ids %v are increasing", v, a.IDs)
			}
		case KindInterleaved:
			lo, hi := slicesMin(a.IDs), slicesMax(a.IDs)
			inside := false
			for _, id := range ops[v.B].IDs {
				inside = inside || (lo < id && id < hi)
			}
			if v.A == v.B || !inside {
				t.Fatalf("example %v: no foreign id inside range", v)
			}
		default:
			t.Fatalf("example %v: unknown kind", v)
		}
	}
	for kind, n := range map[string]int64{
		KindDuplicate:     int64(r.Duplicates),
		KindOrder:         r.OrderViolations,
		KindNotIncreasing: int64(r.NotIncreasing),
		KindInterleaved:   int64(r.Interleaved),
	} {
		if (n > 0) != (per[kind] > 0) || per[kind] > maxExamples {
			t.Fatalf("kind %s: count %d but %d examples", kind, n, per[kind])
		}
	}
}

func slicesMin(ids []uint64) uint64 {
	m := ids[0]
	for _, id := range ids {
		m = min(m, id)
	}
	return m
}

func slicesMax(ids []uint64) uint64 {
	m := ids[0]
	for _, id := range ids {
		m = max(m, id)
	}
	return m
}

// validHistory generates n acknowledged operations from clients concurrent
// clients that is correct by construction: op i takes effect at the
// linearization point 10*i, somewhere inside its interval, and receives the
// next batch of IDs at that point. Intervals overlap heavily, so many ops are
// concurrent and some get IDs in the reverse of their start order.
func validHistory(rng *rand.Rand, n, clients int) []Op {
	ops := make([]Op, n)
	next := uint64(1)
	for i := range ops {
		p := time.Duration(10 * i)
		batch := 1 + rng.IntN(4)
		ids := make([]uint64, batch)
		for j := range ids {
			ids[j] = next
			next++
		}
		ops[i] = ok(i%clients, p-time.Duration(rng.IntN(50)), p+time.Duration(rng.IntN(50)), ids...)
	}
	return ops
}

func TestCheckValidConcurrentHistory(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ops := validHistory(rng, 2000, 8)
	// Failed and unknown operations interleaved with the acknowledged ones
	// must not disturb the verdict.
	ops = append(ops, failed(3, 100, 200), unknown(4, 150, 900))
	r := mustMatchBrute(t, ops)
	if !r.OK() || len(r.Examples) != 0 {
		t.Fatalf("valid history rejected: %v", r)
	}
	if r.Attempted != 2002 || r.Acknowledged != 2000 || r.Failed != 1 || r.Unknown != 1 {
		t.Fatalf("wrong tallies: %v", r)
	}
}

func TestCheckBadHistories(t *testing.T) {
	type example struct {
		kind string
		a, b int
	}
	tests := []struct {
		name    string
		ops     []Op
		want    Report // counts only; Attempted etc. are filled in by the test
		example *example
	}{
		{
			name:    "duplicate across two responses",
			ops:     []Op{ok(0, 0, 10, 1, 2), ok(1, 5, 15, 2, 3)},
			want:    Report{Duplicates: 1},
			example: &example{KindDuplicate, 0, 1},
		},
		{
			name:    "duplicate inside one response",
			ops:     []Op{ok(0, 0, 10, 1, 2, 1)},
			want:    Report{Duplicates: 1, NotIncreasing: 1},
			example: &example{KindDuplicate, 0, 0},
		},
		{
			name:    "id three times counts two extra copies",
			ops:     []Op{ok(0, 0, 10, 7), ok(1, 0, 10, 7), ok(2, 0, 10, 7)},
			want:    Report{Duplicates: 2},
			example: &example{KindDuplicate, 0, 1},
		},
		{
			name:    "real-time violation",
			ops:     []Op{ok(0, 0, 10, 5), ok(1, 20, 30, 3)},
			want:    Report{OrderViolations: 1},
			example: &example{KindOrder, 0, 1},
		},
		{
			name:    "real-time violation on equal ids is also a duplicate",
			ops:     []Op{ok(0, 0, 10, 5, 6), ok(1, 11, 30, 6, 7)},
			want:    Report{OrderViolations: 1, Duplicates: 1},
			example: &example{KindOrder, 0, 1},
		},
		{
			name:    "response not increasing",
			ops:     []Op{ok(0, 0, 10, 3, 2, 4), ok(1, 20, 30, 5, 6)},
			want:    Report{NotIncreasing: 1},
			example: &example{KindNotIncreasing, 0, -1},
		},
		{
			name:    "ranges interleave",
			ops:     []Op{ok(0, 0, 10, 1, 3), ok(1, 5, 15, 2, 4)},
			want:    Report{Interleaved: 2},
			example: &example{KindInterleaved, 0, 1},
		},
		{
			name:    "range contains another response",
			ops:     []Op{ok(0, 0, 10, 1, 5), ok(1, 5, 15, 3)},
			want:    Report{Interleaved: 1},
			example: &example{KindInterleaved, 0, 1},
		},
		{
			name: "concurrent ops with reversed ids are fine",
			ops:  []Op{ok(0, 0, 10, 5), ok(1, 5, 15, 1, 2)},
		},
		{
			name: "end equal to start is concurrent, not ordered",
			ops:  []Op{ok(0, 0, 10, 5), ok(1, 10, 20, 1)},
		},
		{
			name: "adjacent ranges do not interleave",
			ops:  []Op{ok(0, 0, 10, 3, 4), ok(1, 0, 10, 1, 2), ok(2, 0, 10, 5, 6)},
		},
		{
			name: "failed and unknown ops are counted and ignored",
			ops: []Op{
				ok(0, 0, 10, 5),
				failed(1, 20, 30, 5),    // would be a duplicate and an order violation
				unknown(2, 20, 30, 1),   // would be an order violation
				unknown(3, 0, 10, 4, 6), // would interleave with op 0
				ok(4, 40, 50, 6),
				ok(5, 60, 70), // acknowledged with no IDs: nothing to order
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustMatchBrute(t, tt.ops)
			want := bruteCheck(tt.ops)
			want.Duplicates, want.OrderViolations, want.NotIncreasing, want.Interleaved =
				tt.want.Duplicates, tt.want.OrderViolations, tt.want.NotIncreasing, tt.want.Interleaved
			if counts(got) != counts(want) {
				t.Fatalf("got %+v\nwant %+v", counts(got), counts(want))
			}
			if got.OK() != (tt.example == nil) {
				t.Fatalf("OK() = %v for %v", got.OK(), got)
			}
			if tt.example == nil {
				return
			}
			for _, v := range got.Examples {
				if v.Kind == tt.example.kind && v.A == tt.example.a && v.B == tt.example.b {
					return
				}
			}
			t.Fatalf("missing example %+v in %v", *tt.example, got)
		})
	}
}

func TestCheckFailedAndUnknownTallies(t *testing.T) {
	ops := []Op{
		ok(0, 0, 10, 1, 2), failed(1, 0, 10), unknown(2, 0, 10),
		unknown(3, 5, 20), ok(4, 20, 30, 3), Op{Outcome: Outcome(42)},
	}
	got := counts(Check(ops))
	want := tally{Attempted: 6, Acknowledged: 2, Failed: 1, Unknown: 3, IDs: 3}
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestCheckOrderViolationsExactCount(t *testing.T) {
	ops := []Op{
		ok(0, 0, 10, 10),  // 0
		ok(1, 0, 10, 11),  // 1: concurrent with 0
		ok(2, 20, 30, 5),  // 2: after 0 and 1 but below both: 2 pairs
		ok(3, 40, 50, 6),  // 3: below 0 and 1 (2 pairs); above 2
		ok(4, 40, 50, 12), // 4: above everything before it
		ok(5, 60, 70, 7),  // 5: below 0, 1 and 4: 3 pairs
		ok(6, 70, 80, 13), // 6: starts when 5 ends: concurrent with it
	}
	r := mustMatchBrute(t, ops)
	if r.OrderViolations != 7 {
		t.Fatalf("OrderViolations = %d, want 7: %v", r.OrderViolations, r)
	}
	if r.Duplicates != 0 || r.Interleaved != 0 || r.NotIncreasing != 0 {
		t.Fatalf("unexpected other violations: %v", r)
	}
}

func TestCheckMatchesBruteForceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(20240501, 7))
	for iter := range 3000 {
		n := rng.IntN(14)
		ops := make([]Op, n)
		for i := range ops {
			// Small ranges make equal timestamps, duplicates and
			// interleavings common, which is where off-by-one bugs hide.
			start := time.Duration(rng.IntN(20))
			end := start + time.Duration(rng.IntN(8))
			if rng.IntN(40) == 0 {
				end = start - 1 // malformed, but Check must still agree
			}
			ids := make([]uint64, 1+rng.IntN(3))
			base := uint64(rng.IntN(16))
			for j := range ids {
				if rng.IntN(4) == 0 {
					ids[j] = uint64(rng.IntN(20))
				} else {
					ids[j] = base + uint64(j)
				}
			}
			switch rng.IntN(8) {
			case 0:
				ops[i] = failed(i, start, end, ids...)
			case 1:
				ops[i] = unknown(i, start, end, ids...)
			case 2:
				ops[i] = ok(i, start, end)
			default:
				ops[i] = ok(i, start, end, ids...)
			}
		}
		t.Run(fmt.Sprint(iter), func(t *testing.T) { mustMatchBrute(t, ops) })
		if t.Failed() {
			return
		}
	}
}

func TestCheckExamplesBounded(t *testing.T) {
	// 1000 ops that each violate every property many times over.
	var ops []Op
	for i := range 1000 {
		ops = append(ops, ok(i, time.Duration(100*i), time.Duration(100*i+1), 1000, 1, 500, 999))
	}
	r := Check(ops)
	mustGenuineExamples(t, ops, r)
	if want := int64(1000 * 999 / 2); r.OrderViolations != want {
		t.Fatalf("OrderViolations = %d, want %d", r.OrderViolations, want)
	}
	if r.Duplicates != 4*999 || r.NotIncreasing != 1000 || r.Interleaved != 1000 {
		t.Fatalf("wrong counts: %v", counts(r))
	}
}

func TestReportString(t *testing.T) {
	r := Check([]Op{ok(0, 0, 10, 5), ok(1, 20, 30, 3)})
	s := r.String()
	lines := strings.Split(s, "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "history FAIL:") ||
		!strings.Contains(lines[0], "order-violations=1") || !strings.Contains(lines[1], KindOrder) {
		t.Fatalf("unexpected report:\n%s", s)
	}
	if s := Check(nil).String(); !strings.HasPrefix(s, "history OK:") || strings.Contains(s, "\n") {
		t.Fatalf("unexpected report for empty history: %q", s)
	}
}

// sequencer is a stand-in for Ordo: a mutex-protected counter is trivially
// linearizable, so any violation reported would be a recorder bug.
type sequencer struct {
	mu   sync.Mutex
	next uint64
}

func (s *sequencer) take(n int) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint64, n)
	for i := range ids {
		s.next++
		ids[i] = s.next
	}
	return ids
}

func TestRecorderConcurrent(t *testing.T) {
	const clients, perClient = 16, 300
	rec := NewRecorder()
	var seq sequencer
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				p := rec.Begin(c)
				switch i % 10 {
				case 0:
					p.Fail(errors.New("not leader"))
				case 1:
					seq.take(1) // took effect, but the client never learns it
					p.Unknown(errors.New("deadline exceeded"))
				default:
					ids := seq.take(1 + i%3)
					p.OK(ids)
					ids[0] = 0 // the recorder must have copied the slice
				}
			}
		})
	}
	// Snapshots taken while clients run must be safe and self-consistent.
	for range 5 {
		if r := Check(rec.Ops()); !r.OK() {
			t.Fatalf("mid-run snapshot rejected: %v", r)
		}
	}
	wg.Wait()

	ops := rec.Ops()
	r := Check(ops)
	if !r.OK() {
		t.Fatalf("linearizable history rejected: %v", r)
	}
	if r.Attempted != clients*perClient || r.Failed != clients*perClient/10 || r.Unknown != clients*perClient/10 {
		t.Fatalf("wrong tallies: %v", r)
	}
	for i, op := range ops {
		if op.End < op.Start {
			t.Fatalf("op %d ends before it starts: %+v", i, op)
		}
		// The clients' logs merge in invocation order.
		if i > 0 && op.Start < ops[i-1].Start {
			t.Fatalf("op %d began at %v, before op %d (%v): the snapshot is not in invocation order", i, op.Start, i-1, ops[i-1].Start)
		}
		if op.Outcome == OK && op.IDs[0] == 0 {
			t.Fatalf("op %d shares its IDs slice with the caller", i)
		}
	}
}

func TestRecorderInFlightAndDoubleCompletion(t *testing.T) {
	rec := NewRecorder()
	p := rec.Begin(7)
	ops := rec.Ops()
	if len(ops) != 1 || ops[0].Outcome != Unknown || ops[0].Err != InFlight || ops[0].Client != 7 || ops[0].End < ops[0].Start {
		t.Fatalf("in-flight op recorded as %+v", ops)
	}
	p.OK([]uint64{1})
	if ops := rec.Ops(); ops[0].Outcome != OK || ops[0].Err != "" || len(ops[0].IDs) != 1 {
		t.Fatalf("completed op recorded as %+v", ops[0])
	}
	defer func() {
		if recover() == nil {
			t.Fatal("completing an operation twice did not panic")
		}
	}()
	p.Fail(errors.New("again"))
}

func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1e5, 1e6} {
		ops := validHistory(rand.New(rand.NewPCG(3, 4)), n, 64)
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := Check(ops); !r.OK() {
					b.Fatal(r)
				}
			}
		})
	}
}

// TestRecorderManyClientsCostLittle: a client's log starts small, so a
// run with thousands of callers making few calls each does not take
// memory by the callers (the logs once began at 4,096 slots and 65,536
// IDs each: 2,000 clients held 1.5 GiB).
func TestRecorderManyClientsCostLittle(t *testing.T) {
	const clients = 2000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := NewRecorder()
	for c := range clients {
		rec.Begin(c).OK([]uint64{uint64(c) + 1})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("%d clients of one operation each hold %d MiB", clients, grew>>20)
	}
	if ops := rec.Ops(); len(ops) != clients {
		t.Fatalf("recorded %d operations, want %d", len(ops), clients)
	}
}
