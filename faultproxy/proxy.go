// Package faultproxy injects network faults between the nodes of a real,
// multi-process Ordo cluster running on one machine.
//
// Every node binds its own loopback address (127.0.0.11, 127.0.0.12, ...)
// and its Raft transport dials peers from that address. One Proxy sits in
// front of each node's Raft port and the node advertises the proxy's address
// instead of its own, so every Raft connection towards node j passes through
// j's proxy. The source IP of an accepted connection tells the proxy which
// node i opened it, which means a proxy controls exactly the directed links
// i→j: the connections that i initiates towards j (the leader's
// AppendEntries, a candidate's RequestVote) together with their replies.
//
// A Proxy offers three kinds of fault, selectable per source IP:
//
//   - Block: connections are severed. Existing ones are closed at once in
//     both directions and new ones are accepted and closed immediately, so
//     the dialer sees EOF or a reset. This models a refused or torn-down
//     link that the sender notices quickly.
//   - Stall: a black hole. Connections stay open but no byte flows in either
//     direction, so the sender only notices by its own timeouts. This models
//     packets being silently dropped.
//   - Delay: every chunk is held for a fixed extra latency in both
//     directions, preserving order and without limiting throughput.
//
// Net owns one Proxy per node and expresses the classic nemesis operations
// (isolate, partition, bridge, one-way cut, stall, delay, heal) in terms of
// node names.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds how long a proxy waits for the target to accept a new
// upstream connection, so a dead target cannot pin a handler forever.
const dialTimeout = 5 * time.Second

// chunkSize is the read buffer size for each direction of a connection.
const chunkSize = 64 << 10

// queueLen bounds the number of chunks in flight per direction. The bound
// gives back-pressure: a slow or stalled destination eventually stops the
// reader, and the TCP window then pushes back on the sender exactly as a
// real congested or black-holed link would, instead of the proxy buffering
// without limit.
const queueLen = 64

// Stats is a snapshot of a Proxy's counters. Byte counters are updated
// after each write to the other side completes, so a snapshot may trail the
// data an endpoint has already received by a chunk or two.
type Stats struct {
	// Accepted counts connections accepted and forwarded to the target.
	// Refused connections are not included.
	Accepted int64
	// Refused counts connections closed on arrival because their source
	// was blocked.
	Refused int64
	// Cut counts forwarded connections severed by Block or BlockAll.
	Cut int64
	// Active is the number of forwarded connections currently open.
	Active int
	// BytesToTarget counts bytes written to the target (client → target).
	BytesToTarget int64
	// BytesFromTarget counts bytes written back to clients (target → client).
	BytesFromTarget int64
}

// Proxy is a TCP forwarder in front of one node that can block, stall and
// delay connections according to their source IP. All methods are safe for
// concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	logf   func(format string, args ...any)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	blockAll bool
	blocked  map[string]bool
	stalled  map[string]bool
	delay    time.Duration
	conns    map[*conn]struct{}
	// changed is closed and replaced whenever the stall set or the delay
	// changes, so that waiting writers and readers re-evaluate at once
	// instead of polling.
	changed chan struct{}

	accepted  atomic.Int64
	refused   atomic.Int64
	cut       atomic.Int64
	bytesTo   atomic.Int64
	bytesFrom atomic.Int64
}

// New starts a proxy that listens on listen (for example "127.0.0.12:0")
// and forwards every accepted connection to target. It is accepting when New
// returns. logf receives one line per notable event; nil discards them.
func New(listen, target string, logf func(format string, args ...any)) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listen, err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:      ln,
		target:  target,
		logf:    logf,
		ctx:     ctx,
		cancel:  cancel,
		blocked: make(map[string]bool),
		stalled: make(map[string]bool),
		conns:   make(map[*conn]struct{}),
		changed: make(chan struct{}),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the address the proxy actually listens on, with the port
// resolved when New was given port 0.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// Block severs connections coming from the given source IPs: open ones are
// closed in both directions at once and new ones are accepted and closed
// immediately. A cut connection stays dead after Unblock; the client has to
// reconnect, as it would after a real connection reset.
func (p *Proxy) Block(fromIPs ...string) {
	p.mu.Lock()
	for _, ip := range fromIPs {
		p.blocked[normIP(ip)] = true
	}
	victims := p.takeConnsLocked(func(c *conn) bool { return p.blocked[c.ip] })
	p.mu.Unlock()
	p.logf("faultproxy %s: block %v (cut %d)", p.Addr(), fromIPs, len(victims))
	p.cutConns(victims)
}

// Unblock lets new connections from the given source IPs through again. It
// does not lift BlockAll, which only HealAll clears.
func (p *Proxy) Unblock(fromIPs ...string) {
	p.mu.Lock()
	for _, ip := range fromIPs {
		delete(p.blocked, normIP(ip))
	}
	p.mu.Unlock()
	p.logf("faultproxy %s: unblock %v", p.Addr(), fromIPs)
}

