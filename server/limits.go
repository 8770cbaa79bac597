package server

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits on what one caller can make a node hold. Requests are small (a
// count, a node id, two addresses), so the message bound is far above any
// honest request; the rest bound memory and goroutines per caller.
const (
	// maxMessageBytes bounds one gRPC message in either direction.
	maxMessageBytes = 1 << 20
	// maxStreamsPerConn bounds concurrent calls on one connection.
	maxStreamsPerConn = 1024
	// handshakeTimeout bounds connection setup, TLS included, so a peer
	// that opens connections and sends nothing cannot hold them.
	handshakeTimeout = 10 * time.Second
	// maxRaftConnsPerHost bounds the Raft connections from one host:
	// each peer pools a few, and a test cluster puts five nodes on one.
	maxRaftConnsPerHost = 128
	// maxIDLength and maxAddrLength bound admin fields.
	maxIDLength   = 64
	maxAddrLength = 255
)

// serverLimits are the gRPC server options that enforce the limits above,
// and keepalives that find dead connections: a client that vanished
// without closing its stream frees it within a minute.
func serverLimits() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessageBytes),
		grpc.MaxSendMsgSize(maxMessageBytes),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// Clients may ping at most every 10 s; more often is abuse and
		// closes the connection.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// boundUnary gives every unary call a deadline of at most timeout, so no
// call holds a goroutine longer, whatever deadline its caller chose.
func boundUnary(timeout time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return handler(ctx, req)
	}
}

// hostLimitListener refuses a connection from a host that already holds
// max; 0 means no limit. Peers hold one connection each, so the limit is
// there for clients that leak connections or mean harm.
type hostLimitListener struct {
	net.Listener
	max    int
	logger hclog.Logger

	mu    sync.Mutex
	count map[string]int
}

func limitPerHost(l net.Listener, max int, logger hclog.Logger) net.Listener {
	if max <= 0 {
		return l
	}
	return &hostLimitListener{Listener: l, max: max, logger: logger, count: map[string]int{}}
}

// Accept implements net.Listener.
func (l *hostLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := remoteHost(c)
		l.mu.Lock()
		if l.count[host] >= l.max {
			l.mu.Unlock()
			l.logger.Warn("refused a connection: too many from one host", "host", host, "limit", l.max)
			c.Close()
			continue
		}
		l.count[host]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: sync.OnceFunc(func() { l.release(host) })}, nil
	}
}

func (l *hostLimitListener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count[host]--; l.count[host] <= 0 {
		delete(l.count, host)
	}
}

func remoteHost(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// countedConn gives its slot back when closed.
type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// checkNodeID refuses ids that could not be a flag value, a file name or a
// log field without quoting: letters, digits, '.', '_' and '-', not
// starting with '-', at most maxIDLength bytes.
func checkNodeID(id string) error {
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

// checkDialAddr refuses an address other nodes could not dial: it must be
// host:port with a host that is not a wildcard and a port from 1 to 65535.
func checkDialAddr(addr string) error {
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
