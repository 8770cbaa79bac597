package history_test

// This file cross-checks history.Check against porcupine
// (github.com/anishathalye/porcupine), the Go ecosystem's standard
// linearizability checker, on small hand-built and randomly generated
// histories. Porcupine knows nothing of duplicates, interleaving or the
// Fenwick-tree sweep in history.go: it only searches for a linearization
// against a sequential model, so agreement on every history is evidence that
// Check decides exactly linearizability of the sequencer.
//
// Why the verdicts must agree. Under the model below, porcupine accepts a
// history iff there is a total order of the acknowledged responses,
// consistent with real time (a.End < b.Start puts a first), in which each
// response is non-empty, strictly increasing, and starts above the last ID of
// the response before it. Such an order yields Check's four properties:
// uniqueness and per-response increase directly; no interleaving, because
// every other response lies entirely below the response's minimum or entirely
// above its maximum; and the real-time rule, because a precedes b in the order.
// Conversely, if Check passes, the ranges [min, max] of the responses are
// pairwise disjoint (unique + not interleaved), so ordering responses by their
// minimum makes each start above everything before it (increasing), and that
// order respects real time because a.End < b.Start implies max(a) < min(b).
// Both checkers treat two operations as concurrent when a.End == b.Start
// (porcupine's intervals are closed; Check's precedence is strict <).
//
// Where they legitimately differ, outside the domain of the comparison (see
// comparable and TestPorcupineDivergence):
//   - an acknowledged response with no IDs: Check has nothing to order and
//     ignores it; the model rejects it, since a Next that succeeded must
//     return at least one ID (client.NextN never yields such a response).
//   - ID 0: the model's initial state 0 means "nothing handed out yet", so a
//     response starting at 0 cannot be linearized; Check has no notion of a
//     lowest ID. Ordo's IDs are ≥ 1 (snowflake timestamps in the high bits).
//   - an operation with End < Start, which the Recorder never produces;
//     porcupine assumes call before return and its search is meaningless then.

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed-e8569b35/ordo/history"
)

// sequencerModel is the sequential specification of Ordo for porcupine. The
// state is the last ID handed out (0 before the first: IDs are ≥ 1). The
// input is the number of IDs requested, for descriptions only; the output is
// the IDs of one response, in the order the server returned them.
var sequencerModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, input, output any) (bool, any) {
		last := state.(uint64)
		ids := output.([]uint64)
		if len(ids) == 0 || ids[0] <= last {
			return false, state
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				return false, state
			}
		}
		return true, ids[len(ids)-1]
	},
	Equal: func(a, b any) bool { return a.(uint64) == b.(uint64) },
	Hash:  func(s any) uint64 { return s.(uint64) },
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("next(%v) -> %v", input, output)
	},
	DescribeState: func(s any) string { return fmt.Sprint(s) },
}

// toPorcupine converts the acknowledged operations of ops to porcupine's
// representation; Failed and Unknown operations are dropped.
//
// Dropping them is sound and complete for this model. A Failed operation took
// no effect. An Unknown one may or may not have taken effect, but it returned
// nothing, so its output is unconstrained: if it took effect, all it did was
// consume IDs that nobody observed, and the model already allows gaps (Step
// only asks for IDs above the last one, not right after it). Concretely, any
// linearization of the acknowledged operations extends to one that includes
// an unacknowledged operation by placing it last (its interval never closes)
// with fresh IDs above everything else, and any linearization of the full
// history restricts to the acknowledged operations because removing a step
// only lowers the state the next step must exceed. So the history is
// linearizable iff its acknowledged part is.
func toPorcupine(ops []history.Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Outcome != history.OK {
			continue
		}
		out = append(out, porcupine.Operation{
			ClientId: op.Client,
			Input:    len(op.IDs),
			Call:     int64(op.Start),
			Output:   slices.Clone(op.IDs),
			Return:   int64(op.End),
		})
	}
	return out
}

// porcupineTimeout bounds each porcupine search. Histories here have at most
// eight operations, so the search finishes in microseconds; hitting the
// timeout means something is badly wrong and fails the test.
const porcupineTimeout = 5 * time.Second

// porcupineOK reports porcupine's verdict on ops.
func porcupineOK(t *testing.T, ops []history.Op) bool {
	t.Helper()
	switch res := porcupine.CheckOperationsTimeout(sequencerModel, toPorcupine(ops), porcupineTimeout); res {
	case porcupine.Ok:
		return true
	case porcupine.Illegal:
		return false
	default:
		t.Fatalf("porcupine returned %v on a history of %d ops:\n%s", res, len(ops), describe(ops))
		return false
	}
}

