package grpcapi

// The settled order's calls (Reserve, Complete, Abandon, Extend,
// Watermark, WatchWatermark), each from its checks to its answer. Like
// Next, only the leader serves them, and a follower forwards them (relays
// the watch): forward is the one rule of where they are served.

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/recv"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// Settle is the leader's side of tracked reservations (*settle.Settler).
type Settle interface {
	// ReserveKeyed opens a reservation of count ticks that lives ttl (0:
	// the default). With a key, a retry answers the first call's
	// reservation with its fate now.
	ReserveKeyed(ctx context.Context, key fsm.Keyed, count uint64, ttl time.Duration) (settle.Reservation, error)
	Decide(ctx context.Context, do fsm.Do, first, count uint64, ttl time.Duration) (fsm.Fate, uint64, error)
	Watermark(ctx context.Context) (uint64, error)
	// Claim commits count ticks of the default sequence under a key: a
	// retry gets the first call's IDs.
	Claim(ctx context.Context, key fsm.Keyed, count uint64) (uint64, error)
	// Grants starts calls for IDs of named sequences and returns at once
	// with what each waits for (a stream pipelines its calls). With a
	// key, a retry gets the first call's IDs.
	Grants(ctx context.Context, asks []settle.Ask) []settle.Grant
	// Watch is W as this node last applied it, and a channel closed when
	// it rises.
	Watch() (uint64, <-chan struct{})
}

// Watch heartbeats: the default, and the bounds a caller may ask for.
const (
	defaultHeartbeat = time.Second
	minHeartbeat     = 10 * time.Millisecond
	maxHeartbeat     = time.Minute
)

// Reserve implements api.SequencerServer.
func (q *Sequencer) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	if err := q.srv.checkWidth(ctx); err != nil {
		return nil, ToStatus(ctx, err, "")
	}
	return q.srv.Reserve(ctx, req)
}

// Complete implements api.SequencerServer.
func (q *Sequencer) Complete(ctx context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return q.srv.Decide(ctx, fsm.DoComplete, req.Handle, 0)
}

// Abandon implements api.SequencerServer.
func (q *Sequencer) Abandon(ctx context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return q.srv.Decide(ctx, fsm.DoAbandon, req.Handle, 0)
}

// Extend implements api.SequencerServer.
func (q *Sequencer) Extend(ctx context.Context, req *api.ExtendRequest) (*api.SettleResponse, error) {
	return q.srv.Decide(ctx, fsm.DoExtend, req.Handle, req.TtlMs)
}

// Watermark implements api.SequencerServer.
func (q *Sequencer) Watermark(ctx context.Context, req *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	return q.srv.Watermark(ctx)
}

// Reserve is the path of one Reserve call, which gRPC and HTTP share: the
// count check, one forward to the leader or the settler here, and the
// reservation's handle and IDs. Its errors are statuses, as NextIDs's.
func (s *Server) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	resp, err := s.reserve(ctx, req)
	return resp, s.status(ctx, err)
}

func (s *Server) reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
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
	if fwd {
		if req.IdempotencyKey != "" {
			if err := s.keysRead(); err != nil {
				return nil, err
			}
		}
		return api.NewSequencerClient(conn).Reserve(s.keyedForwardContext(ctx, req.IdempotencyKey), req)
	}
	r, err := s.Settle.ReserveKeyed(ctx, keyed(ctx, req.IdempotencyKey), uint64(req.Count), ms(req.TtlMs))
	if err != nil {
		return nil, err
	}
	return &api.ReserveResponse{
		Handle: api.Handle{First: r.First, Count: r.Count}.String(), Runs: s.issue(r.Block),
		TtlMs: uint32(r.TTL.Milliseconds()), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr,
		Fate: api.Fate(r.Fate),
	}, nil
}

// Decide is the path of one Complete, Abandon or Extend (ttlMs), which
// gRPC and HTTP share. Its errors are statuses.
func (s *Server) Decide(ctx context.Context, do fsm.Do, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	resp, err := s.decide(ctx, do, handle, ttlMs)
	return resp, s.status(ctx, err)
}

