package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/leadership/leadershiptest"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// Package leadership tests its rounds, streams and promises with fakes;
// these tests check how a Node wires them: its Raft, its addresses, its
// peer connections and their token, its Term RPC, and the leader's
// hand-overs and membership changes that lean on them.

// calmRaft gives a test's nodes calmer timers than the other tests': on a
// loaded machine the usual 100 ms lease can lapse, and a node that lost
// leadership rightly confirms nothing, which a test of rounds must not
// take for a failure.
func calmRaft(c *Config) {
	c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout, c.Raft.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
}

// leaseRaft gives a lease test calm Raft timers, and the lease.
func leaseRaft(lease time.Duration) func(*Config) {
	return func(c *Config) {
		calmRaft(c)
		c.Lease = lease
	}
}

// mustPointAt records addr as member's gRPC address, so that the leader's
// term rounds ask whatever listens there, and keeps the member from
// registering its real address again (testConfig gives every node the
// TestHooks.HoldAddress switch).
func mustPointAt(t *testing.T, leader, member *Node, addr string) {
	t.Helper()
	member.registerMu.Lock()
	member.cfg.TestHooks.HoldAddress.Store(true)
	member.registerMu.Unlock()
	if _, err := leader.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: member.ID(), GRPCAddr: addr}); err != nil {
		t.Fatal(err)
	}
}

// TestTermAnswersOnlyForItself: a node asked for another node, or for
// another cluster, ends the stream with InvalidArgument; asked for
// itself, it echoes the round.
func TestTermAnswersOnlyForItself(t *testing.T) {
	nodes := mustCluster(t)
	n := nodes[1]
	conn := grpctest.Dial(t, n.GRPCAddr())
	ask := func(req *api.TermRequest) (*api.TermResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return leadershiptest.AskTerm(ctx, conn, req)
	}
	if n.fsm.ClusterID() == "" {
		t.Fatal("the cluster has no id")
	}
	if resp, err := ask(&api.TermRequest{NodeId: n.ID(), ClusterId: n.fsm.ClusterID(), Round: 7}); err != nil || resp.NodeId != n.ID() || resp.Term == 0 || resp.Round != 7 {
		t.Fatalf("Term for itself = %v, %v", resp, err)
	}
	for _, req := range []*api.TermRequest{
		{NodeId: "n9", ClusterId: n.fsm.ClusterID(), Round: 1},
		{NodeId: n.ID(), ClusterId: "another", Round: 1},
	} {
		if resp, err := ask(req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Term(%v) = %v, %v; want an InvalidArgument refusal", req, resp, err)
		}
	}
}

