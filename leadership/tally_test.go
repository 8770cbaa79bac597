package leadership

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// tallyRound is the round number of every ballot in these tests.
const tallyRound = 40

// reply is voter id's answer, in term, to round, with a promise of ms.
func reply(id string, term, round uint64, ms uint32) termAnswer {
	return termAnswer{id: id, resp: &api.TermResponse{NodeId: id, Term: term, Round: round, LeaseMs: ms}}
}

// inTerm is voter id's answer in the round's term, promising nothing.
func inTerm(id string) termAnswer { return reply(id, testTerm, tallyRound, 0) }

// promising is voter id's answer in the round's term, promising ms.
func promising(id string, ms uint32) termAnswer { return reply(id, testTerm, tallyRound, ms) }

// newer is voter id's answer from a newer term: a newer leader may exist.
func newer(id string) termAnswer { return reply(id, testTerm+1, tallyRound, 0) }

// stranger is an answer in term, in another node's name, from whatever
// listens at voter id's recorded address.
func stranger(id string) termAnswer {
	a := inTerm(id)
	a.resp.NodeId = "someone-else"
	return a
}

// broken is voter id's stream breaking before it answered.
func broken(id string) termAnswer { return termAnswer{id: id} }

// refusedAs is voter id refusing the round as a node of cluster.
func refusedAs(id, cluster string) termAnswer { return termAnswer{id: id, cluster: cluster} }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// tallyCase is one row of TestTally: a ballot, built from the fields
// below and this node n1, and what tally must decide from it.
type tallyCase struct {
	name string
	// voters counts the configuration's voters, n1, n2, ...; with
	// notVoter, this node n1 is not among them: they are n2, n3, ...
	voters   int
	notVoter bool
	// held means a promise this node made another leader still holds.
	held bool
	ask  bool
	// own is this node's promise to itself.
	own time.Duration
	// noCluster means this node has no cluster id yet.
	noCluster        bool
	answers          []termAnswer
	waiting, unasked int
	hedged, ended    bool

	want  outcome
	lease time.Duration
	other string // the other cluster a lost round names
}

func (c tallyCase) ballot() ballot {
	b := ballot{
		term: testTerm, round: tallyRound, cluster: testCluster,
		own:      ownVote{id: "n1", free: !c.held, promise: c.own},
		askLease: c.ask, answers: c.answers,
		waiting: c.waiting, unasked: c.unasked, hedged: c.hedged, ended: c.ended,
	}
	if c.noCluster {
		b.cluster = ""
	}
	first := 1
	if c.notVoter {
		first = 2
	}
	for i := range c.voters {
		b.voters = append(b.voters, fmt.Sprintf("n%d", first+i))
	}
	return b
}

