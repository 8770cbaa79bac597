package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/startup"
)

// nodeStatusTimeout bounds asking one peer for its status: the same
// bound a starting node's questions have.
const nodeStatusTimeout = startup.NodeStatusTimeout

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
	srv *Server
}

// NodeStatus implements api.AdminServer.
func (a *Admin) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	return a.srv.localStatus(), nil
}

// Status implements api.AdminServer.
func (a *Admin) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	return a.srv.clusterStatus(ctx, req)
}

// Status is the cluster's status, as Admin/Status answers it: it asks
// every member in parallel. A follower passes the question to the leader,
// whose view of the membership and addresses is the newest; without a
// leader it answers itself. A request that asks for the named sequences
// gets them too, with the leader's rates (addSequences). Its error is a
// status.
func (s *Server) Status(ctx context.Context) (*api.StatusResponse, error) {
	return s.clusterStatus(ctx, &api.StatusRequest{})
}

func (s *Server) clusterStatus(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	if err := checkStatusRequest(req); err != nil {
		return nil, s.status(ctx, err)
	}
	if conn, fwd, err := s.forward(ctx); err == nil && fwd {
		fctx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
		resp, err := api.NewAdminClient(conn).Status(s.forwardContext(fctx), req)
		cancel()
		if err == nil {
			return resp, nil
		}
	}
	members, err := s.Node.Members()
	leaderID, leaderAddr := s.Node.Leader()
	if err != nil {
		return nil, ToStatus(ctx, fmt.Errorf("read configuration: %w", err), leaderAddr)
	}
	st := s.State.State()
	resp := &api.StatusResponse{Nodes: s.memberStatuses(ctx, members), LeaderId: leaderID, LeaderAddr: leaderAddr, Group: st.Group}
	if st.Layout != nil {
		resp.Layout = st.Layout.String()
	}
	if req.Sequences {
		s.addSequences(resp, req.SequenceLimit)
	}
	return resp, nil
}

// memberStatuses asks every member of members for its status, in
// parallel, each under its id, Raft address and suffrage as the
// configuration has them.
func (s *Server) memberStatuses(ctx context.Context, members []Member) []*api.NodeInfo {
	infos := make([]*api.NodeInfo, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := s.peerStatus(ctx, m)
			info.Id, info.RaftAddr, info.Voter = m.ID, m.RaftAddr, m.Voter
			infos[i] = info
		}()
	}
	wg.Wait()
	return infos
}

func (s *Server) peerStatus(ctx context.Context, m Member) *api.NodeInfo {
	if m.Self {
		return s.localStatus()
	}
	id, addr := m.ID, m.GRPCAddr
	unreachable := func(err error) *api.NodeInfo {
		return &api.NodeInfo{GrpcAddr: addr, Role: "unreachable", Error: peerError(err)}
	}
	if addr == "" {
		return unreachable(fmt.Errorf("gRPC address unknown"))
	}
	// A connection of its own when the cached one waits out a backoff:
	// a member that is back is listed as it answers, not as it failed
	// before it came back.
	conn, done, err := s.Peers.Ask(addr)
	if err != nil {
		return unreachable(err)
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, nodeStatusTimeout)
	defer cancel()
	// The call names this cluster: a node of another one at the address
	// refuses it. One that answers anyway (an older version) is not
	// reported as the member either.
	info, err := api.NewAdminClient(conn).NodeStatus(ctx, &api.NodeStatusRequest{})
	if err != nil {
		return unreachable(err)
	}
	if own := s.Node.ClusterID(); info.Id != id || own != "" && info.ClusterId != "" && info.ClusterId != own {
		return unreachable(fmt.Errorf("the node at %s answers as %q of cluster %q, not as member %q of cluster %q",
			addr, info.Id, info.ClusterId, id, own))
	}
	return info
}

// peerError is why a member's status could not be had, as status lists
// it: in words, without gRPC's wrapping ("rpc error: code = ...").
func peerError(err error) string {
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		return "cannot be reached (" + unreachable.Reason + ")"
	}
	s, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch s.Code() {
	case codes.DeadlineExceeded:
		return fmt.Sprintf("no answer within %s", nodeStatusTimeout)
	case codes.Canceled:
		return "the question was canceled"
	}
	return s.Message()
}

