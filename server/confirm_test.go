package server

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
)

// fakePeer answers Term with whatever term it is told, as the node it was
// asked for, or, if it is a stranger, as another node.
type fakePeer struct {
	api.UnimplementedPeerServer
	term     func() uint64
	stranger bool
}

func (p fakePeer) Term(_ context.Context, req *api.TermRequest) (*api.TermResponse, error) {
	id := req.NodeId
	if p.stranger {
		id = "someone-else"
	}
	return &api.TermResponse{Term: p.term(), NodeId: id}, nil
}

func mustFakePeer(t *testing.T, term func() uint64) string {
	t.Helper()
	return mustPeerServer(t, fakePeer{term: term})
}

func mustPeerServer(t *testing.T, p fakePeer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterPeerServer(s, p)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestConfirmLeadershipCountsAMajority points the leader at fake peers
// that answer chosen terms: a majority (the leader and one peer) in the
// leader's term confirms; a majority elsewhere does not.
func TestConfirmLeadershipCountsAMajority(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	term := leader.raft.CurrentTerm()
	var followers []string
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n.ID())
		}
	}
	same := func() uint64 { return term }
	newer := func() uint64 { return term + 1 }
	older := func() uint64 { return term - 1 }
	dead := "127.0.0.1:1" // nothing listens there
	tests := []struct {
		name   string
		peers  [2]string
		wantOK bool
	}{
		{"both in term", [2]string{mustFakePeer(t, same), mustFakePeer(t, same)}, true},
		{"one in term, one newer", [2]string{mustFakePeer(t, same), mustFakePeer(t, newer)}, true},
		{"one in term, one unreachable", [2]string{mustFakePeer(t, same), dead}, true},
		{"both newer: a newer leader may exist", [2]string{mustFakePeer(t, newer), mustFakePeer(t, newer)}, false},
		{"one newer, one unreachable", [2]string{mustFakePeer(t, newer), dead}, false},
		{"both behind: not in this term", [2]string{mustFakePeer(t, older), mustFakePeer(t, older)}, false},
		// Whatever listens at a stale address answers for itself, not for
		// the voter: it must not count, even in the right term.
		{"in term but strangers", [2]string{mustPeerServer(t, fakePeer{term: same, stranger: true}), mustPeerServer(t, fakePeer{term: same, stranger: true})}, false},
		{"one stranger, one newer", [2]string{mustPeerServer(t, fakePeer{term: same, stranger: true}), mustFakePeer(t, newer)}, false},
		{"the leader's own address counts once", [2]string{leader.GRPCAddr(), leader.GRPCAddr()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, id := range followers {
				if _, err := leader.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: id, GRPCAddr: tt.peers[i]}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := leader.confirmLeadership(context.Background())
			if tt.wantOK && (err != nil || got != term) {
				t.Fatalf("confirm = %d, %v; want term %d", got, err, term)
			}
			if !tt.wantOK && !errors.Is(err, ErrNotLeader) {
				t.Fatalf("confirm = %d, %v; want ErrNotLeader", got, err)
			}
		})
	}
}

// TestTermAnswersOnlyForItself: a node asked for another node, or for
// another cluster, refuses.
func TestTermAnswersOnlyForItself(t *testing.T) {
	nodes := mustCluster(t)
	n := nodes[1]
	c := api.NewPeerClient(mustConn(t, n.GRPCAddr()))
	ctx := context.Background()
	if resp, err := c.Term(ctx, &api.TermRequest{NodeId: n.ID(), ClusterId: n.fsm.ClusterID()}); err != nil || resp.NodeId != n.ID() || resp.Term == 0 {
		t.Fatalf("Term for itself = %v, %v", resp, err)
	}
	if n.fsm.ClusterID() == "" {
		t.Fatal("the cluster has no id")
	}
	for _, req := range []*api.TermRequest{
		{NodeId: "n9", ClusterId: n.fsm.ClusterID()},
		{NodeId: n.ID(), ClusterId: "another"},
	} {
		if resp, err := c.Term(ctx, req); err == nil {
			t.Errorf("Term(%v) = %v, want a refusal", req, resp)
		}
	}
}
