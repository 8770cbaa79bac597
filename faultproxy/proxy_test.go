package faultproxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/internal/eventually"
)

// Client IPs standing in for distinct nodes. All of 127.0.0.0/8 is local on
// Linux, so dialing from these needs no setup.
const (
	ipA = "127.0.0.21"
	ipB = "127.0.0.22"
	ipC = "127.0.0.23"
)

// hangGuard bounds every blocking operation in these tests so that a bug
// fails a test instead of hanging it. It is never used to assert speed.
const hangGuard = 5 * time.Second

// stallProbe is how long a read from a stalled connection must see nothing.
const stallProbe = 300 * time.Millisecond

// echoServer accepts connections and echoes everything back, closing its
// side after the client half-closes.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, conns: make(map[net.Conn]struct{})}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conns[c] = struct{}{}
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				io.Copy(c, c)
				c.Close()
				e.mu.Lock()
				delete(e.conns, c)
				e.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(e.close)
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

func (e *echoServer) close() {
	e.ln.Close()
	e.mu.Lock()
	for c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}

func newProxy(t *testing.T, listenIP, target string) *Proxy {
	t.Helper()
	p, err := New(net.JoinHostPort(listenIP, "0"), target, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// newEchoProxy returns a proxy on 127.0.0.12 to an echo server of its
// own, what most tests fault.
func newEchoProxy(t *testing.T) *Proxy {
	t.Helper()
	return newProxy(t, "127.0.0.12", newEcho(t).addr())
}

// dialFrom opens a connection to addr whose source IP is fromIP.
func dialFrom(t *testing.T, fromIP, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: hangGuard, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fromIP)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, fromIP, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads the echo back within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(buf) != msg {
		return fmt.Errorf("echo mismatch: got %q want %q", buf, msg)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// mustWork asserts that c carries a round trip.
func mustWork(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if err := roundTrip(c, "hello "+what, hangGuard); err != nil {
		t.Fatalf("%s: expected round trip to work: %v", what, err)
	}
}

// mustBeCut asserts that c is closed by the proxy: the round trip fails with
// an EOF or reset, not merely a timeout.
func mustBeCut(t *testing.T, c net.Conn, what string) {
	t.Helper()
	mustFail(t, c, what, hangGuard, false)
}

// mustStall asserts that a round trip on c gets nothing within stallProbe.
func mustStall(t *testing.T, c net.Conn, what string) {
	t.Helper()
	mustFail(t, c, what, stallProbe, true)
}

// mustFail asserts that a round trip on c, given wait, fails, and by a
// timeout exactly when timeout is set.
func mustFail(t *testing.T, c net.Conn, what string, wait time.Duration, timeout bool) {
	t.Helper()
	want := "EOF/reset"
	if timeout {
		want = "timeout"
	}
	err := roundTrip(c, "hello "+what, wait)
	if err == nil {
		t.Fatalf("%s: expected %s, round trip worked", what, want)
	}
	if isTimeout(err) != timeout {
		t.Fatalf("%s: expected %s, got %v", what, want, err)
	}
}

func TestForwardBothWays(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, "127.0.0.12", e.addr())
	if p.Target() != e.addr() {
		t.Fatalf("Target() = %q, want %q", p.Target(), e.addr())
	}
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil || host != "127.0.0.12" || port == "0" {
		t.Fatalf("Addr() = %q, want 127.0.0.12 with a resolved port", p.Addr())
	}
	c := dialFrom(t, ipA, p.Addr())
	for i := range 10 {
		mustWork(t, c, fmt.Sprint("msg", i))
	}
	// Byte counters are bumped after each Write returns, so they may trail
	// the data the client has already seen; wait for them to settle.
	const total = int64(10 * len("hello msg0"))
	eventually.True(t, hangGuard, "byte counters", func() bool {
		st := p.Stats()
		return st.BytesToTarget == total && st.BytesFromTarget == total
	})
	if st := p.Stats(); st.Accepted != 1 || st.Active != 1 || st.Refused != 0 || st.Cut != 0 {
		t.Fatalf("unexpected stats %+v", st)
	}
}

// transfer pushes size random bytes through c concurrently with reading the
// echo, then half-closes and expects EOF after exactly those bytes.
func transfer(t *testing.T, c net.Conn, size int) {
	t.Helper()
	payload := make([]byte, size)
	rand.Read(payload)
	c.SetDeadline(time.Now().Add(4 * hangGuard))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("payload corrupted: got %d bytes, want %d", len(got), size)
	}
}

func TestLargeTransfer(t *testing.T) {
	p := newEchoProxy(t)
	transfer(t, dialFrom(t, ipA, p.Addr()), 4<<20)
}

func TestLargeTransferWithDelayKeepsOrder(t *testing.T) {
	p := newEchoProxy(t)
	p.SetDelay(2 * time.Millisecond)
	transfer(t, dialFrom(t, ipA, p.Addr()), 4<<20)
}

func TestHalfCloseEndsConnection(t *testing.T) {
	p := newEchoProxy(t)
	transfer(t, dialFrom(t, ipA, p.Addr()), 10)
	eventually.True(t, hangGuard, "connection to leave Active", func() bool { return p.Stats().Active == 0 })
}

func TestBlock(t *testing.T) {
	p := newEchoProxy(t)
	ca := dialFrom(t, ipA, p.Addr())
	cb := dialFrom(t, ipB, p.Addr())
	mustWork(t, ca, "A before block")
	mustWork(t, cb, "B before block")

	p.Block(ipA)
	// The existing connection is already closed: a read sees EOF/reset
	// without writing anything.
	ca.SetReadDeadline(time.Now().Add(hangGuard))
	if _, err := ca.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on cut connection: got %v, want EOF/reset", err)
	}
	mustWork(t, cb, "B while A blocked")
	mustBeCut(t, dialFrom(t, ipA, p.Addr()), "new A while blocked")

	st := p.Stats()
	if st.Cut != 1 || st.Refused != 1 || st.Active != 1 {
		t.Fatalf("stats after block: %+v", st)
	}

	p.Unblock(ipA)
	mustWork(t, dialFrom(t, ipA, p.Addr()), "new A after unblock")
	mustWork(t, cb, "B after unblock")
}

