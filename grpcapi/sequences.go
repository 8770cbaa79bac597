package grpcapi

// Named sequences: their admin calls, and the path to a named sequence's
// IDs: a dense sequence's call, and a keyed call, is committed through
// the log before it answers (package fsm, sequences.go); a layout
// sequence's is served from its window after a round (package settle,
// windows.go). Like Next, only the leader serves them, and forward is the
// one rule of where.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// CreateSequence implements api.AdminServer.
func (a *Admin) CreateSequence(ctx context.Context, req *api.CreateSequenceRequest) (*api.SequenceInfo, error) {
	resp, err := a.srv.defineSequence(ctx, req.Name, func() error {
		return a.srv.Node.CreateSequence(ctx, req)
	}, func(c api.AdminClient, ctx context.Context) (*api.SequenceInfo, error) {
		return c.CreateSequence(ctx, req)
	})
	return resp, a.srv.status(ctx, err)
}

// DropSequence implements api.AdminServer.
func (a *Admin) DropSequence(ctx context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	resp, err := a.srv.defineSequence(ctx, req.Name, func() error {
		return a.srv.Node.DropSequence(ctx, req.Name)
	}, func(c api.AdminClient, ctx context.Context) (*api.SequenceInfo, error) {
		return c.DropSequence(ctx, req)
	})
	return resp, a.srv.status(ctx, err)
}

// defineSequence runs a create or drop on the leader (forwarding it from
// a follower) and answers the sequence as it then stands.
func (s *Server) defineSequence(ctx context.Context, name string, local func() error,
	remote func(api.AdminClient, context.Context) (*api.SequenceInfo, error)) (*api.SequenceInfo, error) {
	if err := fsm.CheckSequenceName(name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		return remote(api.NewAdminClient(conn), s.forwardContext(ctx))
	}
	if err := local(); err != nil {
		return nil, err
	}
	seq, ok := s.State.Sequence(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q: create it with ordo sequence create", fsm.ErrNoSequence, name)
	}
	return info(name, &seq), nil
}

// ListSequences implements api.AdminServer, from this node's state.
func (a *Admin) ListSequences(ctx context.Context, _ *api.ListSequencesRequest) (*api.ListSequencesResponse, error) {
	resp := &api.ListSequencesResponse{}
	for name, seq := range a.srv.State.Sequences() {
		if !seq.Dropped {
			resp.Sequences = append(resp.Sequences, info(name, seq))
		}
	}
	slices.SortFunc(resp.Sequences, func(x, y *api.SequenceInfo) int { return strings.Compare(x.Name, y.Name) })
	return resp, nil
}

// DescribeSequence implements api.AdminServer, from this node's state, or
// the leader's for a name that state lacks.
func (a *Admin) DescribeSequence(ctx context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	resp, err := a.srv.DescribeSequence(ctx, req.Name)
	return resp, a.srv.status(ctx, err)
}

// DescribeSequence is the sequence name as this node's state holds it,
// which gRPC and HTTP share. A name the state does not hold, or holds
// dropped, may have been created (again) after this node last applied:
// a follower asks the leader, and a leader that has not applied every
// earlier term's entry cannot tell (Unavailable), so a sequence just
// created is found on every node. Its errors are statuses.
func (s *Server) DescribeSequence(ctx context.Context, name string) (*api.SequenceInfo, error) {
	if err := fsm.CheckSequenceName(name); err != nil {
		return nil, s.status(ctx, fmt.Errorf("%w: %w", ErrBadRequest, err))
	}
	seq, ok := s.State.Sequence(name)
	if ok && !seq.Dropped {
		return info(name, &seq), nil
	}
	// Not here, or dropped here (as checkNamed reads it): it may have
	// been created (again) since this node last applied.
	conn, fwd, err := s.forward(ctx)
	switch {
	case err != nil:
		return nil, s.status(ctx, fmt.Errorf("sequence %q is not in this node's state, or dropped there, and the leader cannot be asked: %w", name, err))
	case fwd:
		resp, err := api.NewAdminClient(conn).DescribeSequence(s.forwardContext(ctx), &api.SequenceRequest{Name: name})
		return resp, s.status(ctx, err)
	case !s.Settle.Current():
		return nil, s.status(ctx, fmt.Errorf("%w: this leader has not yet applied every entry of earlier terms, and cannot tell whether sequence %q exists", sequencer.ErrNotLeader, name))
	case ok:
		return info(name, &seq), nil // dropped, as the leader's state holds it
	}
	return nil, s.status(ctx, fmt.Errorf("%w: %q: create it with ordo sequence create", fsm.ErrNoSequence, name))
}

