package server

// Membership: the one reader of the Raft configuration (servers), the
// node's side of the Admin service's membership calls, the leader's
// record of members' gRPC addresses, and how a member learns it was
// removed. Package grpcapi's Admin checks a request's fields and serves
// each call where its forward says; what a call may change, and in what
// order the changes commit, is decided here, next to the Raft and state
// it changes. Errors are unmapped: grpcapi maps them (ToStatus).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/grpcerr"
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

// AddMember adds the node req describes as a voter, on the leader. In
// order: the request's layout and group must be the ones this node was
// configured with; its id and addresses must not clash with a member's
// (checkJoinAddrs); and the node at its gRPC address, asked, must answer
// as that node, of this cluster or of none, with this cluster's layout
// and group, reading its version (askJoiner): a join is also an
// operator's word (ordo join), and a voter that does not run counts
// against the majority from the moment it is added. Then, through
// changeMembership, the address check again (another join may have come
// between) and the version the node answered; the joining node's gRPC
// address is recorded once the change has committed.
func (n *Node) AddMember(ctx context.Context, req *api.JoinRequest) error {
	theirs, err := layout.Parse(req.Layout)
	if err != nil {
		return fmt.Errorf("%w: the joining node's layout: %w", grpcapi.ErrBadRequest, err)
	}
	if ours, group := n.cfg.Layout, n.cfg.Group; theirs != ours || req.Group != group {
		return fmt.Errorf("%w: joining node %q has layout %s group %d, the cluster has layout %s group %d",
			grpcapi.ErrLayoutMismatch, req.Id, theirs, req.Group, ours, group)
	}
	if err := n.checkJoinAddrs(req); err != nil {
		return err
	}
	info, err := n.askJoiner(ctx, req)
	if err != nil {
		return err
	}
	if err := n.changeMembership(ctx, func() raft.Future {
		// Under membershipMu, as the version is raised: a joiner too
		// old for it cannot be let in between the asking and the raise.
		// After a Barrier: a new leader may not yet have applied a raise
		// an earlier leader committed.
		if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
			return refusedFuture{fmt.Errorf("apply the log before checking the joiner's version: %w", err)}
		}
		if err := n.checkJoinAddrs(req); err != nil {
			return refusedFuture{err}
		}
		if err := n.checkJoinerReads(req.Id, info.ReadsVersion); err != nil {
			return refusedFuture{err}
		}
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

// checkJoinAddrs refuses a join whose id, Raft address or gRPC address a
// member of the configuration has (startup.CheckJoinRequest).
func (n *Node) checkJoinAddrs(req *api.JoinRequest) error {
	servers, err := n.servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	return startup.CheckJoinRequest(servers, n.fsm.State().Nodes, req)
}

// askJoiner asks the node at req's gRPC address who it is, and returns its
// answer if it is the node req describes and may join this cluster
// (judgeJoiner); a node that cannot be asked is refused: whether it runs
// at all cannot be told.
func (n *Node) askJoiner(ctx context.Context, req *api.JoinRequest) (*api.NodeInfo, error) {
	a := startup.NewAsker(n.cfg.TLS)
	defer a.Close()
	info, err := a.NodeStatus(ctx, req.GrpcAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: asked who it is, nothing answers at %s as node %q (%s): start the node first "+
			"(ordo serve --id %s --join <a member's gRPC address> ...; it then asks to join by itself), or check the address (--grpc-addr)",
			grpcapi.ErrJoinerSilent, req.GrpcAddr, req.Id, grpcerr.Describe(err), req.Id)
	}
	if err := judgeJoiner(req, info, n.cfg.Layout, n.cfg.Group, n.ClusterID()); err != nil {
		return nil, err
	}
	return info, nil
}

// judgeJoiner is the rule askJoiner applies to info, the answer of the
// node at req's gRPC address: it must answer under req's id, be past its
// start and not refuse to serve, answer at req's Raft address, hold state
// of cluster (this cluster's id) or no log, and run layout l with group.
// Each refusal names what the node said and what to fix.
func judgeJoiner(req *api.JoinRequest, info *api.NodeInfo, l layout.Layout, group uint64, cluster string) error {
	at := req.GrpcAddr
	switch {
	case info.Id != req.Id:
		return fmt.Errorf("%w: the node at %s answers as %q, not %q: check the address (--grpc-addr) and the id (--id)",
			grpcapi.ErrJoinerMismatch, at, info.Id, req.Id)
	case info.Role == "starting":
		return fmt.Errorf("%w: node %q at %s is still starting (it checks its cluster before it serves): "+
			"started with --join it asks to join by itself; else retry once it serves", grpcapi.ErrJoinerSilent, req.Id, at)
	case info.Error != "" || info.Role == "shutdown":
		return fmt.Errorf("%w: node %q at %s answers that it does not serve (role %s: %s): a node removed, or of another cluster, "+
			"stops so; start it with an empty data dir and --join", grpcapi.ErrJoinerMismatch, req.Id, at, info.Role, info.Error)
	case info.RaftAddr != req.RaftAddr:
		return fmt.Errorf("%w: node %q at %s answers with raft address %s, not %s: check the raft address (--raft-addr)",
			grpcapi.ErrJoinerMismatch, req.Id, at, info.RaftAddr, req.RaftAddr)
	case info.ClusterId != "" && info.ClusterId != cluster:
		return fmt.Errorf("%w: node %q at %s holds the state of cluster %s, this cluster is %s: stop it, move its data dir aside, "+
			"and start it with an empty data dir and --join", startup.ErrOtherCluster, req.Id, at, info.ClusterId, cluster)
	case info.ClusterId == "" && info.LastLogIndex > 0:
		// A term without a log is no one's state: a member's leader may
		// have reached the node's address before it was added.
		return fmt.Errorf("%w: node %q at %s holds a raft log that names no cluster, so whether it is this cluster's (%s) cannot be told: "+
			"stop it, move its data dir aside, and start it with an empty data dir and --join", grpcapi.ErrJoinerMismatch, req.Id, at, cluster)
	case info.Layout == "":
		return fmt.Errorf("%w: node %q at %s does not say which layout it runs (an Ordo older than this one): upgrade it before it joins",
			grpcapi.ErrVersionTooOld, req.Id, at)
	}
	theirs, err := layout.Parse(info.Layout)
	if err != nil {
		return fmt.Errorf("%w: node %q at %s answers with layout %q, which this node cannot read (%v): upgrade it, or this cluster, so both read it",
			grpcapi.ErrVersionTooOld, req.Id, at, info.Layout, err)
	}
	if theirs != l || info.Group != group {
		return fmt.Errorf("%w: node %q at %s runs layout %s group %d, the cluster has layout %s group %d: start it with --layout %s --group %d",
			grpcapi.ErrLayoutMismatch, req.Id, at, theirs, info.Group, l, group, l, group)
	}
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
	if !n.IsLeader() {
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

func (n *Node) voters() int {
	servers, _ := n.servers()
	c := 0
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// isMember reports whether id is in Raft's latest configuration, and
// whether that configuration has any servers at all.
func (n *Node) isMember(id string) (member, known bool) {
	servers, err := n.servers()
	if err != nil {
		return false, false
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return true, true
		}
	}
	return false, len(servers) > 0
}

// memberRaftAddr returns the Raft address of member id in the Raft
// configuration, and whether id is a member.
func (n *Node) memberRaftAddr(id string) (string, bool) {
	servers, _ := n.servers()
	for _, s := range servers {
		if string(s.ID) == id {
			return string(s.Address), true
		}
	}
	return "", false
}

// checkAnswersAs asks the node at grpcAddr who it is, and returns nil only
// if it is member id of this node's cluster.
func (n *Node) checkAnswersAs(ctx context.Context, grpcAddr, id string) error {
	a := startup.NewAsker(n.cfg.TLS)
	defer a.Close()
	info, err := a.NodeStatus(ctx, grpcAddr)
	if err != nil {
		return fmt.Errorf("%w: %s cannot be asked who it is: %v", grpcapi.ErrBadRequest, grpcAddr, err)
	}
	if info.Id != id || info.ClusterId != n.ClusterID() {
		return fmt.Errorf("%w: %s answers as %q of cluster %q, not as member %q of cluster %q",
			grpcapi.ErrPermissionDenied, grpcAddr, info.Id, info.ClusterId, id, n.ClusterID())
	}
	return nil
}

// leaderConfirmsRemoved asks the other nodes it knows for the cluster's
// status (which a follower passes to the leader) and reports whether a
// leader of this node's cluster answered with a membership that lacks this
// node. Only such an answer proves it: the call names this cluster, so a
// node of another one now at a member's address refuses it, and a refusal,
// or an answer that does not name this cluster (grpcapi.AnsweredForCluster), is
// taken as "cannot tell", never as proof: watchMembership asks again.
func (n *Node) leaderConfirmsRemoved() bool {
	st, ok := n.clusterMembers()
	return ok && !slices.ContainsFunc(st.Nodes, func(m *api.NodeInfo) bool { return m.Id == n.cfg.ID })
}

// clusterMembers asks the other members of this node's Raft
// configuration, at their recorded gRPC addresses, for the cluster's
// status, and returns the first answer for this cluster that names a
// leader other than this node.
func (n *Node) clusterMembers() (*api.StatusResponse, bool) {
	for _, srv := range n.raftIdentity.members.get() {
		addr, known := n.fsm.NodeAddr(string(srv.ID))
		if !known {
			addr, known = n.storedAddrs[string(srv.ID)]
		}
		if string(srv.ID) == n.cfg.ID || !known {
			continue
		}
		conn, err := n.peers.Get(addr)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*nodeStatusTimeout)
		var header metadata.MD
		st, err := api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{}, grpc.Header(&header))
		cancel()
		if err == nil && grpcapi.AnsweredForCluster(header, n.ClusterID()) && st.LeaderId != "" && st.LeaderId != n.cfg.ID {
			return st, true
		}
	}
	return nil, false
}

// watchMembership keeps this node's membership in order.
//
// It stops a node that was removed from the cluster: lingering, it would
// answer every client "no leader". Raft shuts itself down when a leader
// removes itself; a removed follower only sees a configuration without
// itself, which may not be committed (and a node catching up sees older
// ones without itself too), so the leader is asked to confirm.
//
// And a member that restarted on another gRPC address registers it with
// the leader (a leader records its own when it wins): until then the
// leader's term rounds and other nodes' forwarding dial the old one.
//
// It also keeps the Raft handshake's copy of the configuration fresh, and
// stops a node whose voters answer the handshake for another cluster.
func (n *Node) watchMembership() {
	defer n.wg.Done()
	check := time.NewTicker(200 * time.Millisecond)
	defer check.Stop()
	// wasMember: this node was a member, in this process or before it
	// (its data dir held a configuration). Only then does a configuration
	// that does not list it mean it was removed: a node that joins sees
	// the configurations from before it was added as it catches up.
	wasMember := n.storedConfiguration
	var lastRegister time.Time
	for {
		select {
		case <-n.stop:
			return
		case <-check.C:
		}
		n.refreshMembers()
		n.checkOtherCluster()
		n.admitListed()
		member, known := n.isMember(n.cfg.ID)
		switch {
		case n.raft.State() == raft.Shutdown:
			n.refuse(ErrRemoved)
			return
		case wasMember && n.raftIdentity.strangerTo.Swap(false) && n.leaderConfirmsRemoved():
			// Its peers refuse it as a stranger, and the leader does not
			// list it: it missed the entry that removed it, which the
			// leader stops sending once appended.
			n.refuse(ErrRemoved)
			return
		case member:
			wasMember = true
			if time.Since(lastRegister) >= time.Second && n.registerMoved() {
				lastRegister = time.Now()
			}
		case known && wasMember && n.leaderConfirmsRemoved():
			n.refuse(ErrRemoved)
			return
		}
	}
}

// registerMoved asks the leader to record this follower's gRPC address if
// the cluster knows another one; it reports whether it asked.
func (n *Node) registerMoved() bool {
	n.registerMu.Lock()
	defer n.registerMu.Unlock()
	if recorded, _ := n.fsm.NodeAddr(n.cfg.ID); recorded == n.grpcAddr || n.IsLeader() || n.cfg.TestHooks.holdsAddress() {
		return false
	}
	_, addr := n.Leader()
	if addr == "" {
		return false
	}
	conn, err := n.peers.Get(addr)
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeStatusTimeout)
	defer cancel()
	_, err = api.NewAdminClient(conn).Register(n.adminContext(ctx), &api.RegisterRequest{Id: n.cfg.ID, GrpcAddr: n.grpcAddr})
	if err != nil {
		n.logger.Warn("could not register this node's gRPC address with the leader; retrying", "leader", addr, "grpc_addr", n.grpcAddr, "error", err)
	} else {
		n.logger.Info("registered this node's gRPC address with the leader", "grpc_addr", n.grpcAddr)
	}
	return true
}

