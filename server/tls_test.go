package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/leadership/leadershiptest"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/startup"
)

// adminToken is the token the TLS cluster of these tests accepts.
const adminToken = "a-test-token-of-some-length"

// tlsCluster is a three-node cluster with mutual TLS, admins by subject
// CN=ordo-admin or by adminToken, and every node's log collected so tests
// can check that refusals are logged.
type tlsCluster struct {
	pki   *securetest.PKI
	nodes []*Node
	logs  *logBuffer
}

func mustTLSCluster(t *testing.T) *tlsCluster {
	t.Helper()
	return mustTLSClusterWith(t, nil)
}

// mustTLSClusterWith is mustTLSCluster with each node's Config passed
// through configure last (when not nil).
func mustTLSClusterWith(t *testing.T, configure func(*Config)) *tlsCluster {
	t.Helper()
	c := &tlsCluster{pki: securetest.New(t, "ordo-test-ca"), logs: &logBuffer{}}
	node := securetest.MustLoad(t, c.pki.Node("ordo-node"))
	c.nodes = mustClusterWith(t, func(cfg *Config) {
		cfg.TLS = node
		cfg.AdminSubjects = []string{"CN=ordo-admin"}
		cfg.AdminToken = adminToken
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.ID, Level: hclog.Warn, Output: c.logs})
		if configure != nil {
			configure(cfg)
		}
	})
	return c
}

// conn dials addr as the holder of files.
func (c *tlsCluster) conn(t *testing.T, addr string, files secure.Files, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	tl := securetest.MustLoad(t, files)
	opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(tl.ClientConfig())))
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callNext(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := api.NewSequencerClient(conn).Next(ctx, &api.NextRequest{Count: 1})
	return err
}

// untilAvailable runs call until it returns anything but Unavailable, for
// at most 10 s: leadership may move while a loaded machine runs the
// test's fast timers, and a call meanwhile finds no leader.
func untilAvailable(call func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nextServed is callNext until the cluster answers, up to untilAvailable's
// bound.
func nextServed(conn *grpc.ClientConn) error {
	return untilAvailable(func() error { return callNext(conn) })
}

// TestTLSRefusesCertificates: a client without a certificate, with one
// from another CA, or with an expired one, gets nothing; each refusal is
// logged with the subject presented; and the cluster keeps serving.
func TestTLSRefusesCertificates(t *testing.T) {
	c := mustTLSCluster(t)
	addr := mustLeader(t, c.nodes).GRPCAddr()
	other := securetest.New(t, "another-ca")
	noCert := secure.Files{CA: c.pki.CAFile()}
	foreign := other.Client("stranger")
	foreign.CA = c.pki.CAFile() // trusts the cluster, but is not trusted by it
	for _, tt := range []struct {
		name    string
		files   secure.Files
		logSays string
	}{
		{"no certificate", noCert, ""},
		{"another CA", foreign, "CN=stranger"},
		{"expired", c.pki.Expired("old-client"), "CN=old-client"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := callNext(c.conn(t, addr, tt.files))
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Next with %s: %v, want the handshake refused (Unavailable)", tt.name, err)
			}
			if tt.logSays != "" {
				eventually.True(t, seqTestWait, "a log of refusing "+tt.logSays, func() bool { return strings.Contains(c.logs.String(), tt.logSays) })
			}
		})
	}
	if err := nextServed(c.conn(t, addr, c.pki.Client("good-client"))); err != nil {
		t.Fatalf("a good client after the refusals: %v", err)
	}
}

// TestTLSAuthorizes: clients may ask for IDs and read status, but not
// change the cluster or answer for a node; admins by subject or token may.
func TestTLSAuthorizes(t *testing.T) {
	c := mustTLSCluster(t)
	leader := mustLeader(t, c.nodes)
	addr := leader.GRPCAddr()
	clientConn := c.conn(t, addr, c.pki.Client("ordo-client"))
	adminConn := c.conn(t, addr, c.pki.Client("ordo-admin"))
	withToken := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	}
	// Removing an unknown node passes authorization and then fails with
	// NotFound, so it tells the two apart without changing the cluster.
	remove := func(ctx context.Context, conn *grpc.ClientConn) error {
		return untilAvailable(func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := api.NewAdminClient(conn).Remove(ctx, &api.RemoveRequest{Id: "nobody"})
			return err
		})
	}
	for _, tt := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"client asks for IDs", nextServed(clientConn), codes.OK},
		{"client reads status", func() error {
			_, err := api.NewAdminClient(clientConn).Status(context.Background(), &api.StatusRequest{})
			return err
		}(), codes.OK},
		{"client removes", remove(context.Background(), clientConn), codes.PermissionDenied},
		{"client with a wrong token removes", remove(withToken("not-the-token-at-all"), clientConn), codes.PermissionDenied},
		{"client with the token removes", remove(withToken(adminToken), clientConn), codes.NotFound},
		{"admin removes", remove(context.Background(), adminConn), codes.NotFound},
		{"client asks a node's term", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			// A refused stream may end before the send: AskTerm
			// gives its status either way.
			_, err := leadershiptest.AskTerm(ctx, clientConn, &api.TermRequest{NodeId: leader.ID(), ClusterId: leader.fsm.ClusterID()})
			return err
		}(), codes.PermissionDenied},
	} {
		if got := status.Code(tt.err); got != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, tt.err, tt.want)
		}
	}
	if !strings.Contains(c.logs.String(), "CN=ordo-client") {
		t.Errorf("denials not logged with the caller's subject; logs:\n%s", c.logs)
	}
	if err := nextServed(clientConn); err != nil {
		t.Fatalf("the cluster stopped serving after the denials: %v", err)
	}
}

