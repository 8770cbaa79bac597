package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/seed-e8569b35/ordo/api"
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

// The Admin service's calls: the rules are the node's (admin.go).

func (g grpcNode) LocalStatus() *api.NodeInfo                     { return g.n.localStatus() }
func (g grpcNode) PeerConn(addr string) (*grpc.ClientConn, error) { return g.n.peers.Get(addr) }
func (g grpcNode) Members() ([]grpcapi.Member, error)             { return g.n.members() }

func (g grpcNode) Join(ctx context.Context, req *api.JoinRequest) error {
	return g.n.addMember(ctx, req)
}

func (g grpcNode) Register(ctx context.Context, id, grpcAddr string) error {
	return g.n.registerMember(ctx, id, grpcAddr)
}

func (g grpcNode) Remove(ctx context.Context, id string) error { return g.n.removeMember(ctx, id) }

func (g grpcNode) TransferLeader(id string) error { return g.n.transferLeader(id) }

func (g grpcNode) Backup(ctx context.Context) (*api.BackupResponse, error) { return g.n.backup(ctx) }
