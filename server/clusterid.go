package server

import (
	"fmt"

	"github.com/seed-e8569b35/ordo/startup"
)

// clusterID is the id of the cluster this node belongs to: the FSM's once
// it has applied it, else what the data dir held at Open; empty for a node
// that has not yet seen its cluster's first leader record one.
func (n *Node) ClusterID() string {
	if id := n.fsm.ClusterID(); id != "" {
		return id
	}
	return n.storedClusterID
}

// refreshMembers copies Raft's latest configuration for the Raft
// handshake (see memberCache for why a copy, and why a stale one is safe).
func (n *Node) refreshMembers() {
	if servers, err := n.servers(); err == nil {
		n.raftIdentity.members.set(servers)
	}
}

// admitListed lets into the Raft handshake the dialers of this cluster
// that it refused as not in this node's configuration, when the cluster's
// leader lists them as members: this node's log is behind (it was down
// while they were added), and it learns the configuration that lists
// them only from them once one leads. The leader is asked through the
// members of this node's own configuration (clusterMembers), never a
// node that configuration has dropped, so the lost members of a
// --recover'ed cluster cannot vouch for each other to the survivor.
func (n *Node) admitListed() {
	ids := n.raftIdentity.members.takeUnknown()
	if len(ids) == 0 {
		return
	}
	st, ok := n.clusterMembers()
	if !ok {
		return
	}
	for _, id := range ids {
		for _, m := range st.Nodes {
			if m.Id == id && m.Voter {
				n.raftIdentity.members.admit(id)
				n.logger.Info("letting in a raft peer this node's configuration does not list yet: the cluster's leader lists it",
					"peer_node_id", id, "leader", st.LeaderId)
			}
		}
	}
}

// checkOtherCluster refuses to serve when a majority of this node's other
// voters answered the Raft handshake for another cluster than the one its
// data dir holds (decideOtherCluster): the data dir is then the odd one
// out, most likely another cluster's volume. Its connections are refused
// anyway; refusing to serve stops it, and its error names the fix, where
// otherwise only the peers' logs would show which node is wrong.
func (n *Node) checkOtherCluster() {
	if n.Refusal() != nil {
		return
	}
	own := n.ClusterID()
	v := decideOtherCluster(own, n.raftIdentity.members.otherVoters(n.cfg.ID), n.raftIdentity.answers.snapshot())
	if !v.refuse {
		return
	}
	n.refuse(fmt.Errorf("%w: this node's data dir holds cluster %s but members %s: the data dir is another cluster's; "+
		"stop this node, move the data dir aside, `ordo remove --id %s` from the cluster and start it empty with --join",
		startup.ErrOtherCluster, own, describeOthers(v.others), n.cfg.ID))
}
