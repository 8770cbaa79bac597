package leadership

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// testWait bounds every wait in these tests. It is a deadline, never a
// pause: a correct run never waits for it.
const testWait = 10 * time.Second

// testCluster is the cluster id every fake node belongs to.
const testCluster = "c0ffee"

// fakeRaft is a Raft whose term, leader and voters a test sets.
type fakeRaft struct {
	mu     sync.Mutex
	term   uint64
	leads  bool
	leader string
	voters []string
}

func (r *fakeRaft) CurrentTerm() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.term
}

func (r *fakeRaft) Leads() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leads
}

func (r *fakeRaft) Leader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader
}

func (r *fakeRaft) Voters() ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.voters...), nil
}

// fakeNode is a Node whose members' addresses a test points where it
// likes; its connections are plain gRPC clients.
type fakeNode struct {
	t       *testing.T
	mu      sync.Mutex
	self    string // this node's own gRPC address
	addrs   map[string]string
	release bool // what MayRelease answers
	conns   map[string]*grpc.ClientConn
}

func newFakeNode(t *testing.T, self string) *fakeNode {
	n := &fakeNode{t: t, self: self, addrs: map[string]string{}, release: true, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, c := range n.conns {
			c.Close()
		}
	})
	return n
}

func (n *fakeNode) ClusterID() string { return testCluster }
func (n *fakeNode) GRPCAddr() string  { return n.self }

func (n *fakeNode) NodeAddr(id string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a, ok := n.addrs[id]
	return a, ok
}

func (n *fakeNode) Conn(addr string) (grpc.ClientConnInterface, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	n.conns[addr] = c
	return c, nil
}

func (n *fakeNode) MayRelease(context.Context) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.release
}

// setRelease sets what MayRelease answers.
func (n *fakeNode) setRelease(ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.release = ok
}

// pointAt records addr as voter id's gRPC address, so that rounds ask
// whatever listens there.
func (n *fakeNode) pointAt(id, addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrs[id] = addr
}

// testTerm is the term every test's leader leads in.
const testTerm = 7

// testVoters are the voters of every test's cluster; the leader is the
// first.
var testVoters = []string{"n1", "n2", "n3"}

// mustConfirmer opens node id's Confirmer with the given lease, in a
// cluster of testVoters led by n1 in testTerm.
func mustConfirmer(t *testing.T, id string, lease time.Duration) (*Confirmer, *fakeRaft, *fakeNode) {
	t.Helper()
	r := &fakeRaft{term: testTerm, leads: id == testVoters[0], leader: testVoters[0], voters: testVoters}
	n := newFakeNode(t, "self-of-"+id)
	c, err := Open(Config{ID: id, Lease: lease, Timeout: testWait, Raft: r, Node: n, Store: raft.NewInmemStore(), Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, r, n
}

// endRestartHold lets c promise at once, as though its restart hold had
// run out.
func endRestartHold(c *Confirmer) {
	c.promises.mu.Lock()
	defer c.promises.mu.Unlock()
	c.promises.until = 0
}

// mustLeader is n1's Confirmer, leading in testTerm.
func mustLeader(t *testing.T) (*Confirmer, *fakeNode) {
	t.Helper()
	c, _, n := mustConfirmer(t, testVoters[0], 0)
	return c, n
}

// voterServer serves a voter's Confirmer as the Term RPC, as package
// server does.
type voterServer struct {
	api.UnimplementedPeerServer
	c *Confirmer
}

func (s voterServer) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	return s.c.AnswerTerms(stream)
}

// mustServeVoter serves c and returns its address.
func mustServeVoter(t *testing.T, c *Confirmer) string {
	t.Helper()
	return mustServe(t, voterServer{c: c})
}

// mustServe serves p until the test ends and returns its address.
func mustServe(t *testing.T, p api.PeerServer) string {
	t.Helper()
	return grpctest.Serve(t, func(s *grpc.Server) { api.RegisterPeerServer(s, p) })
}

// mustVoters starts n2 and n3 as real voters with the given leases,
// served over gRPC, and points leader at them.
func mustVoters(t *testing.T, leader *fakeNode, leases ...time.Duration) []*Confirmer {
	t.Helper()
	var out []*Confirmer
	for i, id := range testVoters[1:] {
		c, _, _ := mustConfirmer(t, id, leases[i])
		leader.pointAt(id, mustServeVoter(t, c))
		out = append(out, c)
	}
	return out
}

// mustConn is a connection to addr.
func (n *fakeNode) mustConn(t *testing.T, addr string) grpc.ClientConnInterface {
	t.Helper()
	c, err := n.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mustConfirmNow confirms c's leadership with a round, within testWait.
func mustConfirmNow(t *testing.T, c *Confirmer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := c.Confirm(ctx, false); err != nil {
		t.Fatalf("a round once no promise holds: %v, want it confirmed", err)
	}
}
