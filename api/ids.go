package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/layout"
)

// LeaderAddrKey is the response trailer in which a node names the
// leader's gRPC address whenever it knows it, so clients can go there.
const LeaderAddrKey = "ordo-leader-addr"

// ClusterIDKey is the metadata key in which a node names its cluster, in
// the header of every answer once the cluster has an id, and in which a
// caller (a client, or a node forwarding to its leader) may name the
// cluster it means to reach: a node of another cluster refuses the call
// as Unavailable, so a client moves on to another address.
const ClusterIDKey = "ordo-cluster-id"

// TicksKey is the metadata key in which a Next or NextStream caller says
// that it renders 128-bit IDs itself: under a 128-bit layout (uuidv7,
// ulid) the runs carry ticks, not IDs, and the caller renders each with
// the cluster's group (from Layout) and random bits. A node of a 128-bit
// layout refuses a call without the key, and a node of a 64-bit layout a
// call with it (FailedPrecondition), so neither kind of caller can
// mistake one for the other. Any value counts; the Go client sends "1".
const TicksKey = "ordo-ticks"

// WithTicks names TicksKey in ctx's outgoing metadata when ticks is set:
// the call asks for ticks of a 128-bit layout.
func WithTicks(ctx context.Context, ticks bool) context.Context {
	if !ticks {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, TicksKey, "1")
}

// ErrBadRuns means an answer's runs break the shape every answer has:
// each run holds at least one ID and does not wrap past 2^64, a run of
// more than one ID has a step, every ID is above the one before it, and
// the runs hold exactly the IDs asked for.
var ErrBadRuns = errors.New("bad ID runs")

// Runs encodes count ticks from first, a block the sequencer handed out,
// as runs of IDs with a constant step, the form ExpandRuns reads: one run
// per time unit the block touches. Under a 128-bit layout, whose IDs
// a caller renders from ticks (api.TicksKey), the runs carry the ticks
// themselves, step 1: consecutive ticks differ by 1 across time units
// too, so one run holds the block unless its count overflows the field.
func Runs(l layout.Layout, group, first, count uint64) []*IDRun {
	var b RunBuilder
	b.Add(l, group, first, count)
	return b.Runs
}

// RunBuilder renders the runs of several blocks, in order, into Runs,
// taking the runs from one allocation: an answer to many calls holds a
// run or more a call. The zero value is ready for use.
type RunBuilder struct {
	Runs  []*IDRun
	spare []IDRun
}

// NewRunBuilder is a RunBuilder with room for n runs.
func NewRunBuilder(n int) *RunBuilder {
	return &RunBuilder{Runs: make([]*IDRun, 0, n), spare: make([]IDRun, n)}
}

// Add appends Runs(l, group, first, count).
func (b *RunBuilder) Add(l layout.Layout, group, first, count uint64) {
	perUnit := uint64(1) << l.SeqBits
	b.Runs = slices.Grow(b.Runs, int(1+count/min(perUnit, math.MaxUint32)))
	for t, left := first, count; left > 0; {
		var n uint64
		if l.Wide() {
			// Only the count field's width ends a run of ticks.
			n = min(left, math.MaxUint32)
			b.AddRun(t, n, 1)
		} else {
			n = min(left, perUnit-t%perUnit)
			b.AddRun(l.ID(t, group), n, l.Step())
		}
		t += n
		left -= n
	}
}

// AddRun appends the run of count IDs from first, step apart (count fits
// the run's field).
func (b *RunBuilder) AddRun(first, count, step uint64) {
	if len(b.spare) == 0 {
		b.spare = make([]IDRun, max(4, cap(b.Runs)-len(b.Runs)))
	}
	r := &b.spare[0]
	b.spare = b.spare[1:]
	r.First, r.Count, r.Step = first, uint32(count), step
	b.Runs = append(b.Runs, r)
}

