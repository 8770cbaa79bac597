package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/leadership/leadershiptest"
	"github.com/seed-e8569b35/ordo/startup"
	"github.com/seed-e8569b35/ordo/startup/startuptest"
)

// mustSingle opens and bootstraps a one-node cluster that has handed out an
// ID, so it has a cluster id.
func mustSingle(t *testing.T, id string) *Node {
	t.Helper()
	n := mustBootstrap(t, testConfig(t, id, t.TempDir()))
	mustNext(t, n.GRPCAddr(), 1)
	if n.ClusterID() == "" {
		t.Fatal("no cluster id after the first ID")
	}
	return n
}

// TestCallsNameTheirCluster: every answer names the node's cluster in its
// header; a call meant for another cluster, from a client or forwarded by
// a node of that cluster, is refused as Unavailable (the caller moves on)
// with no leader hint, which would name this cluster's leader.
func TestCallsNameTheirCluster(t *testing.T) {
	a, b := mustSingle(t, "a1"), mustSingle(t, "b1")
	seq := api.NewSequencerClient(grpctest.Dial(t, b.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var header metadata.MD
	if _, err := seq.Next(metadata.AppendToOutgoingContext(ctx, api.ClusterIDKey, b.ClusterID()), &api.NextRequest{Count: 1}, grpc.Header(&header)); err != nil {
		t.Fatalf("a call meant for b's cluster: %v", err)
	}
	if got := header.Get(api.ClusterIDKey); len(got) != 1 || got[0] != b.ClusterID() {
		t.Fatalf("header names cluster %v, want %s", got, b.ClusterID())
	}
	for name, callCtx := range map[string]context.Context{
		"a client of a's cluster":        metadata.AppendToOutgoingContext(ctx, api.ClusterIDKey, a.ClusterID()),
		"a call forwarded by a's leader": grpcapi.ForwardContext(ctx, a.ClusterID(), false),
	} {
		var trailer metadata.MD
		_, err := seq.Next(callCtx, &api.NextRequest{Count: 1}, grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "another cluster") {
			t.Errorf("%s calling b: %v, want Unavailable naming another cluster", name, err)
		}
		if hint := trailer.Get(api.LeaderAddrKey); len(hint) > 0 {
			t.Errorf("%s calling b: refused with leader hint %v", name, hint)
		}
	}
}

// TestOwnCallsNameTheirCluster: the calls a node makes itself to a
// member's stored address name its cluster, so that a node of another
// cluster now listening there refuses them; and where the answer must come
// from this cluster, such a refusal, or an answer that does not name this
// cluster (an older node that does not check), proves nothing. Here a's
// cluster has members a2 and a3 (non-voters, so a alone is a majority)
// whose stored gRPC addresses are b1's, of another cluster, an older
// node's that answers anything, and a4 whose address is a node's of no
// cluster yet.
func TestOwnCallsNameTheirCluster(t *testing.T) {
	a, b := mustSingle(t, "a1"), mustSingle(t, "b1")
	// Clusters often name their nodes alike: this one answers as a3.
	older := startuptest.Serve(t, &startuptest.Admin{
		Info:    &api.NodeInfo{Id: "a3", Role: "leader", ClusterId: b.ClusterID()},
		Members: []string{"a3"}, Leader: "a3",
	})
	// A node of no cluster yet (one starting, say) names none.
	fresh := startuptest.Serve(t, &startuptest.Admin{Info: &api.NodeInfo{Id: "c1", Role: "starting"}})
	for i, m := range []struct{ id, addr string }{{"a2", b.GRPCAddr()}, {"a3", older}, {"a4", fresh}} {
		id, addr := m.id, m.addr
		// Nothing listens at the Raft addresses: a sends them nothing.
		raftAddr := raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", i+1))
		if err := a.raft.AddNonvoter(raft.ServerID(id), raftAddr, 0, 5*time.Second).Error(); err != nil {
			t.Fatalf("add %s: %v", id, err)
		}
		if _, err := a.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: id, GRPCAddr: addr}); err != nil {
			t.Fatalf("record %s's address: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("peer calls", func(t *testing.T) {
		conn, err := a.peers.Get(b.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.NewAdminClient(conn).NodeStatus(ctx, &api.NodeStatusRequest{})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "another cluster") {
			t.Errorf("a's NodeStatus call to b: %v, want Unavailable naming another cluster", err)
		}
		// A stream names it when it opens: b refuses a Term stream even
		// if its messages were meant for b.
		_, err = leadershiptest.AskTerm(ctx, conn, &api.TermRequest{NodeId: b.ID(), ClusterId: b.ClusterID(), Round: 1})
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "another cluster") {
			t.Errorf("a's Term stream to b: %v, want Unavailable naming another cluster", err)
		}
	})

	t.Run("status", func(t *testing.T) {
		resp, err := api.NewAdminClient(grpctest.Dial(t, a.GRPCAddr())).Status(ctx, &api.StatusRequest{})
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		seen := map[string]bool{}
		for _, info := range resp.Nodes {
			seen[info.Id] = true
			switch info.Id {
			case a.ID():
				if info.ClusterId != a.ClusterID() || info.Role != "leader" {
					t.Errorf("a1 reported as %s of cluster %q, want the leader of %s", info.Role, info.ClusterId, a.ClusterID())
				}
			case "a2", "a3", "a4":
				if info.ClusterId == b.ClusterID() || info.Role != "unreachable" || info.Error == "" {
					t.Errorf("%s (whose address is another node's) reported as %s of cluster %q (error %q), want unreachable with why",
						info.Id, info.Role, info.ClusterId, info.Error)
				}
			}
		}
		if len(seen) != 4 || !seen["a2"] || !seen["a3"] || !seen["a4"] {
			t.Errorf("status lists %v, want a1 to a4", seen)
		}
	})

	t.Run("removal check", func(t *testing.T) {
		for range 3 {
			if a.leaderConfirmsRemoved() {
				t.Fatal("a takes another cluster's leader, which lacks it, as proof that it was removed")
			}
		}
		if err := a.Refusal(); err != nil {
			t.Fatalf("a refuses: %v", err)
		}
	})
}

