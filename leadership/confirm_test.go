package leadership

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/leadership/leadershiptest"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// fakePeer answers Term with whatever term it is told, as the node it was
// asked for, or, if it is a stranger, as another node. A replaying peer
// answers every request with the round of the first one it got, as a
// delayed answer to an old round would look; a silent one never answers.
type fakePeer struct {
	api.UnimplementedPeerServer
	term      func() uint64
	stranger  bool
	replaying bool
	silent    bool
	opened    *atomic.Int64 // counts the streams opened, if set
	asked     *atomic.Int64 // counts the requests received, if set
}

func (p fakePeer) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	if p.opened != nil {
		p.opened.Add(1)
	}
	var firstRound uint64
	for i := 0; ; i++ {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if i == 0 {
			firstRound = req.Round
		}
		if p.asked != nil {
			p.asked.Add(1)
		}
		resp := &api.TermResponse{Term: p.term(), NodeId: req.NodeId, Round: req.Round}
		switch {
		case p.silent:
			continue
		case p.stranger:
			resp.NodeId = "someone-else"
		case p.replaying:
			resp.Round = firstRound
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

func mustFakePeer(t *testing.T, term func() uint64) string {
	t.Helper()
	return mustServe(t, fakePeer{term: term})
}

func mustPeerServer(t *testing.T, p fakePeer) string {
	t.Helper()
	return mustServe(t, p)
}

// pointVoters points leader's rounds at addrs, one for each voter but the
// leader, in the configuration's order.
func pointVoters(leader *fakeNode, addrs ...string) {
	for i, id := range testVoters[1:] {
		leader.pointAt(id, addrs[i])
	}
}

// TestConfirmCountsAMajority points the leader at fake peers that answer
// chosen terms: a majority (the leader and one peer) in the leader's term
// confirms; a majority elsewhere does not.
func TestConfirmCountsAMajority(t *testing.T) {
	leader, node := mustLeader(t)
	term := uint64(testTerm)
	same := func() uint64 { return term }
	newer := func() uint64 { return term + 1 }
	older := func() uint64 { return term - 1 }
	dead := "127.0.0.1:1" // nothing listens there
	tests := []struct {
		name  string
		peers [2]string
		// want is the outcome of successive rounds.
		want []bool
	}{
		{"both in term", [2]string{mustFakePeer(t, same), mustFakePeer(t, same)}, []bool{true, true}},
		{"one in term, one newer", [2]string{mustFakePeer(t, same), mustFakePeer(t, newer)}, []bool{true}},
		{"one in term, one unreachable", [2]string{mustFakePeer(t, same), dead}, []bool{true}},
		{"one in term, one silent", [2]string{mustFakePeer(t, same), mustPeerServer(t, fakePeer{term: same, silent: true})}, []bool{true}},
		// A round asks the first voter alone; it must ask the other when
		// that one fails, answers out of term, or keeps silent.
		{"one unreachable, one in term", [2]string{dead, mustFakePeer(t, same)}, []bool{true, true}},
		{"one newer, one in term", [2]string{mustFakePeer(t, newer), mustFakePeer(t, same)}, []bool{true, true}},
		{"one silent, one in term", [2]string{mustPeerServer(t, fakePeer{term: same, silent: true}), mustFakePeer(t, same)}, []bool{true, true}},
		{"both newer: a newer leader may exist", [2]string{mustFakePeer(t, newer), mustFakePeer(t, newer)}, []bool{false}},
		{"one newer, one unreachable", [2]string{mustFakePeer(t, newer), dead}, []bool{false}},
		{"one newer, one silent", [2]string{mustFakePeer(t, newer), mustPeerServer(t, fakePeer{term: same, silent: true})}, []bool{false}},
		{"both behind: not in this term", [2]string{mustFakePeer(t, older), mustFakePeer(t, older)}, []bool{false}},
		// Whatever listens at a stale address answers for itself, not for
		// the voter: it must not count, even in the right term.
		{"in term but strangers", [2]string{mustPeerServer(t, fakePeer{term: same, stranger: true}), mustPeerServer(t, fakePeer{term: same, stranger: true})}, []bool{false}},
		{"one stranger, one newer", [2]string{mustPeerServer(t, fakePeer{term: same, stranger: true}), mustFakePeer(t, newer)}, []bool{false}},
		// An answer to an earlier round proves nothing about this one.
		{"one replaying its first answer, one newer", [2]string{mustPeerServer(t, fakePeer{term: same, replaying: true}), mustFakePeer(t, newer)}, []bool{true, false, false}},
		{"the leader's own address counts once", [2]string{node.GRPCAddr(), node.GRPCAddr()}, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pointVoters(node, tt.peers[:]...)
			// Rounds ask voters never heard from in the configuration's
			// order: the first peer of each case is asked first.
			leader.terms.mu.Lock()
			clear(leader.terms.voters)
			leader.terms.mu.Unlock()
			for round, wantOK := range tt.want {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c, err := leader.Confirm(ctx, false)
				got := c.Term
				cancel()
				if wantOK && (err != nil || got != term) {
					t.Fatalf("round %d: confirm = %d, %v; want term %d", round, got, err, term)
				}
				if !wantOK && !errors.Is(err, sequencer.ErrNotLeader) {
					t.Fatalf("round %d: confirm = %d, %v; want sequencer.ErrNotLeader", round, got, err)
				}
			}
		})
	}
}

// TestRoundAsksOnlyTheVotersItNeeds: with two voters in the leader's term,
// a round needs one of them, and asks the other only to keep its answer
// time known (every probeEvery rounds) or when the first is unusually
// slow: far fewer requests than a round to every voter.
func TestRoundAsksOnlyTheVotersItNeeds(t *testing.T) {
	leader, node := mustLeader(t)
	term := uint64(testTerm)
	var asked atomic.Int64
	for _, id := range testVoters[1:] {
		node.pointAt(id, mustPeerServer(t, fakePeer{term: func() uint64 { return term }, asked: &asked}))
	}
	// No round hedges, so the count does not depend on how fast the
	// machine answers.
	leader.terms.mu.Lock()
	leader.terms.hedgeMin, leader.terms.hedgeMax = time.Hour, time.Hour
	leader.terms.mu.Unlock()
	const rounds = 200
	for round := range rounds {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := leader.Confirm(ctx, false)
		cancel()
		if err != nil || c.Term != term {
			t.Fatalf("round %d: confirm = %d, %v; want term %d", round, c.Term, err, term)
		}
	}
	// One voter a round, both in every probeEvery-th round (some requests
	// may still be on their way); a round to every voter would ask
	// 2*rounds times.
	if most := rounds + rounds/probeEvery + 1; asked.Load() > int64(most) {
		t.Fatalf("%d rounds asked %d times, want at most %d: rounds ask voters they do not need", rounds, asked.Load(), most)
	}
}

// TestConfirmRoundsAtOnce: rounds in flight at the same time share each
// voter's stream, and every one of them is confirmed; none is taken for a
// stuck stream. The voters are real: their answers are AnswerTerms'.
func TestConfirmRoundsAtOnce(t *testing.T) {
	leader, node := mustLeader(t)
	mustVoters(t, node, 0, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, err := leader.Confirm(ctx, false)
				cancel()
				if err != nil || c.Term != testTerm {
					t.Errorf("goroutine %d round %d: confirm = %d, %v; want term %d", g, i, c.Term, err, testTerm)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// deafPeer accepts Term streams and never reads them, as a paused process
// would; it counts the streams opened to it.
type deafPeer struct {
	api.UnimplementedPeerServer
	opened *atomic.Int64
}

func (p deafPeer) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	p.opened.Add(1)
	<-stream.Context().Done()
	return nil
}

// TestConfirmGivesUpAStreamThatStopsReading: once flow control stops the
// sends to a peer that does not read, the leader drops that stream and
// opens a new one, instead of leaving a send blocked for good, and keeps
// confirming with the majority that answers.
func TestConfirmGivesUpAStreamThatStopsReading(t *testing.T) {
	leader, node := mustLeader(t)
	term := uint64(testTerm)
	var opened atomic.Int64
	pointVoters(node, mustServe(t, deafPeer{opened: &opened}), mustFakePeer(t, func() uint64 { return term }))
	deafID := testVoters[1]
	// Each round sends the deaf peer about 60 bytes; gRPC's flow control
	// window is at most a few MB, so this many rounds must exhaust it.
	deadline := time.Now().Add(30 * time.Second)
	for round := 0; opened.Load() < 2; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("after %d rounds the deaf peer has had %d streams opened, want a second one", round, opened.Load())
		}
		// Rounds ask the voters that answer fastest first, and the deaf
		// one never does: it is made to look fastest, so every round
		// asks it.
		leader.terms.mu.Lock()
		leader.terms.voters[deafID] = voterRecord{}
		leader.terms.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := leader.Confirm(ctx, false)
		got := c.Term
		cancel()
		if err != nil || got != term {
			t.Fatalf("round %d: confirm = %d, %v; want term %d", round, got, err, term)
		}
	}
}

// TestConfirmGivesUpAPeerThatStopsAnswering: a peer that reads requests
// but never answers, as a process paused after its socket took them, holds
// at most maxUnanswered of them; then the leader drops the stream and
// opens a new one, and every round is confirmed by the majority that
// answers.
func TestConfirmGivesUpAPeerThatStopsAnswering(t *testing.T) {
	leader, node := mustLeader(t)
	term := uint64(testTerm)
	var opened atomic.Int64
	pointVoters(node, mustPeerServer(t, fakePeer{term: func() uint64 { return term }, silent: true, opened: &opened}), mustFakePeer(t, func() uint64 { return term }))
	silentID := testVoters[1]
	// The new stream reaches the peer's handler some time after the round
	// that dropped the old one: rounds go on until it does, or a deadline.
	deadline := time.Now().Add(30 * time.Second)
	round := 0
	for ; round < maxUnanswered+10 || (opened.Load() < 2 && time.Now().Before(deadline)); round++ {
		// A round asks the voters that answer fastest first, and the
		// silent one never does: it is made to look fastest, so that
		// every round asks it.
		leader.terms.mu.Lock()
		leader.terms.voters[silentID] = voterRecord{}
		leader.terms.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := leader.Confirm(ctx, false)
		got := c.Term
		cancel()
		if err != nil || got != term {
			t.Fatalf("round %d: confirm = %d, %v; want term %d", round, got, err, term)
		}
		leader.terms.mu.Lock()
		slot := leader.terms.slots[silentID]
		leader.terms.mu.Unlock()
		if slot != nil {
			slot.mu.Lock()
			if ts := slot.ts; ts != nil {
				ts.mu.Lock()
				if n := len(ts.waiting); n > maxUnanswered {
					t.Fatalf("round %d: %d requests wait on the silent peer's stream, want at most %d", round, n, maxUnanswered)
				}
				ts.mu.Unlock()
			}
			slot.mu.Unlock()
		}
	}
	if opened.Load() < 2 {
		t.Fatalf("the silent peer has had %d streams opened after %d rounds, want a second one", opened.Load(), round)
	}
}

// TestTermAnswersOnlyForItself: a voter asked for another node, or for
// another cluster, ends the stream with ErrMisdirected; asked for itself,
// it echoes the round.
func TestTermAnswersOnlyForItself(t *testing.T) {
	voter, _, _ := mustConfirmer(t, "n2", 0)
	// misdirected counts the streams AnswerTerms ended with
	// ErrMisdirected; the others end when the asker cancels them.
	var misdirected atomic.Int64
	addr := mustServe(t, recordingVoter{c: voter, err: func(err error) {
		if errors.Is(err, ErrMisdirected) {
			misdirected.Add(1)
		}
	}})
	conn := newFakeNode(t, "").mustConn(t, addr)
	ask := func(req *api.TermRequest) (*api.TermResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		return leadershiptest.AskTerm(ctx, conn, req)
	}
	if resp, err := ask(&api.TermRequest{NodeId: "n2", ClusterId: testCluster, Round: 7}); err != nil || resp.NodeId != "n2" || resp.Term != testTerm || resp.Round != 7 {
		t.Fatalf("Term for itself = %v, %v", resp, err)
	}
	for i, req := range []*api.TermRequest{
		{NodeId: "n9", ClusterId: testCluster, Round: 1},
		{NodeId: "n2", ClusterId: "another", Round: 1},
	} {
		if resp, err := ask(req); err == nil {
			t.Errorf("Term(%v) = %v, want a refusal", req, resp)
		}
		// The handler returned before its error reached the asker.
		if got := misdirected.Load(); got != int64(i+1) {
			t.Errorf("after Term(%v), %d streams ended with ErrMisdirected, want %d", req, got, i+1)
		}
	}
}

// recordingVoter serves c, and hands err what AnswerTerms returned.
type recordingVoter struct {
	api.UnimplementedPeerServer
	c   *Confirmer
	err func(error)
}

func (s recordingVoter) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	err := s.c.AnswerTerms(stream)
	s.err(err)
	return err
}

