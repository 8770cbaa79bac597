package bench

// The floor target: what one gRPC round trip costs on this machine, with
// nothing behind it. Run beside the other targets it turns their figures
// into ratios that mean something on any machine: an Ordo call is one
// client-to-leader round trip plus a leader-to-followers round, so it
// cannot beat this floor, and its distance from the floor is Ordo's own
// cost.

import (
	"context"
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// floorTarget calls the standard gRPC health check of one server. Every
// Ordo node serves it, and it does no work, so a run measures gRPC and the
// machine alone. Calls yield no IDs: there is no order to check.
type floorTarget struct {
	conn   *grpc.ClientConn
	health healthpb.HealthClient
}

func newFloorTarget(addr string, tlsConf *tls.Config) (*floorTarget, error) {
	creds := insecure.NewCredentials()
	if tlsConf != nil {
		creds = credentials.NewTLS(tlsConf)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("floor endpoint %q: %w", addr, err)
	}
	return &floorTarget{conn: cc, health: healthpb.NewHealthClient(cc)}, nil
}

func (t *floorTarget) call(ctx context.Context, _ int) ([]uint64, error) {
	if _, err := t.health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return nil, err
	}
	return nil, nil
}

func (t *floorTarget) warm(ctx context.Context) error {
	_, err := t.call(ctx, 0)
	return err
}

func (t *floorTarget) close() { t.conn.Close() }
