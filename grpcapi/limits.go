package grpcapi

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/seed-e8569b35/ordo/api"
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
	// maxIDLength and maxAddrLength bound admin fields.
	maxIDLength   = 64
	maxAddrLength = 255
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
		grpc.InitialWindowSize(api.StreamWindow),
		grpc.InitialConnWindowSize(api.ConnWindow),
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

// CheckNodeID refuses ids that could not be a flag value, a file name or a
// log field without quoting: letters, digits, '.', '_' and '-', not
// starting with '-', at most maxIDLength bytes. The Admin service checks
// every request's ids with it, and the node its own configured id, so
// both accept the same ids.
func CheckNodeID(id string) error {
	if id == "" || len(id) > maxIDLength || id[0] == '-' {
		return fmt.Errorf("%w: node id %q: want 1 to %d characters, not starting with '-'", ErrBadRequest, id, maxIDLength)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: node id %q: only letters, digits, '.', '_' and '-' are allowed", ErrBadRequest, id)
		}
	}
	return nil
}

// CheckDialAddr refuses an address other nodes could not dial: it must be
// host:port with a host that is not a wildcard and a port from 1 to 65535.
// The Admin service and the node's recovery share it, as CheckNodeID.
func CheckDialAddr(addr string) error {
	if len(addr) > maxAddrLength {
		return fmt.Errorf("%w: address of %d bytes, at most %d", ErrBadRequest, len(addr), maxAddrLength)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: address %q: %v", ErrBadRequest, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: address %q: port must be 1 to 65535", ErrBadRequest, addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: address %q: a wildcard host cannot be dialed", ErrBadRequest, addr)
	}
	return nil
}
