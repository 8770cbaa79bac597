package grpcapi

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
)

// fakeAdmin is a leader with one member, n1. Only the methods these tests
// reach are written; the rest of AdminNode is left nil.
type fakeAdmin struct {
	AdminNode
	fakeNode
}

func (f fakeAdmin) ClusterID() string         { return f.fakeNode.ClusterID() }
func (f fakeAdmin) IsLeader() bool            { return true }
func (f fakeAdmin) Leader() (id, addr string) { return f.fakeNode.Leader() }
func (f fakeAdmin) ToStatus(ctx context.Context, err error, leaderAddr string) error {
	return f.fakeNode.ToStatus(ctx, err, leaderAddr)
}
func (f fakeAdmin) Forward(context.Context) (*grpc.ClientConn, bool, error) { return nil, false, nil }
func (f fakeAdmin) IsMember(id string) bool                                 { return id == "n1" }

// TestAdminRefusesBadFields: ids and addresses are checked before the
// node is asked anything, as ErrBadRequest; a non-member is ErrUnknownNode;
// both leave through Node.ToStatus with the leader hint.
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
	if _, err := a.Remove(ctx, &api.RemoveRequest{Id: "n9"}); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("remove a non-member: %v, want ErrUnknownNode", err)
	}
}
