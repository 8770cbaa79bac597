package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/startup"
)

// testLayer is a stream layer of node id in cluster (empty: none yet)
// whose Raft configuration is members (nil: empty), logging to logs, with
// TLS when tl is set.
func testLayer(t *testing.T, id, cluster string, members []raft.Server, tl *secure.TLS, logs io.Writer) *streamLayer {
	t.Helper()
	l, err := newStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if tl != nil {
		l.useTLS(tl.ServerConfig(nil, true), tl.ClientConfig())
	}
	l.identity = newRaftIdentity(id, func() string { return cluster }, hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: logs}))
	l.identity.members.set(members)
	return l
}

// serveFirstReads accepts l's connections and reads each one's first byte
// (which runs its handshake), sending what the read returned: nil when a
// byte got through, else the read's error.
func serveFirstReads(l net.Listener) <-chan error {
	reads := make(chan error, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, err := c.Read(make([]byte, 1))
				reads <- err
			}()
		}
	}()
	return reads
}

// firstRead waits for the next of reads.
func firstRead(t *testing.T, reads <-chan error) error {
	t.Helper()
	select {
	case err := <-reads:
		return err
	case <-time.After(seqTestWait):
		t.Fatal("the accepted connection's first read did not return")
		return nil
	}
}

func voters(ids ...string) []raft.Server {
	var s []raft.Server
	for _, id := range ids {
		s = append(s, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress("127.0.0.1:1")})
	}
	return s
}

// TestHandshakeRules: which dialers an acceptor lets through and which
// acceptors a dialer keeps, with and without TLS. A refused connection
// delivers no byte to the acceptor's reader (Raft), which reads it as
// closed.
func TestHandshakeRules(t *testing.T) {
	pki := securetest.New(t, "ca")
	tl := securetest.MustLoad(t, pki.Node("ordo-node"))
	// at is the configuration the dialer has, given where the acceptor is.
	type at func(acceptor string) []raft.Server
	listing := func(id string) at {
		return func(acceptor string) []raft.Server {
			return []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(acceptor)}, voters("n1")[0]}
		}
	}
	none := func(string) []raft.Server { return nil }
	for _, tt := range []struct {
		name                      string
		acceptorID, acceptorClust string
		acceptorMembers           []raft.Server
		dialerID, dialerClust     string
		dialerMembers             at
		want                      string // "" for accepted, else in the dialer's error
		otherCluster              bool
	}{
		{name: "same cluster, members", acceptorID: "n2", acceptorClust: "A", acceptorMembers: voters("n1", "n2"),
			dialerID: "n1", dialerClust: "A", dialerMembers: listing("n2")},
		{name: "dialer of no cluster yet", acceptorID: "n2", acceptorClust: "A", acceptorMembers: voters("n1", "n2"),
			dialerID: "n1", dialerClust: "", dialerMembers: listing("n2")},
		{name: "acceptor of no cluster yet", acceptorID: "n2", acceptorClust: "", acceptorMembers: voters("n1", "n2"),
			dialerID: "n1", dialerClust: "A", dialerMembers: listing("n2")},
		{name: "joiner accepts anyone", acceptorID: "n4", acceptorClust: "", acceptorMembers: nil,
			dialerID: "n1", dialerClust: "A", dialerMembers: none},
		{name: "two clusters", acceptorID: "n2", acceptorClust: "A", acceptorMembers: voters("n1", "n2"),
			dialerID: "n1", dialerClust: "B", dialerMembers: listing("n2"), want: "is of cluster A, this node of cluster B", otherCluster: true},
		{name: "two clusters, neither configured", acceptorID: "n2", acceptorClust: "A", acceptorMembers: nil,
			dialerID: "n1", dialerClust: "B", dialerMembers: none, want: "is of cluster A, this node of cluster B", otherCluster: true},
		{name: "dialer not in the configuration", acceptorID: "n2", acceptorClust: "A", acceptorMembers: voters("n1", "n2"),
			dialerID: "n9", dialerClust: "A", dialerMembers: listing("n2"), want: `node "n9" is not in the raft configuration`},
		{name: "acceptor is not the node listed at its address", acceptorID: "n9", acceptorClust: "A", acceptorMembers: voters("n1", "n9"),
			dialerID: "n1", dialerClust: "A", dialerMembers: listing("n2"), want: `answers as node "n9", but the raft configuration lists "n2"`},
	} {
		for _, withTLS := range []bool{false, true} {
			name := tt.name
			var tls *secure.TLS
			if withTLS {
				name, tls = name+", TLS", tl
			}
			t.Run(name, func(t *testing.T) {
				alogs, dlogs := &logBuffer{}, &logBuffer{}
				acceptor := testLayer(t, tt.acceptorID, tt.acceptorClust, tt.acceptorMembers, tls, alogs)
				dialer := testLayer(t, tt.dialerID, tt.dialerClust, tt.dialerMembers(acceptor.Addr().String()), tls, dlogs)
				reads := serveFirstReads(acceptor)
				c, err := dialer.Dial(raft.ServerAddress(acceptor.Addr().String()), 5*time.Second)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("dial: %v", err)
					}
					defer c.Close()
					if _, err := c.Write([]byte{0}); err != nil {
						t.Fatal(err)
					}
					if err := firstRead(t, reads); err != nil {
						t.Fatalf("the acceptor read %v, want the dialer's byte", err)
					}
					return
				}
				if err == nil {
					c.Close()
					t.Fatal("dial succeeded, want a refusal")
				}
				if !errors.Is(err, ErrPeerRefused) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("dial: %v, want ErrPeerRefused saying %q", err, tt.want)
				}
				if got := errors.Is(err, startup.ErrOtherCluster); got != tt.otherCluster {
					t.Fatalf("dial: %v: errors.Is(startup.ErrOtherCluster) = %v, want %v", err, got, tt.otherCluster)
				}
				if err := firstRead(t, reads); err == nil {
					t.Fatal("a byte got through a refused connection")
				}
				if !tt.otherCluster {
					return
				}
				for _, side := range []struct {
					name      string
					logs      *logBuffer
					own, peer string
				}{{"acceptor", alogs, tt.acceptorClust, tt.dialerClust}, {"dialer", dlogs, tt.dialerClust, tt.acceptorClust}} {
					s := side.logs.String()
					for _, want := range []string{"[ERROR]", " cluster_id=" + side.own, "peer_cluster_id=" + side.peer, "peer=127.0.0.1:", "peer_node_id=", "belongs to another cluster"} {
						if !strings.Contains(s, want) {
							t.Errorf("the %s's log lacks %q (both clusters, the peer and the fix, at ERROR):\n%s", side.name, want, s)
						}
					}
				}
			})
		}
	}
}

