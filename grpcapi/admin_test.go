package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
)

// fakeAdmin is a leader whose only member is n1. Only the methods these
// tests reach are written: the rest of AdminNode sits one level down,
// nil, so that fakeNode's methods win over it.
type fakeAdmin struct {
	fakeNode
	unwritten
}

type unwritten struct{ AdminNode }

func (fakeAdmin) Forward(context.Context) (*grpc.ClientConn, bool, error) { return nil, false, nil }

// Remove is the node's answer, as package server's removeMember gives it.
func (fakeAdmin) Remove(_ context.Context, id string) error {
	if id != "n1" {
		return fmt.Errorf("%w: %q is not a member", ErrUnknownNode, id)
	}
	return nil
}

// TestAdminRefusesBadFields: ids and addresses are checked before the
// node is asked anything, as ErrBadRequest (the fake's Join is nil, and
// its Remove would answer ErrUnknownNode); the node's own error, here
// ErrUnknownNode for a non-member, passes through unchanged; both leave
// through Node.ToStatus with the leader hint.
func TestAdminRefusesBadFields(t *testing.T) {
	a := NewAdmin(fakeAdmin{})
	ctx := context.Background()
	var m *mapped
	if _, err := a.Remove(ctx, &api.RemoveRequest{Id: "../n1"}); !errors.Is(err, ErrBadRequest) || !errors.As(err, &m) || m.leaderAddr == "" {
		t.Errorf("remove a bad id: %v, want ErrBadRequest with the leader hint", err)
	}
	if _, err := a.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "0.0.0.0:1", GrpcAddr: "127.0.0.1:2"}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("join at a wildcard: %v, want ErrBadRequest", err)
	}
	if _, err := a.Remove(ctx, &api.RemoveRequest{Id: "n9"}); !errors.Is(err, ErrUnknownNode) || !errors.As(err, &m) || m.leaderAddr == "" {
		t.Errorf("remove a non-member: %v, want ErrUnknownNode with the leader hint", err)
	}
}