// comparable reports whether ops lies in the domain where Check and the
// porcupine model must agree: every acknowledged operation has a proper
// interval and returned at least one ID, and no acknowledged ID is 0.
func comparable(ops []history.Op) bool {
	for _, op := range ops {
		if op.Outcome != history.OK {
			continue
		}
		if op.End < op.Start || len(op.IDs) == 0 || slices.Contains(op.IDs, 0) {
			return false
		}
	}
	return true
}

// describe renders ops one per line for failure messages.
func describe(ops []history.Op) string {
	var b strings.Builder
	for i, op := range ops {
		fmt.Fprintf(&b, "  op %d: client %d [%d, %d] %v %v\n",
			i, op.Client, int64(op.Start), int64(op.End), op.Outcome, op.IDs)
	}
	return b.String()
}

// agree checks ops with both checkers, fails the test if their verdicts
// differ, and returns Check's report.
func agree(t *testing.T, ops []history.Op) history.Report {
	t.Helper()
	rep := history.Check(ops)
	if p := porcupineOK(t, ops); p != rep.OK() {
		t.Errorf("history.Check says OK=%v, porcupine says OK=%v\n%s%s", rep.OK(), p, describe(ops), rep)
	}
	return rep
}

// op builds an operation tersely; times are plain nanoseconds.
func op(client int, start, end time.Duration, outcome history.Outcome, ids ...uint64) history.Op {
	return history.Op{Client: client, Start: start, End: end, Outcome: outcome, IDs: ids}
}

func TestPorcupineAgreesOnHandBuiltHistories(t *testing.T) {
	const (
		ok      = history.OK
		failed  = history.Failed
		unknown = history.Unknown
	)
	tests := []struct {
		name  string
		ops   []history.Op
		legal bool
	}{
		{"empty", nil, true},
		{"sequential with gaps", []history.Op{
			op(0, 0, 10, ok, 1, 2), op(1, 20, 30, ok, 5), op(0, 40, 50, ok, 9, 10, 11),
		}, true},
		{"response with internal gaps", []history.Op{
			op(0, 0, 10, ok, 1, 4, 7), op(1, 20, 30, ok, 8),
		}, true},
		{"concurrent ops with reversed IDs", []history.Op{
			// op 0 is invoked first but op 1, nested inside it, gets the
			// smaller ID: linearize op 1 first.
			op(0, 0, 10, ok, 5), op(1, 2, 8, ok, 3),
		}, true},
		{"overlapping ops with reversed ranges", []history.Op{
			op(0, 0, 10, ok, 4, 5, 6), op(1, 5, 15, ok, 1, 2, 3),
		}, true},
		{"touching intervals are concurrent", []history.Op{
			// op 0 ends exactly when op 1 starts: neither precedes the other.
			op(0, 0, 10, ok, 7), op(1, 10, 20, ok, 3),
		}, true},
		{"chain through a long concurrent op", []history.Op{
			op(0, 0, 10, ok, 2), op(1, 5, 30, ok, 1), op(2, 20, 40, ok, 3),
		}, true},
		{"unacknowledged ops are ignored", []history.Op{
			// The IDs on Failed and Unknown ops are not acknowledged, so
			// they neither collide nor order anything.
			op(0, 0, 10, ok, 5), op(1, 0, 10, failed, 5), op(2, 20, 30, unknown, 1),
			op(3, 20, 30, ok, 6),
		}, true},
		{"unknown op consumed IDs (gap)", []history.Op{
			op(0, 0, 10, ok, 1), op(1, 12, 18, unknown), op(2, 20, 30, ok, 4),
		}, true},

		{"duplicate across concurrent ops", []history.Op{
			op(0, 0, 10, ok, 3), op(1, 0, 10, ok, 3),
		}, false},
		{"duplicate across sequential ops", []history.Op{
			op(0, 0, 10, ok, 1, 2), op(1, 20, 30, ok, 2, 3),
		}, false},
		{"duplicate within one response", []history.Op{
			op(0, 0, 10, ok, 4, 4),
		}, false},
		{"real-time violation", []history.Op{
			op(0, 0, 10, ok, 5), op(1, 11, 20, ok, 3),
		}, false},
		{"real-time violation by range overlap", []history.Op{
			// op 1's smallest ID is below op 0's largest.
			op(0, 0, 10, ok, 4, 5, 6), op(1, 20, 30, ok, 6, 7),
		}, false},
		{"real-time violation across a chain", []history.Op{
			op(0, 0, 10, ok, 3), op(1, 5, 30, ok, 1), op(2, 20, 40, ok, 2),
		}, false},
		{"interleaved concurrent ranges", []history.Op{
			op(0, 0, 10, ok, 1, 3), op(1, 0, 10, ok, 2, 4),
		}, false},
		{"nested concurrent ranges", []history.Op{
			op(0, 0, 10, ok, 1, 4), op(1, 2, 8, ok, 2, 3),
		}, false},
		{"non-increasing response", []history.Op{
			op(0, 0, 10, ok, 3, 2),
		}, false},
		{"non-increasing response among legal ones", []history.Op{
			op(0, 0, 10, ok, 1), op(1, 20, 30, ok, 5, 4), op(2, 40, 50, ok, 9),
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !comparable(tc.ops) {
				t.Fatalf("test history is outside the compared domain:\n%s", describe(tc.ops))
			}
			rep := agree(t, tc.ops)
			if rep.OK() != tc.legal {
				t.Errorf("verdict OK=%v, want %v\n%s%s", rep.OK(), tc.legal, describe(tc.ops), rep)
			}
		})
	}
}

