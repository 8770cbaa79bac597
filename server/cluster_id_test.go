package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/leadership/leadershiptest"
	"github.com/seed-e8569b35/ordo/startup/startuptest"
)

// mustSingle opens and bootstraps a one-node cluster that has handed out an
// ID, so it has a cluster id.
func mustSingle(t *testing.T, id string) *Node {
	t.Helper()
	n := mustBootstrap(t, testConfig(t, id, t.TempDir()))
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
	seq := api.NewSequencerClient(grpctest.Dial(t, b.GRPCAddr()))
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

// TestOwnCallsNameTheirCluster: the calls a node makes itself to a
// member's stored address name its cluster, so that a node of another
// cluster now listening there refuses them; and where the answer must come
// from this cluster, such a refusal, or an answer that does not name this
// cluster (an older node that does not check), proves nothing. Here a's
// cluster has members a2 and a3 (non-voters, so a alone is a majority)
// whose stored gRPC addresses are b1's, of another cluster, an older
// node's that answers anything, and a4 whose address is a node's of no
// cluster yet.
func TestOwnCallsNameTheirCluster(t *testing.T) {
	a, b := mustSingle(t, "a1"), mustSingle(t, "b1")
	// Clusters often name their nodes alike: this one answers as a3.
	older := startuptest.Serve(t, &startuptest.Admin{
		Info:    &api.NodeInfo{Id: "a3", Role: "leader", ClusterId: b.clusterID()},
		Members: []string{"a3"}, Leader: "a3",
	})
	// A node of no cluster yet (one starting, say) names none.
	fresh := startuptest.Serve(t, &startuptest.Admin{Info: &api.NodeInfo{Id: "c1", Role: "starting"}})
	for i, m := range []struct{ id, addr string }{{"a2", b.GRPCAddr()}, {"a3", older}, {"a4", fresh}} {
		id, addr := m.id, m.addr
		// Nothing listens at the Raft addresses: a sends them nothing.
		raftAddr := raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", i+1))
		if err := a.raft.AddNonvoter(raft.ServerID(id), raftAddr, 0, 5*time.Second).Error(); err != nil {
			t.Fatalf("add %s: %v", id, err)
		}
		if _, err := a.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: id, GRPCAddr: addr}); err != nil {
			t.Fatalf("record %s's address: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("peer calls", func(t *testing.T) {
		conn, err := a.peers.Get(b.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.NewAdminClient(conn).NodeStatus(ctx, &api.NodeStatusRequest{})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "another cluster") {
			t.Errorf("a's NodeStatus call to b: %v, want Unavailable naming another cluster", err)
		}
		// A stream names it when it opens: b refuses a Term stream even
		// if its messages were meant for b.
		_, err = leadershiptest.AskTerm(ctx, conn, &api.TermRequest{NodeId: b.ID(), ClusterId: b.clusterID(), Round: 1})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "another cluster") {
			t.Errorf("a's Term stream to b: %v, want Unavailable naming another cluster", err)
		}
	})

	t.Run("status", func(t *testing.T) {
		resp, err := api.NewAdminClient(grpctest.Dial(t, a.GRPCAddr())).Status(ctx, &api.StatusRequest{})
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		seen := map[string]bool{}
		for _, info := range resp.Nodes {
			seen[info.Id] = true
			switch info.Id {
			case a.ID():
				if info.ClusterId != a.clusterID() || info.Role != "leader" {
					t.Errorf("a1 reported as %s of cluster %q, want the leader of %s", info.Role, info.ClusterId, a.clusterID())
				}
			case "a2", "a3", "a4":
				if info.ClusterId == b.clusterID() || info.Role != "unreachable" || info.Error == "" {
					t.Errorf("%s (whose address is another node's) reported as %s of cluster %q (error %q), want unreachable with why",
						info.Id, info.Role, info.ClusterId, info.Error)
				}
			}
		}
		if len(seen) != 4 || !seen["a2"] || !seen["a3"] || !seen["a4"] {
			t.Errorf("status lists %v, want a1 to a4", seen)
		}
	})

	t.Run("removal check", func(t *testing.T) {
		for range 3 {
			if a.leaderConfirmsRemoved() {
				t.Fatal("a takes another cluster's leader, which lacks it, as proof that it was removed")
			}
		}
		if err := a.refusal(); err != nil {
			t.Fatalf("a refuses: %v", err)
		}
	})
}
