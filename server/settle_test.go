package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// reserveVia retries Unavailable (the cluster version is raised once every
// voter answers) until a deadline.
func reserveVia(t *testing.T, c api.SequencerClient, count, ttlMs uint32) *api.ReserveResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		resp, err := c.Reserve(ctx, &api.ReserveRequest{Count: count, TtlMs: ttlMs})
		if err == nil {
			return resp
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("reserve: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func watermarkVia(t *testing.T, c api.SequencerClient) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Watermark(ctx, &api.WatermarkRequest{})
	if err != nil {
		t.Fatalf("watermark: %v", err)
	}
	return resp.WatermarkTick
}

// A reservation holds W below its first tick until it completes, through
// a follower (forwarded) and across a leader change; its fate is the same
// from every node, and a Complete after it expired is refused for good.
func TestSettledOrderThroughFollowersAndFailover(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	follower := api.NewSequencerClient(grpctest.Dial(t, followerOf(nodes, leader).GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	held := reserveVia(t, follower, 3, 60_000)
	short := reserveVia(t, follower, 2, 200)
	h, err := api.ParseHandle(held.Handle)
	if err != nil {
		t.Fatal(err)
	}
	mustNextVia(t, grpctest.Dial(t, leader.GRPCAddr()), 5) // untracked, after both
	if w := watermarkVia(t, follower); w > h.First {
		t.Fatalf("W %d passed the open reservation at %d", w, h.First)
	}
	// The short one expires; completing it is refused from every node.
	eventually.True(t, seqTestWait, "the short reservation to expire", func() bool {
		return leader.settler.Stats().Expired == 1
	})
	if w := watermarkVia(t, follower); w > h.First {
		t.Fatalf("W %d passed the open reservation at %d after another expired", w, h.First)
	}
	mustTransfer(t, nodes, leader)
	for _, n := range nodes {
		c := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr()))
		_, err := c.Complete(ctx, &api.HandleRequest{Handle: short.Handle})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("completing the expired reservation via %s after a leader change: %v, want FailedPrecondition", n.ID(), err)
		}
	}
	resp, err := follower.Complete(ctx, &api.HandleRequest{Handle: held.Handle})
	if err != nil || resp.Fate != api.Fate_FATE_COMPLETED {
		t.Fatalf("complete after the leader change: %v, %v", resp, err)
	}
	again, err := follower.Complete(ctx, &api.HandleRequest{Handle: held.Handle})
	if err != nil || again.Fate != api.Fate_FATE_COMPLETED {
		t.Fatalf("completing again (a retry): %v, %v", again, err)
	}
	if w := watermarkVia(t, follower); w < h.First+h.Count {
		t.Fatalf("W %d has not passed the completed reservation %d+%d with nothing else open", w, h.First, h.Count)
	}
	for _, n := range nodes {
		if v := n.fsm.ClusterVersion(); v != fsm.Reads {
			t.Errorf("%s has cluster version %d, want %d", n.ID(), v, fsm.Reads)
		}
	}
}

// mustTransfer hands leadership from leader to another node and waits
// until one serves. Under load a transfer may time out before the target
// wins (Raft gives it an election timeout): it is asked again while
// leader still leads.
func mustTransfer(t *testing.T, nodes []*Node, leader *Node) *Node {
	t.Helper()
	for deadline := time.Now().Add(seqTestWait); ; {
		err := leader.TransferLeadership("")
		if err == nil || !leader.IsLeader() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("transfer: %v", err)
		}
		t.Logf("transfer: %v; asking again", err)
	}
	var next *Node
	eventually.True(t, seqTestWait, "another node to lead and serve", func() bool {
		for _, n := range nodes {
			if n != leader && n.IsLeader() && n.seq.Serving() {
				next = n
				return true
			}
		}
		return false
	})
	return next
}