// TestPorcupineDivergence pins the histories outside comparable, where the two
// checkers legitimately disagree, so that a change to either side is noticed.
func TestPorcupineDivergence(t *testing.T) {
	tests := []struct {
		name string
		ops  []history.Op
	}{
		{"acknowledged response with no IDs", []history.Op{
			op(0, 0, 10, history.OK, 1), op(1, 20, 30, history.OK),
		}},
		{"ID 0", []history.Op{
			op(0, 0, 10, history.OK, 0, 1), op(1, 20, 30, history.OK, 2),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if comparable(tc.ops) {
				t.Fatalf("history should be outside the compared domain:\n%s", describe(tc.ops))
			}
			if rep := history.Check(tc.ops); !rep.OK() {
				t.Errorf("history.Check rejects it, want accept:\n%s%s", describe(tc.ops), rep)
			}
			if porcupineOK(t, tc.ops) {
				t.Errorf("porcupine accepts it, want reject:\n%s", describe(tc.ops))
			}
		})
	}
}

// genCorrect returns a history of 1 to 8 operations from a few clients with
// random, often overlapping intervals, whose IDs come from a simulated
// correct sequencer: each operation takes effect at a random point inside its
// interval, and operations are served in the order of those points. Failed
// operations take no effect; Unknown ones take effect or not at random,
// leaving unobserved gaps. Unacknowledged operations sometimes carry stray
// IDs, which both checkers must ignore.
func genCorrect(rng *rand.Rand) []history.Op {
	n := 1 + rng.IntN(8)
	clients := 1 + rng.IntN(4)
	ops := make([]history.Op, n)
	points := make([]int, n)
	for i := range ops {
		// Times on a small grid so that precedence, overlap and touching
		// endpoints (a.End == b.Start) are all common.
		start := rng.IntN(30)
		end := start + rng.IntN(12)
		outcome := history.OK
		switch r := rng.IntN(10); {
		case r == 0:
			outcome = history.Failed
		case r == 1:
			outcome = history.Unknown
		}
		ops[i] = op(rng.IntN(clients), time.Duration(start), time.Duration(end), outcome)
		points[i] = start + rng.IntN(end-start+1)
	}
	// Serve in order of linearization point; ties are concurrent at that
	// point, so any order among them is correct: shuffle, then sort stably.
	order := rng.Perm(n)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(points[a], points[b]) })

	next := uint64(1 + rng.IntN(3))
	for _, i := range order {
		o := &ops[i]
		if o.Outcome == history.Failed || (o.Outcome == history.Unknown && rng.IntN(2) == 0) {
			continue
		}
		k := 1 + rng.IntN(3)
		ids := make([]uint64, k)
		for j := range ids {
			ids[j] = next
			next++
			if rng.IntN(4) == 0 {
				next += uint64(1 + rng.IntN(2)) // gap inside or after the response
			}
		}
		if o.Outcome == history.OK {
			o.IDs = ids
		}
	}
	for i := range ops {
		if ops[i].Outcome != history.OK && rng.IntN(3) == 0 {
			ops[i].IDs = []uint64{uint64(1 + rng.IntN(int(next)))}
		}
	}
	return ops
}

// Mutation names, for the tally of what was applied.
const (
	mutSwapResponses = "swap-responses"
	mutSwapID        = "swap-id"
	mutDuplicate     = "duplicate"
	mutShrinkGap     = "shrink-gap"
	mutReverse       = "reverse"
	mutRetime        = "retime"
)

var mutations = []string{mutSwapResponses, mutSwapID, mutDuplicate, mutShrinkGap, mutReverse, mutRetime}

