package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// settleRecorder records the settled-order calls of a test per sequence,
// as history.SettleOps on one clock, so history.CheckSettled can judge
// each sequence's W on its own.
type settleRecorder struct {
	origin time.Time
	mu     sync.Mutex
	ops    map[string][]history.SettleOp
}

func (r *settleRecorder) add(seq string, op history.SettleOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops[seq] = append(r.ops[seq], op)
}

// namedCalls makes a test's calls of named sequences through one node,
// retrying Unavailable (a leader change, the cluster version) as a
// client does, and records each.
type namedCalls struct {
	t   *testing.T
	rec *settleRecorder
	c   api.SequencerClient
}

func (n namedCalls) via(node *Node) namedCalls {
	n.c = api.NewSequencerClient(grpctest.Dial(n.t, node.GRPCAddr()))
	return n
}

// retry calls fn until it answers other than Unavailable, and records
// the call's span with what done makes of its answer.
func (n namedCalls) retry(seq string, call history.SettleCall, fn func(ctx context.Context) error, done func(op *history.SettleOp)) error {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	op := history.SettleOp{Call: call, Start: time.Since(n.rec.origin)}
	var err error
	for {
		if err = fn(ctx); status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	op.End = time.Since(n.rec.origin)
	switch {
	case err == nil:
		op.Outcome = history.OK
		done(&op)
	case status.Code(err) == codes.FailedPrecondition:
		op.Outcome = history.Failed
	default:
		op.Outcome = history.Unknown
	}
	n.rec.add(seq, op)
	return err
}

func (n namedCalls) reserve(seq string, count, ttlMs uint32) api.Handle {
	n.t.Helper()
	var h api.Handle
	err := n.retry(seq, history.CallReserve, func(ctx context.Context) error {
		resp, err := n.c.Reserve(ctx, &api.ReserveRequest{Count: count, TtlMs: ttlMs, Sequence: seq})
		if err == nil {
			if resp.Sequence != seq {
				n.t.Fatalf("a reservation of %s answered as %q's", seq, resp.Sequence)
			}
			h, err = api.ParseHandle(resp.Handle)
		}
		return err
	}, func(op *history.SettleOp) { op.First, op.Count = h.First, h.Count })
	if err != nil || h.Seq != seq {
		n.t.Fatalf("reserve %d of %s: %+v, %v", count, seq, h, err)
	}
	return h
}

func (n namedCalls) decide(call history.SettleCall, h api.Handle) (*api.SettleResponse, error) {
	n.t.Helper()
	var resp *api.SettleResponse
	err := n.retry(h.Seq, call, func(ctx context.Context) error {
		var err error
		req := &api.HandleRequest{Handle: h.String(), Sequence: h.Seq}
		if call == history.CallComplete {
			resp, err = n.c.Complete(ctx, req)
		} else {
			resp, err = n.c.Abandon(ctx, req)
		}
		return err
	}, func(op *history.SettleOp) { op.First, op.Count = h.First, h.Count })
	return resp, err
}

func (n namedCalls) watermark(seq string) uint64 {
	n.t.Helper()
	var w uint64
	err := n.retry(seq, history.CallWatermark, func(ctx context.Context) error {
		resp, err := n.c.Watermark(ctx, &api.WatermarkRequest{Sequence: seq})
		if err == nil {
			if resp.Sequence != seq {
				n.t.Fatalf("the W of %s answered as %q's", seq, resp.Sequence)
			}
			w = resp.WatermarkTick
		}
		return err
	}, func(op *history.SettleOp) { op.Mark = w })
	if err != nil {
		n.t.Fatalf("watermark of %s: %v", seq, err)
	}
	return w
}

// Reservations of two named sequences, a dense one and a layout one,
// through a follower and the leader: some completed, one abandoned, one
// left to expire, a leader change in between. Each sequence's W stops at
// its own oldest open reservation, never at the other's, moves to its
// mark once nothing of it is open, and never goes down; a fate reads the
// same from every node after the leader change; and the history of each
// sequence's calls holds the settled order's properties
// (history.CheckSettled).
func TestNamedReservationsAcrossFailover(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads sequences", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr()))
	for _, req := range []*api.CreateSequenceRequest{{Name: "orders", Kind: "dense"}, {Name: "ev", Kind: "default", Group: 2}} {
		if _, err := admin.CreateSequence(ctx, req); err != nil {
			t.Fatalf("create %s: %v", req.Name, err)
		}
	}
	for _, n := range nodes {
		eventually.True(t, seqTestWait, n.ID()+" to know both sequences", func() bool {
			_, a := n.fsm.Sequence("orders")
			_, b := n.fsm.Sequence("ev")
			return a && b
		})
	}
	rec := &settleRecorder{origin: time.Now(), ops: map[string][]history.SettleOp{}}
	base := namedCalls{t: t, rec: rec}
	viaFollower, viaLeader := base.via(followerOf(nodes, leader)), base.via(leader)

	a1 := viaFollower.reserve("orders", 2, 60_000)
	a2 := viaLeader.reserve("orders", 3, 60_000)
	b1 := viaFollower.reserve("ev", 2, 60_000)
	b2 := viaLeader.reserve("ev", 1, 300) // left to expire
	if a1.First != 1 || a2.First != 3 {
		t.Fatalf("dense reservations from %d and %d, want 1 and 3", a1.First, a2.First)
	}
	if b2.First < b1.First+b1.Count {
		t.Fatalf("ev's reservations %+v, %+v out of order", b1, b2)
	}
	if w := viaFollower.watermark("orders"); w != a1.First {
		t.Fatalf("W of orders %d, want %d (a1 open)", w, a1.First)
	}
	if w := viaFollower.watermark("ev"); w != b1.First {
		t.Fatalf("W of ev %d, want %d (b1 open)", w, b1.First)
	}
	if resp, err := viaFollower.decide(history.CallComplete, a1); err != nil || resp.Fate != api.Fate_FATE_COMPLETED || resp.WatermarkTick != a2.First {
		t.Fatalf("complete a1: %+v, %v; want W of orders at a2's %d", resp, err, a2.First)
	}
	eventually.True(t, seqTestWait, "ev's short reservation to expire", func() bool {
		tk, _ := leader.fsm.TrackedSequence("ev")
		_, open := tk.Open[b2.First]
		return !open
	})
	if w := viaLeader.watermark("ev"); w != b1.First {
		t.Fatalf("W of ev %d after b2 expired, want %d (b1 still open)", w, b1.First)
	}

	next := mustTransfer(t, nodes, leader)
	viaNext := base.via(next)
	for _, n := range nodes {
		c := base.via(n)
		if _, err := c.decide(history.CallComplete, b2); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("complete of expired b2 via %s after the leader change: %v, want FailedPrecondition", n.ID(), err)
		}
	}
	if resp, err := viaNext.decide(history.CallAbandon, a2); err != nil || resp.Fate != api.Fate_FATE_ABANDONED {
		t.Fatalf("abandon a2: %+v, %v", resp, err)
	}
	if w := viaNext.watermark("orders"); w != a2.First+a2.Count {
		t.Fatalf("W of orders %d with nothing open, want its mark %d", w, a2.First+a2.Count)
	}
	// A reservation of orders, open, holds back orders only.
	a3 := viaNext.reserve("orders", 1, 60_000)
	if resp, err := viaFollower.decide(history.CallComplete, b1); err != nil || resp.WatermarkTick <= b2.First {
		t.Fatalf("complete b1: %+v, %v; want W of ev past b2 %d", resp, err, b2.First)
	}
	if w := viaFollower.watermark("orders"); w != a3.First {
		t.Fatalf("W of orders %d, want a3's %d", w, a3.First)
	}
	if _, err := viaLeader.decide(history.CallComplete, a3); err != nil {
		t.Fatal(err)
	}
	// A handle of one sequence named for the other is refused.
	if _, err := viaNext.c.Complete(ctx, &api.HandleRequest{Handle: a3.String(), Sequence: "ev"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("orders' handle for ev: %v, want InvalidArgument", err)
	}
	for _, n := range nodes {
		for seq, want := range map[string]int{"orders": 0, "ev": 0} {
			eventually.True(t, seqTestWait, n.ID()+" to apply "+seq+"'s decisions", func() bool {
				tk, _ := n.fsm.TrackedSequence(seq)
				return len(tk.Open) == want
			})
		}
	}
	for seq, ops := range rec.ops {
		rep := history.CheckSettled(ops)
		if !rep.OK() {
			t.Errorf("sequence %s: %s", seq, rep)
		}
		if rep.Reserves.OK == 0 || rep.Reads.OK == 0 {
			t.Errorf("sequence %s: a history without reads or reservations proves nothing: %s", seq, rep)
		}
	}
	if st := next.settler.Stats(); st.Open != 0 {
		t.Fatalf("the new leader counts %d open reservations, want none", st.Open)
	}
}
