package startup

// How a node enters its cluster: the one home of the rule "a node that
// lost its data must not come back as the member it was".
//
// Why the rule. A voter that lost its data dir and comes back under its
// old id has an empty log, but the others count its vote as that of the
// member it was. With it, a candidate that missed committed reservations
// can win an election (its log is as new as an empty one), and hand out
// again IDs an earlier leader handed out. Raft itself cannot tell: a
// member is a name and an address. So the decision is taken here, before
// Raft starts, and only from state that is on disk before it is needed:
// this node's data dir, and what each peer reads from its own data dir
// (NodeInfo.has_state and cluster_id), never from replicated fields a
// restart empties until a leader commits. When the answer cannot be
// known, the node refuses to start and says what the operator can do.
//
// The cases, in the order DecideStart checks them (entryPath chooses the
// question from the command line, bootstrapRule and joinRule decide from
// the answers; model_test.go runs them against every small cluster):
//
//	data dir     --bootstrap        what the others say                      --join  start
//	-----------  -----------------  ---------------------------------------  ------  ----------------------------------------
//	holds state  any                (--cluster-id names another)               any   refuse (ErrOtherCluster)
//	holds state  any                a majority of the other voters answer      any   refuse (ErrOtherCluster)
//	                                for one other cluster, none for this one
//	holds state  any                no other voter; a peer or --join address   any   refuse (ErrOtherCluster)
//	                                answers for another cluster, none for
//	                                this one
//	holds state  any                otherwise                                  any   restart from the data dir
//	empty        --force-bootstrap  one holds state (asked once, no wait)      any   refuse (ErrClusterExists)
//	empty        --force-bootstrap  otherwise                                  any   bootstrap (one-shot)
//	empty        names only it                                                 none  refuse (usage): --force-bootstrap once
//	empty        names only it      (asks the leader, as below)               given as for a node the list does not name
//	empty        names it and more  every other peer and --join address:      any   bootstrap, after BootstrapSettle
//	                                answered, no state
//	empty        names it and more  a peer or --join address holds state       none  refuse (ErrClusterExists)
//	empty        names it and more  a peer or --join address holds state      given as for a node the list does not name
//	empty        names it and more  one cannot be asked, none holds state      any   keep asking; at the deadline refuse
//	                                                                                 (ErrClusterUnknown)
//	empty        does not name      a leader lists this node                  given refuse (ErrNodeExists): remove it first
//	empty        does not name      a leader lists its members, not it        given join
//	empty        does not name      no leader can be asked                    given keep asking; at the deadline refuse
//	                                                                                 (ErrClusterUnknown)
//	empty        does not name                                                 none  refuse (usage)
//
// For a data dir that holds state, "the others" are the other voters of
// its latest Raft configuration, asked at their recorded gRPC addresses,
// and the addresses of the command line (the other --bootstrap peers, the
// --join addresses), which name the cluster the operator meant where
// another cluster's data dir lists no voter but this node (checkCluster).
// A voter's answer counts only under its own id; any answer for this data
// dir's cluster shows it alive, making the rest stale addresses, which
// are logged (judgeCluster). Voters that do not answer prove nothing: a
// member restarting while the others are down starts.
//
// A listed peer counts as "no state" only when the node at its address
// answers under its id and reports no Raft state; a --join address, which
// may be a service in front of several nodes, counts under any id but
// this node's own (a --join list of every member names this node too).
// "Cannot be asked" covers a peer that is down, one that answers under
// another id, and a node of an older version whose answer does not say.
// A node that lost its data while every other member is down therefore
// waits, and is refused once they are back (they hold state). A node
// whose every peer and --join address lost its data is indistinguishable
// from a new cluster: that is a new cluster, and only a restore from a
// backup keeps its IDs above the old ones.
//
// A list that names only this node never bootstraps from a standing
// command line (issue 22): a founder that bootstrapped alone and was then
// joined by others could otherwise lose its data dir and create a second
// cluster beside the first, with a high-water mark of 0. Creating such a
// cluster is the one-shot --force-bootstrap; afterwards the same list
// with --join takes the join path, which a leader answers.
//
// Nodes answer these questions before Raft starts too (startResponder),
// so the nodes of a new cluster, all checking at once, can see each
// other. A node that found every peer without state keeps answering "no
// state" for BootstrapSettle before it bootstraps, so that each peer
// checking at the same time sees it that way too, and they all bootstrap
// the same configuration, instead of the last to look finding the
// others' new state and being refused as a member that lost its data.
//
// The leader enforces the same rule on its side (CheckJoinRequest): a
// join under a member's id is refused until the member is removed.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpcerr"
	"github.com/seed-e8569b35/ordo/secure"
)

