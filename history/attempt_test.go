package history

import (
	"errors"
	"testing"
)

// TestCallerRecordsAndCounts: each ending is recorded with the outcome
// the checker and the report expect, and counted once, so that a bad
// answer, which leaves no IDs for the checker, still shows in Counts.
func TestCallerRecordsAndCounts(t *testing.T) {
	errTimeout, errRefused, errBad, errCut := errors.New("timeout"), errors.New("refused"), errors.New("bad"), errors.New("cut")
	judge := func(err error) Ending {
		switch err {
		case errRefused:
			return Refused
		case errBad:
			return BadAnswer
		case errCut:
			return CutOff
		}
		return Answered // a judge's slip: taken as Uncertain
	}
	rec := NewRecorder()
	var tally Tally
	c := Caller{Rec: rec, Tally: &tally, Client: 7, Judge: judge}
	calls := []struct {
		ids      []uint64
		rendered []string
		err      error
		want     Ending
		outcome  Outcome
	}{
		{[]uint64{1, 2}, nil, nil, Answered, OK},
		{[]uint64{3}, []string{"x"}, nil, Answered, OK},
		{nil, nil, errTimeout, Uncertain, Unknown},
		{nil, nil, errRefused, Refused, Failed},
		{nil, nil, errBad, BadAnswer, Unknown},
		{nil, nil, errCut, CutOff, Unknown},
	}
	for i, call := range calls {
		end, err := c.Call(func() ([]uint64, []string, error) { return call.ids, call.rendered, call.err })
		if end != call.want || err != call.err {
			t.Errorf("call %d: ended %d, %v; want %d, %v", i, end, err, call.want, call.err)
		}
	}
	ops := rec.Ops()
	if len(ops) != len(calls) {
		t.Fatalf("%d operations recorded, want %d", len(ops), len(calls))
	}
	for i, op := range ops {
		if op.Client != 7 || op.Outcome != calls[i].outcome || len(op.IDs) != len(calls[i].ids) || len(op.Rendered) != len(calls[i].rendered) {
			t.Errorf("operation %d: %+v; want client 7, outcome %s, %d IDs, %d rendered", i, op, calls[i].outcome, len(calls[i].ids), len(calls[i].rendered))
		}
	}
	want := Counts{OK: 2, Failed: 1, Unknown: 1, Bad: 1, IDs: 3, LastError: "bad"}
	if got := tally.Counts(); got != want {
		t.Errorf("counts %+v; want %+v (a cut-off call counts nowhere)", got, want)
	}
	if got := want.Errors(); got != 3 {
		t.Errorf("Errors() = %d, want 3", got)
	}
}

// TestCallerWithoutJudgeOrTally: with neither, every error is Uncertain
// and nothing is counted.
func TestCallerWithoutJudgeOrTally(t *testing.T) {
	rec := NewRecorder()
	end, _ := Caller{Rec: rec}.Call(func() ([]uint64, []string, error) { return nil, nil, errors.New("x") })
	if ops := rec.Ops(); end != Uncertain || len(ops) != 1 || ops[0].Outcome != Unknown {
		t.Fatalf("ended %d, recorded %+v; want Uncertain, one Unknown operation", end, ops)
	}
}
