package server

import (
	"context"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

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
	if err := leader.removeMember(ctx, leader.ID()); err != nil {
		t.Fatalf("the leader removing itself: %v", err)
	}
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
