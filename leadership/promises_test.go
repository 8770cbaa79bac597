package leadership

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/leadership/leadershiptest"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// ---- the voter's promises --------------------------------------------------

// goConfirm runs promises.confirm for leader in the background; the
// result carries the lease clock read right after it returned.
func goConfirm(p *promises, leader string, term, round uint64, ask time.Duration) <-chan confirmed {
	out := make(chan confirmed, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		g, err := p.confirm(ctx, leader, term, round, ask, stillLeads)
		out <- confirmed{granted: g, at: p.clock(), err: err}
	}()
	return out
}

// stillLeads is the asker's standing for tests of promises alone: the
// leader asking still leads in the term it asks in.
func stillLeads() bool { return true }

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
	case <-time.After(testWait):
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
	p := newPromises(LeaseClock, lease, 0)
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
	p := newPromises(LeaseClock, long, 0)
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
	p := newPromises(LeaseClock, time.Second, time.Hour)
	for _, leader := range []string{"self", "other", ""} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := p.confirm(ctx, leader, 1, 1, time.Second, stillLeads)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("leader %q was confirmed during the restart hold: err %v", leader, err)
		}
	}
	// Without a promise to release, nothing is released.
	p.release("self", 99, 99)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.confirm(ctx, "self", 1, 1, 0, stillLeads); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a release ended the restart hold: err %v", err)
	}
}

