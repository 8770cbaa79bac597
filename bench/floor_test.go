package bench

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/server"
)

// mustServe starts a gRPC server on a free loopback port, with the health
// service if withHealth, and stops it when the test ends.
func mustServe(t *testing.T, withHealth bool) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if withHealth {
		healthpb.RegisterHealthServer(s, health.NewServer())
	}
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestFloorCountsRoundTrips(t *testing.T) {
	res, err := Run(context.Background(), Config{
		Target: TargetFloor, Addrs: []string{mustServe(t, true)},
		Concurrency: 4, Count: 1, Duration: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.IDs != 0 {
		t.Fatalf("floor run: %d requests, %d errors, %d IDs; want some requests, no errors, no IDs", res.Requests, res.Errors, res.IDs)
	}
	if !res.Check.OK() || res.Check.Acknowledged != int(res.Requests) {
		t.Fatalf("floor run's check: %+v, want OK with every request acknowledged", res.Check)
	}
}

// TestFloorNeedsAHealthService: a server without the health service
// fails the first call, so a wrong address cannot pass for a fast floor.
func TestFloorNeedsAHealthService(t *testing.T) {
	_, err := Run(context.Background(), Config{
		Target: TargetFloor, Addrs: []string{mustServe(t, false)},
		Concurrency: 1, Count: 1, Duration: 100 * time.Millisecond,
	})
	if err == nil {
		t.Fatal("floor run against a server without health checks succeeded")
	}
}

func TestFloorBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Target: TargetFloor, Addrs: []string{"x:1"}, Concurrency: 1, Count: 2, Duration: time.Second},
		{Target: TargetFloor, Addrs: []string{"x:1"}, Concurrency: 1, Count: 1, Duration: time.Second, Unary: true},
		{Target: TargetFloor, Addrs: []string{"x:1"}, Concurrency: 1, Count: 1, Duration: time.Second, Coalesce: 1},
		{Target: TargetStreamFloor, Addrs: []string{"x:1"}, Concurrency: 1, Count: 2, Duration: time.Second},
		{Target: TargetStreamFloor, Addrs: []string{"x:1"}, Concurrency: 1, Count: 1, Duration: time.Second, Unary: true},
		{Target: TargetStreamFloor, Addrs: []string{"x:1"}, Concurrency: 1, Count: 1, Duration: time.Second, Coalesce: 1},
		{Target: "nothing", Addrs: []string{"x:1"}, Concurrency: 1, Count: 1, Duration: time.Second},
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Run(%+v) = %v, want ErrBadConfig", cfg, err)
		}
	}
}

// mustNode starts one Ordo node in this process, a cluster of its own,
// and closes it when the test ends.
func mustNode(t *testing.T) *server.Node {
	t.Helper()
	l := layout.MustPreset("default")
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	n, err := server.Open(server.Config{
		ID: "n1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Layout: l, Raft: rc,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Warn, Output: testWriter{t}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	return n
}

// testWriter sends logs to the test log, so they show only on failure.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestStreamFloorCountsCalls: the stream floor runs against a real node,
// many callers on one stream, and counts calls that yield no IDs, so the
// order check has nothing to check.
func TestStreamFloorCountsCalls(t *testing.T) {
	n := mustNode(t)
	res, err := Run(context.Background(), Config{
		Target: TargetStreamFloor, Addrs: []string{n.GRPCAddr()},
		Concurrency: 16, Count: 1, Duration: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Target != TargetStreamFloor || res.Requests == 0 || res.Errors != 0 || res.IDs != 0 {
		t.Fatalf("stream floor run: target %q, %d requests, %d errors (last %q), %d IDs; want some requests, no errors, no IDs",
			res.Target, res.Requests, res.Errors, res.LastError, res.IDs)
	}
	if !res.Check.OK() || res.Check.IDs != 0 || res.Check.Acknowledged != int(res.Requests) {
		t.Fatalf("stream floor run's check: %+v, want OK with no IDs and every request acknowledged", res.Check)
	}
}

// TestStreamFloorNeedsTheFloorService: a server without it (a bare gRPC
// server, or a node from before it) fails the first call, so a wrong
// address cannot pass for a fast floor.
func TestStreamFloorNeedsTheFloorService(t *testing.T) {
	_, err := Run(context.Background(), Config{
		Target: TargetStreamFloor, Addrs: []string{mustServe(t, true)},
		Concurrency: 1, Count: 1, Duration: 100 * time.Millisecond,
	})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("stream floor run against a server without the Floor service: %v, want Unimplemented", err)
	}
}
