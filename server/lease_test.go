package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
)

// ---- the voter's promises --------------------------------------------------

// goConfirm runs promises.confirm for leader in the background; the
// result carries the lease clock read right after it returned.
func goConfirm(p *promises, leader string, term, round uint64, ask time.Duration) <-chan confirmed {
	out := make(chan confirmed, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
		defer cancel()
		g, err := p.confirm(ctx, leader, term, round, ask)
		out <- confirmed{granted: g, at: p.clock(), err: err}
	}()
	return out
}

type confirmed struct {
	granted, at time.Duration
	err         error
}

func mustConfirmed(t *testing.T, ch <-chan confirmed) confirmed {
	t.Helper()
	select {
	case c := <-ch:
		if c.err != nil {
			t.Fatalf("confirm: %v", c.err)
		}
		return c
	case <-time.After(seqTestWait):
		t.Fatal("confirm still waits")
		return confirmed{}
	}
}

// stillHeld fails if ch delivers within a short look: a correct hold never
// delivers that soon, so the look can only miss a bug, never invent one.
func stillHeld(t *testing.T, ch <-chan confirmed, what string) {
	t.Helper()
	select {
	case c := <-ch:
		t.Fatalf("%s: answered (granted %s, err %v) while another leader's promise holds", what, c.granted, c.err)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestPromiseHoldsOtherLeadersUntilItRunsOut(t *testing.T) {
	const lease = 300 * time.Millisecond
	p := newPromises(leaseClock, lease, 0)
	before := p.clock()
	a := mustConfirmed(t, goConfirm(p, "a", 5, 1, lease))
	if a.granted != lease {
		t.Fatalf("a was promised %s, want %s", a.granted, lease)
	}
	// a renews: no wait, and a smaller ask gets what it asks.
	if a2 := mustConfirmed(t, goConfirm(p, "a", 5, 2, lease/3)); a2.granted != lease/3 {
		t.Fatalf("a's renewal was promised %s, want %s", a2.granted, lease/3)
	}
	b := mustConfirmed(t, goConfirm(p, "b", 6, 1, lease))
	if b.at < before+lease {
		t.Fatalf("b was confirmed %s after a's promise was asked for, before the promise of %s ran out", b.at-before, lease)
	}
	// An old-version leader names nobody: it waits for b's promise too,
	// which b was given no earlier than a's ran out.
	anon := mustConfirmed(t, goConfirm(p, "", 6, 2, 0))
	if anon.granted != 0 {
		t.Fatalf("an asker naming no leader was promised %s", anon.granted)
	}
	if anon.at < before+2*lease {
		t.Fatalf("an asker naming no leader was confirmed %s after a's promise was asked for, before b's ran out", anon.at-before)
	}
}

func TestPromiseReleaseFreesOthersOnlyIfNotStale(t *testing.T) {
	const long = time.Hour // never waited out in this test
	p := newPromises(leaseClock, long, 0)
	mustConfirmed(t, goConfirm(p, "a", 5, 10, long))
	b := goConfirm(p, "b", 6, 1, long)
	stillHeld(t, b, "b before any release")
	for _, stale := range []struct {
		name        string
		leader      string
		term, round uint64
	}{
		{"another leader's release", "b", 6, 99},
		{"a release from an older term", "a", 4, 99},
		{"a release sent before the promise's round", "a", 5, 10},
	} {
		p.release(stale.leader, stale.term, stale.round)
		stillHeld(t, b, "after "+stale.name)
	}
	p.release("a", 5, 11)
	if c := mustConfirmed(t, b); c.granted != long {
		t.Fatalf("b was promised %s after the release, want %s", c.granted, long)
	}
}

func TestPromiseAfterRestartHoldsEveryone(t *testing.T) {
	p := newPromises(leaseClock, time.Second, time.Hour)
	for _, leader := range []string{"self", "other", ""} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := p.confirm(ctx, leader, 1, 1, time.Second)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("leader %q was confirmed during the restart hold: err %v", leader, err)
		}
	}
	// Without a promise to release, nothing is released.
	p.release("self", 99, 99)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.confirm(ctx, "self", 1, 1, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a release ended the restart hold: err %v", err)
	}
}

