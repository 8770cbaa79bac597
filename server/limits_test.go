package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
)

func TestCheckNodeID(t *testing.T) {
	for id, ok := range map[string]bool{
		"n1": true, "node-1.eu_west": true, strings.Repeat("a", maxIDLength): true,
		"": false, "-n1": false, "n 1": false, "n1\n": false, "n/1": false, "ü": false,
		strings.Repeat("a", maxIDLength+1): false,
	} {
		if err := checkNodeID(id); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("checkNodeID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func TestCheckDialAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7001": true, "node1.example:7001": true, "[::1]:7001": true,
		"127.0.0.1": false, ":7001": false, "0.0.0.0:7001": false, "[::]:7001": false,
		"127.0.0.1:0": false, "127.0.0.1:70000": false, "127.0.0.1:http": false,
		strings.Repeat("a", maxAddrLength) + ":1": false,
	} {
		if err := checkDialAddr(addr); (err == nil) != ok || (err != nil && !errors.Is(err, ErrBadRequest)) {
			t.Errorf("checkDialAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

// TestMessageSizeBound: a request larger than the bound is refused before
// any handler sees it, and the node serves on.
func TestMessageSizeBound(t *testing.T) {
	n := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	conn := mustConn(t, n.GRPCAddr())
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
	n := mustOpen(t, testConfig(t, "n1", t.TempDir()))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, n.GRPCAddr(), 1)
	admin := api.NewAdminClient(mustConn(t, n.GRPCAddr()))
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