// TestTLSJoinOnlyAtOwnAddresses: a node certificate lets a node join, or
// register a member's new gRPC address, but only at addresses the
// certificate names; a client certificate cannot register at all.
func TestTLSJoinOnlyAtOwnAddresses(t *testing.T) {
	c := mustTLSCluster(t)
	leader := mustLeader(t, c.nodes)
	addr := leader.GRPCAddr()
	elsewhere := api.NewAdminClient(c.conn(t, addr, c.pki.Node("ordo-node-elsewhere", "10.9.9.9")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := elsewhere.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("join at addresses the certificate does not name: %v, want PermissionDenied", err)
	}
	member := followerOf(c.nodes, leader)
	for _, tt := range []struct {
		name  string
		files secure.Files
		req   *api.RegisterRequest
		want  codes.Code
	}{
		{"node certificate, its own address", c.pki.Node("ordo-node"), &api.RegisterRequest{Id: member.ID(), GrpcAddr: member.GRPCAddr()}, codes.OK},
		{"node certificate, an address it does not name", c.pki.Node("ordo-node-elsewhere", "10.9.9.9"), &api.RegisterRequest{Id: member.ID(), GrpcAddr: "127.0.0.1:2"}, codes.PermissionDenied},
		{"client certificate", c.pki.Client("ordo-client"), &api.RegisterRequest{Id: member.ID(), GrpcAddr: member.GRPCAddr()}, codes.PermissionDenied},
		{"not a member", c.pki.Node("ordo-node"), &api.RegisterRequest{Id: "n9", GrpcAddr: "127.0.0.1:2"}, codes.NotFound},
		{"another member's address", c.pki.Node("ordo-node"), &api.RegisterRequest{Id: member.ID(), GrpcAddr: addr}, codes.PermissionDenied},
		{"the leader's id", c.pki.Node("ordo-node"), &api.RegisterRequest{Id: leader.ID(), GrpcAddr: member.GRPCAddr()}, codes.InvalidArgument},
	} {
		_, err := api.NewAdminClient(c.conn(t, addr, tt.files)).Register(ctx, tt.req)
		if got := status.Code(err); got != tt.want {
			t.Errorf("register, %s: %v, want %s", tt.name, err, tt.want)
		}
	}
	if got, _ := leader.fsm.NodeAddr(member.ID()); got != member.GRPCAddr() {
		t.Errorf("%s recorded at %s after the refused registrations, want %s", member.ID(), got, member.GRPCAddr())
	}
}

// TestTLSRaftRefusesStrangers: the Raft port talks only to node
// certificates of the cluster CA. A client certificate, or a node
// certificate of another CA, cannot send AppendEntries (nor vote).
func TestTLSRaftRefusesStrangers(t *testing.T) {
	c := mustTLSCluster(t)
	leader := mustLeader(t, c.nodes)
	follower := followerOf(c.nodes, leader)
	other := securetest.New(t, "another-ca")
	foreignNode := other.Node("ordo-node")
	foreignNode.CA = c.pki.CAFile()
	for _, tt := range []struct {
		name  string
		files secure.Files
	}{
		{"client certificate", c.pki.Client("ordo-client")},
		{"node of another CA", foreignNode},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := mustRaftTransport(t, securetest.MustLoad(t, tt.files))
			req := &raft.AppendEntriesRequest{
				RPCHeader: raft.RPCHeader{ID: []byte("intruder"), Addr: []byte(tr.LocalAddr())},
				Term:      1 << 40, // a term that would depose the leader
			}
			var resp raft.AppendEntriesResponse
			err := tr.AppendEntries(raft.ServerID(follower.ID()), raft.ServerAddress(follower.RaftAddr()), req, &resp)
			if err == nil {
				t.Fatalf("AppendEntries from a %s succeeded: %+v", tt.name, resp)
			}
		})
	}
	if term := follower.raft.CurrentTerm(); term >= 1<<40 {
		t.Fatalf("the follower took the intruder's term %d", term)
	}
	eventually.True(t, seqTestWait, "a log of refusing the raft peers", func() bool { return strings.Contains(c.logs.String(), "refused a TLS peer") })
	if err := nextServed(c.conn(t, leader.GRPCAddr(), c.pki.Client("ordo-client"))); err != nil {
		t.Fatalf("the cluster stopped serving: %v", err)
	}
}

