package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
)

// TestCheckClusterRefusesAnotherClustersData: a data dir is read without
// Raft, and refused when its cluster id differs from the one configured or
// from the one a recorded member reports.
func TestCheckClusterRefusesAnotherClustersData(t *testing.T) {
	other := mustOpen(t, testConfig(t, "b1", t.TempDir()))
	if err := other.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, other.GRPCAddr(), 1)

	dir := t.TempDir()
	n := mustOpen(t, testConfig(t, "n1", dir))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, n.GRPCAddr(), 1)
	own := n.fsm.ClusterID()
	// A member record that points at the other cluster's node, as a data
	// dir copied from another cluster would hold.
	if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: "n2", GRPCAddr: other.GRPCAddr()}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	st, err := StoredState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterID != own || st.Nodes["n2"] != other.GRPCAddr() {
		t.Fatalf("stored state: cluster %q nodes %v, want cluster %q and n2 at %s", st.ClusterID, st.Nodes, own, other.GRPCAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckCluster(ctx, "n1", dir, "not-this-cluster", nil); !errors.Is(err, ErrOtherCluster) {
		t.Errorf("configured for another cluster: %v, want ErrOtherCluster", err)
	}
	if err := CheckCluster(ctx, "n1", dir, own, nil); !errors.Is(err, ErrOtherCluster) {
		t.Errorf("a recorded member reports another cluster: %v, want ErrOtherCluster", err)
	}
	other.Close()
	if err := CheckCluster(ctx, "n1", dir, own, nil); err != nil {
		t.Errorf("own id configured, member unreachable: %v, want nil", err)
	}
}

// fakeAdmin answers a starting node's questions as a peer would: its
// NodeStatus is info (an error when nil), its Status lists members under
// leader.
type fakeAdmin struct {
	api.UnimplementedAdminServer
	info    *api.NodeInfo
	members []string
	leader  string
}

func (p *fakeAdmin) NodeStatus(context.Context, *api.NodeStatusRequest) (*api.NodeInfo, error) {
	if p.info == nil {
		return nil, status.Error(codes.Unavailable, "no status")
	}
	return p.info, nil
}

func (p *fakeAdmin) Status(context.Context, *api.StatusRequest) (*api.StatusResponse, error) {
	r := &api.StatusResponse{LeaderId: p.leader}
	for _, m := range p.members {
		r.Nodes = append(r.Nodes, &api.NodeInfo{Id: m})
	}
	return r, nil
}

// mustServeAdmin serves p on a free port and returns its address.
func mustServeAdmin(t *testing.T, p *fakeAdmin) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterAdminServer(s, p)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestDecideStart runs the table at the top of entry.go, one row at a
// time, against fake peers: a node with an empty data dir bootstraps only
// when every listed peer answers, under its own id, that it holds no Raft
// state, and joins only when a leader says it is not a member; whenever it
// cannot tell, it refuses. Real processes: cluster_test's TestLostDataDir
// and the lost-data tests.
func TestDecideStart(t *testing.T) {
	dead := func(id string) Peer {
		addrs := freeaddr.Loopback(t, 2)
		return Peer{ID: id, RaftAddr: addrs[0], GRPCAddr: addrs[1]}
	}
	answering := func(id string, p *fakeAdmin) Peer {
		return Peer{ID: id, RaftAddr: freeaddr.Loopback(t, 1)[0], GRPCAddr: mustServeAdmin(t, p)}
	}
	empty := func(id string) Peer { return answering(id, &fakeAdmin{info: &api.NodeInfo{Id: id, Role: "starting"}}) }
	holding := func(id string) Peer {
		return answering(id, &fakeAdmin{info: &api.NodeInfo{Id: id, Role: "starting", HasState: true, ClusterId: "c1"}})
	}
	// A node of an earlier version: no has_state, but a term.
	older := func(id string) Peer {
		return answering(id, &fakeAdmin{info: &api.NodeInfo{Id: id, Role: "follower", Term: 3}})
	}
	// Whatever listens at the address is another node, without state.
	imposter := func(id string) Peer { return answering(id, &fakeAdmin{info: &api.NodeInfo{Id: "x", Role: "starting"}}) }
	self := func() Peer { return dead("a") }
	leaderSays := func(members ...string) []string {
		return []string{mustServeAdmin(t, &fakeAdmin{members: members, leader: members[0]})}
	}
	noLeader := []string{mustServeAdmin(t, &fakeAdmin{members: []string{"b"}})}
	deadJoin := freeaddr.Loopback(t, 1)

	cases := []struct {
		name    string
		entry   Entry
		want    Start
		wantErr error // nil for none
		text    string
	}{
		{"listed, every peer without state", Entry{Bootstrap: []Peer{self(), empty("b"), empty("c")}}, StartBootstrap, nil, ""},
		{"listed alone", Entry{Bootstrap: []Peer{self()}}, StartBootstrap, nil, ""},
		{"listed, every peer down", Entry{Bootstrap: []Peer{self(), dead("b"), dead("c")}, Join: deadJoin}, 0, ErrClusterUnknown, "cannot tell"},
		{"listed, one peer down, one without state", Entry{Bootstrap: []Peer{self(), dead("b"), empty("c")}}, 0, ErrClusterUnknown, "b:"},
		{"listed, another node at a peer's address", Entry{Bootstrap: []Peer{self(), imposter("b"), empty("c")}}, 0, ErrClusterUnknown, `is "x"`},
		{"listed, a peer holds state, no --join", Entry{Bootstrap: []Peer{self(), holding("b"), dead("c")}}, 0, ErrClusterExists, "holds Raft state"},
		{"listed, an older peer with a term", Entry{Bootstrap: []Peer{self(), older("b"), empty("c")}}, 0, ErrClusterExists, "holds Raft state"},
		{"listed, a peer holds state, a leader says not a member", Entry{Bootstrap: []Peer{self(), holding("b")}, Join: leaderSays("b", "x")}, StartJoin, nil, ""},
		{"listed, a peer holds state, a leader says a member", Entry{Bootstrap: []Peer{self(), holding("b")}, Join: leaderSays("b", "a")}, 0, ErrNodeExists, "remove it first"},
		{"listed, a peer holds state, no leader", Entry{Bootstrap: []Peer{self(), holding("b")}, Join: noLeader}, 0, ErrClusterUnknown, "cannot ask"},
		{"forced, every peer down", Entry{Bootstrap: []Peer{self(), dead("b")}, ForceBootstrap: true}, StartBootstrap, nil, ""},
		{"forced, not listed", Entry{Bootstrap: []Peer{dead("b")}, ForceBootstrap: true}, 0, ErrBadConfig, "--force-bootstrap"},
		{"not listed, no --join", Entry{Bootstrap: []Peer{empty("b")}}, 0, ErrBadConfig, "does not name"},
		{"not listed, nobody answers --join", Entry{Bootstrap: []Peer{dead("b")}, Join: deadJoin}, 0, ErrClusterUnknown, "cannot ask"},
		{"only --join, a leader says not a member", Entry{Join: leaderSays("b", "x")}, StartJoin, nil, ""},
		{"only --join, a leader says a member", Entry{Join: leaderSays("b", "a")}, 0, ErrNodeExists, "remove it first"},
		{"neither", Entry{}, 0, ErrBadConfig, "give --bootstrap"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Short: a check that cannot ask everyone gives up when it ends.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			got, err := DecideStart(ctx, testConfig(t, "a", t.TempDir()), tc.entry)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.text)):
				t.Fatalf("error %v, want %v containing %q", err, tc.wantErr, tc.text)
			case tc.wantErr == nil && got != tc.want:
				t.Fatalf("start = %s, want %s", got, tc.want)
			}
		})
	}

	t.Run("the data dir holds state", func(t *testing.T) {
		dir := t.TempDir()
		n := mustOpen(t, testConfig(t, "a", dir))
		if err := n.BootstrapSingle(); err != nil {
			t.Fatal(err)
		}
		mustNext(t, n.GRPCAddr(), 1)
		n.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The list and --join are ignored: the data dir decides.
		got, err := DecideStart(ctx, testConfig(t, "a", dir), Entry{Bootstrap: []Peer{self(), dead("b")}, Join: deadJoin})
		if err != nil || got != StartRestart {
			t.Fatalf("DecideStart = %s, %v; want restart", got, err)
		}
	})
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
				time.Sleep(bootstrapSettle / 2)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := DecideStart(ctx, cfgs[i], Entry{Bootstrap: peers})
			if err == nil && got != StartBootstrap {
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
	if !errors.Is(err, ErrClusterUnknown) {
		t.Fatalf("%s with an empty data dir, its peers down: %v, want ErrClusterUnknown", lost.ID(), err)
	}
	// The others come back; they hold state before any leader is elected.
	var back []*Node
	for i := range 2 {
		back = append(back, mustOpen(t, cfgs[i]))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	_, err = DecideStart(ctx, lostCfg, Entry{Bootstrap: peers})
	cancel()
	if !errors.Is(err, ErrClusterExists) {
		t.Fatalf("%s with an empty data dir, its peers back: %v, want ErrClusterExists", lost.ID(), err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	_, err = DecideStart(ctx, lostCfg, Entry{Bootstrap: peers, Join: []string{peers[0].GRPCAddr, peers[1].GRPCAddr}})
	cancel()
	if !errors.Is(err, ErrNodeExists) {
		t.Fatalf("%s with an empty data dir and --join: %v, want ErrNodeExists", lost.ID(), err)
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
	b, err := NewBackupFile(mustBackup(t, leader.GRPCAddr()))
	if err != nil {
		t.Fatal(err)
	}
	cfg := nodes[1].cfg
	for _, n := range nodes {
		n.Close()
	}
	cfg.GRPCAddr = b.Members[cfg.ID] // where the backup says it is
	alone := mustOpen(t, cfg)
	info := alone.localStatus()
	if applied := alone.fsm.ClusterID(); info.Role == "leader" || applied != "" {
		t.Fatalf("%s alone: role %s, FSM cluster id %q; want a node that leads nothing and applied nothing", cfg.ID, info.Role, applied)
	}
	if info.ClusterId != b.ClusterID || !info.HasState {
		t.Fatalf("%s alone reports cluster %q, has_state %t; want %q and true", cfg.ID, info.ClusterId, info.HasState, b.ClusterID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckBackupAlive(ctx, b, nil); !errors.Is(err, ErrClusterAlive) {
		t.Fatalf("restore check with a leaderless old member up: %v, want ErrClusterAlive", err)
	}
	alone.Close()
	if err := CheckBackupAlive(ctx, b, nil); err != nil {
		t.Fatalf("restore check with every old member down: %v, want nil", err)
	}
}
