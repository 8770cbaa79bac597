package grpcapi

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpcerr"
)

// peerAdmin answers NodeStatus as member id.
type peerAdmin struct {
	api.UnimplementedAdminServer
	id string
}

func (p peerAdmin) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	return &api.NodeInfo{Id: p.id, Role: "follower"}, nil
}

// onePeerNode is a leader whose only other member is n2 at peer; it does
// not list itself, so Status asks n2 only.
type onePeerNode struct {
	fakeNode
	peer string
}

func (n onePeerNode) Members() ([]Member, error) {
	return []Member{{ID: "n2", RaftAddr: "127.0.0.1:1", GRPCAddr: n.peer, Voter: true}}, nil
}

// servePeer serves peerAdmin n2 on addr until the returned stop is called
// (or the test ends), and returns the address it listens on.
func servePeer(t *testing.T, addr string) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	s := grpc.NewServer()
	api.RegisterAdminServer(s, peerAdmin{id: "n2"})
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.Serve(lis)
	}()
	stop := func() {
		s.Stop()
		<-served
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// TestStatusSeesARestartedPeerAtOnce: a member whose gRPC server stopped is
// listed unreachable, and once it serves again at the same address, the
// next Status lists it as it answers, not unreachable with the error of a
// connection attempt made before it came back (the peer connection's
// reconnect backoff, which grows while the member is down).
func TestStatusSeesARestartedPeerAtOnce(t *testing.T) {
	addr, stop := servePeer(t, "127.0.0.1:0")
	peers := NewPeers(insecure.NewCredentials(), func() string { return "" }, "")
	t.Cleanup(peers.Close)
	srv := NewServer(Config{ID: "n1"}, Parts{Node: onePeerNode{fakeNode{leader: true}, addr}, State: fsm.New(nil, nil), Peers: peers, Meter: nopMeter{}})
	n2 := func() *api.NodeInfo {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := srv.Status(ctx)
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		if len(resp.Nodes) != 1 || resp.Nodes[0].Id != "n2" {
			t.Fatalf("Status lists %v, want n2 alone", resp.Nodes)
		}
		return resp.Nodes[0]
	}
	if got := n2(); got.Role != "follower" {
		t.Fatalf("n2 while it serves: %v, want it as it answers", got)
	}

	stop()
	deadline := time.Now().Add(10 * time.Second)
	for got := n2(); got.Role != "unreachable"; got = n2() {
		if time.Now().After(deadline) {
			t.Fatalf("n2 stopped, still listed as %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Asked again while it is down, as an operator's status would be: the
	// peer connection's attempts fail, and its backoff grows.
	for range 3 {
		if got := n2(); got.Role != "unreachable" || strings.Contains(got.Error, "transport") {
			t.Fatalf("n2 down: %v, want unreachable, saying why without gRPC's transport internals", got)
		}
	}

	servePeer(t, addr)
	if got := n2(); got.Role != "follower" {
		t.Fatalf("n2 serves again at %s, but the first status after lists it as %v", addr, got)
	}
	// The cached connection, which forwarded calls use, was told to
	// reconnect too.
	cached, err := peers.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for st := cached.GetState(); st != connectivity.Ready; st = cached.GetState() {
		cached.Connect()
		if !cached.WaitForStateChange(ctx, st) {
			t.Fatalf("the cached connection to n2 is still %v", st)
		}
	}
}

// TestTransportReason: grpc-go's transport failures are told from a
// server's Unavailable answers, and said in a few words.
func TestTransportReason(t *testing.T) {
	for _, c := range []struct {
		msg, want string
		ok        bool
	}{
		{`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:7001: connect: connection refused"`, "connection refused", true},
		{`connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`, "certificate signed by unknown authority", true},
		{`connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.1:7001: i/o timeout"`, "timed out", true},
		{"error reading from server: EOF", "the connection closed", true},
		{"transport is closing", "the connection closed", true},
		{"no leader known; leader is at 127.0.0.1:7001", "", false},
		{"this node refuses to serve: removed from the cluster", "", false},
	} {
		got, ok := grpcerr.TransportReason(c.msg)
		if got != c.want || ok != c.ok {
			t.Errorf("TransportReason(%q) = %q, %v; want %q, %v", c.msg, got, ok, c.want, c.ok)
		}
	}
}

// TestEndedByClient: a stream counts as ended by its client only when
// the client canceled it, not when it timed out or the node failed it.
func TestEndedByClient(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	live := context.Background()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"the client canceled", canceled, status.Error(codes.Canceled, "context canceled"), true},
		{"the client canceled, as a context error", canceled, context.Canceled, true},
		{"the client's deadline passed", expired, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{"the node failed it", canceled, status.Error(codes.Unavailable, "not the leader"), false},
		{"the stream lives", live, status.Error(codes.Canceled, "canceled"), false},
		{"no error", canceled, nil, false},
	} {
		if got := endedByClient(c.ctx, c.err); got != c.want {
			t.Errorf("%s: endedByClient = %v, want %v", c.name, got, c.want)
		}
	}
}
