// Package history records the operations clients perform against the Ordo
// sequencer and checks the recorded history against the sequencer's
// guarantee: IDs are handed out in one strict, linearizable order.
//
// A history is checked for five properties:
//
//  1. Unique: no ID is acknowledged twice, across responses or within one.
//  2. Real-time order: if operation a completed before operation b was
//     invoked (a.End < b.Start), every ID of b is greater than every ID of a.
//  3. Increasing: the IDs of one response are strictly increasing.
//  4. Contiguous: no ID of another response falls strictly between the
//     smallest and largest ID of a response, so the ranges handed out by two
//     responses never interleave.
//  5. Rendered in order: under a 128-bit layout, where IDs holds ticks and
//     Rendered their UUIDv7 or ULID text, every text is its tick's, and
//     the text and the 16 bytes of every ID sort exactly as the ticks do,
//     across the whole history.
//
// An operation may be one attempt of a keyed call (Op.Key, an idempotency
// key): every attempt with one key is one call, which lasts from the start
// of its first attempt to the end of its first answer, and whose answers
// must all be the same IDs (keyed.go).
//
// Only acknowledged (OK) operations carry IDs. Failed and Unknown operations
// are counted but impose no constraint: a failed operation handed out
// nothing, and an unknown one may or may not have consumed IDs that nobody
// observed, which is allowed (gaps are fine, reuse and reordering are not).
//
// Check is exact and runs in O(n log n + m log m) for n operations and m IDs,
// so that histories of millions of operations from long soak tests can be
// checked without sampling.
//
// The settled order of tracked reservations (reads of the settled mark W,
// Reserve, Complete, Abandon) is recorded beside the IDs and checked by
// CheckSettled (settled.go), whose report a Report carries in Settled.
package history

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed-e8569b35/ordo/layout"
)

// Outcome classifies how an operation ended. The distinction between Failed
// and Unknown matters to a reader of the report, not to the checker: neither
// returned IDs, so neither constrains the order.
type Outcome int

const (
	// OK means the server acknowledged the operation and returned IDs.
	OK Outcome = iota
	// Failed means the server definitely rejected the operation, so it
	// handed out no IDs.
	Failed
	// Unknown means the client cannot tell whether the operation took
	// effect (timeout, cancellation, transport error, or still in flight).
	Unknown
)

// String returns the lower-case name of the outcome, for reports and logs.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// Op is one client operation: its real-time interval and what it returned.
// Times are monotonic offsets from the recorder's origin so that wall-clock
// jumps cannot fabricate or hide real-time precedence.
type Op struct {
	// Client identifies the issuing client; it is informational only,
	// because the guarantee is global, not per client.
	Client int
	// Start is when the operation was invoked.
	Start time.Duration
	// End is when the operation's response (or failure) was observed.
	End time.Duration
	// Outcome says whether IDs were acknowledged.
	Outcome Outcome
	// IDs are the acknowledged IDs, in the order the server returned them.
	// They are only considered when Outcome is OK.
	IDs []uint64
	// Rendered is, under a 128-bit layout (uuidv7, ulid), the canonical
	// text of each ID the client returned, in the order of IDs, which then
	// holds the IDs' ticks. Empty for 64-bit layouts.
	Rendered []string
	// Err is the error text for Failed and Unknown operations.
	Err string
	// Asked is the number of IDs the operation asked for, when its
	// recorder was told (BeginN, Caller.CallN); 0 when not. The dense
	// check (CheckDense) bounds what an Unknown operation may have taken
	// by it.
	Asked int
	// Key, when set, names the keyed call this operation is an attempt
	// of: every attempt with one key is one call (keyed.go). It must name
	// one call in the whole history, so a recorder whose keys are scoped
	// to a caller includes the caller in it.
	Key string
}

