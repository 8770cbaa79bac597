package server

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// TestSequenceStatusAndDistinctGroups, on a three-node cluster, every
// call through a follower: a create that asks for a distinct group is
// refused (FailedPrecondition, naming the holder and the fix) when a live
// sequence of the layout has the group, or the cluster's default
// sequence does, and the same create without it shares the group; the
// status with --sequences reports the leader's counts of each named
// sequence, busiest first, bounded, and so do the leader's metrics.
func TestSequenceStatusAndDistinctGroups(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads sequences", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	follower := grpctest.Dial(t, followerOf(nodes, leader).GRPCAddr())
	admin, seq := api.NewAdminClient(follower), api.NewSequencerClient(follower)
	clusterLayout, clusterGroup := leader.cfg.Layout.String(), leader.cfg.Group

	for _, c := range []struct {
		req    *api.CreateSequenceRequest
		refuse string // what the FailedPrecondition names; "" for none
	}{
		{&api.CreateSequenceRequest{Name: "orders", Kind: "dense"}, ""},
		{&api.CreateSequenceRequest{Name: "flakes", Kind: "twitter", Group: 9, DistinctGroup: true}, ""},
		{&api.CreateSequenceRequest{Name: "flakes2", Kind: "twitter", Group: 9, DistinctGroup: true}, `group 9 of layout twitter is sequence "flakes"'s`},
		{&api.CreateSequenceRequest{Name: "flakes2", Kind: "twitter", Group: 9}, ""},
		{&api.CreateSequenceRequest{Name: "mine", Kind: clusterLayout, Group: clusterGroup, DistinctGroup: true}, "the cluster's default sequence's"},
		{&api.CreateSequenceRequest{Name: "mine", Kind: clusterLayout, Group: clusterGroup + 1, DistinctGroup: true}, ""},
	} {
		_, err := admin.CreateSequence(ctx, c.req)
		if c.refuse == "" && err != nil {
			t.Fatalf("create %v: %v", c.req, err)
		}
		if c.refuse != "" && (status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), c.refuse) || !strings.Contains(err.Error(), "choose another group")) {
			t.Fatalf("create %v: %v, want FailedPrecondition naming %s and the fix", c.req, err, c.refuse)
		}
	}
	if _, err := admin.CreateSequence(ctx, &api.CreateSequenceRequest{Name: "d", Kind: "dense", DistinctGroup: true}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a dense sequence with a distinct group: %v, want InvalidArgument", err)
	}

	for _, call := range []struct {
		seq   string
		count uint32
	}{{"flakes", 5}, {"orders", 10}, {"orders", 20}} {
		if _, err := seq.Next(ctx, &api.NextRequest{Sequence: call.seq, Count: call.count}); err != nil {
			t.Fatalf("next of %s: %v", call.seq, err)
		}
	}
	var resp *api.StatusResponse
	eventually.True(t, seqTestWait, "a status with the leader's rates", func() bool {
		var err error
		resp, err = admin.Status(ctx, &api.StatusRequest{Sequences: true, SequenceLimit: 2})
		return err == nil && resp.RatesFrom == leader.ID()
	})
	if len(resp.Sequences) != 2 || resp.MoreSequences != 2 || resp.RateWindowMs != 10_000 {
		t.Fatalf("status: %v; want 2 sequences and 2 more", resp)
	}
	orders, flakes := resp.Sequences[0], resp.Sequences[1]
	if orders.Name != "orders" || orders.Kind != "dense" || orders.Next != 31 || orders.Issued != 30 || orders.Rate <= 0 {
		t.Errorf("first: %v, want orders, 30 IDs handed out, the next 31", orders)
	}
	if flakes.Name != "flakes" || flakes.Kind != "twitter" || flakes.Group != 9 || flakes.Issued != 5 || flakes.Rate <= 0 || flakes.Rate > orders.Rate {
		t.Errorf("second: %v, want flakes, 5 IDs handed out, slower than orders", flakes)
	}
	rec := httptest.NewRecorder()
	leader.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`ordo_sequence_ids_issued_total{sequence="orders"} 30`, `ordo_sequence_ids_issued_total{sequence="flakes"} 5`, "ordo_named_sequences_ids_issued_total 35"} {
		if !strings.Contains(string(text), want+"\n") {
			t.Errorf("the leader's metrics lack %q", want)
		}
	}
}