func TestPromiseWithoutLeaseGivesNone(t *testing.T) {
	p := newPromises(LeaseClock, 0, 0)
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
		before := LeaseClock()
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

// TestPromiseNotRenewedByALateRound: a round the leader sent before its
// release, arriving after it, gets no promise, so the next leader is not
// held for a whole lease.
func TestPromiseNotRenewedByALateRound(t *testing.T) {
	const long = time.Hour
	p := newPromises(LeaseClock, long, 0)
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

// TestRoundWaitsOutPromisesToAnotherLeader: a round is held back by
// voters that promised another leader, however it asks (a membership
// change's round asks no lease), until the promises run out.
func TestRoundWaitsOutPromisesToAnotherLeader(t *testing.T) {
	leader, node := mustLeader(t)
	voters := mustVoters(t, node, 0, 0)
	for _, v := range voters {
		v.promises.mu.Lock()
		v.promises.to, v.promises.until = "another-leader", v.promises.clock()+time.Hour
		v.promises.term, v.promises.round = 1, 1
		v.promises.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if c, err := leader.Confirm(ctx, false); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("confirmed %v, err %v, while every voter had promised another leader", c, err)
	}
	// The other leader releases its promises: the next round goes
	// through, so the round was held back by them and by nothing else.
	for _, v := range voters {
		v.promises.release("another-leader", 1, 2)
	}
	mustConfirmNow(t, leader)
}

// askTerm sends req, for voter n2 of testCluster, to the voter at addr,
// and returns its answer.
func askTerm(t *testing.T, addr string, req *api.TermRequest) *api.TermResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	req.NodeId, req.ClusterId = "n2", testCluster
	resp, err := leadershiptest.AskTerm(ctx, newFakeNode(t, "").mustConn(t, addr), req)
	if err != nil {
		t.Fatalf("term request %v: %v", req, err)
	}
	return resp
}

// TestReleaseNeedsPermission: a release from a caller the node does not
// let release (Node.MayRelease) is ignored; one it lets is not.
func TestReleaseNeedsPermission(t *testing.T) {
	voter, _, node := mustConfirmer(t, "n2", time.Hour)
	endRestartHold(voter)
	addr := mustServeVoter(t, voter)
	if resp := askTerm(t, addr, &api.TermRequest{LeaderId: "n1", Term: testTerm, Round: 1, LeaseMs: 1000}); resp.LeaseMs == 0 {
		t.Fatalf("the leader the voter knows was promised nothing: %v", resp)
	}
	promisedTo := func() string {
		voter.promises.mu.Lock()
		defer voter.promises.mu.Unlock()
		return voter.promises.to
	}
	node.setRelease(false)
	askTerm(t, addr, &api.TermRequest{LeaderId: "n1", Term: testTerm, Round: 2, Release: true})
	if to := promisedTo(); to != "n1" {
		t.Fatalf("a release the node does not allow freed the promise (now to %q)", to)
	}
	node.setRelease(true)
	askTerm(t, addr, &api.TermRequest{LeaderId: "n1", Term: testTerm, Round: 3, Release: true})
	if to := promisedTo(); to != "" {
		t.Fatalf("a release the node allows did not free the promise (still to %q)", to)
	}
}

// TestPromiseOnlyToTheKnownLeader: a voter promises only the leader it
// knows, and only in its own term.
func TestPromiseOnlyToTheKnownLeader(t *testing.T) {
	voter, _, _ := mustConfirmer(t, "n2", time.Hour)
	endRestartHold(voter)
	addr := mustServeVoter(t, voter)
	for _, req := range []*api.TermRequest{
		{LeaderId: "intruder", Term: testTerm, Round: 1, LeaseMs: 1000},
		{LeaderId: "n1", Term: testTerm - 1, Round: 2, LeaseMs: 1000},
		{LeaderId: "n1", Term: testTerm + 1, Round: 3, LeaseMs: 1000},
	} {
		if resp := askTerm(t, addr, req); resp.LeaseMs != 0 {
			t.Fatalf("%v was promised %d ms", req, resp.LeaseMs)
		}
	}
	if resp := askTerm(t, addr, &api.TermRequest{LeaderId: "n1", Term: testTerm, Round: 4, LeaseMs: 1000}); resp.LeaseMs != 1000 {
		t.Fatalf("the leader the voter knows was promised %d ms, want 1000", resp.LeaseMs)
	}
}

// TestLeaseWithAVoterWithoutLease: a voter without --lease answers rounds
// but promises nothing. Even when it answers fastest, a round that asks
// for a lease asks another voter for its promise, and later rounds ask
// that one first, so the leader keeps its lease.
func TestLeaseWithAVoterWithoutLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	leader, _, node := mustConfirmer(t, testVoters[0], lease)
	mustVoters(t, node, lease, 0)
	other, noLease := testVoters[1], testVoters[2]
	leader.terms.mu.Lock()
	leader.terms.voters[noLease] = voterRecord{answerTime: time.Microsecond}
	leader.terms.voters[other] = voterRecord{answerTime: time.Second}
	leader.terms.mu.Unlock()
	const rounds = 50
	leased := 0
	for round := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := leader.Confirm(ctx, true)
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

// TestRoundCountsItselfOnlyOnceItsOwnPromiseRanOut: n1 leads, but as a
// voter it promised n9 (or restarted within its recorded lease). n2
// answers in term, n3 is unreachable: n1's round must not count n1 and
// so must not reach a majority. Once the promise is gone, the same round
// does: it failed for the promise, not for anything else.
//
// Without the wait, a leader B serving from a lease that counted A's
// promise could be outrun: A restarts, is elected, and confirms itself
// with one other voter while B still answers from memory.
func TestRoundCountsItselfOnlyOnceItsOwnPromiseRanOut(t *testing.T) {
	t.Run("promise to another leader", func(t *testing.T) {
		leader, node := mustLeader(t)
		v, _, _ := mustConfirmer(t, "n2", 0)
		node.pointAt("n2", mustServeVoter(t, v))
		node.pointAt("n3", "127.0.0.1:1")
		leader.promises.mu.Lock()
		leader.promises.to, leader.promises.until = "n9", leader.promises.clock()+time.Hour
		leader.promises.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if c, err := leader.Confirm(ctx, false); !errors.Is(err, sequencer.ErrNotLeader) {
			t.Fatalf("confirmed %v, err %v, counting itself while it had promised n9", c, err)
		}
		leader.promises.mu.Lock()
		leader.promises.to, leader.promises.until = "", 0
		leader.promises.mu.Unlock()
		mustConfirmNow(t, leader)
	})
	t.Run("restart hold from the stable store", func(t *testing.T) {
		store := raft.NewInmemStore()
		if err := store.SetUint64(leaseRecordKey, uint64(time.Hour)); err != nil {
			t.Fatal(err)
		}
		r := &fakeRaft{term: testTerm, leads: true, leader: "n1", voters: testVoters}
		node := newFakeNode(t, "self-of-n1")
		leader, err := Open(Config{ID: "n1", Timeout: testWait, Raft: r, Node: node, Store: store, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(leader.Close)
		v, _, _ := mustConfirmer(t, "n2", 0)
		node.pointAt("n2", mustServeVoter(t, v))
		node.pointAt("n3", "127.0.0.1:1")
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if c, err := leader.Confirm(ctx, false); !errors.Is(err, sequencer.ErrNotLeader) {
			t.Fatalf("confirmed %v, err %v, counting itself during its restart hold", c, err)
		}
		endRestartHold(leader)
		mustConfirmNow(t, leader)
	})
}

// turningRaft is a fakeRaft that moves on to a newer term, led by n3, as
// soon as each read named in after has happened once: what the asker was
// checked against changes right after the check.
type turningRaft struct {
	*fakeRaft
	mu     sync.Mutex
	after  map[string]bool // reads still to come before the turn; nil once turned
	turned chan struct{}
}

func newTurningRaft(leads bool, after ...string) *turningRaft {
	r := &turningRaft{
		fakeRaft: &fakeRaft{term: testTerm, leads: leads, leader: testVoters[0], voters: testVoters},
		after:    map[string]bool{},
		turned:   make(chan struct{}),
	}
	for _, a := range after {
		r.after[a] = true
	}
	return r
}

func (r *turningRaft) read(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.after == nil {
		return
	}
	delete(r.after, name)
	if len(r.after) == 0 {
		r.after = nil
		r.fakeRaft.mu.Lock()
		r.fakeRaft.term, r.fakeRaft.leads, r.fakeRaft.leader = testTerm+1, false, testVoters[2]
		r.fakeRaft.mu.Unlock()
		close(r.turned)
	}
}

func (r *turningRaft) CurrentTerm() uint64 {
	t := r.fakeRaft.CurrentTerm()
	r.read("CurrentTerm")
	return t
}

func (r *turningRaft) Leads() bool {
	l := r.fakeRaft.Leads()
	r.read("Leads")
	return l
}

func (r *turningRaft) Leader() string {
	l := r.fakeRaft.Leader()
	r.read("Leader")
	return l
}

// TestNoPromiseAfterLeavingTheAskersTerm: a node that waits out its
// promise to another leader before it answers n1 (as a voter, or as n1
// itself counting itself) may leave n1's term meanwhile; it must then
// not promise n1, or n3, the leader of the newer term, would wait that
// promise out for up to a lease. What n1 was checked against changes
// right after the check, while the answer waits; the old promise is then
// released, and the answer may go on.
func TestNoPromiseAfterLeavingTheAskersTerm(t *testing.T) {
	for _, tt := range []struct {
		name string
		id   string
		// reads are what the node reads of Raft to decide to promise n1.
		reads []string
		// ask starts n1's question to c in the background; the channel
		// is closed when c has answered.
		ask func(t *testing.T, c *Confirmer, node *fakeNode) <-chan struct{}
	}{
		{"voter", "n2", []string{"Leader", "CurrentTerm"}, func(t *testing.T, c *Confirmer, _ *fakeNode) <-chan struct{} {
			conn := newFakeNode(t, "").mustConn(t, mustServeVoter(t, c))
			done := make(chan struct{})
			go func() {
				defer close(done)
				ctx, cancel := context.WithTimeout(context.Background(), testWait)
				defer cancel()
				leadershiptest.AskTerm(ctx, conn, &api.TermRequest{NodeId: "n2", ClusterId: testCluster,
					LeaderId: "n1", Term: testTerm, Round: 1, LeaseMs: uint32(time.Hour.Milliseconds())})
			}()
			return done
		}},
		{"leader counting itself", "n1", []string{"CurrentTerm", "Leads"}, func(t *testing.T, c *Confirmer, node *fakeNode) <-chan struct{} {
			// Unreachable voters: only n1's own promise is looked at.
			node.pointAt("n2", "127.0.0.1:1")
			node.pointAt("n3", "127.0.0.1:1")
			done := make(chan struct{})
			go func() {
				defer close(done)
				ctx, cancel := context.WithTimeout(context.Background(), testWait)
				defer cancel()
				c.Confirm(ctx, true)
			}()
			return done
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newTurningRaft(tt.id == "n1", tt.reads...)
			node := newFakeNode(t, "self-of-"+tt.id)
			c, err := Open(Config{ID: tt.id, Lease: time.Hour, Timeout: testWait, Raft: r, Node: node, Store: raft.NewInmemStore(), Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			c.promises.mu.Lock()
			c.promises.to, c.promises.until = "n0", c.promises.clock()+time.Hour
			c.promises.term, c.promises.round = testTerm-1, 1
			c.promises.mu.Unlock()

			done := tt.ask(t, c, node)
			select {
			case <-r.turned:
			case <-time.After(testWait):
				t.Fatal("n1's question never read Raft")
			}
			c.promises.release("n0", testTerm-1, 2)
			select {
			case <-done:
			case <-time.After(testWait):
				t.Fatal("no answer to n1 after n0's promise was released")
			}
			c.promises.mu.Lock()
			to, left := c.promises.to, c.promises.until-c.promises.clock()
			c.promises.mu.Unlock()
			if to != "" {
				t.Fatalf("promised %q for %s after leaving its term %d for term %d led by n3: n3 would wait it out", to, left, testTerm, testTerm+1)
			}
		})
	}
}
