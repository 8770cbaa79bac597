package leadership

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// Confirm proves that this node still leads in its current term, by a
// round of messages sent after the caller assigned its IDs (see "The term
// round" in the package comment), and returns the term it proved.
//
// With askLease, each voter's answer is also a promise (see "The lease"),
// and so is this node's own count of itself; the result's Lease is the
// shortest promise among a majority in this term, 0 if fewer promised.
// Which answers count, and when they decide the round, is tally's rule;
// Confirm and runRound only ask and listen.
func (c *Confirmer) Confirm(ctx context.Context, askLease bool) (sequencer.Confirmation, error) {
	term := c.raft.CurrentTerm()
	if !c.raft.Leads() {
		return sequencer.Confirmation{}, sequencer.ErrNotLeader
	}
	ids, err := c.raft.Voters()
	if err != nil {
		return sequencer.Confirmation{}, fmt.Errorf("%w: read configuration: %w", sequencer.ErrNotLeader, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var ask time.Duration
	if askLease {
		ask = c.lease
	}
	round := c.rounds.Add(1)
	// This node counts itself only once no promise to another leader
	// holds: it may have made one as a voter, or before a restart. As a
	// voter's, its own promise is given only if it still leads in term
	// when that wait ends.
	stillLeads := func() bool { return c.raft.Leads() && c.raft.CurrentTerm() == term }
	self, err := c.promises.confirm(ctx, c.id, term, round, ask, stillLeads)
	if err != nil {
		return sequencer.Confirmation{}, fmt.Errorf("%w: wait for this node's promise to another leader to run out: %w", sequencer.ErrNotLeader, err)
	}
	b := &ballot{
		term: term, round: round, cluster: c.node.ClusterID(), voters: ids,
		// free: promises.confirm returned, so no promise to another
		// leader holds this node back any more.
		own:      ownVote{id: c.id, free: true, promise: self},
		askLease: ask > 0,
	}
	return c.runRound(ctx, b, uint32(ask.Milliseconds()))
}

// runRound asks the voters of b for their term, and leaseMs of promise,
// until tally decides the round.
func (c *Confirmer) runRound(ctx context.Context, b *ballot, leaseMs uint32) (sequencer.Confirmation, error) {
	others := slices.DeleteFunc(slices.Clone(b.voters), func(id string) bool { return id == c.id })
	b.unasked = len(others)
	b.answers = make([]termAnswer, 0, len(others))
	v := tally(*b)
	if v.outcome != pending {
		return v.result(b)
	}
	// Every voter asked puts exactly one answer here (a nil response when
	// it cannot answer), straight from the goroutine that reads its
	// stream: the buffer holds them all, so none ever blocks.
	answers := make(chan termAnswer, len(others))
	// A round asks only as many voters as a majority still needs, those
	// that answered fastest first: on a few shared cores, every voter
	// asked and not needed is CPU taken from the leader. Another voter is
	// asked when one fails, answers out of term, or (asked for a lease)
	// promises nothing; all the rest once the round is slower than the
	// ones asked usually are (hedge). Every probeEvery-th round asks all,
	// to keep every voter's answer time known.
	order := c.terms.choose(others, b.askLease)
	// sentAt holds the voters asked and not yet heard from. One still
	// silent when the round ends took at least that long (see silent).
	sentAt := make(map[string]time.Time, len(others))
	defer func() {
		for id, at := range sentAt {
			c.terms.silent(id, time.Since(at))
		}
	}()
	asked := 0
	askNext := func() {
		id := order[asked]
		asked++
		b.unasked--
		b.waiting++
		sentAt[id] = time.Now()
		go c.askTerm(ctx, id, &api.TermRequest{NodeId: id, ClusterId: b.cluster, Round: b.round, LeaderId: c.id, Term: b.term, LeaseMs: leaseMs}, answers)
	}
	first := v.need - v.have
	if b.round%probeEvery == 0 {
		first = len(order)
	}
	for asked < first {
		askNext()
	}
	hedge := time.NewTimer(c.terms.hedgeAfter(order[:asked]))
	defer hedge.Stop()
	for {
		select {
		case a := <-answers:
			b.waiting--
			b.answers = append(b.answers, a)
			ok, promise := b.judge(len(b.answers) - 1)
			c.terms.answered(a.id, time.Since(sentAt[a.id]), ok, b.askLease, promise > 0)
			delete(sentAt, a.id)
			if (!ok || (b.askLease && promise == 0)) && b.unasked > 0 {
				askNext()
			}
		case <-hedge.C:
			b.hedged = true
			for b.unasked > 0 {
				askNext()
			}
		case <-ctx.Done():
			b.ended = true
		}
		if v := tally(*b); v.outcome != pending {
			return v.result(b)
		}
	}
}

// result is what Confirm returns for a decided round b.
func (v verdict) result(b *ballot) (sequencer.Confirmation, error) {
	switch {
	case v.outcome == won:
		return v.conf, nil
	case v.otherCluster != "":
		return sequencer.Confirmation{}, fmt.Errorf("%w: %w: %d of %d voters (%s) answered as nodes of cluster %s, this node holds cluster %s",
			sequencer.ErrNotLeader, ErrOtherCluster, len(v.otherVoters), len(b.voters), strings.Join(v.otherVoters, ", "), v.otherCluster, b.cluster)
	}
	return sequencer.Confirmation{}, fmt.Errorf("%w: only %d of %d voters are still in term %d", sequencer.ErrNotLeader, v.have, len(b.voters), b.term)
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

// Release tells every voter that this node no longer serves from their
// promises, so a next leader need not wait them out, and releases its
// own. The caller has ended the lease (sequencer.Sequencer.EndLease, or
// stopped serving). Best effort and in the background: a voter that
// misses it holds its promise until it runs out.
func (c *Confirmer) Release() {
	if c.lease == 0 {
		return
	}
	term, round := c.raft.CurrentTerm(), c.rounds.Add(1)
	c.promises.release(c.id, term, round)
	ids, err := c.raft.Voters()
	if err != nil {
		return
	}
	cluster := c.node.ClusterID()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	var voters []string
	for _, id := range ids {
		if id != c.id {
			voters = append(voters, id)
		}
	}
	answers := make(chan termAnswer, len(voters))
	var wg sync.WaitGroup
	for _, id := range voters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.askTerm(ctx, id, &api.TermRequest{NodeId: id, ClusterId: cluster, Round: round, LeaderId: c.id, Term: term, Release: true}, answers)
		}()
	}
	go func() { wg.Wait(); cancel() }()
}

// termAnswer is voter id's answer to one round; resp is nil when the voter
// could not be asked or its stream broke. cluster is the cluster id the
// voter's side named when it ended the stream, "" if none.
type termAnswer struct {
	id      string
	resp    *api.TermResponse
	cluster string
}

// askTerm sends req to voter id, and not to some other process at its
// address, on the voter's stream; the answer goes to answers.
func (c *Confirmer) askTerm(ctx context.Context, id string, req *api.TermRequest, answers chan<- termAnswer) {
	addr, ok := c.node.NodeAddr(id)
	if !ok || addr == c.node.GRPCAddr() {
		answers <- termAnswer{id: id}
		return
	}
	ts, err := c.terms.get(ctx, id, addr, c.node)
	if err != nil {
		answers <- termAnswer{id: id}
		return
	}
	ts.ask(req, answers)
}
