package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
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

	if _, err := Recover(testConfig(t, "empty", t.TempDir()), time.Minute, 0); !errors.Is(err, startup.ErrBadConfig) {
		t.Fatalf("recover of an empty data dir: %v, want startup.ErrBadConfig", err)
	}
	hw, err := Recover(cfg, backup.DefaultRecoverJump, 0)
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

// A recovery moves every named sequence past what the lost nodes may have
// handed out: a layout sequence by the clock and the jump, a dense one by
// the skip the operator gives, without which it refuses.
func TestRecoverMovesNamedSequences(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads sequences", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, def := range []*api.CreateSequenceRequest{{Name: "dense", Kind: "dense"}, {Name: "stamps", Kind: "default", Group: 3}} {
		if err := leader.CreateSequence(ctx, def); err != nil {
			t.Fatal(err)
		}
	}
	seq := api.NewSequencerClient(grpctest.Dial(t, leader.GRPCAddr()))
	var lastDense uint64
	for range 3 {
		resp, err := seq.Next(ctx, &api.NextRequest{Count: 5, Sequence: "dense"})
		if err != nil {
			t.Fatal(err)
		}
		ids := idsOf(t, resp.Runs)
		lastDense = ids[len(ids)-1]
	}
	cfg := leader.cfg
	cfg.RaftAddr, cfg.GRPCAddr = leader.RaftAddr(), leader.GRPCAddr()
	for _, n := range nodes {
		n.Close()
	}
	if _, err := Recover(cfg, time.Minute, 0); !errors.Is(err, fsm.ErrDenseSkip) {
		t.Fatalf("recover with a dense sequence and no skip: %v, want fsm.ErrDenseSkip", err)
	}
	if _, err := Recover(cfg, time.Minute, 1000); err != nil {
		t.Fatal(err)
	}
	alone := mustLeader(t, []*Node{mustOpen(t, cfg)})
	eventually.True(t, seqTestWait, "the recovered node to serve sequences", func() bool {
		_, err := api.NewSequencerClient(grpctest.Dial(t, alone.GRPCAddr())).Next(ctx, &api.NextRequest{Count: 1, Sequence: "dense"})
		return err == nil
	})
	d, _ := alone.fsm.Sequence("dense")
	if d.Next < lastDense+1000 {
		t.Fatalf("dense sequence recovered at %d, want at least %d (its last value %d and the skip)", d.Next, lastDense+1001, lastDense)
	}
	s, _ := alone.fsm.Sequence("stamps")
	if min := s.Layout.TickAt(time.Now().Add(time.Minute)); s.Next < min {
		t.Fatalf("layout sequence recovered at tick %d, below the clock plus the jump %d", s.Next, min)
	}
}
