package history

// The dense check (issue 25): a dense sequence hands out 1, 2, 3, ...
// (from its start) with no gap the cluster made. A call of n IDs that is
// committed takes the next n IDs, whole; one that is refused takes none.
// So every ID below the highest answered must be held by an OK answer,
// or have been taken by a call whose answer never arrived: an Unknown
// one (a timeout, a broken connection, a leader lost mid-call; every
// error that is not a definite refusal). CheckDense checks, for one
// dense sequence's calls:
//
//  1. Explained: the number of missing IDs (those in [start, highest]
//     that no OK answer holds) is at most the sum of the counts the
//     Unknown calls asked for.
//  2. Gaps coverable: each missing run (maximal run of consecutive
//     missing IDs) is exactly the sum of the counts of some Unknown
//     calls that could have taken it: a call that began after the call
//     holding the ID just above the run ended, or ended before the call
//     holding the ID just below it began, was ordered after or before
//     the run in real time, so it cannot have taken it. A committed
//     call takes all of its count, so a run must be filled by whole
//     calls.
//  3. In range: no OK answer holds an ID below the sequence's start.
//
// The conditions are necessary, not sufficient: each run is checked on
// its own, so one Unknown call may be counted towards two runs, and the
// sum of property 1 bounds them together. Every violation found is real:
// a gap no call the client lost can explain, made by the cluster.
// Uniqueness and real-time order are Check's: run it on the same calls.
// An Unknown call whose count was not recorded (Asked 0) may have taken
// any number of IDs, so it explains any run it could have taken and makes
// property 1 hold. Failed calls took nothing; the caller must record as
// Failed only definite refusals (a timeout is Unknown).
//
// The attempts of a keyed call (Op.Key) are one call, as in Check: a key
// is decided once, so its call took its answer's IDs and nothing more,
// however many of its attempts were lost, and one never answered took at
// most one count. A retry that took new IDs instead of its first
// attempt's leaves the first attempt's as a gap no lost call explains.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Violation kinds of CheckDense, with indexes into the checked Op slice.
const (
	// KindDenseGap marks a run of missing IDs that no set of unknown calls
	// that could have taken it fills exactly; A and B are the calls
	// holding the IDs just below (-1 at the start) and above it.
	KindDenseGap = "dense-gap"
	// KindDenseUnexplained marks more missing IDs than the unknown calls
	// asked for, all together (A and B -1).
	KindDenseUnexplained = "dense-unexplained"
	// KindDenseRange marks an ID below the sequence's start (A the call).
	KindDenseRange = "dense-range"
)

// maxSubsetWork bounds the work of the exact subset-sum test of one run
// (number of candidate calls times the run's length); above it a run
// passes when the candidates' counts add up to at least its length.
const maxSubsetWork = 1 << 26

// DenseReport summarises a checked dense sequence's calls.
type DenseReport struct {
	// Start is the sequence's first ID; Highest the highest answered (0
	// when none was).
	Start, Highest uint64
	// Calls tallies the calls by outcome, a keyed call's attempts as one.
	Calls CallCounts
	// IDs is the number of distinct IDs answered.
	IDs uint64
	// Missing is how many IDs in [Start, Highest] no OK answer holds, in
	// Gaps runs; UnknownAsked is the sum of the counts the Unknown calls
	// asked for (those with a count).
	Missing      uint64
	Gaps         int
	UnknownAsked uint64
	// Unexplained is how many missing IDs exceed UnknownAsked (0 when an
	// Unknown call has no count).
	Unexplained uint64
	// BadGaps counts the runs no unknown calls that could have taken them
	// fill exactly (KindDenseGap).
	BadGaps int
	// BelowStart counts answered IDs below Start.
	BelowStart int
	// Examples holds up to maxExamples violations of each kind.
	Examples []Violation
}

// OK reports whether every gap is explained.
func (r DenseReport) OK() bool {
	return r.Unexplained == 0 && r.BadGaps == 0 && r.BelowStart == 0
}