// Recorder collects operations from many goroutines. Each operation is
// given its slot when it begins, so an operation that never completes still
// appears in the history (as Unknown). Each client records into a log of
// its own, so callers recording millions of operations a second do not
// queue on one lock; a snapshot merges the logs in invocation order.
type Recorder struct {
	origin time.Time // carries a monotonic reading; only used via time.Since
	logs   sync.Map  // client (int) -> *clientLog
	// settled holds the settled-order calls (settled.go).
	settled settleLog
}

// clientLog holds one client's operations. Its lock is taken by that
// client and by snapshots, so it is almost never contended. Its storage
// holds no pointers (IDs and error texts live in side tables, referred to
// by index), so the garbage collector never scans the millions of
// operations a long run records.
type clientLog struct {
	client int

	mu sync.Mutex
	// slots holds the operations in order, in chunks that double in size
	// up to maxSlotChunk, so a client with few operations costs little
	// and recording millions never copies the ones recorded before.
	slots [][]slot
	// ids holds the acknowledged IDs, each operation's contiguous within
	// one chunk; full chunks are never copied either.
	ids  [][]uint64
	errs []string
	// rendered holds the text of 128-bit IDs (Op.Rendered), one entry
	// per operation that has any.
	rendered [][]string
	// keys holds the keys of keyed attempts (Op.Key), one entry per
	// attempt that has one.
	keys []string
}

// slot is one recorded operation, in the fixed-size form its log keeps.
type slot struct {
	start, end time.Duration
	// idChunk, idAt and idLen place the IDs in the log's ids; errAt,
	// renderedAt and keyAt are indexes in errs, rendered and keys plus
	// one (0: none). 32 bits each: a benchmark records millions of
	// operations, and a smaller slot is less memory to fill (48 bytes,
	// not 80).
	idChunk, idAt, idLen     int32
	errAt, renderedAt, keyAt int32
	asked                    int32
	outcome                  uint8 // an Outcome
	done                     bool
}

// Chunk sizes of clientLog.slots and clientLog.ids: the first of each
// kind is small, each next one twice the last, up to the largest (an
// operation with more IDs gets a chunk of its own size).
const (
	firstSlotChunk, maxSlotChunk = 16, 4096
	firstIDChunk, maxIDChunk     = 64, 1 << 16
)

// nextChunk is the capacity of the chunk after one of capacity last.
func nextChunk(last, first, most int) int {
	if last == 0 {
		return first
	}
	return min(2*last, most)
}

// keepIDs copies ids into the log's storage and places them in sl.
func (l *clientLog) keepIDs(sl *slot, ids []uint64) {
	if len(ids) == 0 {
		return
	}
	last := len(l.ids) - 1
	if last < 0 || cap(l.ids[last])-len(l.ids[last]) < len(ids) {
		size := firstIDChunk
		if last >= 0 {
			size = nextChunk(cap(l.ids[last]), firstIDChunk, maxIDChunk)
		}
		l.ids = append(l.ids, make([]uint64, 0, max(size, len(ids))))
		last++
	}
	sl.idChunk, sl.idAt, sl.idLen = int32(last), int32(len(l.ids[last])), int32(len(ids))
	l.ids[last] = append(l.ids[last], ids...)
}

// op rebuilds operation sl as an Op, its IDs placed in buf from which it
// returns the rest.
func (l *clientLog) op(sl *slot, buf []uint64) (Op, []uint64) {
	op := Op{Client: l.client, Start: sl.start, End: sl.end, Outcome: Outcome(sl.outcome), Asked: int(sl.asked)}
	if sl.idLen > 0 {
		op.IDs = buf[:sl.idLen:sl.idLen]
		copy(op.IDs, l.ids[sl.idChunk][sl.idAt:sl.idAt+sl.idLen])
		buf = buf[sl.idLen:]
	}
	if sl.errAt > 0 {
		op.Err = l.errs[sl.errAt-1]
	}
	if sl.renderedAt > 0 {
		op.Rendered = slices.Clone(l.rendered[sl.renderedAt-1])
	}
	if sl.keyAt > 0 {
		op.Key = l.keys[sl.keyAt-1]
	}
	return op, buf
}

