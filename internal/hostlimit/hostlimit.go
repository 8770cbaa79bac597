// Package hostlimit bounds the connections one remote host may hold open
// on a listener. A node wraps each of its listeners in it (gRPC, HTTP and
// the Raft stream layer), so it is not part of any one protocol's package.
//
// It counts connections and nothing else: what a connection may do once
// accepted (message sizes, streams, deadlines) is bounded by the server
// that serves it, e.g. package grpcapi's ServerOptions.
package hostlimit

import (
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// listener refuses a connection from a host that already holds max.
// Peers hold one connection each, so the limit is there for clients that
// leak connections or mean harm.
type listener struct {
	net.Listener
	max    int
	logger hclog.Logger

	mu    sync.Mutex
	count map[string]int
}

// Wrap returns l limited to max open connections from one host; max 0 or
// less means no limit, and l itself is returned. Refusals are logged to
// logger, as an operator needs to see who is turned away.
func Wrap(l net.Listener, max int, logger hclog.Logger) net.Listener {
	if max <= 0 {
		return l
	}
	return &listener{Listener: l, max: max, logger: logger, count: map[string]int{}}
}

// Accept implements net.Listener. A refused connection is closed at once
// and Accept waits for the next, so the server never sees it.
func (l *listener) Accept() (net.Conn, error) {
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

func (l *listener) release(host string) {
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

// countedConn gives its slot back when closed; once, however often it is
// closed, so a double Close cannot free another connection's slot.
type countedConn struct {
	net.Conn
	release func()
}

func (c *countedConn) Close() error {
	c.release()
	return c.Conn.Close()
}
