package grpcapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// Cluster is what a call needs to know of the node's place in its
// cluster. *server.Node satisfies it.
type Cluster interface {
	// ClusterID is the id of the node's cluster; "" while it has none.
	ClusterID() string
	// IsLeader reports whether Raft says the node leads now.
	IsLeader() bool
	// Leader is the leader's id and gRPC address, as far as the node
	// knows; empty when it knows none.
	Leader() (id, addr string)
}

// Node is what the services need of the node that serves them: its place
// in the cluster, and its rules, which stay the node's: why it refuses,
// whether it is ready, and who may join, register, leave or lead and how
// those changes commit. Its errors are unmapped: the services map them
// (ToStatus). *server.Node satisfies it.
type Node interface {
	Cluster
	// Leads reports whether the calls only a leader serves are served
	// here: while the node leads.
	Leads() bool
	// Refusal is why the node refuses to serve for good; nil while it
	// does not.
	Refusal() error
	// Ready is nil when the node can serve IDs now, and why not
	// otherwise.
	Ready() error
	// Members is the Raft configuration as Status reports it, with each
	// member's recorded gRPC address.
	Members() ([]Member, error)
	// AddMember adds the node req describes as a voter, on the leader,
	// once it matches the cluster, and records its gRPC address.
	AddMember(ctx context.Context, req *api.JoinRequest) error
	// RegisterMember records member id's new gRPC address, on the
	// leader, once the caller and the node at grpcAddr prove to be that
	// member.
	RegisterMember(ctx context.Context, id, grpcAddr string) error
	// RemoveMember removes member id, on the leader, and forgets its
	// address.
	RemoveMember(ctx context.Context, id string) error
	// TransferLeadership hands leadership, on the leader, to member id,
	// or to whichever voter Raft picks when id is "". Raft's transfer
	// takes no context, so neither does this.
	TransferLeadership(id string) error
	// Backup copies the replicated state on the leader.
	Backup(ctx context.Context) (*api.BackupResponse, error)
	// CreateSequence and DropSequence commit a named sequence's
	// definition, on the leader.
	CreateSequence(ctx context.Context, req *api.CreateSequenceRequest) error
	DropSequence(ctx context.Context, name string) error
}

// Raft is what a node's status reads of its Raft instance. *raft.Raft
// satisfies it.
type Raft interface {
	State() raft.RaftState
	CurrentTerm() uint64
	AppliedIndex() uint64
	CommitIndex() uint64
	LastIndex() uint64
	LastContact() time.Time
}

// State is the replicated state as calls read it. *fsm.FSM satisfies it.
type State interface {
	State() fsm.State
	HighWater() uint64
	// Marks is W and the tracked frontier, in ticks.
	Marks() (settled, frontier uint64)
	ClusterVersion() int
	Sequences() map[string]*fsm.Sequence
	Sequence(name string) (fsm.Sequence, bool)
	// SequencesOf is Sequence for several names at one instant; an
	// unknown name's has no Kind.
	SequencesOf(names []string) []fsm.Sequence
}

// IDs is where IDs come from: the leader's sequencer. *sequencer.Sequencer
// satisfies it.
type IDs interface {
	// Next hands out n ticks once this node has confirmed it leads.
	Next(ctx context.Context, n uint64) (sequencer.Block, error)
	// Assign assigns n ticks to a stream's call; they are handed out once
	// the ticket's confirmation round ends.
	Assign(ctx context.Context, n uint64) (sequencer.Ticket, error)
}

