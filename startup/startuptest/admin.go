// Package startuptest fakes, for tests, the peers a starting node asks
// before it decides to bootstrap, join or refuse (package startup), and
// that a running node asks about its cluster (package server): a gRPC
// Admin service whose answers the test sets.
package startuptest

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// Admin answers questions as a peer would: its NodeStatus is Info
// (Unavailable when nil), its Status lists Members under Leader. Every
// other call is Unimplemented.
type Admin struct {
	api.UnimplementedAdminServer
	Info    *api.NodeInfo
	Members []string
	Leader  string
}

// NodeStatus answers Info, or Unavailable when Info is nil.
func (a *Admin) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	if a.Info == nil {
		return nil, status.Error(codes.Unavailable, "no status")
	}
	return a.Info, nil
}

// Status lists Members, each by id only, under Leader.
func (a *Admin) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	r := &api.StatusResponse{LeaderId: a.Leader}
	for _, m := range a.Members {
		r.Nodes = append(r.Nodes, &api.NodeInfo{Id: m})
	}
	return r, nil
}

// Serve serves a on a free loopback port until the test ends and returns
// its address.
func Serve(t testing.TB, a *Admin) string {
	t.Helper()
	return grpctest.Serve(t, func(s *grpc.Server) { api.RegisterAdminServer(s, a) })
}