// NewRecorder returns an empty recorder whose origin is now.
func NewRecorder() *Recorder {
	return &Recorder{origin: time.Now()}
}

// Offset returns t as an offset from the recorder's origin, the clock
// operations' Start and End are measured on.
func (r *Recorder) Offset(t time.Time) time.Duration { return t.Sub(r.origin) }

// Pending is an operation that has begun but not yet completed. Exactly one
// of OK, Fail or Unknown should be called on it, once; completing it twice is
// a bug in the caller and panics, because silently overwriting an outcome
// would corrupt the history being checked.
type Pending struct {
	r   *Recorder
	log *clientLog
	sl  *slot // in a chunk that never moves
}

// Begin records the invocation of an operation by client and returns the
// handle used to record its completion. The start time is taken before the
// caller sends the request, so the recorded interval contains the real one.
// Workloads record through Caller, which begins and ends each operation
// and counts it; Begin is for tests that build a history by hand.
func (r *Recorder) Begin(client int) Pending {
	return r.BeginN(client, 0)
}

// BeginN is Begin for an operation that asks for n IDs (Op.Asked).
func (r *Recorder) BeginN(client, n int) Pending {
	return r.BeginKeyed(client, n, "")
}

// BeginKeyed is BeginN for an attempt of the keyed call key (Op.Key); ""
// is no key.
func (r *Recorder) BeginKeyed(client, n int, key string) Pending {
	l, ok := r.logs.Load(client)
	if !ok {
		l, _ = r.logs.LoadOrStore(client, &clientLog{client: client})
	}
	log := l.(*clientLog)
	log.mu.Lock()
	defer log.mu.Unlock()
	start := time.Since(r.origin)
	if n := len(log.slots); n == 0 || len(log.slots[n-1]) == cap(log.slots[n-1]) {
		last := 0
		if n > 0 {
			last = cap(log.slots[n-1])
		}
		log.slots = append(log.slots, make([]slot, 0, nextChunk(last, firstSlotChunk, maxSlotChunk)))
	}
	last := &log.slots[len(log.slots)-1]
	sl := slot{start: start, end: start, outcome: uint8(Unknown), asked: int32(n)}
	if key != "" {
		log.keys = append(log.keys, key)
		sl.keyAt = int32(len(log.keys))
	}
	*last = append(*last, sl)
	return Pending{r: r, log: log, sl: &(*last)[len(*last)-1]}
}

// OK records that the operation was acknowledged with ids. The slice is
// copied, so the caller may reuse it.
func (p Pending) OK(ids []uint64) {
	p.finish(OK, ids, "")
}

// OKRendered records an acknowledged operation of a 128-bit layout: the
// ticks of its IDs, in order, and the IDs' canonical text (Op.Rendered).
// Both slices are copied.
func (p Pending) OKRendered(ticks []uint64, rendered []string) {
	p.finishRendered(OK, ticks, slices.Clone(rendered), "")
}

// Fail records that the server definitely rejected the operation.
func (p Pending) Fail(err error) {
	p.finish(Failed, nil, errText(err))
}

// Unknown records that the operation's effect is unknown, e.g. because it
// timed out or the connection broke after the request was sent.
func (p Pending) Unknown(err error) {
	p.finish(Unknown, nil, errText(err))
}

// finish takes the end time before acquiring the lock so that contention on
// the recorder does not stretch the recorded interval more than necessary.
// A longer interval only weakens the check, never produces false alarms.
func (p Pending) finish(o Outcome, ids []uint64, errStr string) {
	p.finishRendered(o, ids, nil, errStr)
}