func (s *Server) decide(ctx context.Context, do fsm.Do, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	h, err := api.ParseHandle(handle)
	if err != nil {
		return nil, err
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		return forwardDecision(s.forwardContext(ctx), api.NewSequencerClient(conn), do, handle, ttlMs)
	}
	fate, w, err := s.Settle.Decide(ctx, do, h.First, h.Count, ms(ttlMs))
	if err != nil {
		return nil, err
	}
	return &api.SettleResponse{Fate: api.Fate(fate), Watermark: s.watermarkID(w), WatermarkTick: w}, nil
}

func forwardDecision(ctx context.Context, c api.SequencerClient, do fsm.Do, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	switch do {
	case fsm.DoComplete:
		return c.Complete(ctx, &api.HandleRequest{Handle: handle})
	case fsm.DoAbandon:
		return c.Abandon(ctx, &api.HandleRequest{Handle: handle})
	}
	return c.Extend(ctx, &api.ExtendRequest{Handle: handle, TtlMs: ttlMs})
}

// Watermark is the path of one read of W, which gRPC and HTTP share. Its
// errors are statuses.
func (s *Server) Watermark(ctx context.Context) (*api.WatermarkResponse, error) {
	resp, err := s.watermark(ctx)
	return resp, s.status(ctx, err)
}

func (s *Server) watermark(ctx context.Context) (*api.WatermarkResponse, error) {
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		return api.NewSequencerClient(conn).Watermark(s.forwardContext(ctx), &api.WatermarkRequest{})
	}
	w, err := s.Settle.Watermark(ctx)
	if err != nil {
		return nil, err
	}
	return s.mark(w), nil
}

// mark is W as the calls answer it.
func (s *Server) mark(w uint64) *api.WatermarkResponse {
	return &api.WatermarkResponse{Watermark: s.watermarkID(w), WatermarkTick: w, LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr}
}

// watermarkID is W in ticks as an ID of a 64-bit layout: every ID of the
// cluster below it has a tick below W, since an ID grows with its tick
// within one group. 0 under a 128-bit layout, whose callers compare ticks.
func (s *Server) watermarkID(w uint64) uint64 {
	if s.cfg.Layout.Wide() {
		return 0
	}
	return s.cfg.Layout.ID(w, s.cfg.Group)
}

// WatchWatermark implements api.SequencerServer: W at once, then each
// time it rises, and every heartbeat while it does not. The first value
// and every heartbeat are read as Watermark reads (a commit or a round
// in this leader's term); a rise is sent from the entry this leader
// committed. A heartbeat that fails (leadership lost) ends the stream.
func (q *Sequencer) WatchWatermark(req *api.WatchRequest, stream grpc.ServerStreamingServer[api.WatermarkResponse]) error {
	ctx := stream.Context()
	end := func(err error) error { return q.srv.status(ctx, err) }
	conn, fwd, err := q.srv.forward(ctx)
	if err != nil {
		return end(err)
	}
	if fwd {
		up, err := api.NewSequencerClient(conn).WatchWatermark(q.srv.forwardContext(ctx), req)
		if err != nil {
			return end(err)
		}
		return end(recv.Each(up.Recv, stream.Send))
	}
	beat := defaultHeartbeat
	if req.HeartbeatMs != 0 {
		beat = min(max(ms(req.HeartbeatMs), minHeartbeat), maxHeartbeat)
	}
	return end(q.watch(ctx, beat, stream.Send))
}

// watch sends W with send until ctx ends, the node closes, or a read
// fails.
func (q *Sequencer) watch(ctx context.Context, beat time.Duration, send func(*api.WatermarkResponse) error) error {
	sent := uint64(0)
	timer := time.NewTimer(0) // the first value at once
	defer timer.Stop()
	for {
		_, changed := q.srv.Settle.Watch()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.srv.Stop:
			return sequencer.ErrNotLeader
		case <-timer.C:
			w, err := q.srv.Settle.Watermark(ctx)
			if err != nil {
				return err
			}
			sent = max(sent, w)
			timer.Reset(beat)
		case <-changed:
			w, _ := q.srv.Settle.Watch()
			if w <= sent {
				continue
			}
			sent = w
		}
		if err := send(q.srv.mark(sent)); err != nil {
			return err
		}
	}
}

func ms(v uint32) time.Duration { return time.Duration(v) * time.Millisecond }
