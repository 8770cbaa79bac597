package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// confirmLeadership proves that this node still leads in its current term,
// by a round of messages sent after the caller assigned its IDs: it asks
// other voters for their Raft term, as many as a majority still needs and
// more when some fail or are slow, and succeeds once a majority, counting
// itself, answers that it is still in this term.
//
// Why that is enough: a newer leader needs the votes of a majority, and a
// node that votes in a newer term stores that term first, and its term
// never goes down. Two majorities share a node. So if a newer leader had
// been elected before this round reached the majority that answered, one
// of them would have answered a higher term. A newer leader answers no
// request before it is elected; so none of its answers completed before
// the IDs being confirmed were assigned, and the order holds.
//
// Each answer must come from the voter it is counted for: the request
// names the node and the cluster, and a node answers only for itself, so
// whatever listens at a stale address cannot vote in this round.
//
// Unlike hashicorp/raft's VerifyLeader, no answer to a message sent before
// the call is counted: every answer here is to a request sent by this call.
//
// With askLease, each voter's answer is also a promise (see lease.go), and
// so is this node's own count of itself; the result's Lease is the
// shortest promise among a majority in this term, 0 if fewer promised.
func (n *Node) confirmLeadership(ctx context.Context, askLease bool) (sequencer.Confirmation, error) {
	term := n.raft.CurrentTerm()
	if n.raft.State() != raft.Leader {
		return sequencer.Confirmation{}, ErrNotLeader
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return sequencer.Confirmation{}, fmt.Errorf("%w: read configuration: %w", ErrNotLeader, err)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	var ask time.Duration
	if askLease {
		ask = n.cfg.Lease
	}
	round := n.rounds.Add(1)
	// This node counts itself only once no promise to another leader
	// holds: it may have made one as a voter, or before a restart.
	self, err := n.promises.confirm(ctx, n.cfg.ID, term, round, ask)
	if err != nil {
		return sequencer.Confirmation{}, fmt.Errorf("%w: wait for this node's promise to another leader to run out: %w", ErrNotLeader, err)
	}
	var others []string
	voters, have, promised := 0, 0, 0
	lease := self
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(s.ID) == n.cfg.ID {
			have++
			if self > 0 {
				promised++
			}
		} else {
			others = append(others, string(s.ID))
		}
	}
	need := voters/2 + 1
	result := func() sequencer.Confirmation {
		c := sequencer.Confirmation{Term: term}
		if promised >= need {
			c.Lease = lease
		}
		return c
	}
	if have >= need {
		return result(), nil
	}
	cluster := n.clusterID()
	// Every voter asked puts exactly one answer here (a nil response when
	// it cannot answer), straight from the goroutine that reads its
	// stream: the buffer holds them all, so none ever blocks.
	answers := make(chan termAnswer, len(others))
	leaseMs := uint32(ask.Milliseconds())
	// A round asks only as many voters as a majority still needs, those
	// that answered fastest first: on a few shared cores, every voter
	// asked and not needed is CPU taken from the leader. Another voter is
	// asked when one fails, answers out of term, or (asked for a lease)
	// promises nothing; all the rest once the round is slower than the
	// ones asked usually are (hedge). Every probeEvery-th round asks all,
	// to keep every voter's answer time known.
	order := n.terms.choose(others, ask > 0)
	// sentAt holds the voters asked and not yet heard from. One still
	// silent when the round ends took at least that long (see silent).
	sentAt := make(map[string]time.Time, len(others))
	defer func() {
		for id, at := range sentAt {
			n.terms.silent(id, time.Since(at))
		}
	}()
	asked := 0
	askNext := func() {
		id := order[asked]
		asked++
		sentAt[id] = time.Now()
		go n.askTerm(ctx, id, &api.TermRequest{NodeId: id, ClusterId: cluster, Round: round, LeaderId: n.cfg.ID, Term: term, LeaseMs: leaseMs}, answers)
	}
	first := need - have
	if round%probeEvery == 0 {
		first = len(order)
	}
	for asked < first {
		askNext()
	}
	hedge := time.NewTimer(n.terms.hedgeAfter(order[:asked]))
	defer hedge.Stop()
	hedged := false
	for waiting := asked; waiting > 0; {
		select {
		case a := <-answers:
			waiting--
			// Only the voter asked, in this term, counts.
			ok := a.resp != nil && a.resp.NodeId == a.id && a.resp.Term == term
			p := time.Duration(0)
			if ok && ask > 0 {
				p = time.Duration(a.resp.LeaseMs) * time.Millisecond
			}
			n.terms.answered(a.id, time.Since(sentAt[a.id]), ok, ask > 0, p > 0)
			delete(sentAt, a.id)
			if ok {
				have++
				if p > 0 {
					promised++
					lease = min(lease, p)
				}
			}
			if (!ok || (ask > 0 && p == 0)) && asked < len(order) {
				askNext()
				waiting++
			}
		case <-hedge.C:
			hedged = true
			for asked < len(order) {
				askNext()
				waiting++
			}
		case <-ctx.Done():
			waiting = 0
			continue
		}
		// Asked for a lease, a round that has its majority still waits,
		// until the hedge, for promises from voters already asked.
		if have >= need && (promised >= need || ask == 0 || waiting == 0 || hedged) {
			return result(), nil
		}
		if have+waiting+len(order)-asked < need {
			break // a majority is out of reach: do not wait for the rest
		}
	}
	if have >= need {
		return result(), nil
	}
	return sequencer.Confirmation{}, fmt.Errorf("%w: only %d of %d voters are still in term %d", ErrNotLeader, have, voters, term)
}

