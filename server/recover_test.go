package server

import (
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/startup"

	"github.com/hashicorp/raft"
)

// TestRecoverAfterLosingAMajority: with two of three nodes gone for good,
// the survivor is recovered as the only voter, leads alone, and hands out
// IDs above every ID the cluster handed out before.
func TestRecoverAfterLosingAMajority(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	var last uint64
	for range 5 {
		ids := mustNext(t, leader.GRPCAddr(), 100)
		last = mustIncrease(t, last, ids)
	}
	survivor := nodes[0]
	if survivor == leader {
		survivor = nodes[1]
	}
	cfg := survivor.cfg
	cfg.RaftAddr, cfg.GRPCAddr = survivor.RaftAddr(), survivor.GRPCAddr()
	for _, n := range nodes {
		n.Close()
	}

	if _, err := Recover(testConfig(t, "empty", t.TempDir()), time.Minute); !errors.Is(err, startup.ErrBadConfig) {
		t.Fatalf("recover of an empty data dir: %v, want startup.ErrBadConfig", err)
	}
	hw, err := Recover(cfg, backup.DefaultRecoverJump)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Layout; hw < l.TickAt(time.Now())+l.TicksIn(backup.DefaultRecoverJump)-l.TicksIn(time.Second) {
		t.Fatalf("recovered mark %d is not a jump past the clock", hw)
	}
	n := mustOpen(t, cfg)
	alone := mustLeader(t, []*Node{n})
	f := alone.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if servers := f.Configuration().Servers; len(servers) != 1 || servers[0].ID != raft.ServerID(cfg.ID) {
		t.Fatalf("configuration after recovery: %+v, want %s alone", servers, cfg.ID)
	}
	if st := alone.fsm.State(); len(st.Nodes) != 1 || st.Nodes[cfg.ID] != cfg.GRPCAddr {
		t.Fatalf("members after recovery: %v, want only %s at %s", st.Nodes, cfg.ID, cfg.GRPCAddr)
	}
	ids := mustNext(t, alone.GRPCAddr(), 10)
	mustIncrease(t, last, ids)
	if tick := cfg.Layout.Tick(ids[0]); tick < hw {
		t.Fatalf("first ID after recovery at tick %d, below the recovered mark %d", tick, hw)
	}
}

// TestBackupDefaultsAgree: package backup repeats the default reserve
// window, because it must not import server; a restore that assumed
// another window than the cluster's default would jump the mark by too
// little.
func TestBackupDefaultsAgree(t *testing.T) {
	if backup.DefaultReserveWindow != DefaultReserveWindow {
		t.Fatalf("backup.DefaultReserveWindow = %s, server.DefaultReserveWindow = %s", backup.DefaultReserveWindow, DefaultReserveWindow)
	}
}
