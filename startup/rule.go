package startup

// The start rule as pure functions of what a starting node was told and
// what it heard, apart from the questions and timers of DecideStart, so
// that model_test.go can run it against every small cluster.

import (
	"fmt"
	"slices"

	"github.com/seed-e8569b35/ordo/api"
)

// path is the question a node with an empty data dir must have answered
// before it starts, chosen from its command line alone.
type path int

const (
	// pathBootstrap asks every other address the node was given whether
	// it holds Raft state (bootstrapRule).
	pathBootstrap path = iota
	// pathJoin asks a leader whether the node is a member (joinRule).
	pathJoin
	// pathForce bootstraps without asking (--force-bootstrap).
	pathForce
)

// entryPath chooses the path of node self with an empty data dir, or
// refuses a command line that cannot decide safely.
//
// A --bootstrap list that names only this node gives it no one to ask:
// after a lost data dir it would create its cluster again, beside the
// one it founded and that others may have joined since (issue 22). Its
// --join addresses cannot stand in for the list: they may name only some
// of the members, and two of them that lost their data together would
// each see the other empty. So creating a cluster from a one-node list is
// the one-shot --force-bootstrap, never a standing command line; with
// the standing line, a lost data dir takes the join path, which a leader
// answers.
func entryPath(self string, e Entry) (path, error) {
	listed := slices.ContainsFunc(e.Bootstrap, func(p Peer) bool { return p.ID == self })
	switch {
	case e.ForceBootstrap && !listed:
		return 0, fmt.Errorf("%w: --force-bootstrap needs a --bootstrap list that names this node %q", ErrBadConfig, self)
	case e.ForceBootstrap:
		return pathForce, nil
	case listed && len(e.Bootstrap) == 1 && len(e.Join) > 0:
		return pathJoin, nil
	case listed && len(e.Bootstrap) == 1:
		return 0, fmt.Errorf("%w: the data dir is empty and --bootstrap names only this node %q, so no one can tell whether its cluster already exists "+
			"(if it lost its data dir, bootstrapping would create a second cluster that hands out the same IDs). "+
			"To create a one-node cluster, start it once with --force-bootstrap and keep that flag off its usual command line; "+
			"if the cluster exists, give --join with its members' addresses", ErrBadConfig, self)
	case listed:
		return pathBootstrap, nil
	case len(e.Join) == 0 && len(e.Bootstrap) > 0:
		return 0, fmt.Errorf("%w: --bootstrap does not name this node %q: give --join to join the cluster", ErrBadConfig, self)
	case len(e.Join) == 0:
		return 0, fmt.Errorf("%w: the data dir is empty: give --bootstrap to create a cluster or --join to join one", ErrBadConfig)
	}
	return pathJoin, nil
}

// source is an address a node on the bootstrap path asks whether its node
// holds Raft state: key names it in messages, want is the id that must
// answer there ("" for any).
type source struct{ key, addr, want string }

// bootstrapSources are the addresses a listed node asks on the bootstrap
// path: every other peer of its list, under its id, and every --join
// address. Every source of members the command line gives counts.
func bootstrapSources(self string, e Entry) []source {
	var s []source
	for _, p := range e.Bootstrap {
		if p.ID != self {
			s = append(s, source{p.ID, p.GRPCAddr, p.ID})
		}
	}
	for _, addr := range e.Join {
		s = append(s, source{"join " + addr, addr, ""})
	}
	return s
}

// joinAddrs are the addresses a node on the join path asks for a leader:
// its --join addresses, then the other peers of its list.
func joinAddrs(self string, e Entry) []string {
	ask := slices.Clone(e.Join)
	for _, p := range e.Bootstrap {
		if p.ID != self {
			ask = append(ask, p.GRPCAddr)
		}
	}
	return ask
}

// heard is what one address proves about its node, asked whether it
// holds Raft state.
type heard int

const (
	// heardNothing: no answer, an error, or another node than the one
	// the list names at that address.
	heardNothing heard = iota
	// heardSelf: the address is this node's own (a --join list that
	// names every member names this one too).
	heardSelf
	// heardEmpty: a node that holds no Raft state.
	heardEmpty
	// heardState: a node that holds Raft state: a cluster exists.
	heardState
)

// hear classifies answer a from the address of a listed peer want (""
// for a --join address, which may be any node, or a service in front of
// several).
func hear(self, want string, a NodeAnswer) heard {
	switch {
	case a.Err != nil:
		return heardNothing
	case a.Info.Id == self:
		return heardSelf
	case want != "" && a.Info.Id != want:
		return heardNothing
	case PeerHasState(a.Info):
		return heardState
	}
	return heardEmpty
}

// verdict is a round's outcome on the bootstrap path.
type verdict int

const (
	// verdictWait: ask again; at the deadline, refuse (ErrClusterUnknown).
	verdictWait verdict = iota
	// verdictBootstrap: every other address answered, and no node holds
	// state.
	verdictBootstrap
	// verdictExists: a node holds state: the cluster exists, and this
	// node must not create it (with --join it takes the join path).
	verdictExists
)

// bootstrapRule decides from what every other address a listed node was
// given (the other peers of its list and its --join addresses) proved
// this round. One node with state is enough to know a cluster exists;
// bootstrapping needs every other address to have answered, empty, and
// at least one of them (a node asked nobody has not been told anything).
func bootstrapRule(sources []heard) verdict {
	others, silent := 0, false
	for _, h := range sources {
		switch h {
		case heardState:
			return verdictExists
		case heardNothing:
			silent = true
			others++
		case heardEmpty:
			others++
		}
	}
	if silent || others == 0 {
		return verdictWait
	}
	return verdictBootstrap
}

// joinVerdict is a round's outcome on the join path.
type joinVerdict int

const (
	// joinWait: no leader answered; at the deadline, refuse.
	joinWait joinVerdict = iota
	// joinMember: a leader lists this node: it lost its data and must be
	// removed before it joins (ErrNodeExists).
	joinMember
	// joinNew: a leader does not list this node: it may join.
	joinNew
)

// joinRule decides from the Status answers of a round (nil for an
// address that did not answer): the first answer that names a leader
// decides whether self is still a member.
func joinRule(self string, answers []*api.StatusResponse) (joinVerdict, *api.NodeInfo) {
	for _, st := range answers {
		if st == nil || st.LeaderId == "" {
			continue
		}
		for _, m := range st.Nodes {
			if m.Id == self {
				return joinMember, m
			}
		}
		return joinNew, nil
	}
	return joinWait, nil
}