// probeEvery is how often a round asks every voter, not only those it
// needs, so that the answer times of all are known.
const probeEvery = 64

// Bounds of the time a round waits for the voters it asked before it asks
// the rest: a few answer times, not less than minHedge (a scheduler's
// hiccup on a loaded machine should not double the work), not more than
// maxHedge (a paused voter should not hold requests long).
const (
	minHedge = time.Millisecond
	maxHedge = 20 * time.Millisecond
)

// voterRecord is what a leader knows of how one voter answers its rounds.
type voterRecord struct {
	// answerTime is a moving average of how long the voter took to
	// answer; failed marks a voter whose last round failed, asked after
	// every other until it answers again.
	answerTime time.Duration
	failed     bool
	// noPromise marks a voter that answered a round asking for a lease
	// without promising (a node without --lease): rounds that ask for one
	// ask it after those that promise.
	noPromise bool
}

// choose returns ids in the order a round asks them: voters that failed
// last, and, when the round asks for a lease, those that do not promise
// after those that do; then the fastest first. A voter never heard from
// comes first, so it is measured.
func (t *termStreams) choose(ids []string, wantPromise bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(ids)
	rank := func(id string) (bool, bool, time.Duration) {
		v := t.voters[id]
		return v.failed, wantPromise && v.noPromise, v.answerTime
	}
	slices.SortStableFunc(out, func(a, b string) int {
		fa, na, ta := rank(a)
		fb, nb, tb := rank(b)
		return cmp.Or(compareBool(fa, fb), compareBool(na, nb), cmp.Compare(ta, tb))
	})
	return out
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// hedgeAfter is how long a round waits for the voters ids before it asks
// the rest.
func (t *termStreams) hedgeAfter(ids []string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var slowest time.Duration
	for _, id := range ids {
		slowest = max(slowest, t.voters[id].answerTime)
	}
	return min(max(4*slowest, t.hedgeMin), t.hedgeMax)
}

// answered records voter id's answer to a round, d after it was asked:
// in the round's term (ok) or not, and, to a round that asked for a lease,
// whether it promised. A voter that failed is trusted again from its
// first answer.
func (t *termStreams) answered(id string, d time.Duration, ok, askedLease, promised bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, seen := t.voters[id]
	switch {
	case !ok:
		v.failed = true
	case !seen || v.failed:
		v = voterRecord{answerTime: d}
	default:
		v.answerTime = (3*v.answerTime + d) / 4
	}
	if ok && askedLease {
		v.noPromise = !promised
	}
	t.voters[id] = v
}

// silent records that voter id had not answered d after it was asked,
// when the round ended without it: its answer time is at least d. A
// silence never lowers it, or a paused voter would come to look as fast as
// the voters that answered for it.
func (t *termStreams) silent(id string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.voters[id]
	v.answerTime = max(v.answerTime, d)
	t.voters[id] = v
}

// releaseLease tells every voter that this node no longer serves from
// their promises, so a next leader need not wait them out, and releases
// its own. The caller has ended the lease (Sequencer.EndLease, or stopped
// serving). Best effort and in the background: a voter that misses it
// holds its promise until it runs out.
func (n *Node) releaseLease() {
	if n.cfg.Lease == 0 {
		return
	}
	term, round := n.raft.CurrentTerm(), n.rounds.Add(1)
	n.promises.release(n.cfg.ID, term, round)
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	cluster := n.clusterID()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	var voters []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.ID {
			voters = append(voters, string(s.ID))
		}
	}
	answers := make(chan termAnswer, len(voters))
	var wg sync.WaitGroup
	for _, id := range voters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.askTerm(ctx, id, &api.TermRequest{NodeId: id, ClusterId: cluster, Round: round, LeaderId: n.cfg.ID, Term: term, Release: true}, answers)
		}()
	}
	go func() { wg.Wait(); cancel() }()
}

