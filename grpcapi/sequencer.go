package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/recv"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// maxStreamInFlight bounds the requests of one NextStream being served at
// once.
const maxStreamInFlight = 1024

// Forwarder is where a call that only the leader may serve is served:
// the node's rule, which the Sequencer and Admin services share, so that
// one rule decides it for every call.
type Forwarder interface {
	// Forward reports whether a call should go to the leader, and the
	// connection to use; an error when the node can neither serve nor
	// forward.
	Forward(ctx context.Context) (conn *grpc.ClientConn, fwd bool, err error)
	// ForwardContext marks a call passed on to the leader (one hop at
	// most), names the cluster, and passes the caller's admin token on.
	ForwardContext(ctx context.Context) context.Context
}

// SequencerNode is what the Sequencer service needs of a node. Errors it
// returns are the node's own, unmapped: the service passes them through
// Node.ToStatus with the leader hint, as every call's errors leave.
type SequencerNode interface {
	Node
	Forwarder
	// CheckWidth refuses a call that would read the runs wrongly for the
	// node's layout (api.TicksKey).
	CheckWidth(ctx context.Context) error
	// Next is the node's path to IDs for one request (checks, forward
	// or sequencer), which the node's HTTP API shares.
	Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error)
	// MaxCount is the most IDs one call may ask for.
	MaxCount() uint64
	// Assign assigns count ticks to a stream's calls; they are handed out
	// once the ticket's confirmation round ends (sequencer.Ticket).
	Assign(ctx context.Context, count uint64) (sequencer.Ticket, error)
	// Issue renders a confirmed block as runs of IDs and counts them as
	// issued.
	Issue(b sequencer.Block) []*api.IDRun
	// ClusterLayout is the layout and group the cluster recorded; nil
	// while the node does not know them.
	ClusterLayout() (*layout.Layout, uint64)
	// Stop is closed when the node closes: open streams end then.
	Stop() <-chan struct{}
}

// Sequencer implements api.SequencerServer: Next, NextStream and Layout.
type Sequencer struct {
	api.UnimplementedSequencerServer
	n SequencerNode
}

// NewSequencer returns the Sequencer service of node n.
func NewSequencer(n SequencerNode) *Sequencer { return &Sequencer{n: n} }

// Next implements api.SequencerServer.
func (s *Sequencer) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if err := s.n.CheckWidth(ctx); err != nil {
		return nil, s.n.ToStatus(ctx, err, "")
	}
	resp, err := s.n.Next(ctx, req)
	if err == nil {
		return resp, nil // the common case: no leader to look up
	}
	_, leaderAddr := s.n.Leader()
	return resp, s.n.ToStatus(ctx, err, leaderAddr)
}

// Layout implements api.SequencerServer.
func (s *Sequencer) Layout(ctx context.Context, _ *api.LayoutRequest) (*api.LayoutResponse, error) {
	l, group := s.n.ClusterLayout()
	leaderID, leaderAddr := s.n.Leader()
	if l == nil {
		return nil, s.n.ToStatus(ctx, ErrNotReady, leaderAddr)
	}
	return &api.LayoutResponse{
		Layout: l.String(), Group: group, EpochMs: l.EpochMs, UnitMs: l.UnitMs,
		TimeBits: uint32(l.TimeBits), GroupBits: uint32(l.GroupBits), SeqBits: uint32(l.SeqBits),
		Order: string(l.Order), LeaderId: leaderID, LeaderAddr: leaderAddr,
	}, nil
}

// streamCall is a call of a NextStream, assigned and waiting for its
// confirmation.
type streamCall struct {
	id      uint64
	ticket  sequencer.Ticket
	invalid string // set instead of a ticket for a call out of range
	// also and counts make a joint answer (api.StreamAnswer): the ticket
	// covers id's call and these, counts[i] ticks each in turn.
	also   []uint64
	counts []uint32
}

