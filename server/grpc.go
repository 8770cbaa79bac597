package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// forwardedKey marks a request a follower forwarded, so that a node that
// is not the leader either never forwards it again: one hop at most.
const forwardedKey = "ordo-forwarded"

// nodeStatusTimeout bounds asking one peer for its status: the same
// bound a starting node's questions have.
const nodeStatusTimeout = startup.NodeStatusTimeout

func (n *Node) openGRPC() error {
	lis, err := net.Listen("tcp", n.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen for gRPC: %w", err)
	}
	n.grpcAddr = lis.Addr().String()
	if n.cfg.GRPCAdvertise != "" {
		n.grpcAddr = n.cfg.GRPCAdvertise
	} else if lis.Addr().(*net.TCPAddr).IP.IsUnspecified() {
		lis.Close()
		return fmt.Errorf("%w: gRPC address %q binds every interface; give an advertise address peers and clients can reach", ErrBadConfig, n.cfg.GRPCAddr)
	}
	opts := append(grpcapi.ServerOptions(),
		grpc.ChainUnaryInterceptor(n.measureUnary, n.auth.Unary, grpcapi.BoundUnary(n.cfg.RPCTimeout)),
		grpc.ChainStreamInterceptor(n.measureStream, n.auth.Stream),
	)
	if n.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(n.cfg.TLS.ServerConfig(n.logger.Named("grpc"), false))))
	}
	n.grpcServer = grpc.NewServer(opts...)
	lis = hostlimit.Wrap(lis, n.cfg.MaxConnsPerHost, n.logger.Named("grpc"))
	svc := &service{n: n}
	api.RegisterSequencerServer(n.grpcServer, grpcapi.NewSequencer(grpcNode{n}))
	api.RegisterAdminServer(n.grpcServer, svc)
	api.RegisterPeerServer(n.grpcServer, grpcapi.NewPeer(grpcNode{n}))
	api.RegisterFloorServer(n.grpcServer, grpcapi.NewFloor(n.stop))
	hs := n.newHealth()
	healthpb.RegisterHealthServer(n.grpcServer, hs)
	reflection.Register(n.grpcServer)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.grpcServer.Serve(lis); err != nil {
			n.logger.Named("grpc").Error("gRPC server stopped", "error", err)
		}
	}()
	return nil
}

// service implements the Admin gRPC service; the Sequencer and Peer
// services are grpcapi's, over grpcNode.
type service struct {
	api.UnimplementedAdminServer
	n *Node
}

// forward reports whether a request should go to the leader, and the
// connection to use. It returns an error when this node can neither serve
// nor forward.
func (n *Node) forward(ctx context.Context) (*grpc.ClientConn, bool, error) {
	if err := n.refusal(); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrRefusing, err)
	}
	if n.isLeader() || (n.cfg.TestHooks.UnsafeTrustReservation && n.seq.Serving()) {
		return nil, false, nil
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return nil, false, ErrNotLeader
	}
	id, addr := n.leader()
	if id == "" || addr == "" || id == n.cfg.ID {
		return nil, false, ErrNoLeader
	}
	conn, err := n.peers.get(addr)
	if err != nil {
		return nil, false, err
	}
	return conn, true, nil
}

// forwardCtx marks a call passed on to the leader, names this node's
// cluster (so a leader address that now belongs to another cluster refuses
// it), and passes on the caller's admin token, which without TLS is the
// only proof of its rights.
func (n *Node) forwardCtx(ctx context.Context) context.Context {
	kv := []string{forwardedKey, "1"}
	if n.cfg.Layout.Wide() {
		// The caller passed checkWidth here, or is this node's HTTP API,
		// which renders what the runs carry.
		kv = append(kv, api.TicksKey, "1")
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get(grpcapi.AuthorizationKey) {
			kv = append(kv, grpcapi.AuthorizationKey, v)
		}
	}
	return withCluster(metadata.AppendToOutgoingContext(ctx, kv...), n.clusterID())
}