// finishRendered is finish with the rendered IDs of a 128-bit layout.
func (p Pending) finishRendered(o Outcome, ids []uint64, rendered []string, errStr string) {
	end := time.Since(p.r.origin)
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	sl := p.sl
	if sl.done {
		panic(fmt.Sprintf("history: an operation of client %d, begun at %v, completed twice", p.log.client, sl.start))
	}
	sl.done = true
	sl.end = end
	sl.outcome = uint8(o)
	p.log.keepIDs(sl, ids)
	if len(rendered) > 0 {
		p.log.rendered = append(p.log.rendered, rendered)
		sl.renderedAt = int32(len(p.log.rendered))
	}
	if errStr != "" {
		p.log.errs = append(p.log.errs, errStr)
		sl.errAt = int32(len(p.log.errs))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// InFlight is the Err text of operations that had not completed when a
// snapshot was taken, so readers can tell them from real timeouts.
const InFlight = "in flight"

// Ops returns a snapshot of all operations recorded so far, in invocation
// order (by Start; one client's operations stay in the order it began
// them). Operations still in flight are reported as Unknown with End set
// to the snapshot time: they had not completed by then, so any real
// completion is later, and Unknown operations impose no constraint anyway.
func (r *Recorder) Ops() []Op {
	now := time.Since(r.origin)
	// Sized once: appending millions of operations would leave copies of
	// the growing slice behind, each as large as the history.
	n := 0
	r.logs.Range(func(_, l any) bool {
		log := l.(*clientLog)
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, chunk := range log.slots {
			n += len(chunk)
		}
		return true
	})
	out := make([]Op, 0, n)
	r.logs.Range(func(_, l any) bool {
		log := l.(*clientLog)
		log.mu.Lock()
		defer log.mu.Unlock()
		// One allocation holds the IDs of all this client's operations.
		total := 0
		for _, chunk := range log.slots {
			for i := range chunk {
				total += int(chunk[i].idLen)
			}
		}
		buf := make([]uint64, total)
		for _, chunk := range log.slots {
			for i := range chunk {
				var op Op
				sl := &chunk[i]
				op, buf = log.op(sl, buf)
				if !sl.done {
					// An operation may have begun after now was read.
					op.End = max(now, op.Start)
					op.Err = InFlight
				}
				out = append(out, op)
			}
		}
		return true
	})
	slices.SortStableFunc(out, func(a, b Op) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Client, b.Client))
	})
	return out
}

// Violation kinds, used in Violation.Kind.
const (
	// KindDuplicate marks an ID acknowledged more than once.
	KindDuplicate = "duplicate"
	// KindOrder marks a pair of operations whose IDs contradict real time.
	KindOrder = "order"
	// KindNotIncreasing marks a response whose IDs are not strictly increasing.
	KindNotIncreasing = "not-increasing"
	// KindInterleaved marks a response whose range contains another
	// response's ID.
	KindInterleaved = "interleaved"
	// KindRendered marks a 128-bit ID whose canonical text or bytes do not
	// sort as its tick does, that is not a canonical UUIDv7 or ULID, that
	// holds another tick, or that is missing.
	KindRendered = "rendered"
)

// maxExamples bounds the examples kept per kind: enough to debug, while a
// badly broken history of millions of operations keeps a readable report.
const maxExamples = 10

// Violation is one concrete example of a broken property, pointing at the
// operations involved by their index in the checked slice.
type Violation struct {
	// Kind is one of the Kind constants.
	Kind string
	// A is the index of the first operation involved (for KindOrder, the
	// one that completed first).
	A int
	// B is the index of the second operation involved, or -1 when only one
	// operation is involved (KindNotIncreasing). For a duplicate within one
	// response, A == B.
	B int
	// Detail explains the violation in words.
	Detail string
}

// String formats the violation on one line.
func (v Violation) String() string {
	if v.B < 0 {
		return fmt.Sprintf("%s: op %d: %s", v.Kind, v.A, v.Detail)
	}
	return fmt.Sprintf("%s: ops %d, %d: %s", v.Kind, v.A, v.B, v.Detail)
}

