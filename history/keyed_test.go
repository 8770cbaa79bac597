package history

import (
	"errors"
	"slices"
	"testing"
)

// keyed is op as an attempt of the keyed call key.
func keyed(key string, op Op) Op {
	op.Key = key
	op.Asked = max(op.Asked, len(op.IDs))
	return op
}

// unkeyed is ops with their keys taken away: each attempt a call.
func unkeyed(ops []Op) []Op {
	out := slices.Clone(ops)
	for i := range out {
		out[i].Key = ""
	}
	return out
}

// kinds lists the kinds of r's examples.
func kinds(r Report) []string {
	var out []string
	for _, v := range r.Examples {
		out = append(out, v.Kind)
	}
	return out
}

// TestKeyedReplayIsOneCall: a keyed call whose first attempt was lost and
// whose retry got the first attempt's IDs back, after IDs above them were
// handed out to a call that began later, is one call from its first
// attempt to its answer: no order violation. Asked again after that (the
// answer replayed once more, from another node, later still), it is
// neither a duplicate nor out of order. Taken attempt by attempt, the
// same history has both: the fold is what accepts it.
func TestKeyedReplayIsOneCall(t *testing.T) {
	ops := []Op{
		keyed("k", unknown(1, 0, 10)),  // committed 5, answer lost
		ok(2, 20, 30, 10),              // began after 5 was committed
		keyed("k", ok(1, 40, 50, 5)),   // the retry: 5 again
		ok(2, 52, 55, 11),              // after the answer
		keyed("k", ok(3, 60, 70, 5)),   // asked again, replayed
		keyed("j", unknown(4, 61, 62)), // never answered
	}
	r := Check(ops)
	if !r.OK() {
		t.Fatalf("a legitimate replay fails the check: %v", r)
	}
	want := Report{Attempted: 6, Acknowledged: 4, Unknown: 2, IDs: 3, Keyed: 2, Replays: 1}
	if r.Attempted != want.Attempted || r.Acknowledged != want.Acknowledged || r.Unknown != want.Unknown || r.IDs != want.IDs ||
		r.Keyed != want.Keyed || r.Replays != want.Replays || r.KeyConflicts != 0 {
		t.Errorf("counts: got %v, want %+v", r, want)
	}
	if u := Check(unkeyed(ops)); u.Duplicates != 1 || u.OrderViolations == 0 {
		t.Errorf("attempt by attempt, the history should hold a duplicate and an order violation, got %v", u)
	}
}

// TestKeyedRetryWithNewIDs: a key answered once with 5 and again with 6
// is a retry that took new IDs, which the checker reports whatever else
// holds, pointing at both answers.
func TestKeyedRetryWithNewIDs(t *testing.T) {
	ops := []Op{
		keyed("k", ok(1, 0, 10, 5)),
		ok(2, 12, 13, 7),
		keyed("k", ok(1, 20, 30, 8)), // new IDs for the same key
	}
	r := Check(ops)
	if r.OK() || r.KeyConflicts != 1 || r.Replays != 0 {
		t.Fatalf("a key answered twice with other IDs: %v", r)
	}
	var v Violation
	for _, e := range r.Examples {
		if e.Kind == KindKeyConflict {
			v = e
		}
	}
	if v.A != 0 || v.B != 2 {
		t.Errorf("conflict example %v: want ops 0 and 2", v)
	}
	// Each answer is still a call: 8 came after 7 was handed out to a
	// call that began after the key's first answer, which is fine, but
	// the conflicting answer's IDs also meet the uniqueness check.
	ops = append(ops, ok(3, 40, 41, 8))
	if r := Check(ops); r.Duplicates != 1 || r.KeyConflicts != 1 {
		t.Errorf("the conflicting answer's IDs handed out again: %v", r)
	}
}

