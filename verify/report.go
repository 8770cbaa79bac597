package verify

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

// The checks a Finding names: those of history.Check by their violation
// kinds (history.KindDuplicate, KindOrder, ...), and the run's own.
const (
	// CheckBadAnswers: clients withheld answers that broke the order or
	// the wire format (Result.BadResponses).
	CheckBadAnswers = "bad-answers"
	// CheckFaultError: a fault could not be started or healed.
	CheckFaultError = "fault-error"
	// CheckFaultNotRecovered: no request succeeded within the recovery
	// timeout after a fault was healed.
	CheckFaultNotRecovered = "fault-not-recovered"
	// CheckNotRecovered: no request succeeded within the recovery timeout
	// after the run ended and everything was healed.
	CheckNotRecovered = "not-recovered"
	// CheckNodeExited: a node's process ended by itself.
	CheckNodeExited = "node-exited"
	// CheckKeyReused: a keyed client's retry was refused as reusing its
	// key with other arguments (KeyedCounts.Reused).
	CheckKeyReused = "key-reused"
	// CheckCrashAnswer: a keyed call a leader committed and ended before
	// answering was not answered afterwards with exactly what was
	// committed (KeyedCounts.Crashes).
	CheckCrashAnswer = "crash-answer"
	// CheckTrackedFate: a tracked writer was told a fate it could not
	// have led to, or that the cluster knows no reservation it handed
	// out (Result.Tracked's WrongFate and Lost).
	CheckTrackedFate = "tracked-fate"
)

// findingCalls bounds the examples a failing run's report shows of each
// check, and the calls of each finding: enough to start from, few enough
// to read in a CI log.
const findingCalls = 3

// logTailLines is how much of each node's log a failing run's report
// carries.
const logTailLines = 40

// Finding is one thing a failing run found wrong, with what an operator
// needs to start looking: the check that failed, when it happened among
// the faults, and a few calls that show it.
type Finding struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
	// When places the finding among the faults (see placeAt); "" when it
	// is not tied to a time (a node that exited).
	When  string `json:"when,omitempty"`
	Calls []Call `json:"calls,omitempty"`
}

// Call is one recorded request a finding points at.
type Call struct {
	Client int `json:"client"`
	// Call names a settled-order call (watermark, reserve, complete,
	// abandon); "" for a request for IDs.
	Call string `json:"call,omitempty"`
	// Start and End are offsets from the start of the run, as the faults'
	// times are.
	Start   time.Duration `json:"start"`
	End     time.Duration `json:"end"`
	Outcome string        `json:"outcome"`
	// Key is the idempotency key of a keyed call's attempt.
	Key string `json:"key,omitempty"`
	// IDs sums up the IDs it was answered with.
	IDs string `json:"ids,omitempty"`
	Err string `json:"error,omitempty"`
	// When places the call among the faults, from its start to its end.
	When string `json:"when"`
}

func (c Call) String() string {
	s := fmt.Sprintf("client %d, %.3fs to %.3fs, %s", c.Client, c.Start.Seconds(), c.End.Seconds(), c.Outcome)
	if c.Call != "" {
		s = fmt.Sprintf("client %d, %s, %.3fs to %.3fs, %s", c.Client, c.Call, c.Start.Seconds(), c.End.Seconds(), c.Outcome)
	}
	if c.Key != "" {
		s += ", key " + c.Key
	}
	if c.IDs != "" {
		s += " with " + c.IDs
	}
	if c.Err != "" {
		s += ": " + truncate(c.Err, 300)
	}
	return s + "; " + c.When
}

// NodeLog is the end of one node's log.
type NodeLog struct {
	File string   `json:"file"`
	Tail []string `json:"tail"`
}

func (l NodeLog) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "last %d lines of %s:\n", len(l.Tail), l.File)
	for _, line := range l.Tail {
		fmt.Fprintf(&b, "  | %s\n", line)
	}
	return b.String()
}

// TailLogs reads the last n lines of each file, each line cut to 500
// bytes; a file that cannot be read shows why.
func TailLogs(files []string, n int) []NodeLog {
	var out []NodeLog
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			out = append(out, NodeLog{File: f, Tail: []string{"(" + err.Error() + ")"}})
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		lines = lines[max(0, len(lines)-n):]
		for i := range lines {
			lines[i] = truncate(lines[i], 500)
		}
		out = append(out, NodeLog{File: f, Tail: lines})
	}
	return out
}

// LogFiles lists the node logs in dir, where a run that starts its own
// cluster keeps them.
func LogFiles(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(files)
	return files
}

