package server

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// widthCtx names api.TicksKey in ctx's outgoing metadata when l is a
// 128-bit layout, as a caller that renders its IDs does.
func widthCtx(ctx context.Context, l layout.Layout) context.Context {
	return api.WithTicks(ctx, l.Wide())
}

// TestWideRuns checks that a 128-bit layout's block goes out as ticks,
// step 1, in one run across time units.
func TestWideRuns(t *testing.T) {
	l := layout.MustPreset("uuidv7")
	perUnit := uint64(1) << l.SeqBits
	b := sequencer.Block{First: 7*perUnit + perUnit - 3, Count: 2*perUnit + 5}
	runs := Runs(l, 1, b)
	if len(runs) != 1 || runs[0].First != b.First || uint64(runs[0].Count) != b.Count || runs[0].Step != 1 {
		t.Fatalf("runs %v, want one run of ticks %d..+%d", runs, b.First, b.Count)
	}
	// Only the count field's width splits ticks, wherever the block starts.
	for _, b := range []sequencer.Block{{First: 3*math.MaxUint32 - 1, Count: 5}, {First: 1 << 40, Count: math.MaxUint32 + 3}} {
		runs := Runs(l, 1, b)
		want := []uint64{b.Count}
		if b.Count > math.MaxUint32 {
			want = []uint64{math.MaxUint32, b.Count - math.MaxUint32}
		}
		next := b.First
		for i, r := range runs {
			if i >= len(want) || r.First != next || uint64(r.Count) != want[i] || r.Step != 1 {
				t.Fatalf("block %+v: runs %v, want counts %v from %d", b, runs, want, b.First)
			}
			next += uint64(r.Count)
		}
		if len(runs) != len(want) {
			t.Fatalf("block %+v: runs %v, want counts %v", b, runs, want)
		}
	}
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
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		st, err := api.NewSequencerClient(conn).NextStream(ctx)
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%s: NextStream without %s = %v, want FailedPrecondition", n.ID(), api.TicksKey, err)
		}
		ctx, cancel = context.WithTimeout(ticks, 10*time.Second)
		st, err = api.NewSequencerClient(conn).NextStream(ctx)
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
		last = mustIncrease(t, last, expandRuns(resp.Answers[0].Runs))
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

// TestHTTPLayoutIsTheClusters: the HTTP API renders /v1/ids with the
// layout and group the cluster recorded, as the Layout RPC answers, not
// with this node's flags.
func TestHTTPLayoutIsTheClusters(t *testing.T) {
	n := &Node{cfg: Config{Layout: layout.MustPreset("default"), Group: 1}, fsm: fsm.New(nil, nil)}
	recorded := layout.MustPreset("ulid")
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpInit, Layout: &recorded, Group: 7, ClusterID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := n.fsm.Apply(&raft.Log{Data: data}).(fsm.Result); !ok || res.Err != nil {
		t.Fatalf("apply init: %+v", res)
	}
	l, group, err := newHTTPNode(n).Layout()
	if err != nil || l != recorded || group != 7 {
		t.Fatalf("Layout() = %s, %d, %v; want the recorded ulid, 7", l, group, err)
	}
}
