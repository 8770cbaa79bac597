package grpcapi

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// nodeStatusTimeout bounds asking one peer for its status: the same
// bound a starting node's questions have.
const nodeStatusTimeout = startup.NodeStatusTimeout

// AdminNode is what the Admin service needs of a node: its Raft
// membership and replicated state, read and changed through the node so
// that the node keeps its own rules (membership changes wait for the
// change to commit, leadership is handed over with the sequencer
// stopped). Errors are the node's own, unmapped.
type AdminNode interface {
	Node
	// Forward and ForwardContext are as for SequencerNode: one rule
	// decides where every call is served.
	Forward(ctx context.Context) (conn *grpc.ClientConn, fwd bool, err error)
	ForwardContext(ctx context.Context) context.Context
	// ID is the node's id.
	ID() string
	// TLS reports whether the node's callers hold certificates, so a
	// member's registration can be checked against its certificate.
	TLS() bool
	// Logger receives membership changes.
	Logger() hclog.Logger
	// LocalStatus is the node's own status, as NodeStatus answers.
	LocalStatus() *api.NodeInfo
	// PeerConn is the node's connection to a peer's gRPC address; calls
	// on it name the node's cluster.
	PeerConn(addr string) (*grpc.ClientConn, error)
	// State is the replicated state: layout, group, members' gRPC
	// addresses.
	State() fsm.State
	// NodeAddr is a member's recorded gRPC address.
	NodeAddr(id string) (string, bool)
	// ConfiguredLayout is the layout and group the node was configured
	// with, which a joining node must match.
	ConfiguredLayout() (layout.Layout, uint64)
	// Servers is the Raft configuration's servers.
	Servers() ([]raft.Server, error)
	// IsMember reports whether id is in the Raft configuration.
	IsMember(id string) bool
	// MemberRaftAddr is a member's Raft address, and whether it is one.
	MemberRaftAddr(id string) (string, bool)
	// CheckAnswersAs checks that the node at grpcAddr answers as member
	// id of this cluster.
	CheckAnswersAs(ctx context.Context, grpcAddr, id string) error
	// AddVoter and RemoveServer change the membership, and return once
	// the change has committed.
	AddVoter(ctx context.Context, id, raftAddr string) error
	RemoveServer(ctx context.Context, id string) error
	// Apply commits a command to the replicated state.
	Apply(c fsm.Command) error
	// HandOver hands leadership to srv, or to whichever voter Raft picks
	// when srv is the zero Server.
	HandOver(srv raft.Server) error
	// Backup copies the replicated state on the leader.
	Backup(ctx context.Context) (*api.BackupResponse, error)
}

// Admin implements api.AdminServer: status, membership, leadership
// transfer and backup. Auth decides who may call which.
type Admin struct {
	api.UnimplementedAdminServer
	n AdminNode
}

// NewAdmin returns the Admin service of node n.
func NewAdmin(n AdminNode) *Admin { return &Admin{n: n} }

// NodeStatus implements api.AdminServer.
func (s *Admin) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	return s.n.LocalStatus(), nil
}

// Status implements api.AdminServer: it asks every member in parallel. A
// follower passes the question to the leader, whose view of the membership
// and addresses is the newest; without a leader it answers itself.
func (s *Admin) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	if conn, fwd, err := s.n.Forward(ctx); err == nil && fwd {
		fctx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
		resp, err := api.NewAdminClient(conn).Status(s.n.ForwardContext(fctx), req)
		cancel()
		if err == nil {
			return resp, nil
		}
	}
	servers, cfgErr := s.n.Servers()
	leaderID, leaderAddr := s.n.Leader()
	if cfgErr != nil {
		return nil, s.n.ToStatus(ctx, fmt.Errorf("read configuration: %w", cfgErr), leaderAddr)
	}
	st := s.n.State()
	resp := &api.StatusResponse{Nodes: make([]*api.NodeInfo, len(servers)), LeaderId: leaderID, LeaderAddr: leaderAddr, Group: st.Group}
	if st.Layout != nil {
		resp.Layout = st.Layout.String()
	}
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := s.peerStatus(ctx, string(srv.ID), st.Nodes[string(srv.ID)])
			info.Id, info.RaftAddr, info.Voter = string(srv.ID), string(srv.Address), srv.Suffrage == raft.Voter
			resp.Nodes[i] = info
		}()
	}
	wg.Wait()
	return resp, nil
}