// next is the path to IDs of one request, shared by the Sequencer
// service's Next (grpcapi) and the HTTP API: the count check, one forward
// to the leader, or the sequencer here. Its errors are unmapped.
func (n *Node) next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if req.Count == 0 || uint64(req.Count) > n.cfg.MaxCount {
		return nil, fmt.Errorf("%w: count %d, want 1 to %d", ErrBadCount, req.Count, n.cfg.MaxCount)
	}
	conn, fwd, err := n.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		return api.NewSequencerClient(conn).Next(n.forwardCtx(ctx), req)
	}
	b, err := n.seq.Next(ctx, uint64(req.Count))
	if err != nil {
		return nil, err
	}
	n.metrics.Issued(b.Count)
	return &api.NextResponse{
		Runs:       Runs(n.cfg.Layout, n.cfg.Group, b),
		LeaderId:   n.cfg.ID,
		LeaderAddr: n.grpcAddr,
	}, nil
}

// checkWidth refuses a Next or NextStream call that would read the runs
// wrongly: without api.TicksKey under a 128-bit layout (the runs carry
// ticks a caller must render), or with it under a 64-bit one.
func (n *Node) checkWidth(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	asks := len(md.Get(api.TicksKey)) > 0
	switch l := n.cfg.Layout; {
	case l.Wide() && !asks:
		return fmt.Errorf("layout %s makes 128-bit IDs: the runs carry ticks to render with the group and random bits, so the call must name %s in its metadata (the Go client's NextUUIDs and NextULIDs do): %w",
			l, api.TicksKey, layout.ErrWrongWidth)
	case !l.Wide() && asks:
		return fmt.Errorf("layout %s makes 64-bit IDs, and the call asks for ticks of a 128-bit layout (%s): %w", l, api.TicksKey, layout.ErrWrongWidth)
	}
	return nil
}

// Runs encodes a block of ticks as runs of IDs with a constant step: one
// run per time unit the block touches. Under a 128-bit layout, whose IDs
// a caller renders from ticks (api.TicksKey), the runs carry the ticks
// themselves, step 1: consecutive ticks differ by 1 across time units
// too, so one run holds the block unless its count overflows the field.
func Runs(l layout.Layout, group uint64, b sequencer.Block) []*api.IDRun {
	perUnit := uint64(1) << l.SeqBits
	runs := make([]*api.IDRun, 0, 1+b.Count/min(perUnit, math.MaxUint32))
	for t, left := b.First, b.Count; left > 0; {
		var run *api.IDRun
		if l.Wide() {
			// Only the count field's width ends a run of ticks.
			run = &api.IDRun{First: t, Count: uint32(min(left, math.MaxUint32)), Step: 1}
		} else {
			run = &api.IDRun{First: l.ID(t, group), Count: uint32(min(left, perUnit-t%perUnit)), Step: l.Step()}
		}
		inRun := uint64(run.Count)
		runs = append(runs, run)
		t += inRun
		left -= inRun
	}
	return runs
}

// NodeStatus implements api.AdminServer.
func (s *service) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	return s.n.localStatus(), nil
}

func (n *Node) localStatus() *api.NodeInfo {
	info := &api.NodeInfo{
		Id:           n.cfg.ID,
		RaftAddr:     n.RaftAddr(),
		GrpcAddr:     n.grpcAddr,
		Role:         roleName(n.raft.State()),
		Term:         n.raft.CurrentTerm(),
		AppliedIndex: n.raft.AppliedIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		HighWater:    n.fsm.HighWater(),
		Voter:        true,
		ClusterId:    n.clusterID(),
		// Raft keeps the last index and the term it stored: nothing else
		// gives a node either.
		HasState: n.raft.LastIndex() > 0 || n.raft.CurrentTerm() > 0,
	}
	switch last := n.raft.LastContact(); {
	case n.isLeader():
	case last.IsZero():
		info.LastContactMs = -1
	default:
		info.LastContactMs = time.Since(last).Milliseconds()
	}
	if err := n.refusal(); err != nil {
		info.Error = err.Error()
	}
	return info
}