// Report summarises a checked history. The counts are exact, so a report
// can be compared across runs and against a reference implementation.
type Report struct {
	// Attempted is the number of operations in the history.
	Attempted int
	// Acknowledged is the number of OK operations.
	Acknowledged int
	// Failed is the number of Failed operations.
	Failed int
	// Unknown is the number of Unknown operations (and of operations with
	// an unrecognised Outcome, which are treated the same way).
	Unknown int
	// IDs is the total number of acknowledged IDs, duplicates included;
	// a keyed call's replayed answers are not counted again.
	IDs int
	// Keyed is the number of keyed calls (distinct Op.Key), each made of
	// one or more attempts; the counts above count the attempts.
	Keyed int
	// Replays counts the attempts of keyed calls answered with the IDs of
	// an earlier answer to their key: the first answer given again.
	Replays int
	// KeyConflicts counts the answers to keyed calls with other IDs than
	// their key's first answer (KindKeyConflict): a retry that took new
	// IDs, which keys exist to prevent.
	KeyConflicts int
	// Duplicates counts extra copies: an ID acknowledged k times adds k-1.
	Duplicates int
	// OrderViolations is the exact number of ordered pairs (a, b) of
	// distinct calls with IDs such that a.End < b.Start and min(b.IDs) <=
	// max(a.IDs); a keyed call lasts from its first attempt's start to its
	// first answer's end.
	OrderViolations int64
	// NotIncreasing counts responses whose IDs are not strictly increasing.
	NotIncreasing int
	// Interleaved counts responses r for which some ID of another response
	// lies strictly between min(r.IDs) and max(r.IDs).
	Interleaved int
	// Misrendered counts 128-bit IDs (Op.Rendered) that are not canonical
	// text of a UUIDv7 or ULID, that do not hold the tick beside them, that
	// responses left out (all of a response's, when a history with
	// renderings has one without), or whose text or bytes do not sort
	// above those of the next smaller ID (tick) in the whole history.
	Misrendered int
	// Examples holds up to maxExamples violations of each kind.
	Examples []Violation
	// Settled is the settled order's report (CheckSettled), whose
	// examples point into the settled-order calls, not into ops; Check
	// leaves it empty.
	Settled SettledReport
}

// OK reports whether the history satisfies every checked property.
func (r Report) OK() bool {
	return r.Duplicates == 0 && r.OrderViolations == 0 && r.NotIncreasing == 0 && r.Interleaved == 0 && r.Misrendered == 0 &&
		r.KeyConflicts == 0 && r.Settled.OK()
}

// String returns a one-line summary followed by one indented line per
// example, so a failing test or soak run prints everything needed to start
// debugging.
func (r Report) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "history %s: attempted=%d acknowledged=%d failed=%d unknown=%d ids=%d duplicates=%d order-violations=%d not-increasing=%d interleaved=%d",
		verdict, r.Attempted, r.Acknowledged, r.Failed, r.Unknown, r.IDs,
		r.Duplicates, r.OrderViolations, r.NotIncreasing, r.Interleaved)
	if r.Misrendered > 0 {
		fmt.Fprintf(&b, " misrendered=%d", r.Misrendered)
	}
	if r.Keyed > 0 || r.KeyConflicts > 0 {
		fmt.Fprintf(&b, " keyed=%d replays=%d key-conflicts=%d", r.Keyed, r.Replays, r.KeyConflicts)
	}
	for _, v := range r.Examples {
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	if r.Settled.Calls() > 0 || !r.Settled.OK() {
		b.WriteString("\n")
		b.WriteString(r.Settled.String())
	}
	return b.String()
}

// resp is an acknowledged operation with at least one ID; only these take
// part in the checks.
type resp struct {
	op       int // index into the checked slice
	min, max uint64
}

