package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/startup"

	"github.com/seed-e8569b35/ordo/internal/eventually"
)

// TestLeaderRemovingItselfLeavesNoAddress: a leader that removes itself
// steps down before it can forget its own gRPC address, so the next leader
// forgets it. Left behind, the address would be asked as a member's at
// every start-up check, and whatever listens there later (a node of
// another cluster) would speak for this cluster.
func TestLeaderRemovingItselfLeavesNoAddress(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	mustRemoveItself(t, ctx, nodes, leader)
	var rest []*Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	next := mustLeader(t, rest)
	for _, n := range rest {
		eventually.True(t, seqTestWait, n.ID()+" to forget removed leader "+leader.ID()+"'s address", func() bool {
			_, ok := n.fsm.NodeAddr(leader.ID())
			return !ok
		})
	}
	// The next leader's own entry and its follower's stay.
	for _, n := range rest {
		if addr, _ := next.fsm.NodeAddr(n.ID()); addr != n.GRPCAddr() {
			t.Errorf("%s recorded at %q, want %s", n.ID(), addr, n.GRPCAddr())
		}
	}
}

// mustRemoveItself has leader remove itself. Under load an election may
// interrupt the commit, and the removal may or may not have happened:
// done if it did, else leadership goes back to the node and it asks
// again, so the removal is always the leader's own.
func mustRemoveItself(t *testing.T, ctx context.Context, nodes []*Node, leader *Node) {
	t.Helper()
	for {
		err := leader.RemoveMember(ctx, leader.ID())
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the leader removing itself: %v", err)
		}
		now := mustLeader(t, nodes)
		conf := now.raft.GetConfiguration()
		if conf.Error() != nil {
			continue
		}
		member := false
		for _, srv := range conf.Configuration().Servers {
			member = member || string(srv.ID) == leader.ID()
		}
		switch {
		case !member:
			return
		case now != leader:
			_ = now.raft.LeadershipTransferToServer(raft.ServerID(leader.ID()), raft.ServerAddress(leader.RaftAddr())).Error()
		}
		t.Logf("the leader's removal of itself did not commit (%v); asking again", err)
	}
}

// TestStrayAddrs: the entries a leader forgets are exactly those of nodes
// outside the configuration.
func TestStrayAddrs(t *testing.T) {
	servers := func(ids ...string) []raft.Server {
		var s []raft.Server
		for _, id := range ids {
			s = append(s, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1")})
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		nodes   map[string]string
		servers []raft.Server
		want    []string
	}{
		{"no entries", nil, servers("n1"), nil},
		{"every entry a server", map[string]string{"n1": "a", "n2": "b"}, servers("n1", "n2"), nil},
		{"a server without an entry", map[string]string{"n1": "a"}, servers("n1", "n2"), nil},
		{"a removed node", map[string]string{"n1": "a", "n2": "b"}, servers("n2"), []string{"n1"}},
		{"several, sorted", map[string]string{"n3": "c", "n1": "a", "n2": "b"}, servers("n2"), []string{"n1", "n3"}},
		{"no configuration", map[string]string{"n1": "a"}, nil, nil},
	} {
		if got := strayAddrs(tc.nodes, tc.servers); !slices.Equal(got, tc.want) {
			t.Errorf("%s: strayAddrs = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNodeOfAnotherClusterNeverLeads: a member whose state names another
// cluster than the other voters hold (here its snapshot was rewritten to
// name one, as a bug or a copied data dir could leave it) must never
// lead. The Raft handshake refuses its connections both ways, so it can
// neither follow nor be elected, not even by a transfer; it refuses to
// serve once its voters have answered for their cluster, naming both
// clusters and the fix; and the cluster serves without it. (Elected all
// the same, by a path the handshake misses, its first round would find a
// majority refusing it as a node of another cluster, and it would hand
// leadership over: leadership's TestForeignMajority and Node.confirm.)
// Before issue 22 it followed, was elected, and kept leading, every round
// failing for good.
func TestNodeOfAnotherClusterNeverLeads(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	odd := followerOf(nodes, leader)
	own := odd.ClusterID()
	// Raft takes none until the newest configuration is applied.
	eventually.True(t, seqTestWait, "a snapshot of "+odd.ID(), func() bool { return odd.raft.Snapshot().Error() == nil })
	cfg := mustCloseKeepingAddrs(t, odd)
	mustRenameCluster(t, cfg.DataDir, "another-cluster")
	odd = mustOpen(t, cfg)
	if got := odd.ClusterID(); got != "another-cluster" {
		t.Fatalf("%s restarted holding cluster %q, want another-cluster", odd.ID(), got)
	}
	if err := leader.TransferLeadership(odd.ID()); err == nil && odd.IsLeader() {
		t.Errorf("leadership was transferred to %s, a node of another cluster", odd.ID())
	}
	eventually.True(t, seqTestWait, odd.ID()+" to refuse as a node of another cluster", func() bool {
		return errors.Is(odd.Refusal(), startup.ErrOtherCluster)
	})
	err := odd.Refusal()
	for _, want := range []string{"cluster another-cluster", own, "ordo remove --id " + odd.ID()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	var rest []*Node
	for _, n := range nodes {
		if n.ID() != odd.ID() {
			rest = append(rest, n)
		}
	}
	next := mustLeader(t, rest)
	mustNext(t, next.GRPCAddr(), 10)
	if odd.IsLeader() {
		t.Errorf("%s leads", odd.ID())
	}
}

// mustRenameCluster rewrites the latest snapshot in the closed data dir
// dir so that its state names cluster id, keeping its index, term and
// configuration: the node restores it, and the log after it names no
// cluster.
func mustRenameCluster(t *testing.T, dir, id string) {
	t.Helper()
	store, snaps, err := startup.OpenStores(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("snapshots in %s: %v, %v", dir, metas, err)
	}
	meta := metas[0]
	_, rc, err := snaps.Open(meta.ID)
	if err != nil {
		t.Fatal(err)
	}
	var st fsm.State
	err = json.NewDecoder(rc).Decode(&st)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	st.ClusterID = id
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := snaps.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "snapshots", meta.ID)); err != nil {
		t.Fatal(err)
	}
}
