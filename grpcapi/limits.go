package grpcapi

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits on what one caller can make a node hold over gRPC. Requests are
// small (a count, a node id, two addresses), so the message bound is far
// above any honest request; the rest bound memory and goroutines per
// caller. How many connections one host may hold is package hostlimit's.
const (
	// MaxMessageBytes bounds one gRPC message in either direction.
	MaxMessageBytes = 1 << 20
	// maxStreamsPerConn bounds concurrent calls on one connection.
	maxStreamsPerConn = 1024
	// HandshakeTimeout bounds connection setup, TLS included, so a peer
	// that opens connections and sends nothing cannot hold them. The
	// node's Raft stream layer keeps the same bound on its handshakes.
	HandshakeTimeout = 10 * time.Second
)

// ServerOptions are the gRPC server options that enforce the limits
// above, and keepalives that find dead connections: a client that vanished
// without closing its stream frees it within a minute. Every gRPC server
// a node runs takes them, the short-lived one of its start-up checks too.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Clients may ping at most every 10 s; more often is abuse and
		// closes the connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// BoundUnary gives every unary call a deadline of at most timeout, so no
// call holds a goroutine longer, whatever deadline its caller chose. A
// shorter deadline the caller chose is kept.
func BoundUnary(timeout time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return handler(ctx, req)
	}
}