// BlockAll behaves like Block for every source IP.
func (p *Proxy) BlockAll() {
	p.mu.Lock()
	p.blockAll = true
	victims := p.takeConnsLocked(func(*conn) bool { return true })
	p.mu.Unlock()
	p.logf("faultproxy %s: block all (cut %d)", p.Addr(), len(victims))
	p.cutConns(victims)
}

// HealAll removes every fault: blocks (including BlockAll), stalls and the
// delay. Data held back by a stall is then delivered.
func (p *Proxy) HealAll() {
	p.mu.Lock()
	p.blockAll = false
	clear(p.blocked)
	clear(p.stalled)
	p.delay = 0
	p.notifyLocked()
	p.mu.Unlock()
	p.logf("faultproxy %s: heal all", p.Addr())
}

// Stall black-holes connections from the given source IPs, existing and new:
// they stay open but no byte flows in either direction. Bytes the proxy has
// already read are held, not dropped, and are delivered in order after
// Unstall or HealAll; this mirrors TCP, which retransmits lost segments once
// the path recovers, and keeps the byte stream intact so a healed stall never
// corrupts framing. While stalled the proxy also stops reading, so the
// senders' writes eventually block on a full TCP window.
//
// New connections from a stalled IP are still accepted (the client's connect
// succeeds, unlike with a real black hole where the SYN would be lost); only
// the data does not flow.
func (p *Proxy) Stall(fromIPs ...string) {
	p.mu.Lock()
	for _, ip := range fromIPs {
		p.stalled[normIP(ip)] = true
	}
	p.notifyLocked()
	p.mu.Unlock()
	p.logf("faultproxy %s: stall %v", p.Addr(), fromIPs)
}

// Unstall lets data flow again for the given source IPs.
func (p *Proxy) Unstall(fromIPs ...string) {
	p.mu.Lock()
	for _, ip := range fromIPs {
		delete(p.stalled, normIP(ip))
	}
	p.notifyLocked()
	p.mu.Unlock()
	p.logf("faultproxy %s: unstall %v", p.Addr(), fromIPs)
}

// SetDelay adds d of latency to every chunk forwarded in either direction;
// zero or negative removes it. Each chunk is stamped when read and written
// no earlier than stamp+d, so order is preserved and throughput is not
// limited by the delay. The new value applies at once to chunks still
// waiting, so lowering the delay releases them early.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.notifyLocked()
	p.mu.Unlock()
	p.logf("faultproxy %s: delay %v", p.Addr(), d)
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	active := len(p.conns)
	p.mu.Unlock()
	return Stats{
		Accepted:        p.accepted.Load(),
		Refused:         p.refused.Load(),
		Cut:             p.cut.Load(),
		Active:          active,
		BytesToTarget:   p.bytesTo.Load(),
		BytesFromTarget: p.bytesFrom.Load(),
	}
}

// Close stops accepting, closes every connection and waits for all of the
// proxy's goroutines to exit. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	victims := p.takeConnsLocked(func(*conn) bool { return true })
	p.mu.Unlock()

	p.cancel()
	err := p.ln.Close()
	for _, c := range victims {
		c.close()
	}
	p.wg.Wait()
	return err
}

// notifyLocked wakes everything waiting on a change of stall or delay.
// p.mu must be held.
func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// takeConnsLocked removes and returns the connections matching pred. It
// removes them under the lock so that a connection is counted as cut at most
// once and never reappears in Stats.Active. p.mu must be held.
func (p *Proxy) takeConnsLocked(pred func(*conn) bool) []*conn {
	var out []*conn
	for c := range p.conns {
		if pred(c) {
			delete(p.conns, c)
			out = append(out, c)
		}
	}
	return out
}

// cutConns closes connections taken by Block or BlockAll. Closing happens
// outside p.mu because closing sockets may take a moment and must not hold up
// the data path of unaffected connections.
func (p *Proxy) cutConns(cs []*conn) {
	for _, c := range cs {
		p.cut.Add(1)
		c.close()
	}
}

// isBlockedLocked reports whether new data from ip must be refused. p.mu
// must be held.
func (p *Proxy) isBlockedLocked(ip string) bool { return p.blockAll || p.blocked[ip] }

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient errors such as EMFILE: back off rather than spin,
			// and keep serving once the condition clears.
			p.logf("faultproxy %s: accept: %v", p.Addr(), err)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond

		ip := sourceIP(nc)
		c := &conn{p: p, ip: ip, client: nc, done: make(chan struct{})}
		c.ctx, c.cancel = context.WithCancel(p.ctx)

		// The blocked check and the registration happen under one lock so
		// that a concurrent Block either sees this connection in p.conns and
		// cuts it, or this check sees the block; it can never slip between.
		p.mu.Lock()
		if p.closed || p.isBlockedLocked(ip) {
			closed := p.closed
			p.mu.Unlock()
			// Count before closing so that a client which has seen the
			// refusal also sees it in Stats.
			if !closed {
				p.refused.Add(1)
			}
			c.cancel()
			nc.Close()
			if !closed {
				p.logf("faultproxy %s: refused connection from %s", p.Addr(), ip)
			}
			continue
		}
		p.conns[c] = struct{}{}
		p.accepted.Add(1)
		p.mu.Unlock()

		p.wg.Add(1)
		go c.run()
	}
}

