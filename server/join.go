package server

// Joining: a node becomes a member by bootstrapping a new cluster with its
// peers (Bootstrap), or by asking an existing one, through any member, to
// add it (Join). Which of the two a start takes is package startup's rule.

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/startup"
)

// Bootstrap creates a new cluster of peers, which must include this node.
// It does nothing when the data dir already holds Raft state, so the same
// command line can restart a node.
func (n *Node) Bootstrap(peers []Peer) error {
	has, err := raft.HasExistingState(n.store, n.store, n.snaps)
	if err != nil {
		return fmt.Errorf("check existing state: %w", err)
	}
	if has {
		n.logger.Info("data dir holds raft state; bootstrap ignored")
		return nil
	}
	var cfg raft.Configuration
	self := false
	for _, p := range peers {
		if p.ID == "" || p.RaftAddr == "" || p.GRPCAddr == "" {
			return fmt.Errorf("%w: bootstrap peer %+v lacks an id or address", startup.ErrBadConfig, p)
		}
		self = self || p.ID == n.cfg.ID
		cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	if !self {
		return fmt.Errorf("%w: bootstrap peers do not include this node %q", startup.ErrBadConfig, n.cfg.ID)
	}
	n.mu.Lock()
	n.bootstrapPeers = peers
	n.mu.Unlock()
	if err := n.raft.BootstrapCluster(cfg).Error(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// BootstrapSingle creates a one-node cluster of this node, for tests and
// trying things out; others can join it.
func (n *Node) BootstrapSingle() error {
	return n.Bootstrap([]Peer{{ID: n.cfg.ID, RaftAddr: n.RaftAddr(), GRPCAddr: n.GRPCAddr()}})
}

// Join asks the cluster, through any of addrs (members' gRPC addresses),
// to add this node as a voter, trying each in turn until ctx ends. The
// leader asks this node who it is before it adds it (Node.AddMember), at
// its advertised gRPC address, so a leader that cannot reach it there
// refuses it (Unavailable, retried). Errors that retrying cannot mend,
// such as a layout mismatch or an id in use, return at once.
func (n *Node) Join(ctx context.Context, addrs ...string) error {
	if len(addrs) == 0 {
		return fmt.Errorf("%w: no address to join through", startup.ErrBadConfig)
	}
	req := &api.JoinRequest{Id: n.cfg.ID, RaftAddr: n.RaftAddr(), GrpcAddr: n.grpcAddr, Layout: n.cfg.Layout.String(), Group: n.cfg.Group, ReadsVersion: fsm.Reads}
	hint := "" // the leader's address, when the last node asked named it
	for i := 0; ; i++ {
		// Raft gave this node the configuration: it was added, by an
		// earlier attempt whose reply was lost or from outside (ordo join).
		if member, _ := n.isMember(n.cfg.ID); member {
			return nil
		}
		addr, fromHint := addrs[i%len(addrs)], hint != ""
		if fromHint {
			addr, hint = hint, ""
			i--
		}
		conn, err := n.peers.Get(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
		var trailer metadata.MD
		_, err = api.NewAdminClient(conn).Join(n.adminContext(actx), req, grpc.Trailer(&trailer))
		cancel()
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.AlreadyExists:
			if member, _ := n.isMember(n.cfg.ID); member {
				return nil
			}
			return fmt.Errorf("join through %s: %w", addr, err)
		case codes.Unavailable, codes.DeadlineExceeded, codes.Internal:
		default:
			return fmt.Errorf("join through %s: %w", addr, err)
		}
		// A node joins through the leader (with TLS a follower does not
		// forward it): go there next.
		// Once at once; a hint that leads to another hint waits like
		// any retry, so two nodes naming each other cannot spin.
		if v := trailer.Get(api.LeaderAddrKey); len(v) > 0 && v[0] != addr {
			hint = v[0]
			if !fromHint {
				continue
			}
		}
		n.logger.Warn("join failed; retrying", "addr", addr, "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("join: %w (last error from %s: %v)", ctx.Err(), addr, err)
		case <-n.refused:
			return fmt.Errorf("join: %w", n.refuseErr)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
