package startup

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/api"
)

// The start rule against every small cluster, as a model checker would:
// every node's decision (entryPath, bootstrapRule, joinRule, composed as
// DecideStart composes them) is taken against the others' durable
// states, for
//   - clusters of 1 to 5 nodes;
//   - bootstrap lists of one (the founder; the others joined it) or all;
//   - each node's --join list: none, some (the next node), or all;
//   - each node up or down, and each with its data dir or without;
//   - no stale address, or one node's address now answered by a node of
//     another cluster (that node is then unreachable at it).
// The property, for a cluster that ran (every node was a member): a node
// with an empty data dir never bootstraps while another member holds
// state or cannot be asked, and never joins its own cluster as the
// member it was; and a node that holds its data always restarts. For a
// new cluster (no node ever held state, every node up), the standing
// command lines of a list of all create it, and a founder's one-shot
// --force-bootstrap creates it and the others join.

// modelNode is one node of a modelled cluster: its command line and its
// durable state.
type modelNode struct {
	entry     Entry
	up, holds bool
}

// modelWorld is a cluster and what answers at each address.
type modelWorld struct {
	nodes []modelNode
	// stale, when >= 0, is the node whose address a node of another
	// cluster answers now.
	stale int
	// ran: every node was a member (else the cluster is new).
	ran bool
}

func modelID(i int) string   { return fmt.Sprintf("n%d", i+1) }
func modelAddr(i int) string { return fmt.Sprintf("g%d", i+1) }

func (w modelWorld) index(addr string) int { return int(addr[1] - '1') }

// nodeStatus is what node asker hears from addr asked NodeStatus.
func (w modelWorld) nodeStatus(asker int, addr string) NodeAnswer {
	j := w.index(addr)
	n := w.nodes[j]
	switch {
	case j == w.stale:
		return NodeAnswer{Info: &api.NodeInfo{Id: "x1", HasState: true, ClusterId: "other", Term: 9}}
	case j == asker:
		return NodeAnswer{Info: &api.NodeInfo{Id: modelID(j), Role: "starting"}}
	case !n.up:
		return NodeAnswer{Err: errors.New("connection refused")}
	case n.holds:
		return NodeAnswer{Info: &api.NodeInfo{Id: modelID(j), HasState: true, ClusterId: "c", Term: 3}}
	}
	return NodeAnswer{Info: &api.NodeInfo{Id: modelID(j), Role: "starting"}}
}

// leads reports whether the cluster has a leader: a majority of its
// members up with their data.
func (w modelWorld) leads() bool {
	have := 0
	for j, n := range w.nodes {
		if n.up && n.holds && j != w.stale {
			have++
		}
	}
	return w.ran && have > len(w.nodes)/2
}

// status is what addr answers asked Status: a member that runs with its
// data names the leader and every member; the stale address's node names
// its own cluster; anything else (down, starting) does not answer.
func (w modelWorld) status(addr string) *api.StatusResponse {
	j := w.index(addr)
	n := w.nodes[j]
	switch {
	case j == w.stale:
		return &api.StatusResponse{LeaderId: "x1", Nodes: []*api.NodeInfo{{Id: "x1"}}}
	case !n.up || !n.holds || !w.leads():
		return nil
	}
	st := &api.StatusResponse{LeaderId: modelID(j)}
	for k := range w.nodes {
		st.Nodes = append(st.Nodes, &api.NodeInfo{Id: modelID(k)})
	}
	return st
}

// modelOutcome is what a node does at start.
type modelOutcome int

const (
	outRestart modelOutcome = iota
	outBootstrap
	outJoin        // joins the cluster that answered
	outJoinForeign // joins the stale address's cluster
	outRefuse
)