// termAnswer is voter id's answer to one round; resp is nil when the voter
// could not be asked or its stream broke.
type termAnswer struct {
	id   string
	resp *api.TermResponse
}

// askTerm sends req to voter id, and not to some other process at its
// address, on the voter's stream; the answer goes to answers.
func (n *Node) askTerm(ctx context.Context, id string, req *api.TermRequest, answers chan<- termAnswer) {
	addr, ok := n.fsm.NodeAddr(id)
	if !ok || addr == n.grpcAddr {
		answers <- termAnswer{id: id}
		return
	}
	ts, err := n.terms.get(ctx, id, addr, n.peers)
	if err != nil {
		answers <- termAnswer{id: id}
		return
	}
	ts.ask(req, answers)
}

// termStreams keeps one Term stream open from this node to each voter it
// asks, so that a round costs one small message each way instead of a new
// RPC; the round is on the path of every request.
type termStreams struct {
	mu     sync.Mutex
	slots  map[string]*termSlot // by node id
	closed bool
	// voters holds, by node id, how each voter answered lately, for
	// choosing whom a round asks; hedgeMin and hedgeMax bound how long a
	// round waits for them (minHedge and maxHedge).
	voters             map[string]voterRecord
	hedgeMin, hedgeMax time.Duration
}

// termSlot holds the stream to one voter; its lock is held while the
// stream is opened, so rounds that need it at once share one.
type termSlot struct {
	mu sync.Mutex
	ts *termStream
}

// termStream is one open Term stream. Answers are matched to the round
// that asked by the echoed round number; an answer that comes after its
// round ended is dropped.
type termStream struct {
	addr   string
	st     grpc.BidiStreamingClient[api.TermRequest, api.TermResponse]
	cancel context.CancelFunc
	dead   chan struct{} // closed once the stream is given up
	once   sync.Once

	mu sync.Mutex
	// waiting holds, by round, where the answer to each request sent and
	// not yet answered goes. A healthy voter answers every request, in
	// order, so it holds at most the rounds in flight; a voter that stops
	// answering is given up at maxUnanswered.
	waiting map[uint64]termWaiter
	killed  bool
	// queue holds requests not yet sent. Whichever asker finds no send in
	// progress sends them all, so rounds in flight at once never wait
	// for each other's sends.
	queue   []*api.TermRequest
	sending bool
}

// termWaiter is the round that asked voter id, by its answer channel.
type termWaiter struct {
	id      string
	answers chan<- termAnswer
}

// maxQueuedTerms bounds the requests waiting to be sent on one Term
// stream. Sends pile up only when one is held by flow control: the peer
// stopped reading (paused, cut off). Past the bound the stream is dropped,
// which also frees the held send.
const maxQueuedTerms = 64

// maxUnanswered bounds the requests sent on one Term stream and not yet
// answered. A voter that reads but does not answer (paused after its
// socket buffers took the requests) is given up past it, so its rounds
// fail at once and their entries do not pile up.
const maxUnanswered = 256

func newTermStreams() *termStreams {
	return &termStreams{slots: map[string]*termSlot{}, voters: map[string]voterRecord{}, hedgeMin: minHedge, hedgeMax: maxHedge}
}

// get returns the live stream to voter id at addr, opening one if needed.
// Opening waits at most until ctx ends; the stream itself lives on.
func (t *termStreams) get(ctx context.Context, id, addr string, peers *peerConns) (*termStream, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrNotLeader
	}
	slot := t.slots[id]
	if slot == nil {
		slot = &termSlot{}
		t.slots[id] = slot
	}
	t.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.ts != nil && slot.ts.addr == addr && !slot.ts.isDead() {
		return slot.ts, nil
	}
	if slot.ts != nil {
		slot.ts.kill() // dead, or the voter's address changed
		slot.ts = nil
	}
	conn, err := peers.get(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stopWatch := context.AfterFunc(ctx, cancel) // a connecting peer holds no round past its end
	st, err := api.NewPeerClient(conn).Term(sctx)
	if !stopWatch() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open term stream to %s: %w", addr, err)
	}
	ts := &termStream{addr: addr, st: st, cancel: cancel, dead: make(chan struct{}), waiting: map[uint64]termWaiter{}}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		ts.kill()
		return nil, ErrNotLeader
	}
	slot.ts = ts
	go ts.receive()
	return ts, nil
}

// close ends every stream.
func (t *termStreams) close() {
	t.mu.Lock()
	t.closed = true
	slots := t.slots
	t.slots = map[string]*termSlot{}
	t.mu.Unlock()
	for _, slot := range slots {
		slot.mu.Lock()
		if slot.ts != nil {
			slot.ts.kill()
		}
		slot.mu.Unlock()
	}
}

