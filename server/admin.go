package server

// The node's side of the Admin service: the membership, address and
// leadership rules that package grpcapi's Admin reaches through
// grpcapi.Node. The service checks the request's fields and serves each
// call where its forward says; what a call may change, and in what order
// the changes commit, is decided here, next to the Raft and state it
// changes. Errors are unmapped: grpcapi maps them (ToStatus).

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// servers is Raft's latest configuration's servers: the one reader of
// the configuration in this package.
func (n *Node) servers() ([]raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

// members is the Raft configuration as Status reports it: each server
// with its recorded gRPC address, and which one this node is.
func (n *Node) Members() ([]grpcapi.Member, error) {
	servers, err := n.servers()
	if err != nil {
		return nil, err
	}
	addrs := n.fsm.State().Nodes
	members := make([]grpcapi.Member, len(servers))
	for i, srv := range servers {
		id := string(srv.ID)
		members[i] = grpcapi.Member{
			ID: id, RaftAddr: string(srv.Address), GRPCAddr: addrs[id],
			Voter: srv.Suffrage == raft.Voter, Self: id == n.cfg.ID,
		}
	}
	return members, nil
}

// addMember adds the node req describes as a voter, on the leader: its
// layout and group must be the ones this node was configured with, and
// its id and Raft address must not clash with the configuration's
// (startup.CheckJoinRequest). The change goes through changeMembership;
// the joining node's gRPC address is recorded once it has committed.
func (n *Node) AddMember(ctx context.Context, req *api.JoinRequest) error {
	theirs, err := layout.Parse(req.Layout)
	if err != nil {
		return fmt.Errorf("%w: the joining node's layout: %w", grpcapi.ErrBadRequest, err)
	}
	if ours, group := n.cfg.Layout, n.cfg.Group; theirs != ours || req.Group != group {
		return fmt.Errorf("%w: joining node %q has layout %s group %d, the cluster has layout %s group %d",
			grpcapi.ErrLayoutMismatch, req.Id, theirs, req.Group, ours, group)
	}
	servers, err := n.servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	if err := startup.CheckJoinRequest(servers, req); err != nil {
		return err
	}
	if err := n.changeMembership(ctx, func() raft.Future {
		return n.raft.AddVoter(raft.ServerID(req.Id), raft.ServerAddress(req.RaftAddr), 0, n.cfg.ApplyTimeout)
	}); err != nil {
		return fmt.Errorf("add voter: %w", err)
	}
	if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: req.Id, GRPCAddr: req.GrpcAddr}); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	n.logger.Info("node joined", "id", req.Id, "raft_addr", req.RaftAddr, "grpc_addr", req.GrpcAddr)
	return nil
}

// registerMember records member id's new gRPC address, where followers
// forward calls and every leader hint points, so only the member itself
// may move it. grpcapi.Auth has checked the caller (a node certificate
// naming the new address, or the admin token in plaintext when one is
// set); here, on the leader, the certificate must also name the member's
// Raft address, and the node at the new address must answer as that
// member of this cluster. It runs only on the leader, never forwarded:
// the certificate check needs the member's own call.
func (n *Node) RegisterMember(ctx context.Context, id, grpcAddr string) error {
	if !n.isLeader() {
		return fmt.Errorf("%w: a member registers with the leader", sequencer.ErrNotLeader)
	}
	if id == n.cfg.ID {
		return fmt.Errorf("%w: %q is the leader, which records its own address", grpcapi.ErrBadRequest, id)
	}
	raftAddr, member := n.memberRaftAddr(id)
	if !member {
		return fmt.Errorf("%w: %q is not a member", grpcapi.ErrUnknownNode, id)
	}
	if addr, _ := n.fsm.NodeAddr(id); addr == grpcAddr {
		return nil
	}
	if n.cfg.TLS != nil {
		if err := grpcapi.CheckNodeAddrs(ctx, raftAddr); err != nil {
			return err
		}
	}
	if err := n.checkAnswersAs(ctx, grpcAddr, id); err != nil {
		return err
	}
	if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: id, GRPCAddr: grpcAddr}); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	n.logger.Info("member registered a new gRPC address", "id", id, "grpc_addr", grpcAddr)
	return nil
}

// removeMember removes member id, on the leader, through
// changeMembership, and then forgets its gRPC address.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if member, _ := n.isMember(id); !member {
		return fmt.Errorf("%w: %q is not a member", grpcapi.ErrUnknownNode, id)
	}
	if err := n.changeMembership(ctx, func() raft.Future {
		return n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)
	}); err != nil {
		return fmt.Errorf("remove server: %w", err)
	}
	if id == n.cfg.ID {
		// The leader removed itself and has stepped down, so it cannot
		// commit more: the next leader forgets its address
		// (forgetRemoved).
		return nil
	}
	if _, err := n.apply(fsm.Command{Op: fsm.OpDeleteNode, NodeID: id}); err != nil {
		return fmt.Errorf("forget address: %w", err)
	}
	n.logger.Info("node removed", "id", id)
	return nil
}

// transferLeader hands leadership, on the leader, to member id, or to
// whichever voter Raft picks when id is "", through handOver, which stops
// the sequencer first. Naming this node, the leader, changes nothing.
func (n *Node) TransferLeadership(id string) error {
	if id == "" {
		return n.handOver(n.raft.LeadershipTransfer)
	}
	if id == n.cfg.ID {
		return nil // already leads
	}
	servers, err := n.servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	for _, srv := range servers {
		if string(srv.ID) == id {
			return n.handOver(func() raft.Future { return n.raft.LeadershipTransferToServer(srv.ID, srv.Address) })
		}
	}
	return fmt.Errorf("%w: %q is not a member", grpcapi.ErrUnknownNode, id)
}