// Peer is a member of a bootstrap list as a starting node asks it: its id
// and the gRPC address it answers NodeStatus on.
type Peer struct {
	ID       string
	GRPCAddr string
}

// Self is the starting node as DecideStart needs it: a validated
// configuration, with defaults applied, that server derives from its
// Config.
type Self struct {
	// ID is the node's id; DataDir holds its Raft state, if any.
	ID, DataDir string
	// GRPCAddr is where it answers NodeStatus while it decides (port 0:
	// nowhere).
	GRPCAddr string
	// TLS, when set, secures both its questions and its answers.
	TLS *secure.TLS
	// Logger must not be nil.
	Logger hclog.Logger
	// ServerOptions are the gRPC server options (limits, keepalives) its
	// answers are served with, the same as the serving node's.
	ServerOptions []grpc.ServerOption
}

// Start says how a node enters its cluster; DecideStart chooses it.
type Start int

const (
	// StartRestart resumes from the Raft state in the data dir.
	StartRestart Start = iota
	// StartBootstrap creates the cluster of the bootstrap list
	// (server's Node.Bootstrap).
	StartBootstrap
	// StartJoin asks the cluster to add this node (server's Node.Join).
	StartJoin
)

// String names s as logs and errors do.
func (s Start) String() string {
	switch s {
	case StartRestart:
		return "restart"
	case StartBootstrap:
		return "bootstrap"
	default:
		return "join"
	}
}

// Entry is what a node is told about its cluster on its command line
// (server.Entry, with each peer as it is asked).
type Entry struct {
	// Bootstrap is the initial members (--bootstrap); may be empty.
	Bootstrap []Peer
	// Join is where to ask to join (--join): members' gRPC addresses or a
	// service in front of them; may be empty.
	Join []string
	// ClusterID, when set, is the only cluster whose data dir this node
	// starts on (--cluster-id).
	ClusterID string
	// ForceBootstrap bootstraps the list without asking its peers
	// (--force-bootstrap): for an operator who knows the cluster of the
	// list never ran, or is gone for good with every copy of its data.
	ForceBootstrap bool
}

// BootstrapSettle is how long a node that found every listed peer without
// state goes on answering "no state" before it bootstraps: several of
// startPoll, so that a peer checking at the same time asks it again
// meanwhile.
const BootstrapSettle = 2 * time.Second

// startPoll spaces out the rounds of questions a starting node asks.
const startPoll = 200 * time.Millisecond

// DecideStart decides, before Raft starts, how the node self enters its
// cluster (see the table at the top of this file), asking its peers until
// ctx ends when it must. While it runs, the node answers NodeStatus on its
// gRPC address with what its data dir holds, so that peers deciding at
// the same time can count it. The caller (server.DecideStart) then opens the node and, as
// returned, bootstraps, joins, or neither.
func DecideStart(ctx context.Context, cfg Self, e Entry) (Start, error) {
	has, err := HasState(cfg.DataDir)
	if err != nil {
		return 0, err
	}
	var stored fsm.State
	if has {
		if stored, err = StoredState(cfg.DataDir); err != nil {
			return 0, err
		}
	}
	stop, err := startResponder(cfg, has, stored.ClusterID)
	if err != nil {
		return 0, err
	}
	defer stop()
	if has {
		return StartRestart, checkCluster(ctx, cfg.ID, cfg.DataDir, stored, e, cfg.TLS, cfg.Logger)
	}
	p, err := entryPath(cfg.ID, e)
	if err != nil {
		return 0, err
	}
	switch p {
	case pathForce:
		if err := checkNoneHolds(ctx, cfg.ID, e, cfg.TLS); err != nil {
			return 0, err
		}
		cfg.Logger.Warn("bootstrapping without waiting for every peer to answer (--force-bootstrap): if the cluster exists, both clusters hand out the same IDs")
		return StartBootstrap, nil
	case pathBootstrap:
		err := checkBootstrap(ctx, cfg.ID, e, cfg.TLS, cfg.Logger)
		if err == nil {
			return StartBootstrap, nil
		}
		if !errors.Is(err, ErrClusterExists) || len(e.Join) == 0 {
			return 0, err
		}
		cfg.Logger.Info("the cluster of the bootstrap list exists: asking it whether this node is a member", "reason", err)
	}
	hint := ""
	if len(e.Bootstrap) == 1 && e.Bootstrap[0].ID == cfg.ID {
		hint = "; if this node lost its data dir, start the other members and it is told to rejoin; " +
			"only if no node ever held this cluster's data, create it by starting this node once with --force-bootstrap"
	}
	return StartJoin, checkJoin(ctx, cfg.ID, joinAddrs(cfg.ID, e), cfg.TLS, cfg.Logger, hint)
}

