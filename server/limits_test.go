package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// TestMessageSizeBound: a request larger than the bound is refused before
// any handler sees it, and the node serves on.
func TestMessageSizeBound(t *testing.T) {
	n := mustBootstrap(t, testConfig(t, "n1", t.TempDir()))
	conn := grpctest.Dial(t, n.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := api.NewAdminClient(conn).Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: strings.Repeat("x", grpcapi.MaxMessageBytes)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("join of %d bytes: %v, want ResourceExhausted", grpcapi.MaxMessageBytes, err)
	}
	mustNext(t, n.GRPCAddr(), 1)
}

// TestAdminFieldsValidated: bad ids and addresses are InvalidArgument.
func TestAdminFieldsValidated(t *testing.T) {
	n := mustBootstrap(t, testConfig(t, "n1", t.TempDir()))
	mustNext(t, n.GRPCAddr(), 1)
	admin := api.NewAdminClient(grpctest.Dial(t, n.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"join with a bad id": func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n 2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
			return err
		},
		"join at a wildcard": func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "0.0.0.0:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
			return err
		},
		"join at port 0": func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:0", Layout: "default"})
			return err
		},
		"remove a bad id": func() error {
			_, err := admin.Remove(ctx, &api.RemoveRequest{Id: "../n1"})
			return err
		},
		"transfer to a bad id": func() error {
			_, err := admin.TransferLeader(ctx, &api.TransferLeaderRequest{Id: strings.Repeat("n", 100)})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
}
