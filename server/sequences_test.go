package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// A dense sequence hands out 1, 2, 3, ... with no gap through a follower
// (forwarded) and across a leader change; a layout sequence's IDs carry
// its own group; unknown and dropped sequences are NotFound; defining one
// is refused from a caller without admin rights.
func TestNamedSequencesDenseAcrossFailover(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads sequences", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	follower := grpctest.Dial(t, followerOf(nodes, leader).GRPCAddr())
	admin, seq := api.NewAdminClient(follower), api.NewSequencerClient(follower)
	if _, err := admin.CreateSequence(ctx, &api.CreateSequenceRequest{Name: "invoices", Kind: "dense"}); err != nil {
		t.Fatalf("create dense: %v", err)
	}
	if _, err := admin.CreateSequence(ctx, &api.CreateSequenceRequest{Name: "tenant-9", Kind: "default", Group: 9}); err != nil {
		t.Fatalf("create layout: %v", err)
	}
	if _, err := admin.CreateSequence(ctx, &api.CreateSequenceRequest{Name: "invoices", Kind: "dense"}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("create again: %v, want AlreadyExists", err)
	}
	want := uint64(1)
	take := func(c api.SequencerClient, n uint32) {
		t.Helper()
		for {
			resp, err := c.Next(ctx, &api.NextRequest{Count: n, Sequence: "invoices"})
			if status.Code(err) == codes.Unavailable {
				time.Sleep(20 * time.Millisecond) // a leader change: retried, as a client does
				continue
			}
			if err != nil {
				t.Fatalf("next of invoices: %v", err)
			}
			for _, id := range idsOf(t, resp.Runs) {
				if id != want {
					t.Fatalf("dense ID %d, want %d", id, want)
				}
				want++
			}
			return
		}
	}
	take(seq, 3)
	take(seq, 1)
	mustTransfer(t, nodes, leader)
	for _, n := range nodes {
		take(api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr())), 2)
	}
	resp, err := seq.Next(ctx, &api.NextRequest{Count: 2, Sequence: "tenant-9"})
	if err != nil {
		t.Fatalf("next of tenant-9: %v", err)
	}
	l := leader.cfg.Layout
	for _, id := range idsOf(t, resp.Runs) {
		if g := l.Decode(id).Group; g != 9 {
			t.Fatalf("ID %d of tenant-9 has group %d, want 9", id, g)
		}
	}
	// A 128-bit sequence on a 64-bit cluster, through a follower: the call
	// names api.TicksKey, as its width asks, and the forward keeps it.
	if _, err := admin.CreateSequence(ctx, &api.CreateSequenceRequest{Name: "uuids", Kind: "uuidv7", Group: 2}); err != nil {
		t.Fatalf("create uuidv7: %v", err)
	}
	eventually.True(t, seqTestWait, "the follower to know the uuidv7 sequence", func() bool {
		_, err := seq.Next(api.WithTicks(ctx, true), &api.NextRequest{Count: 2, Sequence: "uuids"})
		return err == nil
	})
	if _, err := seq.Next(ctx, &api.NextRequest{Count: 2, Sequence: "uuids"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a uuidv7 sequence's IDs without asking for ticks: %v, want FailedPrecondition", err)
	}
	if _, err := admin.DropSequence(ctx, &api.SequenceRequest{Name: "invoices"}); err != nil {
		t.Fatalf("drop: %v", err)
	}
	for _, name := range []string{"invoices", "nope"} {
		if _, err := seq.Next(ctx, &api.NextRequest{Count: 1, Sequence: name}); status.Code(err) != codes.NotFound {
			t.Fatalf("next of %s: %v, want NotFound", name, err)
		}
	}
	if _, err := seq.Next(ctx, &api.NextRequest{Count: 1, Sequence: "Bad Name"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("next of a malformed name: %v, want InvalidArgument", err)
	}
	if _, err := admin.CreateSequence(ctx, &api.CreateSequenceRequest{Name: "invoices", Kind: "dense"}); err != nil {
		t.Fatalf("create the dropped name again: %v", err)
	}
	take(seq, 1) // above everything the dropped one handed out
}