// PeerHasState reports whether a NodeStatus answer says the node holds
// Raft state. Besides has_state, anything only state gives counts: an
// older version's answer lacks has_state.
func PeerHasState(info *api.NodeInfo) bool {
	return info.HasState || info.Term > 0 || info.CommitIndex > 0 || info.AppliedIndex > 0 ||
		info.HighWater > 0 || info.ClusterId != ""
}

// checkBootstrap asks every other address node self was given, the other
// peers of its bootstrap list and its --join addresses, until each has
// answered or ctx ends, whether it holds Raft state, and decides by
// bootstrapRule: nil when none does (then it waits BootstrapSettle),
// ErrClusterExists when one does, ErrClusterUnknown when some could not
// be asked by the end.
func checkBootstrap(ctx context.Context, self string, e Entry, t *secure.TLS, logger hclog.Logger) error {
	ask := NewAsker(t)
	defer ask.Close()
	pending := map[string]source{}
	for _, s := range bootstrapSources(self, e) {
		pending[s.key] = s
	}
	problems := map[string]string{} // why each pending source could not be counted, last round
	waiting := waitLog{logger: logger}
	var sources []heard
	for {
		addrs := map[string]string{}
		for k, s := range pending {
			addrs[k] = s.addr
		}
		holder := ""
		for k, a := range ask.NodeStatuses(ctx, addrs) {
			h := hear(self, pending[k].want, a)
			switch h {
			case heardNothing:
				problems[k] = unheard(a, addrs[k])
				continue
			case heardState:
				holder = fmt.Sprintf("%s at %s (cluster %q, term %d)", a.Info.Id, addrs[k], a.Info.ClusterId, a.Info.Term)
			}
			sources = append(sources, h)
			delete(pending, k)
			delete(problems, k)
		}
		round := slices.Clone(sources)
		for range pending {
			round = append(round, heardNothing)
		}
		switch bootstrapRule(round) {
		case verdictExists:
			return fmt.Errorf("%w: node %s holds Raft state, but this node's data dir is empty; "+
				"if this node lost its data, it must not come back as the member it was: remove it (ordo remove --id %s) and start it with --join",
				ErrClusterExists, holder, self)
		case verdictBootstrap:
			logger.Info("no node asked holds Raft state: bootstrapping", "asked", len(sources), "settle", BootstrapSettle)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %w", ErrClusterUnknown, ctx.Err())
			case <-time.After(BootstrapSettle):
			}
			return nil
		}
		var why []string
		for k, p := range problems {
			why = append(why, k+": "+p)
		}
		slices.Sort(why)
		waiting.log("waiting for every peer and --join address to answer before bootstrapping", "unanswered", strings.Join(why, "; "))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: cannot tell whether the cluster of the bootstrap list exists, and this node's data dir is empty (%s). "+
				"If the cluster exists and this node lost its data, it must not bootstrap: start the other nodes, and it will be told to rejoin. "+
				"If the cluster is new, start every listed node. Only if no listed node ever held this cluster's data, give --force-bootstrap",
				ErrClusterUnknown, strings.Join(why, "; "))
		case <-time.After(startPoll):
		}
	}
}