// askTermAs opens a Term stream to node n as if from leader `as`, and
// returns the channel its answer to one round arrives on.
func askTermAs(t *testing.T, from, n *Node, as string) <-chan *api.TermResponse {
	t.Helper()
	conn, err := from.peers.Get(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := api.NewPeerClient(conn).Term(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &api.TermRequest{NodeId: n.cfg.ID, ClusterId: n.ClusterID(), Round: 1, LeaderId: as, Term: n.raft.CurrentTerm()}
	if err := st.Send(req); err != nil {
		t.Fatal(err)
	}
	out := make(chan *api.TermResponse, 1)
	go func() {
		resp, err := st.Recv()
		if err == nil {
			out <- resp
		}
		close(out)
	}()
	return out
}

// TestLeaseVoterConfirmsNoOtherLeader: while the leader serves under its
// lease, a voter answers nobody else's round; once the leader hands over,
// it does.
func TestLeaseVoterConfirmsNoOtherLeader(t *testing.T) {
	nodes := mustClusterWith(t, leaseRaft(300*time.Millisecond))
	leader := mustLeader(t, nodes)
	voter := followerOf(nodes, leader)
	// A round asks only the voters it needs: the other follower is made
	// unreachable for the leader's rounds, so every round asks this one.
	for _, n := range nodes {
		if n != leader && n != voter {
			mustPointAt(t, leader, n, "127.0.0.1:1")
		}
	}
	conn, err := leader.peers.Get(leader.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	mustNextVia(t, conn, 1) // the lease is asked for and renewed from now on
	// The leader's lease needs a majority's promises: with the other
	// follower unreachable, the voter's.
	eventually.True(t, seqTestWait, "the voter's promise to the leader", leader.leaseHolds)
	answer := askTermAs(t, leader, voter, "someone-else")
	select {
	case resp := <-answer:
		t.Fatalf("the voter confirmed another leader while it had promised %s: %v", leader.cfg.ID, resp)
	case <-time.After(time.Second): // more than three leases: renewals keep it held
	}
	mustTransferLeadership(t, leader)
	select {
	case resp, ok := <-answer:
		if !ok || resp.NodeId != voter.cfg.ID {
			t.Fatalf("held answer: %v, %v", resp, ok)
		}
	case <-time.After(seqTestWait):
		t.Fatal("the voter still holds its answer after the leader handed over")
	}
	newLeader := mustLeader(t, nodes)
	conn2, err := newLeader.peers.Get(newLeader.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	mustNextVia(t, conn2, 1)
}

// releaseRecorder is a Peer service that answers nothing and passes on
// every term request that releases a promise.
type releaseRecorder struct {
	api.UnimplementedPeerServer
	releases chan *api.TermRequest
}

func (r releaseRecorder) Term(st grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		if req.Release {
			select {
			case r.releases <- req:
			default:
			}
		}
	}
}

// TestAdminTransferLeaderReleasesThePromises: the Admin service's
// TransferLeader, to any voter or to a named one, goes through handOver,
// which releases the voters' promises in the leader's term before the
// transfer, so the next leader need not wait them out. A leader that
// loses leadership releases them again, so a transfer through handOver
// sends two releases and one that skipped it only the one after the loss
// (which may also be in the old term: Raft can step a leader down before
// it learns the new term).
func TestAdminTransferLeaderReleasesThePromises(t *testing.T) {
	for _, to := range []string{"any", "named"} {
		t.Run(to, func(t *testing.T) {
			nodes := mustClusterWith(t, leaseRaft(300*time.Millisecond))
			leader := mustLeader(t, nodes)
			voter := followerOf(nodes, leader)
			req := &api.TransferLeaderRequest{}
			if to == "named" {
				for _, n := range nodes {
					if n != leader && n != voter {
						req.Id = n.ID()
					}
				}
			}
			rec := releaseRecorder{releases: make(chan *api.TermRequest, 16)}
			mustPointAt(t, leader, voter, grpctest.Serve(t, func(s *grpc.Server) { api.RegisterPeerServer(s, rec) }))
			conn := grpctest.Dial(t, leader.GRPCAddr())
			mustNextVia(t, conn, 1) // the lease is asked for from now on
			eventually.True(t, seqTestWait, "the leader's lease", leader.leaseHolds)
			term := leader.raft.CurrentTerm()
			ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
			defer cancel()
			if _, err := api.NewAdminClient(conn).TransferLeader(ctx, req); err != nil {
				t.Fatalf("TransferLeader: %v", err)
			}
			var releases, inTerm int
			for releases < 2 || inTerm == 0 {
				select {
				case r := <-rec.releases:
					if r.LeaderId == leader.ID() {
						releases++
						if r.Term == term {
							inTerm++
						}
					}
				case <-ctx.Done():
					t.Fatalf("%d releases from %s after TransferLeader, %d of them in its term %d; want the hand-over's in that term and the one after the loss", releases, leader.ID(), inTerm, term)
				}
			}
		})
	}
}

func mustTransferLeadership(t *testing.T, leader *Node) {
	t.Helper()
	if err := leader.handOver(leader.raft.LeadershipTransfer); err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
}

// mustLeaseNode is a one-node cluster with the lease, serving.
func mustLeaseNode(t *testing.T, configure func(*Config)) (*Node, *grpc.ClientConn) {
	t.Helper()
	return mustSingleNode(t, func(c *Config) {
		leaseRaft(300 * time.Millisecond)(c)
		if configure != nil {
			configure(c)
		}
	})
}

func (n *Node) leaseHolds() bool { return n.seq.LeaseLeft() > 0 }

// TestFailedHandOverKeepsTheLease: a hand-over that fails leaves the
// leader serving, and its rounds ask for a lease again.
func TestFailedHandOverKeepsTheLease(t *testing.T) {
	n, conn := mustLeaseNode(t, nil)
	eventually.True(t, seqTestWait, "the lease", n.leaseHolds)
	if err := n.handOver(n.raft.LeadershipTransfer); err == nil {
		t.Fatal("a single node handed over leadership")
	}
	mustNextVia(t, conn, 1)
	eventually.True(t, seqTestWait, "the lease again after a failed hand-over", n.leaseHolds)
}

// TestMembershipChangeNeedsARound: a membership change is made only after
// a round in the current configuration succeeds. The positive control:
// while the other voters answer, the change is made. Then no other voter
// can be reached, and the same change is refused with the round's
// sequencer.ErrNotLeader, named as the check before a membership change, and never
// runs. (That voters which promised another leader hold such a round
// back is package leadership's TestRoundWaitsOutPromisesToAnotherLeader.)
func TestMembershipChangeNeedsARound(t *testing.T) {
	nodes := mustClusterWith(t, leaseRaft(300*time.Millisecond))
	leader := mustLeader(t, nodes)
	change := func(timeout time.Duration) (changed bool, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err = leader.changeMembership(ctx, func() raft.Future { changed = true; return doneFuture{} })
		return changed, err
	}
	if changed, err := change(seqTestWait); err != nil || !changed {
		t.Fatalf("with every voter reachable, membership changed: %v, err %v; want it changed", changed, err)
	}
	for _, v := range nodes {
		if v != leader {
			mustPointAt(t, leader, v, "127.0.0.1:1")
		}
	}
	changed, err := change(500 * time.Millisecond)
	if changed {
		t.Fatalf("membership changed (err %v) while no other voter could confirm the leader", err)
	}
	const check = "confirm leadership before changing membership"
	if !errors.Is(err, sequencer.ErrNotLeader) || !strings.Contains(err.Error(), check) || !strings.Contains(err.Error(), "voters are still in term") {
		t.Fatalf("membership change without a round: err %v, want sequencer.ErrNotLeader from the round (%q)", err, check)
	}
	if code := status.Code(grpcapi.ToStatus(context.Background(), err, "")); code != codes.Unavailable {
		t.Fatalf("membership change without a round maps to %v, want Unavailable, so callers retry", code)
	}
}

// TestTermStreamsNeedTheTokenToRelease: in plaintext with an admin token,
// a release from a caller without the token is ignored, one with it is
// not, and nobody gets a promise for a leader the voter does not know.
// What a release did shows in the leader's next round: a round sent
// before an accepted release gets no promise.
func TestTermStreamsNeedTheTokenToRelease(t *testing.T) {
	n, _ := mustLeaseNode(t, func(c *Config) { c.AdminToken = "s3cret-token-of-16+" })
	eventually.True(t, seqTestWait, "the lease", n.leaseHolds)
	term := n.raft.CurrentTerm()
	ask := func(ctx context.Context, req *api.TermRequest) *api.TermResponse {
		t.Helper()
		req.NodeId, req.ClusterId = n.cfg.ID, n.ClusterID()
		resp, err := leadershiptest.AskTerm(ctx, grpctest.Dial(t, n.GRPCAddr()), req)
		if err != nil {
			t.Fatalf("term request %v: %v", req, err)
		}
		return resp
	}
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	ask(ctx, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 1 << 62, Release: true})
	if resp := ask(ctx, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 5, LeaseMs: 1000}); resp.LeaseMs == 0 {
		t.Fatalf("a release without the token was taken: the leader the node knows was promised nothing: %v", resp)
	}
	withToken := metadata.AppendToOutgoingContext(ctx, grpcapi.AuthorizationKey, "Bearer s3cret-token-of-16+")
	ask(withToken, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 1 << 62, Release: true})
	if resp := ask(ctx, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 6, LeaseMs: 1000}); resp.LeaseMs != 0 {
		t.Fatalf("a release with the token was ignored: a round sent before it was promised %d ms", resp.LeaseMs)
	}
	if resp := ask(ctx, &api.TermRequest{LeaderId: "intruder", Term: term, Round: 1, LeaseMs: 1000}); resp.LeaseMs != 0 {
		t.Fatalf("a leader the node does not know was promised %d ms", resp.LeaseMs)
	}
}

