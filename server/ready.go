package server

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// readinessPoll is how often the gRPC health service is brought up to
// date. Readiness depends on Raft's leader, the sequencer and the time
// since the leader was last heard from; the last changes with no event
// to wait for, so it is polled. It is cheap: no call leaves the node.
const readinessPoll = 100 * time.Millisecond

// ready returns nil when this node can serve IDs now, and why not
// otherwise: the one readiness check behind the gRPC health service and
// HTTP /readyz. A leader is ready once its sequencer serves (it committed
// its first reservation); a follower once it knows the leader, can
// forward to it, and heard from it recently.
func (n *Node) Ready() error {
	select {
	case <-n.stop:
		return fmt.Errorf("%w: shutting down", sequencer.ErrNotLeader)
	default:
	}
	if err := n.Refusal(); err != nil {
		return fmt.Errorf("%w: %w", grpcapi.ErrRefusing, err)
	}
	if member, known := n.isMember(n.cfg.ID); !known {
		return fmt.Errorf("%w: this node is in no cluster yet (bootstrap it or join one)", grpcapi.ErrNotReady)
	} else if !member {
		return fmt.Errorf("%w: this node is not a member of the cluster", grpcapi.ErrNotReady)
	}
	switch n.raft.State() {
	case raft.Leader:
		if !n.seq.Serving() {
			return fmt.Errorf("%w: this node leads but has not committed its first reservation yet", sequencer.ErrNotLeader)
		}
		return nil
	case raft.Follower:
	default:
		return fmt.Errorf("%w: an election is under way", grpcapi.ErrNoLeader)
	}
	id, addr := n.Leader()
	if id == "" || id == n.cfg.ID {
		return grpcapi.ErrNoLeader
	}
	if addr == "" {
		return fmt.Errorf("%w: the gRPC address of leader %s is not known yet", grpcapi.ErrNoLeader, id)
	}
	// A follower that has not heard from the leader for two heartbeat
	// timeouts would have started an election by now (Raft's timer fires
	// between one and two); one that has is about to.
	bound := 2 * n.cfg.Raft.HeartbeatTimeout
	if last := n.raft.LastContact(); last.IsZero() || time.Since(last) > bound {
		return fmt.Errorf("%w: leader %s not heard from for over %s", grpcapi.ErrNoLeader, id, bound)
	}
	if n.fsm.ClusterID() == "" {
		return fmt.Errorf("%w: this node has not caught up with the cluster's log yet", grpcapi.ErrNotReady)
	}
	return nil
}

// newHealth returns the gRPC health service, NOT_SERVING until the first
// readiness check, and starts keeping it equal to ready().
func (n *Node) newHealth() *health.Server {
	hs := health.NewServer()
	for _, svc := range healthServices {
		hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	n.health = hs
	n.wg.Add(1)
	go n.watchReadiness(hs)
	return hs
}

// healthServices are the names the health service answers for: the whole
// server ("") and the Sequencer, both meaning "can hand out IDs".
var healthServices = []string{"", api.Sequencer_ServiceDesc.ServiceName}

// watchReadiness sets the health service's status from ready() until
// the node stops, only on changes (every change wakes every Watch).
func (n *Node) watchReadiness(hs *health.Server) {
	defer n.wg.Done()
	tick := time.NewTicker(readinessPoll)
	defer tick.Stop()
	last := healthpb.HealthCheckResponse_NOT_SERVING
	for {
		err := n.Ready()
		want := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			want = healthpb.HealthCheckResponse_NOT_SERVING
		}
		if want != last {
			n.logger.Named("health").Debug("readiness changed", "serving", err == nil, "reason", err)
			for _, svc := range healthServices {
				hs.SetServingStatus(svc, want)
			}
			last = want
		}
		select {
		case <-n.stop:
			return
		case <-tick.C:
		}
	}
}