// sourceIP returns the textual source IP of an accepted connection in the
// same normal form normIP produces.
func sourceIP(nc net.Conn) string {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
	if err != nil {
		return nc.RemoteAddr().String()
	}
	return normIP(host)
}

// normIP canonicalises an IP so that callers may pass any textual form
// ("127.0.0.21", "::ffff:127.0.0.21") and still match accepted connections.
func normIP(s string) string {
	if ip := net.ParseIP(s); ip != nil {
		return ip.String()
	}
	return s
}

// chunk is one read's worth of data travelling through a direction queue.
type chunk struct {
	data []byte
	at   time.Time // when it was read, the base for the added delay
	eof  bool      // the source half-closed; propagate with CloseWrite
}

// conn is one forwarded connection: client ↔ proxy ↔ target.
type conn struct {
	p      *Proxy
	ip     string
	client net.Conn

	ctx    context.Context // cancels the upstream dial when the conn is cut
	cancel context.CancelFunc

	mu       sync.Mutex
	upstream net.Conn
	isClosed bool

	done      chan struct{}
	closeOnce sync.Once
	// halvesDone counts directions that finished cleanly with EOF; when
	// both have, the connection is fully closed.
	halvesDone atomic.Int32
}

// close tears the connection down in both directions. It is idempotent and
// safe to call from any goroutine, including while the upstream dial is in
// progress.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.cancel()
		c.mu.Lock()
		c.isClosed = true
		up := c.upstream
		c.mu.Unlock()
		c.client.Close()
		if up != nil {
			up.Close()
		}
		// Connections that end on their own must leave p.conns too;
		// those cut by Block were already removed.
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

func (c *conn) run() {
	defer c.p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	up, err := d.DialContext(c.ctx, "tcp", c.p.target)
	if err != nil {
		if c.ctx.Err() == nil {
			c.p.logf("faultproxy %s: dial target %s for %s: %v", c.p.Addr(), c.p.target, c.ip, err)
		}
		c.close()
		return
	}
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		up.Close()
		return
	}
	c.upstream = up
	c.mu.Unlock()

	toTarget := make(chan chunk, queueLen)
	fromTarget := make(chan chunk, queueLen)
	c.p.wg.Add(4)
	go c.readLoop(c.client, toTarget)
	go c.writeLoop(up, toTarget, &c.p.bytesTo)
	go c.readLoop(up, fromTarget)
	go c.writeLoop(c.client, fromTarget, &c.p.bytesFrom)
}

// waitFlowing blocks while the connection is stalled and, when notBefore is
// non-zero, until notBefore plus the current delay has passed. It returns
// false if the connection was closed meanwhile. It re-evaluates on every
// change so that Unstall, HealAll and SetDelay take effect on waiting data
// immediately.
func (c *conn) waitFlowing(notBefore time.Time) bool {
	for {
		c.p.mu.Lock()
		stalled := c.p.stalled[c.ip]
		delay := c.p.delay
		changed := c.p.changed
		c.p.mu.Unlock()

		if stalled {
			select {
			case <-changed:
				continue
			case <-c.done:
				return false
			}
		}
		if notBefore.IsZero() {
			return true
		}
		wait := time.Until(notBefore.Add(delay))
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			// Loop to re-check the stall that may have begun meanwhile.
		case <-changed:
			t.Stop()
		case <-c.done:
			t.Stop()
			return false
		}
	}
}

// readLoop moves data from src into q, stamping each chunk with its arrival
// time. It does not read while stalled, so a black hole holds at most the
// queued chunks plus one.
func (c *conn) readLoop(src net.Conn, q chan<- chunk) {
	defer c.p.wg.Done()
	buf := make([]byte, chunkSize)
	for {
		if !c.waitFlowing(time.Time{}) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			ch := chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}
			select {
			case q <- ch:
			case <-c.done:
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				select {
				case q <- chunk{eof: true, at: time.Now()}:
				case <-c.done:
				}
			} else {
				c.close()
			}
			return
		}
	}
}

// writeLoop writes chunks from q to dst once each is due and the connection
// is not stalled. One writer per direction keeps chunks in order.
func (c *conn) writeLoop(dst net.Conn, q <-chan chunk, counter *atomic.Int64) {
	defer c.p.wg.Done()
	for {
		var ch chunk
		select {
		case ch = <-q:
		case <-c.done:
			return
		}
		if !c.waitFlowing(ch.at) {
			return
		}
		if ch.eof {
			// Propagate the half-close so request/response protocols that
			// signal the end of a request with EOF keep working; close the
			// whole connection once both directions have ended.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			if c.halvesDone.Add(1) == 2 {
				c.close()
			}
			return
		}
		n, err := dst.Write(ch.data)
		counter.Add(int64(n))
		if err != nil {
			c.close()
			return
		}
	}
}
