package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// Who may call what is package grpcapi's (Auth); this file hands it the
// node's configuration and the node as grpcapi.Node.

// newAuth is the authorization of n's calls. The admin token is hashed
// once here, for comparing in constant time.
func newAuth(n *Node) *grpcapi.Auth {
	cfg := grpcapi.AuthConfig{
		TLS:           n.cfg.TLS != nil,
		AdminSubjects: n.cfg.AdminSubjects,
		Logger:        n.logger.Named("grpc"),
	}
	if n.cfg.AdminToken != "" {
		cfg.AdminToken = secure.NewToken(n.cfg.AdminToken)
	}
	return grpcapi.NewAuth(grpcNode{n}, cfg)
}

// grpcNode is the node as package grpcapi needs it. Errors leave through
// toStatus, the one place this package maps its errors to codes.
type grpcNode struct{ n *Node }

func (g grpcNode) ClusterID() string         { return g.n.clusterID() }
func (g grpcNode) IsLeader() bool            { return g.n.isLeader() }
func (g grpcNode) Leader() (id, addr string) { return g.n.leader() }

func (g grpcNode) ToStatus(ctx context.Context, err error, leaderAddr string) error {
	return toStatus(ctx, err, leaderAddr)
}

func (g grpcNode) Forward(ctx context.Context) (*grpc.ClientConn, bool, error) {
	return g.n.forward(ctx)
}

func (g grpcNode) ForwardContext(ctx context.Context) context.Context { return g.n.forwardCtx(ctx) }
func (g grpcNode) CheckWidth(ctx context.Context) error               { return g.n.checkWidth(ctx) }

func (g grpcNode) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	return g.n.next(ctx, req)
}

func (g grpcNode) MaxCount() uint64 { return g.n.cfg.MaxCount }

func (g grpcNode) Assign(ctx context.Context, count uint64) (sequencer.Ticket, error) {
	return g.n.seq.Assign(ctx, count)
}

// Issue renders with this node's configured layout and group, as Next
// does, and counts the IDs in the node's metrics.
func (g grpcNode) Issue(b sequencer.Block) []*api.IDRun {
	runs := Runs(g.n.cfg.Layout, g.n.cfg.Group, b)
	g.n.metrics.Issued(b.Count)
	return runs
}

// ClusterLayout is the replicated layout and group: the cluster's durable
// word, not this node's flags.
func (g grpcNode) ClusterLayout() (*layout.Layout, uint64) {
	st := g.n.fsm.State()
	return st.Layout, st.Group
}

func (g grpcNode) Stop() <-chan struct{} { return g.n.stop }

func (g grpcNode) AnswerTerms(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	return g.n.confirmer.AnswerTerms(stream)
}

// mayRelease reports whether a Term stream's caller may release promises
// (see grpcapi.Auth.MayRelease).
func (n *Node) mayRelease(ctx context.Context) bool { return n.auth.MayRelease(ctx) }

// transportCredentials is how this node dials its peers: with its node
// certificate when TLS is on.
func transportCredentials(t *secure.TLS) credentials.TransportCredentials {
	return startup.DialCredentials(t)
}

// adminContext adds the admin token, if one is configured, to a call this
// node makes itself (joining): without TLS the token is its only proof.
func (n *Node) adminContext(ctx context.Context) context.Context {
	return grpcapi.WithAdminToken(ctx, n.cfg.AdminToken)
}

func (g grpcNode) ID() string                 { return g.n.cfg.ID }
func (g grpcNode) TLS() bool                  { return g.n.cfg.TLS != nil }
func (g grpcNode) Logger() hclog.Logger       { return g.n.logger }
func (g grpcNode) LocalStatus() *api.NodeInfo { return g.n.localStatus() }
func (g grpcNode) State() fsm.State           { return g.n.fsm.State() }
func (g grpcNode) IsMember(id string) bool    { member, _ := g.n.isMember(id); return member }
func (g grpcNode) Apply(c fsm.Command) error  { _, err := g.n.apply(c); return err }

func (g grpcNode) PeerConn(addr string) (*grpc.ClientConn, error) { return g.n.peers.Get(addr) }
func (g grpcNode) NodeAddr(id string) (string, bool)              { return g.n.fsm.NodeAddr(id) }
func (g grpcNode) MemberRaftAddr(id string) (string, bool)        { return g.n.memberRaftAddr(id) }

func (g grpcNode) ConfiguredLayout() (layout.Layout, uint64) { return g.n.cfg.Layout, g.n.cfg.Group }

func (g grpcNode) Servers() ([]raft.Server, error) {
	f := g.n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	return f.Configuration().Servers, nil
}

func (g grpcNode) CheckAnswersAs(ctx context.Context, grpcAddr, id string) error {
	return g.n.checkAnswersAs(ctx, grpcAddr, id)
}

// AddVoter and RemoveServer go through changeMembership, which waits for
// the change to commit, with the node's apply timeout.
func (g grpcNode) AddVoter(ctx context.Context, id, raftAddr string) error {
	return g.n.changeMembership(ctx, func() raft.Future {
		return g.n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, g.n.cfg.ApplyTimeout)
	})
}

func (g grpcNode) RemoveServer(ctx context.Context, id string) error {
	return g.n.changeMembership(ctx, func() raft.Future {
		return g.n.raft.RemoveServer(raft.ServerID(id), 0, g.n.cfg.ApplyTimeout)
	})
}

// HandOver goes through handOver, which stops the sequencer first.
func (g grpcNode) HandOver(srv raft.Server) error {
	if srv.ID == "" {
		return g.n.handOver(g.n.raft.LeadershipTransfer)
	}
	return g.n.handOver(func() raft.Future { return g.n.raft.LeadershipTransferToServer(srv.ID, srv.Address) })
}

func (g grpcNode) Backup(ctx context.Context) (*api.BackupResponse, error) { return g.n.backup(ctx) }