// ask sends req; exactly one answer to it reaches answers: the voter's,
// or a nil one if the stream breaks or is given up first. A round that
// ended before its answer came leaves it in the channel's buffer.
func (ts *termStream) ask(req *api.TermRequest, answers chan<- termAnswer) {
	ts.mu.Lock()
	if ts.killed || len(ts.queue) >= maxQueuedTerms || len(ts.waiting) >= maxUnanswered {
		ts.mu.Unlock()
		ts.kill()
		answers <- termAnswer{id: req.NodeId}
		return
	}
	ts.waiting[req.Round] = termWaiter{id: req.NodeId, answers: answers}
	ts.queue = append(ts.queue, req)
	if ts.sending {
		ts.mu.Unlock()
		return
	}
	ts.sending = true
	for len(ts.queue) > 0 {
		reqs := ts.queue
		ts.queue = nil
		ts.mu.Unlock()
		for _, r := range reqs {
			if err := ts.st.Send(r); err != nil {
				ts.kill() // answers every round still waiting
				break
			}
		}
		ts.mu.Lock()
	}
	ts.sending = false
	ts.mu.Unlock()
}

// deliver hands resp (nil: no answer) to the round that asked in round,
// once: the entry goes with the first delivery.
func (ts *termStream) deliver(round uint64, resp *api.TermResponse) {
	ts.mu.Lock()
	w, ok := ts.waiting[round]
	delete(ts.waiting, round)
	ts.mu.Unlock()
	if ok {
		w.answers <- termAnswer{id: w.id, resp: resp}
	}
}

// receive hands each answer to the round that asked, until the stream
// breaks.
func (ts *termStream) receive() {
	defer ts.kill()
	for {
		resp, err := ts.st.Recv()
		if err != nil {
			return
		}
		ts.deliver(resp.Round, resp) // a second answer to a round finds no entry
	}
}

// kill gives the stream up: it ends the call, and every round still
// waiting on it gets a nil answer.
func (ts *termStream) kill() {
	ts.once.Do(func() {
		ts.cancel()
		close(ts.dead)
		ts.mu.Lock()
		ts.killed = true
		waiting := ts.waiting
		ts.waiting = map[uint64]termWaiter{}
		ts.mu.Unlock()
		for _, w := range waiting {
			w.answers <- termAnswer{id: w.id}
		}
	})
}

func (ts *termStream) isDead() bool {
	select {
	case <-ts.dead:
		return true
	default:
		return false
	}
}

// Term implements api.PeerServer: it answers each request with this
// node's current term, and ends the stream if a request names another
// node or another cluster. It returns when the node closes, so that a
// leader's stream never holds up a graceful stop.
func (s *service) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	done := make(chan error, 1)
	go func() { done <- s.answerTerms(stream) }()
	select {
	case err := <-done:
		return err
	case <-s.n.stop:
		return toStatus(stream.Context(), ErrNotLeader, "")
	}
}

func (s *service) answerTerms(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if req.NodeId != s.n.cfg.ID || req.ClusterId != s.n.clusterID() {
			return toStatus(stream.Context(), fmt.Errorf("%w: asked for node %q of cluster %q, this is node %q of cluster %q",
				ErrBadRequest, req.NodeId, req.ClusterId, s.n.cfg.ID, s.n.clusterID()), "")
		}
		var granted time.Duration
		if req.Release {
			// A forged release would free a promise a leader counts on.
			if s.n.mayRelease(stream.Context()) {
				s.n.promises.release(req.LeaderId, req.Term, req.Round)
			}
		} else {
			// A promise goes only to the leader this voter knows, in its
			// own term: a deposed leader cannot keep renewing one and
			// hold the next leader back, and nobody else can get one.
			var ask time.Duration
			if _, leader := s.n.raft.LeaderWithID(); req.Term == s.n.raft.CurrentTerm() && string(leader) == req.LeaderId {
				ask = time.Duration(req.LeaseMs) * time.Millisecond
			}
			// While this node has promised another leader, the answer
			// waits: an answer is a confirmation.
			if granted, err = s.n.promises.confirm(stream.Context(), req.LeaderId, req.Term, req.Round, ask); err != nil {
				return err
			}
		}
		resp := &api.TermResponse{Term: s.n.raft.CurrentTerm(), NodeId: s.n.cfg.ID, Round: req.Round, LeaseMs: uint32(granted.Milliseconds())}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// newClusterID returns a random id for a new cluster.
func newClusterID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a cluster id: %w", err)
	}
	return hex.EncodeToString(b), nil
}