// TestKeyedRetryBurnsIDs: a keyed call whose first attempt committed 3
// and 4, lost, and whose retry took 5 and 6 instead burnt 3 and 4: in a
// dense sequence that is a gap no lost call explains, because the key's
// attempts are one call, which took 5 and 6. Attempt by attempt, the lost
// attempt would explain the gap.
func TestKeyedRetryBurnsIDs(t *testing.T) {
	ops := []Op{
		denseOK(0, 1, 1, 2),
		keyed("k", denseLost(2, 10, Unknown, 2)),
		keyed("k", denseOK(20, 30, 5, 6)),
		denseOK(40, 41, 7),
	}
	d := CheckDense(ops, 1)
	if d.OK() || d.BadGaps != 1 || d.Missing != 2 || d.Calls != (CallCounts{OK: 3}) {
		t.Fatalf("a burnt retry: %v", d)
	}
	if d.Examples[0].Kind != KindDenseGap || d.Examples[0].A != 0 || d.Examples[0].B != 2 {
		t.Errorf("gap example %v: want ops 0 and 2 around it", d.Examples[0])
	}
	if u := CheckDense(unkeyed(ops), 1); !u.OK() {
		t.Errorf("attempt by attempt, the lost attempt explains the gap: %v", u)
	}
	// A key never answered took at most one count, however many of its
	// attempts were lost: two attempts of 2 do not explain a gap of 4.
	ops = []Op{
		denseOK(0, 1, 1),
		keyed("k", denseLost(2, 10, Unknown, 2)),
		keyed("k", denseLost(11, 20, Unknown, 2)),
		denseOK(30, 31, 6),
	}
	if d := CheckDense(ops, 1); d.OK() || d.Unexplained != 2 || d.Calls.Unknown != 1 {
		t.Errorf("two lost attempts of one key explain 4 IDs: %v", d)
	}
	if u := CheckDense(unkeyed(ops), 1); !u.OK() {
		t.Errorf("attempt by attempt, two lost calls of 2 explain 4: %v", u)
	}
}

// TestKeyedDuplicateAcrossKeys: two keys answered the same ID is a
// duplicate, replays of either notwithstanding.
func TestKeyedDuplicateAcrossKeys(t *testing.T) {
	ops := []Op{
		keyed("a", ok(1, 0, 10, 5)),
		keyed("b", ok(2, 5, 15, 5)),
		keyed("a", ok(1, 20, 30, 5)),
	}
	r := Check(ops)
	if r.OK() || r.Duplicates != 1 || r.Replays != 1 || r.KeyConflicts != 0 {
		t.Fatalf("one ID to two keys: %v", r)
	}
	if v := r.Examples[0]; v.Kind != KindDuplicate || v.A != 0 || v.B != 1 {
		t.Errorf("duplicate example %v: want ops 0 and 1", v)
	}
}

// TestKeyedOrderFromFirstAttempt: a keyed call's order is measured from
// its first attempt to its first answer. A call that ended before the
// first attempt began must be below it, whenever the answer came; a call
// that began after the first answer ended must be above it, a later
// replay notwithstanding.
func TestKeyedOrderFromFirstAttempt(t *testing.T) {
	below := []Op{
		ok(1, 0, 1, 10),
		keyed("k", unknown(2, 2, 3)),
		keyed("k", ok(2, 4, 5, 5)),
	}
	if r := Check(below); r.OrderViolations != 1 || !slices.Equal(kinds(r), []string{KindOrder}) {
		t.Errorf("a keyed answer below a call that ended before its first attempt: %v", r)
	} else if v := r.Examples[0]; v.A != 0 || v.B != 2 {
		t.Errorf("order example %v: want ops 0 and 2", v)
	}
	above := []Op{
		keyed("k", unknown(2, 0, 1)),
		keyed("k", ok(2, 2, 3, 20)),
		ok(1, 4, 5, 15),             // began after the key's answer
		keyed("k", ok(3, 6, 7, 20)), // a replay
	}
	if r := Check(above); r.OrderViolations != 1 || r.Replays != 1 {
		t.Errorf("a call below a keyed answer that ended before it began: %v", r)
	}
	// A call overlapping the keyed call's first attempt owes it no order.
	overlap := []Op{
		keyed("k", unknown(2, 0, 10)),
		ok(1, 5, 6, 15),
		keyed("k", ok(2, 20, 30, 5)),
	}
	if r := Check(overlap); !r.OK() {
		t.Errorf("a call within the keyed call's span: %v", r)
	}
}

// TestRecorderKeepsKeys: the key an attempt was begun with comes back in
// Ops, through CallKeyed too, and the checker folds them.
func TestRecorderKeepsKeys(t *testing.T) {
	rec := NewRecorder()
	c := Caller{Rec: rec, Client: 1}
	c.CallKeyed("k", 2, func() ([]uint64, []string, error) { return nil, nil, errors.New("timeout") })
	c.CallN(1, func() ([]uint64, []string, error) { return []uint64{1}, nil, nil })
	c.CallKeyed("k", 2, func() ([]uint64, []string, error) { return []uint64{2, 3}, nil, nil })
	ops := rec.Ops()
	if len(ops) != 3 || ops[0].Key != "k" || ops[1].Key != "" || ops[2].Key != "k" || ops[0].Asked != 2 {
		t.Fatalf("ops %+v", ops)
	}
	if r := Check(ops); !r.OK() || r.Keyed != 1 || r.IDs != 3 {
		t.Errorf("%v", r)
	}
}
