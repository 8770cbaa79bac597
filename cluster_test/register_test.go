package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// TestRegisterNeedsTheMemberItself: on real processes with an admin token,
// Admin/Register, which moves the address followers forward to and leader
// hints name, is refused without the token, for an address that answers
// as another node, and for the leader's own id; followers then still
// forward to the real leader.
func TestRegisterNeedsTheMemberItself(t *testing.T) {
	const token = "register-test-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := mustNewCluster(t, clusterOpts{args: []string{"--admin-token-file", tokenFile}})
	c.mustServe()
	leader := c.mustLeader()
	follower := c.mustFollowers()[0]
	admin := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	withToken := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	for _, tt := range []struct {
		name string
		ctx  context.Context
		req  *api.RegisterRequest
		want codes.Code
	}{
		{"without the token", ctx, &api.RegisterRequest{Id: follower.Name, GrpcAddr: leader.GRPCAddr}, codes.PermissionDenied},
		{"at an address that answers as another node", withToken, &api.RegisterRequest{Id: follower.Name, GrpcAddr: leader.GRPCAddr}, codes.PermissionDenied},
		{"the leader's id", withToken, &api.RegisterRequest{Id: leader.Name, GrpcAddr: follower.GRPCAddr}, codes.InvalidArgument},
	} {
		_, err := admin.Register(tt.ctx, tt.req)
		if got := status.Code(err); got != tt.want {
			t.Errorf("Register %s: %v, want %s", tt.name, err, tt.want)
		}
	}
	// The follower forwards Next to the leader at its real address.
	seq := api.NewSequencerClient(grpctest.Dial(t, follower.GRPCAddr))
	deadline := time.Now().Add(leaderTimeout)
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := seq.Next(actx, &api.NextRequest{Count: 1})
		acancel()
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("Next through follower %s after the refused registrations: %v", follower.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
