package grpcapi

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/secure"
)

// fakeNode is a node of cluster c whose leader is n1 at addr
// (10.0.0.1:7000 unless set). Methods of Node these tests do not reach
// are the nil embedded Node's.
type fakeNode struct {
	Node
	cluster string
	leader  bool
	addr    string
}

func (f fakeNode) ClusterID() string { return f.cluster }
func (f fakeNode) Leads() bool       { return f.leader }
func (f fakeNode) IsLeader() bool    { return f.leader }
func (f fakeNode) Refusal() error    { return nil }
func (f fakeNode) Leader() (id, addr string) {
	if f.addr == "" {
		return "n1", "10.0.0.1:7000"
	}
	return "n1", f.addr
}

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
// need the token, and a wrong token is named as such; refusals leave as
// statuses (ToStatus).
func TestAuthPlaintextToken(t *testing.T) {
	a := NewAuth(fakeNode{}, AuthConfig{AdminToken: secure.NewToken("s3cret-token-of-16+"), Logger: hclog.NewNullLogger()})
	if ran, err := call(a, api.Sequencer_Next_FullMethodName, nil, nil); !ran || err != nil {
		t.Fatalf("Next: ran %v, %v; want it served", ran, err)
	}
	ran, err := call(a, api.Admin_Remove_FullMethodName, nil, nil)
	if ran || status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs an admin certificate or the admin token") {
		t.Fatalf("Remove without a token: ran %v, %v; want PermissionDenied naming the token", ran, err)
	}
	if ran, err := call(a, api.Admin_Remove_FullMethodName, metadata.Pairs(AuthorizationKey, "Bearer wrong"), nil); ran || status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "wrong admin token") {
		t.Fatalf("Remove with a wrong token: ran %v, %v; want PermissionDenied naming a wrong token", ran, err)
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
	if ran || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), ErrWrongCluster.Error()) || strings.Contains(err.Error(), "leader is at") {
		t.Fatalf("call for another cluster: ran %v, %v; want Unavailable, ErrWrongCluster with no hint", ran, err)
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