// TestRaftRefusesAnotherCluster: a Raft RPC from a node of another
// cluster never reaches Raft, whichever end dials: here AppendEntries with
// a term that would depose any leader, from each of two one-node clusters
// to the other. Both ends log the refusal naming both clusters.
func TestRaftRefusesAnotherCluster(t *testing.T) {
	logs := &logBuffer{}
	single := func(id string) *Node {
		cfg := testConfig(t, id, t.TempDir())
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: io.MultiWriter(logs, testWriter{t})})
		n := mustBootstrap(t, cfg)
		mustNext(t, n.GRPCAddr(), 1)
		return n
	}
	a, b := single("a1"), single("b1")
	const intruderTerm = 1 << 40
	for _, tt := range []struct{ from, to *Node }{{a, b}, {b, a}} {
		last := tt.to.raft.LastIndex()
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(tt.from.ID()), Addr: []byte(tt.from.RaftAddr())},
			Term:      intruderTerm, PrevLogEntry: last, PrevLogTerm: tt.to.raft.CurrentTerm(), LeaderCommitIndex: last + 1,
			Entries: []*raft.Log{{Index: last + 1, Term: intruderTerm, Type: raft.LogNoop}},
		}
		var resp raft.AppendEntriesResponse
		err := tt.from.transport.AppendEntries(raft.ServerID(tt.to.ID()), raft.ServerAddress(tt.to.RaftAddr()), req, &resp)
		if !errors.Is(err, startup.ErrOtherCluster) {
			t.Errorf("AppendEntries from %s to %s: %v (%+v), want startup.ErrOtherCluster", tt.from.ID(), tt.to.ID(), err, resp)
		}
		if term := tt.to.raft.CurrentTerm(); term >= intruderTerm {
			t.Fatalf("%s took the term of another cluster's AppendEntries", tt.to.ID())
		}
		for i := last + 1; i <= tt.to.raft.LastIndex(); i++ {
			var e raft.Log
			if err := tt.to.store.GetLog(i, &e); err == nil && e.Term == intruderTerm {
				t.Fatalf("%s's log holds another cluster's entry %d", tt.to.ID(), i)
			}
		}
		if !tt.to.IsLeader() {
			t.Fatalf("%s no longer leads its own cluster", tt.to.ID())
		}
	}
	for _, line := range []string{
		"cluster_id=" + a.ClusterID() + " peer_cluster_id=" + b.ClusterID(),
		"cluster_id=" + b.ClusterID() + " peer_cluster_id=" + a.ClusterID(),
	} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no refusal logged with %q:\n%s", line, logs)
		}
	}
	mustNext(t, a.GRPCAddr(), 1)
	mustNext(t, b.GRPCAddr(), 1)
}

