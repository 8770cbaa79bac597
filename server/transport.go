package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/grpcapi"
)

// streamLayer is Raft's TCP stream layer. Unlike raft's own, it dials
// peers from the IP it listens on, so on a host with several addresses a
// peer (or a firewall, or the fault-injecting proxy of the tests) sees
// connections come from the node's own address.
//
// With TLS, every connection is mutual TLS between node certificates: a
// peer that cannot present one is refused before Raft reads a byte from
// it, so it can neither replicate, vote nor ask for votes. Then, with or
// without TLS, every connection starts with the cluster handshake
// (handshake.go): a peer of another cluster, or one the Raft
// configuration does not list, is refused before Raft reads a byte too.
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
	// handshakeTimeout bounds an accepted connection's handshakes, TLS's
	// and the cluster's.
	handshakeTimeout time.Duration
	// identity is who this layer says it is in the cluster handshake; set
	// before the transport starts accepting.
	identity *raftIdentity

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

// trackedConn is a connection the layer closes on Close.
//
// It also keeps the cluster id this node presented in the connection's
// cluster handshake, and closes the connection as soon as this node's
// cluster id is another: a handshake in which either end had none yet
// (a new cluster before its init, a joiner) let the other end through
// unchecked, and that end may be of another cluster. Both ends close such
// a connection when their own id is set, and the next connection's
// handshake compares both ids. Only connections on which this node
// presented none are checked: a node's id, once set, is its for as long
// as it runs (its FSM takes no second init), so the others cost Raft's
// hot path nothing.
type trackedConn struct {
	net.Conn
	layer *streamLayer
	// presented is this node's cluster id in the handshake; nil until it
	// passed, as the handshake itself reads and writes through c.
	presented atomic.Pointer[string]
	// shut is set when the layer closes c as the node closes: a read it
	// cuts short is the end of the stream (io.EOF), which Raft takes
	// quietly, not a failure it logs as an ERROR ("use of closed network
	// connection") on every node that stops, or is removed.
	shut atomic.Bool
}

// passed records that the handshake passed with this node presenting
// cluster.
func (c *trackedConn) passed(cluster string) { c.presented.Store(&cluster) }

// checkCluster closes c if this node's cluster id is no longer the one it
// presented in c's handshake.
func (c *trackedConn) checkCluster() error {
	p := c.presented.Load()
	if p == nil || *p != "" || c.layer.identity.ownCluster() == "" {
		return nil
	}
	c.Close()
	return io.EOF
}

// Read checks after reading too: Raft waits for a peer's next request
// in Read, and what arrives after this node's cluster id changed must not
// reach Raft.
func (c *trackedConn) Read(b []byte) (int, error) {
	if err := c.checkCluster(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if cerr := c.checkCluster(); cerr != nil {
		return 0, cerr
	}
	if err != nil && c.shut.Load() {
		return n, io.EOF
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	if err := c.checkCluster(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *trackedConn) Close() error {
	c.layer.mu.Lock()
	delete(c.layer.conns, c)
	c.layer.mu.Unlock()
	return c.Conn.Close()
}

// track adds c to the connections Close closes; after Close it closes c
// at once.
func (l *streamLayer) track(c net.Conn) (*trackedConn, error) {
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
		c.shut.Store(true)
		c.Conn.Close()
	}
	return err
}

// useTLS makes the layer speak mutual TLS with server (for accepted
// connections) and client (for dialed ones).
func (l *streamLayer) useTLS(server, client *tls.Config) {
	l.serverTLS, l.clientTLS = server, client
}

// Accept implements net.Listener. The handshakes run on the connection's
// first read or write, in Raft's goroutine for it, so a slow or hostile
// peer does not hold up the accept loop; and they are bounded, because
// Raft sets no deadline on what it reads from an incoming connection: a
// peer that connects and sends nothing would otherwise hold it for good.
func (l *streamLayer) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c, err := l.track(raw)
	if err != nil {
		return nil, err
	}
	b := &boundedHandshake{Conn: c, tracked: c, timeout: l.handshakeTimeout, identity: l.identity}
	if l.serverTLS != nil {
		b.tls = tls.Server(c, l.serverTLS)
		b.Conn = b.tls
	}
	return b, nil
}

// boundedHandshake is an accepted connection whose handshakes, TLS's (when
// tls is set) then the cluster's, must finish within timeout.
type boundedHandshake struct {
	net.Conn
	tracked  *trackedConn
	tls      *tls.Conn
	identity *raftIdentity
	timeout  time.Duration
	once     sync.Once
	err      error
}

func (c *boundedHandshake) handshake() error {
	c.once.Do(func() {
		_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
		if c.tls != nil {
			if c.err = c.tls.Handshake(); c.err != nil {
				return
			}
		}
		var presented string
		if presented, c.err = c.identity.acceptHandshake(c.Conn); c.err != nil {
			return
		}
		c.tracked.passed(presented)
		_ = c.Conn.SetDeadline(time.Time{})
	})
	return c.err
}

// readErr is what Raft reads from a connection whose handshake failed. A
// refusal reads as the end of the connection: the handshake logged it,
// once a minute per peer, and Raft would log every refused connection of
// a peer that redials at each heartbeat.
func (c *boundedHandshake) readErr(err error) error {
	if errors.Is(err, ErrPeerRefused) {
		return io.EOF
	}
	return err
}

func (c *boundedHandshake) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, c.readErr(err)
	}
	return c.Conn.Read(b)
}

func (c *boundedHandshake) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, c.readErr(err)
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
	l := &streamLayer{
		Listener: lis, advertise: lis.Addr(), conns: map[*trackedConn]struct{}{},
		handshakeTimeout: grpcapi.HandshakeTimeout, identity: newRaftIdentity("", nil, nil),
	}
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil || a.IP == nil || a.IP.IsUnspecified() || a.Port == 0 {
			lis.Close()
			why := "a wildcard IP or port 0"
			if err != nil {
				why = err.Error()
			}
			return nil, badField("RaftAdvertise", "%q does not resolve to an IP and port peers can dial (%s)", advertise, why)
		}
		// Advertised as given: a name (a pod's stable DNS name) must
		// stay a name in the Raft configuration, so peers follow it when
		// its IP changes.
		l.advertise = namedAddr(advertise)
	}
	if ip := lis.Addr().(*net.TCPAddr).IP; ip.IsUnspecified() {
		if advertise == "" {
			lis.Close()
			return nil, badField("RaftAddr", "%q binds every interface: give {RaftAdvertise}, the address peers reach this node at", bind)
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
	raw, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	tracked, err := l.track(raw)
	if err != nil {
		return nil, err
	}
	var c net.Conn = tracked
	// The handshakes are bounded like the dial, so a peer that accepts but
	// never answers costs one timeout, not a stuck replication goroutine.
	if timeout <= 0 {
		timeout = l.handshakeTimeout
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if l.clientTLS != nil {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("raft peer address %q: %w", address, err)
		}
		cfg := l.clientTLS.Clone()
		cfg.ServerName = host
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS handshake with raft peer %s: %w", address, err)
		}
		c = tc
	}
	presented, err := l.identity.dialHandshake(c, string(address))
	if err != nil {
		c.Close()
		return nil, err
	}
	tracked.passed(presented)
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// namedAddr is an advertised address kept as it was written.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

// Addr implements net.Listener: the address peers should dial.
func (l *streamLayer) Addr() net.Addr { return l.advertise }
