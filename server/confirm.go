package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/api"
)

// confirmLeadership proves that this node still leads in its current term,
// by a round of messages sent after the caller assigned its IDs: it asks
// every other voter for its Raft term and succeeds once a majority,
// counting itself, is still in this term.
//
// Why that is enough: a newer leader needs the votes of a majority, and a
// node that votes in a newer term stores that term first, and its term
// never goes down. Two majorities share a node. So if a newer leader had
// been elected before this round reached the majority that answered, one
// of them would have answered a higher term. A newer leader answers no
// request before it is elected; so none of its answers completed before
// the IDs being confirmed were assigned, and the order holds.
//
// Each answer must come from the voter it is counted for: the request
// names the node and the cluster, and a node answers only for itself, so
// whatever listens at a stale address cannot vote in this round.
//
// Unlike hashicorp/raft's VerifyLeader, no answer to a message sent before
// the call is counted: every answer here is to a request sent by this call.
func (n *Node) confirmLeadership(ctx context.Context) (uint64, error) {
	term := n.raft.CurrentTerm()
	if n.raft.State() != raft.Leader {
		return 0, ErrNotLeader
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, fmt.Errorf("%w: read configuration: %w", ErrNotLeader, err)
	}
	var others []string
	voters, have := 0, 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(s.ID) == n.cfg.ID {
			have++
		} else {
			others = append(others, string(s.ID))
		}
	}
	need := voters/2 + 1
	if have >= need {
		return term, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	cluster := n.fsm.ClusterID()
	answers := make(chan bool, len(others))
	for _, id := range others {
		go func() { answers <- n.peerInTerm(ctx, id, cluster, term) }()
	}
	for left := len(others); left > 0; left-- {
		if <-answers {
			have++
		}
		if have >= need {
			return term, nil
		}
		if have+left-1 < need {
			break // a majority is out of reach: do not wait for the rest
		}
	}
	return 0, fmt.Errorf("%w: only %d of %d voters are still in term %d", ErrNotLeader, have, voters, term)
}

// peerInTerm reports whether voter id, and not some other process at its
// address, answers that its term is term.
func (n *Node) peerInTerm(ctx context.Context, id, cluster string, term uint64) bool {
	addr, ok := n.fsm.NodeAddr(id)
	if !ok || addr == n.grpcAddr {
		return false
	}
	conn, err := n.peers.get(addr)
	if err != nil {
		return false
	}
	resp, err := api.NewPeerClient(conn).Term(ctx, &api.TermRequest{NodeId: id, ClusterId: cluster})
	return err == nil && resp.NodeId == id && resp.Term == term
}

// Term implements api.PeerServer. It answers only for this node of this
// cluster.
func (s *service) Term(ctx context.Context, req *api.TermRequest) (*api.TermResponse, error) {
	if req.NodeId != s.n.cfg.ID || req.ClusterId != s.n.fsm.ClusterID() {
		return nil, toStatus(ctx, fmt.Errorf("%w: asked for node %q of cluster %q, this is node %q of cluster %q",
			ErrBadRequest, req.NodeId, req.ClusterId, s.n.cfg.ID, s.n.fsm.ClusterID()), "")
	}
	return &api.TermResponse{Term: s.n.raft.CurrentTerm(), NodeId: s.n.cfg.ID}, nil
}

// newClusterID returns a random id for a new cluster.
func newClusterID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a cluster id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
