package grpcapi

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/startup"
)

// nodeStatusTimeout bounds asking one peer for its status: the same
// bound a starting node's questions have.
const nodeStatusTimeout = startup.NodeStatusTimeout

// AdminNode is what the Admin service needs of a node. The node keeps
// the rules of its membership and state (who may join, register, leave
// or take over leadership, and in what order the changes commit); the
// service checks the request's fields, serves the call where the node's
// Forward says, and maps the node's errors, which are its own and
// unmapped, through Node.ToStatus with the leader hint.
type AdminNode interface {
	Node
	Forwarder
	// LocalStatus is the node's own status, as NodeStatus answers.
	LocalStatus() *api.NodeInfo
	// PeerConn is the node's connection to a peer's gRPC address; calls
	// on it name the node's cluster.
	PeerConn(addr string) (*grpc.ClientConn, error)
	// Members is the Raft configuration as Status reports it, with each
	// member's recorded gRPC address.
	Members() ([]Member, error)
	// ClusterLayout is as for SequencerNode: the layout and group the
	// cluster recorded; nil while the node does not know them.
	ClusterLayout() (*layout.Layout, uint64)
	// Join adds the node req describes as a voter, on the leader, once
	// it matches the cluster, and records its gRPC address.
	Join(ctx context.Context, req *api.JoinRequest) error
	// Register records member id's new gRPC address, on the leader, once
	// the caller and the node at grpcAddr prove to be that member.
	Register(ctx context.Context, id, grpcAddr string) error
	// Remove removes member id, on the leader, and forgets its address.
	Remove(ctx context.Context, id string) error
	// TransferLeader hands leadership, on the leader, to member id, or to
	// whichever voter Raft picks when id is "". Raft's transfer takes no
	// context, so neither does this.
	TransferLeader(id string) error
	// Backup copies the replicated state on the leader.
	Backup(ctx context.Context) (*api.BackupResponse, error)
}

// Member is one server of the Raft configuration, as Status reports it.
type Member struct {
	// ID and RaftAddr are as the Raft configuration has them.
	ID, RaftAddr string
	// GRPCAddr is the member's recorded gRPC address; "" when none is.
	GRPCAddr string
	// Voter reports whether the member votes.
	Voter bool
	// Self reports whether the member is the node that answers, which
	// reports its own status instead of asking itself.
	Self bool
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
	members, cfgErr := s.n.Members()
	leaderID, leaderAddr := s.n.Leader()
	if cfgErr != nil {
		return nil, s.n.ToStatus(ctx, fmt.Errorf("read configuration: %w", cfgErr), leaderAddr)
	}
	l, group := s.n.ClusterLayout()
	resp := &api.StatusResponse{Nodes: make([]*api.NodeInfo, len(members)), LeaderId: leaderID, LeaderAddr: leaderAddr, Group: group}
	if l != nil {
		resp.Layout = l.String()
	}
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := s.peerStatus(ctx, m)
			info.Id, info.RaftAddr, info.Voter = m.ID, m.RaftAddr, m.Voter
			resp.Nodes[i] = info
		}()
	}
	wg.Wait()
	return resp, nil
}

func (s *Admin) peerStatus(ctx context.Context, m Member) *api.NodeInfo {
	if m.Self {
		return s.n.LocalStatus()
	}
	id, addr := m.ID, m.GRPCAddr
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

// atLeader serves a call that only the leader may serve: local runs it
// here when the node's Forward says so, else remote passes req on to the
// leader, marked as forwarded. It is the one place the Admin service
// decides where such a call is served.
func atLeader[Req, Resp any](ctx context.Context, n Forwarder, req Req,
	remote func(api.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	local func() (Resp, error)) (Resp, error) {
	conn, fwd, err := n.Forward(ctx)
	if err != nil {
		var none Resp
		return none, err
	}
	if fwd {
		return remote(api.NewAdminClient(conn), n.ForwardContext(ctx), req)
	}
	return local()
}

// status is err as the gRPC status a caller gets, naming the leader's
// address whenever this node knows it, so the caller can go there.
func (s *Admin) status(ctx context.Context, err error) error {
	_, leaderAddr := s.n.Leader()
	return s.n.ToStatus(ctx, err, leaderAddr)
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
	_, err := atLeader(ctx, s.n, req, api.AdminClient.Join, func() (*api.JoinResponse, error) {
		return nil, s.n.Join(ctx, req)
	})
	return err
}

// Register implements api.AdminServer.
func (s *Admin) Register(ctx context.Context, req *api.RegisterRequest) (*api.RegisterResponse, error) {
	return &api.RegisterResponse{}, s.status(ctx, s.register(ctx, req))
}

// register records a member's new gRPC address, where followers forward
// calls and every leader hint points: so only the member itself may move
// it. grpcapi.Auth has checked the caller (a node certificate naming the new
// address, or the admin token in plaintext when one is set); the node, on
// the leader, checks the rest (AdminNode.Register). It is not forwarded:
// the leader's check of the caller needs the member's own certificate.
func (s *Admin) register(ctx context.Context, req *api.RegisterRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	if err := CheckDialAddr(req.GrpcAddr); err != nil {
		return err
	}
	return s.n.Register(ctx, req.Id, req.GrpcAddr)
}

// Remove implements api.AdminServer.
func (s *Admin) Remove(ctx context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	return &api.RemoveResponse{}, s.status(ctx, s.remove(ctx, req))
}

func (s *Admin) remove(ctx context.Context, req *api.RemoveRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	_, err := atLeader(ctx, s.n, req, api.AdminClient.Remove, func() (*api.RemoveResponse, error) {
		return nil, s.n.Remove(ctx, req.Id)
	})
	return err
}

// TransferLeader implements api.AdminServer. It names the leader as this
// node sees it after the transfer, wherever the transfer was served.
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
	_, err := atLeader(ctx, s.n, req, api.AdminClient.TransferLeader, func() (*api.TransferLeaderResponse, error) {
		return nil, s.n.TransferLeader(req.Id)
	})
	return err
}

// Backup implements api.AdminServer. A follower forwards it to the leader;
// without a leader it fails with the leader hint, if any.
func (s *Admin) Backup(ctx context.Context, req *api.BackupRequest) (*api.BackupResponse, error) {
	resp, err := atLeader(ctx, s.n, req, api.AdminClient.Backup, func() (*api.BackupResponse, error) {
		return s.n.Backup(ctx)
	})
	return resp, s.status(ctx, err)
}