// String is one line of counts, then one indented line per example.
func (r DenseReport) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "dense %s: calls=%d/%d failed=%d unknown=%d ids=%d highest=%d missing=%d in %d gaps, unknown calls asked %d; unexplained=%d bad-gaps=%d below-start=%d",
		verdict, r.Calls.OK, r.Calls.OK+r.Calls.Failed+r.Calls.Unknown, r.Calls.Failed, r.Calls.Unknown,
		r.IDs, r.Highest, r.Missing, r.Gaps, r.UnknownAsked, r.Unexplained, r.BadGaps, r.BelowStart)
	for _, v := range r.Examples {
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

// CheckDense checks the calls of one dense sequence whose first ID is
// start (0 is taken as 1) for the properties above. Indexes in the
// report refer to positions in ops; it does not modify ops.
func CheckDense(ops []Op, start uint64) DenseReport {
	fold := foldKeyed(ops)
	rep := checkDense(fold.calls, start)
	for i := range rep.Examples {
		rep.Examples[i].A, rep.Examples[i].B = fold.at(rep.Examples[i].A), fold.at(rep.Examples[i].B)
	}
	return rep
}

// checkDense is CheckDense on a history whose keyed calls are folded.
func checkDense(ops []Op, start uint64) DenseReport {
	start = max(start, 1)
	rep := DenseReport{Start: start}
	var ex examples
	var refs []idRef
	var unknown []int
	wildcard := false
	for i, op := range ops {
		rep.Calls.add(op.Outcome)
		switch op.Outcome {
		case OK:
			for _, id := range op.IDs {
				refs = append(refs, idRef{id: id, op: i})
			}
		case Failed:
		default:
			unknown = append(unknown, i)
			if op.Asked <= 0 {
				wildcard = true
			} else {
				rep.UnknownAsked += uint64(op.Asked)
			}
		}
	}
	slices.SortFunc(refs, func(a, b idRef) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.op, b.op)) })
	refs = slices.CompactFunc(refs, func(a, b idRef) bool { return a.id == b.id }) // duplicates are Check's
	for len(refs) > 0 && refs[0].id < start {
		rep.BelowStart++
		ex.add(Violation{Kind: KindDenseRange, A: refs[0].op, B: -1,
			Detail: fmt.Sprintf("client %d was answered %d, below the sequence's start %d", ops[refs[0].op].Client, refs[0].id, start)})
		refs = refs[1:]
	}
	rep.IDs = uint64(len(refs))
	if len(refs) == 0 {
		rep.Examples = ex.list
		return rep
	}
	rep.Highest = refs[len(refs)-1].id
	prev, below := start-1, -1 // the ID below the next run, and its call
	for _, r := range refs {
		if r.id > prev+1 {
			lo, hi := prev+1, r.id-1
			rep.Gaps++
			rep.Missing += hi - lo + 1
			if !coverable(ops, unknown, below, r.op, hi-lo+1) {
				rep.BadGaps++
				ex.add(Violation{Kind: KindDenseGap, A: below, B: r.op,
					Detail: fmt.Sprintf("IDs %d..%d (%d) were answered to no call, and no calls that could have taken them, unanswered, asked for that many in all%s",
						lo, hi, hi-lo+1, around(ops, below, r.op))})
			}
		}
		prev, below = r.id, r.op
	}
	if !wildcard && rep.Missing > rep.UnknownAsked {
		rep.Unexplained = rep.Missing - rep.UnknownAsked
		ex.add(Violation{Kind: KindDenseUnexplained, A: -1, B: -1,
			Detail: fmt.Sprintf("%d IDs below %d were answered to no call, but the unknown calls asked for only %d", rep.Missing, rep.Highest, rep.UnknownAsked)})
	}
	rep.Examples = ex.list
	return rep
}

// around describes the calls holding the IDs around a run.
func around(ops []Op, below, above int) string {
	var parts []string
	if below >= 0 {
		parts = append(parts, fmt.Sprintf("below: client %d's call %v..%v", ops[below].Client, ops[below].Start, ops[below].End))
	}
	parts = append(parts, fmt.Sprintf("above: client %d's call %v..%v", ops[above].Client, ops[above].Start, ops[above].End))
	return " (" + strings.Join(parts, "; ") + ")"
}

// coverable reports whether a run of n missing IDs, between the IDs of
// calls below (-1: the run starts the sequence) and above, is the sum of
// the counts of some unknown calls that could have taken it.
func coverable(ops []Op, unknown []int, below, above int, n uint64) bool {
	var counts []uint64
	var sum uint64
	for _, u := range unknown {
		op := ops[u]
		if op.Start > ops[above].End || (below >= 0 && op.End < ops[below].Start) {
			continue // ordered after the ID above, or before the ID below
		}
		if op.Asked <= 0 {
			return true // any count: it may have taken the run
		}
		if c := uint64(op.Asked); c <= n {
			counts = append(counts, c)
			sum += c
		}
	}
	switch {
	case sum < n:
		return false
	case sum == n:
		return true
	case uint64(len(counts))*n > maxSubsetWork:
		return true // too much work to be exact: the bound holds
	}
	reach := make([]bool, n+1)
	reach[0] = true
	for _, c := range counts {
		for s := n; s >= c; s-- {
			if reach[s-c] {
				reach[s] = true
			}
		}
		if reach[n] {
			return true
		}
	}
	return false
}