func roleName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	default:
		return "shutdown"
	}
}

// Status implements api.AdminServer: it asks every member in parallel. A
// follower passes the question to the leader, whose view of the membership
// and addresses is the newest; without a leader it answers itself.
func (s *service) Status(ctx context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	if conn, fwd, err := s.n.forward(ctx); err == nil && fwd {
		fctx, cancel := context.WithTimeout(ctx, 2*nodeStatusTimeout)
		resp, err := api.NewAdminClient(conn).Status(s.n.forwardCtx(fctx), req)
		cancel()
		if err == nil {
			return resp, nil
		}
	}
	f := s.n.raft.GetConfiguration()
	leaderID, leaderAddr := s.n.leader()
	if err := f.Error(); err != nil {
		return nil, toStatus(ctx, fmt.Errorf("read configuration: %w", err), leaderAddr)
	}
	servers := f.Configuration().Servers
	st := s.n.fsm.State()
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

func (s *service) peerStatus(ctx context.Context, id, addr string) *api.NodeInfo {
	if id == s.n.cfg.ID {
		return s.n.localStatus()
	}
	unreachable := func(err error) *api.NodeInfo {
		return &api.NodeInfo{GrpcAddr: addr, Role: "unreachable", Error: err.Error()}
	}
	if addr == "" {
		return unreachable(fmt.Errorf("gRPC address unknown"))
	}
	conn, err := s.n.peers.get(addr)
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
	if own := s.n.clusterID(); info.Id != id || own != "" && info.ClusterId != "" && info.ClusterId != own {
		return unreachable(fmt.Errorf("the node at %s answers as %q of cluster %q, not as member %q of cluster %q",
			addr, info.Id, info.ClusterId, id, own))
	}
	return info
}

// Join implements api.AdminServer.
func (s *service) Join(ctx context.Context, req *api.JoinRequest) (*api.JoinResponse, error) {
	err := s.join(ctx, req)
	_, leaderAddr := s.n.leader()
	return &api.JoinResponse{}, toStatus(ctx, err, leaderAddr)
}

func (s *service) join(ctx context.Context, req *api.JoinRequest) error {
	if err := checkNodeID(req.Id); err != nil {
		return err
	}
	for _, a := range []string{req.RaftAddr, req.GrpcAddr} {
		if err := checkDialAddr(a); err != nil {
			return err
		}
	}
	conn, fwd, err := s.n.forward(ctx)
	if err != nil {
		return err
	}
	if fwd {
		_, err := api.NewAdminClient(conn).Join(s.n.forwardCtx(ctx), req)
		return err
	}
	theirs, err := layout.Parse(req.Layout)
	if err != nil {
		return fmt.Errorf("%w: the joining node's layout: %w", ErrBadRequest, err)
	}
	if theirs != s.n.cfg.Layout || req.Group != s.n.cfg.Group {
		return fmt.Errorf("%w: joining node %q has layout %s group %d, the cluster has layout %s group %d",
			ErrLayoutMismatch, req.Id, theirs, req.Group, s.n.cfg.Layout, s.n.cfg.Group)
	}
	f := s.n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	if err := startup.CheckJoinRequest(f.Configuration().Servers, req); err != nil {
		return err
	}
	if err := s.n.changeMembership(ctx, func() raft.Future {
		return s.n.raft.AddVoter(raft.ServerID(req.Id), raft.ServerAddress(req.RaftAddr), 0, s.n.cfg.ApplyTimeout)
	}); err != nil {
		return fmt.Errorf("add voter: %w", err)
	}
	if _, err := s.n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: req.Id, GRPCAddr: req.GrpcAddr}); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	s.n.logger.Info("node joined", "id", req.Id, "raft_addr", req.RaftAddr, "grpc_addr", req.GrpcAddr)
	return nil
}