// changeMembership runs change, which adds or removes a voter, one at a
// time and only after a round in the current configuration. The lease
// argument (package leadership) needs every lease to be counted in the newest
// configuration or the one before it: the leader drops its own before
// the change, and the round, which voters that promised another leader
// hold back, waits out any other leader's, however it was counted.
// refusedFuture is a membership change refused before it began.
type refusedFuture struct{ err error }

func (f refusedFuture) Error() error { return f.err }
func (refusedFuture) Index() uint64  { return 0 }

func (n *Node) changeMembership(ctx context.Context, change func() raft.Future) error {
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	n.seq.DropLease()
	if _, err := n.confirm(ctx, false); err != nil {
		return fmt.Errorf("confirm leadership before changing membership: %w", err)
	}
	return change().Error()
}

// registerAddrs records this node's and the bootstrap peers' gRPC
// addresses where the FSM lacks them or has another.
func (n *Node) registerAddrs(known map[string]string) error {
	n.mu.Lock()
	want := append([]Peer(nil), n.bootstrapPeers...)
	n.mu.Unlock()
	want = append(want, Peer{ID: n.cfg.ID, GRPCAddr: n.grpcAddr})
	for _, p := range want {
		if p.ID != n.cfg.ID && known[p.ID] != "" {
			continue // a peer's own registration wins over the bootstrap flag
		}
		if known[p.ID] == p.GRPCAddr {
			continue
		}
		if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: p.ID, GRPCAddr: p.GRPCAddr}); err != nil {
			return fmt.Errorf("register %s: %w", p.ID, err)
		}
		known[p.ID] = p.GRPCAddr
	}
	return nil
}

