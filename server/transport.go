package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/startup"
)

// streamLayer is Raft's TCP stream layer. Unlike raft's own, it dials
// peers from the IP it listens on, so on a host with several addresses a
// peer (or a firewall, or the fault-injecting proxy of the tests) sees
// connections come from the node's own address.
//
// With TLS, every connection is mutual TLS between node certificates: a
// peer that cannot present one is refused before Raft reads a byte from
// it, so it can neither replicate, vote nor ask for votes.
//
// It keeps the connections it dialed and accepted, and Close closes them
// too: Raft's transport closes only the listener, and a replication or
// connection goroutine blocked on a peer that stopped answering would hold
// up Raft's shutdown until that peer went away.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
	// serverTLS and clientTLS are nil for plaintext.
	serverTLS, clientTLS *tls.Config
	// handshakeTimeout bounds an accepted connection's TLS handshake.
	handshakeTimeout time.Duration

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

// trackedConn is a connection the layer closes on Close.
type trackedConn struct {
	net.Conn
	layer *streamLayer
}

func (c *trackedConn) Close() error {
	c.layer.mu.Lock()
	delete(c.layer.conns, c)
	c.layer.mu.Unlock()
	return c.Conn.Close()
}

// track adds c to the connections Close closes; after Close it closes c
// at once.
func (l *streamLayer) track(c net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, fmt.Errorf("raft stream layer closed")
	}
	t := &trackedConn{Conn: c, layer: l}
	l.conns[t] = struct{}{}
	return t, nil
}

// Close implements net.Listener: it stops accepting and closes every
// connection still open.
func (l *streamLayer) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	err := l.Listener.Close()
	for c := range conns {
		c.Conn.Close()
	}
	return err
}

// useTLS makes the layer speak mutual TLS with server (for accepted
// connections) and client (for dialed ones).
func (l *streamLayer) useTLS(server, client *tls.Config) {
	l.serverTLS, l.clientTLS = server, client
	l.handshakeTimeout = grpcapi.HandshakeTimeout
}

// Accept implements net.Listener. The handshake runs on the connection's
// first read or write, in Raft's goroutine for it, so a slow or hostile
// peer does not hold up the accept loop; and it is bounded, because Raft
// sets no deadline on what it reads from an incoming connection: a peer
// that connects and sends nothing would otherwise hold it for good.
func (l *streamLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if c, err = l.track(c); err != nil || l.serverTLS == nil {
		return c, err
	}
	return &boundedHandshake{Conn: tls.Server(c, l.serverTLS), timeout: l.handshakeTimeout}, nil
}

// boundedHandshake is a server-side TLS connection whose handshake must
// finish within timeout.
type boundedHandshake struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *boundedHandshake) handshake() error {
	c.once.Do(func() {
		_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
		c.err = c.Conn.Handshake()
		_ = c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

func (c *boundedHandshake) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *boundedHandshake) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// newStreamLayer listens on bind and advertises advertise (bind's actual
// address when empty).
func newStreamLayer(bind, advertise string) (*streamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen for raft: %w", err)
	}
	l := &streamLayer{Listener: lis, advertise: lis.Addr(), conns: map[*trackedConn]struct{}{}}
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil || a.IP == nil || a.IP.IsUnspecified() || a.Port == 0 {
			lis.Close()
			return nil, fmt.Errorf("%w: raft advertise address %q must be a reachable ip:port", startup.ErrBadConfig, advertise)
		}
		// Advertised as given: a name (a pod's stable DNS name) must
		// stay a name in the Raft configuration, so peers follow it when
		// its IP changes.
		l.advertise = namedAddr(advertise)
	}
	if ip := lis.Addr().(*net.TCPAddr).IP; ip.IsUnspecified() {
		if advertise == "" {
			lis.Close()
			return nil, fmt.Errorf("%w: raft address %q binds every interface; give an advertise address peers can reach", startup.ErrBadConfig, bind)
		}
	} else {
		l.dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	return l, nil
}

// Dial implements raft.StreamLayer.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := l.dialer
	d.Timeout = timeout
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	if c, err = l.track(c); err != nil || l.clientTLS == nil {
		return c, err
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("raft peer address %q: %w", address, err)
	}
	cfg := l.clientTLS.Clone()
	cfg.ServerName = host
	tc := tls.Client(c, cfg)
	// The handshake is bounded like the dial, so a peer that accepts but
	// never answers costs one timeout, not a stuck replication goroutine.
	if timeout > 0 {
		_ = tc.SetDeadline(time.Now().Add(timeout))
	}
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with raft peer %s: %w", address, err)
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}

// namedAddr is an advertised address kept as it was written.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

// Addr implements net.Listener: the address peers should dial.
func (l *streamLayer) Addr() net.Addr { return l.advertise }