// waitLogEvery spaces out the lines a starting node logs while it waits
// for answers: every wait longer than a second says what it waits for.
const waitLogEvery = 5 * time.Second

// waitLog logs what a starting node waits for, first after a second,
// then every waitLogEvery.
type waitLog struct {
	logger hclog.Logger
	start  time.Time
	next   time.Time
}

func (w *waitLog) log(msg string, args ...any) {
	now := time.Now()
	if w.start.IsZero() {
		w.start, w.next = now, now.Add(time.Second)
	}
	if now.Before(w.next) {
		return
	}
	w.next = now.Add(waitLogEvery)
	w.logger.Info(msg, append(args, "waited", now.Sub(w.start).Round(time.Second))...)
}

// checkNoneHolds asks every address node self was given once, as
// --force-bootstrap does: it waits for no one, but a node that answers
// that it holds state proves the cluster exists, and then bootstrapping
// would make a second one (ErrClusterExists).
func checkNoneHolds(ctx context.Context, self string, e Entry, t *secure.TLS) error {
	ask := NewAsker(t)
	defer ask.Close()
	addrs := map[string]string{}
	want := map[string]string{}
	for _, s := range bootstrapSources(self, e) {
		addrs[s.key], want[s.key] = s.addr, s.want
	}
	for k, a := range ask.NodeStatuses(ctx, addrs) {
		if hear(self, want[k], a) == heardState {
			return fmt.Errorf("%w: --force-bootstrap, but node %s at %s holds Raft state (cluster %q): the cluster exists; "+
				"if this node lost its data, remove it (ordo remove --id %s) and start it with --join instead",
				ErrClusterExists, a.Info.Id, addrs[k], a.Info.ClusterId, self)
		}
	}
	return nil
}

// unheard says why answer a from addr proves nothing.
func unheard(a NodeAnswer, addr string) string {
	if a.Err != nil {
		return grpcerr.Describe(a.Err)
	}
	return fmt.Sprintf("the node at %s is %q", addr, a.Info.Id)
}

// checkJoin asks the cluster, through addrs, whether self is already a
// member (joinRule): a member with an empty data dir lost its data and
// must be removed first. It fails closed: until one of addrs answers with
// the members (which takes a leader), it keeps asking, and when ctx ends
// first it refuses, because a node that cannot tell must not start Raft.
// hint is added to that refusal.
func checkJoin(ctx context.Context, self string, addrs []string, t *secure.TLS, logger hclog.Logger, hint string) error {
	ask := NewAsker(t)
	defer ask.Close()
	var last string
	begun := time.Now()
	waiting := waitLog{logger: logger}
	for {
		answers := make([]*api.StatusResponse, len(addrs))
		for i, addr := range addrs {
			st, err := ask.status(ctx, addr)
			if err == nil && st.LeaderId == "" {
				err = errors.New("no leader known")
			}
			if err != nil {
				last = addr + ": " + grpcerr.Describe(err)
				continue
			}
			answers[i] = st
			break // the first leader's answer decides
		}
		switch v, m := joinRule(self, answers); v {
		case joinMember:
			return fmt.Errorf("%w: %q is already a member at %s, but its data dir is empty; "+
				"if it lost its data, remove it first (ordo remove --id %s), then join again", ErrNodeExists, self, m.RaftAddr, self)
		case joinNew:
			return nil
		}
		waiting.log("waiting for a leader to say whether this node is already a member", "addrs", strings.Join(addrs, ","), "last_error", last)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s, for %s: no leader said whether %q is already a member, so it must not start with an empty data dir; check that --join names running members (--join-timeout waits longer)%s",
				ErrClusterUnknown, last, time.Since(begun).Round(time.Second), self, hint)
		case <-time.After(startPoll):
		}
	}
}

