package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// A keyed Reserve retried through every node after a leader change gets
// the reservation the first call opened (handle, IDs, TTL), still open
// and opened once; after Complete a retry gets it again, completed (a
// writer back from a crash learns what became of it). The key with
// another count, or for Next, is FailedPrecondition.
func TestKeyedReserveAcrossLeaderChange(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads keys", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, api.CallerKey, "writer-1")
	reserve := func(n *Node, req *api.ReserveRequest) (*api.ReserveResponse, error) {
		t.Helper()
		for {
			resp, err := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr())).Reserve(ctx, req)
			if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return resp, err
		}
	}
	req := &api.ReserveRequest{Count: 3, TtlMs: 60_000, IdempotencyKey: "batch-9"}
	first, err := reserve(followerOf(nodes, leader), req)
	if err != nil || first.Fate != api.Fate_FATE_OPEN {
		t.Fatalf("first keyed reserve: %v, %v", first, err)
	}
	firstIDs := idsOf(t, first.Runs)
	leader = mustTransfer(t, nodes, leader)
	for _, n := range nodes {
		again, err := reserve(n, req)
		if err != nil || again.Handle != first.Handle || !slices.Equal(idsOf(t, again.Runs), firstIDs) || again.TtlMs != 60_000 || again.Fate != api.Fate_FATE_OPEN {
			t.Fatalf("retry via %s after a leader change: %v, %v; want the first reservation %v, open", n.ID(), again, err, first)
		}
	}
	if open := len(leader.fsm.Tracked().Open); open != 1 {
		t.Fatalf("%d reservations open after the retries, want 1", open)
	}
	if _, err := api.NewSequencerClient(grpctest.Dial(t, leader.GRPCAddr())).Complete(ctx, &api.HandleRequest{Handle: first.Handle}); err != nil {
		t.Fatal(err)
	}
	again, err := reserve(followerOf(nodes, leader), &api.ReserveRequest{Count: 3, IdempotencyKey: "batch-9"}) // no TTL named: the first's
	if err != nil || again.Handle != first.Handle || again.TtlMs != 60_000 || again.Fate != api.Fate_FATE_COMPLETED {
		t.Fatalf("retry after Complete: %v, %v; want the first reservation, completed", again, err)
	}
	if _, err := reserve(leader, &api.ReserveRequest{Count: 4, IdempotencyKey: "batch-9"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the key with another count: %v, want FailedPrecondition", err)
	}
	_, err = api.NewSequencerClient(grpctest.Dial(t, leader.GRPCAddr())).Next(ctx, &api.NextRequest{Count: 3, IdempotencyKey: "batch-9"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the key for Next: %v, want FailedPrecondition", err)
	}
}

// A keyed Reserve retried after the whole cluster restarted (one node,
// closed and opened again on its data dir) gets the first reservation.
func TestKeyedReserveAcrossRestart(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	n := mustBootstrap(t, cfg)
	req := &api.ReserveRequest{Count: 2, TtlMs: 60_000, IdempotencyKey: "batch-9"}
	reserve := func(n *Node) *api.ReserveResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			resp, err := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr())).Reserve(ctx, req)
			if err == nil {
				return resp
			}
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				t.Fatalf("keyed reserve: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := reserve(n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = mustOpen(t, cfg)
	if err := n.BootstrapSingle(); err != nil { // ignored: state exists
		t.Fatal(err)
	}
	if again := reserve(n); again.Handle != first.Handle || !slices.Equal(idsOf(t, again.Runs), idsOf(t, first.Runs)) || again.Fate != api.Fate_FATE_OPEN {
		t.Fatalf("retry after a restart: %v, want %v, open", again, first)
	}
}