// mutate applies one random mutation to ops in place and returns its name.
// The result may or may not be legal (swapping the IDs of two concurrent
// single-ID operations, for instance, is harmless); the checkers decide. It
// keeps ops within comparable: no ID drops to 0 and no response is emptied.
func mutate(rng *rand.Rand, ops []history.Op) string {
	var acked []int
	for i, o := range ops {
		if o.Outcome == history.OK {
			acked = append(acked, i)
		}
	}
	if len(acked) == 0 {
		return ""
	}
	pick := func() *history.Op { return &ops[acked[rng.IntN(len(acked))]] }
	name := mutations[rng.IntN(len(mutations))]
	switch name {
	case mutSwapResponses:
		a, b := pick(), pick()
		a.IDs, b.IDs = b.IDs, a.IDs
	case mutSwapID:
		a, b := pick(), pick()
		i, j := rng.IntN(len(a.IDs)), rng.IntN(len(b.IDs))
		a.IDs[i], b.IDs[j] = b.IDs[j], a.IDs[i]
	case mutDuplicate:
		a, b := pick(), pick()
		id := a.IDs[rng.IntN(len(a.IDs))]
		if rng.IntN(2) == 0 {
			b.IDs[rng.IntN(len(b.IDs))] = id
		} else {
			// Insert it in sorted position, so the copy is not also a
			// not-increasing response unless it collides with itself.
			j, _ := slices.BinarySearch(b.IDs, id)
			b.IDs = slices.Insert(b.IDs, j, id)
		}
	case mutShrinkGap:
		a := pick()
		j := rng.IntN(len(a.IDs))
		a.IDs[j] -= min(a.IDs[j]-1, uint64(1+rng.IntN(3)))
	case mutReverse:
		slices.Reverse(pick().IDs)
	case mutRetime:
		a := pick()
		start := rng.IntN(30)
		a.Start, a.End = time.Duration(start), time.Duration(start+rng.IntN(12))
	}
	return name
}

// TestPorcupineAgreesOnRandomHistories generates many small histories, half
// straight from a simulated correct sequencer and half mutated, and requires
// history.Check and porcupine to reach the same verdict on every one.
func TestPorcupineAgreesOnRandomHistories(t *testing.T) {
	const perSeed = 4000
	seeds := [][2]uint64{{1, 2}, {0xdecaf, 0xc0ffee}, {42, 4242}}

	var correct, mutLegal, mutIllegal int
	kinds := map[string]int{} // histories rejected with at least one violation of each kind
	applied := map[string]int{}
	for _, seed := range seeds {
		rng := rand.New(rand.NewPCG(seed[0], seed[1]))
		for range perSeed {
			ops := genCorrect(rng)
			if rng.IntN(2) == 0 {
				if !comparable(ops) {
					t.Fatalf("generator left the compared domain:\n%s", describe(ops))
				}
				rep := agree(t, ops)
				if !rep.OK() {
					t.Fatalf("correct sequencer produced a rejected history:\n%s%s", describe(ops), rep)
				}
				correct++
				continue
			}
			for range 1 + rng.IntN(2) {
				if m := mutate(rng, ops); m != "" {
					applied[m]++
				}
			}
			if !comparable(ops) {
				t.Fatalf("mutation left the compared domain:\n%s", describe(ops))
			}
			rep := agree(t, ops)
			if rep.OK() {
				mutLegal++
				continue
			}
			mutIllegal++
			if rep.Duplicates > 0 {
				kinds[history.KindDuplicate]++
			}
			if rep.OrderViolations > 0 {
				kinds[history.KindOrder]++
			}
			if rep.NotIncreasing > 0 {
				kinds[history.KindNotIncreasing]++
			}
			if rep.Interleaved > 0 {
				kinds[history.KindInterleaved]++
			}
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d histories: %d legal from the correct sequencer, %d mutated and still legal, %d mutated and illegal",
		correct+mutLegal+mutIllegal, correct, mutLegal, mutIllegal)
	t.Logf("illegal histories by violation kind (a history may count under several): %v", kinds)
	t.Logf("mutations applied: %v", applied)

	// Guard against the generator degenerating into trivial histories: every
	// kind of violation, and legal mutated histories, must be well
	// represented.
	for _, k := range []string{history.KindDuplicate, history.KindOrder, history.KindNotIncreasing, history.KindInterleaved} {
		if kinds[k] < 100 {
			t.Errorf("only %d illegal histories with a %s violation; the generator is too weak", kinds[k], k)
		}
	}
	if mutLegal < 100 || correct < 100 {
		t.Errorf("too few legal histories: %d correct, %d mutated", correct, mutLegal)
	}
}