// TestVoterRecords: whom a round asks first. A voter that failed is asked
// after the others, and trusted again from its first answer, not after
// its average has slowly come down; a silence never makes a voter look
// faster; a voter that answered a lease round without promising is asked
// after those that promise, but only by rounds that ask for a lease.
func TestVoterRecords(t *testing.T) {
	const near, far = "near", "far"
	first := func(ts *termStreams, wantPromise bool) string { return ts.choose([]string{far, near}, wantPromise)[0] }

	ts := newTermStreams()
	ts.answered(near, 200*time.Microsecond, true, false, false)
	ts.answered(far, 10*time.Millisecond, true, false, false)
	if got := first(ts, false); got != near {
		t.Fatalf("asked %s first, want the faster %s", got, near)
	}
	ts.answered(near, 0, false, false, false) // its stream broke
	if got := first(ts, false); got != far {
		t.Fatalf("asked %s first after %s failed, want %s", got, near, far)
	}
	ts.answered(near, 300*time.Microsecond, true, false, false) // a probe round reached it again
	if got := first(ts, false); got != near {
		t.Fatalf("asked %s first after %s answered again, want %s", got, near, near)
	}

	// A paused voter, asked and silent while the others answered in a
	// fraction of the time it was waited for.
	ts = newTermStreams()
	ts.answered(near, 200*time.Microsecond, true, false, false)
	ts.silent(far, 2*time.Millisecond)
	ts.silent(far, 100*time.Microsecond) // a round that ended early
	if got := first(ts, false); got != near {
		t.Fatalf("asked the silent voter first")
	}
	if d := ts.voters[far].answerTime; d < 2*time.Millisecond {
		t.Fatalf("the silent voter's answer time came down to %s", d)
	}

	// A fast voter without --lease.
	ts = newTermStreams()
	ts.answered(near, 100*time.Microsecond, true, true, false)
	ts.answered(far, time.Millisecond, true, true, true)
	if got := first(ts, true); got != far {
		t.Fatalf("a lease round asked %s first, want %s, which promises", got, far)
	}
	if got := first(ts, false); got != near {
		t.Fatalf("a round without a lease asked %s first, want the faster %s", got, near)
	}
	ts.answered(near, 100*time.Microsecond, true, false, false) // a round without a lease learns nothing of promises
	if got := first(ts, true); got != far {
		t.Fatalf("after a round without a lease, a lease round asked %s first, want %s", got, far)
	}
}