// idRef is one acknowledged ID together with the operation that returned it.
type idRef struct {
	id uint64
	op int
}

// examples collects at most maxExamples violations per kind.
type examples struct {
	list  []Violation
	count map[string]int
}

func (e *examples) want(kind string) bool {
	return e.count[kind] < maxExamples
}

func (e *examples) add(v Violation) {
	if !e.want(v.Kind) {
		return
	}
	if e.count == nil {
		e.count = make(map[string]int)
	}
	e.count[v.Kind]++
	e.list = append(e.list, v)
}

// Check verifies ops against the sequencer's guarantee and returns exact
// counts of every kind of violation, with examples. The attempts of each
// keyed call are checked as one call (keyed.go). Indexes in the report
// refer to positions in ops. It does not modify ops.
func Check(ops []Op) Report {
	var rep Report
	rep.Attempted = len(ops)
	for _, op := range ops {
		switch op.Outcome {
		case OK:
			rep.Acknowledged++
		case Failed:
			rep.Failed++
		default:
			rep.Unknown++
		}
	}
	fold := foldKeyed(ops)
	rep.Keyed, rep.Replays, rep.KeyConflicts = fold.keyed, fold.replays, fold.conflicts
	checkCalls(fold.calls, &rep)
	rep.Examples = fold.examples(rep.Examples)
	return rep
}

// checkCalls runs Check's checks on calls, a history whose keyed calls
// are folded, filling rep's violation counts, IDs and examples.
func checkCalls(ops []Op, rep *Report) {
	var ex examples
	var resps []resp
	for i, op := range ops {
		if op.Outcome != OK || len(op.IDs) == 0 {
			continue // no IDs (or acknowledged but empty): nothing to order
		}
		rep.IDs += len(op.IDs)
		lo, hi := op.IDs[0], op.IDs[0]
		increasing := true
		for j, id := range op.IDs {
			lo, hi = min(lo, id), max(hi, id)
			if j > 0 && id <= op.IDs[j-1] && increasing {
				increasing = false
				ex.add(Violation{Kind: KindNotIncreasing, A: i, B: -1,
					Detail: fmt.Sprintf("client %d: ids[%d]=%d follows ids[%d]=%d", op.Client, j, id, j-1, op.IDs[j-1])})
			}
		}
		if !increasing {
			rep.NotIncreasing++
		}
		resps = append(resps, resp{op: i, min: lo, max: hi})
	}

	checkIDs(ops, resps, rep, &ex)
	rep.OrderViolations = checkOrder(ops, resps, &ex)
	rep.Misrendered = checkRendered(ops, resps, &ex)
	rep.Examples = ex.list
}