// decide runs the rule for node i as DecideStart does, on one round of
// answers (a wait is a refusal at the deadline: no new answers come in a
// model of durable states).
func (w modelWorld) decide(i int) modelOutcome {
	n := w.nodes[i]
	if n.holds {
		return outRestart
	}
	self := modelID(i)
	p, err := entryPath(self, n.entry)
	if err != nil {
		return outRefuse
	}
	switch p {
	case pathForce:
		return outBootstrap
	case pathBootstrap:
		var heardAll []heard
		for _, s := range bootstrapSources(self, n.entry) {
			heardAll = append(heardAll, hear(self, s.want, w.nodeStatus(i, s.addr)))
		}
		switch bootstrapRule(heardAll) {
		case verdictBootstrap:
			return outBootstrap
		case verdictWait:
			return outRefuse
		}
		if len(n.entry.Join) == 0 {
			return outRefuse
		}
	}
	var answers []*api.StatusResponse
	for _, addr := range joinAddrs(self, n.entry) {
		answers = append(answers, w.status(addr))
	}
	v, _ := joinRule(self, answers)
	switch {
	case v != joinNew:
		return outRefuse
	case w.leaderAnswersFirst(self, n.entry):
		return outJoin
	}
	return outJoinForeign
}

// leaderAnswersFirst reports whether the first leader to answer node
// self's join question is of its own cluster.
func (w modelWorld) leaderAnswersFirst(self string, e Entry) bool {
	for _, addr := range joinAddrs(self, e) {
		if st := w.status(addr); st != nil && st.LeaderId != "" {
			return st.LeaderId != "x1"
		}
	}
	return false
}

// joinChoices are the --join lists a node of k may have: none, some (the
// next node's address), all.
func joinChoices(i, k int) [][]string {
	all := make([]string, k)
	for j := range all {
		all[j] = modelAddr(j)
	}
	return [][]string{nil, {modelAddr((i + 1) % k)}, all}
}

func modelPeers(k int) []Peer {
	var ps []Peer
	for j := range k {
		ps = append(ps, Peer{ID: modelID(j), GRPCAddr: modelAddr(j)})
	}
	return ps
}

// forEachCommandLines calls f with every assignment of command lines to k
// nodes: a list of all, or of the founder only (the others not listed),
// and each node's --join list.
func forEachCommandLines(k int, f func(founderOnly bool, es []Entry)) {
	for _, founderOnly := range []bool{false, true} {
		es := make([]Entry, k)
		var rec func(i int)
		rec = func(i int) {
			if i == k {
				f(founderOnly, es)
				return
			}
			for _, j := range joinChoices(i, k) {
				es[i] = Entry{Join: j, Bootstrap: modelPeers(k)}
				if founderOnly {
					es[i].Bootstrap = nil
					if i == 0 {
						es[i].Bootstrap = modelPeers(1)
					}
				}
				rec(i + 1)
			}
		}
		rec(0)
	}
}

func TestStartRuleOnEverySmallCluster(t *testing.T) {
	configs, decisions := 0, 0
	// Each broken property is reported once, with its first example and
	// how many decisions broke it.
	var kinds []string
	first, count := map[string]string{}, map[string]int{}
	fail := func(format string, args ...any) {
		if count[format] == 0 {
			kinds = append(kinds, format)
			first[format] = fmt.Sprintf(format, args...)
		}
		count[format]++
	}
	for k := 1; k <= 5; k++ {
		forEachCommandLines(k, func(founderOnly bool, es []Entry) {
			// A cluster that ran: every combination of up/down and
			// holds/lost, and every stale address.
			for mask := 0; mask < 1<<(2*k); mask++ {
				for stale := -1; stale < k; stale++ {
					if stale >= 0 && mask>>(2*stale)&1 == 1 {
						continue // the stale node is not at its address: up or down is the same
					}
					w := modelWorld{nodes: make([]modelNode, k), stale: stale, ran: true}
					for i := range k {
						w.nodes[i] = modelNode{entry: es[i], up: mask>>(2*i)&1 == 1, holds: mask>>(2*i+1)&1 == 1}
					}
					configs++
					for i, n := range w.nodes {
						if !n.up || i == stale {
							continue
						}
						decisions++
						checkRan(w, i, fail)
					}
				}
			}
			// A new cluster: every node up, none with state.
			w := modelWorld{nodes: make([]modelNode, k), stale: -1}
			for i := range k {
				w.nodes[i] = modelNode{entry: es[i], up: true}
			}
			configs++
			decisions += k
			checkNew(w, founderOnly, fail)
		})
	}
	t.Logf("%d configurations, %d decisions", configs, decisions)
	for _, k := range kinds {
		t.Errorf("%d decisions, first: %s", count[k], first[k])
	}
}