// CheckJoinRequest is the leader's side of the rule: given the cluster's
// configuration, and the members' recorded gRPC addresses (grpcAddrs, by
// id), it refuses a join under a member's id, Raft address or gRPC
// address (either of req's addresses against either of a member's). A
// member restarts from its data dir without joining, so a join under a
// member's name is a node that lost its data: it must be removed first;
// and two members at one address would each be asked as the other.
func CheckJoinRequest(servers []raft.Server, grpcAddrs map[string]string, req *api.JoinRequest) error {
	for _, srv := range servers {
		raftAddr, grpcAddr := string(srv.Address), grpcAddrs[string(srv.ID)]
		sameID, sameAddr := string(srv.ID) == req.Id, raftAddr == req.RaftAddr
		switch {
		case sameID && sameAddr:
			return fmt.Errorf("%w: %q is already a member at %s; if it lost its data, remove it first (ordo remove --id %s), then join again",
				ErrNodeExists, req.Id, srv.Address, req.Id)
		case sameID:
			return fmt.Errorf("%w: id %q is in use by the member at %s; choose another id, or remove that member first (ordo remove --id %s)",
				ErrNodeExists, req.Id, srv.Address, req.Id)
		case sameAddr:
			return fmt.Errorf("%w: raft address %s is in use by member %q", ErrNodeExists, req.RaftAddr, srv.ID)
		case grpcAddr != "" && req.GrpcAddr == grpcAddr:
			return fmt.Errorf("%w: gRPC address %s is in use by member %q", ErrNodeExists, req.GrpcAddr, srv.ID)
		case grpcAddr != "" && req.RaftAddr == grpcAddr:
			return fmt.Errorf("%w: raft address %s is the gRPC address of member %q", ErrNodeExists, req.RaftAddr, srv.ID)
		case req.GrpcAddr == raftAddr:
			return fmt.Errorf("%w: gRPC address %s is the raft address of member %q", ErrNodeExists, req.GrpcAddr, srv.ID)
		}
	}
	return nil
}

// checkCluster refuses to start on a data dir that belongs to another
// cluster: one whose recorded cluster id (in st, read from dataDir)
// differs from e's --cluster-id (when given), or one that judgeCluster
// finds another cluster's from what the other voters of its latest Raft
// configuration (asked at their recorded gRPC addresses) and the
// addresses of e's command line (the other peers of --bootstrap, and
// --join) answer. A node started on another cluster's data could
// otherwise serve that cluster's IDs at this cluster's address. Only the
// voters of the configuration are asked of what the data dir records: the
// address map also holds entries of nodes removed long ago, where
// anything may listen now. What judgeCluster found stale is logged.
func checkCluster(ctx context.Context, self, dataDir string, st fsm.State, e Entry, t *secure.TLS, logger hclog.Logger) error {
	if st.ClusterID == "" {
		return nil // the first leader has not recorded one yet
	}
	if e.ClusterID != "" && st.ClusterID != e.ClusterID {
		return fmt.Errorf("%w: the data dir %s holds cluster %s, this node is configured for cluster %s",
			ErrOtherCluster, dataDir, st.ClusterID, e.ClusterID)
	}
	conf, err := StoredConfiguration(dataDir)
	if err != nil {
		return err
	}
	// Keys: "voter <id>", "peer <id>" (--bootstrap), "join <addr>".
	addrs, want := map[string]string{}, map[string]string{}
	for _, srv := range conf.Servers {
		if id := string(srv.ID); srv.Suffrage == raft.Voter && id != self {
			addrs["voter "+id], want["voter "+id] = st.Nodes[id], id // "" when none is recorded: not asked
		}
	}
	for _, p := range e.Bootstrap {
		if p.ID != self {
			addrs["peer "+p.ID], want["peer "+p.ID] = p.GRPCAddr, p.ID
		}
	}
	for _, a := range e.Join {
		addrs["join "+a] = a
	}
	ask := NewAsker(t)
	defer ask.Close()
	waiting := waitLog{logger: logger}
	var voters, named []voterAnswer
	for settle := time.Now().Add(BootstrapSettle); ; {
		got := ask.NodeStatuses(ctx, addrs)
		voters, named = voters[:0], named[:0]
		for _, k := range slices.Sorted(maps.Keys(addrs)) {
			a := voterAnswer{ID: want[k], Addr: addrs[k], Info: got[k].Info}
			if strings.HasPrefix(k, "voter ") {
				voters = append(voters, a)
			} else {
				named = append(named, a)
			}
		}
		// A data dir with no other voter would lead alone at once: while
		// no address of the command line has said which cluster it is of
		// (nodes starting at the same time, in a whole-cluster restart),
		// ask again for a moment before starting.
		if len(voters) > 0 || len(named) == 0 || anySays(self, named) || time.Now().After(settle) || ctx.Err() != nil {
			break
		}
		waiting.log("this data dir's cluster has no other voter: waiting a moment for the command line's addresses to say which cluster they are of", "addrs", len(named))
		select {
		case <-ctx.Done():
		case <-time.After(startPoll):
		}
	}
	stale, err := judgeCluster(self, dataDir, st.ClusterID, voters, named)
	for _, s := range stale {
		logger.Warn(s.Why, "member", s.Member, "addr", s.Addr, "answered_as", s.AnsweredAs, "its_cluster", s.Cluster, "this_cluster", st.ClusterID)
	}
	return err
}

