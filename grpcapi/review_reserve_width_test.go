package grpcapi

import (
	"testing"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// HTTP's reservation of a 128-bit sequence on a follower that has not
// applied its creation: HTTP describes it first (which now asks the
// leader, and renders the ticks it reads), then reserves through
// Server.Reserve, which reads the width from this node's state. Lacking
// the sequence, it forwarded the call as one of 64-bit IDs, and the
// leader refused it for the wrong width: the just-created sequence that
// HTTP's IDs now find failed for its reservations (FailedPrecondition),
// the error NextInSequence's width argument fixed for IDs.
func TestReviewHTTPReserveOfAJustCreatedWideSequenceOnALaggingFollower(t *testing.T) {
	st := &namedSettle{first: 40}
	leaderAddr := grpctest.Serve(t, reservingServer(t, "n1", fakeNode{leader: true}, st, fsm.SequencesVersion).Register)
	l := layout.MustPreset("default")
	state := fsm.New(nil, nil)
	mustApply(t, state, fsm.Command{Op: fsm.OpInit, Layout: &l, ClusterID: "c1"})
	mustApply(t, state, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.SequencesVersion})
	follower := NewServer(Config{ID: "n2", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{addr: leaderAddr}, IDs: &fakeIDs{}, State: state, Settle: &namedSettle{err: sequencer.ErrNotLeader}, Meter: nopMeter{}, Stop: make(chan struct{}),
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
	ctx := tctx(t)
	info, err := follower.DescribeSequence(ctx, "wide")
	if err != nil || info.Kind != "uuidv7" {
		t.Fatalf("describe wide through the lagging follower: %+v, %v", info, err)
	}
	resp, err := follower.Reserve(ctx, &api.ReserveRequest{Count: 1, Sequence: "wide"})
	if err != nil || len(resp.Runs) != 1 || resp.Runs[0].First != 40 {
		t.Fatalf("HTTP's reservation of wide through the lagging follower: %+v, %v; want the leader's ticks from 40", resp, err)
	}
	// A 64-bit one still goes as 64-bit IDs.
	resp, err = follower.Reserve(ctx, &api.ReserveRequest{Count: 1, Sequence: "ev"})
	if err != nil || len(resp.Runs) != 1 || resp.Runs[0].First != l.ID(40, 5) {
		t.Fatalf("HTTP's reservation of ev through the lagging follower: %+v, %v; want ID %d", resp, err, l.ID(40, 5))
	}
}
