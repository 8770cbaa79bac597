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

// A keyed call retried (through another node, after a leader change) gets
// exactly the IDs of its first answer, for the default sequence and a
// dense one; the same key from another caller is another call; the same
// key with another count is FailedPrecondition.
func TestKeyedRetriesGetTheFirstAnswer(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads keys", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	as := func(caller string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, api.CallerKey, caller)
	}
	if _, err := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr())).CreateSequence(ctx, &api.CreateSequenceRequest{Name: "ledger", Kind: "dense"}); err != nil {
		t.Fatal(err)
	}
	call := func(n *Node, ctx context.Context, req *api.NextRequest) ([]uint64, error) {
		t.Helper()
		for {
			resp, err := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr())).Next(ctx, req)
			if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if err != nil {
				return nil, err
			}
			return idsOf(t, resp.Runs), nil
		}
	}
	for _, seq := range []string{"", "ledger"} {
		req := &api.NextRequest{Count: 3, Sequence: seq, IdempotencyKey: "order-17" + seq}
		first, err := call(followerOf(nodes, leader), as("writer-1"), req)
		if err != nil {
			t.Fatalf("sequence %q: first call: %v", seq, err)
		}
		plain, err := call(leader, ctx, &api.NextRequest{Count: 1, Sequence: seq})
		if err != nil {
			t.Fatal(err)
		}
		leader = mustTransfer(t, nodes, leader)
		for _, n := range nodes {
			again, err := call(n, as("writer-1"), req)
			if err != nil || !slices.Equal(again, first) {
				t.Fatalf("sequence %q: retry via %s after a leader change: %v, %v; want the first answer %v", seq, n.ID(), again, err, first)
			}
		}
		other, err := call(leader, as("writer-2"), req)
		if err != nil || other[0] <= plain[0] {
			t.Fatalf("sequence %q: the same key from another caller: %v, %v; want new IDs above %v", seq, other, err, plain)
		}
		if _, err := call(leader, as("writer-1"), &api.NextRequest{Count: 4, Sequence: seq, IdempotencyKey: req.IdempotencyKey}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("sequence %q: the key with another count: %v, want FailedPrecondition", seq, err)
		}
	}
}
