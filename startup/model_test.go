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
//     another cluster (that node is then unreachable at it), under
//     another id or under the member's own.
// The property, for a cluster that ran (every node was a member): a node
// with an empty data dir never bootstraps while another member holds
// state or cannot be asked, and never joins its own cluster as the
// member it was; and a node that holds its data restarts (checkCluster's
// rule, judgeCluster, run against the others' answers), unless a
// majority of the other voters' addresses answer, under the voters' ids,
// for another cluster, which is what a data dir of another cluster sees.
// For a new cluster (no node ever held state, every node up), the
// standing command lines of a list of all create it, and a founder's
// one-shot --force-bootstrap creates it and the others join.
//
// TestForeignDataDirOnEverySmallCluster puts a one-node cluster's data
// dir on one node of such a cluster.

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
	// cluster answers now: as "x1", or as that member's own id when
	// staleSameID.
	stale       int
	staleSameID bool
	// ran: every node was a member (else the cluster is new).
	ran bool
}

// Names and answers, made once: the model asks millions of times.
var (
	modelIDs   = [...]string{"n1", "n2", "n3", "n4", "n5"}
	modelAddrs = [...]string{"g1", "g2", "g3", "g4", "g5"}
	strangerAs = func() (out [5]*api.NodeInfo) {
		for j := range out {
			out[j] = &api.NodeInfo{Id: modelIDs[j], HasState: true, ClusterId: "other", Term: 9}
		}
		return out
	}()
	stranger     = &api.NodeInfo{Id: "x1", HasState: true, ClusterId: "other", Term: 9}
	startingWith = infos(func(id string) *api.NodeInfo {
		return &api.NodeInfo{Id: id, Role: "starting", HasState: true, ClusterId: "c"}
	})
	starting      = infos(func(id string) *api.NodeInfo { return &api.NodeInfo{Id: id, Role: "starting"} })
	holding       = infos(func(id string) *api.NodeInfo { return &api.NodeInfo{Id: id, HasState: true, ClusterId: "c", Term: 3} })
	errNotRunning = errors.New("connection refused")
)

func infos(f func(id string) *api.NodeInfo) (out [5]*api.NodeInfo) {
	for j := range out {
		out[j] = f(modelIDs[j])
	}
	return out
}

func modelID(i int) string   { return modelIDs[i] }
func modelAddr(i int) string { return modelAddrs[i] }

func (w modelWorld) index(addr string) int { return int(addr[1] - '1') }

