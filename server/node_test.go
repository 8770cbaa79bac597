package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/startup"
)

// testRaftConfig makes elections quick so in-process tests stay short.
func testRaftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout = 200 * time.Millisecond
	rc.ElectionTimeout = 200 * time.Millisecond
	rc.LeaderLeaseTimeout = 100 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	return rc
}

// testConfig is a node of id on dir, on loopback ports, with a
// TestHooks.HoldAddress switch left off, for mustPointAt to turn on.
func testConfig(t *testing.T, id, dir string) Config {
	t.Helper()
	return Config{
		ID: id, DataDir: dir, RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		Layout: layout.MustPreset("default"), Raft: testRaftConfig(),
		Logger:    hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}}),
		TestHooks: TestHooks{HoldAddress: new(atomic.Bool)},
	}
}

// testWriter sends logs to the test log, so they show only on failure.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mustOpen(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", cfg.ID, err)
	}
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { n.Close() }) })
	return n
}

// mustBootstrap opens a node with cfg and bootstraps it as a one-node
// cluster.
func mustBootstrap(t *testing.T, cfg Config) *Node {
	t.Helper()
	n := mustOpen(t, cfg)
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	return n
}

// mustNext asks addr for count IDs, retrying Unavailable until a deadline
// (a leader may still be committing its first reservation).
func mustNext(t *testing.T, addr string, count uint32) []uint64 {
	t.Helper()
	return mustNextVia(t, grpctest.Dial(t, addr), count)
}

// mustNextVia is mustNext over conn.
func mustNextVia(t *testing.T, conn *grpc.ClientConn, count uint32) []uint64 {
	t.Helper()
	return mustNextCtx(t, context.Background(), conn, count)
}

