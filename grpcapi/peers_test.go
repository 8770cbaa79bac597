package grpcapi

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
)

// TestForwardContext: a forwarded call is marked (one hop), names the
// cluster, asks for ticks only when told, and carries the caller's token.
func TestForwardContext(t *testing.T) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationKey, "Bearer tok"))
	if Forwarded(in) {
		t.Fatal("a call from a client counts as forwarded")
	}
	md, _ := metadata.FromOutgoingContext(ForwardContext(in, "c1", false))
	if len(md.Get(ForwardedKey)) != 1 || len(md.Get(api.TicksKey)) != 0 ||
		md.Get(api.ClusterIDKey)[0] != "c1" || md.Get(AuthorizationKey)[0] != "Bearer tok" {
		t.Fatalf("forwarded metadata %v", md)
	}
	if !Forwarded(metadata.NewIncomingContext(context.Background(), md)) {
		t.Fatal("a forwarded call does not count as forwarded at the leader")
	}
	md, _ = metadata.FromOutgoingContext(ForwardContext(context.Background(), "", true))
	if len(md.Get(api.TicksKey)) != 1 || len(md.Get(api.ClusterIDKey)) != 0 {
		t.Fatalf("forwarded metadata %v, want ticks and no cluster", md)
	}
}

// TestAnsweredForCluster: an answer counts only if it names this cluster,
// unless this node has no cluster id yet.
func TestAnsweredForCluster(t *testing.T) {
	for _, c := range []struct {
		header metadata.MD
		own    string
		want   bool
	}{
		{metadata.Pairs(api.ClusterIDKey, "c1"), "c1", true},
		{metadata.Pairs(api.ClusterIDKey, "c2"), "c1", false},
		{nil, "c1", false},
		{nil, "", true},
	} {
		if got := AnsweredForCluster(c.header, c.own); got != c.want {
			t.Errorf("AnsweredForCluster(%v, %q) = %v, want %v", c.header, c.own, got, c.want)
		}
	}
}
