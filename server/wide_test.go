package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
)

// widthCtx names api.TicksKey in ctx's outgoing metadata when l is a
// 128-bit layout, as a caller that renders its IDs does.
func widthCtx(ctx context.Context, l layout.Layout) context.Context {
	return api.WithTicks(ctx, l.Wide())
}

// TestWideLayoutCluster runs a three-node cluster with the uuidv7 layout:
// a call that asks for ticks gets them (from the leader, forwarded by a
// follower, unary and streamed), strictly increasing; one that does not,
// which would read ticks as IDs, is refused as FailedPrecondition by
// every node; and a 64-bit cluster refuses a call that asks for ticks.
func TestWideLayoutCluster(t *testing.T) {
	nodes := mustClusterWith(t, func(c *Config) { c.Layout = layout.MustPreset("uuidv7"); c.Group = 3 })
	leader := mustLeader(t, nodes)
	follower := followerOf(nodes, leader)
	ticks := widthCtx(context.Background(), leader.cfg.Layout)
	var last uint64
	for _, n := range []*Node{leader, follower} {
		conn := grpctest.Dial(t, n.GRPCAddr())
		last = mustIncrease(t, last, mustNextCtx(t, ticks, conn, 40000)) // more than one millisecond's counter
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := api.NewSequencerClient(conn).Next(ctx, &api.NextRequest{Count: 1})
		cancel()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), api.TicksKey) {
			t.Fatalf("%s: Next without %s = %v, want FailedPrecondition naming it", n.ID(), api.TicksKey, err)
		}
		// A stream without ordo-ticks may carry 64-bit named sequences'
		// calls; its first call of the default sequence ends it.
		// A leader change under load answers Unavailable first: ask again.
		for deadline := time.Now().Add(10 * time.Second); ; {
			ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
			var st grpc.BidiStreamingClient[api.NextStreamRequest, api.NextStreamResponse]
			st, err = api.NewSequencerClient(conn).NextStream(ctx)
			if err == nil {
				err = st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 1}}})
			}
			if err == nil {
				_, err = st.Recv()
			}
			cancel()
			if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: a default call on NextStream without %s = %v, want FailedPrecondition", n.ID(), api.TicksKey, err)
		}
		ctx, cancel = context.WithTimeout(ticks, 10*time.Second)
		st, err := api.NewSequencerClient(conn).NextStream(ctx)
		if err == nil {
			err = st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 3}}})
		}
		var resp *api.NextStreamResponse
		if err == nil {
			resp, err = st.Recv()
		}
		cancel()
		if err != nil || len(resp.Answers) != 1 {
			t.Fatalf("%s: stream with %s: %v, %v", n.ID(), api.TicksKey, resp, err)
		}
		last = mustIncrease(t, last, idsOf(t, resp.Answers[0].Runs))
	}
	if p := leader.cfg.Layout.TickParts(last, 3); p.Time.Year() < 2024 {
		t.Fatalf("last tick %d is at %s, not a Unix millisecond of now", last, p.Time)
	}

	// The Go client, on its stream (the default) and unary: IDs above the
	// ticks handed out so far, increasing as bytes.
	addrs := []string{follower.GRPCAddr(), leader.GRPCAddr()}
	for _, opts := range [][]client.Option{nil, {client.WithUnary()}} {
		c, err := client.New(addrs, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ids, err := c.NextUUIDs(ctx, 5)
		cancel()
		c.Close()
		if err != nil {
			t.Fatalf("NextUUIDs: %v", err)
		}
		for _, id := range ids {
			p, err := leader.cfg.Layout.DecodeWide(id)
			if err != nil || p.Group != 3 {
				t.Fatalf("%s decodes to %+v, %v", id, p, err)
			}
			last = mustIncrease(t, last, []uint64{p.Tick})
		}
	}

	narrow := mustCluster(t)
	conn := grpctest.Dial(t, mustLeader(t, narrow).GRPCAddr())
	ctx, cancel := context.WithTimeout(api.WithTicks(context.Background(), true), 10*time.Second)
	defer cancel()
	if _, err := api.NewSequencerClient(conn).Next(ctx, &api.NextRequest{Count: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("default layout: Next with %s = %v, want FailedPrecondition", api.TicksKey, err)
	}
}