// Register implements api.AdminServer.
func (s *service) Register(ctx context.Context, req *api.RegisterRequest) (*api.RegisterResponse, error) {
	err := s.register(ctx, req)
	_, leaderAddr := s.n.leader()
	return &api.RegisterResponse{}, toStatus(ctx, err, leaderAddr)
}

// register records a member's new gRPC address, where followers forward
// calls and every leader hint points: so only the member itself may move
// it. grpcapi.Auth has checked the caller (a node certificate naming the new
// address, or the admin token in plaintext when one is set); here, on the
// leader, the certificate must also name the member's Raft address, and
// the node at the new address must answer as that member of this cluster.
func (s *service) register(ctx context.Context, req *api.RegisterRequest) error {
	if err := checkNodeID(req.Id); err != nil {
		return err
	}
	if err := checkDialAddr(req.GrpcAddr); err != nil {
		return err
	}
	// Not forwarded: the address check needs the member's own certificate.
	if !s.n.isLeader() {
		return fmt.Errorf("%w: a member registers with the leader", ErrNotLeader)
	}
	if req.Id == s.n.cfg.ID {
		return fmt.Errorf("%w: %q is the leader, which records its own address", ErrBadRequest, req.Id)
	}
	raftAddr, member := s.n.memberRaftAddr(req.Id)
	if !member {
		return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, req.Id)
	}
	if addr, _ := s.n.fsm.NodeAddr(req.Id); addr == req.GrpcAddr {
		return nil
	}
	if s.n.cfg.TLS != nil {
		if err := grpcapi.CheckNodeAddrs(ctx, raftAddr); err != nil {
			return err
		}
	}
	if err := s.n.checkAnswersAs(ctx, req.GrpcAddr, req.Id); err != nil {
		return err
	}
	if _, err := s.n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: req.Id, GRPCAddr: req.GrpcAddr}); err != nil {
		return fmt.Errorf("record address: %w", err)
	}
	s.n.logger.Info("member registered a new gRPC address", "id", req.Id, "grpc_addr", req.GrpcAddr)
	return nil
}

// Remove implements api.AdminServer.
func (s *service) Remove(ctx context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	err := s.remove(ctx, req)
	_, leaderAddr := s.n.leader()
	return &api.RemoveResponse{}, toStatus(ctx, err, leaderAddr)
}

func (s *service) remove(ctx context.Context, req *api.RemoveRequest) error {
	if err := checkNodeID(req.Id); err != nil {
		return err
	}
	conn, fwd, err := s.n.forward(ctx)
	if err != nil {
		return err
	}
	if fwd {
		_, err := api.NewAdminClient(conn).Remove(s.n.forwardCtx(ctx), req)
		return err
	}
	if member, _ := s.n.isMember(req.Id); !member {
		return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, req.Id)
	}
	if err := s.n.changeMembership(ctx, func() raft.Future {
		return s.n.raft.RemoveServer(raft.ServerID(req.Id), 0, s.n.cfg.ApplyTimeout)
	}); err != nil {
		return fmt.Errorf("remove server: %w", err)
	}
	if req.Id == s.n.cfg.ID {
		// The leader removed itself and has stepped down, so it cannot
		// commit more; its address entry stays, unused.
		return nil
	}
	if _, err := s.n.apply(fsm.Command{Op: fsm.OpDeleteNode, NodeID: req.Id}); err != nil {
		return fmt.Errorf("forget address: %w", err)
	}
	s.n.logger.Info("node removed", "id", req.Id)
	return nil
}

// TransferLeader implements api.AdminServer.
func (s *service) TransferLeader(ctx context.Context, req *api.TransferLeaderRequest) (*api.TransferLeaderResponse, error) {
	err := s.transfer(ctx, req)
	leaderID, leaderAddr := s.n.leader()
	return &api.TransferLeaderResponse{LeaderId: leaderID}, toStatus(ctx, err, leaderAddr)
}

