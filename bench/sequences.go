package bench

// The sequences target: the callers spread their calls over N named
// sequences (caller i uses sequence i mod N), which the run creates
// before it starts. Every call of a named sequence is one entry of a
// batched Raft commit (the leader's settle loop gathers the calls that
// arrive together), where the default sequence (TargetOrdo) answers from
// its in-memory reservation after a term round.

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// SequenceName is the name of the bench's i-th named sequence.
func SequenceName(i int) string { return fmt.Sprintf("bench-%d", i) }

// createWorkers is how many creations run at once before a run: enough
// that 10,000 sequences are made in batched commits, not one by one.
const createWorkers = 32

// sequencesTarget asks for IDs of named sequences through one client.
type sequencesTarget struct {
	c     *client.Client
	kind  string
	count int
	seqs  []*client.Sequence
}

func newSequencesTarget(cfg Config) (*sequencesTarget, error) {
	kind := cfg.Kind
	if kind == "" {
		kind = client.DenseKind
	}
	if kind != client.DenseKind {
		l, err := layout.Parse(kind)
		if err != nil {
			return nil, fmt.Errorf("%w: --kind: %v", ErrBadConfig, err)
		}
		if l.Wide() {
			return nil, fmt.Errorf("%w: --kind %s makes 128-bit IDs; the bench checks 64-bit IDs: want dense or a 64-bit layout", ErrBadConfig, kind)
		}
		kind = l.String()
	}
	var opts []client.Option
	if cfg.TLS != nil {
		opts = append(opts, client.WithTLS(cfg.TLS))
	}
	c, err := client.New(cfg.Addrs, opts...)
	if err != nil {
		return nil, err
	}
	t := &sequencesTarget{c: c, kind: kind, count: cfg.Count}
	for i := range cfg.Sequences {
		t.seqs = append(t.seqs, c.Sequence(SequenceName(i)))
	}
	return t, nil
}

func (t *sequencesTarget) call(ctx context.Context, caller int) ([]uint64, error) {
	return t.seqs[caller%len(t.seqs)].NextN(ctx, t.count)
}

// warm creates the sequences (a name already in use by a live sequence of
// the same kind is taken as it is, so runs can follow each other on one
// cluster), then makes one call.
func (t *sequencesTarget) warm(ctx context.Context) error {
	names := make(chan string)
	errs := make(chan error, createWorkers)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if err := t.create(ctx, name); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for _, s := range t.seqs {
		select {
		case names <- s.Name():
		case err = <-errs:
			break feed
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	if err == nil {
		err = <-errs
	}
	if err != nil {
		return err
	}
	_, err = t.seqs[0].NextN(ctx, t.count)
	return err
}

// create makes the sequence name of t's kind, or finds it made.
func (t *sequencesTarget) create(ctx context.Context, name string) error {
	_, err := t.c.CreateSequence(ctx, name, t.kind, 0, 0)
	if status.Code(err) != codes.AlreadyExists {
		if err != nil {
			return fmt.Errorf("create sequence %s: %w", name, err)
		}
		return nil
	}
	info, derr := t.c.DescribeSequence(ctx, name)
	if derr != nil {
		return fmt.Errorf("sequence %s exists, and describing it failed: %w", name, derr)
	}
	if info.Dropped || info.Kind != t.kind {
		return fmt.Errorf("%w: sequence %s exists with kind %s (dropped %t), want %s", ErrBadConfig, name, info.Kind, info.Dropped, t.kind)
	}
	return nil
}

func (t *sequencesTarget) close() { t.c.Close() }

// checkGroups checks ops as groups sequences: caller i's calls are of
// sequence i mod groups, and two sequences owe each other no order (they
// may hand out equal values), so each group is checked alone and the
// reports are summed. Examples point into ops, as Check's do.
func checkGroups(ops []history.Op, groups int) history.Report {
	if groups <= 1 {
		return history.Check(ops)
	}
	index := make([][]int, groups)
	for i, op := range ops {
		g := op.Client % groups
		index[g] = append(index[g], i)
	}
	var rep history.Report
	for _, idx := range index {
		part := make([]history.Op, len(idx))
		for j, i := range idx {
			part[j] = ops[i]
		}
		r := history.Check(part)
		rep.Attempted += r.Attempted
		rep.Acknowledged += r.Acknowledged
		rep.Failed += r.Failed
		rep.Unknown += r.Unknown
		rep.IDs += r.IDs
		rep.Duplicates += r.Duplicates
		rep.OrderViolations += r.OrderViolations
		rep.NotIncreasing += r.NotIncreasing
		rep.Interleaved += r.Interleaved
		rep.Misrendered += r.Misrendered
		for _, v := range r.Examples {
			if len(rep.Examples) >= 10 {
				break
			}
			v.A = idx[v.A]
			if v.B >= 0 {
				v.B = idx[v.B]
			}
			rep.Examples = append(rep.Examples, v)
		}
	}
	return rep
}