// checkIDs finds duplicates and interleaving with a single sort of all
// (id, op) pairs. Within that sorted list, a response is interleaved exactly
// when the entries strictly between its min and max are not all its own;
// two binary searches per response count them, so the whole pass is
// O(m log m) for m IDs.
func checkIDs(ops []Op, resps []resp, rep *Report, ex *examples) {
	refs := make([]idRef, 0, rep.IDs)
	for _, r := range resps {
		for _, id := range ops[r.op].IDs {
			refs = append(refs, idRef{id: id, op: r.op})
		}
	}
	slices.SortFunc(refs, func(a, b idRef) int {
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		return cmp.Compare(a.op, b.op)
	})

	for i := 1; i < len(refs); i++ {
		if refs[i].id != refs[i-1].id {
			continue
		}
		rep.Duplicates++
		if ex.want(KindDuplicate) {
			// Point at the first holder of the ID, so every copy of one ID
			// is reported against the same original.
			first := i - 1
			for first > 0 && refs[first-1].id == refs[i].id {
				first--
			}
			a, b := refs[first].op, refs[i].op
			detail := fmt.Sprintf("id %d returned to client %d and client %d", refs[i].id, ops[a].Client, ops[b].Client)
			if a == b {
				detail = fmt.Sprintf("id %d returned twice in one response to client %d", refs[i].id, ops[a].Client)
			}
			ex.add(Violation{Kind: KindDuplicate, A: a, B: b, Detail: detail})
		}
	}

	for _, r := range resps {
		if r.max-r.min < 2 {
			continue // no integer lies strictly between min and max
		}
		// Entries with min < id < max occupy refs[lo:hi].
		lo, _ := slices.BinarySearchFunc(refs, r.min+1, func(e idRef, t uint64) int { return cmp.Compare(e.id, t) })
		hi, _ := slices.BinarySearchFunc(refs, r.max, func(e idRef, t uint64) int { return cmp.Compare(e.id, t) })
		own := 0
		for _, id := range ops[r.op].IDs {
			if id > r.min && id < r.max {
				own++
			}
		}
		if hi-lo == own {
			continue
		}
		rep.Interleaved++
		if ex.want(KindInterleaved) {
			// At most own entries in the window belong to r, so this scan
			// finds a foreign one within own+1 steps.
			for _, e := range refs[lo:hi] {
				if e.op != r.op {
					ex.add(Violation{Kind: KindInterleaved, A: r.op, B: e.op,
						Detail: fmt.Sprintf("id %d of client %d lies inside range [%d, %d] of client %d",
							e.id, ops[e.op].Client, r.min, r.max, ops[r.op].Client)})
					break
				}
			}
		}
	}
}

// checkOrder counts ordered pairs (a, b) with a.End < b.Start and
// max(a) >= min(b). It sweeps operations by Start; before handling b it
// inserts every a with a.End < b.Start into a Fenwick tree keyed by the
// coordinate-compressed max(a), then counts inserted maxima >= min(b). Both
// sorts and all tree operations are O(n log n).
func checkOrder(ops []Op, resps []resp, ex *examples) int64 {
	n := len(resps)
	if n < 2 {
		return 0
	}
	byEnd := slices.Clone(resps)
	slices.SortFunc(byEnd, func(a, b resp) int { return cmp.Compare(ops[a.op].End, ops[b.op].End) })
	byStart := slices.Clone(resps)
	slices.SortFunc(byStart, func(a, b resp) int { return cmp.Compare(ops[a.op].Start, ops[b.op].Start) })

	maxes := make([]uint64, n)
	for i, r := range resps {
		maxes[i] = r.max
	}
	slices.Sort(maxes)
	maxes = slices.Compact(maxes)
	tree := make([]int, len(maxes)+1) // Fenwick tree, 1-based

	// best and second track the two inserted responses with the largest
	// max, so an example witness exists for b even if b itself was inserted
	// (possible only for a malformed op with End < Start).
	best, second := -1, -1
	var total int64
	inserted := 0
	i := 0
	for _, b := range byStart {
		bStart := ops[b.op].Start
		for ; i < n && ops[byEnd[i].op].End < bStart; i++ {
			a := byEnd[i]
			k, _ := slices.BinarySearch(maxes, a.max)
			for k++; k < len(tree); k += k & -k {
				tree[k]++
			}
			inserted++
			if best < 0 || a.max > byEnd[best].max {
				best, second = i, best
			} else if second < 0 || a.max > byEnd[second].max {
				second = i
			}
		}
		// below = number of inserted maxima < min(b).
		below := 0
		k, _ := slices.BinarySearch(maxes, b.min)
		for ; k > 0; k -= k & -k {
			below += tree[k]
		}
		c := inserted - below
		if ops[b.op].End < bStart {
			c-- // b was inserted and trivially "precedes" itself; pairs are of distinct ops
		}
		if c <= 0 {
			continue
		}
		total += int64(c)
		if ex.want(KindOrder) {
			w := best
			if byEnd[w].op == b.op {
				w = second
			}
			a := byEnd[w]
			ex.add(Violation{Kind: KindOrder, A: a.op, B: b.op,
				Detail: fmt.Sprintf("client %d ended at %v with max id %d before client %d started at %v, which got min id %d (%d earlier ops conflict)",
					ops[a.op].Client, ops[a.op].End, a.max, ops[b.op].Client, bStart, b.min, c)})
		}
	}
	return total
}

