package grpcapi

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/secure"
)

// fakeNode is a Node with a fixed cluster and leader. ToStatus marks what
// it was given instead of mapping it: the mapping is package server's.
type fakeNode struct {
	cluster string
	leader  bool
}

func (f fakeNode) ClusterID() string         { return f.cluster }
func (f fakeNode) IsLeader() bool            { return f.leader }
func (f fakeNode) Leader() (id, addr string) { return "n1", "10.0.0.1:7000" }
func (f fakeNode) ToStatus(_ context.Context, err error, leaderAddr string) error {
	if err == nil {
		return nil // as the node's toStatus: a stream that ends well
	}
	return &mapped{err: err, leaderAddr: leaderAddr}
}

type mapped struct {
	err        error
	leaderAddr string
}

func (m *mapped) Error() string { return m.err.Error() }
func (m *mapped) Unwrap() error { return m.err }

// call runs Auth.Unary for method with incoming metadata md, and returns
// what the handler saw (whether it ran) and the error.
func call(a *Auth, method string, md metadata.MD, req any) (ran bool, err error) {
	ctx := metadata.NewIncomingContext(context.Background(), md)
	_, err = a.Unary(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	return ran, err
}

// TestAuthPlaintextToken: without TLS, clients call freely, admin calls
// need the token, and a wrong token is named as such; refusals leave
// through Node.ToStatus with the leader hint.
func TestAuthPlaintextToken(t *testing.T) {
	a := NewAuth(fakeNode{}, AuthConfig{AdminToken: secure.NewToken("s3cret-token-of-16+"), Logger: hclog.NewNullLogger()})
	if ran, err := call(a, api.Sequencer_Next_FullMethodName, nil, nil); !ran || err != nil {
		t.Fatalf("Next: ran %v, %v; want it served", ran, err)
	}
	ran, err := call(a, api.Admin_Remove_FullMethodName, nil, nil)
	var m *mapped
	if ran || !errors.Is(err, ErrPermissionDenied) || !errors.As(err, &m) || m.leaderAddr != "10.0.0.1:7000" {
		t.Fatalf("Remove without a token: ran %v, %v; want ErrPermissionDenied through ToStatus with the leader hint", ran, err)
	}
	if ran, err := call(a, api.Admin_Remove_FullMethodName, metadata.Pairs(AuthorizationKey, "Bearer wrong"), nil); ran || !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("Remove with a wrong token: ran %v, %v; want ErrPermissionDenied", ran, err)
	}
	if ran, err := call(a, api.Admin_Remove_FullMethodName, metadata.Pairs(AuthorizationKey, "Bearer s3cret-token-of-16+"), nil); !ran || err != nil {
		t.Fatalf("Remove with the token: ran %v, %v; want it served", ran, err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(AuthorizationKey, "Bearer s3cret-token-of-16+"))
	if !a.MayRelease(ctx) || a.MayRelease(context.Background()) {
		t.Fatal("MayRelease: want true with the token only")
	}
}

// TestAuthWrongCluster: a call naming another cluster is refused before
// authorization, without a leader hint (it names this cluster's leader);
// one naming this cluster, or none, passes.
func TestAuthWrongCluster(t *testing.T) {
	a := NewAuth(fakeNode{cluster: "c1"}, AuthConfig{Logger: hclog.NewNullLogger()})
	ran, err := call(a, api.Sequencer_Next_FullMethodName, metadata.Pairs(api.ClusterIDKey, "c2"), nil)
	var m *mapped
	if ran || !errors.Is(err, ErrWrongCluster) || !errors.As(err, &m) || m.leaderAddr != "" {
		t.Fatalf("call for another cluster: ran %v, %v; want ErrWrongCluster with no hint", ran, err)
	}
	for _, md := range []metadata.MD{metadata.Pairs(api.ClusterIDKey, "c1"), nil} {
		if ran, err := call(a, api.Sequencer_Next_FullMethodName, md, nil); !ran || err != nil {
			t.Fatalf("call with %v: ran %v, %v; want it served", md, ran, err)
		}
	}
	// Before the node has a cluster id, nothing is checked.
	a = NewAuth(fakeNode{}, AuthConfig{Logger: hclog.NewNullLogger()})
	if ran, err := call(a, api.Sequencer_Next_FullMethodName, metadata.Pairs(api.ClusterIDKey, "c2"), nil); !ran || err != nil {
		t.Fatalf("call to a node without a cluster id: ran %v, %v; want it served", ran, err)
	}
}

// TestWithAdminToken: a node's own calls carry the token only when one
// is configured.
func TestWithAdminToken(t *testing.T) {
	if md, _ := metadata.FromOutgoingContext(WithAdminToken(context.Background(), "")); len(md.Get(AuthorizationKey)) != 0 {
		t.Fatalf("no token configured: %v sent", md)
	}
	md, _ := metadata.FromOutgoingContext(WithAdminToken(context.Background(), "tok"))
	if got := md.Get(AuthorizationKey); len(got) != 1 || got[0] != "Bearer tok" {
		t.Fatalf("token sent as %v, want [Bearer tok]", got)
	}
}