// Voter answers a leader's term rounds (leadership.Confirmer).
type Voter interface {
	AnswerTerms(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error
}

// Meter counts what calls did (*metrics.Metrics).
type Meter interface {
	// Served counts one call of method that ended with code after d.
	Served(method, code string, d time.Duration)
	// Issued counts IDs handed out.
	Issued(count uint64)
	// StreamRead counts a NextStream message read with calls calls, and
	// StreamSent one sent with answers answers.
	StreamRead(calls int)
	StreamSent(answers int)
	// Usage is what the node's process spent, and these counts, since it
	// started.
	Usage() *api.NodeUsage
	// IssuedIn counts counts[i] IDs handed out of named sequence
	// names[i], for each i; Issued counts them too.
	IssuedIn(names []string, counts []uint64)
	// SequenceRate is how many IDs of named sequence name this node
	// handed out as leader, and how many a second over about the last
	// RateWindow.
	SequenceRate(name string) (issued uint64, perSecond float64)
	// RateWindow is the interval SequenceRate measures over.
	RateWindow() time.Duration
}

// Config is what the node was configured with that its calls use.
type Config struct {
	// ID is the node's id; RaftAddr and GRPCAddr the addresses peers
	// and clients reach it at.
	ID, RaftAddr, GRPCAddr string
	// Layout and Group are this node's flags, which its IDs are rendered
	// with: the cluster's, or the node refuses to serve (Node.Refusal).
	Layout layout.Layout
	Group  uint64
	// MaxCount is the most IDs one call may ask for.
	MaxCount uint64
	// RPCTimeout bounds every unary call (BoundUnary).
	RPCTimeout time.Duration
}

// Server serves one node's calls, each from its checks to its answer:
// where it is served (here, or one forward to the leader), the sequencer,
// the encoding of IDs, the metrics, and the mapping of errors. The gRPC
// services (Sequencer, Admin, Peer, Floor) and package httpapi's handlers
// share it, so every way in has one path to IDs.
type Server struct {
	cfg Config
	Parts
}

// Parts are the node's parts a Server serves from: the real types, each
// satisfying the interface its field names.
type Parts struct {
	Node  Node
	Raft  Raft
	State State
	IDs   IDs
	// Settle serves tracked reservations and W.
	Settle Settle
	Voter  Voter
	Peers  *Peers
	Meter  Meter
	Auth   *Auth
	// Stop is closed when the node closes: streams end then.
	Stop <-chan struct{}
}

// NewServer returns the Server of a node configured with cfg.
func NewServer(cfg Config, p Parts) *Server { return &Server{cfg: cfg, Parts: p} }

// Register registers every service on g.
func (s *Server) Register(g *grpc.Server) {
	api.RegisterSequencerServer(g, &Sequencer{srv: s})
	api.RegisterAdminServer(g, &Admin{srv: s})
	api.RegisterPeerServer(g, &Peer{srv: s})
	api.RegisterFloorServer(g, NewFloor(s.Stop))
}

// Options are the server options of the node's gRPC server, the
// interceptors in their order, which is a promise: metrics see every
// call, refusals included; the cluster-id check and authorization run
// before any handler; and the deadline bound applies only to calls that
// were let in.
func (s *Server) Options() []grpc.ServerOption {
	return append(ServerOptions(),
		grpc.ChainUnaryInterceptor(s.measureUnary, s.Auth.Unary, BoundUnary(s.cfg.RPCTimeout)),
		grpc.ChainStreamInterceptor(s.measureStream, s.Auth.Stream),
	)
}

// measureUnary counts and times every unary call, denied ones included.
func (s *Server) measureUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	s.Meter.Served(info.FullMethod, status.Code(err).String(), time.Since(start))
	return resp, err
}

// measureStream counts and times every stream, from open to end.
func (s *Server) measureStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	s.Meter.Served(info.FullMethod, status.Code(err).String(), time.Since(start))
	return err
}

// Leader is the leader's id and gRPC address, as far as the node knows.
func (s *Server) Leader() (id, addr string) { return s.Node.Leader() }

// status is err as the status a caller gets, naming the leader's address
// whenever the node knows it, so the caller can go there.
func (s *Server) status(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	leaderID, leaderAddr := s.Node.Leader()
	return toStatus(ctx, err, leaderID, leaderAddr)
}

// forward reports whether a call only the leader serves goes to the
// leader, and the connection to use; an error when this node can neither
// serve it nor forward it. It is the one place that decides where such a
// call is served.
func (s *Server) forward(ctx context.Context) (*grpc.ClientConn, bool, error) {
	if err := s.Node.Refusal(); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrRefusing, err)
	}
	if s.Node.Leads() {
		return nil, false, nil
	}
	if Forwarded(ctx) {
		return nil, false, sequencer.ErrNotLeader
	}
	id, addr := s.Node.Leader()
	if id == "" || addr == "" || id == s.cfg.ID {
		return nil, false, ErrNoLeader
	}
	conn, err := s.Peers.Get(addr)
	if err != nil {
		return nil, false, err
	}
	return conn, true, nil
}

// forwardContext marks a call passed on to the leader, names this node's
// cluster (so a leader address that now belongs to another cluster
// refuses it), and passes on the caller's admin token.
func (s *Server) forwardContext(ctx context.Context) context.Context {
	// Under a 128-bit layout the caller passed checkWidth here, or is
	// this node's HTTP API, which renders what the runs carry: it reads
	// ticks.
	return ForwardContext(ctx, s.Node.ClusterID(), s.cfg.Layout.Wide())
}

// NextIDs is the path to IDs of one request, which gRPC's Next and the
// HTTP API share: the count check, then one forward to the leader or the
// sequencer here, and the runs of IDs. Its errors are statuses.
func (s *Server) NextIDs(ctx context.Context, count uint32) (*api.NextResponse, error) {
	resp, err := s.nextIDs(ctx, &api.NextRequest{Count: count})
	return resp, s.status(ctx, err)
}

