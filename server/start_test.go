package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/startup"
	"github.com/seed-e8569b35/ordo/startup/startuptest"
)

// TestCheckClusterAsksOnlyVoters: a data dir is read without Raft, and
// refused when its cluster id differs from the one configured; the
// address entry of a node that is not in its Raft configuration is not
// asked, though a node of another cluster answers there under that very
// id (clusters name their nodes alike), as after a leader removed itself.
func TestCheckClusterAsksOnlyVoters(t *testing.T) {
	dir := t.TempDir()
	n := mustBootstrap(t, testConfig(t, "n1", dir))
	mustNext(t, n.GRPCAddr(), 1)
	own := n.fsm.ClusterID()
	stranger := startuptest.Serve(t, &startuptest.Admin{Info: &api.NodeInfo{Id: "n2", Role: "leader", ClusterId: "another-cluster", HasState: true}})
	if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: "n2", GRPCAddr: stranger}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	st, err := startup.StoredState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterID != own || st.Nodes["n2"] != stranger {
		t.Fatalf("stored state: cluster %q nodes %v, want cluster %q and n2 at %s", st.ClusterID, st.Nodes, own, stranger)
	}
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	logger := testConfig(t, "n1", dir).Logger
	if err := startup.CheckCluster(ctx, "n1", dir, "not-this-cluster", nil, logger); !errors.Is(err, startup.ErrOtherCluster) {
		t.Errorf("configured for another cluster: %v, want startup.ErrOtherCluster", err)
	}
	if err := startup.CheckCluster(ctx, "n1", dir, own, nil, logger); err != nil {
		t.Errorf("a node outside the configuration answers for another cluster: %v, want a start", err)
	}
}

// TestCheckClusterRefusesWhenTheVotersAnswerForAnother: a data dir whose
// other voters, at their recorded addresses, answer under their own ids
// for one other cluster is that cluster's leftover: refused, saying how
// to bring the node back. (Every other case of the rule: package
// startup's TestJudgeCluster.)
func TestCheckClusterRefusesWhenTheVotersAnswerForAnother(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	for _, f := range nodes {
		if f != leader {
			mustPointAt(t, leader, f, startuptest.Serve(t, &startuptest.Admin{Info: &api.NodeInfo{Id: f.ID(), Role: "follower", ClusterId: "another-cluster", HasState: true}}))
		}
	}
	dir := leader.cfg.DataDir
	leader.Close()
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	err := startup.CheckCluster(ctx, leader.ID(), dir, "", nil, leader.logger)
	if !errors.Is(err, startup.ErrOtherCluster) || !strings.Contains(err.Error(), "another-cluster") || !strings.Contains(err.Error(), "ordo remove --id "+leader.ID()) {
		t.Fatalf("every other voter answers for another cluster: %v, want startup.ErrOtherCluster naming it and the fix", err)
	}
}

// TestDecideStartRestartsOnState: a node whose data dir holds state
// restarts from it, whatever its list and --join say (the first row of the
// table at the top of package startup's entry.go; the others:
// startup.TestDecideStart).
func TestDecideStartRestartsOnState(t *testing.T) {
	dead := func(id string) Peer {
		addrs := freeaddr.Loopback(t, 2)
		return Peer{ID: id, RaftAddr: addrs[0], GRPCAddr: addrs[1]}
	}
	self := func() Peer { return dead("a") }
	deadJoin := freeaddr.Loopback(t, 1)
	dir := t.TempDir()
	n := mustBootstrap(t, testConfig(t, "a", dir))
	mustNext(t, n.GRPCAddr(), 1)
	n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The list and --join are ignored: the data dir decides.
	got, err := DecideStart(ctx, testConfig(t, "a", dir), Entry{Bootstrap: []Peer{self(), dead("b")}, Join: deadJoin})
	if err != nil || got != startup.StartRestart {
		t.Fatalf("DecideStart = %s, %v; want restart", got, err)
	}
}