func info(name string, seq *fsm.Sequence) *api.SequenceInfo {
	return &api.SequenceInfo{Name: name, Kind: seq.Kind, Group: seq.Group, Start: seq.Start, Next: seq.Next, Dropped: seq.Dropped}
}

// NextInSequence is the path of one HTTP call for a named sequence's IDs,
// of a 128-bit layout when ticks is set (HTTP read it with
// DescribeSequence, which a node that has not applied the sequence's
// creation asks the leader): HTTP renders whatever the runs carry. Its
// errors are statuses.
func (s *Server) NextInSequence(ctx context.Context, name string, count uint32, ticks bool) (*api.NextResponse, error) {
	resp, err := s.nextInSequence(ctx, &api.NextRequest{Count: count, Sequence: name}, &ticks)
	return resp, s.status(ctx, err)
}

// nextInSequence is the path of one call for a named sequence's IDs,
// which gRPC's Next and HTTP share: checks, one forward to the leader or
// one grant here, and the runs. ticks says whether the
// caller reads ticks (gRPC: api.TicksKey); nil: whatever the sequence's
// width is (HTTP renders both).
func (s *Server) nextInSequence(ctx context.Context, req *api.NextRequest, ticks *bool) (*api.NextResponse, error) {
	r, err := s.routeNamed(ctx, req.Sequence, req.Count, req.IdempotencyKey, ticks)
	if err != nil {
		return nil, err
	}
	if r.conn != nil {
		return api.NewSequencerClient(r.conn).Next(r.fctx, req)
	}
	ask, err := s.askNamed(req.Sequence, &r.seq, r.known, req.Count, keyOf(ctx, req), r.ticks)
	if err != nil {
		return nil, err
	}
	call := namedCall{ask: &ask, grant: &s.Settle.Grants(ctx, []settle.Ask{ask})[0]}
	select {
	case <-call.grant.Done():
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.Stop:
		return nil, sequencer.ErrNotLeader
	}
	if _, err := call.grant.Result(); err != nil {
		return nil, err
	}
	return &api.NextResponse{Runs: s.issueNamed([]namedCall{call}), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr, Sequence: req.Sequence, Keyed: req.IdempotencyKey != ""}, nil
}

// namedCall is a call for a named sequence's IDs under way on the leader.
type namedCall struct {
	id    uint64 // a stream's call id
	ask   *settle.Ask
	grant *settle.Grant
}