func TestPromiseWithoutLeaseGivesNone(t *testing.T) {
	p := newPromises(leaseClock, 0, 0)
	if c := mustConfirmed(t, goConfirm(p, "a", 1, 1, time.Second)); c.granted != 0 {
		t.Fatalf("a node without a lease promised %s", c.granted)
	}
	if c := mustConfirmed(t, goConfirm(p, "b", 1, 2, time.Second)); c.granted != 0 {
		t.Fatalf("a node without a lease promised %s", c.granted)
	}
}

// TestRestartHoldIsRecorded: the longest lease a node may have promised
// survives a restart in the stable store, also one with a shorter lease
// or none.
func TestRestartHoldIsRecorded(t *testing.T) {
	store := raft.NewInmemStore()
	log := hclog.NewNullLogger()
	tests := []struct {
		lease, wantHold time.Duration
	}{
		{0, 0},
		{time.Hour, time.Hour},
		{time.Minute, time.Hour},
		{0, time.Hour},
	}
	for i, tt := range tests {
		before := leaseClock()
		p, err := openPromises(store, tt.lease, log)
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantHold == 0 {
			if p.until != 0 {
				t.Fatalf("start %d with lease %s: holds until %s after start, want no hold", i, tt.lease, p.until-before)
			}
		} else if hold := p.until - before; hold < tt.wantHold || hold > tt.wantHold+time.Minute {
			t.Fatalf("start %d with lease %s: holds until %s after start, want %s", i, tt.lease, hold, tt.wantHold)
		}
		if p.lease != tt.lease {
			t.Fatalf("start %d: promises %s, want %s", i, p.lease, tt.lease)
		}
	}
}

// ---- a real cluster --------------------------------------------------------

// leaseRaft gives a lease test calm Raft timers, and the lease.
func leaseRaft(lease time.Duration) func(*Config) {
	return func(c *Config) {
		calmRaft(c)
		c.Lease = lease
	}
}

