package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/startup"
)

// Who may call what. With TLS every caller has passed the handshake, so
// it holds a certificate signed by the cluster CA: that is enough to ask
// for IDs and read status. Term rounds need a node certificate, and
// changing the cluster needs an admin: a node, a configured subject, or
// the admin token. Without TLS nobody can be told apart, so everything is
// open except the admin calls when a token is configured.

// access is what a method requires of its caller.
type access int

const (
	accessClient access = iota // ask for IDs, read status
	accessNode                 // answer term rounds
	accessAdmin                // join, remove, transfer leadership, backup
)

// methodAccess is the one table of what each method requires; methods
// not named need a client.
func methodAccess(method string) access {
	switch method {
	case api.Admin_Join_FullMethodName, api.Admin_Remove_FullMethodName, api.Admin_TransferLeader_FullMethodName,
		// A backup names every member and the cluster id: operators only.
		api.Admin_Backup_FullMethodName:
		return accessAdmin
	case api.Peer_Term_FullMethodName, api.Admin_Register_FullMethodName:
		return accessNode
	}
	return accessClient
}

// authorizationKey carries "Bearer <admin token>".
const authorizationKey = "authorization"

// caller is who made a call, as far as this node can tell.
type caller struct {
	addr  string
	cert  *x509.Certificate // nil without TLS
	token string            // presented bearer token, if any
}

func callerOf(ctx context.Context) caller {
	var c caller
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			c.addr = p.Addr.String()
		}
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			c.cert = info.State.PeerCertificates[0]
		}
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for _, v := range md.Get(authorizationKey) {
			if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
				c.token = tok
			}
		}
	}
	return c
}

func (c caller) subject() string {
	if c.cert == nil {
		return "(no certificate)"
	}
	return c.cert.Subject.String()
}

func (c caller) isNode() bool { return c.cert != nil && secure.IsNode(c.cert) }

// authorize returns nil if the caller may call method with req (nil for
// a stream), and an ErrPermissionDenied naming why otherwise.
func (n *Node) authorize(ctx context.Context, method string, req any) error {
	access := methodAccess(method)
	if access == accessClient {
		// The handshake already required a CA-signed certificate; this
		// runs on every call, so it reads nothing more.
		return nil
	}
	c := callerOf(ctx)
	tls := n.cfg.TLS != nil
	tokenOK := n.adminToken != nil && c.token != "" && n.adminToken.Matches(c.token)
	var err error
	switch access {
	case accessNode:
		if tls && !c.isNode() {
			err = fmt.Errorf("%w: %s needs a node certificate", ErrPermissionDenied, method)
		} else if reg, ok := req.(*api.RegisterRequest); ok && tls {
			err = checkNodeAddrs(c, reg.GrpcAddr)
		} else if ok && n.adminToken != nil && !tokenOK {
			// Members hold the admin token too, and present it.
			err = fmt.Errorf("%w: %s needs the admin token", ErrPermissionDenied, method)
		}
	case accessAdmin:
		switch {
		case tokenOK:
		case !tls && n.adminToken == nil:
			// Plaintext without a token: nothing to check against.
		case tls && slices.Contains(n.cfg.AdminSubjects, c.subject()):
		case c.isNode():
			err = n.checkNodeJoin(c, req)
		case c.token != "":
			err = fmt.Errorf("%w: %s: wrong admin token", ErrPermissionDenied, method)
		default:
			err = fmt.Errorf("%w: %s needs an admin certificate or the admin token", ErrPermissionDenied, method)
		}
	}
	switch {
	case errors.Is(err, ErrNotLeader):
		// A redirect, not a denial: the caller is sent to the leader,
		// where the call is checked.
		n.logger.Named("grpc").Debug("sent to the leader", "method", method, "subject", c.subject(), "from", c.addr, "reason", err)
	case err != nil:
		n.logger.Named("grpc").Warn("denied", "method", method, "subject", c.subject(), "from", c.addr, "reason", err)
	}
	return err
}

