package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/recv"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// maxStreamInFlight bounds the requests of one NextStream being served at
// once.
const maxStreamInFlight = 1024

// Sequencer implements api.SequencerServer: Next, NextStream and Layout.
type Sequencer struct {
	api.UnimplementedSequencerServer
	srv *Server
}

// Next implements api.SequencerServer.
func (q *Sequencer) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if req.Sequence != "" {
		asks := len(metadata.ValueFromIncomingContext(ctx, api.TicksKey)) > 0
		resp, err := q.srv.nextInSequence(ctx, req, &asks)
		return resp, q.srv.status(ctx, err)
	}
	if err := q.srv.checkWidth(ctx); err != nil {
		return nil, ToStatus(ctx, err, "")
	}
	resp, err := q.srv.nextIDs(ctx, req)
	if err == nil {
		return resp, nil // the common case: no leader to look up
	}
	return nil, q.srv.status(ctx, err)
}

// Layout implements api.SequencerServer.
func (q *Sequencer) Layout(ctx context.Context, _ *api.LayoutRequest) (*api.LayoutResponse, error) {
	st := q.srv.State.State()
	leaderID, leaderAddr := q.srv.Node.Leader()
	if st.Layout == nil {
		return nil, ToStatus(ctx, ErrNotReady, leaderAddr)
	}
	l := st.Layout
	return &api.LayoutResponse{
		Layout: l.String(), Group: st.Group, EpochMs: l.EpochMs, UnitMs: l.UnitMs,
		TimeBits: uint32(l.TimeBits), GroupBits: uint32(l.GroupBits), SeqBits: uint32(l.SeqBits),
		Order: string(l.Order), LeaderId: leaderID, LeaderAddr: leaderAddr,
	}, nil
}