// anySays reports whether an answer, not self's, names a cluster.
func anySays(self string, answers []voterAnswer) bool {
	for _, a := range answers {
		if a.Info != nil && a.Info.ClusterId != "" && a.Info.Id != self {
			return true
		}
	}
	return false
}

// voterAnswer is what one address answered when asked who it is: a
// voter's recorded gRPC address, or an address of the command line.
type voterAnswer struct {
	// ID is who should answer ("" for a --join address: anyone but the
	// node itself), Addr where ("" when no address is recorded).
	ID, Addr string
	// Info is the answer; nil when nothing answered.
	Info *api.NodeInfo
}

// staleAnswer is an answer judgeCluster does not take as the voter's
// word: why, and who answered for whom.
type staleAnswer struct {
	// Why is the log message.
	Why string
	// Member is the voter asked, at Addr; AnsweredAs is the id that
	// answered there, of cluster Cluster.
	Member, Addr, AnsweredAs, Cluster string
}

// judgeCluster is the rule behind checkCluster, apart from the asking:
// may node self start on dataDir, which holds cluster own, given what the
// other voters of its configuration answered (voters, one per voter) and
// what the addresses of its command line answered (named: the other
// --bootstrap peers, the --join addresses)?
//
// Any answer that names own, under whatever id but self's, shows this
// cluster alive: the node starts, and the answers for other clusters are
// logged as stale addresses. Otherwise it refuses (ErrOtherCluster) when
//
//   - a majority of the other voters answered, each under its own id,
//     for one and the same other cluster: a data dir copied from, or left
//     over by, another cluster whose members now answer where this one's
//     are recorded; or
//   - the configuration has no other voter, and an address of the command
//     line answers for another cluster (a --bootstrap peer under its own
//     id, a --join address under any id but self's): a one-node cluster's
//     data dir, which would lead alone and serve its IDs at once, on a
//     node the operator started as a member of that other cluster. A
//     one-node cluster whose command line still names another cluster's
//     nodes looks the same, and is refused too: cannot tell means refuse.
//
// Everything else starts. An answer under another id than the voter's is
// a stale address (the voter moved, and something else listens there);
// answers for another cluster from fewer than a majority, or for several,
// prove nothing; voters that do not answer, or answer without a cluster
// id (no state yet, an older version), prove nothing either: a node
// restarting while the others are down must start. A data dir of another
// cluster with other voters that do not answer thus starts, and cannot
// lead without them: the Raft transport's handshake keeps it from this
// cluster's nodes.
func judgeCluster(self, dataDir, own string, voters, named []voterAnswer) ([]staleAnswer, error) {
	var stale, foreign []staleAnswer
	ownAlive := false
	var byCluster map[string][]staleAnswer // made when a voter answers for another cluster
	var accusers []staleAnswer             // command-line addresses for another cluster
	for i, a := range slices.Concat(voters, named) {
		if a.Info == nil || a.Info.ClusterId == "" || a.Info.Id == self {
			continue
		}
		s := staleAnswer{Member: a.ID, Addr: a.Addr, AnsweredAs: a.Info.Id, Cluster: a.Info.ClusterId}
		ownAlive = ownAlive || s.Cluster == own
		switch {
		case a.ID != "" && s.AnsweredAs != a.ID:
			s.Why = "stale address: another node answers at this member's recorded gRPC address; ignoring it"
			stale = append(stale, s)
		case s.Cluster != own:
			foreign = append(foreign, s)
			if i < len(voters) {
				if byCluster == nil {
					byCluster = map[string][]staleAnswer{}
				}
				byCluster[s.Cluster] = append(byCluster[s.Cluster], s)
			} else {
				accusers = append(accusers, s)
			}
		}
	}
	if !ownAlive {
		if err := otherClusterVoters(self, dataDir, own, len(voters), byCluster); err != nil {
			return stale, err
		}
		if len(voters) == 0 && len(accusers) > 0 {
			return stale, otherClusterCommandLine(self, dataDir, own, accusers)
		}
	}
	for _, s := range foreign {
		if ownAlive {
			s.Why = "stale address: a node of another cluster answers at this member's recorded gRPC address, while members answer for this node's cluster; starting"
		} else {
			s.Why = "a member's recorded gRPC address answers for another cluster, but not a majority of the voters do: starting"
		}
		stale = append(stale, s)
	}
	return stale, nil
}

