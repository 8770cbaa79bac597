package history

// The settled order (issue 24): tracked reservations and the settled mark
// W. Beside the IDs, a history records the calls that decide what W may
// say: reads of W, Reserve, Complete and Abandon. CheckSettled checks
// them for three properties:
//
//  1. W never goes down: if read a ended before read b began, b.Mark >=
//     a.Mark, whichever nodes and clients made them.
//  2. No reservation is completed after a W above it was seen: once a
//     read answered W > r.First, r was settled (completed, abandoned or
//     expired) when that read took effect, so a Complete of r that began
//     after it may answer OK only if an earlier Complete of r could have
//     done it, since Complete is idempotent and a retry answers OK. This
//     is also "W never passes a reservation completed later": both say
//     that no read of W above r ends before every Complete of r that
//     could have taken effect begins, with one of them OK.
//  3. No reservation is handed out below a W already seen: a Reserve that
//     began after a read of W > r.First returned ticks W had passed, so
//     W counted as settled a tick not yet handed out.
//
// Marks and reservations are in ticks (the handle's first tick and the
// watermark_tick of an answer), so the checks hold under every layout.
// Failed and unknown calls are counted and, as in Check, constrain
// nothing, except that an unknown Complete may have completed its
// reservation (property 2).

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// SettleCall names the call a SettleOp records.
type SettleCall int

const (
	// CallWatermark is a read of W; an OK one holds it in Mark.
	CallWatermark SettleCall = iota
	// CallReserve is a Reserve; an OK one holds its ticks in First and
	// Count.
	CallReserve
	// CallComplete is a Complete of the reservation First and Count name.
	CallComplete
	// CallAbandon is an Abandon of the reservation First and Count name.
	CallAbandon
)

// String returns the lower-case name of the call, for reports.
func (c SettleCall) String() string {
	switch c {
	case CallWatermark:
		return "watermark"
	case CallReserve:
		return "reserve"
	case CallComplete:
		return "complete"
	case CallAbandon:
		return "abandon"
	}
	return fmt.Sprintf("call(%d)", int(c))
}

// SettleOp is one settled-order call: its real-time interval, on the
// same clock as Op's, and what it answered.
type SettleOp struct {
	Call   SettleCall
	Client int
	// Start and End are as Op's: invocation and response, as offsets
	// from the recorder's origin.
	Start, End time.Duration
	Outcome    Outcome
	// Mark is the W an OK read answered, in ticks.
	Mark uint64
	// First and Count name the reservation in ticks: the one an OK
	// Reserve handed out, or the one a Complete or Abandon named.
	First, Count uint64
	// Err is the error text of a Failed or Unknown call.
	Err string
}

// Violation kinds of CheckSettled, used in Violation.Kind with indexes
// into the checked SettleOp slice.
const (
	// KindWatermarkDown marks a read of W (B) that answered less than a
	// read (A) that ended before it began.
	KindWatermarkDown = "watermark-down"
	// KindCompletedSettled marks a Complete (B) answered OK although a
	// read (A) above its reservation's first tick ended before every
	// Complete of it that could have taken effect began.
	KindCompletedSettled = "completed-settled"
	// KindReservedSettled marks a Reserve (B) that handed out ticks a read
	// (A) that ended before it began had already passed.
	KindReservedSettled = "reserved-settled"
)

// CallCounts tallies the calls of one kind by outcome.
type CallCounts struct {
	OK, Failed, Unknown int
}

func (c *CallCounts) add(o Outcome) {
	switch o {
	case OK:
		c.OK++
	case Failed:
		c.Failed++
	default:
		c.Unknown++
	}
}

// SettledReport summarises a checked settled-order history; the counts
// are exact, as Report's.
type SettledReport struct {
	// Reads, Reserves, Completes and Abandons tally the calls.
	Reads, Reserves, Completes, Abandons CallCounts
	// WatermarkDown counts the reads of W that answered less than a read
	// that ended before they began.
	WatermarkDown int
	// CompletedSettled counts the reservations that a Complete answered
	// OK after a read of W above them (KindCompletedSettled).
	CompletedSettled int
	// ReservedSettled counts the Reserves that handed out ticks below a W
	// read before they began.
	ReservedSettled int
	// Examples holds up to maxExamples violations of each kind, whose
	// indexes refer to the checked SettleOp slice.
	Examples []Violation
}

// OK reports whether the settled-order history holds every property.
func (r SettledReport) OK() bool {
	return r.WatermarkDown == 0 && r.CompletedSettled == 0 && r.ReservedSettled == 0
}

