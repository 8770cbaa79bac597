package server

import (
	"context"
	"testing"
	"time"
)

// Review 26 (held): a member that lost its data dir and was removed joins
// again under its id at its old addresses: the leader asks it who it is
// (askJoiner) and finds a node of no cluster, which it adds.
func TestReview26LostDiskMemberRejoinsAtItsAddresses(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	lost := followerOf(nodes, leader)
	cfg := lost.cfg
	cfg.RaftAddr, cfg.GRPCAddr = lost.RaftAddr(), lost.GRPCAddr()
	if err := lost.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := leader.RemoveMember(ctx, cfg.ID); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir() // the lost disk
	back := mustOpen(t, cfg)
	if err := back.Join(ctx, leader.GRPCAddr()); err != nil {
		t.Fatalf("a removed member with a new disk joins again at its addresses: %v", err)
	}
	if member, _ := leader.isMember(cfg.ID); !member {
		t.Fatalf("%s is not a member after its join", cfg.ID)
	}
	mustNext(t, back.GRPCAddr(), 5)
}
