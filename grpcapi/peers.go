package grpcapi

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
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

// peerBackoff is how a peer connection waits between attempts to
// reconnect: at most a second, not grpc-go's default of up to two
// minutes, so that a member that comes back is used again (forwarded
// calls, term rounds, status) within about a second of serving. A member
// that is down costs one connection attempt a second per node.
var peerBackoff = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 20 * time.Second, // grpc-go's default
}

// Get returns the connection to addr, dialing it the first time.
func (p *Peers) Get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := p.dial(addr)
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// Ask returns a connection to addr for a question whose answer must be
// current, such as a member's status, and the function to call once the
// question is answered. It is the cached connection (Get), unless that
// one is waiting out its reconnect backoff (TRANSIENT_FAILURE): a call on
// it would fail at once with the error of the last attempt, made before
// the member may have come back. Then the cached connection is told to
// reconnect now, and the question goes on a connection of its own, closed
// by done, whose one attempt is made now.
func (p *Peers) Ask(addr string) (conn *grpc.ClientConn, done func(), err error) {
	c, err := p.Get(addr)
	if err != nil {
		return nil, nil, err
	}
	if c.GetState() != connectivity.TransientFailure {
		return c, func() {}, nil
	}
	c.ResetConnectBackoff()
	fresh, err := p.dial(addr)
	if err != nil {
		return nil, nil, err
	}
	return fresh, func() { fresh.Close() }, nil
}

// dial opens a connection to addr with the peers' credentials, backoff
// and interceptors.
func (p *Peers) dial(addr string) (*grpc.ClientConn, error) {
	// passthrough: each (re)connection dials the address as written, so a
	// peer's DNS name is looked up again when its IP changes (a
	// rescheduled pod), instead of after grpc-go's DNS re-resolution
	// interval.
	c, err := grpc.NewClient("passthrough:///"+addr, append(api.DialWindows(),
		grpc.WithTransportCredentials(p.creds), grpc.WithConnectParams(peerBackoff),
		grpc.WithChainUnaryInterceptor(p.nameCluster, explainUnary(addr)),
		grpc.WithChainStreamInterceptor(p.nameClusterStream, explainStream(addr)))...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c, nil
}

// explainUnary and explainStream are the last interceptors of a
// connection to addr: a call that failed because addr could not be
// reached (a transport failure, not an answer) fails with an
// UnreachableError, which says so in words instead of grpc-go's transport
// internals, and is still Unavailable.
func explainUnary(addr string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return explainUnreachable(addr, invoker(ctx, method, req, reply, cc, opts...))
	}
}

func explainStream(addr string) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		st, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, explainUnreachable(addr, err)
		}
		return explainedStream{ClientStream: st, addr: addr}, nil
	}
}

// explainedStream is a stream whose end, when the connection failed, is
// an UnreachableError.
type explainedStream struct {
	grpc.ClientStream
	addr string
}

func (s explainedStream) RecvMsg(m any) error {
	return explainUnreachable(s.addr, s.ClientStream.RecvMsg(m))
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
