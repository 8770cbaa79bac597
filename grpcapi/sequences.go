package grpcapi

// Named sequences: their admin calls, and the path to a named sequence's
// IDs, which every call commits through the log before it answers (see
// package fsm, sequences.go). Like Next, only the leader serves them, and
// forward is the one rule of where.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
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
	return s.sequenceInfo(name)
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

// DescribeSequence implements api.AdminServer, from this node's state.
func (a *Admin) DescribeSequence(ctx context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	resp, err := a.srv.DescribeSequence(ctx, req.Name)
	return resp, a.srv.status(ctx, err)
}

// DescribeSequence is the sequence name as this node's state holds it,
// which gRPC and HTTP share. Its errors are statuses.
func (s *Server) DescribeSequence(ctx context.Context, name string) (*api.SequenceInfo, error) {
	if err := fsm.CheckSequenceName(name); err != nil {
		return nil, s.status(ctx, fmt.Errorf("%w: %w", ErrBadRequest, err))
	}
	info, err := s.sequenceInfo(name)
	return info, s.status(ctx, err)
}

func (s *Server) sequenceInfo(name string) (*api.SequenceInfo, error) {
	seq, ok := s.State.Sequence(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q: create it with ordo sequence create", fsm.ErrNoSequence, name)
	}
	return info(name, &seq), nil
}

func info(name string, seq *fsm.Sequence) *api.SequenceInfo {
	return &api.SequenceInfo{Name: name, Kind: seq.Kind, Group: seq.Group, Start: seq.Start, Next: seq.Next, Dropped: seq.Dropped}
}

// NextInSequence is the path of one HTTP call for a named sequence's IDs:
// HTTP renders whatever the runs carry, so a 128-bit sequence's ticks too.
// Its errors are statuses.
func (s *Server) NextInSequence(ctx context.Context, name string, count uint32) (*api.NextResponse, error) {
	resp, err := s.nextInSequence(ctx, &api.NextRequest{Count: count, Sequence: name}, nil)
	return resp, s.status(ctx, err)
}

// nextInSequence is the path of one call for a named sequence's IDs,
// which gRPC's Next and HTTP share: checks, one forward to the leader or
// one allocation committed here, and the runs. ticks says whether the
// caller reads ticks (gRPC: api.TicksKey); nil: whatever the sequence's
// width is (HTTP renders both).
func (s *Server) nextInSequence(ctx context.Context, req *api.NextRequest, ticks *bool) (*api.NextResponse, error) {
	if err := fsm.CheckSequenceName(req.Sequence); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := s.checkCount(req.Count); err != nil {
		return nil, err
	}
	if err := checkKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	seq, known := s.State.Sequence(req.Sequence)
	wide := known && seq.Layout != nil && seq.Layout.Wide()
	if ticks == nil {
		ticks = &wide
	}
	if fwd {
		// The leader checks the width again with what the call says.
		fctx := ForwardContext(ctx, s.Node.ClusterID(), *ticks)
		if req.IdempotencyKey != "" {
			fctx = metadata.AppendToOutgoingContext(fctx, api.CallerKey, idempotencyCaller(ctx))
		}
		return api.NewSequencerClient(conn).Next(fctx, req)
	}
	if !known || seq.Dropped {
		return nil, fmt.Errorf("%w: %q: create it with ordo sequence create", fsm.ErrNoSequence, req.Sequence)
	}
	if *ticks != wide {
		return nil, fmt.Errorf("sequence %q is %s: a call for its IDs must %sname %s in its metadata: %w",
			req.Sequence, seq.Kind, map[bool]string{true: "", false: "not "}[wide], api.TicksKey, layout.ErrWrongWidth)
	}
	first, err := s.Settle.Alloc(ctx, req.Sequence, uint64(req.Count), keyOf(ctx, req))
	if err != nil {
		return nil, err
	}
	s.Meter.Issued(uint64(req.Count))
	s.Meter.IssuedIn(req.Sequence, uint64(req.Count))
	return &api.NextResponse{Runs: sequenceRuns(seq, first, uint64(req.Count)), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr}, nil
}

// sequenceRuns renders count IDs from first as seq's kind makes them: a
// dense sequence's values are its IDs.
func sequenceRuns(seq fsm.Sequence, first, count uint64) []*api.IDRun {
	if seq.Layout == nil {
		return []*api.IDRun{{First: first, Count: uint32(count), Step: 1}}
	}
	return api.Runs(*seq.Layout, seq.Group, first, count)
}