// mustNextCtx is mustNextVia with ctx's metadata (api.TicksKey for a
// 128-bit layout).
func mustNextCtx(t *testing.T, ctx context.Context, conn *grpc.ClientConn, count uint32) []uint64 {
	t.Helper()
	addr := conn.Target()
	c := api.NewSequencerClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		resp, err := c.Next(ctx, &api.NextRequest{Count: count})
		if err == nil {
			ids := idsOf(t, resp.Runs)
			if len(ids) != int(count) {
				t.Fatalf("got %d IDs, want %d", len(ids), count)
			}
			return ids
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("next from %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idsOf is every ID runs hold, read by the clients' decoder
// (api.ExpandRuns), which fails on runs that do not increase.
func idsOf(t testing.TB, runs []*api.IDRun) []uint64 {
	t.Helper()
	var n uint64
	for _, r := range runs {
		n += uint64(r.Count)
	}
	ids, err := api.ExpandRuns(runs, n)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// mustIncrease fails unless every ID of ids is above prev and ids increase.
func mustIncrease(t *testing.T, prev uint64, ids []uint64) uint64 {
	t.Helper()
	for _, id := range ids {
		if id <= prev {
			t.Fatalf("ID %d is not above %d", id, prev)
		}
		prev = id
	}
	return prev
}

// mustCluster starts three nodes: n1 bootstraps alone, n2 and n3 join it.
func mustCluster(t *testing.T) []*Node {
	t.Helper()
	return mustClusterWith(t, nil)
}

// mustClusterWith is mustCluster with each node's Config passed through
// configure first (when not nil).
func mustClusterWith(t *testing.T, configure func(*Config)) []*Node {
	t.Helper()
	config := func(id string) Config {
		cfg := testConfig(t, id, t.TempDir())
		if configure != nil {
			configure(&cfg)
		}
		return cfg
	}
	cfg1 := config("n1")
	n1 := mustBootstrap(t, cfg1)
	own, err := n1.peers.Get(n1.GRPCAddr()) // with the node's own credentials
	if err != nil {
		t.Fatal(err)
	}
	mustNextCtx(t, widthCtx(context.Background(), cfg1.Layout), own, 1)
	nodes := []*Node{n1}
	for _, id := range []string{"n2", "n3"} {
		n := mustOpen(t, config(id))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.Join(ctx, n1.GRPCAddr())
		cancel()
		if err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
		nodes = append(nodes, n)
	}
	// Every node must know the leader and its address before tests
	// expect followers to forward, and must have applied the cluster's
	// id, or it refuses the leader's term rounds.
	for _, n := range nodes {
		eventually.True(t, seqTestWait, n.ID()+" to know the leader's address and the cluster id", func() bool {
			_, addr := n.Leader()
			return addr != "" && n.fsm.ClusterID() != ""
		})
	}
	return nodes
}

// followerOf returns one of nodes that is not leader.
func followerOf(nodes []*Node, leader *Node) *Node {
	for _, n := range nodes {
		if n != leader {
			return n
		}
	}
	return nil
}

func mustLeader(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	var leader *Node
	eventually.True(t, seqTestWait, "a serving leader", func() bool {
		for _, n := range nodes {
			if n.IsLeader() && n.seq.Serving() {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func TestSingleNodeRestartContinuesAbove(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "n1", dir)
	n := mustBootstrap(t, cfg)
	last := mustIncrease(t, 0, mustNext(t, n.GRPCAddr(), 100))
	last = mustIncrease(t, last, mustNext(t, n.GRPCAddr(), 5000))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart with the wall clock an hour behind: IDs must still go up.
	cfg.Clock = func() time.Time { return time.Now().Add(-time.Hour) }
	n = mustOpen(t, cfg)
	if err := n.BootstrapSingle(); err != nil { // ignored: state exists
		t.Fatal(err)
	}
	mustIncrease(t, last, mustNext(t, n.GRPCAddr(), 100))
}

// A node restarted with a shorter --reserve-window than the one its
// cluster's mark was reserved under serves at once (it was refused for
// about the old window, blamed on demand): the ceiling the earlier
// leader recorded holds until the clock catches up.
func TestRestartWithShorterReserveWindowServesAtOnce(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.ReserveWindow = MaxReserveWindow
	n := mustBootstrap(t, cfg)
	last := mustIncrease(t, 0, mustNext(t, n.GRPCAddr(), 10))
	if hw, now := n.fsm.State().HighWater, n.cfg.Layout.TickAt(time.Now()); hw < now+n.cfg.Layout.TicksIn(MaxReserveWindow/2) {
		t.Fatalf("the mark leads the clock by less than half of %s: the test needs the long window's", MaxReserveWindow)
	}
	// The ceiling is recorded once the cluster version says every voter
	// reads it (review 26): a new cluster raises it as it first serves.
	mustRecordCeiling(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.ReserveWindow = 0 // the default, 3 s
	n = mustOpen(t, cfg)
	if err := n.BootstrapSingle(); err != nil { // ignored: state exists
		t.Fatal(err)
	}
	mustIncrease(t, last, mustNext(t, n.GRPCAddr(), 10))
}

func TestThreeNodesForwardAndFailover(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	follower := followerOf(nodes, leader)
	last := mustIncrease(t, 0, mustNext(t, leader.GRPCAddr(), 10))

	// A follower forwards and names the leader.
	resp, err := api.NewSequencerClient(grpctest.Dial(t, follower.GRPCAddr())).Next(context.Background(), &api.NextRequest{Count: 3})
	if err != nil {
		t.Fatalf("next via follower: %v", err)
	}
	if resp.LeaderAddr != leader.GRPCAddr() {
		t.Fatalf("leader hint %q, want %q", resp.LeaderAddr, leader.GRPCAddr())
	}
	last = mustIncrease(t, last, idsOf(t, resp.Runs))

	// Closing the leader hands over; the new leader continues above.
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	var rest []*Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	next := mustLeader(t, rest)
	mustIncrease(t, last, mustNext(t, next.GRPCAddr(), 10))
}

func TestAdminErrors(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	seq := api.NewSequencerClient(grpctest.Dial(t, nodes[1].GRPCAddr()))
	admin := api.NewAdminClient(grpctest.Dial(t, nodes[2].GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	twitter := layout.MustPreset("twitter")

	tests := []struct {
		name string
		call func() error
		want codes.Code
		says []string
	}{
		{"count 0", func() error { _, err := seq.Next(ctx, &api.NextRequest{Count: 0}); return err }, codes.InvalidArgument, []string{"count 0"}},
		{"count above max", func() error {
			_, err := seq.Next(ctx, &api.NextRequest{Count: DefaultMaxCount + 1})
			return err
		}, codes.InvalidArgument, []string{"100001"}},
		{"remove unknown", func() error { _, err := admin.Remove(ctx, &api.RemoveRequest{Id: "nope"}); return err }, codes.NotFound, []string{"nope"}},
		{"remove without id", func() error { _, err := admin.Remove(ctx, &api.RemoveRequest{}); return err }, codes.InvalidArgument, nil},
		{"join id in use", func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n2", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: "default"})
			return err
		}, codes.AlreadyExists, []string{"n2"}},
		{"join address in use", func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: leader.RaftAddr(), GrpcAddr: "127.0.0.1:2", Layout: "default"})
			return err
		}, codes.AlreadyExists, []string{leader.RaftAddr()}},
		{"join other layout", func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2", Layout: twitter.String()})
			return err
		}, codes.FailedPrecondition, []string{"twitter", "default"}},
		{"join a member again", func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: leader.ID(), RaftAddr: leader.RaftAddr(), GrpcAddr: leader.GRPCAddr(), Layout: "default"})
			return err
		}, codes.AlreadyExists, []string{"remove it first"}},
		{"join without layout", func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "127.0.0.1:1", GrpcAddr: "127.0.0.1:2"})
			return err
		}, codes.InvalidArgument, []string{"layout"}},
		{"join bad address", func() error {
			_, err := admin.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "nowhere", GrpcAddr: "127.0.0.1:2"})
			return err
		}, codes.InvalidArgument, []string{"nowhere"}},
		{"transfer to unknown", func() error {
			_, err := admin.TransferLeader(ctx, &api.TransferLeaderRequest{Id: "nope"})
			return err
		}, codes.NotFound, []string{"nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A leader change under load answers Unavailable, which no
			// case wants: ask again until the cluster has a leader.
			err := tt.call()
			for status.Code(err) == codes.Unavailable && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
				err = tt.call()
			}
			if status.Code(err) != tt.want {
				t.Fatalf("got %v, want code %s", err, tt.want)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	// Nothing above harmed the cluster.
	st, err := admin.Status(ctx, &api.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 3 {
		t.Fatalf("status lists %d nodes, want 3: %v", len(st.Nodes), st.Nodes)
	}
	mustNext(t, nodes[0].GRPCAddr(), 5)
}

func TestRestartWithOtherLayoutRefuses(t *testing.T) {
	// With a snapshot the layout is known when Raft starts; without one,
	// only when the log is replayed. Both must refuse.
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%t", snapshot), func(t *testing.T) {
			cfg := testConfig(t, "n1", t.TempDir())
			n := mustBootstrap(t, cfg)
			mustNext(t, n.GRPCAddr(), 1)
			if snapshot {
				if err := n.raft.Snapshot().Error(); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			cfg.Layout = layout.MustPreset("twitter")
			n = mustOpen(t, cfg)
			select {
			case err := <-n.Fatal():
				if !errors.Is(err, grpcapi.ErrLayoutMismatch) || !strings.Contains(err.Error(), "twitter") || !strings.Contains(err.Error(), "default") {
					t.Fatalf("fatal error %v does not name both layouts", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("node with another layout did not refuse within 10 s")
			}
			_, err := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr())).Next(context.Background(), &api.NextRequest{Count: 1})
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "refuses") {
				t.Fatalf("next on refusing node: %v, want Unavailable saying it refuses", err)
			}
		})
	}
}