// otherClusterVoters is judgeCluster's refusal when a majority of the n
// other voters answered for one other cluster (byCluster: their answers
// by cluster), and nil otherwise.
func otherClusterVoters(self, dataDir, own string, n int, byCluster map[string][]staleAnswer) error {
	for _, cluster := range slices.Sorted(maps.Keys(byCluster)) {
		if said := byCluster[cluster]; len(said) >= n/2+1 {
			return fmt.Errorf("%w: the data dir %s holds cluster %s, but %d of the %d other voters of its Raft configuration answer for cluster %s (%s), and none for cluster %s: "+
				"this data dir is another cluster's. Move it aside, remove this node from the cluster (ordo remove --id %s), and start it with an empty data dir and --join",
				ErrOtherCluster, dataDir, own, len(said), n, cluster, whoAt(said), own, self)
		}
	}
	return nil
}

// otherClusterCommandLine is judgeCluster's refusal of a one-node
// cluster's data dir whose command line names another cluster's nodes.
func otherClusterCommandLine(self, dataDir, own string, accusers []staleAnswer) error {
	return fmt.Errorf("%w: the data dir %s holds cluster %s, in which this node is the only voter, but the addresses of its command line answer for another cluster (%s). "+
		"If this node is a member of that cluster and this data dir is not its own, move the data dir aside, remove the node (ordo remove --id %s), and start it with an empty data dir and --join. "+
		"If this data dir is right, it is a one-node cluster: start it without the other cluster's addresses in --bootstrap and --join",
		ErrOtherCluster, dataDir, own, whoAt(accusers), self)
}

// whoAt lists who answered where for which cluster.
func whoAt(said []staleAnswer) string {
	var who []string
	for _, s := range said {
		w := s.AnsweredAs + " at " + s.Addr
		if s.Member != "" && s.Member != s.AnsweredAs {
			w = s.Member + " at " + s.Addr
		}
		who = append(who, w+" for "+s.Cluster)
	}
	return strings.Join(who, ", ")
}

// CheckCluster is checkCluster on what dataDir holds, for a node told
// only --cluster-id expected: see DecideStart.
func CheckCluster(ctx context.Context, self, dataDir, expected string, t *secure.TLS, logger hclog.Logger) error {
	st, err := StoredState(dataDir)
	if err != nil {
		return err
	}
	return checkCluster(ctx, self, dataDir, st, Entry{ClusterID: expected}, t, logger)
}

// NodeStatusTimeout bounds asking one node for its status (server's
// nodeStatusTimeout): long enough for a TLS handshake on a loaded host,
// short enough that a round of questions keeps pace with startPoll.
const NodeStatusTimeout = time.Second

// DialCredentials is how a node dials its peers: with its node
// certificate when TLS is on, in plain text otherwise.
func DialCredentials(t *secure.TLS) credentials.TransportCredentials {
	if t == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(t.ClientConfig())
}