// TestHandshakeDialerChecksTheAnswer: a dialer does not rely on the
// acceptor's refusal: an acceptor that accepts while naming another
// cluster is refused by the dialer.
func TestHandshakeDialerChecksTheAnswer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(seqTestWait))
		if _, _, err := readFrame(c); err != nil {
			return
		}
		_ = writeFrame(c, handshakeVersion, encodeAnswer(answer{verdict: verdictAccept, hello: hello{clusterID: "B", nodeID: "n2"}}))
		_, _ = c.Read(make([]byte, 1))
	}()
	dialer := testLayer(t, "n1", "A", nil, nil, io.Discard)
	c, err := dialer.Dial(raft.ServerAddress(lis.Addr().String()), 5*time.Second)
	if err == nil {
		c.Close()
		t.Fatal("dialed an acceptor of another cluster that accepted")
	}
	if !errors.Is(err, startup.ErrOtherCluster) {
		t.Fatalf("dial: %v, want startup.ErrOtherCluster", err)
	}
}

// TestHandshakeWithAnOlderOrdo: a node of an older Ordo speaks Raft with
// no handshake, as raft's own TCP transport does. Its connections are
// refused, with an ERROR that says it is older; and its refusal of ours
// (it reads the hello as an unknown rpc type and closes) reads as "may be
// an older Ordo".
func TestHandshakeWithAnOlderOrdo(t *testing.T) {
	older, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Close()
	logs := &logBuffer{}
	l := testLayer(t, "n1", "A", voters("n1", "n2"), nil, logs)
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	defer tr.Close()
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("n2"), Addr: []byte(older.LocalAddr())}, Term: 1 << 40}

	var resp raft.AppendEntriesResponse
	if err := older.AppendEntries("n1", tr.LocalAddr(), req, &resp); err == nil {
		t.Fatalf("an older Ordo's AppendEntries got through: %+v", resp)
	}
	select {
	case rpc := <-tr.Consumer():
		t.Fatalf("raft received an older Ordo's %T", rpc.Command)
	default:
	}
	if s := logs.String(); !strings.Contains(s, "[ERROR]") || !strings.Contains(s, "older than this version") || !strings.Contains(s, "upgrade every node") {
		t.Fatalf("no ERROR naming an older Ordo:\n%s", s)
	}

	err = tr.AppendEntries("n2", older.LocalAddr(), req, &resp)
	if err == nil || !strings.Contains(err.Error(), "may run an Ordo older than this version") {
		t.Fatalf("AppendEntries to an older Ordo: %v, want an error saying it may be an older Ordo", err)
	}
	select {
	case rpc := <-older.Consumer():
		t.Fatalf("the older Ordo received our %T", rpc.Command)
	default:
	}
}