// BenchmarkClusterNext measures IDs from a three-node in-process cluster
// (real Raft, BoltDB with fsync, gRPC on loopback) by many callers.
func BenchmarkClusterNext(b *testing.B) {
	for _, count := range []uint32{1, 1000} {
		b.Run(fmt.Sprintf("count=%d", count), func(b *testing.B) {
			nodes := mustBenchCluster(b)
			leader := nodes[0]
			c := api.NewSequencerClient(grpctest.Dial(b, leader.GRPCAddr()))
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Next(context.Background(), &api.NextRequest{Count: count}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)*float64(count)/b.Elapsed().Seconds(), "IDs/s")
		})
	}
}

// mustBenchCluster starts three nodes for a benchmark; the first leads.
func mustBenchCluster(b *testing.B) []*Node {
	b.Helper()
	open := func(id string) *Node {
		cfg := Config{ID: id, DataDir: b.TempDir(), RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
			Raft: testRaftConfig(), Logger: hclog.NewNullLogger()}
		cfg.Layout = layout.MustPreset("default")
		n, err := Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { n.Close() })
		return n
	}
	n1 := open("n1")
	if err := n1.BootstrapSingle(); err != nil {
		b.Fatal(err)
	}
	nodes := []*Node{n1}
	for _, id := range []string{"n2", "n3"} {
		n := open(id)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := n.Join(ctx, n1.GRPCAddr())
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !n1.seq.Serving() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nodes
}

