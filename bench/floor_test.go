package bench

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
	} {
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Run(%+v) = %v, want ErrBadConfig", cfg, err)
		}
	}
}