// Calls is how many settled-order calls the history holds.
func (r SettledReport) Calls() int {
	n := 0
	for _, c := range []CallCounts{r.Reads, r.Reserves, r.Completes, r.Abandons} {
		n += c.OK + c.Failed + c.Unknown
	}
	return n
}

// String is one line of counts, then one indented line per example.
func (r SettledReport) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "settled %s: reads=%d/%d reserves=%d/%d completes=%d/%d abandons=%d/%d watermark-down=%d completed-settled=%d reserved-settled=%d",
		verdict, r.Reads.OK, r.Reads.OK+r.Reads.Failed+r.Reads.Unknown,
		r.Reserves.OK, r.Reserves.OK+r.Reserves.Failed+r.Reserves.Unknown,
		r.Completes.OK, r.Completes.OK+r.Completes.Failed+r.Completes.Unknown,
		r.Abandons.OK, r.Abandons.OK+r.Abandons.Failed+r.Abandons.Unknown,
		r.WatermarkDown, r.CompletedSettled, r.ReservedSettled)
	for _, v := range r.Examples {
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

// settleQuery is a point of the sweep: op asks, at time at, about the
// reads that ended before it.
type settleQuery struct {
	at time.Duration
	op int
}

// CheckSettled checks ops for the three properties of the settled order
// and returns exact counts with examples. It sorts the OK reads by end
// and the questions (each OK read, each OK Reserve, each completed
// reservation) by time, then sweeps: before each question every read that
// ended before it is folded into the highest W seen so far, which is all
// any question needs. O(n log n) for n calls.
func CheckSettled(ops []SettleOp) SettledReport {
	var rep SettledReport
	var ex examples
	var reads []int
	var queries []settleQuery
	for i, op := range ops {
		rep.tally(op)
		if op.Outcome != OK {
			continue
		}
		switch op.Call {
		case CallWatermark:
			reads = append(reads, i)
			queries = append(queries, settleQuery{at: op.Start, op: i})
		case CallReserve:
			queries = append(queries, settleQuery{at: op.Start, op: i})
		}
	}
	queries = append(queries, completedQueries(ops)...)
	slices.SortFunc(reads, func(a, b int) int { return cmp.Compare(ops[a].End, ops[b].End) })
	slices.SortFunc(queries, func(a, b settleQuery) int { return cmp.Compare(a.at, b.at) })

	best, next := -1, 0 // best: the ended read with the highest W, the first of equals
	for _, q := range queries {
		for ; next < len(reads) && ops[reads[next]].End < q.at; next++ {
			if r := reads[next]; best < 0 || ops[r].Mark > ops[best].Mark {
				best = r
			}
		}
		if best >= 0 {
			rep.judge(ops, best, q.op, &ex)
		}
	}
	rep.Examples = ex.list
	return rep
}

func (r *SettledReport) tally(op SettleOp) {
	switch op.Call {
	case CallWatermark:
		r.Reads.add(op.Outcome)
	case CallReserve:
		r.Reserves.add(op.Outcome)
	case CallComplete:
		r.Completes.add(op.Outcome)
	case CallAbandon:
		r.Abandons.add(op.Outcome)
	}
}

// completedQueries has one question per reservation some Complete
// answered OK: at the earliest start of its Completes that could have
// completed it (OK or unknown), asked by its first OK Complete. A read of
// W above it that ended before then saw it settled while nothing had yet
// asked to complete it, so no Complete may answer OK later. A later
// Complete alone proves nothing: it may be a retry that found the
// reservation completed, which Complete answers OK.
func completedQueries(ops []SettleOp) []settleQuery {
	type group struct {
		first time.Duration // earliest start of a Complete that may have done it
		ok    int           // first OK Complete, -1 if none
	}
	groups := map[[2]uint64]*group{}
	var order [][2]uint64 // groups in the order met, so examples are repeatable
	for i, op := range ops {
		if op.Call != CallComplete || op.Outcome == Failed {
			continue // a refused Complete completed nothing
		}
		key := [2]uint64{op.First, op.Count}
		g := groups[key]
		if g == nil {
			g = &group{first: op.Start, ok: -1}
			groups[key] = g
			order = append(order, key)
		}
		g.first = min(g.first, op.Start)
		if op.Outcome == OK && g.ok < 0 {
			g.ok = i
		}
	}
	var out []settleQuery
	for _, key := range order {
		if g := groups[key]; g.ok >= 0 {
			out = append(out, settleQuery{at: g.first, op: g.ok})
		}
	}
	return out
}

// judge checks question b against the read a with the highest W that
// ended before b's time.
func (r *SettledReport) judge(ops []SettleOp, a, b int, ex *examples) {
	w, op := ops[a].Mark, ops[b]
	switch op.Call {
	case CallWatermark:
		if op.Mark >= w {
			return
		}
		r.WatermarkDown++
		ex.add(Violation{Kind: KindWatermarkDown, A: a, B: b,
			Detail: fmt.Sprintf("client %d read W %d, ending at %v; client %d, starting at %v, read W %d",
				ops[a].Client, w, ops[a].End, op.Client, op.Start, op.Mark)})
	case CallComplete:
		if w <= op.First {
			return
		}
		r.CompletedSettled++
		ex.add(Violation{Kind: KindCompletedSettled, A: a, B: b,
			Detail: fmt.Sprintf("client %d read W %d, ending at %v, before any Complete of reservation %d+%d began; client %d's Complete of it, from %v, answered OK",
				ops[a].Client, w, ops[a].End, op.First, op.Count, op.Client, op.Start)})
	case CallReserve:
		if w <= op.First {
			return
		}
		r.ReservedSettled++
		ex.add(Violation{Kind: KindReservedSettled, A: a, B: b,
			Detail: fmt.Sprintf("client %d read W %d, ending at %v; client %d's Reserve, from %v, was handed ticks %d+%d below it",
				ops[a].Client, w, ops[a].End, op.Client, op.Start, op.First, op.Count)})
	}
}

// settleLog holds a Recorder's settled-order calls. They are few beside
// the IDs (a read of W or a decision per reservation), so one lock and
// one slice serve them.
type settleLog struct {
	mu   sync.Mutex
	ops  []SettleOp
	done []bool
}

// SettlePending is a settled-order call that has begun. Exactly one of
// its endings (Mark, Reserved, OK, Fail, Unknown) is called, once.
type SettlePending struct {
	r *Recorder
	i int
}

// BeginSettle records the invocation of call by client, naming the
// reservation first and count (Complete, Abandon; 0 otherwise), before
// the request is sent.
func (r *Recorder) BeginSettle(client int, call SettleCall, first, count uint64) SettlePending {
	l := &r.settled
	l.mu.Lock()
	defer l.mu.Unlock()
	start := time.Since(r.origin)
	l.ops = append(l.ops, SettleOp{Call: call, Client: client, Start: start, End: start, Outcome: Unknown, First: first, Count: count})
	l.done = append(l.done, false)
	return SettlePending{r: r, i: len(l.ops) - 1}
}

// Mark records a read of W that answered tick.
func (p SettlePending) Mark(tick uint64) {
	p.finish(func(op *SettleOp) { op.Outcome, op.Mark = OK, tick })
}

// Reserved records a Reserve answered with the reservation of count ticks
// from first.
func (p SettlePending) Reserved(first, count uint64) {
	p.finish(func(op *SettleOp) { op.Outcome, op.First, op.Count = OK, first, count })
}

// OK records a Complete or Abandon the server answered as asked.
func (p SettlePending) OK() {
	p.finish(func(op *SettleOp) { op.Outcome = OK })
}

// Fail records a call the server certainly refused.
func (p SettlePending) Fail(err error) {
	p.finish(func(op *SettleOp) { op.Outcome, op.Err = Failed, errText(err) })
}

// Unknown records a call whose effect is unknown.
func (p SettlePending) Unknown(err error) {
	p.finish(func(op *SettleOp) { op.Outcome, op.Err = Unknown, errText(err) })
}

// finish takes the end time first, as Pending's does, and refuses a
// second ending, which would overwrite the history.
func (p SettlePending) finish(set func(*SettleOp)) {
	end := time.Since(p.r.origin)
	l := &p.r.settled
	l.mu.Lock()
	defer l.mu.Unlock()
	op := &l.ops[p.i]
	if l.done[p.i] {
		panic(fmt.Sprintf("history: a %s of client %d, begun at %v, completed twice", op.Call, op.Client, op.Start))
	}
	l.done[p.i] = true
	op.End = end
	set(op)
}

// SettleOps returns a snapshot of the settled-order calls in invocation
// order; those in flight are Unknown, ending at the snapshot, as in Ops.
func (r *Recorder) SettleOps() []SettleOp {
	now := time.Since(r.origin)
	l := &r.settled
	l.mu.Lock()
	out := slices.Clone(l.ops)
	for i := range out {
		if !l.done[i] {
			out[i].End = max(now, out[i].Start)
			out[i].Err = InFlight
		}
	}
	l.mu.Unlock()
	slices.SortStableFunc(out, func(a, b SettleOp) int { return cmp.Compare(a.Start, b.Start) })
	return out
}
