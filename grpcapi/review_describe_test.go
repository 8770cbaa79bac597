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

// A sequence dropped and created again is "just created" too: a
// follower that applied the drop but not the create holds it dropped,
// and answered that from its own state, so HTTP (which asks
// DescribeSequence first) answered NotFound for a sequence the leader
// serves. checkNamed treats a dropped sequence as one the state lacks; so
// must DescribeSequence: a follower asks the leader, and a leader not
// caught up cannot tell (Unavailable). A caught-up leader still describes
// a dropped sequence as dropped.
func TestReviewDroppedThenCreatedAgainIsFoundOnALaggingFollower(t *testing.T) {
	l := layout.MustPreset("default")
	withWide := func(dropped, again bool) *fsm.FSM {
		state := fsm.New(nil, nil)
		mustApply(t, state, fsm.Command{Op: fsm.OpInit, Layout: &l, ClusterID: "c1"})
		mustApply(t, state, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.SequencesVersion})
		mustApply(t, state, fsm.Command{Op: fsm.OpCreateSequence, Sequence: "wide", Kind: "uuidv7", Group: 3})
		if dropped {
			mustApply(t, state, fsm.Command{Op: fsm.OpDropSequence, Sequence: "wide"})
		}
		if again {
			mustApply(t, state, fsm.Command{Op: fsm.OpCreateSequence, Sequence: "wide", Kind: "uuidv7", Group: 3})
		}
		return state
	}
	leader := NewServer(Config{ID: "n1", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{leader: true}, State: withWide(true, true), Settle: allocSettle{}, Meter: nopMeter{}, Stop: make(chan struct{})})
	leaderAddr := grpctest.Serve(t, leader.Register)
	follower := NewServer(Config{ID: "n2", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{addr: leaderAddr}, State: withWide(true, false), Settle: allocSettle{}, Meter: nopMeter{}, Stop: make(chan struct{}),
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
	ctx := tctx(t)

	info, err := follower.DescribeSequence(ctx, "wide")
	if err != nil || info.Dropped || info.Kind != "uuidv7" {
		t.Errorf("describe, through a follower that has applied the drop but not the create again: %+v, %v; want the leader's live uuidv7", info, err)
	}

	stale := NewServer(Config{ID: "n1", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{leader: true}, State: withWide(true, false), Settle: staleSettle{}, Meter: nopMeter{}, Stop: make(chan struct{})})
	if info, err := stale.DescribeSequence(ctx, "wide"); status.Code(err) != codes.Unavailable {
		t.Errorf("describe on a leader not caught up that holds it dropped: %+v, %v; want Unavailable (it may have been created again)", info, err)
	}

	caughtUp := NewServer(Config{ID: "n1", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{leader: true}, State: withWide(true, false), Settle: allocSettle{}, Meter: nopMeter{}, Stop: make(chan struct{})})
	if info, err := caughtUp.DescribeSequence(ctx, "wide"); err != nil || !info.Dropped {
		t.Errorf("describe of a dropped sequence on a caught-up leader: %+v, %v; want it, dropped", info, err)
	}
}
