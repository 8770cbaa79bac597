package grpcapi

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
)

// ForwardedKey marks a request a follower forwarded, so that a node that
// is not the leader either never forwards it again: one hop at most.
const ForwardedKey = "ordo-forwarded"

// Forwarded reports whether the call in ctx was forwarded by a follower.
func Forwarded(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, ForwardedKey)) > 0
}

// ForwardContext marks a call passed on to the leader, names the cluster
// (so a leader address that now belongs to another cluster refuses it),
// asks for ticks when the caller reads them (api.TicksKey), and passes on
// the caller's admin token, which without TLS is the only proof of its
// rights.
func ForwardContext(ctx context.Context, cluster string, ticks bool) context.Context {
	kv := []string{ForwardedKey, "1"}
	if ticks {
		kv = append(kv, api.TicksKey, "1")
	}
	for _, v := range metadata.ValueFromIncomingContext(ctx, AuthorizationKey) {
		kv = append(kv, AuthorizationKey, v)
	}
	return withCluster(metadata.AppendToOutgoingContext(ctx, kv...), cluster)
}

// Peers caches one client connection per peer gRPC address. Every
// call a node makes to a peer goes over one of them, and names the node's
// cluster (see withCluster): an address of a member may now reach a node
// of another cluster (a moved or restored member, a reused port), which
// refuses the call instead of answering for its own cluster.
type Peers struct {
	creds   credentials.TransportCredentials
	cluster func() string // this node's cluster id, "" while it has none
	// adminToken, when set, goes with every Term stream this node opens.
	adminToken string
	mu         sync.Mutex
	conns      map[string]*grpc.ClientConn
}

// NewPeers returns an empty cache that dials with creds, names the
// cluster cluster() returns (read at each call: a node learns its id
// late), and sends adminToken, if set, with every Term stream.
func NewPeers(creds credentials.TransportCredentials, cluster func() string, adminToken string) *Peers {
	return &Peers{creds: creds, cluster: cluster, adminToken: adminToken, conns: map[string]*grpc.ClientConn{}}
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
func (p *Peers) nameCluster(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withCluster(ctx, p.cluster()), method, req, reply, cc, opts...)
}

func (p *Peers) nameClusterStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if method == api.Peer_Term_FullMethodName {
		// In plaintext the token is how a member's releases are told
		// from a forged one (Auth.MayRelease).
		ctx = WithAdminToken(ctx, p.adminToken)
	}
	return streamer(withCluster(ctx, p.cluster()), desc, cc, method, opts...)
}

// Get returns the connection to addr, dialing it the first time.
func (p *Peers) Get(addr string) (*grpc.ClientConn, error) {
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

// Close closes every connection; a later Get dials anew.
func (p *Peers) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = map[string]*grpc.ClientConn{}
}

// AnsweredForCluster reports whether a peer's answer, whose header is
// header, names own, this node's cluster: a node names its cluster in every
// answer once it has one (Auth checks and names it). Where an answer must come from
// this cluster, one that does not name it proves nothing: a node of
// another cluster that does not check what a call names (an older
// version), or one without a cluster id yet, may answer it. While this
// node has no cluster id itself, there is nothing to compare, and any
// answer counts.
func AnsweredForCluster(header metadata.MD, own string) bool {
	if own == "" {
		return true
	}
	v := header.Get(api.ClusterIDKey)
	return len(v) > 0 && !slices.ContainsFunc(v, func(id string) bool { return id != own })
}