func (s *Admin) peerStatus(ctx context.Context, id, addr string) *api.NodeInfo {
	if id == s.n.ID() {
		return s.n.LocalStatus()
	}
	unreachable := func(err error) *api.NodeInfo {
		return &api.NodeInfo{GrpcAddr: addr, Role: "unreachable", Error: err.Error()}
	}
	if addr == "" {
		return unreachable(fmt.Errorf("gRPC address unknown"))
	}
	conn, err := s.n.PeerConn(addr)
	if err != nil {
		return unreachable(err)
	}
	ctx, cancel := context.WithTimeout(ctx, nodeStatusTimeout)
	defer cancel()
	// The call names this cluster: a node of another one at the address
	// refuses it. One that answers anyway (an older version) is not
	// reported as the member either.
	info, err := api.NewAdminClient(conn).NodeStatus(ctx, &api.NodeStatusRequest{})
	if err != nil {
		return unreachable(err)
	}
	if own := s.n.ClusterID(); info.Id != id || own != "" && info.ClusterId != "" && info.ClusterId != own {
		return unreachable(fmt.Errorf("the node at %s answers as %q of cluster %q, not as member %q of cluster %q",
			addr, info.Id, info.ClusterId, id, own))
	}
	return info
}

// Join implements api.AdminServer.
func (s *Admin) Join(ctx context.Context, req *api.JoinRequest) (*api.JoinResponse, error) {
	return &api.JoinResponse{}, s.status(ctx, s.join(ctx, req))
}

func (s *Admin) join(ctx context.Context, req *api.JoinRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	for _, a := range []string{req.RaftAddr, req.GrpcAddr} {
		if err := CheckDialAddr(a); err != nil {
			return err
		}
	}
	conn, fwd, err := s.n.Forward(ctx)
	if err != nil {
		return err
	}
	if fwd {
		_, err := api.NewAdminClient(conn).Join(s.n.ForwardContext(ctx), req)
		return err
	}
	theirs, err := layout.Parse(req.Layout)
	if err != nil {
		return fmt.Errorf("%w: the joining node's layout: %w", ErrBadRequest, err)
	}
	if ours, group := s.n.ConfiguredLayout(); theirs != ours || req.Group != group {
		return fmt.Errorf("%w: joining node %q has layout %s group %d, the cluster has layout %s group %d",
			ErrLayoutMismatch, req.Id, theirs, req.Group, ours, group)
	}
	servers, err := s.n.Servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	if err := startup.CheckJoinRequest(servers, req); err != nil {
		return err
	}
	if err := s.n.AddVoter(ctx, req.Id, req.RaftAddr); err != nil {
		return fmt.Errorf("add voter: %w", err)
	}
	if err := s.n.Apply(fsm.Command{Op: fsm.OpSetNode, NodeID: req.Id, GRPCAddr: req.GrpcAddr}); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	s.n.Logger().Info("node joined", "id", req.Id, "raft_addr", req.RaftAddr, "grpc_addr", req.GrpcAddr)
	return nil
}

// status is err as the gRPC status a caller gets, naming the leader's
// address whenever this node knows it, so the caller can go there.
func (s *Admin) status(ctx context.Context, err error) error {
	_, leaderAddr := s.n.Leader()
	return s.n.ToStatus(ctx, err, leaderAddr)
}

// Register implements api.AdminServer.
func (s *Admin) Register(ctx context.Context, req *api.RegisterRequest) (*api.RegisterResponse, error) {
	return &api.RegisterResponse{}, s.status(ctx, s.register(ctx, req))
}