// TestWrongDataDirCannotTakeOver is the wrong-volume case: A's node n3 is
// restarted, under its own id and addresses, on the data dir of another
// cluster X. X's log has a higher last term than A's, and its
// configuration names A's members at A's addresses, as the disk of a
// cluster with the same names and addresses would (another environment's,
// or an older incarnation of this one). Raft alone lets n3 win A's
// elections with X's log and overwrite A's committed state. With the
// cluster handshake, n3 never leads, A's members keep their cluster and
// high-water mark and go on serving, and n3 refuses, naming both clusters.
func TestWrongDataDirCannotTakeOver(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	idA := leader.ClusterID()
	a3 := nodes[2]

	// X: a one-node cluster of a node also named n3, restarted until its
	// term (that of its last entries: each new leader writes one) is well
	// above A's.
	cfgX := testConfig(t, "n3", t.TempDir())
	x := mustBootstrap(t, cfgX)
	mustNext(t, x.GRPCAddr(), 1)
	idX := x.ClusterID()
	for i := 0; x.raft.CurrentTerm() <= leader.raft.CurrentTerm()+3; i++ {
		if i == 20 {
			t.Fatalf("X's term %d after 20 restarts, not above A's %d", x.raft.CurrentTerm(), leader.raft.CurrentTerm())
		}
		x.Close()
		x = mustOpen(t, cfgX)
		mustNext(t, x.GRPCAddr(), 1)
	}
	termX := x.raft.CurrentTerm()
	x.Close()
	var servers []raft.Server
	for _, n := range nodes {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(n.ID()), Address: raft.ServerAddress(n.RaftAddr())})
	}
	rewriteConfiguration(t, cfgX.DataDir, "n3", servers)

	conn := grpctest.Dial(t, leader.GRPCAddr())
	last := mustIncrease(t, 0, mustNextVia(t, conn, 100))
	var hwA uint64
	for _, n := range nodes {
		hwA = max(hwA, n.fsm.HighWater())
	}
	if term := leader.raft.CurrentTerm(); term >= termX {
		t.Fatalf("A's term %d reached X's %d: the test would show nothing", term, termX)
	}
	cfg3 := testConfig(t, "n3", cfgX.DataDir)
	cfg3.RaftAddr, cfg3.GRPCAddr = a3.RaftAddr(), a3.GRPCAddr()
	if err := a3.Close(); err != nil {
		t.Fatal(err)
	}
	n3 := mustOpen(t, cfg3)
	led := make(chan raft.Observation, 1)
	n3.raft.RegisterObserver(raft.NewObserver(led, false, func(o *raft.Observation) bool {
		s, ok := o.Data.(raft.RaftState)
		return ok && s == raft.Leader
	}))

	// Every few milliseconds, until the end: what must never happen.
	var (
		mu         sync.Mutex
		violations []string
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		seen := map[string]bool{}
		for {
			for _, n := range nodes[:2] {
				for what, bad := range map[string]bool{
					fmt.Sprintf("%s took cluster %q", n.ID(), n.fsm.ClusterID()):   n.fsm.ClusterID() != idA,
					fmt.Sprintf("%s's high-water mark went below %d", n.ID(), hwA): n.fsm.HighWater() < hwA,
				} {
					if bad && !seen[what] {
						seen[what] = true
						mu.Lock()
						violations = append(violations, what)
						mu.Unlock()
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stop)
		<-stopped
		select {
		case <-led:
			t.Errorf("n3 on X's data dir won an election among A's members")
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		for _, v := range violations {
			t.Error(v)
		}
	}()

	eventually.True(t, seqTestWait, "n3 to refuse to serve on another cluster's data dir", func() bool { return n3.Refusal() != nil })
	err := n3.Refusal()
	if !errors.Is(err, startup.ErrOtherCluster) {
		t.Fatalf("n3 refused with %v, want startup.ErrOtherCluster", err)
	}
	for _, want := range []string{"holds cluster " + idX, "n1, n2 are of cluster " + idA, "ordo remove --id n3", "--join"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("n3's refusal %q does not say %q", err, want)
		}
	}
	// Refused, n3's Raft still runs and campaigns: A must go on serving,
	// above every ID it handed out, over many of n3's election timeouts
	// (a property held over time, which no wait on state can show).
	for end := time.Now().Add(15 * cfg3.Raft.ElectionTimeout); time.Now().Before(end); {
		last = mustIncrease(t, last, mustNextVia(t, conn, 100))
	}
}

// rewriteConfiguration makes servers the Raft configuration of the data
// dir dir, offline (hashicorp/raft's RecoverCluster), as node id.
func rewriteConfiguration(t *testing.T, dir, id string, servers []raft.Server) {
	t.Helper()
	store, snaps, err := startup.OpenStores(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	rc := testRaftConfig()
	rc.LocalID = raft.ServerID(id)
	if err := raft.RecoverCluster(rc, fsm.New(nil, nil), store, store, snaps, trans, raft.Configuration{Servers: servers}); err != nil {
		t.Fatalf("rewrite the configuration of %s: %v", dir, err)
	}
}
