package server

import (
	"context"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/leadership"
)

// openConfirmer wires package leadership to this node: its Raft, its
// addresses and peer connections, and store, Raft's stable store, for the
// restart hold. It runs before Raft starts and before the gRPC address is
// known, so the views below read the node at each call.
func (n *Node) openConfirmer(store raft.StableStore) (*leadership.Confirmer, error) {
	return leadership.Open(leadership.Config{
		ID:      n.cfg.ID,
		Lease:   n.cfg.Lease,
		Timeout: n.cfg.ApplyTimeout,
		Raft:    raftView{n},
		Node:    leadershipView{n},
		Store:   store,
		Logger:  n.logger,
	})
}

// raftView is package leadership's view of this node's Raft.
type raftView struct{ n *Node }

func (v raftView) CurrentTerm() uint64 { return v.n.raft.CurrentTerm() }
func (v raftView) Leads() bool         { return v.n.isLeader() }

func (v raftView) Leader() string {
	_, id := v.n.raft.LeaderWithID()
	return string(id)
}

func (v raftView) Voters() ([]string, error) {
	servers, err := v.n.servers()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return ids, nil
}

// leadershipView is package leadership's view of the rest of this node.
type leadershipView struct{ n *Node }

func (v leadershipView) ClusterID() string { return v.n.ClusterID() }
func (v leadershipView) GRPCAddr() string  { return v.n.grpcAddr }

func (v leadershipView) NodeAddr(id string) (string, bool) { return v.n.fsm.NodeAddr(id) }

// Conn is a grpcapi.Peers connection: it names this node's cluster and, in
// plaintext with an admin token, sends the token (see grpcapi.Auth.MayRelease).
func (v leadershipView) Conn(addr string) (grpc.ClientConnInterface, error) {
	return v.n.peers.Get(addr)
}

func (v leadershipView) MayRelease(ctx context.Context) bool { return v.n.auth.MayRelease(ctx) }