// nodeStatus is what node asker hears from addr asked NodeStatus.
func (w modelWorld) nodeStatus(asker int, addr string) NodeAnswer {
	j := w.index(addr)
	n := w.nodes[j]
	switch {
	case j == w.stale && w.staleSameID:
		return NodeAnswer{Info: strangerAs[j]}
	case j == w.stale:
		return NodeAnswer{Info: stranger}
	case j == asker && n.holds:
		// A starting node answers with what its data dir holds.
		return NodeAnswer{Info: startingWith[j]}
	case j == asker:
		return NodeAnswer{Info: starting[j]}
	case !n.up:
		return NodeAnswer{Err: errNotRunning}
	case n.holds:
		return NodeAnswer{Info: holding[j]}
	}
	return NodeAnswer{Info: starting[j]}
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
	self := modelID(i)
	if n.holds {
		return w.restart(i, "c", nil)
	}
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

// restart runs checkCluster's rule for node i, whose data dir holds
// cluster own with the other voters voters (every other node when nil),
// against what answers at their addresses and at its command line's.
func (w modelWorld) restart(i int, own string, voters []int) modelOutcome {
	self, e := modelID(i), w.nodes[i].entry
	if voters == nil {
		for j := range w.nodes {
			if j != i {
				voters = append(voters, j)
			}
		}
	}
	vs := make([]voterAnswer, 0, len(voters))
	named := make([]voterAnswer, 0, len(e.Bootstrap)+len(e.Join))
	for _, j := range voters {
		vs = append(vs, voterAnswer{ID: modelID(j), Addr: modelAddr(j), Info: w.nodeStatus(i, modelAddr(j)).Info})
	}
	for _, p := range e.Bootstrap {
		if p.ID != self {
			named = append(named, voterAnswer{ID: p.ID, Addr: p.GRPCAddr, Info: w.nodeStatus(i, p.GRPCAddr).Info})
		}
	}
	for _, a := range e.Join {
		named = append(named, voterAnswer{Addr: a, Info: w.nodeStatus(i, a).Info})
	}
	if _, err := judgeCluster(self, "/data", own, vs, named); err != nil {
		return outRefuse
	}
	return outRestart
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
					for _, sameID := range []bool{false, true} {
						if sameID && (stale < 0 || k == 5) {
							continue // five nodes' same-id strangers: as four's, at twice the run time
						}
						w := modelWorld{nodes: make([]modelNode, k), stale: stale, staleSameID: sameID, ran: true}
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
	case n.holds && got != outRestart && !w.looksForeign():
		fail("%s: a node with its data does not restart (%d)", w.describe(i), got)
	case n.holds && got != outRefuse && w.looksForeign():
		fail("%s: a node whose other voters answer, by a majority, for another cluster starts (%d)", w.describe(i), got)
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

// looksForeign reports whether a majority of any node's other voters
// answer, under their own ids, for another cluster: a data dir of
// another cluster sees its voters so, and refuses.
func (w modelWorld) looksForeign() bool {
	others := len(w.nodes) - 1
	return w.stale >= 0 && w.staleSameID && 1 >= others/2+1
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
			state = "stale(foreign as x1)"
			if w.staleSameID {
				state = "stale(foreign as " + modelID(j) + ")"
			}
		}
		fmt.Fprintf(&b, " [%s %s bootstrap=%d join=%v]", modelID(j), state, len(n.entry.Bootstrap), n.entry.Join)
	}
	return b.String()
}

// peerState is what answers at a modelled node's address.
type peerState int

const (
	peerDown           peerState = iota
	peerHolds                    // up, with this cluster's data
	peerEmpty                    // up, starting with an empty data dir
	peerStranger                 // a node of another cluster, as x1
	peerStrangerSameID           // a node of another cluster, under the member's id
	peerStates
)

// TestForeignDataDirOnEverySmallCluster: a one-node cluster's data dir
// (cluster x2, whose only voter is this node) on one node of a cluster of
// 2 to 5, with every command line of the small-cluster model and every
// state of the other nodes' addresses. Such a data dir would lead alone at
// once and serve x2's IDs at the member's address. Property: it is
// refused whenever an address of its command line answers for the cluster
// the command line names (a --bootstrap peer under its id, a --join
// address under any id), and it starts when no address of its command
// line answers for any cluster (nothing to tell it from a one-node
// cluster restarting).
func TestForeignDataDirOnEverySmallCluster(t *testing.T) {
	configs := 0
	for k := 2; k <= 5; k++ {
		states := make([]peerState, k)
		var rec func(j int)
		rec = func(j int) {
			if j < k {
				for s := range peerStates {
					states[j] = s
					rec(j + 1)
				}
				return
			}
			for f := range k {
				// f's command lines: a list of all, or the founder's own
				// (f is the founder, or on no list), and each --join list.
				lists := [][]Peer{modelPeers(k), nil}
				if f == 0 {
					lists[1] = modelPeers(1)
				}
				for _, list := range lists {
					for _, join := range joinChoices(f, k) {
						configs++
						checkForeign(t, f, Entry{Bootstrap: list, Join: join}, states)
					}
				}
			}
		}
		rec(0)
	}
	t.Logf("%d configurations", configs)
}

// checkForeign runs checkCluster's rule for node f holding cluster x2 as
// its only voter, command line e, the others' addresses answering as
// states says (f's own state is ignored: it answers as itself).
func checkForeign(t *testing.T, f int, e Entry, states []peerState) {
	t.Helper()
	answer := func(addr string) *api.NodeInfo {
		j := int(addr[1] - '1')
		switch {
		case j == f:
			return &api.NodeInfo{Id: modelID(f), Role: "starting", HasState: true, ClusterId: "x2"}
		case states[j] == peerHolds:
			return holding[j]
		case states[j] == peerEmpty:
			return starting[j]
		case states[j] == peerStranger:
			return stranger
		case states[j] == peerStrangerSameID:
			return strangerAs[j]
		}
		return nil
	}
	var named []voterAnswer
	accused, spoke := false, false
	for _, p := range e.Bootstrap {
		if p.ID != modelID(f) {
			a := answer(p.GRPCAddr)
			named = append(named, voterAnswer{ID: p.ID, Addr: p.GRPCAddr, Info: a})
			accused = accused || a != nil && a.Id == p.ID && a.ClusterId == "c"
			spoke = spoke || a != nil && a.ClusterId != ""
		}
	}
	for _, addr := range e.Join {
		a := answer(addr)
		named = append(named, voterAnswer{Addr: addr, Info: a})
		accused = accused || a != nil && a.Id != modelID(f) && a.ClusterId == "c"
		spoke = spoke || a != nil && a.Id != modelID(f) && a.ClusterId != ""
	}
	_, err := judgeCluster(modelID(f), "/data", "x2", []voterAnswer{}, named)
	switch {
	case accused && err == nil:
		t.Fatalf("%s holding one-node cluster x2, command line %+v, others %v: starts though its command line's cluster answers", modelID(f), e, states)
	case !spoke && err != nil:
		t.Fatalf("%s holding one-node cluster x2, command line %+v, others %v: refused (%v) though no address of its command line answers for any cluster", modelID(f), e, states, err)
	}
}