func TestBlockAllAndHealAll(t *testing.T) {
	p := newEchoProxy(t)
	ca := dialFrom(t, ipA, p.Addr())
	mustWork(t, ca, "A")
	p.BlockAll()
	mustBeCut(t, ca, "A after BlockAll")
	mustBeCut(t, dialFrom(t, ipB, p.Addr()), "new B after BlockAll")
	p.Unblock(ipB)
	mustBeCut(t, dialFrom(t, ipB, p.Addr()), "Unblock does not lift BlockAll")
	p.HealAll()
	mustWork(t, dialFrom(t, ipB, p.Addr()), "new B after HealAll")
}

func TestStall(t *testing.T) {
	p := newEchoProxy(t)
	ca := dialFrom(t, ipA, p.Addr())
	cb := dialFrom(t, ipB, p.Addr())
	mustWork(t, ca, "A before stall")

	p.Stall(ipA)
	// Existing connection: nothing comes back, but the connection is not cut.
	if _, err := io.WriteString(ca, "ping"); err != nil {
		t.Fatal(err)
	}
	ca.SetReadDeadline(time.Now().Add(stallProbe))
	if n, err := ca.Read(make([]byte, 4)); !isTimeout(err) {
		t.Fatalf("read from stalled connection: n=%d err=%v, want timeout", n, err)
	}
	// New connection from the stalled IP: accepted, but silent.
	ca2 := dialFrom(t, ipA, p.Addr())
	if _, err := io.WriteString(ca2, "pong"); err != nil {
		t.Fatal(err)
	}
	ca2.SetReadDeadline(time.Now().Add(stallProbe))
	if n, err := ca2.Read(make([]byte, 4)); !isTimeout(err) {
		t.Fatalf("read from new stalled connection: n=%d err=%v, want timeout", n, err)
	}
	mustWork(t, cb, "B while A stalled")

	// Chosen semantics: bytes held during the stall are delivered in order
	// once it is lifted, like TCP retransmitting after a path recovers.
	p.Unstall(ipA)
	for _, tc := range []struct {
		c    net.Conn
		want string
	}{{ca, "ping"}, {ca2, "pong"}} {
		tc.c.SetReadDeadline(time.Now().Add(hangGuard))
		buf := make([]byte, len(tc.want))
		if _, err := io.ReadFull(tc.c, buf); err != nil || string(buf) != tc.want {
			t.Fatalf("after unstall: got %q, %v; want %q", buf, err, tc.want)
		}
		tc.c.SetReadDeadline(time.Time{})
		mustWork(t, tc.c, "A after unstall")
	}
}

