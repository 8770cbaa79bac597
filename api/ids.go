package api

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// LeaderAddrKey is the response trailer in which a node names the
// leader's gRPC address whenever it knows it, so clients can go there.
const LeaderAddrKey = "ordo-leader-addr"

// ClusterIDKey is the metadata key in which a node names its cluster, in
// the header of every answer once the cluster has an id, and in which a
// caller (a client, or a node forwarding to its leader) may name the
// cluster it means to reach: a node of another cluster refuses the call
// as Unavailable, so a client moves on to another address.
const ClusterIDKey = "ordo-cluster-id"

// TicksKey is the metadata key in which a Next or NextStream caller says
// that it renders 128-bit IDs itself: under a 128-bit layout (uuidv7,
// ulid) the runs carry ticks, not IDs, and the caller renders each with
// the cluster's group (from Layout) and random bits. A node of a 128-bit
// layout refuses a call without the key, and a node of a 64-bit layout a
// call with it (FailedPrecondition), so neither kind of caller can
// mistake one for the other. Any value counts; the Go client sends "1".
const TicksKey = "ordo-ticks"

// WithTicks names TicksKey in ctx's outgoing metadata when ticks is set:
// the call asks for ticks of a 128-bit layout.
func WithTicks(ctx context.Context, ticks bool) context.Context {
	if !ticks {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, TicksKey, "1")
}

// IDs expands the runs of a response into IDs, in order. It trusts the
// server; the Go client checks what it expands.
func (x *NextResponse) IDs() []uint64 {
	var ids []uint64
	for _, r := range x.GetRuns() {
		for i := range uint64(r.Count) {
			ids = append(ids, r.First+i*r.Step)
		}
	}
	return ids
}
