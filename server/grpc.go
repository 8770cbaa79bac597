package server

import (
	"context"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/hostlimit"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// nodeStatusTimeout bounds asking one peer for its status: the same
// bound a starting node's questions have, and grpcapi's Status keeps.
const nodeStatusTimeout = startup.NodeStatusTimeout

// openGRPC serves package grpcapi's services on Config.GRPCAddr. The node
// builds the server itself, because the order of the interceptors is a
// promise: metrics see every call, refusals included; the cluster-id
// check and authorization run before any handler; and the deadline bound
// applies only to calls that were let in.
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
		return fmt.Errorf("%w: gRPC address %q binds every interface; give an advertise address peers and clients can reach", startup.ErrBadConfig, n.cfg.GRPCAddr)
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
	// Every service reaches the node through grpcNode: package grpcapi
	// declares what it needs, and errors leave through toStatus.
	api.RegisterSequencerServer(n.grpcServer, grpcapi.NewSequencer(grpcNode{n}))
	api.RegisterAdminServer(n.grpcServer, grpcapi.NewAdmin(grpcNode{n}))
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
	if grpcapi.Forwarded(ctx) {
		return nil, false, sequencer.ErrNotLeader
	}
	id, addr := n.leader()
	if id == "" || addr == "" || id == n.cfg.ID {
		return nil, false, ErrNoLeader
	}
	conn, err := n.peers.Get(addr)
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
	// Under a 128-bit layout the caller passed checkWidth here, or is this
	// node's HTTP API, which renders what the runs carry: it reads ticks.
	return grpcapi.ForwardContext(ctx, n.clusterID(), n.cfg.Layout.Wide())
}

// next is the path to IDs of one request, shared by the Sequencer
// service's Next (grpcapi) and the HTTP API: the count check, one forward
// to the leader, or the sequencer here. Its errors are unmapped.
func (n *Node) next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if req.Count == 0 || uint64(req.Count) > n.cfg.MaxCount {
		return nil, fmt.Errorf("%w: count %d, want 1 to %d", sequencer.ErrBadCount, req.Count, n.cfg.MaxCount)
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
	// One key, not a copy of the whole metadata: this runs on every call.
	asks := len(metadata.ValueFromIncomingContext(ctx, api.TicksKey)) > 0
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
