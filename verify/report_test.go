package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

const s = time.Second

// testFaults are two faults of a synthetic run: kill-leader in [1s, 4s),
// healed at 2s; isolate-leader in [4s, 8s), healed at 5s.
var testFaults = []FaultRecord{
	{Kind: "kill-leader", Target: "[n1]", Round: 1, Start: 1 * s, Healed: 2 * s, End: 4 * s, Recovered: true},
	{Kind: "isolate-leader", Target: "n2", Round: 2, Start: 4 * s, Healed: 5 * s, End: 8 * s, Recovered: true},
}

func TestPlaceAt(t *testing.T) {
	kill, isolate := describe(testFaults[0]), describe(testFaults[1])
	for _, tt := range []struct {
		name   string
		faults []FaultRecord
		at     time.Duration
		want   string
	}{
		{"no faults", nil, 3 * s, "no fault ran in this run"},
		{"before the first", testFaults, s / 2, "before the first fault"},
		{"at a fault's start", testFaults, 1 * s, "during " + kill},
		{"while it holds", testFaults, 4500 * time.Millisecond, "during " + isolate},
		{"at its heal", testFaults, 2 * s, "0.0s after the heal of " + kill},
		{"after its heal", testFaults, 3500 * time.Millisecond, "1.5s after the heal of " + kill},
		{"after the last", testFaults, 20 * s, "15.0s after the heal of " + isolate},
	} {
		if got := placeAt(tt.faults, tt.at); got != tt.want {
			t.Errorf("%s: placeAt(%s) = %q, want %q", tt.name, tt.at, got, tt.want)
		}
	}
	if got, want := describe(testFaults[1]), "fault isolate-leader (round 2) on n2, started 4.0s, healed 5.0s"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
	if got := placeSpan(testFaults, 1500*time.Millisecond, 2500*time.Millisecond); got != "began during "+kill+"; ended 0.5s after the heal of "+kill {
		t.Errorf("a call across a heal: %q", got)
	}
}

// TestFailingRunReportNamesTheFault: the report of a run whose history
// breaks the order, and whose clients withheld answers, names each check
// that failed, the calls that show it with their errors, and the fault
// (kind, target, round, start and heal) during which they happened.
func TestFailingRunReportNamesTheFault(t *testing.T) {
	ms := time.Millisecond
	ops := []history.Op{
		{Client: 1, Start: 500 * ms, End: 600 * ms, Outcome: history.OK, IDs: []uint64{10, 11}},
		// A stale leader's answer while n2 is cut off: 50 after 100.
		{Client: 1, Start: 4100 * ms, End: 4200 * ms, Outcome: history.OK, IDs: []uint64{100}},
		{Client: 2, Start: 4300 * ms, End: 4400 * ms, Outcome: history.OK, IDs: []uint64{50}},
		{Client: 3, Start: 6 * s, End: 6100 * ms, Outcome: history.Unknown, Err: "rpc error: code = Unavailable desc = not the leader"},
	}
	bad := []Call{{Client: 4, Start: 1500 * ms, End: 1600 * ms, Outcome: "withheld", Err: "bad response from server: ID 7 repeats"}}
	res := Result{Report: history.Check(ops), BadResponses: 1, Faults: testFaults, Recovered: true}
	if res.Report.OrderViolations == 0 {
		t.Fatalf("the synthetic history breaks no order: %s", res.Report)
	}
	res.Findings = diagnose(res, ops, bad, 9*s)
	out := res.String()
	for _, want := range []string{
		"order: 1 in all",
		"call: client 2, 4.300s to 4.400s, ok with 1 IDs 50..50; during fault isolate-leader (round 2) on n2, started 4.0s, healed 5.0s",
		"bad-answers: 1 answers",
		"call: client 4, 1.500s to 1.600s, withheld: bad response from server: ID 7 repeats; during fault kill-leader (round 1) on [n1], started 1.0s, healed 2.0s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

// TestFindingsMatchVerdict: every way a run fails gives a finding of its
// check, and a run that passes gives none.
func TestFindingsMatchVerdict(t *testing.T) {
	for _, tt := range []struct {
		name  string
		res   Result
		check string // "" for a passing run
	}{
		{"pass", Result{Recovered: true, Faults: []FaultRecord{{Recovered: true}}}, ""},
		{"duplicate", Result{Recovered: true, Report: history.Report{Duplicates: 2}}, history.KindDuplicate},
		{"order", Result{Recovered: true, Report: history.Report{OrderViolations: 1}}, history.KindOrder},
		{"not increasing", Result{Recovered: true, Report: history.Report{NotIncreasing: 1}}, history.KindNotIncreasing},
		{"interleaved", Result{Recovered: true, Report: history.Report{Interleaved: 1}}, history.KindInterleaved},
		{"misrendered", Result{Recovered: true, Report: history.Report{Misrendered: 1}}, history.KindRendered},
		{"bad answer", Result{Recovered: true, BadResponses: 1}, CheckBadAnswers},
		{"fault not recovered", Result{Recovered: true, Faults: []FaultRecord{{Kind: "pause-leader"}}}, CheckFaultNotRecovered},
		{"fault errored", Result{Recovered: true, Faults: []FaultRecord{{Recovered: true, Err: "heal: x"}}}, CheckFaultError},
		{"no recovery", Result{Recovered: false}, CheckNotRecovered},
		{"node exited", Result{Recovered: true, Exited: []string{"n1: exit status 1"}}, CheckNodeExited},
	} {
		fs := diagnose(tt.res, nil, nil, 10*s)
		if tt.res.OK() != (tt.check == "") {
			t.Fatalf("%s: OK() = %v", tt.name, tt.res.OK())
		}
		if tt.check == "" {
			if len(fs) > 0 {
				t.Errorf("%s: findings %v for a run that passed", tt.name, fs)
			}
			continue
		}
		if len(fs) != 1 || fs[0].Check != tt.check {
			t.Errorf("%s: findings %+v, want one of check %s", tt.name, fs, tt.check)
		}
	}
}

func TestTailLogs(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 50 {
		b.WriteString(strings.Repeat("x", i) + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "n1.log"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := TailLogs(append(LogFiles(dir), filepath.Join(dir, "missing.log")), 40)
	if len(logs) != 2 {
		t.Fatalf("%d logs, want 2", len(logs))
	}
	if tail := logs[0].Tail; len(tail) != 40 || tail[0] != strings.Repeat("x", 10) || tail[39] != strings.Repeat("x", 49) {
		t.Errorf("tail of n1.log: %d lines, %q .. %q; want the last 40", len(tail), tail[0], tail[len(tail)-1])
	}
	if tail := logs[1].Tail; len(tail) != 1 || !strings.Contains(tail[0], "no such file") {
		t.Errorf("tail of a missing log: %q", tail)
	}
}