func TestHasState(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{dir + "/missing", dir} {
		if has, err := startup.HasState(d); err != nil || has {
			t.Fatalf("startup.HasState(%s) = %t, %v before any node ran; want false", d, has, err)
		}
	}
	cfg := testConfig(t, "n1", dir)
	n := mustBootstrap(t, cfg)
	mustNext(t, n.GRPCAddr(), 1)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if has, err := startup.HasState(dir); err != nil || !has {
		t.Fatalf("startup.HasState after a node ran = %t, %v; want true", has, err)
	}
}

func TestNextStream(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	follower := followerOf(nodes, leader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The leader answers every call of a stream, by id, whether calls
	// come one per message or several in one.
	st, err := api.NewSequencerClient(grpctest.Dial(t, leader.GRPCAddr())).NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(calls ...*api.StreamCall) {
		t.Helper()
		if err := st.Send(&api.NextStreamRequest{Calls: calls}); err != nil {
			t.Fatal(err)
		}
	}
	// recv returns the answers to n calls, by id.
	recv := func(n int) map[uint64]*api.StreamAnswer {
		t.Helper()
		got := map[uint64]*api.StreamAnswer{}
		for len(got) < n {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("after %d of %d answers: %v", len(got), n, err)
			}
			for _, a := range resp.Answers {
				if got[a.Id] != nil {
					t.Fatalf("call %d answered twice", a.Id)
				}
				got[a.Id] = a
			}
		}
		if len(got) != n {
			t.Fatalf("%d answers, want %d", len(got), n)
		}
		return got
	}
	send(&api.StreamCall{Id: 0, Count: 1})
	send(&api.StreamCall{Id: 1, Count: 2}, &api.StreamCall{Id: 2, Count: 3}, &api.StreamCall{Id: 3, Count: 4})
	send(&api.StreamCall{Id: 4, Count: 5})
	var all []uint64
	for id, a := range recv(5) {
		ids := idsOf(t, a.Runs)
		if len(ids) != int(id+1) || a.Invalid != "" {
			t.Fatalf("answer for %d: %d IDs, invalid %q", id, len(ids), a.Invalid)
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("ID %d answered twice", all[i])
		}
	}
	// A bad count is refused by itself; the calls around it are served.
	send(&api.StreamCall{Id: 8, Count: 1}, &api.StreamCall{Id: 9, Count: 0}, &api.StreamCall{Id: 10, Count: 1})
	got := recv(3)
	if a := got[9]; a == nil || a.Invalid == "" || len(a.Runs) != 0 {
		t.Fatalf("count 0 on a stream: %v; want call 9 refused alone", a)
	}
	for _, id := range []uint64{8, 10} {
		if a := got[id]; a == nil || len(idsOf(t, a.Runs)) != 1 {
			t.Fatalf("call %d beside a refused one: %v; want it served", id, a)
		}
	}
	// Calls of one message are assigned together up to the largest count,
	// and split: each gets its own count, and no two share an ID.
	big := uint32(leader.cfg.MaxCount/2 + 1)
	send(&api.StreamCall{Id: 20, Count: big}, &api.StreamCall{Id: 21, Count: big}, &api.StreamCall{Id: 22, Count: 1}, &api.StreamCall{Id: 23, Count: 2})
	seen := map[uint64]bool{}
	for id, a := range recv(4) {
		ids := idsOf(t, a.Runs)
		want := map[uint64]int{20: int(big), 21: int(big), 22: 1, 23: 2}[id]
		if len(ids) != want {
			t.Fatalf("call %d: %d IDs, want %d", id, len(ids), want)
		}
		for i, v := range ids {
			if seen[v] || (i > 0 && v <= ids[i-1]) {
				t.Fatalf("call %d: ID %d repeated or out of order", id, v)
			}
			seen[v] = true
		}
	}
	// A joint request's calls are answered with one answer: its counts
	// are the calls', its runs hold them all, in order.
	if err := st.Send(&api.NextStreamRequest{Joint: true, Calls: []*api.StreamCall{{Id: 30, Count: 2}, {Id: 31, Count: 1}, {Id: 32, Count: 3}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Answers) != 1 {
		t.Fatalf("a joint request of 3 calls got %d answers, want 1", len(resp.Answers))
	}
	ja := resp.Answers[0]
	if ja.Id != 30 || !slices.Equal(ja.Also, []uint64{31, 32}) || !slices.Equal(ja.Counts, []uint32{2, 1, 3}) || len(idsOf(t, ja.Runs)) != 6 {
		t.Fatalf("joint answer %v, want calls 30, 31, 32 with counts 2, 1, 3 and 6 IDs", ja)
	}
	// The leader's header comes at once and names no leader: a client
	// that left a relay knows it reached the leader.
	if hdr, err := st.Header(); err != nil || len(hdr.Get(api.LeaderAddrKey)) != 0 {
		t.Fatalf("the leader's stream header: %v, %v; want one naming no leader", hdr, err)
	}
	// A client done sending gets its last answers, then a clean end.
	send(&api.StreamCall{Id: 11, Count: 1})
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	recv(1)
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client closed its side: %v, want the stream to end cleanly", err)
	}

	// A follower relays a stream to the leader, so a client that reaches
	// only followers is served; the IDs go on above the leader's.
	fst, err := api.NewSequencerClient(grpctest.Dial(t, follower.GRPCAddr())).NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Its header, sent before any call, names the leader, so a client
	// that can reach it moves there.
	if hdr, err := fst.Header(); err != nil || !slices.Equal(hdr.Get(api.LeaderAddrKey), []string{leader.GRPCAddr()}) {
		t.Fatalf("a relayed stream's header: %v, %v; want it to name the leader at %s", hdr, err, leader.GRPCAddr())
	}
	var last uint64
	for i := range 3 {
		if err := fst.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: uint64(100 + i), Count: 2}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := fst.Recv()
		if err != nil {
			t.Fatalf("stream through a follower: %v", err)
		}
		if len(resp.Answers) != 1 || resp.Answers[0].Id != uint64(100+i) {
			t.Fatalf("stream through a follower answered %v", resp.Answers)
		}
		ids := idsOf(t, resp.Answers[0].Runs)
		last = mustIncrease(t, last, ids)
	}
	if err := fst.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := fst.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("a relayed stream after the client closed its side: %v, want a clean end", err)
	}
	// One hop at most: a stream a follower relays is not relayed again.
	fwd, err := api.NewSequencerClient(grpctest.Dial(t, follower.GRPCAddr())).NextStream(metadata.AppendToOutgoingContext(ctx, grpcapi.ForwardedKey, "1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = fwd.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("a forwarded stream at a follower: %v, want Unavailable", err)
	}
	if hint := fwd.Trailer().Get(api.LeaderAddrKey); len(hint) != 1 || hint[0] != leader.GRPCAddr() {
		t.Fatalf("leader hint %v, want %s", hint, leader.GRPCAddr())
	}
}