// renderedRef is one 128-bit ID: its tick, its text and its bytes.
type renderedRef struct {
	tick  uint64
	text  string
	bytes [16]byte
	op    int
}

// checkRendered checks that the rendered 128-bit IDs of the history are
// the renderings of their ticks and sort exactly as the ticks do, as text
// and as bytes. Each text must be canonical, so that its bytes are read
// back without doubt, and must decode to the tick it stands beside, or a
// text rendered from another tick (in order, but not this one) would
// pass. Once any operation has renderings, every acknowledged one must:
// the history is of a 128-bit layout, and IDs with no text are IDs whose
// rendering went unchecked. Sorted by tick, each distinct tick's text and
// bytes must lie above the previous one's. The ticks themselves are
// checked by the other passes. It returns how many IDs break this.
func checkRendered(ops []Op, resps []resp, ex *examples) int {
	wide := slices.ContainsFunc(resps, func(r resp) bool { return len(ops[r.op].Rendered) > 0 })
	if !wide {
		return 0 // a 64-bit layout
	}
	var refs []renderedRef
	bad := 0
	for _, r := range resps {
		op := ops[r.op]
		if len(op.Rendered) != len(op.IDs) {
			bad += len(op.IDs)
			ex.add(Violation{Kind: KindRendered, A: r.op, B: -1,
				Detail: fmt.Sprintf("client %d: %d rendered IDs for %d ticks", op.Client, len(op.Rendered), len(op.IDs))})
			continue
		}
		for j, text := range op.Rendered {
			b, tick, err := parseRendered(text)
			if err == nil && tick != op.IDs[j] {
				err = fmt.Errorf("%s holds tick %d", text, tick)
			}
			if err != nil {
				bad++
				ex.add(Violation{Kind: KindRendered, A: r.op, B: -1, Detail: fmt.Sprintf("client %d: tick %d: %v", op.Client, op.IDs[j], err)})
				continue
			}
			refs = append(refs, renderedRef{tick: op.IDs[j], text: text, bytes: b, op: r.op})
		}
	}
	slices.SortFunc(refs, func(a, b renderedRef) int { return cmp.Compare(a.tick, b.tick) })
	for i := 1; i < len(refs); i++ {
		a, b := refs[i-1], refs[i]
		if a.tick == b.tick {
			continue // a duplicate, counted by checkIDs
		}
		if a.text >= b.text || bytes.Compare(a.bytes[:], b.bytes[:]) >= 0 {
			bad++
			ex.add(Violation{Kind: KindRendered, A: a.op, B: b.op,
				Detail: fmt.Sprintf("tick %d renders as %s, not below tick %d's %s", a.tick, a.text, b.tick, b.text)})
		}
	}
	return bad
}

// parseRendered reads the canonical text of a UUIDv7 (36 characters) or a
// ULID (26), refusing any other spelling of them, and returns its bytes
// and the tick they hold.
func parseRendered(text string) ([16]byte, uint64, error) {
	name := "ulid"
	if len(text) == 36 {
		name = "uuidv7"
	}
	l, err := layout.Preset(name)
	if err != nil {
		return [16]byte{}, 0, err
	}
	id, err := l.ParseWide(text)
	if err != nil {
		return [16]byte{}, 0, err
	}
	if canon := l.FormatWide(id); canon != text {
		return [16]byte{}, 0, fmt.Errorf("%s is not canonical text (%s)", text, canon)
	}
	p, err := l.DecodeWide(id)
	if err != nil {
		return [16]byte{}, 0, err
	}
	return id, p.Tick, nil
}