// atLeader serves a call that only the leader may serve: local runs it
// here when forward says so, else remote passes req on to the leader,
// marked as forwarded.
func atLeader[Req, Resp any](ctx context.Context, s *Server, req Req,
	remote func(api.AdminClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
	local func() (Resp, error)) (Resp, error) {
	conn, fwd, err := s.forward(ctx)
	if errors.Is(err, ErrNoLeader) {
		err = s.whyNoLeader(ctx, err)
	}
	if err != nil {
		var none Resp
		return none, err
	}
	if fwd {
		return remote(api.NewAdminClient(conn), s.forwardContext(ctx), req)
	}
	return local()
}

// whyNoLeader is err, this node's ErrNoLeader, with why when the cause is
// plain: fewer voters answer this node than a leader needs, so none can
// be elected, and no membership change can commit, not even the removal
// of a voter that is gone, until enough come back or the cluster is
// recovered. It asks every member (memberStatuses); a voter counts as
// answering only when it answers under its own id and does not refuse to
// serve. When enough answer, an election is under way, and err is left as
// it is: the caller retries.
func (s *Server) whyNoLeader(ctx context.Context, err error) error {
	members, merr := s.Node.Members()
	if merr != nil {
		return err
	}
	var voters int
	var up, down []string
	for i, info := range s.memberStatuses(ctx, members) {
		if !members[i].Voter {
			continue
		}
		voters++
		if info.Role == "unreachable" || info.Error != "" {
			down = append(down, fmt.Sprintf("%s (%s)", info.Id, info.Error))
		} else {
			up = append(up, info.Id)
		}
	}
	need := voters/2 + 1
	if voters == 0 || len(up) >= need {
		return err
	}
	if len(up) == 0 {
		up = []string{"none"}
	}
	return fmt.Errorf("%w: a leader needs %d of the %d voters, and %d answer this node (%s); not answering: %s. "+
		"Bring voters back until %d answer; if the others are lost for good, recover the cluster on the surviving node "+
		"with the newest data (ordo serve --recover; docs/operations.md, disaster recovery)",
		err, need, voters, len(up), strings.Join(up, ", "), strings.Join(down, ", "), need)
}

// Join implements api.AdminServer.
func (a *Admin) Join(ctx context.Context, req *api.JoinRequest) (*api.JoinResponse, error) {
	return &api.JoinResponse{}, a.srv.status(ctx, a.join(ctx, req))
}

func (a *Admin) join(ctx context.Context, req *api.JoinRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	for _, a := range []string{req.RaftAddr, req.GrpcAddr} {
		if err := CheckDialAddr(a); err != nil {
			return err
		}
	}
	_, err := atLeader(ctx, a.srv, req, api.AdminClient.Join, func() (*api.JoinResponse, error) {
		return nil, a.srv.Node.AddMember(ctx, req)
	})
	return err
}

// Register implements api.AdminServer.
func (a *Admin) Register(ctx context.Context, req *api.RegisterRequest) (*api.RegisterResponse, error) {
	return &api.RegisterResponse{}, a.srv.status(ctx, a.register(ctx, req))
}

// register records a member's new gRPC address, where followers forward
// calls and every leader hint points: so only the member itself may move
// it. grpcapi.Auth has checked the caller (a node certificate naming the new
// address, or the admin token in plaintext when one is set); the node, on
// the leader, checks the rest (Node.RegisterMember). It is not forwarded:
// the leader's check of the caller needs the member's own certificate.
func (a *Admin) register(ctx context.Context, req *api.RegisterRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	if err := CheckDialAddr(req.GrpcAddr); err != nil {
		return err
	}
	return a.srv.Node.RegisterMember(ctx, req.Id, req.GrpcAddr)
}

// Remove implements api.AdminServer.
func (a *Admin) Remove(ctx context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	return &api.RemoveResponse{}, a.srv.status(ctx, a.remove(ctx, req))
}

func (a *Admin) remove(ctx context.Context, req *api.RemoveRequest) error {
	if err := CheckNodeID(req.Id); err != nil {
		return err
	}
	_, err := atLeader(ctx, a.srv, req, api.AdminClient.Remove, func() (*api.RemoveResponse, error) {
		return nil, a.srv.Node.RemoveMember(ctx, req.Id)
	})
	return err
}

// TransferLeader implements api.AdminServer. It names the leader as this
// node sees it after the transfer, wherever the transfer was served.
func (a *Admin) TransferLeader(ctx context.Context, req *api.TransferLeaderRequest) (*api.TransferLeaderResponse, error) {
	err := a.transfer(ctx, req)
	leaderID, leaderAddr := a.srv.Node.Leader()
	return &api.TransferLeaderResponse{LeaderId: leaderID}, ToStatus(ctx, err, leaderAddr)
}

func (a *Admin) transfer(ctx context.Context, req *api.TransferLeaderRequest) error {
	if req.Id != "" {
		if err := CheckNodeID(req.Id); err != nil {
			return err
		}
	}
	_, err := atLeader(ctx, a.srv, req, api.AdminClient.TransferLeader, func() (*api.TransferLeaderResponse, error) {
		return nil, a.srv.Node.TransferLeadership(req.Id)
	})
	return err
}

// Backup implements api.AdminServer. A follower forwards it to the leader;
// without a leader it fails with the leader hint, if any.
func (a *Admin) Backup(ctx context.Context, req *api.BackupRequest) (*api.BackupResponse, error) {
	resp, err := atLeader(ctx, a.srv, req, api.AdminClient.Backup, func() (*api.BackupResponse, error) {
		return a.srv.Node.Backup(ctx)
	})
	return resp, a.srv.status(ctx, err)
}