// TestSnapshotsBoundTheLog: with a low snapshot threshold and a short
// reservation window (a commit every few milliseconds under load), the
// node takes snapshots, the log is truncated to about the trailing
// entries, and the data dir stays small; a restart resumes above every ID
// handed out.
func TestSnapshotsBoundTheLog(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, "n1", dir)
	cfg.ReserveWindow = 2 * time.Millisecond
	cfg.Raft.SnapshotThreshold = 64
	cfg.Raft.SnapshotInterval = 50 * time.Millisecond
	cfg.Raft.TrailingLogs = 32
	n := mustBootstrap(t, cfg)
	const entries = 1000
	var last uint64
	conn := grpctest.Dial(t, n.GRPCAddr()) // one connection: the node limits them per host
	deadline := time.Now().Add(60 * time.Second)
	for idx := n.raft.LastIndex(); idx < entries; idx = n.raft.LastIndex() {
		if time.Now().After(deadline) {
			t.Fatalf("only %d log entries within 60 s", idx)
		}
		ids := mustNextVia(t, conn, 1000)
		if ids[0] <= last {
			t.Fatalf("ID %d after %d", ids[0], last)
		}
		last = ids[len(ids)-1]
	}
	snaps, err := n.snaps.List()
	if err != nil || len(snaps) == 0 {
		t.Fatalf("snapshots: %v, %v; want at least one", snaps, err)
	}
	eventually.True(t, seqTestWait, "the log to be truncated", func() bool {
		first, err := n.store.FirstIndex()
		return err == nil && n.raft.LastIndex()-first < 64+32+64
	})
	var size int64
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			size += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// 1000 entries of about 100 bytes would be 100 KB in the log alone;
	// bolt keeps its high-water pages, so allow a few times the live set.
	if size > 1<<20 {
		t.Errorf("data dir holds %d bytes after %d entries, want under 1 MiB", size, entries)
	}
	t.Logf("%d entries: %d snapshots, data dir %d bytes", n.raft.LastIndex(), len(snaps), size)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2 := mustOpen(t, cfg)
	if ids := mustNext(t, n2.GRPCAddr(), 1); ids[0] <= last {
		t.Fatalf("after a restart from a snapshot: ID %d, want above %d", ids[0], last)
	}
}