// register records a member's new gRPC address, where followers forward
// calls and every leader hint points: so only the member itself may move
// it. grpcapi.Auth has checked the caller (a node certificate naming the new
// address, or the admin token in plaintext when one is set); here, on the
// leader, the certificate must also name the member's Raft address, and
// the node at the new address must answer as that member of this cluster.
func (s *Admin) register(ctx context.Context, req *api.RegisterRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	if err := CheckDialAddr(req.GrpcAddr); err != nil {
		return err
	}
	// Not forwarded: the address check needs the member's own certificate.
	if !s.n.IsLeader() {
		return fmt.Errorf("%w: a member registers with the leader", sequencer.ErrNotLeader)
	}
	if req.Id == s.n.ID() {
		return fmt.Errorf("%w: %q is the leader, which records its own address", ErrBadRequest, req.Id)
	}
	raftAddr, member := s.n.MemberRaftAddr(req.Id)
	if !member {
		return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, req.Id)
	}
	if addr, _ := s.n.NodeAddr(req.Id); addr == req.GrpcAddr {
		return nil
	}
	if s.n.TLS() {
		if err := CheckNodeAddrs(ctx, raftAddr); err != nil {
			return err
		}
	}
	if err := s.n.CheckAnswersAs(ctx, req.GrpcAddr, req.Id); err != nil {
		return err
	}
	if err := s.n.Apply(fsm.Command{Op: fsm.OpSetNode, NodeID: req.Id, GRPCAddr: req.GrpcAddr}); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	s.n.Logger().Info("member registered a new gRPC address", "id", req.Id, "grpc_addr", req.GrpcAddr)
	return nil
}

// Remove implements api.AdminServer.
func (s *Admin) Remove(ctx context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	return &api.RemoveResponse{}, s.status(ctx, s.remove(ctx, req))
}

func (s *Admin) remove(ctx context.Context, req *api.RemoveRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	conn, fwd, err := s.n.Forward(ctx)
	if err != nil {
		return err
	}
	if fwd {
		_, err := api.NewAdminClient(conn).Remove(s.n.ForwardContext(ctx), req)
		return err
	}
	if !s.n.IsMember(req.Id) {
		return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, req.Id)
	}
	if err := s.n.RemoveServer(ctx, req.Id); err != nil {
		return fmt.Errorf("remove server: %w", err)
	}
	if req.Id == s.n.ID() {
		// The leader removed itself and has stepped down, so it cannot
		// commit more; its address entry stays, unused.
		return nil
	}
	if err := s.n.Apply(fsm.Command{Op: fsm.OpDeleteNode, NodeID: req.Id}); err != nil {
		return fmt.Errorf("forget address: %w", err)
	}
	s.n.Logger().Info("node removed", "id", req.Id)
	return nil
}

// TransferLeader implements api.AdminServer.
func (s *Admin) TransferLeader(ctx context.Context, req *api.TransferLeaderRequest) (*api.TransferLeaderResponse, error) {
	err := s.transfer(ctx, req)
	leaderID, leaderAddr := s.n.Leader()
	return &api.TransferLeaderResponse{LeaderId: leaderID}, s.n.ToStatus(ctx, err, leaderAddr)
}

func (s *Admin) transfer(ctx context.Context, req *api.TransferLeaderRequest) error {
	if req.Id != "" {
		if err := CheckNodeID(req.Id); err != nil {
			return err
		}
	}
	conn, fwd, err := s.n.Forward(ctx)
	if err != nil {
		return err
	}
	if fwd {
		_, err := api.NewAdminClient(conn).TransferLeader(s.n.ForwardContext(ctx), req)
		return err
	}
	if req.Id == "" {
		return s.n.HandOver(raft.Server{}) // to whichever voter Raft picks
	}
	if req.Id == s.n.ID() {
		return nil // already leads
	}
	servers, err := s.n.Servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	for _, srv := range servers {
		if string(srv.ID) == req.Id {
			return s.n.HandOver(srv)
		}
	}
	return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, req.Id)
}

// Backup implements api.AdminServer. A follower forwards it to the leader;
// without a leader it fails with the leader hint, if any.
func (s *Admin) Backup(ctx context.Context, req *api.BackupRequest) (*api.BackupResponse, error) {
	resp, err := s.backup(ctx, req)
	return resp, s.status(ctx, err)
}

func (s *Admin) backup(ctx context.Context, req *api.BackupRequest) (*api.BackupResponse, error) {
	conn, fwd, err := s.n.Forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		return api.NewAdminClient(conn).Backup(s.n.ForwardContext(ctx), req)
	}
	return s.n.Backup(ctx)
}