// describe names fault f with its target, round and times.
func describe(f FaultRecord) string {
	round := ""
	if f.Round > 0 {
		round = fmt.Sprintf(" (round %d)", f.Round)
	}
	return fmt.Sprintf("fault %s%s on %s, started %.1fs, healed %.1fs", f.Kind, round, f.Target, f.Start.Seconds(), f.Healed.Seconds())
}

// placeAt says where t lies among faults, which are in order of start:
// during one, some time after one was healed, or before the first.
func placeAt(faults []FaultRecord, t time.Duration) string {
	i := sort.Search(len(faults), func(i int) bool { return faults[i].Start > t }) - 1
	switch {
	case len(faults) == 0:
		return "no fault ran in this run"
	case i < 0:
		return "before the first fault"
	case t < faults[i].Healed:
		return "during " + describe(faults[i])
	}
	return fmt.Sprintf("%.1fs after the heal of %s", (t - faults[i].Healed).Seconds(), describe(faults[i]))
}

// placeSpan says where a call from start to end lies among faults.
func placeSpan(faults []FaultRecord, start, end time.Duration) string {
	from, to := placeAt(faults, start), placeAt(faults, end)
	if samePlace(faults, start, end) {
		return from
	}
	return "began " + from + "; ended " + to
}

// samePlace reports whether start and end lie in the same fault's
// window, on the same side of its heal.
func samePlace(faults []FaultRecord, start, end time.Duration) bool {
	at := func(t time.Duration) (int, bool) {
		i := sort.Search(len(faults), func(i int) bool { return faults[i].Start > t }) - 1
		return i, i >= 0 && t >= faults[i].Healed
	}
	i, hi := at(start)
	j, hj := at(end)
	return i == j && hi == hj
}

// callOf is op as a Call placed among faults.
func callOf(op history.Op, faults []FaultRecord) Call {
	c := Call{Client: op.Client, Start: op.Start, End: op.End, Outcome: op.Outcome.String(), Key: op.Key, Err: op.Err,
		When: placeSpan(faults, op.Start, op.End)}
	if n := len(op.IDs); n > 0 {
		c.IDs = fmt.Sprintf("%d IDs %d..%d", n, op.IDs[0], op.IDs[n-1])
	}
	return c
}

// lastFailures are the last calls of ops (by end) that failed or whose
// effect is unknown and that ended in [from, to): what the clients saw
// while the cluster did not serve.
func lastFailures(ops []history.Op, faults []FaultRecord, from, to time.Duration) []Call {
	var idx []int
	for i, op := range ops {
		if op.Outcome != history.OK && op.End >= from && op.End < to {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return ops[idx[a]].End < ops[idx[b]].End })
	var out []Call
	for _, i := range idx[max(0, len(idx)-findingCalls):] {
		out = append(out, callOf(ops[i], faults))
	}
	return out
}