// mustRaftTransport is a Raft transport on a free loopback port that
// speaks TLS as the holder of tl.
func mustRaftTransport(t *testing.T, tl *secure.TLS) *raft.NetworkTransport {
	t.Helper()
	stream, err := newStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	stream.useTLS(tl.ServerConfig(nil, true), tl.ClientConfig())
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestPlaintextOnlyOnLoopback: without TLS a node refuses to bind an
// address that is not loopback, unless told --insecure.
func TestPlaintextOnlyOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		raft, grpc string
		insecure   bool
		ok         bool
	}{
		{"127.0.0.1:0", "127.0.0.1:0", false, true},
		{"localhost:0", "[::1]:0", false, true},
		{"0.0.0.0:0", "127.0.0.1:0", false, false},
		{"127.0.0.1:0", ":0", false, false},
		{"127.0.0.1:0", "10.1.2.3:7001", false, false},
		{"0.0.0.0:0", "10.1.2.3:7001", true, true},
	} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.RaftAddr, cfg.GRPCAddr, cfg.Insecure = tt.raft, tt.grpc, tt.insecure
		err := cfg.Validate()
		if tt.ok && err != nil {
			t.Errorf("raft %s grpc %s insecure %v: %v", tt.raft, tt.grpc, tt.insecure, err)
		}
		if !tt.ok && !errors.Is(err, startup.ErrBadConfig) {
			t.Errorf("raft %s grpc %s insecure %v: %v, want startup.ErrBadConfig", tt.raft, tt.grpc, tt.insecure, err)
		}
	}
}

// TestTLSNeedsANodeCertificate: a node refuses to serve with a client
// certificate, which peers would refuse anyway.
func TestTLSNeedsANodeCertificate(t *testing.T) {
	pki := securetest.New(t, "ca")
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.TLS = securetest.MustLoad(t, pki.Client("not-a-node"))
	if err := cfg.Validate(); !errors.Is(err, startup.ErrBadConfig) {
		t.Fatalf("Validate with a client certificate: %v, want startup.ErrBadConfig", err)
	}
	cfg.TLS = securetest.MustLoad(t, pki.Node("node"))
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with a node certificate: %v", err)
	}
}

// TestTLSJoinCannotForgeForwarding: the mark a follower puts on a call it
// forwards does not let a node certificate join elsewhere; the leader
// checks the addresses against the caller's own certificate.
func TestTLSJoinCannotForgeForwarding(t *testing.T) {
	c := mustTLSCluster(t)
	addr := mustLeader(t, c.nodes).GRPCAddr()
	elsewhere := c.conn(t, addr, c.pki.Node("ordo-node-elsewhere", "10.9.9.9"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, grpcapi.ForwardedKey, "1")
	_, err := api.NewAdminClient(elsewhere).Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("join marked as forwarded, at addresses the certificate does not name: %v, want PermissionDenied", err)
	}
}

// TestTLSNodeJoinsThroughAFollower: a follower sends a joining node to the
// leader, where its certificate is checked, and the node joins.
func TestTLSNodeJoinsThroughAFollower(t *testing.T) {
	c := mustTLSCluster(t)
	leader := mustLeader(t, c.nodes)
	follower := followerOf(c.nodes, leader)
	cfg := testConfig(t, "n4", t.TempDir())
	cfg.TLS = securetest.MustLoad(t, c.pki.Node("ordo-node"))
	n4 := mustOpen(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n4.Join(ctx, follower.GRPCAddr()); err != nil {
		t.Fatalf("join through follower %s: %v", follower.ID(), err)
	}
	if member, known := leader.isMember("n4"); !known || !member {
		t.Fatalf("n4 is not a member after joining: member %v, known %v", member, known)
	}
	// Being sent on to the leader is no denial: operators (and
	// TestVerifyTLS) read "denied" as a call refused for who made it.
	if strings.Contains(c.logs.String(), "denied") {
		t.Fatalf("a join sent on to the leader was logged as denied:\n%s", c.logs)
	}
}

// TestTLSRaftHandshakeIsBounded: a connection to the Raft port that never
// starts its handshake is closed, instead of holding a goroutine and a
// file for good.
func TestTLSRaftHandshakeIsBounded(t *testing.T) {
	pki := securetest.New(t, "ca")
	tl := securetest.MustLoad(t, pki.Node("ordo-node"))
	stream, err := newStreamLayer("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	stream.useTLS(tl.ServerConfig(nil, true), tl.ClientConfig())
	mustCloseSilentDialer(t, stream, "a silent connection to the Raft port")
}