// Asker asks other nodes for their status, keeping one connection to each
// address while a decision is being taken. Unlike server's peer
// connections, its calls name no cluster, on purpose: they ask a node who
// it is, and the callers compare the cluster id in its answer
// (CheckCluster, backup.CheckBackupAlive, server's checkAnswersAs). A node
// of another cluster must answer them, so that it is seen to be one, not
// refuse them as if it could not be asked.
type Asker struct {
	creds credentials.TransportCredentials
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewAsker returns an Asker that dials with t (nil: plain text). Close it
// when the decision is taken.
func NewAsker(t *secure.TLS) *Asker {
	return &Asker{creds: DialCredentials(t), conns: map[string]*grpc.ClientConn{}}
}

func (a *Asker) admin(addr string) (api.AdminClient, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.conns[addr]
	if !ok {
		var err error
		// Redial at the pace of the questions, not after gRPC's growing
		// backoff: a peer that was not up yet must be seen as soon as it
		// is, while it still answers before its own start (see
		// BootstrapSettle).
		retry := grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: startPoll / 2, Multiplier: 1.6, Jitter: 0.2, MaxDelay: startPoll},
			MinConnectTimeout: NodeStatusTimeout,
		}
		if c, err = grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(a.creds), grpc.WithConnectParams(retry)); err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		a.conns[addr] = c
	}
	return api.NewAdminClient(c), nil
}

// NodeStatus asks the node at addr who it is and what its data dir holds,
// within NodeStatusTimeout.
func (a *Asker) NodeStatus(ctx context.Context, addr string) (*api.NodeInfo, error) {
	c, err := a.admin(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, NodeStatusTimeout)
	defer cancel()
	return c.NodeStatus(ctx, &api.NodeStatusRequest{})
}

// NodeAnswer is one node's NodeStatus answer, or why there is none.
type NodeAnswer struct {
	// Info is the answer; nil when Err is set.
	Info *api.NodeInfo
	// Err is why the node could not be asked.
	Err error
}

// NodeStatuses asks every node of addrs (gRPC addresses by node id; empty
// ones are skipped) for its status at once.
func (a *Asker) NodeStatuses(ctx context.Context, addrs map[string]string) map[string]NodeAnswer {
	answers := make(map[string]NodeAnswer, len(addrs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, addr := range addrs {
		if addr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := a.NodeStatus(ctx, addr)
			mu.Lock()
			answers[id] = NodeAnswer{info, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return answers
}

func (a *Asker) status(ctx context.Context, addr string) (*api.StatusResponse, error) {
	c, err := a.admin(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*NodeStatusTimeout)
	defer cancel()
	return c.Status(ctx, &api.StatusRequest{})
}

// Close closes every connection the Asker opened.
func (a *Asker) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		c.Close()
	}
	a.conns = nil
}

// startResponder answers NodeStatus on cfg.GRPCAddr while a node decides
// how to start, with what its data dir holds, and every other call with
// Unavailable ("starting"), so that clients move on to another node. It
// returns the function that stops it. A node on port 0 has no address
// peers could know, and answers nothing.
func startResponder(cfg Self, hasState bool, clusterID string) (stop func(), err error) {
	if strings.HasSuffix(cfg.GRPCAddr, ":0") {
		return func() {}, nil
	}
	lis, err := net.Listen("tcp", cfg.GRPCAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for gRPC: %w", err)
	}
	info := &api.NodeInfo{Id: cfg.ID, Role: "starting", Voter: true, HasState: hasState, ClusterId: clusterID, LastContactMs: -1}
	nodeStatus := "/" + api.Admin_ServiceDesc.ServiceName + "/NodeStatus"
	answer := func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		if method != nodeStatus {
			return status.Errorf(codes.Unavailable, "node %s is starting: it checks its cluster before it serves", cfg.ID)
		}
		if err := stream.RecvMsg(&api.NodeStatusRequest{}); err != nil {
			return err
		}
		return stream.SendMsg(info)
	}
	opts := append(slices.Clone(cfg.ServerOptions), grpc.UnknownServiceHandler(answer))
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS.ServerConfig(cfg.Logger.Named("grpc"), false))))
	}
	srv := grpc.NewServer(opts...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	return func() {
		srv.Stop() // closes the listener, so the serving node can bind the address
		<-done
	}, nil
}
