package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// mustSingle opens and bootstraps a one-node cluster that has handed out an
// ID, so it has a cluster id.
func mustSingle(t *testing.T, id string) *Node {
	t.Helper()
	n := mustOpen(t, testConfig(t, id, t.TempDir()))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, n.GRPCAddr(), 1)
	if n.clusterID() == "" {
		t.Fatal("no cluster id after the first ID")
	}
	return n
}

// TestCallsNameTheirCluster: every answer names the node's cluster in its
// header; a call meant for another cluster, from a client or forwarded by
// a node of that cluster, is refused as Unavailable (the caller moves on)
// with no leader hint, which would name this cluster's leader.
func TestCallsNameTheirCluster(t *testing.T) {
	a, b := mustSingle(t, "a1"), mustSingle(t, "b1")
	seq := api.NewSequencerClient(mustConn(t, b.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var header metadata.MD
	if _, err := seq.Next(metadata.AppendToOutgoingContext(ctx, api.ClusterIDKey, b.clusterID()), &api.NextRequest{Count: 1}, grpc.Header(&header)); err != nil {
		t.Fatalf("a call meant for b's cluster: %v", err)
	}
	if got := header.Get(api.ClusterIDKey); len(got) != 1 || got[0] != b.clusterID() {
		t.Fatalf("header names cluster %v, want %s", got, b.clusterID())
	}
	for name, callCtx := range map[string]context.Context{
		"a client of a's cluster":        metadata.AppendToOutgoingContext(ctx, api.ClusterIDKey, a.clusterID()),
		"a call forwarded by a's leader": a.forwardCtx(ctx),
	} {
		var trailer metadata.MD
		_, err := seq.Next(callCtx, &api.NextRequest{Count: 1}, grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "another cluster") {
			t.Errorf("%s calling b: %v, want Unavailable naming another cluster", name, err)
		}
		if hint := trailer.Get(api.LeaderAddrKey); len(hint) > 0 {
			t.Errorf("%s calling b: refused with leader hint %v", name, hint)
		}
	}
}