// doneFuture is a raft.Future that has ended without an error.
type doneFuture struct{}

func (doneFuture) Error() error { return nil }

// TestAdminMembershipCallsNeedARound: Join and Remove through the
// Admin service are refused with Unavailable, and change nothing, while
// no other voter can confirm the leader: they go through changeMembership
// (TestMembershipChangeNeedsARound has the positive control; cluster_test
// joins and removes members through the same calls).
func TestAdminMembershipCallsNeedARound(t *testing.T) {
	nodes := mustClusterWith(t, leaseRaft(300*time.Millisecond))
	leader := mustLeader(t, nodes)
	victim := followerOf(nodes, leader)
	for _, v := range nodes {
		if v != leader {
			mustPointAt(t, leader, v, "127.0.0.1:1")
		}
	}
	admin := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := admin.Remove(ctx, &api.RemoveRequest{Id: victim.ID()})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Remove without a round: %v, want Unavailable", err)
	}
	if member, _ := leader.isMember(victim.ID()); !member {
		t.Errorf("Remove without a round removed %s", victim.ID())
	}
	// n9 answers as a node that may join: the round is what is missing.
	n9 := answering(t, freshNode("n9", "127.0.0.1:9"))
	_, err = admin.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "127.0.0.1:9", GrpcAddr: n9, Layout: "default"})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Join without a round: %v, want Unavailable", err)
	}
	if member, _ := leader.isMember("n9"); member {
		t.Errorf("Join without a round added n9")
	}
}
