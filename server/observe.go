package server

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/metrics"
)

// Metrics is this node's metrics, for serving them (the HTTP port) and
// for adding Raft's own (metrics.CollectRaft).
func (n *Node) Metrics() *metrics.Metrics { return n.metrics }

// measureUnary counts and times every unary call, denied ones included.
func (n *Node) measureUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	n.metrics.Served(info.FullMethod, status.Code(err).String(), time.Since(start))
	return resp, err
}

// measureStream counts and times every stream, from open to end.
func (n *Node) measureStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	n.metrics.Served(info.FullMethod, status.Code(err).String(), time.Since(start))
	return err
}

// nodeSource is what the metrics read from a node at each scrape.
type nodeSource struct{ n *Node }

func (s nodeSource) Term() uint64 { return s.n.raft.CurrentTerm() }
func (s nodeSource) Role() string { return roleName(s.n.raft.State()) }

func (s nodeSource) Indexes() (commit, applied uint64) {
	return s.n.raft.CommitIndex(), s.n.raft.AppliedIndex()
}

func (s nodeSource) LastContact() time.Time {
	if s.n.isLeader() {
		return time.Now()
	}
	return s.n.raft.LastContact()
}

func (s nodeSource) HighWater() uint64            { return s.n.fsm.HighWater() }
func (s nodeSource) TimestampLead() time.Duration { return s.n.seq.TimestampLead() }
func (s nodeSource) LeaseLeft() time.Duration     { return s.n.seq.LeaseLeft() }
