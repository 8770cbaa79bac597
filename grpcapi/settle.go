package grpcapi

// The settled order's calls (Reserve, Complete, Abandon, Extend,
// Watermark, WatchWatermark), each from its checks to its answer. Like
// Next, only the leader serves them, and a follower forwards them (relays
// the watch): forward is the one rule of where they are served. Each
// names a sequence, "" for the default one: a named sequence's
// reservations, handles and W are in its own values (dense) or ticks
// (layout), and a follower forwards them only at the cluster version
// that reads them, since an older leader would ignore the sequence.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/recv"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// Settle is the leader's side of tracked reservations (*settle.Settler).
type Settle interface {
	// ReserveIn opens a reservation of count IDs of sequence seq ("" the
	// default) that lives ttl (0: the default). With a key, a retry
	// answers the first call's reservation with its fate now.
	ReserveIn(ctx context.Context, seq string, key fsm.Keyed, count uint64, ttl time.Duration) (settle.Reservation, error)
	// DecideIn completes, abandons or extends a reservation of seq and
	// answers its fate and seq's W.
	DecideIn(ctx context.Context, seq string, do fsm.Do, first, count uint64, ttl time.Duration) (fsm.Fate, uint64, error)
	// WatermarkOf is seq's W.
	WatermarkOf(ctx context.Context, seq string) (uint64, error)
	// Claim commits count ticks of the default sequence under a key: a
	// retry gets the first call's IDs.
	Claim(ctx context.Context, key fsm.Keyed, count uint64) (uint64, error)
	// Current reports whether this node's state answers for the
	// cluster (settle.Settler.Current).
	Current() bool
	// Grants starts calls for IDs of named sequences and returns at once
	// with what each waits for (a stream pipelines its calls). With a
	// key, a retry gets the first call's IDs.
	Grants(ctx context.Context, asks []settle.Ask) []settle.Grant
	// WatchOf is seq's W as this node last applied it, and a channel
	// closed when it rises.
	WatchOf(seq string) (uint64, <-chan struct{})
}

// Watch heartbeats: the default, and the bounds a caller may ask for.
const (
	defaultHeartbeat = time.Second
	minHeartbeat     = 10 * time.Millisecond
	maxHeartbeat     = time.Minute
)

// Reserve implements api.SequencerServer.
func (q *Sequencer) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	if req.Sequence != "" {
		// The sequence's width, not the cluster's, decides.
		asks := len(metadata.ValueFromIncomingContext(ctx, api.TicksKey)) > 0
		resp, err := q.srv.reserveNamed(ctx, req, &asks)
		return resp, q.srv.status(ctx, err)
	}
	if err := q.srv.checkWidth(ctx); err != nil {
		return nil, ToStatus(ctx, err, "")
	}
	return q.srv.Reserve(ctx, req)
}

// Complete implements api.SequencerServer.
func (q *Sequencer) Complete(ctx context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return q.srv.Decide(ctx, fsm.DoComplete, req.Sequence, req.Handle, 0)
}

// Abandon implements api.SequencerServer.
func (q *Sequencer) Abandon(ctx context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return q.srv.Decide(ctx, fsm.DoAbandon, req.Sequence, req.Handle, 0)
}

// Extend implements api.SequencerServer.
func (q *Sequencer) Extend(ctx context.Context, req *api.ExtendRequest) (*api.SettleResponse, error) {
	return q.srv.Decide(ctx, fsm.DoExtend, req.Sequence, req.Handle, req.TtlMs)
}

// Watermark implements api.SequencerServer.
func (q *Sequencer) Watermark(ctx context.Context, req *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	return q.srv.Watermark(ctx, req.Sequence)
}

// Reserve is the path of one Reserve call, which gRPC and HTTP share: the
// count check, one forward to the leader or the settler here, and the
// reservation's handle and IDs. Its errors are statuses, as NextIDs's. A
// named sequence's (req.Sequence) is rendered with whatever width the
// sequence has (HTTP renders both).
func (s *Server) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	var resp *api.ReserveResponse
	var err error
	if req.Sequence != "" {
		resp, err = s.reserveNamed(ctx, req, nil)
	} else {
		resp, err = s.reserve(ctx, req)
	}
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
	r, err := s.Settle.ReserveIn(ctx, "", keyed(ctx, req.IdempotencyKey), uint64(req.Count), ms(req.TtlMs))
	if err != nil {
		return nil, err
	}
	return &api.ReserveResponse{
		Handle: api.Handle{First: r.First, Count: r.Count}.String(), Runs: s.issue(r.Block),
		TtlMs: uint32(r.TTL.Milliseconds()), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr,
		Fate: api.Fate(r.Fate),
	}, nil
}

