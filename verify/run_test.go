package verify

import (
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

func TestMeasureGaps(t *testing.T) {
	s := time.Second
	ok := func(end time.Duration) history.Op { return history.Op{Outcome: history.OK, End: end, IDs: []uint64{1}} }
	ops := []history.Op{
		ok(1 * s), ok(2 * s),
		{Outcome: history.Unknown, End: 3 * s}, // does not count as success
		ok(5 * s), ok(6 * s), ok(9 * s),
	}
	recs := []FaultRecord{
		{Kind: "a", Start: 2 * s, Healed: 4 * s}, // window [2s, 7s): successes at 2, 5, 6
		{Kind: "b", Start: 7 * s, Healed: 8 * s}, // window [7s, 10s): success at 9
		{Kind: "c", Start: 10 * s, Healed: 11 * s},
	}
	measureGaps(ops, recs, 12*s)
	want := []struct{ end, gap time.Duration }{
		{7 * s, 3 * s},  // 2s → 5s
		{10 * s, 2 * s}, // 7s → 9s
		{12 * s, 2 * s}, // no success in [10s, 12s)
	}
	for i, w := range want {
		r := recs[i]
		if r.End != w.end || r.LongestGap != w.gap {
			t.Errorf("fault %s: end %s gap %s; want %s %s", r.Kind, r.End, r.LongestGap, w.end, w.gap)
		}
	}
}

func TestResultOK(t *testing.T) {
	good := Result{Recovered: true, Faults: []FaultRecord{{Recovered: true}}}
	if !good.OK() {
		t.Fatal("a clean result is not OK")
	}
	for name, r := range map[string]Result{
		"violation":     {Recovered: true, Report: history.Report{OrderViolations: 1}},
		"bad response":  {Recovered: true, BadResponses: 1},
		"no recovery":   {Recovered: false},
		"fault stuck":   {Recovered: true, Faults: []FaultRecord{{Recovered: false}}},
		"fault errored": {Recovered: true, Faults: []FaultRecord{{Recovered: true, Err: "x"}}},
		"node exited":   {Recovered: true, Exited: []string{"n1: exit status 1"}},
		"key reused":    {Recovered: true, Keyed: KeyedCounts{Reused: 1}},
		"key conflict":  {Recovered: true, Report: history.Report{KeyConflicts: 1}},
	} {
		if r.OK() {
			t.Errorf("%s: OK() = true", name)
		}
	}
}
