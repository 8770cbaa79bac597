package grpcapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// fakeAdmin is a leader whose only member is n1.
type fakeAdmin struct{ fakeNode }

// RemoveMember is the node's answer, as package server's gives it.
func (fakeAdmin) RemoveMember(_ context.Context, id string) error {
	if id != "n1" {
		return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, id)
	}
	return nil
}

// TestAdminRefusesBadFields: ids and addresses are checked before the
// node is asked anything, as InvalidArgument (the fake has no AddMember,
// and its RemoveMember would answer ErrUnknownNode); the node's own error,
// here ErrUnknownNode for a non-member, is NotFound; both name the leader
// in the trailer.
func TestAdminRefusesBadFields(t *testing.T) {
	srv := NewServer(Config{ID: "n1"}, Parts{Node: fakeAdmin{fakeNode{leader: true}}})
	c := api.NewAdminClient(mustServe(t, srv.Register))
	ctx := t.Context()
	var tr metadata.MD
	if _, err := c.Remove(ctx, &api.RemoveRequest{Id: "../n1"}, grpc.Trailer(&tr)); status.Code(err) != codes.InvalidArgument || len(tr.Get(api.LeaderAddrKey)) != 1 {
		t.Errorf("remove a bad id: %v (trailer %v), want InvalidArgument with the leader hint", err, tr)
	}
	if _, err := c.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "0.0.0.0:1", GrpcAddr: "127.0.0.1:2"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("join at a wildcard: %v, want InvalidArgument", err)
	}
	if _, err := c.Remove(ctx, &api.RemoveRequest{Id: "n9"}, grpc.Trailer(&tr)); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "not a member") || len(tr.Get(api.LeaderAddrKey)) != 1 {
		t.Errorf("remove a non-member: %v (trailer %v), want NotFound with the leader hint", err, tr)
	}
	if _, err := c.Remove(ctx, &api.RemoveRequest{Id: "n1"}); err != nil {
		t.Errorf("remove a member: %v", err)
	}
}