func TestStallThenBlockCuts(t *testing.T) {
	p := newEchoProxy(t)
	ca := dialFrom(t, ipA, p.Addr())
	p.Stall(ipA)
	mustStall(t, ca, "A stalled")
	p.Block(ipA)
	mustBeCut(t, ca, "A stalled then blocked")
}

func TestDelay(t *testing.T) {
	const d = 50 * time.Millisecond
	p := newEchoProxy(t)
	c := dialFrom(t, ipA, p.Addr())
	mustWork(t, c, "before delay")

	p.SetDelay(d)
	for i := range 3 {
		start := time.Now()
		mustWork(t, c, fmt.Sprint("delayed ", i))
		// Lower bound only: the delay applies once per direction, so a
		// round trip gains at least 2d. No upper bound is asserted.
		if rtt := time.Since(start); rtt < 2*d {
			t.Fatalf("round trip %v with delay %v, want at least %v", rtt, d, 2*d)
		}
	}
	p.SetDelay(0)
	mustWork(t, c, "after delay removed")
}

func TestDelayLoweredReleasesWaitingData(t *testing.T) {
	p := newEchoProxy(t)
	c := dialFrom(t, ipA, p.Addr())
	p.SetDelay(time.Hour)
	if _, err := io.WriteString(c, "x"); err != nil {
		t.Fatal(err)
	}
	p.HealAll()
	c.SetReadDeadline(time.Now().Add(hangGuard))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("data held by an hour-long delay not released by HealAll: %v", err)
	}
}

// cluster is three echo "nodes", each behind a proxy on its own IP, wired
// into a Net. A connection from node i to node j dials j's proxy from i's IP.
type cluster struct {
	net *Net
	ips map[string]string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	cl := &cluster{net: NewNet(), ips: map[string]string{"a": ipA, "b": ipB, "c": ipC}}
	for _, name := range []string{"a", "b", "c"} {
		e := newEcho(t)
		cl.net.Add(name, cl.ips[name], newProxy(t, cl.ips[name], e.addr()))
	}
	return cl
}

// canSend reports whether a fresh connection from node from to node to
// carries a round trip; a stalled link reports false after stallProbe.
func (cl *cluster) canSend(t *testing.T, from, to string) bool {
	t.Helper()
	c := dialFrom(t, cl.ips[from], cl.net.Proxy(to).Addr())
	defer c.Close()
	err := roundTrip(c, from+"->"+to, hangGuard)
	return err == nil
}

// expect checks all six directed links against the allowed set.
func (cl *cluster) expect(t *testing.T, allowed ...string) {
	t.Helper()
	ok := make(map[string]bool)
	for _, l := range allowed {
		ok[l] = true
	}
	for _, from := range []string{"a", "b", "c"} {
		for _, to := range []string{"a", "b", "c"} {
			if from == to {
				continue
			}
			link := from + to
			if got := cl.canSend(t, from, to); got != ok[link] {
				t.Errorf("link %s->%s: works=%v, want %v", from, to, got, ok[link])
			}
		}
	}
}