// checkRan checks node i's decision in a cluster that ran.
func checkRan(w modelWorld, i int, fail func(string, ...any)) {
	got := w.decide(i)
	n := w.nodes[i]
	switch {
	case n.holds && got != outRestart:
		fail("%s: a node with its data does not restart (%d)", w.describe(i), got)
	case got == outBootstrap:
		for j, o := range w.nodes {
			if j != i && (o.holds || !o.up || j == w.stale) {
				fail("%s: bootstraps while %s holds state or cannot be asked", w.describe(i), modelID(j))
				return
			}
		}
	case got == outJoin:
		fail("%s: joins its own cluster as the member it was", w.describe(i))
	}
}

// checkNew checks a new cluster: a list of all creates it on every node;
// with a founder-only list, the standing command lines create nothing,
// the founder's one-shot --force-bootstrap creates it, and then every
// other node whose --join list reaches the founder joins.
func checkNew(w modelWorld, founderOnly bool, fail func(string, ...any)) {
	if !founderOnly && len(w.nodes) > 1 {
		for i := range w.nodes {
			if got := w.decide(i); got != outBootstrap {
				fail("%s: a new cluster's node does not bootstrap (%d)", w.describe(i), got)
			}
		}
		return
	}
	if got := w.decide(0); got == outBootstrap {
		fail("%s: a founder-only list bootstraps from a standing command line", w.describe(0))
	}
	w.nodes[0].entry.ForceBootstrap = true
	if got := w.decide(0); got != outBootstrap {
		fail("%s: --force-bootstrap does not create the cluster (%d)", w.describe(0), got)
	}
	// The founder runs, the only member; the others are not members.
	w.nodes[0].holds = true
	for i := 1; i < len(w.nodes); i++ {
		got := w.decideNewJoiner(i)
		reaches := strings.Contains(strings.Join(w.nodes[i].entry.Join, ","), modelAddr(0))
		if reaches != (got == outJoin) {
			fail("%s: a new node whose --join reaches the founder=%v decides %d", w.describe(i), reaches, got)
		}
	}
}

// decideNewJoiner is decide for a node that was never a member of a
// cluster whose founder runs alone and leads.
func (w modelWorld) decideNewJoiner(i int) modelOutcome {
	var answers []*api.StatusResponse
	self := modelID(i)
	for _, addr := range joinAddrs(self, w.nodes[i].entry) {
		var st *api.StatusResponse
		if w.index(addr) == 0 {
			st = &api.StatusResponse{LeaderId: modelID(0), Nodes: []*api.NodeInfo{{Id: modelID(0)}}}
		}
		answers = append(answers, st)
	}
	if p, err := entryPath(self, w.nodes[i].entry); err != nil || p != pathJoin {
		return outRefuse
	}
	if v, _ := joinRule(self, answers); v == joinNew {
		return outJoin
	}
	return outRefuse
}

func (w modelWorld) describe(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of %d", modelID(i), len(w.nodes))
	for j, n := range w.nodes {
		state := map[[2]bool]string{{true, true}: "up", {true, false}: "up-empty", {false, true}: "down", {false, false}: "down-empty"}[[2]bool{n.up, n.holds}]
		if j == w.stale {
			state = "stale(foreign)"
		}
		fmt.Fprintf(&b, " [%s %s bootstrap=%d join=%v]", modelID(j), state, len(n.entry.Bootstrap), n.entry.Join)
	}
	return b.String()
}