// TestTransferUnderLoadFailsNoCall: callers keep asking while leadership
// moves three times; with the client's failover, not one call fails, and
// everything returned keeps the order.
func TestTransferUnderLoadFailsNoCall(t *testing.T) {
	nodes := mustCluster(t)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.GRPCAddr())
	}
	c, err := client.New(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := history.NewRecorder()
	var tally history.Tally
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			caller := history.Caller{Rec: rec, Tally: &tally, Client: i}
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := caller.Call(func() ([]uint64, []string, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					ids, err := c.NextN(ctx, 1+i%3)
					return ids, nil, err
				})
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
			}
		}()
	}
	for range 3 {
		time.Sleep(200 * time.Millisecond)
		old := mustLeader(t, nodes)
		if err := old.raft.LeadershipTransfer().Error(); err != nil {
			t.Fatalf("transfer from %s: %v", old.ID(), err)
		}
		eventually.True(t, seqTestWait, "a new leader", func() bool {
			for _, n := range nodes {
				if n != old && n.IsLeader() && n.seq.Serving() {
					return true
				}
			}
			return false
		})
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	r := history.Check(rec.Ops())
	if failed := tally.Counts().Errors(); !r.OK() || failed > 0 || r.Acknowledged == 0 {
		t.Fatalf("%d failed calls; %s", failed, r)
	}
	t.Logf("%s", r)
}

// A leader's clock reading travels with its reservations to every node, so
// a new leader whose clock is far behind (more than the lead bound less a
// window) still serves at once: it measures its lead from the highest
// reading any leader recorded, not from its own clock alone.
func TestNewLeaderCountsEarlierLeadersClocks(t *testing.T) {
	const behind = 20 * time.Second
	nodes := mustClusterWith(t, func(cfg *Config) {
		if cfg.ID != "n1" {
			cfg.Clock = func() time.Time { return time.Now().Add(-behind) }
		}
	})
	leader := mustLeader(t, nodes)
	if leader.ID() != "n1" {
		t.Fatalf("leader %s, want n1, the bootstrapped node", leader.ID())
	}
	last := mustIncrease(t, 0, mustNext(t, leader.GRPCAddr(), 10))
	l := leader.cfg.Layout
	reading := leader.fsm.State().ClockHigh
	if lag := time.Since(l.Decode(l.ID(reading, 0)).Time); lag < 0 || lag > 10*time.Second {
		t.Fatalf("the recorded clock reading is %s old, want n1's clock", lag)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr())).TransferLeader(ctx, &api.TransferLeaderRequest{Id: "n2"}); err != nil {
		t.Fatal(err)
	}
	next := mustLeader(t, nodes)
	if next.ID() != "n2" {
		t.Fatalf("leader is %s after the transfer, want n2", next.ID())
	}
	if got := next.fsm.State().ClockHigh; got < reading {
		t.Fatalf("n2 holds clock reading %d, below n1's %d: it did not replicate", got, reading)
	}
	mustIncrease(t, last, mustNext(t, next.GRPCAddr(), 10))
}