// TestNodesOfANewClusterSeeEachOther: the nodes of a new cluster, all
// deciding at once, answer each other before Raft starts, and all
// bootstrap, also when one starts a little later than the others; a node
// that lost its data while the others are down is refused, and once they
// are back it is told it holds no place.
func TestNodesOfANewClusterSeeEachOther(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	peers := make([]Peer, len(ids))
	cfgs := make([]Config, len(ids))
	for i, id := range ids {
		cfgs[i] = testConfig(t, id, t.TempDir())
		addrs := freeaddr.Loopback(t, 2)
		cfgs[i].RaftAddr, cfgs[i].GRPCAddr = addrs[0], addrs[1]
		peers[i] = Peer{ID: id, RaftAddr: cfgs[i].RaftAddr, GRPCAddr: cfgs[i].GRPCAddr}
	}
	starts := make(chan error, len(ids))
	for i := range ids {
		go func() {
			// The last one starts later: it must still find the others
			// without state, not a cluster that holds it as a member.
			if i == len(ids)-1 {
				time.Sleep(startup.BootstrapSettle / 2)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := DecideStart(ctx, cfgs[i], Entry{Bootstrap: peers})
			if err == nil && got != startup.StartBootstrap {
				err = fmt.Errorf("%s: start %s, want bootstrap", ids[i], got)
			}
			starts <- err
		}()
	}
	for range ids {
		select {
		case err := <-starts:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("DecideStart did not return within 60 s")
		}
	}
	nodes := make([]*Node, len(ids))
	for i := range ids {
		nodes[i] = mustOpen(t, cfgs[i])
		if err := nodes[i].Bootstrap(peers); err != nil {
			t.Fatal(err)
		}
	}
	leader := mustLeader(t, nodes)
	mustNext(t, leader.GRPCAddr(), 10)

	// n3 loses its data while the whole cluster is down.
	lost := nodes[2]
	for _, n := range nodes {
		n.Close()
	}
	lostCfg := cfgs[2]
	lostCfg.DataDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := DecideStart(ctx, lostCfg, Entry{Bootstrap: peers})
	cancel()
	if !errors.Is(err, startup.ErrClusterUnknown) {
		t.Fatalf("%s with an empty data dir, its peers down: %v, want startup.ErrClusterUnknown", lost.ID(), err)
	}
	// The others come back; they hold state before any leader is elected.
	var back []*Node
	for i := range 2 {
		back = append(back, mustOpen(t, cfgs[i]))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	_, err = DecideStart(ctx, lostCfg, Entry{Bootstrap: peers})
	cancel()
	if !errors.Is(err, startup.ErrClusterExists) {
		t.Fatalf("%s with an empty data dir, its peers back: %v, want startup.ErrClusterExists", lost.ID(), err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	_, err = DecideStart(ctx, lostCfg, Entry{Bootstrap: peers, Join: []string{peers[0].GRPCAddr, peers[1].GRPCAddr}})
	cancel()
	if !errors.Is(err, startup.ErrNodeExists) {
		t.Fatalf("%s with an empty data dir and --join: %v, want startup.ErrNodeExists", lost.ID(), err)
	}
	mustLeader(t, back)
}

// TestLeaderlessMemberNamesItsCluster: a member restarted while its
// cluster has no leader (a minority up) has applied nothing yet, but
// names its cluster from its data dir, so a restore of that cluster's
// backup is refused while it runs.
func TestLeaderlessMemberNamesItsCluster(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	b, err := backup.NewFile(mustBackup(t, leader.GRPCAddr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodes[1].cfg
	for _, n := range nodes {
		n.Close()
	}
	// A new port, which the backup is told of: reopening on the old one
	// could find it taken in between.
	cfg.GRPCAddr = "127.0.0.1:0"
	alone := mustOpen(t, cfg)
	b.Members[cfg.ID] = alone.GRPCAddr()
	info, err := api.NewAdminClient(grpctest.Dial(t, alone.GRPCAddr())).NodeStatus(t.Context(), &api.NodeStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if applied := alone.fsm.ClusterID(); info.Role == "leader" || applied != "" {
		t.Fatalf("%s alone: role %s, FSM cluster id %q; want a node that leads nothing and applied nothing", cfg.ID, info.Role, applied)
	}
	if info.ClusterId != b.ClusterID || !info.HasState {
		t.Fatalf("%s alone reports cluster %q, has_state %t; want %q and true", cfg.ID, info.ClusterId, info.HasState, b.ClusterID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := backup.CheckBackupAlive(ctx, b, nil); !errors.Is(err, backup.ErrClusterAlive) {
		t.Fatalf("restore check with a leaderless old member up: %v, want backup.ErrClusterAlive", err)
	}
	alone.Close()
	if err := backup.CheckBackupAlive(ctx, b, nil); err != nil {
		t.Fatalf("restore check with every old member down: %v, want nil", err)
	}
}

// TestUnreadableEntryStopsTheNode: a committed entry this version cannot
// read (here a newer format's reservation) makes the node refuse to serve
// at once, and again after a restart, and its data dir cannot be
// recovered from: a state without what the entry did may lack a
// reservation, and a leader serving from it could hand out IDs below the
// cluster's mark.
func TestUnreadableEntryStopsTheNode(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	n := mustBootstrap(t, cfg)
	conn := grpctest.Dial(t, n.GRPCAddr())
	mustNextVia(t, conn, 1)
	newer := []byte(`{"v":2,"op":"reserve","up_to":1}`)
	if err := n.raft.Apply(newer, seqTestWait).Error(); err != nil {
		t.Fatalf("commit an entry of a newer format: %v", err)
	}
	mustRefuseUnreadable(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	if _, err := api.NewSequencerClient(conn).Next(ctx, &api.NextRequest{Count: 1}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Next from the refusing node: %v, want Unavailable", err)
	}
	recoverAs := cfg // recover needs the addresses the node served at
	recoverAs.RaftAddr, recoverAs.GRPCAddr = n.RaftAddr(), n.GRPCAddr()
	n.Close()
	// The recovered mark would be measured from the same state.
	if _, err := Recover(recoverAs, backup.DefaultRecoverJump, 0); !errors.Is(err, fsm.ErrUnreadable) {
		t.Fatalf("recover: %v, want fsm.ErrUnreadable", err)
	}
	// The refused recovery changed nothing: restarted, the node meets the
	// entry again.
	mustRefuseUnreadable(t, mustOpen(t, cfg))
}

// TestUnreadableEntryStopsEveryNode: followers meet the entry by
// replication and refuse as the leader does, so no node of this version
// serves from a state without it.
func TestUnreadableEntryStopsEveryNode(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	if err := leader.raft.Apply([]byte(`{"v":2,"op":"reserve","up_to":1}`), seqTestWait).Error(); err != nil {
		t.Fatalf("commit an entry of a newer format: %v", err)
	}
	for _, n := range nodes {
		mustRefuseUnreadable(t, n)
	}
}

// mustRefuseUnreadable waits until n refuses to serve for an entry it
// cannot read.
func mustRefuseUnreadable(t *testing.T, n *Node) {
	t.Helper()
	select {
	case err := <-n.Fatal():
		if !errors.Is(err, fsm.ErrUnreadable) || !errors.Is(err, fsm.ErrUnknownVersion) {
			t.Fatalf("the node refused with %v, want fsm.ErrUnreadable for an unknown version", err)
		}
	case <-time.After(seqTestWait):
		t.Fatal("the node did not refuse after an entry it cannot read")
	}
}

// TestAnotherOneNodeClustersDataDirIsRefused: a data dir of another,
// one-node cluster lists no voter but this node, so only the command
// line names the cluster the operator meant: when an address of it (a
// --bootstrap peer under its id, a --join address) answers for another
// cluster and none for the data dir's, the node refuses to start, naming
// both clusters (issue 22, hole 3). Before, with no other voter to ask,
// it started and led the other cluster at this member's addresses: with
// --join only, or with one of its two listed peers down.
func TestAnotherOneNodeClustersDataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	x := mustBootstrap(t, testConfig(t, "n3", dir))
	mustNext(t, x.GRPCAddr(), 1)
	xID := x.ClusterID()
	x.Close()
	peer := func(id string) Peer {
		info := &api.NodeInfo{Id: id, Role: "follower", ClusterId: "cluster-a", HasState: true}
		return Peer{ID: id, RaftAddr: freeaddr.Loopback(t, 1)[0], GRPCAddr: startuptest.Serve(t, &startuptest.Admin{Info: info})}
	}
	down := func(id string) Peer {
		return Peer{ID: id, RaftAddr: freeaddr.Loopback(t, 1)[0], GRPCAddr: freeaddr.Loopback(t, 1)[0]}
	}
	// A peer starting at the same time: no cluster id for a moment.
	late := func(id string) Peer {
		p := peer(id)
		p.GRPCAddr = grpctest.Serve(t, func(s *grpc.Server) {
			api.RegisterAdminServer(s, &lateAdmin{id: id, cluster: "cluster-a", from: time.Now().Add(500 * time.Millisecond)})
		})
		return p
	}
	self := down("n3")
	n1, n2 := peer("n1"), peer("n2")
	for name, e := range map[string]Entry{
		"the list's peers answer":    {Bootstrap: []Peer{n1, n2, self}},
		"one of the list's peers":    {Bootstrap: []Peer{down("n1"), n2, self}},
		"--join only":                {Join: []string{n1.GRPCAddr, n2.GRPCAddr}},
		"one --join address, and it": {Join: []string{self.GRPCAddr, n2.GRPCAddr}},
		"a peer says so a bit later": {Bootstrap: []Peer{late("n1"), down("n2"), self}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
		_, err := DecideStart(ctx, testConfig(t, "n3", dir), e)
		cancel()
		if !errors.Is(err, startup.ErrOtherCluster) || !strings.Contains(err.Error(), xID) || !strings.Contains(err.Error(), "cluster-a") {
			t.Errorf("%s: a one-node cluster's data dir, started with a command line that answers for cluster-a: %v, want startup.ErrOtherCluster naming %s and cluster-a", name, err, xID)
		}
	}
}

// lateAdmin answers NodeStatus as node id, without a cluster id until
// from (a node still starting), with cluster after.
type lateAdmin struct {
	api.UnimplementedAdminServer
	id, cluster string
	from        time.Time
}

func (a *lateAdmin) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	if time.Now().Before(a.from) {
		return &api.NodeInfo{Id: a.id, Role: "starting"}, nil
	}
	return &api.NodeInfo{Id: a.id, Role: "follower", ClusterId: a.cluster, HasState: true}, nil
}