// checkNodeJoin lets a node, not otherwise an admin, join only itself:
// the addresses it joins at must be named in its certificate, so a stolen
// or misused node certificate cannot enrol some other address. The check
// needs the joining node's own certificate, so it runs on the leader: a
// follower does not forward such a join (a forwarded call carries the
// follower's certificate, and the forwarded mark can be forged) but
// answers NotLeader with the leader's address, which Node.Join follows.
func (n *Node) checkNodeJoin(c caller, req any) error {
	join, ok := req.(*api.JoinRequest)
	if !ok {
		return nil
	}
	if !n.isLeader() {
		return fmt.Errorf("%w: a node joins through the leader", ErrNotLeader)
	}
	return checkNodeAddrs(c, join.RaftAddr, join.GrpcAddr)
}

// checkNodeAddrs lets a node claim only addresses its certificate names.
func checkNodeAddrs(c caller, addrs ...string) error {
	for _, addr := range addrs {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("%w: address %q: %w", ErrBadRequest, addr, err)
		}
		if !secure.Covers(c.cert, host) {
			return fmt.Errorf("%w: %s, which the node's certificate (%s) does not name", ErrPermissionDenied, addr, c.subject())
		}
	}
	return nil
}

func (n *Node) authorizeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.checkCluster(ctx, grpc.SetHeader); err != nil {
		return nil, toStatus(ctx, err, "") // no hint: it names this cluster's leader
	}
	if err := n.authorize(ctx, info.FullMethod, req); err != nil {
		_, leaderAddr := n.leader()
		return nil, toStatus(ctx, err, leaderAddr)
	}
	return handler(ctx, req)
}

func (n *Node) authorizeStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	setHeader := func(_ context.Context, md metadata.MD) error { return ss.SetHeader(md) }
	if err := n.checkCluster(ss.Context(), setHeader); err != nil {
		return toStatus(ss.Context(), err, "")
	}
	if err := n.authorize(ss.Context(), info.FullMethod, nil); err != nil {
		return toStatus(ss.Context(), err, "")
	}
	return handler(srv, ss)
}

// checkCluster names this node's cluster in the call's header, and refuses
// a call that names another (api.ClusterIDKey). Before the cluster has an
// id, nothing is checked: nothing could be confused with it.
func (n *Node) checkCluster(ctx context.Context, setHeader func(context.Context, metadata.MD) error) error {
	own := n.clusterID()
	if own == "" {
		return nil
	}
	_ = setHeader(ctx, metadata.Pairs(api.ClusterIDKey, own))
	// One key, not a copy of the whole metadata: this runs on every call.
	for _, want := range metadata.ValueFromIncomingContext(ctx, api.ClusterIDKey) {
		if want != own {
			return fmt.Errorf("%w: this node belongs to cluster %s, the call was meant for cluster %s", ErrWrongCluster, own, want)
		}
	}
	return nil
}

// mayRelease reports whether a Term stream's caller may release promises.
// With TLS, authorize let only node certificates open it. In plaintext
// with an admin token, members present the token (peerConns sends it);
// without one there is nothing to tell a member by, as for every call.
func (n *Node) mayRelease(ctx context.Context) bool {
	if n.cfg.TLS != nil || n.adminToken == nil {
		return true
	}
	c := callerOf(ctx)
	return c.token != "" && n.adminToken.Matches(c.token)
}

// transportCredentials is how this node dials its peers: with its node
// certificate when TLS is on.
func transportCredentials(t *secure.TLS) credentials.TransportCredentials {
	return startup.DialCredentials(t)
}

// adminContext adds the admin token, if one is configured, to a call this
// node makes itself (joining): without TLS the token is its only proof.
func (n *Node) adminContext(ctx context.Context) context.Context {
	if n.cfg.AdminToken == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer "+n.cfg.AdminToken)
}