// askTermAs opens a Term stream to node n as if from leader `as`, and
// returns the channel its answer to one round arrives on.
func askTermAs(t *testing.T, from, n *Node, as string) <-chan *api.TermResponse {
	t.Helper()
	conn, err := from.peers.get(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := api.NewPeerClient(conn).Term(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &api.TermRequest{NodeId: n.cfg.ID, ClusterId: n.clusterID(), Round: 1, LeaderId: as, Term: n.raft.CurrentTerm()}
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
	conn, err := leader.peers.get(leader.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	mustNextVia(t, conn, 1) // the lease is asked for and renewed from now on
	waitFor(t, "the voter's promise to the leader", func() bool {
		voter.promises.mu.Lock()
		defer voter.promises.mu.Unlock()
		return voter.promises.to == leader.cfg.ID && voter.promises.until > voter.promises.clock()
	})
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
	conn2, err := newLeader.peers.get(newLeader.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	mustNextVia(t, conn2, 1)
}

func mustTransferLeadership(t *testing.T, leader *Node) {
	t.Helper()
	if err := leader.handOver(leader.raft.LeadershipTransfer); err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
}

// TestPromiseNotRenewedByALateRound: a round the leader sent before its
// release, arriving after it, gets no promise, so the next leader is not
// held for a whole lease.
func TestPromiseNotRenewedByALateRound(t *testing.T) {
	const long = time.Hour
	p := newPromises(leaseClock, long, 0)
	mustConfirmed(t, goConfirm(p, "a", 5, 10, long))
	p.release("a", 5, 12)
	if c := mustConfirmed(t, goConfirm(p, "a", 5, 11, long)); c.granted != 0 {
		t.Fatalf("a's round 11, sent before its release at round 12, was promised %s", c.granted)
	}
	mustConfirmed(t, goConfirm(p, "b", 6, 1, long))
	// A later round of a, in a later term, is promised again.
	p.release("b", 6, 2)
	if c := mustConfirmed(t, goConfirm(p, "a", 7, 1, long)); c.granted != long {
		t.Fatalf("a's round in a later term was promised %s, want %s", c.granted, long)
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
	waitFor(t, "the lease", n.leaseHolds)
	if err := n.handOver(n.raft.LeadershipTransfer); err == nil {
		t.Fatal("a single node handed over leadership")
	}
	mustNextVia(t, conn, 1)
	waitFor(t, "the lease again after a failed hand-over", n.leaseHolds)
}

// TestMembershipChangeWaitsOutOtherLeadersPromises: a membership change
// is made only after a round in the current configuration, which a voter
// that promised another leader holds back.
func TestMembershipChangeWaitsOutOtherLeadersPromises(t *testing.T) {
	nodes := mustClusterWith(t, leaseRaft(300*time.Millisecond))
	leader := mustLeader(t, nodes)
	for _, v := range nodes {
		if v == leader {
			continue
		}
		v.promises.mu.Lock()
		v.promises.to, v.promises.until = "another-leader", v.promises.clock()+time.Hour
		v.promises.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	changed := false
	err := leader.changeMembership(ctx, func() raft.Future { changed = true; return doneFuture{} })
	if err == nil || changed {
		t.Fatalf("membership changed (%v, err %v) while every voter had promised another leader", changed, err)
	}
}

// TestTermStreamsNeedTheTokenToRelease: in plaintext with an admin token,
// a release from a caller without the token is ignored, and nobody gets a
// promise for a leader the voter does not know.
func TestTermStreamsNeedTheTokenToRelease(t *testing.T) {
	n, _ := mustLeaseNode(t, func(c *Config) { c.AdminToken = "s3cret-token-of-16+" })
	waitFor(t, "the lease", n.leaseHolds)
	term := n.raft.CurrentTerm()
	ask := func(ctx context.Context, req *api.TermRequest) *api.TermResponse {
		t.Helper()
		st, err := api.NewPeerClient(mustConn(t, n.GRPCAddr())).Term(ctx)
		if err != nil {
			t.Fatal(err)
		}
		req.NodeId, req.ClusterId = n.cfg.ID, n.clusterID()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("term request %v: %v", req, err)
		}
		return resp
	}
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	// The node's promise to itself, from its own rounds, holds an hour.
	n.promises.mu.Lock()
	n.promises.until = n.promises.clock() + time.Hour
	n.promises.mu.Unlock()
	ask(ctx, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 1 << 62, Release: true})
	n.promises.mu.Lock()
	to := n.promises.to
	n.promises.mu.Unlock()
	if to != n.cfg.ID {
		t.Fatalf("a release without the token freed the promise (now to %q)", to)
	}
	if resp := ask(ctx, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 5, LeaseMs: 1000}); resp.LeaseMs == 0 {
		t.Fatalf("the leader the node knows was promised nothing: %v", resp)
	}
	withToken := metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer s3cret-token-of-16+")
	ask(withToken, &api.TermRequest{LeaderId: n.cfg.ID, Term: term, Round: 1 << 62, Release: true})
	n.promises.mu.Lock()
	to = n.promises.to
	n.promises.mu.Unlock()
	if to != "" {
		t.Fatalf("a release with the token did not free the promise (still to %q)", to)
	}
	if resp := ask(ctx, &api.TermRequest{LeaderId: "intruder", Term: term, Round: 1, LeaseMs: 1000}); resp.LeaseMs != 0 {
		t.Fatalf("a leader the node does not know was promised %d ms", resp.LeaseMs)
	}
}

// doneFuture is a raft.Future that has ended without an error.
type doneFuture struct{}

func (doneFuture) Error() error { return nil }

// TestLeaseWithAVoterWithoutLease: a voter without --lease answers rounds
// but promises nothing. Even when it answers fastest, a round that asks
// for a lease asks another voter for its promise, and later rounds ask
// that one first, so the leader keeps its lease.
func TestLeaseWithAVoterWithoutLease(t *testing.T) {
	const noLease = "n3"
	nodes := mustClusterWith(t, func(c *Config) {
		leaseRaft(300 * time.Millisecond)(c)
		if c.ID == noLease {
			c.Lease = 0
		}
	})
	leader := mustLeader(t, nodes)
	if leader.cfg.ID == noLease {
		t.Fatalf("%s, the node without a lease, leads: the test needs another leader", noLease)
	}
	other := ""
	for _, n := range nodes {
		if n != leader && n.cfg.ID != noLease {
			other = n.cfg.ID
		}
	}
	leader.terms.mu.Lock()
	leader.terms.voters[noLease] = voterRecord{answerTime: time.Microsecond}
	leader.terms.voters[other] = voterRecord{answerTime: time.Second}
	leader.terms.mu.Unlock()
	const rounds = 50
	leased := 0
	for round := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := leader.confirmLeadership(ctx, true)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if c.Lease > 0 {
			leased++
		}
	}
	if leased < rounds*4/5 {
		t.Fatalf("%d of %d rounds gave a lease, want nearly all", leased, rounds)
	}
}