// TestHandshakeIsBounded: a dialer that sends nothing is closed after the
// handshake bound, and an acceptor that answers nothing fails the dial
// after the dial's timeout, each instead of holding a goroutine.
func TestHandshakeIsBounded(t *testing.T) {
	t.Run("silent dialer", func(t *testing.T) {
		mustCloseSilentDialer(t, testLayer(t, "n1", "A", nil, nil, io.Discard), "a silent dialer")
	})
	t.Run("silent acceptor", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		held := make(chan net.Conn, 1)
		go func() {
			if c, err := lis.Accept(); err == nil {
				held <- c // held open, never answered
			}
		}()
		defer func() {
			select {
			case c := <-held:
				c.Close()
			default:
			}
		}()
		l := testLayer(t, "n1", "A", nil, nil, io.Discard)
		done := make(chan error, 1)
		go func() {
			c, err := l.Dial(raft.ServerAddress(lis.Addr().String()), 200*time.Millisecond)
			if c != nil {
				c.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrPeerRefused) || !strings.Contains(err.Error(), "in time") {
				t.Fatalf("dial to a silent acceptor: %v, want ErrPeerRefused, not answered in time", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a dial to a silent acceptor still runs after 5 s, with a 200ms timeout")
		}
	})
}

// TestHandshakeLogsOncePerPeer: a refused peer redials at every heartbeat;
// the refusal is logged once a minute per peer, not once a connection.
func TestHandshakeLogsOncePerPeer(t *testing.T) {
	logs := &logBuffer{}
	acceptor := testLayer(t, "n2", "A", voters("n1", "n2"), nil, logs)
	dialer := testLayer(t, "n1", "B", nil, nil, io.Discard)
	reads := serveFirstReads(acceptor)
	for range 5 {
		if c, err := dialer.Dial(raft.ServerAddress(acceptor.Addr().String()), 5*time.Second); err == nil {
			c.Close()
			t.Fatal("dial succeeded, want a refusal")
		}
		if err := firstRead(t, reads); err == nil {
			t.Fatal("a byte got through a refused connection")
		}
	}
	if n := strings.Count(logs.String(), "[ERROR]"); n != 1 {
		t.Fatalf("5 refused connections of one peer logged %d times, want once:\n%s", n, logs)
	}
}

// TestDecideOtherCluster: a node refuses only when a majority of its other
// voters answered for another cluster than its own, both ids set.
func TestDecideOtherCluster(t *testing.T) {
	for _, tt := range []struct {
		name    string
		own     string
		voters  []string
		answers map[string]string
		refuse  bool
		others  int
	}{
		{"no cluster id yet", "", []string{"n1", "n2"}, map[string]string{"n1": "Y", "n2": "Y"}, false, 0},
		{"no other voter", "X", nil, map[string]string{"n1": "Y"}, false, 0},
		{"nobody answered", "X", []string{"n1", "n2"}, nil, false, 0},
		{"all answer this cluster", "X", []string{"n1", "n2"}, map[string]string{"n1": "X", "n2": "X"}, false, 0},
		{"answers without a cluster id", "X", []string{"n1", "n2"}, map[string]string{"n1": "", "n2": ""}, false, 0},
		{"one of two: a minority", "X", []string{"n1", "n2"}, map[string]string{"n1": "Y", "n2": "X"}, false, 1},
		{"one of two, the other silent", "X", []string{"n1", "n2"}, map[string]string{"n1": "Y"}, false, 1},
		{"two of two", "X", []string{"n1", "n2"}, map[string]string{"n1": "Y", "n2": "Y"}, true, 2},
		{"two of two, of two other clusters", "X", []string{"n1", "n2"}, map[string]string{"n1": "Y", "n2": "Z"}, true, 2},
		{"the only other voter", "X", []string{"n1"}, map[string]string{"n1": "Y"}, true, 1},
		{"two of four: no majority", "X", []string{"n1", "n2", "n3", "n4"}, map[string]string{"n1": "Y", "n2": "Y", "n3": "X"}, false, 2},
		{"three of four", "X", []string{"n1", "n2", "n3", "n4"}, map[string]string{"n1": "Y", "n2": "Y", "n3": "Y", "n4": "X"}, true, 3},
		{"answers of non-voters do not count", "X", []string{"n1", "n2"}, map[string]string{"n1": "Y", "n7": "Y", "n8": "Y"}, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := decideOtherCluster(tt.own, tt.voters, tt.answers)
			if v.refuse != tt.refuse || len(v.others) != tt.others {
				t.Fatalf("decideOtherCluster(%q, %v, %v) = refuse %v, others %v; want refuse %v, %d others",
					tt.own, tt.voters, tt.answers, v.refuse, v.others, tt.refuse, tt.others)
			}
		})
	}
	if got, want := describeOthers(map[string]string{"n2": "Y", "n1": "Y", "n4": "Z"}), "n1, n2 are of cluster Y; n4 is of cluster Z"; got != want {
		t.Fatalf("describeOthers = %q, want %q", got, want)
	}
}

