package history

// Keyed calls (issue 25): a call for IDs may carry an idempotency key, and
// every attempt with one key is one call. The cluster decides a key once:
// its first committed answer is the answer of every attempt, from any
// node, after any leader change. So the checker folds the attempts with a
// key (Op.Key) into one call before it checks anything:
//
//   - the call lasts from the start of its first attempt to the end of
//     the first attempt answered (the answer that reached the caller): its
//     IDs were decided at some point in between, so real-time order is
//     checked over that interval, and a replay's IDs against what had
//     been handed out when the call first began;
//   - an attempt answered with the IDs of an earlier answer to the key is
//     a replay (Report.Replays), not a duplicate;
//   - an attempt answered with other IDs than the key's first answer is
//     the bug keys exist to prevent (a retry that took new IDs, burning
//     the first answer's or handing out both): KindKeyConflict. Each
//     distinct answer is still checked as a call of its own, so its IDs
//     also meet the other checks;
//   - a key never answered is one call whose effect is unknown (or that
//     was refused, when every attempt was): whatever its attempts asked,
//     it took at most one count of IDs, which the dense check relies on.

import (
	"cmp"
	"fmt"
	"slices"
)

// KindKeyConflict marks an attempt of a keyed call answered with other IDs
// than the key's first answer (A: the attempt with the first answer, B:
// the other).
const KindKeyConflict = "key-conflict"

// keyedFold is a history with the attempts of each keyed call folded
// into one call.
type keyedFold struct {
	// calls are the calls; orig[i] is the index in the checked history of
	// the attempt calls[i] stands for (its answer, or its first attempt
	// when it has none). orig is nil when the history has no key: calls
	// is then the history itself.
	calls []Op
	orig  []int
	// keyed counts the keys, replays the answers that repeat an earlier
	// answer to their key, conflicts the answers that differ from their
	// key's first.
	keyed, replays, conflicts int
	// ex holds the conflicts' examples, their indexes already in the
	// checked history.
	ex examples
}

// at is the index in the checked history of calls[i].
func (f *keyedFold) at(i int) int {
	if f.orig == nil || i < 0 {
		return i
	}
	return f.orig[i]
}

// examples are the examples of checks run on the calls, pointed back
// into the checked history, then the conflicts'.
func (f *keyedFold) examples(vs []Violation) []Violation {
	for i := range vs {
		vs[i].A, vs[i].B = f.at(vs[i].A), f.at(vs[i].B)
	}
	return append(vs, f.ex.list...)
}

// foldKeyed folds the attempts of ops that share a key into one call
// each, keeping a KindKeyConflict example for each answer that differs
// from its key's first. Unkeyed operations are kept as they are, in
// order, and a history without keys is returned as it is.
func foldKeyed(ops []Op) keyedFold {
	byKey := map[string][]int{}
	for i, op := range ops {
		if op.Key != "" {
			byKey[op.Key] = append(byKey[op.Key], i)
		}
	}
	if len(byKey) == 0 {
		return keyedFold{calls: ops}
	}
	f := keyedFold{keyed: len(byKey), calls: make([]Op, 0, len(ops)), orig: make([]int, 0, len(ops))}
	for i, op := range ops {
		if op.Key == "" {
			f.calls = append(f.calls, op)
			f.orig = append(f.orig, i)
			continue
		}
		attempts := byKey[op.Key]
		if attempts[0] != i {
			continue // folded at the key's first attempt
		}
		f.foldOne(ops, attempts)
	}
	return f
}

// foldOne adds the call of one key, made of the attempts at indexes
// attempts of ops (in order of start).
func (f *keyedFold) foldOne(ops []Op, attempts []int) {
	start, end := ops[attempts[0]].Start, ops[attempts[0]].End
	outcome, asked := Failed, 0
	var answered []int
	for _, a := range attempts {
		op := ops[a]
		start, end = min(start, op.Start), max(end, op.End)
		asked = max(asked, op.Asked)
		switch op.Outcome {
		case OK:
			answered = append(answered, a)
		case Failed:
		default:
			outcome = Unknown
		}
	}
	if len(answered) == 0 {
		first := ops[attempts[0]]
		f.calls = append(f.calls, Op{Client: first.Client, Start: start, End: end, Outcome: outcome, Err: first.Err, Asked: asked, Key: first.Key})
		f.orig = append(f.orig, attempts[0])
		return
	}
	// The answer that reached the caller first is the key's; a later one
	// with the same IDs is a replay of an answer, another is a conflict.
	slices.SortStableFunc(answered, func(a, b int) int { return cmp.Compare(ops[a].End, ops[b].End) })
	var distinct []int
	for _, a := range answered {
		j := slices.IndexFunc(distinct, func(d int) bool { return sameAnswer(ops[d], ops[a]) })
		if j >= 0 {
			f.replays++
			continue
		}
		if len(distinct) > 0 {
			f.conflicts++
			first, op := ops[distinct[0]], ops[a]
			f.ex.add(Violation{Kind: KindKeyConflict, A: distinct[0], B: a,
				Detail: fmt.Sprintf("key %q answered client %d with %s, then client %d with %s", op.Key, first.Client, idSpan(first.IDs), op.Client, idSpan(op.IDs))})
		}
		distinct = append(distinct, a)
		op := ops[a]
		op.Start = start
		op.Asked = asked
		f.calls = append(f.calls, op)
		f.orig = append(f.orig, a)
	}
}

// sameAnswer reports whether a and b were answered alike.
func sameAnswer(a, b Op) bool {
	return slices.Equal(a.IDs, b.IDs) && slices.Equal(a.Rendered, b.Rendered)
}

// idSpan sums up ids for a violation's detail.
func idSpan(ids []uint64) string {
	switch len(ids) {
	case 0:
		return "no IDs"
	case 1:
		return fmt.Sprintf("ID %d", ids[0])
	}
	return fmt.Sprintf("%d IDs %d..%d", len(ids), ids[0], ids[len(ids)-1])
}
