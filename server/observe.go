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
