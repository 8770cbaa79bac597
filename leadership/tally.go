package leadership

import (
	"slices"
	"time"

	"github.com/seed-e8569b35/ordo/sequencer"
)

// ballot is what a round knows at one moment: whom it counts, what it
// asked for, the answers that came and how many may still come. Confirm
// keeps one per round and hands it to tally after every answer and every
// timer; tally decides from it alone, so the quorum rule can be read, and
// tested, as a table, apart from the goroutines, timers and streams.
type ballot struct {
	// term and round are the round's own: an answer counts only for them.
	term, round uint64
	// cluster is this node's cluster, "" while it has none.
	cluster string
	// voters are the ids of the voters of the configuration, this node's
	// own included if it votes; a majority of them is needed.
	voters []string
	own    ownVote
	// askLease means the round asks for a lease: each answer in it is
	// also a promise, and so is this node's own count of itself.
	askLease bool
	// answers are the voters' answers, in the order they came.
	answers []termAnswer
	// waiting counts the voters asked and not yet heard from; unasked,
	// those the round may still ask.
	waiting, unasked int
	// hedged means the round waited its hedge time: a round that has its
	// majority waits no longer for promises.
	hedged bool
	// ended means the round's context ended: no answer will come.
	ended bool
}

// ownVote is this node's part in its own round: it counts itself, not
// through an answer, but through its own promises.
type ownVote struct {
	id string
	// free means no promise this node made another leader, nor its
	// restart hold, holds any more: only then may it count itself, or a
	// leader could confirm itself while it promised to confirm another.
	free bool
	// promise is what this node promised itself for the round
	// (promises.confirm), 0 if nothing.
	promise time.Duration
}

// outcome is what a round's answers so far decide.
type outcome int

const (
	pending outcome = iota // the round waits for more answers
	won                    // a majority confirmed: the round returns conf
	lost                   // a majority can no longer confirm
)

// verdict is tally's decision.
type verdict struct {
	outcome outcome
	// conf is what a won round proved: its term, and the lease its
	// promises give (0: none).
	conf sequencer.Confirmation
	// have counts the voters that confirmed, this node included; need is
	// a majority of the voters.
	have, need int
	// otherCluster is, when the round is lost, the one other cluster a
	// majority of the voters refused it as nodes of, and otherVoters
	// those voters, sorted; "" when none.
	otherCluster string
	otherVoters  []string
}

// tally decides a round from b alone. It is won once a majority of the
// voters, this node counted, confirmed the term, unless the round still
// waits for promises (see waitsForPromises); lost once even every voter
// still to answer could not make a majority. A won round's lease is the
// shortest of the promises it got, this node's own among them, when a
// majority promised; else 0.
func tally(b ballot) verdict {
	v := verdict{need: len(b.voters)/2 + 1}
	have, promised, lease := b.count()
	v.have = have
	switch {
	case v.have >= v.need && !b.waitsForPromises(promised, v.need):
		v.outcome = won
		v.conf.Term = b.term
		if promised >= v.need {
			v.conf.Lease = lease
		}
	case v.have+b.mayStillCome() < v.need:
		v.outcome = lost
		v.otherCluster, v.otherVoters = foreignMajority(b.foreign(), v.need)
	}
	return v
}

// count counts the voters that confirmed the round and those that
// promised, this node included, and the shortest promise.
func (b ballot) count() (have, promised int, lease time.Duration) {
	lease = b.ownPromise()
	if b.countsOwn() {
		have++
		if lease > 0 {
			promised++
		}
	}
	for i := range b.answers {
		ok, p := b.judge(i)
		if ok {
			have++
		}
		if p > 0 {
			promised++
			lease = min(lease, p)
		}
	}
	return have, promised, lease
}

// countsOwn reports whether this node counts itself: only as a voter, and
// only once no promise to another leader holds it back.
func (b ballot) countsOwn() bool {
	return b.own.free && slices.Contains(b.voters, b.own.id)
}

// ownPromise is the promise this node made itself for the round. The
// lease starts from it, counted or not (this node may not vote): so a
// node that promised itself nothing, because it released its promises or
// left the term while it waited, gets no lease from the round, whatever
// the voters promised.
func (b ballot) ownPromise() time.Duration {
	if !b.askLease || !b.own.free {
		return 0
	}
	return b.own.promise
}

// judge reports whether answers[i] confirms the round, and what it
// promised (0: nothing). Only the voter asked counts, for this round, in
// this term: an answer from whatever listens at a stale address, to an
// earlier round, or in another term proves nothing, and its promise, if
// any, is for something else.
func (b ballot) judge(i int) (bool, time.Duration) {
	a := b.answers[i]
	r := a.resp
	if !b.firstFromVoter(i) || r == nil || r.NodeId != a.id || r.Term != b.term || r.Round != b.round {
		return false, 0
	}
	if !b.askLease {
		return true, 0 // a promise nobody asked for is not one the round counts
	}
	return true, time.Duration(r.LeaseMs) * time.Millisecond
}

// firstFromVoter reports whether answers[i] is the first answer of a
// voter other than this node: each voter counts once, and this node only
// through its own promises.
func (b ballot) firstFromVoter(i int) bool {
	id := b.answers[i].id
	return id != b.own.id && slices.Contains(b.voters, id) &&
		!slices.ContainsFunc(b.answers[:i], func(a termAnswer) bool { return a.id == id })
}

// waitsForPromises reports whether a round that has its majority, with
// promised promises, waits on: asked for a lease, it waits, until the
// hedge, for promises from voters already asked, so that one slow
// promise does not cost the lease.
func (b ballot) waitsForPromises(promised, need int) bool {
	return b.askLease && promised < need && b.waiting > 0 && !b.hedged && !b.ended
}

// mayStillCome counts the answers the round may still get.
func (b ballot) mayStillCome() int {
	if b.ended {
		return 0
	}
	return b.waiting + b.unasked
}

// foreign maps each voter that refused the round as a node of another
// cluster to the cluster it named. A node that has no cluster yet cannot
// tell another one.
func (b ballot) foreign() map[string]string {
	f := map[string]string{}
	for i, a := range b.answers {
		if ok, _ := b.judge(i); !ok && b.firstFromVoter(i) && a.cluster != "" && b.cluster != "" && a.cluster != b.cluster {
			f[a.id] = a.cluster
		}
	}
	return f
}

// foreignMajority returns the cluster that at least need voters of
// foreign (each voter's other cluster) named, and those voters, sorted;
// "" when none did. Each voter is counted once, for the one cluster it
// named, so at most one cluster can reach a majority.
func foreignMajority(foreign map[string]string, need int) (string, []string) {
	by := map[string][]string{}
	for id, cluster := range foreign {
		by[cluster] = append(by[cluster], id)
	}
	for cluster, ids := range by {
		if len(ids) >= need {
			slices.Sort(ids)
			return cluster, ids
		}
	}
	return "", nil
}