// diagnose lists what went wrong in a run with result res (its Report,
// Faults with their End, Recovered, Exited and BadResponses filled),
// history ops and withheld answers bad, all timed as offsets from the
// start of the run; nothing for a run that passed. elapsed is how long
// the run took.
func diagnose(res Result, ops []history.Op, bad []Call, elapsed time.Duration) []Finding {
	var out []Finding
	r := res.Report
	for _, k := range []struct {
		kind string
		n    int64
	}{
		{history.KindDuplicate, int64(r.Duplicates)},
		{history.KindOrder, r.OrderViolations},
		{history.KindNotIncreasing, int64(r.NotIncreasing)},
		{history.KindInterleaved, int64(r.Interleaved)},
		{history.KindRendered, int64(r.Misrendered)},
		{history.KindKeyConflict, int64(r.KeyConflicts)},
	} {
		if k.n == 0 {
			continue
		}
		shown := 0
		for _, v := range r.Examples {
			if v.Kind != k.kind || shown == findingCalls {
				continue
			}
			shown++
			f := Finding{Check: k.kind, Detail: fmt.Sprintf("%d in all; e.g. %s", k.n, v.Detail)}
			for _, i := range []int{v.A, v.B} {
				if i >= 0 && i < len(ops) && (i == v.A || v.B != v.A) {
					f.Calls = append(f.Calls, callOf(ops[i], res.Faults))
				}
			}
			if len(f.Calls) > 0 {
				// The second call is where the violation shows.
				f.When = f.Calls[len(f.Calls)-1].When
			}
			out = append(out, f)
		}
		if shown == 0 {
			out = append(out, Finding{Check: k.kind, Detail: fmt.Sprintf("%d in all", k.n)})
		}
	}
	if res.BadResponses > 0 {
		f := Finding{Check: CheckBadAnswers, Detail: fmt.Sprintf("%d answers broke the order or the wire format and were withheld", res.BadResponses)}
		for _, c := range bad[:min(len(bad), findingCalls)] {
			c.When = placeSpan(res.Faults, c.Start, c.End)
			f.Calls = append(f.Calls, c)
		}
		if len(f.Calls) > 0 {
			f.When = f.Calls[0].When
		}
		out = append(out, f)
	}
	for _, fr := range res.Faults {
		if fr.Err != "" {
			out = append(out, Finding{Check: CheckFaultError, Detail: fr.Err, When: describe(fr)})
		}
		if !fr.Recovered && fr.Err == "" {
			out = append(out, Finding{Check: CheckFaultNotRecovered,
				Detail: fmt.Sprintf("no request succeeded within %s of the heal; the last failures are shown", recoveryTimeout),
				When:   describe(fr), Calls: lastFailures(ops, res.Faults, fr.Healed, fr.End)})
		}
	}
	if !res.Recovered {
		from := time.Duration(0)
		if n := len(res.Faults); n > 0 {
			from = res.Faults[n-1].Healed
		}
		out = append(out, Finding{Check: CheckNotRecovered,
			Detail: fmt.Sprintf("no request succeeded within %s after the run ended; the last failures are shown", recoveryTimeout),
			When:   placeAt(res.Faults, elapsed), Calls: lastFailures(ops, res.Faults, from, math.MaxInt64)})
	}
	for _, e := range res.Exited {
		out = append(out, Finding{Check: CheckNodeExited, Detail: e})
	}
	if n := res.Keyed.Reused; n > 0 {
		out = append(out, Finding{Check: CheckKeyReused, Detail: fmt.Sprintf("%d retries asked what their key's first attempt asked and were refused as reusing it with other arguments", n)})
	}
	for _, c := range res.Keyed.Crashes {
		if c.Matched {
			continue
		}
		f := Finding{Check: CheckCrashAnswer, Detail: c.String()}
		for _, fr := range res.Faults {
			if faults[fr.Kind].keyed && strings.Contains(fr.Target, c.Key) {
				f.When = describe(fr)
			}
		}
		out = append(out, f)
	}
	return out
}

// badCalls keeps the first few answers the clients withheld, for the
// report: they are recorded in the history only as unknown operations.
type badCalls struct {
	mu    sync.Mutex
	calls []Call
}

func (b *badCalls) add(c Call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) < findingCalls {
		b.calls = append(b.calls, c)
	}
}

func (b *badCalls) list() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Call(nil), b.calls...)
}

// settledCallOf is a settled-order call as a Call placed among faults,
// with the mark or the reservation it names.
func settledCallOf(op history.SettleOp, faults []FaultRecord) Call {
	c := Call{Client: op.Client, Call: op.Call.String(), Start: op.Start, End: op.End, Outcome: op.Outcome.String(), Err: op.Err,
		When: placeSpan(faults, op.Start, op.End)}
	switch {
	case op.Call == history.CallWatermark && op.Outcome == history.OK:
		c.IDs = fmt.Sprintf("W at tick %d", op.Mark)
	case op.Count > 0:
		c.IDs = fmt.Sprintf("reservation of ticks %d..%d", op.First, op.First+op.Count-1)
	}
	return c
}

// diagnoseSettled lists what the settled-order checks and the tracked
// writers found wrong in a run with result res and settled-order calls
// ops, timed as offsets from the start of the run.
func diagnoseSettled(res Result, ops []history.SettleOp) []Finding {
	var out []Finding
	r := res.Report.Settled
	for _, k := range []struct {
		kind string
		n    int
	}{
		{history.KindWatermarkDown, r.WatermarkDown},
		{history.KindCompletedSettled, r.CompletedSettled},
		{history.KindReservedSettled, r.ReservedSettled},
	} {
		if k.n == 0 {
			continue
		}
		shown := 0
		for _, v := range r.Examples {
			if v.Kind != k.kind || shown == findingCalls || v.A >= len(ops) || v.B >= len(ops) {
				continue
			}
			shown++
			a, b := settledCallOf(ops[v.A], res.Faults), settledCallOf(ops[v.B], res.Faults)
			out = append(out, Finding{Check: k.kind, Detail: fmt.Sprintf("%d in all; e.g. %s", k.n, v.Detail), When: b.When, Calls: []Call{a, b}})
		}
		if shown == 0 {
			out = append(out, Finding{Check: k.kind, Detail: fmt.Sprintf("%d in all", k.n)})
		}
	}
	if t := res.Tracked; t.Failures() > 0 {
		out = append(out, Finding{Check: CheckTrackedFate,
			Detail: fmt.Sprintf("%d answers named a fate the writer could not have led to, %d said the cluster knows no reservation it had handed out", t.WrongFate, t.Lost)})
	}
	return out
}