func (s *Server) nextIDs(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if err := s.checkCount(req.Count); err != nil {
		return nil, err
	}
	if req.IdempotencyKey != "" {
		return s.keyedNext(ctx, req)
	}
	conn, fwd, err := s.forward(ctx)
	if err != nil {
		return nil, err
	}
	if fwd {
		return api.NewSequencerClient(conn).Next(s.forwardContext(ctx), req)
	}
	b, err := s.IDs.Next(ctx, uint64(req.Count))
	if err != nil {
		return nil, err
	}
	return &api.NextResponse{Runs: s.issue(b), LeaderId: s.cfg.ID, LeaderAddr: s.cfg.GRPCAddr}, nil
}

// checkCount refuses a count of IDs no call may ask for.
func (s *Server) checkCount(count uint32) error {
	if count == 0 || uint64(count) > s.cfg.MaxCount {
		return fmt.Errorf("%w: count %d, want 1 to %d", sequencer.ErrBadCount, count, s.cfg.MaxCount)
	}
	return nil
}

// issue renders a confirmed block as runs of IDs with this node's layout
// and group, and counts them as issued.
func (s *Server) issue(b sequencer.Block) []*api.IDRun {
	s.Meter.Issued(b.Count)
	return api.Runs(s.cfg.Layout, s.cfg.Group, b.First, b.Count)
}

// checkWidth refuses a Next or NextStream call that would read the runs
// wrongly: without api.TicksKey under a 128-bit layout (the runs carry
// ticks a caller must render), or with it under a 64-bit one.
func (s *Server) checkWidth(ctx context.Context) error {
	// One key, not a copy of the whole metadata: this runs on every call.
	asks := len(metadata.ValueFromIncomingContext(ctx, api.TicksKey)) > 0
	switch l := s.cfg.Layout; {
	case l.Wide() && !asks:
		return fmt.Errorf("layout %s makes 128-bit IDs: the runs carry ticks to render with the group and random bits, so the call must name %s in its metadata (the Go client's NextUUIDs and NextULIDs do): %w",
			l, api.TicksKey, layout.ErrWrongWidth)
	case !l.Wide() && asks:
		return fmt.Errorf("layout %s makes 64-bit IDs, and the call asks for ticks of a 128-bit layout (%s): %w", l, api.TicksKey, layout.ErrWrongWidth)
	}
	return nil
}

// ClusterLayout is the layout and group the cluster recorded: its durable
// word, not this node's flags. Its error, while the node does not know
// them yet, is a status.
func (s *Server) ClusterLayout() (layout.Layout, uint64, error) {
	st := s.State.State()
	if st.Layout == nil {
		return layout.Layout{}, 0, s.status(context.Background(), fmt.Errorf("%w: the cluster's layout is not known here yet", ErrNotReady))
	}
	return *st.Layout, st.Group, nil
}

// Ready is nil when the node can serve IDs now, and a status that says
// why not otherwise.
func (s *Server) Ready() error { return s.status(context.Background(), s.Node.Ready()) }

// localStatus is the node's own status, as NodeStatus answers.
func (s *Server) localStatus() *api.NodeInfo {
	info := &api.NodeInfo{
		Id:             s.cfg.ID,
		RaftAddr:       s.cfg.RaftAddr,
		GrpcAddr:       s.cfg.GRPCAddr,
		Role:           strings.ToLower(s.Raft.State().String()), // as ordo_raft_role names it
		Term:           s.Raft.CurrentTerm(),
		AppliedIndex:   s.Raft.AppliedIndex(),
		CommitIndex:    s.Raft.CommitIndex(),
		HighWater:      s.State.HighWater(),
		Voter:          true,
		ClusterId:      s.Node.ClusterID(),
		ReadsVersion:   fsm.Reads,
		ClusterVersion: uint32(s.State.ClusterVersion()),
		Layout:         s.cfg.Layout.String(),
		Group:          s.cfg.Group,
		// Raft keeps the last index and the term it stored: nothing else
		// gives a node either.
		HasState:     s.Raft.LastIndex() > 0 || s.Raft.CurrentTerm() > 0,
		LastLogIndex: s.Raft.LastIndex(),
		Usage:        s.Meter.Usage(),
	}
	info.WatermarkTick, _ = s.State.Marks()
	switch last := s.Raft.LastContact(); {
	case s.Raft.State() == raft.Leader:
	case last.IsZero():
		info.LastContactMs = -1
	default:
		info.LastContactMs = time.Since(last).Milliseconds()
	}
	if err := s.Node.Refusal(); err != nil {
		info.Error = err.Error()
	}
	return info
}