// TestDecideOtherClusterEveryAnswer runs the rule on every mix of up to
// five voters' answers (none, no cluster id, this cluster, two others),
// with and without a cluster id of this node's, and a non-voter that
// names another cluster. It never refuses while a majority of voters may
// still be of this cluster (silent, no id yet, or this cluster's), and
// always refuses once a majority named other clusters; it names exactly
// the voters that did.
func TestDecideOtherClusterEveryAnswer(t *testing.T) {
	const silent = "(silent)"
	kinds := []string{silent, "", "X", "Y", "Z"}
	checked := 0
	for n := 1; n <= 5; n++ {
		voters := make([]string, n)
		for i := range voters {
			voters[i] = fmt.Sprintf("n%d", i+1)
		}
		combos := 1
		for range n {
			combos *= len(kinds)
		}
		for _, own := range []string{"", "X"} {
			for c := range combos {
				answers := map[string]string{"stranger": "Y"}
				mayBeOurs, others := 0, 0
				for i, k := 0, c; i < n; i, k = i+1, k/len(kinds) {
					a := kinds[k%len(kinds)]
					if a != silent {
						answers[voters[i]] = a
					}
					if a == "Y" || a == "Z" {
						others++
					} else {
						mayBeOurs++
					}
				}
				v := decideOtherCluster(own, voters, answers)
				majority := n/2 + 1
				switch {
				case v.refuse && (own == "" || mayBeOurs >= majority):
					t.Fatalf("own %q, voters %v, answers %v: refused while %d of %d may be this cluster's", own, voters, answers, mayBeOurs, n)
				case !v.refuse && own != "" && others >= majority:
					t.Fatalf("own %q, voters %v, answers %v: not refused although %d of %d named other clusters", own, voters, answers, others, n)
				case own != "" && len(v.others) != others, v.others["stranger"] != "":
					t.Fatalf("own %q, answers %v: others %v, want the %d voters that named other clusters", own, answers, v.others, others)
				}
				checked++
			}
		}
	}
	t.Logf("%d combinations checked", checked)
}

// mustCloseSilentDialer serves Raft on l with a 200 ms handshake bound
// and checks that a connection that sends nothing (what) is closed
// within 5 s, instead of holding a goroutine of Raft's for good.
func mustCloseSilentDialer(t *testing.T, l *streamLayer, what string) {
	t.Helper()
	l.handshakeTimeout = 200 * time.Millisecond
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: l, MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	defer tr.Close()
	conn, err := net.Dial("tcp", string(tr.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: read %v after 5 s, want it closed after the 200ms handshake bound", what, err)
	}
}