// streamCall is a call of a NextStream, assigned and waiting for its
// confirmation.
type streamCall struct {
	id     uint64
	ticket sequencer.Ticket
	// named are named sequences' calls, instead of a ticket: one, or
	// several whose grants end together, answered jointly.
	named []namedCall
	// invalid is set instead of a ticket for a call out of range; failed
	// for a named call that failed alone (a status).
	invalid string
	failed  error
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
func (q *Sequencer) forwardStream(conn *grpc.ClientConn, stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// A closing node ends its relays as it ends its own streams, at once:
	// the client moves on instead of waiting out the graceful stop.
	go func() {
		select {
		case <-q.srv.Stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := q.relay(ctx, cancel, conn, stream)
	if err != nil && isClosed(q.srv.Stop) {
		return sequencer.ErrNotLeader
	}
	return err
}

// relay passes stream's calls to the leader over conn and the leader's
// answers back, until either side ends or ctx does (cancel ends it).
func (q *Sequencer) relay(ctx context.Context, cancel context.CancelFunc, conn *grpc.ClientConn, stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	// The stream's width is the client's (the leader checks it per call),
	// and its keyed calls are the client's caller's.
	asks := len(metadata.ValueFromIncomingContext(ctx, api.TicksKey)) > 0
	fctx := metadata.AppendToOutgoingContext(ForwardContext(ctx, q.srv.Node.ClusterID(), asks), api.CallerKey, idempotencyCaller(ctx))
	up, err := api.NewSequencerClient(conn).NextStream(fctx)
	if err != nil {
		return err
	}
	// The header names the leader, so a client that can reach it moves
	// its calls to a stream of its own there.
	if _, leaderAddr := q.srv.Node.Leader(); leaderAddr != "" {
		_ = stream.SetHeader(metadata.Pairs(api.LeaderAddrKey, leaderAddr))
	}
	_ = stream.SendHeader(nil)
	// refused is why a call may not be relayed (set before cancel);
	// left, that the client ended the stream; waiting counts the calls
	// relayed and not yet answered.
	var refused atomic.Pointer[error]
	var left atomic.Bool
	var waiting atomic.Int64
	go func() {
		for {
			req, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				_ = up.CloseSend()
				return
			}
			if err != nil {
				left.Store(endedByClient(stream.Context(), err))
				cancel() // the client is gone: ends up.Recv below
				return
			}
			if err := q.relayable(req); err != nil {
				refused.Store(&err)
				cancel()
				return
			}
			waiting.Add(int64(len(req.Calls)))
			if up.Send(req) != nil {
				return // up.Recv below returns why
			}
		}
	}()
	err = recv.Each(up.Recv, func(resp *api.NextStreamResponse) error {
		for _, a := range resp.Answers {
			waiting.Add(-int64(1 + len(a.Also)))
		}
		return stream.Send(resp)
	})
	if r := refused.Load(); r != nil {
		return *r
	}
	// The client's cancel may end up.Recv before the reading goroutine
	// has seen it: the stream's own context says so too.
	if err != nil && (left.Load() || endedByClient(stream.Context(), err)) && waiting.Load() == 0 {
		return nil // the client ended the stream with every call answered
	}
	return err
}

// relayable refuses a message that holds a named or keyed call before
// this node's state says the cluster reads them, as a unary call's
// forward does (Server.keysRead): until then the leader may run an Ordo
// that ignores the fields and answers from the default sequence.
func (q *Sequencer) relayable(req *api.NextStreamRequest) error {
	for _, c := range req.Calls {
		if granted(c) {
			return q.srv.keysRead()
		}
	}
	return nil
}

// NextStream implements api.SequencerServer. One goroutine reads calls and
// assigns their ticks as they come, so many share one confirmation round;
// this one answers them in the order they were assigned, and sends every
// answer that is ready in one message. Any failure ends the stream with a
// status that names the leader; the client resends what was not answered.
// On a follower it relays the stream to the leader (forwardStream).
func (q *Sequencer) NextStream(stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]) error {
	end := func(err error) error { return q.srv.status(stream.Context(), err) }
	conn, fwd, err := q.srv.forward(stream.Context())
	if err != nil {
		return end(err)
	}
	if fwd {
		return end(q.forwardStream(conn, stream))
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
		recvErr <- q.assignCalls(ctx, stream, assigned)
		close(assigned)
	}()
	resp := &api.NextStreamResponse{}
	var next *streamCall // taken from assigned, not yet answered
	for {
		if next == nil {
			select {
			case c, ok := <-assigned:
				if !ok {
					// Every call taken is answered: nil once the client
					// is done sending, or has ended the stream.
					return end(answered(stream.Context(), <-recvErr))
				}
				next = &c
			case <-q.srv.Stop:
				return end(sequencer.ErrNotLeader)
			}
		}
		select {
		case <-next.done():
		case <-ctx.Done():
			return end(<-recvErr)
		case <-q.srv.Stop:
			return end(sequencer.ErrNotLeader)
		}
		// Gather every call whose round has ended: usually the whole
		// round.
		resp.Answers = resp.Answers[:0]
		covered := 0 // calls answered in resp: a joint answer covers several
		for next != nil && covered < maxAnswersPerMessage {
			answers, err := q.answer(ctx, next)
			if err != nil {
				// The answers gathered are confirmed: deliver them first.
				// A dense sequence's values, committed, would otherwise
				// be a gap made by a node that is still up.
				if len(resp.Answers) > 0 {
					_ = stream.Send(resp)
				}
				return end(err)
			}
			for _, a := range answers {
				resp.Answers = append(resp.Answers, a)
				covered += 1 + len(a.Also)
			}
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
			if next != nil && !isClosed(next.done()) {
				break
			}
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		q.srv.Meter.StreamSent(len(resp.Answers))
		if assigned == nil && next == nil {
			return end(answered(stream.Context(), <-recvErr))
		}
	}
}

// done is closed once the call can be answered.
func (c *streamCall) done() <-chan struct{} {
	if len(c.named) > 0 {
		return c.named[0].grant.Done()
	}
	return c.ticket.Done()
}

// answer is the answer to c once it is done (several for named calls
// that cannot be answered jointly); an error ends the stream.
func (q *Sequencer) answer(ctx context.Context, c *streamCall) ([]*api.StreamAnswer, error) {
	a := &api.StreamAnswer{Id: c.id, Invalid: c.invalid, Also: c.also, Counts: c.counts}
	switch {
	case c.invalid != "":
	case c.failed != nil:
		a, err := failedAlone(ctx, a, c.failed)
		return []*api.StreamAnswer{a}, err
	case len(c.named) > 0:
		return q.answerNamed(ctx, c.named)
	default:
		if err := c.ticket.Err(); err != nil {
			return nil, err
		}
		a.Runs = q.srv.issue(c.ticket.Block)
	}
	return []*api.StreamAnswer{a}, nil
}

// answerNamed answers named calls whose grants are done: jointly when
// there are several and every one got its IDs, else each alone.
func (q *Sequencer) answerNamed(ctx context.Context, calls []namedCall) ([]*api.StreamAnswer, error) {
	failed := false
	for _, c := range calls {
		if _, err := c.grant.Result(); err != nil {
			failed = true
			break
		}
	}
	if len(calls) > 1 && !failed {
		a := &api.StreamAnswer{Id: calls[0].id, Named: true, Keyed: calls[0].ask.Key.Key != "", Counts: make([]uint32, len(calls)), Also: make([]uint64, 0, len(calls)-1)}
		for i, c := range calls {
			if i > 0 {
				a.Also = append(a.Also, c.id)
			}
			a.Counts[i] = uint32(c.ask.Count)
		}
		a.Runs = q.srv.issueNamed(calls)
		return []*api.StreamAnswer{a}, nil
	}
	answers := make([]*api.StreamAnswer, len(calls))
	for i, c := range calls {
		a := &api.StreamAnswer{Id: c.id, Named: c.ask.Name != "", Keyed: c.ask.Key.Key != ""}
		if _, err := c.grant.Result(); err != nil {
			if a, err = failedAlone(ctx, a, err); err != nil {
				return nil, err
			}
		} else {
			a.Runs = q.srv.issueNamed(calls[i : i+1])
		}
		answers[i] = a
	}
	return answers, nil
}

// failedAlone answers a named call's failure on its own, or ends the
// stream (the error returned) when a retry elsewhere may succeed: this
// node no longer leads, or cannot tell.
func failedAlone(ctx context.Context, a *api.StreamAnswer, err error) (*api.StreamAnswer, error) {
	st, _ := status.FromError(ToStatus(ctx, err, ""))
	switch st.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
		return nil, err
	}
	a.Code, a.Message = uint32(st.Code()), st.Message()
	return a, nil
}

// startNamed starts the calls of a stream that came together and that
// Grants serves (named sequences' calls, keyed calls): one Grants, so the
// calls served from windows share one round, and those (when the client
// takes joint answers) one answer. A call that fails at once fails alone;
// ticks is the stream's width, and widthErr why it may not take the
// default sequence's IDs.
func (q *Sequencer) startNamed(ctx context.Context, calls []*api.StreamCall, joint, ticks bool, widthErr error) []streamCall {
	names := make([]string, 0, len(calls))
	for _, call := range calls {
		if call.Sequence != "" {
			names = append(names, call.Sequence)
		}
	}
	seqs := q.srv.State.SequencesOf(names)
	var out []streamCall // usually one joint call: grown as needed
	named := make([]namedCall, 0, len(calls))
	asks := make([]settle.Ask, 0, len(calls))
	for _, call := range calls {
		var seq *fsm.Sequence
		if call.Sequence != "" {
			seq, seqs = &seqs[0], seqs[1:]
		}
		ask, err := q.srv.askOf(call.Sequence, seq, call.Count, keyed(ctx, call.IdempotencyKey), ticks, widthErr)
		if err != nil {
			out = append(out, streamCall{id: call.Id, failed: err})
			continue
		}
		asks = append(asks, ask)
		named = append(named, namedCall{id: call.Id})
	}
	// The calls point into the message's asks and grants: one allocation
	// each a message, not a copy a call.
	grants := q.srv.Settle.Grants(ctx, asks)
	for i := range named {
		named[i].ask, named[i].grant = &asks[i], &grants[i]
	}
	// Calls whose grants end together (one round) make one answer.
	for len(named) > 0 {
		k := 1
		for joint && k < len(named) && named[k].grant.Done() == named[0].grant.Done() && named[k].ask.Name != "" && named[0].ask.Name != "" {
			k++
		}
		out = append(out, streamCall{id: named[0].id, named: named[:k:k]})
		named = named[k:]
	}
	return out
}

// granted reports whether Grants serves call: a named sequence's call, or
// a keyed one.
func granted(call *api.StreamCall) bool {
	return call.Sequence != "" || call.IdempotencyKey != ""
}

// assignCalls reads calls until the client is done sending (nil) or the
// stream fails, and assigns each call's ticks in the order received. The
// valid calls of the default sequence that come together in a message
// are assigned together, up to MaxCount ticks at a time, and split: each
// call still gets its own consecutive ticks, and a message costs one
// lock, one clock reading and one lease check. A named sequence's call is
// started alone, in its turn.
func (q *Sequencer) assignCalls(ctx context.Context, stream grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse], assigned chan<- streamCall) error {
	// A stream of the wrong width may still take named sequences' IDs:
	// only its first call of the default sequence ends it.
	widthErr := q.srv.checkWidth(ctx)
	ticks := len(metadata.ValueFromIncomingContext(ctx, api.TicksKey)) > 0
	return recv.Each(stream.Recv, func(req *api.NextStreamRequest) error {
		q.srv.Meter.StreamRead(len(req.Calls))
		for calls := req.Calls; len(calls) > 0; {
			if granted(calls[0]) {
				// The run of such calls from the front.
				k := 1
				for k < len(calls) && k < maxAnswersPerMessage && granted(calls[k]) {
					k++
				}
				for _, c := range q.startNamed(ctx, calls[:k], req.Joint, ticks, widthErr) {
					select {
					case assigned <- c:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				calls = calls[k:]
				continue
			}
			if widthErr != nil {
				return widthErr
			}
			// The longest run of valid calls of the default sequence from
			// the front, within MaxCount IDs and maxAnswersPerMessage
			// calls (a joint answer must fit in a message, and what a
			// stream holds stays bounded).
			k, total := 0, uint64(0)
			for _, call := range calls {
				n := uint64(call.Count)
				if granted(call) || n == 0 || n > q.srv.cfg.MaxCount || total+n > q.srv.cfg.MaxCount || k == maxAnswersPerMessage {
					break
				}
				k, total = k+1, total+n
			}
			var answers []streamCall
			if k == 0 {
				// One bad call must not fail the others in flight.
				k = 1
				answers = []streamCall{{id: calls[0].Id, invalid: fmt.Sprintf("count %d, want 1 to %d", calls[0].Count, q.srv.cfg.MaxCount)}}
			} else {
				t, err := q.srv.IDs.Assign(ctx, total)
				for errors.Is(err, sequencer.ErrAhead) && k > 1 {
					// Refused whole near the lead bound: serve the calls
					// that fit, as assigning one by one would, and end
					// the stream only at the first that does not.
					k, total = k/2, 0
					for _, call := range calls[:k] {
						total += uint64(call.Count)
					}
					t, err = q.srv.IDs.Assign(ctx, total)
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

// answered is err, the end of a stream whose every call was answered:
// nil when the client ended it (endedByClient).
func answered(ctx context.Context, err error) error {
	if endedByClient(ctx, err) {
		return nil
	}
	return err
}

// endedByClient reports whether err ended a stream because its client
// canceled it. That is how a client ends a stream it is done with (the Go
// client's Close, a watch its caller stops): not a failure, which the
// stream's count (ordo_requests_total{code="Canceled"}) would show on
// every CLI call, unless a call of the stream was still waiting for its
// answer.
func endedByClient(ctx context.Context, err error) bool {
	return err != nil && errors.Is(ctx.Err(), context.Canceled) &&
		(errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled)
}