// tallyCases are the rules of a round, each case named for what it shows.
// A comment says where a case is one that this project, or other leases
// (docs/design.md, "The lease"), got wrong before.
var tallyCases = []tallyCase{
	// A majority, this node counted.
	{name: "a single voter confirms alone", voters: 1, want: won},
	{name: "three voters: this node alone waits", voters: 3, waiting: 1, unasked: 1, want: pending},
	{name: "three voters: one in term makes a majority", voters: 3, answers: []termAnswer{inTerm("n2")}, unasked: 1, want: won},
	{name: "three voters: one newer, one still to ask", voters: 3, answers: []termAnswer{newer("n2")}, unasked: 1, want: pending},
	{name: "three voters: both newer", voters: 3, answers: []termAnswer{newer("n2"), newer("n3")}, want: lost},
	{name: "three voters: one behind the term, one newer", voters: 3, answers: []termAnswer{reply("n2", testTerm-1, tallyRound, 0), newer("n3")}, want: lost},
	{name: "four voters need three", voters: 4, answers: []termAnswer{inTerm("n2"), newer("n3"), broken("n4")}, want: lost},
	{name: "four voters: three in term", voters: 4, answers: []termAnswer{inTerm("n2"), inTerm("n3")}, waiting: 1, want: won},
	{name: "five voters: two in term wait for a third", voters: 5, answers: []termAnswer{inTerm("n2")}, waiting: 2, unasked: 1, want: pending},
	{name: "five voters: a majority out of reach before all answered", voters: 5, answers: []termAnswer{newer("n2"), newer("n3"), broken("n4")}, waiting: 1, want: lost},
	{name: "voters not yet asked keep a round open", voters: 5, answers: []termAnswer{newer("n2"), newer("n3")}, unasked: 2, want: pending},
	{name: "every voter answered, no majority", voters: 5, answers: []termAnswer{inTerm("n2"), newer("n3"), newer("n4"), broken("n5")}, want: lost},
	{name: "an empty configuration has no majority", voters: 0, want: lost},

	// This node's own count.
	// Other leases: a voter that becomes leader counted itself while its
	// promise to the previous leader held (design.md); d028dda added the
	// test the package move had lost.
	{name: "a leader does not count itself while its promise to another holds", voters: 3, held: true, answers: []termAnswer{inTerm("n2")}, waiting: 1, want: pending},
	{name: "held, and nobody left to ask", voters: 3, held: true, answers: []termAnswer{inTerm("n2"), newer("n3")}, want: lost},
	{name: "held, both other voters in term", voters: 3, held: true, answers: []termAnswer{inTerm("n2"), inTerm("n3")}, want: won},
	// Other leases: a restarted node forgot whom it promised (design.md).
	{name: "a single voter held by its restart hold", voters: 1, held: true, want: lost},
	{name: "a leader outside the configuration does not count itself", voters: 3, notVoter: true, answers: []termAnswer{inTerm("n2")}, waiting: 1, unasked: 1, want: pending},
	{name: "a leader outside the configuration, two voters in term", voters: 3, notVoter: true, answers: []termAnswer{inTerm("n2"), inTerm("n3")}, waiting: 1, want: won},
	// A voter recorded at this node's own address is answered by this
	// node (TestConfirmCountsAMajority, "the leader's own address counts
	// once").
	{name: "an answer in this node's own name does not count", voters: 3, answers: []termAnswer{inTerm("n1"), newer("n3")}, want: lost},

	// Whose answer counts.
	// 99b77af: whatever listened at a voter's stale address was counted
	// as the voter.
	{name: "strangers at the voters' addresses do not count", voters: 3, answers: []termAnswer{stranger("n2"), stranger("n3")}, want: lost},
	// A late answer to an earlier round proves nothing about this one
	// (TestConfirmCountsAMajority, "replaying").
	{name: "an answer to an earlier round does not count", voters: 3, answers: []termAnswer{reply("n2", testTerm, tallyRound-1, 0), newer("n3")}, want: lost},
	{name: "a voter counts once", voters: 5, answers: []termAnswer{inTerm("n2"), inTerm("n2"), newer("n3"), newer("n4")}, waiting: 1, want: pending},
	{name: "a node outside the configuration does not count", voters: 3, answers: []termAnswer{inTerm("n9"), newer("n3")}, want: lost},
	{name: "a broken stream does not count", voters: 3, answers: []termAnswer{broken("n2")}, waiting: 1, want: pending},

	// The lease.
	{name: "a majority promised: the shorter promise", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{promising("n2", 800)}, waiting: 1, want: won, lease: ms(800)},
	{name: "this node's promise is the shortest", voters: 3, ask: true, own: ms(500), answers: []termAnswer{promising("n2", 800)}, unasked: 1, want: won, lease: ms(500)},
	{name: "every promise counts, not only a majority's: the shortest of all", voters: 5, ask: true, own: ms(1000), answers: []termAnswer{promising("n2", 900), promising("n3", 600), promising("n4", 800)}, want: won, lease: ms(600)},
	{name: "a majority in term, a promise still to come: the round waits", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{inTerm("n2")}, waiting: 1, want: pending},
	{name: "then it comes", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{inTerm("n2"), promising("n3", 700)}, want: won, lease: ms(700)},
	{name: "the hedge passed: it waits no longer", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{inTerm("n2")}, waiting: 1, hedged: true, want: won},
	{name: "nobody asked is still to answer: no wait", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{inTerm("n2")}, unasked: 1, want: won},
	{name: "the round's time is up: it takes what it has", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{inTerm("n2")}, waiting: 1, ended: true, want: won},
	{name: "no lease asked: no wait for promises", voters: 3, answers: []termAnswer{inTerm("n2")}, waiting: 1, want: won},
	{name: "no lease asked: a voter's promise counts for nothing", voters: 3, answers: []termAnswer{promising("n2", 800)}, waiting: 1, want: won},
	{name: "only a minority promised, once hedged", voters: 5, ask: true, own: ms(1000), answers: []termAnswer{promising("n2", 800), inTerm("n3"), inTerm("n4")}, waiting: 1, hedged: true, want: won},
	// 0bf61ff: a leader promised itself, and voters promised it, though
	// it had left the term while it waited, or though the round was
	// numbered after the hand-over's release; the next leader waited the
	// promises out. This node's promise is then 0, and so is the lease.
	{name: "this node promised itself nothing (left the term, or released): no lease, whatever the voters promised", voters: 3, ask: true, answers: []termAnswer{promising("n2", 800), promising("n3", 900)}, want: won},
	// 8eaebc2: a round sent before the release, arriving after it, gets
	// no promise; its answer still confirms the term.
	{name: "a voter that got the release before the round confirms without a promise", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{inTerm("n2"), promising("n3", 900)}, want: won, lease: ms(900)},
	// A release is tagged with term and round because a promise is only
	// good for the round and term it was made in (design.md); neither an
	// earlier round's nor an earlier term's counts.
	{name: "a promise to an earlier round does not count", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{reply("n2", testTerm, tallyRound-1, 100), promising("n3", 900)}, want: won, lease: ms(900)},
	{name: "a promise in an earlier term does not count", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{reply("n2", testTerm-1, tallyRound, 100), promising("n3", 900)}, want: won, lease: ms(900)},
	{name: "a promise in a newer term does not count", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{reply("n2", testTerm+1, tallyRound, 100), promising("n3", 900)}, want: won, lease: ms(900)},
	{name: "a stranger's promise does not count", voters: 3, ask: true, own: ms(1000), answers: []termAnswer{promising("n3", 900), {id: "n2", resp: &api.TermResponse{NodeId: "n9", Term: testTerm, Round: tallyRound, LeaseMs: 100}}}, want: won, lease: ms(900)},
	{name: "held, this node's promise is none: no lease", voters: 3, held: true, ask: true, own: ms(1000), answers: []termAnswer{promising("n2", 800), promising("n3", 900)}, want: won},
	{name: "a leader outside the configuration: its own promise still bounds the lease", voters: 3, notVoter: true, ask: true, own: ms(300), answers: []termAnswer{promising("n2", 900), promising("n3", 900)}, waiting: 1, want: won, lease: ms(300)},
	{name: "a leader outside the configuration: its promise is not a voter's", voters: 3, notVoter: true, ask: true, own: ms(1000), answers: []termAnswer{promising("n2", 900), inTerm("n3")}, waiting: 1, want: pending},

	// Another cluster. c0fd8d5: a node whose state named another cluster
	// than its voters kept leading, every round failing for good.
	{name: "a majority refused as nodes of one other cluster", voters: 3, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n3", "beef")}, want: lost, other: "beef"},
	{name: "one refused as another cluster's, one in term", voters: 3, answers: []termAnswer{refusedAs("n2", "beef"), inTerm("n3")}, want: won},
	{name: "refusals naming two other clusters", voters: 3, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n3", "cafe")}, want: lost},
	{name: "refusals naming this node's own cluster", voters: 3, answers: []termAnswer{refusedAs("n2", testCluster), refusedAs("n3", testCluster)}, want: lost},
	{name: "a node without a cluster cannot tell another", voters: 3, noCluster: true, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n3", "beef")}, want: lost},
	{name: "five voters, three of one other cluster", voters: 5, answers: []termAnswer{refusedAs("n5", "beef"), refusedAs("n2", "beef"), refusedAs("n4", "cafe"), refusedAs("n3", "beef")}, want: lost, other: "beef"},
	{name: "five voters, two of another cluster, two still to answer", voters: 5, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n3", "beef")}, waiting: 2, want: pending},
	{name: "five voters, three of another cluster, one still to answer", voters: 5, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n3", "beef"), refusedAs("n4", "beef")}, waiting: 1, want: lost, other: "beef"},
	{name: "a voter refusing twice counts once", voters: 5, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n2", "beef"), refusedAs("n3", "beef"), newer("n4"), newer("n5")}, want: lost},
	{name: "a node outside the configuration refusing does not count", voters: 3, answers: []termAnswer{refusedAs("n2", "beef"), refusedAs("n9", "beef"), newer("n3")}, want: lost},

	// The end of a round.
	{name: "time up short of a majority, voters still to ask", voters: 5, answers: []termAnswer{inTerm("n2")}, unasked: 2, waiting: 1, ended: true, want: lost},
	{name: "time up, refused by another cluster's majority", voters: 3, answers: []termAnswer{refusedAs("n2", "beef")}, waiting: 1, ended: true, want: lost},
	{name: "time up with a majority", voters: 3, answers: []termAnswer{inTerm("n2")}, waiting: 1, ended: true, want: won},
}

// TestTally: every rule of a round, case by case.
func TestTally(t *testing.T) {
	for _, c := range tallyCases {
		v := tally(c.ballot())
		want := verdict{outcome: c.want}
		if c.want == won {
			want.conf.Term, want.conf.Lease = testTerm, c.lease
		}
		if v.outcome != want.outcome || v.conf != want.conf || v.otherCluster != c.other {
			t.Errorf("%s: tally = %s %+v other %q, want %s %+v other %q", c.name, v.outcome, v.conf, v.otherCluster, c.want, want.conf, c.other)
		}
	}
}

func (o outcome) String() string {
	return [...]string{pending: "pending", won: "won", lost: "lost"}[o]
}

// voterState is where one voter other than this node stands in a round,
// for TestTallyEveryRound.
type voterState int

const (
	notAsked voterState = iota
	stillWaiting
	promisedShort // in term, promising shortPromise
	promisedLong  // in term, promising longPromise
	inTermOnly    // in term, promising nothing
	newerTerm
	earlierRound // in term, but for an earlier round, promising stalePromise
	ofClusterA   // refused as a node of otherClusters[0]
	ofClusterB   // refused as a node of otherClusters[1]
	voterStates
)

// The promises TestTallyEveryRound's voters and this node make: all
// different, so that the lease tells which one it came from.
const (
	shortPromise = 300
	longPromise  = 900
	stalePromise = 100
	ownPromise   = 600
)

var otherClusters = [2]string{"beef", "cafe"}

// otherIDs are the ids of the voters other than this node, n1.
var otherIDs = []string{"n2", "n3", "n4", "n5", "n6"}

// roundModel is one small round for TestTallyEveryRound: the other
// voters' states and this node's, and what the round knows of time.
type roundModel struct {
	states                  []voterState
	ownVotes, free, ownProm bool
	ask, hedged, ended      bool
}

func (m roundModel) String() string {
	return fmt.Sprintf("voters n2... %v; n1 votes %v, free %v, promised itself %v; lease asked %v, hedged %v, ended %v",
		m.states, m.ownVotes, m.free, m.ownProm, m.ask, m.hedged, m.ended)
}

func (s voterState) String() string {
	return [...]string{"not asked", "waiting", "promised short", "promised long", "in term", "newer term", "earlier round", "cluster A", "cluster B"}[s]
}

// ballot is the ballot m describes; the other voters answer in their
// order.
func (m roundModel) ballot() ballot {
	b := ballot{term: testTerm, round: tallyRound, cluster: testCluster, own: ownVote{id: "n1", free: m.free}, askLease: m.ask, hedged: m.hedged, ended: m.ended}
	if m.ownProm {
		b.own.promise = ms(ownPromise)
	}
	if m.ownVotes {
		b.voters = append(b.voters, "n1")
	}
	for i, s := range m.states {
		id := otherIDs[i]
		b.voters = append(b.voters, id)
		switch s {
		case notAsked:
			b.unasked++
		case stillWaiting:
			b.waiting++
		case promisedShort:
			b.answers = append(b.answers, promising(id, shortPromise))
		case promisedLong:
			b.answers = append(b.answers, promising(id, longPromise))
		case inTermOnly:
			b.answers = append(b.answers, inTerm(id))
		case newerTerm:
			b.answers = append(b.answers, newer(id))
		case earlierRound:
			b.answers = append(b.answers, reply(id, testTerm, tallyRound-1, stalePromise))
		case ofClusterA, ofClusterB:
			b.answers = append(b.answers, refusedAs(id, otherClusters[s-ofClusterA]))
		}
	}
	return b
}

// facts are what m's round holds, counted straight from the states, as a
// checker would, not as tally does.
type facts struct {
	confirmed, promised, need, waiting, toCome int
	// shortest is the shortest promise counted, this node's included.
	shortest time.Duration
	// byCluster counts the voters that refused as each other cluster's.
	byCluster map[string][]string
}

func (m roundModel) facts() facts {
	voters := len(m.states)
	if m.ownVotes {
		voters++
	}
	f := facts{need: voters/2 + 1, shortest: time.Duration(1 << 62), byCluster: map[string][]string{}}
	if m.free && m.ask && m.ownProm {
		f.shortest = ms(ownPromise)
	}
	if m.free && m.ownVotes {
		f.confirmed++
		if m.ask && m.ownProm {
			f.promised++
		}
	}
	for i, s := range m.states {
		switch s {
		case notAsked:
			f.toCome++
		case stillWaiting:
			f.toCome++
			f.waiting++
		case promisedShort, promisedLong, inTermOnly:
			f.confirmed++
		case ofClusterA, ofClusterB:
			c := otherClusters[s-ofClusterA]
			f.byCluster[c] = append(f.byCluster[c], otherIDs[i])
		}
		if m.ask && s == promisedShort {
			f.promised++
			f.shortest = min(f.shortest, ms(shortPromise))
		}
		if m.ask && s == promisedLong {
			f.promised++
			f.shortest = min(f.shortest, ms(longPromise))
		}
	}
	if m.ended {
		f.toCome = 0
	}
	if !m.free || !m.ask || !m.ownProm {
		f.shortest = 0 // this node promised itself nothing
	}
	return f
}

// TestTallyEveryRound checks, as a model checker would, what must hold
// whatever the case, on every round of one to five voters, this node
// among them, or of one to four without it (five more would add two
// million rounds and no new count), in every mix of voter states, of this
// node's own count and promise, with the lease asked or not, hedged or
// not, ended or not.
func TestTallyEveryRound(t *testing.T) {
	rounds := 0
	for others := range 5 {
		for _, ownVotes := range []bool{true, false} {
			if !ownVotes && others == 0 {
				continue // no voter at all: TestTally has it
			}
			eachStates(others, func(states []voterState) {
				for flags := range 1 << 5 {
					m := roundModel{
						states: states, ownVotes: ownVotes,
						free: flags&1 != 0, ownProm: flags&2 != 0, ask: flags&4 != 0,
						hedged: flags&8 != 0, ended: flags&16 != 0,
					}
					checkRound(t, m)
					rounds++
				}
			})
		}
	}
	t.Logf("%d rounds checked", rounds)
}

// eachStates calls f with every assignment of voterStates to n voters.
func eachStates(n int, f func([]voterState)) {
	states := make([]voterState, n)
	for {
		f(states)
		i := 0
		for ; i < n && states[i] == voterStates-1; i++ {
			states[i] = 0
		}
		if i == n {
			return
		}
		states[i]++
	}
}

// checkRound checks tally's verdict on m against what must hold.
func checkRound(t *testing.T, m roundModel) {
	t.Helper()
	b, f := m.ballot(), m.facts()
	v := tally(b)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%v: verdict %s %+v other %q: %s", m, v.outcome, v.conf, v.otherCluster, fmt.Sprintf(format, args...))
	}
	switch {
	case v.outcome == won && f.confirmed < f.need:
		fail("won with %d of %d confirmations needed (this node counted only if free and a voter)", f.confirmed, f.need)
	case (v.outcome == lost) != (f.confirmed+f.toCome < f.need):
		fail("lost must be exactly when %d confirmed and %d to come cannot make %d", f.confirmed, f.toCome, f.need)
	case v.outcome == pending && m.ended:
		fail("an ended round must be decided")
	case v.outcome == won && v.conf.Term != testTerm, v.outcome != won && v.conf != (sequencer.Confirmation{}):
		fail("a won round proves its term, and only a won round proves anything")
	case v.conf.Lease > 0 && (!m.ask || f.promised < f.need):
		fail("a lease from %d promises of %d needed (asked: %v)", f.promised, f.need, m.ask)
	case v.outcome == won && f.promised >= f.need && v.conf.Lease != f.shortest:
		fail("lease %s, want the shortest promise counted, %s", v.conf.Lease, f.shortest)
	case v.outcome == won && f.promised < f.need && v.conf.Lease != 0:
		fail("a lease without a majority's promises")
	case f.confirmed >= f.need && (v.outcome == won) == (m.ask && f.promised < f.need && f.waiting > 0 && !m.hedged && !m.ended):
		fail("with a majority, a round waits exactly while promises may still come from voters asked, before the hedge")
	}
	checkOtherCluster(t, m, v, f)
	if r := tally(reversed(b)); r.outcome != v.outcome || r.conf != v.conf || r.otherCluster != v.otherCluster {
		fail("answers in the opposite order: %s %+v other %q", r.outcome, r.conf, r.otherCluster)
	}
}

// checkOtherCluster: a lost round names the other cluster exactly when a
// majority of the voters refused it as that cluster's nodes, and names
// those voters.
func checkOtherCluster(t *testing.T, m roundModel, v verdict, f facts) {
	t.Helper()
	var want string
	var voters []string
	for c, ids := range f.byCluster {
		if v.outcome == lost && len(ids) >= f.need {
			want, voters = c, ids
		}
	}
	if v.otherCluster != want || !slices.Equal(v.otherVoters, voters) {
		t.Fatalf("%v: verdict %s names cluster %q %v, want %q %v", m, v.outcome, v.otherCluster, v.otherVoters, want, voters)
	}
}

// reversed is b with its answers in the opposite order.
func reversed(b ballot) ballot {
	b.answers = slices.Clone(b.answers)
	slices.Reverse(b.answers)
	return b
}