func (s *service) transfer(ctx context.Context, req *api.TransferLeaderRequest) error {
	if req.Id != "" {
		if err := checkNodeID(req.Id); err != nil {
			return err
		}
	}
	conn, fwd, err := s.n.forward(ctx)
	if err != nil {
		return err
	}
	if fwd {
		_, err := api.NewAdminClient(conn).TransferLeader(s.n.forwardCtx(ctx), req)
		return err
	}
	if req.Id == "" {
		return s.n.handOver(s.n.raft.LeadershipTransfer)
	}
	if req.Id == s.n.cfg.ID {
		return nil // already leads
	}
	f := s.n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == req.Id {
			return s.n.handOver(func() raft.Future { return s.n.raft.LeadershipTransferToServer(srv.ID, srv.Address) })
		}
	}
	return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, req.Id)
}

// peerConns caches one client connection per peer gRPC address. Every
// call a node makes to a peer goes over one of them, and names the node's
// cluster (see withCluster): an address of a member may now reach a node
// of another cluster (a moved or restored member, a reused port), which
// refuses the call instead of answering for its own cluster.
type peerConns struct {
	creds   credentials.TransportCredentials
	cluster func() string // this node's cluster id, "" while it has none
	// adminToken, when set, goes with every Term stream this node opens.
	adminToken string
	mu         sync.Mutex
	conns      map[string]*grpc.ClientConn
}

func newPeerConns(creds credentials.TransportCredentials, cluster func() string, adminToken string) *peerConns {
	return &peerConns{creds: creds, cluster: cluster, adminToken: adminToken, conns: map[string]*grpc.ClientConn{}}
}

// withCluster names cluster id in ctx's outgoing call (api.ClusterIDKey),
// unless id is "" (nothing to name yet) or the call names one already.
func withCluster(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	if len(metadata.ValueFromOutgoingContext(ctx, api.ClusterIDKey)) > 0 {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, api.ClusterIDKey, id)
}

// nameCluster and nameClusterStream are the interceptors of every peer
// connection: each call, and each stream when it opens, names the cluster.
func (p *peerConns) nameCluster(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withCluster(ctx, p.cluster()), method, req, reply, cc, opts...)
}

func (p *peerConns) nameClusterStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method == api.Peer_Term_FullMethodName {
		// In plaintext the token is how a member's releases are told
		// from a forged one (grpcapi.Auth.MayRelease).
		ctx = grpcapi.WithAdminToken(ctx, p.adminToken)
	}
	return streamer(withCluster(ctx, p.cluster()), desc, cc, method, opts...)
}

// answeredForCluster reports whether a peer's answer, whose header is
// header, names this node's cluster: a node names its cluster in every
// answer once it has one (grpcapi.Auth checks and names it). Where an answer must come from
// this cluster, one that does not name it proves nothing: a node of
// another cluster that does not check what a call names (an older
// version), or one without a cluster id yet, may answer it. While this
// node has no cluster id itself, there is nothing to compare, and any
// answer counts.
func (n *Node) answeredForCluster(header metadata.MD) bool {
	own := n.clusterID()
	if own == "" {
		return true
	}
	v := header.Get(api.ClusterIDKey)
	return len(v) > 0 && !slices.ContainsFunc(v, func(id string) bool { return id != own })
}

func (p *peerConns) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	// passthrough: each (re)connection dials the address as written, so a
	// peer's DNS name is looked up again when its IP changes (a
	// rescheduled pod), instead of after grpc-go's DNS re-resolution
	// interval.
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(p.creds),
		grpc.WithChainUnaryInterceptor(p.nameCluster), grpc.WithChainStreamInterceptor(p.nameClusterStream))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

func (p *peerConns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}