// forwardStream relays a stream to the leader, one hop, as Next is
// forwarded: a client that reaches only followers (a service address, a
// leader hint it cannot dial, as from outside a container network) still
// gets IDs on its stream. The answers are the leader's, sent after its
// confirmation round, so relaying them keeps every guarantee.
func (s *Sequencer) forwardStream(conn *grpc.ClientConn, stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// A closing node ends its relays as it ends its own streams, at once:
	// the client moves on instead of waiting out the graceful stop.
	go func() {
		select {
		case <-s.n.Stop():
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.relay(ctx, cancel, conn, stream)
	if err != nil && isClosed(s.n.Stop()) {
		return sequencer.ErrNotLeader
	}
	return err
}

// relay passes stream's calls to the leader over conn and the leader's
// answers back, until either side ends or ctx does (cancel ends it).
func (s *Sequencer) relay(ctx context.Context, cancel context.CancelFunc, conn *grpc.ClientConn, stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	up, err := api.NewSequencerClient(conn).NextStream(s.n.ForwardContext(ctx))
	if err != nil {
		return err
	}
	// The header names the leader, so a client that can reach it moves
	// its calls to a stream of its own there.
	if _, leaderAddr := s.n.Leader(); leaderAddr != "" {
		_ = stream.SetHeader(metadata.Pairs(api.LeaderAddrKey, leaderAddr))
	}
	_ = stream.SendHeader(nil)
	go func() {
		for {
			req, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err != nil {
				cancel() // the client is gone: ends up.Recv below
				return
			}
			if up.Send(req) != nil {
				return // up.Recv below returns why
			}
		}
	}()
	return recv.Each(up.Recv, stream.Send)
}

// NextStream implements api.SequencerServer. One goroutine reads calls and
// assigns their ticks as they come, so many share one confirmation round;
// this one answers them in the order they were assigned, and sends every
// answer that is ready in one message. Any failure ends the stream with a
// status that names the leader; the client resends what was not answered.
// On a follower it relays the stream to the leader (forwardStream).
func (s *Sequencer) NextStream(stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	end := func(err error) error {
		_, leaderAddr := s.n.Leader()
		return s.n.ToStatus(stream.Context(), err, leaderAddr)
	}
	if err := s.n.CheckWidth(stream.Context()); err != nil {
		return end(err)
	}
	conn, fwd, err := s.n.Forward(stream.Context())
	if err != nil {
		return end(err)
	}
	if fwd {
		return end(s.forwardStream(conn, stream))
	}
	// At once, with no leader named: a client that left a relay for this
	// stream learns that it reached the leader.
	_ = stream.SendHeader(nil)
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// assigned bounds the calls one stream may have waiting; past it,
	// reading waits, and gRPC flow control slows the client.
	assigned := make(chan streamCall, maxStreamInFlight)
	recvErr := make(chan error, 1)
	go func() {
		recvErr <- s.assignCalls(ctx, stream, assigned)
		close(assigned)
	}()
	resp := &api.NextStreamResponse{}
	var next *streamCall // taken from assigned, not yet answered
	for {
		if next == nil {
			select {
			case c, ok := <-assigned:
				if !ok {
					return end(<-recvErr) // nil once the client is done sending
				}
				next = &c
			case <-s.n.Stop():
				return end(sequencer.ErrNotLeader)
			}
		}
		select {
		case <-next.ticket.Done():
		case <-ctx.Done():
			return end(<-recvErr)
		case <-s.n.Stop():
			return end(sequencer.ErrNotLeader)
		}
		// Gather every call whose round has ended: usually the whole
		// round.
		resp.Answers = resp.Answers[:0]
		covered := 0 // calls answered in resp: a joint answer covers several
		for next != nil && covered < maxAnswersPerMessage {
			if err := next.ticket.Err(); err != nil {
				return end(err)
			}
			a := &api.StreamAnswer{Id: next.id, Invalid: next.invalid, Also: next.also, Counts: next.counts}
			if next.invalid == "" {
				a.Runs = s.n.Issue(next.ticket.Block)
			}
			resp.Answers = append(resp.Answers, a)
			covered += 1 + len(a.Also)
			next = nil
			select {
			case c, ok := <-assigned:
				if ok {
					next = &c
				} else {
					assigned = nil // closed: stop taking; the loop above ends the stream
				}
			default:
			}
			if next != nil && !isClosed(next.ticket.Done()) {
				break
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if assigned == nil && next == nil {
			return end(<-recvErr)
		}
	}
}

// assignCalls reads calls until the client is done sending (nil) or the
// stream fails, and assigns each call's ticks in the order received. The
// valid calls of a message are assigned together, up to MaxCount ticks at
// a time, and split: each call still gets its own consecutive ticks, and
// a message costs one lock, one clock reading and one lease check.
func (s *Sequencer) assignCalls(ctx context.Context, stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse], assigned chan<- streamCall) error {
	return recv.Each(stream.Recv, func(req *api.NextStreamRequest) error {
		for calls := req.Calls; len(calls) > 0; {
			// The longest run of valid calls from the front, within
			// MaxCount IDs and maxAnswersPerMessage calls (a joint answer
			// must fit in a message, and what a stream holds stays
			// bounded).
			k, total := 0, uint64(0)
			for _, call := range calls {
				n := uint64(call.Count)
				if n == 0 || n > s.n.MaxCount() || total+n > s.n.MaxCount() || k == maxAnswersPerMessage {
					break
				}
				k, total = k+1, total+n
			}
			var answers []streamCall
			if k == 0 {
				// One bad call must not fail the others in flight.
				k = 1
				answers = []streamCall{{id: calls[0].Id, invalid: fmt.Sprintf("count %d, want 1 to %d", calls[0].Count, s.n.MaxCount())}}
			} else {
				t, err := s.n.Assign(ctx, total)
				for errors.Is(err, sequencer.ErrAhead) && k > 1 {
					// Refused whole near the lead bound: serve the calls
					// that fit, as assigning one by one would, and end
					// the stream only at the first that does not.
					k, total = k/2, 0
					for _, call := range calls[:k] {
						total += uint64(call.Count)
					}
					t, err = s.n.Assign(ctx, total)
				}
				if err != nil {
					return err
				}
				answers = splitTicket(t, calls[:k], req.Joint)
			}
			calls = calls[k:]
			for _, c := range answers {
				select {
				case assigned <- c:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	})
}

// splitTicket hands the calls their ticks from t, each its count in turn:
// one joint answer when the client takes them (and there are several),
// else one answer a call.
func splitTicket(t sequencer.Ticket, calls []*api.StreamCall, joint bool) []streamCall {
	if joint && len(calls) > 1 {
		also, counts := jointOf(calls)
		return []streamCall{{id: calls[0].Id, ticket: t, also: also, counts: counts}}
	}
	answers := make([]streamCall, len(calls))
	next := t.First
	for i, call := range calls {
		n := uint64(call.Count)
		answers[i] = streamCall{id: call.Id, ticket: t.Part(sequencer.Block{First: next, Count: n})}
		next += n
	}
	return answers
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
