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

// fakePeer answers Term with whatever term it is told.
type fakePeer struct {
	api.UnimplementedPeerServer
	term func() uint64
}

func (p fakePeer) Term(context.Context, *api.TermRequest) (*api.TermResponse, error) {
	return &api.TermResponse{Term: p.term()}, nil
}

func mustFakePeer(t *testing.T, term func() uint64) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterPeerServer(s, fakePeer{term: term})
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