// ExpandRuns returns the n IDs that runs hold, in order, or ErrBadRuns if
// they are not n strictly increasing IDs. What the runs claim sizes no
// allocation: a broken or hostile server cannot make the caller hold more
// than the n IDs it asked for.
func ExpandRuns(runs []*IDRun, n uint64) ([]uint64, error) {
	r := NewRunReader(runs)
	ids, err := r.Take(n, make([]uint64, 0, n))
	if err != nil {
		return nil, err
	}
	if !r.Done() {
		return nil, fmt.Errorf("%w: the runs hold more than the %d IDs asked for", ErrBadRuns, n)
	}
	return ids, nil
}

// RunReader reads the IDs of an answer's runs in order, checking them as
// ExpandRuns does. It is for an answer shared by several calls (the
// counts of a stream's batched answer), where each call takes its IDs in
// turn and a call no longer waiting has its IDs skipped. Skipping costs
// time in the runs, never memory in the IDs they claim.
type RunReader struct {
	runs []*IDRun
	i    int    // the run being read
	off  uint64 // IDs of runs[i] already read
	last uint64 // the last ID read, if any
	any  bool
}

// NewRunReader returns a RunReader at the first ID of runs.
func NewRunReader(runs []*IDRun) *RunReader { return &RunReader{runs: runs} }

// Take reads the next n IDs and appends them to ids.
func (r *RunReader) Take(n uint64, ids []uint64) ([]uint64, error) {
	return r.read(n, ids, true)
}

// Skip reads the next n IDs and drops them, checked all the same: a call
// that gave up waiting still has IDs in the answer, and they count.
func (r *RunReader) Skip(n uint64) error {
	_, err := r.read(n, nil, false)
	return err
}

// Apart marks that the IDs read next are another sequence's (a joint
// answer to named sequences' calls): they need not be above those read
// before, but they must begin a run of their own.
func (r *RunReader) Apart() error {
	if r.off != 0 {
		return fmt.Errorf("%w: a call's IDs begin inside run %d, which holds another call's", ErrBadRuns, r.i)
	}
	r.any = false
	return nil
}

// Done reports whether every ID of the runs was read, so that a caller
// can refuse runs that hold more IDs than it asked for.
func (r *RunReader) Done() bool { return r.i == len(r.runs) }

func (r *RunReader) read(n uint64, ids []uint64, keep bool) ([]uint64, error) {
	for n > 0 {
		if r.i == len(r.runs) {
			return nil, fmt.Errorf("%w: the runs hold fewer IDs than asked for", ErrBadRuns)
		}
		run := r.runs[r.i]
		first, count, step := run.GetFirst(), uint64(run.GetCount()), run.GetStep()
		if r.off == 0 {
			if err := r.check(first, count, step); err != nil {
				return nil, err
			}
		}
		k := min(n, count-r.off)
		if keep {
			for j := range k {
				ids = append(ids, first+(r.off+j)*step)
			}
		}
		r.off += k
		r.last, r.any = first+(r.off-1)*step, true
		n -= k
		if r.off == count {
			r.i, r.off = r.i+1, 0
		}
	}
	return ids, nil
}

// check refuses a run before any of its IDs is read: the arithmetic of
// read is only sound for a run that passes.
func (r *RunReader) check(first, count, step uint64) error {
	hi, span := bits.Mul64(max(count, 1)-1, step)
	_, carry := bits.Add64(first, span, 0)
	switch {
	case count == 0:
		return fmt.Errorf("%w: run %d holds no IDs", ErrBadRuns, r.i)
	case count > 1 && step == 0:
		return fmt.Errorf("%w: run %d repeats %d", ErrBadRuns, r.i, first)
	case hi != 0 || carry != 0:
		return fmt.Errorf("%w: run %d (first %d, count %d, step %d) wraps past 2^64", ErrBadRuns, r.i, first, count, step)
	case r.any && first <= r.last:
		return fmt.Errorf("%w: run %d starts at %d, not above %d", ErrBadRuns, r.i, first, r.last)
	}
	return nil
}

// CallerKey is the metadata key in which a plaintext caller names itself
// for idempotency keys (NextRequest.idempotency_key): keys are scoped to
// it, so it must be the same after the caller restarts. With TLS the
// certificate's subject is the caller, and this key is ignored.
const CallerKey = "ordo-caller"