// reserveNamed is the path of one Reserve of a named sequence: its route
// (routeNamed: checks, and a forward to the leader, whose answer must
// name the sequence), or on the leader the sequence and width checked,
// the settler, and the reservation's handle (naming the sequence) and
// IDs, rendered as the sequence's kind makes them.
func (s *Server) reserveNamed(ctx context.Context, req *api.ReserveRequest, ticks *bool) (*api.ReserveResponse, error) {
	route, err := s.routeNamed(ctx, req.Sequence, req.Count, req.IdempotencyKey, ticks)
	if err != nil {
		return nil, err
	}
	if route.conn != nil {
		resp, err := api.NewSequencerClient(route.conn).Reserve(route.fctx, req)
		if err == nil && resp.Sequence != req.Sequence {
			return nil, fmt.Errorf("%w: the leader answered a reservation of %q for one of %q (an Ordo too old for named reservations)", settle.ErrClusterVersion, resp.Sequence, req.Sequence)
		}
		return resp, err
	}
	seq := route.seq
	if err := s.checkNamed(req.Sequence, seq, route.known, route.ticks); err != nil {
		return nil, err
	}
	r, err := s.Settle.ReserveIn(ctx, req.Sequence, keyed(ctx, req.IdempotencyKey), uint64(req.Count), ms(req.TtlMs))
	if err != nil {
		return nil, err
	}
	s.Meter.Issued(r.Count)
	s.Meter.IssuedIn([]string{req.Sequence}, []uint64{r.Count})
	return &api.ReserveResponse{
		Handle: api.Handle{First: r.First, Count: r.Count, Seq: req.Sequence}.String(), Runs: sequenceRuns(seq, r.First, r.Count),
		TtlMs: uint32(r.TTL.Milliseconds()), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr,
		Fate: api.Fate(r.Fate), Sequence: req.Sequence,
	}, nil
}

// checkNamed refuses a call (IDs, a Reserve) of named sequence name,
// which this leader's state holds as seq (known: at all), before anything
// is committed: unknown or dropped (once the state answers for the
// cluster; before, Unavailable), or of another width than the caller
// reads (ticks).
func (s *Server) checkNamed(name string, seq fsm.Sequence, known, ticks bool) error {
	if !known || seq.Dropped {
		if !s.Settle.Current() {
			// A new leader not yet caught up: the sequence may be in an
			// entry it has not applied. The client retries.
			return fmt.Errorf("%w: this leader has not yet applied every entry of earlier terms, and cannot tell whether sequence %q exists", sequencer.ErrNotLeader, name)
		}
		return fmt.Errorf("%w: %q: create it with ordo sequence create", fsm.ErrNoSequence, name)
	}
	if wide := seq.Layout != nil && seq.Layout.Wide(); ticks != wide {
		return fmt.Errorf("sequence %q is %s: a call for its IDs must %sname %s in its metadata: %w",
			name, seq.Kind, map[bool]string{true: "", false: "not "}[wide], api.TicksKey, layout.ErrWrongWidth)
	}
	return nil
}

// Decide is the path of one Complete, Abandon or Extend (ttlMs) of the
// reservation handle names in sequence seq ("" the default), which gRPC
// and HTTP share. Its errors are statuses.
func (s *Server) Decide(ctx context.Context, do fsm.Do, seq, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	resp, err := s.decide(ctx, do, seq, handle, ttlMs)
	return resp, s.status(ctx, err)
}

func (s *Server) decide(ctx context.Context, do fsm.Do, seq, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	if seq != "" {
		if err := fsm.CheckSequenceName(seq); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	}
	h, err := api.ParseHandle(handle)
	if err != nil {
		return nil, err
	}
	if h.Seq != seq {
		return nil, fmt.Errorf("%w: handle %q is of %s, and the call names %s: pass the sequence Reserve was called with", api.ErrBadHandle, handle, seqName(h.Seq), seqName(seq))
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		if seq != "" {
			if err := s.keysRead(); err != nil {
				return nil, err
			}
		}
		return forwardDecision(s.forwardContext(ctx), api.NewSequencerClient(conn), do, seq, handle, ttlMs)
	}
	if _, known := s.State.Sequence(seq); seq != "" && !known {
		return nil, fmt.Errorf("%w: %w: %q", settle.ErrUnknown, fsm.ErrNoSequence, seq)
	}
	fate, w, err := s.Settle.DecideIn(ctx, seq, do, h.First, h.Count, ms(ttlMs))
	if err != nil {
		return nil, err
	}
	return &api.SettleResponse{Fate: api.Fate(fate), Watermark: s.watermarkID(seq, w), WatermarkTick: w}, nil
}

// seqName names a sequence in an error: "" is the default one.
func seqName(seq string) string {
	if seq == "" {
		return "the default sequence"
	}
	return fmt.Sprintf("sequence %q", seq)
}

func forwardDecision(ctx context.Context, c api.SequencerClient, do fsm.Do, seq, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	switch do {
	case fsm.DoComplete:
		return c.Complete(ctx, &api.HandleRequest{Handle: handle, Sequence: seq})
	case fsm.DoAbandon:
		return c.Abandon(ctx, &api.HandleRequest{Handle: handle, Sequence: seq})
	}
	return c.Extend(ctx, &api.ExtendRequest{Handle: handle, TtlMs: ttlMs, Sequence: seq})
}