var allLinks = []string{"ab", "ac", "ba", "bc", "ca", "cb"}

func TestNetIsolate(t *testing.T) {
	cl := newCluster(t)
	cl.expect(t, allLinks...)
	// An existing a→b connection is cut too, not just new ones.
	old := dialFrom(t, ipA, cl.net.Proxy("b").Addr())
	mustWork(t, old, "a->b before isolate")
	cl.net.Isolate("a")
	mustBeCut(t, old, "a->b after isolate")
	cl.expect(t, "bc", "cb")
	cl.net.Heal()
	cl.expect(t, allLinks...)
}

func TestNetPartition(t *testing.T) {
	cl := newCluster(t)
	cl.net.Partition([]string{"a", "b"}, []string{"c"})
	cl.expect(t, "ab", "ba")
	cl.net.Heal()
	cl.expect(t, allLinks...)
}

func TestNetBridge(t *testing.T) {
	cl := newCluster(t)
	cl.net.Bridge([]string{"a"}, []string{"b"}, []string{"c"})
	cl.expect(t, "ab", "ba", "bc", "cb")
	cl.net.Heal()
	cl.expect(t, allLinks...)
}

func TestNetOneWay(t *testing.T) {
	cl := newCluster(t)
	cl.net.OneWay("a", "b")
	cl.expect(t, "ac", "ba", "bc", "ca", "cb")
	cl.net.Heal()
	cl.expect(t, allLinks...)
}

func TestNetStall(t *testing.T) {
	cl := newCluster(t)
	cl.net.Stall("a")
	for _, l := range [][2]string{{"a", "b"}, {"a", "c"}, {"b", "a"}, {"c", "a"}} {
		mustStall(t, dialFrom(t, cl.ips[l[0]], cl.net.Proxy(l[1]).Addr()), l[0]+"->"+l[1])
	}
	mustWork(t, dialFrom(t, ipB, cl.net.Proxy("c").Addr()), "b->c")
	mustWork(t, dialFrom(t, ipC, cl.net.Proxy("b").Addr()), "c->b")
	cl.net.Heal()
	cl.expect(t, allLinks...)
}

func TestNetDelay(t *testing.T) {
	const d = 30 * time.Millisecond
	cl := newCluster(t)
	cl.net.Delay(d)
	c := dialFrom(t, ipA, cl.net.Proxy("c").Addr())
	start := time.Now()
	mustWork(t, c, "a->c delayed")
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v, want at least %v", rtt, 2*d)
	}
}

func TestNetUnknownNodePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("expected panic for unknown node")
		}
	}()
	NewNet().Isolate("nope")
}

func TestCloseReleasesEverything(t *testing.T) {
	before := runtime.NumGoroutine()

	e := newEcho(t)
	p, err := New("127.0.0.12:0", e.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for _, ip := range []string{ipA, ipB, ipC} {
		c := dialFrom(t, ip, p.Addr())
		mustWork(t, c, "before close "+ip)
		conns = append(conns, c)
	}
	// Leave data parked in every kind of wait: a stall and a long delay.
	p.Stall(ipB)
	io.WriteString(conns[1], "stalled")
	p.SetDelay(time.Hour)
	io.WriteString(conns[2], "delayed")

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Clients see their connections end.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(hangGuard))
		if _, err := io.ReadAll(c); err != nil && isTimeout(err) {
			t.Fatalf("conn %d not closed by proxy Close: %v", i, err)
		}
		c.Close()
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), hangGuard); err == nil {
		t.Fatal("proxy still accepting after Close")
	}
	if st := p.Stats(); st.Active != 0 {
		t.Fatalf("Active = %d after Close", st.Active)
	}
	e.close()

	eventually.True(t, hangGuard, "goroutines to return to baseline", func() bool {
		return runtime.NumGoroutine() <= before
	})
}
