package grpcapi

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
)

// A sequence just created is found on every node: a follower whose state
// lacks it (it has not applied the create yet) asks the leader, for
// DescribeSequence and so for HTTP, which then asks for the IDs in the
// sequence's own width (here a uuidv7 sequence's ticks, which a call of
// 64-bit IDs would have had refused). A name the leader lacks too is
// NotFound; one a leader not yet caught up lacks is Unavailable, and so
// is one no leader can be asked about: neither can tell.
func TestSequenceJustCreatedIsFoundOnALaggingFollower(t *testing.T) {
	caughtUp := NewServer(Config{ID: "n1", Layout: layout.MustPreset("default"), MaxCount: 10},
		Parts{Node: fakeNode{leader: true}, State: sequencesState(t), Settle: allocSettle{}, Meter: nopMeter{}, Stop: make(chan struct{})})
	mustApply(t, caughtUp.State.(*fsm.FSM), fsm.Command{Op: fsm.OpCreateSequence, Sequence: "wide", Kind: "uuidv7", Group: 3})
	leaderAddr := grpctest.Serve(t, caughtUp.Register)

	lagging := func(leader fakeNode) *Server {
		state := fsm.New(nil, nil)
		l := layout.MustPreset("default")
		mustApply(t, state, fsm.Command{Op: fsm.OpInit, Layout: &l, ClusterID: "c1"})
		mustApply(t, state, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.SequencesVersion})
		return NewServer(Config{ID: "n2", Layout: l, MaxCount: 10},
			Parts{Node: leader, State: state, Settle: allocSettle{}, Meter: nopMeter{}, Stop: make(chan struct{}),
				Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
	}
	follower := lagging(fakeNode{addr: leaderAddr})
	ctx := tctx(t)

	info, err := follower.DescribeSequence(ctx, "wide")
	if err != nil || info.Kind != "uuidv7" || info.Group != 3 {
		t.Fatalf("describe wide through a follower that lacks it: %+v, %v; want the leader's uuidv7, group 3", info, err)
	}
	resp, err := follower.NextInSequence(ctx, "wide", 2, true)
	if err != nil || len(resp.Runs) == 0 || resp.Sequence != "wide" {
		t.Fatalf("IDs of wide through the follower: %+v, %v", resp, err)
	}
	if _, err := follower.DescribeSequence(ctx, "nope"); status.Code(err) != codes.NotFound {
		t.Errorf("describe of a name the leader lacks too: %v, want NotFound", err)
	}

	stale := NewServer(Config{ID: "n1", Layout: layout.MustPreset("default"), MaxCount: 10},
		Parts{Node: fakeNode{leader: true}, State: sequencesState(t), Settle: staleSettle{}, Meter: nopMeter{}, Stop: make(chan struct{})})
	if _, err := stale.DescribeSequence(ctx, "wide"); status.Code(err) != codes.Unavailable {
		t.Errorf("describe on a leader not caught up that lacks it: %v, want Unavailable", err)
	}
	staleFollower := lagging(fakeNode{addr: grpctest.Serve(t, stale.Register)})
	if _, err := staleFollower.DescribeSequence(ctx, "wide"); status.Code(err) != codes.Unavailable {
		t.Errorf("describe through a follower whose leader is not caught up: %v, want Unavailable", err)
	}
	if _, err := lagging(fakeNode{addr: "127.0.0.1:1"}).DescribeSequence(ctx, "wide"); status.Code(err) != codes.Unavailable {
		t.Errorf("describe through a follower whose leader cannot be reached: %v, want Unavailable", err)
	}
}
