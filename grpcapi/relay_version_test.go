package grpcapi

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
)

// A follower relays a stream's named or keyed call only once its state
// says the cluster reads them (version 3), as it forwards a unary one:
// until then the leader may run an Ordo that ignores the fields and
// answers the call from the default sequence (unmarked: a client that
// does not check the marks takes the default sequence's IDs as the named
// sequence's, equal to its own when they share a group; a keyed call's
// retry takes new IDs). The default sequence's calls are relayed as
// before.
func TestNextStreamRelaysNamedAndKeyedCallsOnlyFromVersion3(t *testing.T) {
	leader, _ := namedServer(t, layout.MustPreset("default"))
	up := mustServe(t, leader.Register)
	old := fsm.New(nil, nil)
	l := layout.MustPreset("default")
	mustApply(t, old, fsm.Command{Op: fsm.OpInit, Layout: &l, ClusterID: "c1"})
	mustApply(t, old, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.SequencesVersion - 1})
	follower := serveSequencer(t, NewServer(Config{ID: "n3", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{addr: up.Target()}, IDs: &fakeIDs{}, State: old, Meter: nopMeter{}, Stop: make(chan struct{}),
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")}))

	s := openStream(t, follower)
	if got := s.send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 1}}}); got[1] == nil || got[1].Named {
		t.Fatalf("a default sequence's call through the follower: %v", got)
	}
	for _, call := range []*api.StreamCall{
		{Id: 2, Count: 1, Sequence: "a"},
		{Id: 2, Count: 1, IdempotencyKey: "k"},
	} {
		s := openStream(t, follower)
		if err := s.st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{call}}); err != nil {
			t.Fatal(err)
		}
		resp, err := s.st.Recv()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call %v through a follower at cluster version %d: %v, %v; want Unavailable, not relayed", call, fsm.SequencesVersion-1, resp, err)
		}
	}
}