// Watermark is the path of one read of sequence seq's W ("" the
// default's), which gRPC and HTTP share. Its errors are statuses.
func (s *Server) Watermark(ctx context.Context, seq string) (*api.WatermarkResponse, error) {
	resp, err := s.watermark(ctx, seq)
	return resp, s.status(ctx, err)
}

func (s *Server) watermark(ctx context.Context, seq string) (*api.WatermarkResponse, error) {
	if err := s.checkWatched(seq); err != nil {
		return nil, err
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		resp, err := api.NewSequencerClient(conn).Watermark(s.forwardContext(ctx), &api.WatermarkRequest{Sequence: seq})
		if err == nil && resp.Sequence != seq {
			return nil, fmt.Errorf("%w: the leader answered the W of %q for %q (an Ordo too old for named reservations)", settle.ErrClusterVersion, resp.Sequence, seq)
		}
		return resp, err
	}
	w, err := s.Settle.WatermarkOf(ctx, seq)
	if err != nil {
		return nil, err
	}
	return s.mark(seq, w), nil
}

// checkWatched refuses a read of a named sequence's W with a malformed
// name, or one a follower must not forward yet (an older leader would
// answer the default sequence's W).
func (s *Server) checkWatched(seq string) error {
	if seq == "" {
		return nil
	}
	if err := fsm.CheckSequenceName(seq); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if !s.Node.Leads() {
		return s.keysRead()
	}
	return nil
}

// mark is seq's W as the calls answer it.
func (s *Server) mark(seq string, w uint64) *api.WatermarkResponse {
	return &api.WatermarkResponse{Watermark: s.watermarkID(seq, w), WatermarkTick: w, LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr, Sequence: seq}
}

// watermarkID is W in ticks as an ID of a 64-bit layout: every ID of the
// sequence below it has a tick below W, since an ID grows with its tick
// within one group. 0 under a 128-bit layout, whose callers compare ticks.
// A dense sequence's W is a value, its own ID. seq "" is the default
// sequence, of the cluster's layout and group.
func (s *Server) watermarkID(seq string, w uint64) uint64 {
	l, group := s.cfg.Layout, s.cfg.Group
	if seq != "" {
		def, ok := s.State.Sequence(seq)
		switch {
		case !ok:
			return 0
		case def.Layout == nil:
			return w
		}
		l, group = *def.Layout, def.Group
	}
	if l.Wide() {
		return 0
	}
	return l.ID(w, group)
}

// WatchWatermark implements api.SequencerServer: W at once, then each
// time it rises, and every heartbeat while it does not. The first value
// and every heartbeat are read as Watermark reads (a commit or a round
// in this leader's term); a rise is sent from the entry this leader
// committed. A heartbeat that fails (leadership lost) ends the stream.
func (q *Sequencer) WatchWatermark(req *api.WatchRequest, stream grpc.ServerStreamingServer[api.WatermarkResponse]) error {
	ctx := stream.Context()
	end := func(err error) error { return q.srv.status(ctx, err) }
	if err := q.srv.checkWatched(req.Sequence); err != nil {
		return end(err)
	}
	conn, fwd, err := q.srv.forward(ctx)
	if err != nil {
		return end(err)
	}
	if fwd {
		up, err := api.NewSequencerClient(conn).WatchWatermark(q.srv.forwardContext(ctx), req)
		if err != nil {
			return end(err)
		}
		// A watch ends when its client stops it: that is no failure.
		return end(answered(ctx, recv.Each(up.Recv, func(m *api.WatermarkResponse) error {
			if m.Sequence != req.Sequence {
				return fmt.Errorf("%w: the leader sent the W of %q for %q (an Ordo too old for named reservations)", settle.ErrClusterVersion, m.Sequence, req.Sequence)
			}
			return stream.Send(m)
		})))
	}
	beat := defaultHeartbeat
	if req.HeartbeatMs != 0 {
		beat = min(max(ms(req.HeartbeatMs), minHeartbeat), maxHeartbeat)
	}
	return end(answered(ctx, q.watch(ctx, req.Sequence, beat, stream.Send)))
}

// watch sends seq's W with send until ctx ends, the node closes, or a
// read fails.
func (q *Sequencer) watch(ctx context.Context, seq string, beat time.Duration, send func(*api.WatermarkResponse) error) error {
	sent := uint64(0)
	timer := time.NewTimer(0) // the first value at once
	defer timer.Stop()
	for {
		_, changed := q.srv.Settle.WatchOf(seq)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.srv.Stop:
			return sequencer.ErrNotLeader
		case <-timer.C:
			w, err := q.srv.Settle.WatermarkOf(ctx, seq)
			if err != nil {
				return err
			}
			sent = max(sent, w)
			timer.Reset(beat)
		case <-changed:
			w, _ := q.srv.Settle.WatchOf(seq)
			if w <= sent {
				continue
			}
			sent = w
		}
		if err := send(q.srv.mark(seq, sent)); err != nil {
			return err
		}
	}
}

func ms(v uint32) time.Duration { return time.Duration(v) * time.Millisecond }