// forgetRemoved deletes the address entries of nodes that are not servers
// of the Raft configuration. A leader that removes itself steps down
// before it can delete its own entry, so the next leader does; left
// behind, the address would still be asked as a member's (a follower's
// removal check, a backup's members), and whatever listens there later,
// a node of another cluster, would seem to speak for this one. It holds
// membershipMu: under it the configuration read is committed, and a join
// records its address only after its server is in the configuration.
func (n *Node) forgetRemoved() error {
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	servers, err := n.servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	for _, id := range strayAddrs(n.fsm.State().Nodes, servers) {
		if _, err := n.apply(fsm.Command{Op: fsm.OpDeleteNode, NodeID: id}); err != nil {
			return fmt.Errorf("forget the address of removed node %s: %w", id, err)
		}
		n.logger.Info("forgot the address of a node that is no longer a member", "id", id)
	}
	return nil
}

// strayAddrs returns, sorted, the ids of nodes that have an address entry
// but are not servers of the configuration. An empty configuration says
// nothing about who is a member, so nothing is stray then.
func strayAddrs(nodes map[string]string, servers []raft.Server) []string {
	if len(servers) == 0 {
		return nil
	}
	var stray []string
	for id := range nodes {
		if !slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id }) {
			stray = append(stray, id)
		}
	}
	slices.Sort(stray)
	return stray
}