// askOf checks a stream's call for count IDs of named sequence name (""
// the default sequence, whose calls Grants serves only keyed), which this
// leader's state holds as seq (no Kind: not at all), with key (the
// caller's) and ticks (the stream's width), on the leader; defaultWidth
// is why the stream may not take the default sequence's IDs.
func (s *Server) askOf(name string, seq *fsm.Sequence, count uint32, key fsm.Keyed, ticks bool, defaultWidth error) (settle.Ask, error) {
	if err := s.checkCount(count); err != nil {
		return settle.Ask{}, err
	}
	if err := checkKey(key.Key); err != nil {
		return settle.Ask{}, err
	}
	if name == "" {
		return settle.Ask{Count: uint64(count), Key: key}, defaultWidth
	}
	if err := fsm.CheckSequenceName(name); err != nil {
		return settle.Ask{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return s.askNamed(name, seq, seq.Kind != "", count, key, ticks)
}

// askNamed checks a call for count IDs (ticks: the caller reads ticks) of
// named sequence name, which this leader's state holds as seq (known: at
// all). Unary calls and streams share it.
func (s *Server) askNamed(name string, seq *fsm.Sequence, known bool, count uint32, key fsm.Keyed, ticks bool) (settle.Ask, error) {
	if err := s.checkNamed(name, *seq, known, ticks); err != nil {
		return settle.Ask{}, err
	}
	return settle.Ask{Name: name, Seq: seq, Count: uint64(count), Key: key}, nil
}

// namedRoute is where a named sequence's call is served: on the leader
// through conn with fctx, when conn is set; else here, where the state
// holds the sequence as seq (known: at all) and the call reads ticks.
type namedRoute struct {
	conn  *grpc.ClientConn
	fctx  context.Context
	seq   fsm.Sequence
	known bool
	ticks bool
}

// routeNamed is the start every call of a named sequence shares (Next,
// Reserve): the name, count and key checked, then where it is served.
// ticks is the width the caller reads (nil: the sequence's own, as HTTP
// renders both). A follower forwards only once its state says every
// voter reads named sequences and keys, with the caller's width and name
// (the leader checks the sequence and width again).
func (s *Server) routeNamed(ctx context.Context, name string, count uint32, key string, ticks *bool) (namedRoute, error) {
	if err := fsm.CheckSequenceName(name); err != nil {
		return namedRoute{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := s.checkCount(count); err != nil {
		return namedRoute{}, err
	}
	if err := checkKey(key); err != nil {
		return namedRoute{}, err
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return namedRoute{}, err
	}
	r := namedRoute{}
	r.seq, r.known = s.State.Sequence(name)
	r.ticks = r.known && r.seq.Layout != nil && r.seq.Layout.Wide()
	if ticks != nil {
		r.ticks = *ticks
	}
	if !fwd {
		return r, nil
	}
	if err := s.keysRead(); err != nil {
		return namedRoute{}, err
	}
	if ticks == nil && !r.known {
		// The caller renders either width (HTTP's Reserve), and this
		// node has not applied the sequence's creation: the leader's
		// state says which width to ask in (else a 128-bit sequence's
		// call is refused for its width). Unknown there too, the
		// forwarded call says so.
		info, err := api.NewAdminClient(conn).DescribeSequence(s.forwardContext(ctx), &api.SequenceRequest{Name: name})
		if err == nil && info.Kind != fsm.KindDense {
			l, err := layout.Parse(info.Kind)
			r.ticks = err == nil && l.Wide()
		}
	}
	r.conn, r.fctx = conn, ForwardContext(ctx, s.Node.ClusterID(), r.ticks)
	if key != "" {
		r.fctx = metadata.AppendToOutgoingContext(r.fctx, api.CallerKey, idempotencyCaller(ctx))
	}
	return r, nil
}

// issueNamed renders calls' IDs, each from the first its grant got (none
// failed), in order into one slice of runs, and counts them as issued:
// once for all the calls of an answer.
func (s *Server) issueNamed(calls []namedCall) []*api.IDRun {
	runs := api.NewRunBuilder(len(calls))
	names := make([]string, 0, len(calls))
	counts := make([]uint64, 0, len(calls))
	total := uint64(0)
	for _, c := range calls {
		first, _ := c.grant.Result()
		total += c.ask.Count
		if c.ask.Name == "" {
			runs.Add(s.cfg.Layout, s.cfg.Group, first, c.ask.Count)
			continue
		}
		addSequenceRuns(runs, c.ask.Seq, first, c.ask.Count)
		names, counts = append(names, c.ask.Name), append(counts, c.ask.Count)
	}
	s.Meter.Issued(total)
	if len(names) > 0 {
		s.Meter.IssuedIn(names, counts)
	}
	return runs.Runs
}

// sequenceRuns renders count IDs from first as seq's kind makes them: a
// dense sequence's values are its IDs.
func sequenceRuns(seq fsm.Sequence, first, count uint64) []*api.IDRun {
	var b api.RunBuilder
	addSequenceRuns(&b, &seq, first, count)
	return b.Runs
}

// addSequenceRuns adds sequenceRuns(seq, first, count) to b.
func addSequenceRuns(b *api.RunBuilder, seq *fsm.Sequence, first, count uint64) {
	if seq.Layout == nil {
		b.AddRun(first, count, 1)
		return
	}
	b.Add(*seq.Layout, seq.Group, first, count)
}