// A follower restarted on another gRPC address registers it with the
// leader. Until it does, the leader's term rounds dial the old address, so
// with the third node down the leader could not confirm and would stop
// answering; after, the two of them serve.
func TestRestartedFollowerRegistersNewAddress(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	moved := followerOf(nodes, leader)
	var other *Node
	for _, n := range nodes {
		if n != leader && n != moved {
			other = n
		}
	}
	last := mustIncrease(t, 0, mustNext(t, leader.GRPCAddr(), 10))
	oldAddr := moved.GRPCAddr()
	cfg := moved.cfg
	cfg.RaftAddr = moved.RaftAddr() // the member's Raft address stays
	cfg.GRPCAddr = "127.0.0.1:0"    // a new port
	if err := moved.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := mustOpen(t, cfg)
	if restarted.GRPCAddr() == oldAddr {
		t.Fatalf("restarted on the same gRPC address %s", oldAddr)
	}
	eventually.True(t, seqTestWait, "the leader to record the new address", func() bool {
		addr, _ := leader.fsm.NodeAddr(cfg.ID)
		return addr == restarted.GRPCAddr()
	})
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	mustIncrease(t, last, mustNext(t, leader.GRPCAddr(), 10))
}

// TestRegisterOnlyForItself: only a member may move its own gRPC address,
// where followers forward calls and leader hints point. In plaintext with
// an admin token, Register needs the token; no caller may move the
// leader's address, nor point a member at an address that answers as
// another node or not at all.
func TestRegisterOnlyForItself(t *testing.T) {
	nodes := mustClusterWith(t, func(c *Config) { c.AdminToken = "s3cret" })
	leader := mustLeader(t, nodes)
	member := followerOf(nodes, leader)
	admin := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	withToken := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	for _, tt := range []struct {
		name string
		ctx  context.Context
		req  *api.RegisterRequest
		want codes.Code
	}{
		{"no token", ctx, &api.RegisterRequest{Id: member.ID(), GrpcAddr: leader.GRPCAddr()}, codes.PermissionDenied},
		{"the leader's id", withToken, &api.RegisterRequest{Id: leader.ID(), GrpcAddr: member.GRPCAddr()}, codes.InvalidArgument},
		{"an address that answers as another node", withToken, &api.RegisterRequest{Id: member.ID(), GrpcAddr: leader.GRPCAddr()}, codes.PermissionDenied},
		{"an address where nothing answers", withToken, &api.RegisterRequest{Id: member.ID(), GrpcAddr: "127.0.0.1:1"}, codes.InvalidArgument},
		{"its own address", withToken, &api.RegisterRequest{Id: member.ID(), GrpcAddr: member.GRPCAddr()}, codes.OK},
	} {
		_, err := admin.Register(tt.ctx, tt.req)
		if got := status.Code(err); got != tt.want {
			t.Errorf("register, %s: %v, want %s", tt.name, err, tt.want)
		}
	}
	if got, _ := leader.fsm.NodeAddr(member.ID()); got != member.GRPCAddr() {
		t.Errorf("%s recorded at %s after the refused registrations, want %s", member.ID(), got, member.GRPCAddr())
	}
	if got, _ := leader.fsm.NodeAddr(leader.ID()); got != leader.GRPCAddr() {
		t.Errorf("the leader recorded at %s, want %s", got, leader.GRPCAddr())
	}
}
