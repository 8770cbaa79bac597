package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// recordedCeiling is the ceiling the cluster's log records (fsm.State's
// ClockHigh is a leader's ceiling less the least lead bound): any leader
// elected on this log may hand out ticks up to it, whatever its own
// window and clock.
func recordedCeiling(n *Node) uint64 {
	return n.fsm.State().ClockHigh + sequencer.MaxLeadTicks(n.cfg.Layout, 0)
}

// mustRecordCeiling waits until leader n's ceiling is recorded in the
// log: the cluster records ceilings only from the cluster version that
// every voter reads them at (fsm.CeilingVersion), which the leader
// raises once it serves. A reservation that records it reaches no
// further than it, so the recorded ceiling covers the mark; a clock
// reading, as earlier versions record, is a window short of the mark (the
// tests' windows are longer than the least lead bound). Not the
// sequencer's ceiling now: a call after the recording raises that with
// the clock, and the next recording comes a window later.
func mustRecordCeiling(t *testing.T, n *Node) {
	t.Helper()
	eventually.True(t, seqTestWait, n.ID()+" to record its lead ceiling", func() bool {
		return n.fsm.ClusterVersion() >= fsm.CeilingVersion && recordedCeiling(n) >= n.fsm.State().HighWater
	})
}

// Review 26: a recovery after a lowered --reserve-window. A leader of a
// 1 min window recorded its ceiling (2 min past its clock); the nodes run
// with 3 s now, and any of them elected on this log may hand out up to
// that ceiling. The recovered mark must start above it, as it does above
// the lost nodes' own bounds: a recovery with no jump (one clock, no
// skew) must cover every tick the lost majority may have handed out.
func TestReview26RecoverCoversTheRecordedCeiling(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.ReserveWindow = time.Minute
	n := mustBootstrap(t, cfg)
	mustNext(t, n.GRPCAddr(), 10)
	mustRecordCeiling(t, n)
	ceiling := recordedCeiling(n)
	if own := cfg.Layout.TickAt(time.Now()) + sequencer.MaxLeadTicks(cfg.Layout, 3*time.Second); ceiling <= own {
		t.Fatalf("the 1 min leader recorded a ceiling %d not past a 3 s leader's own %d", ceiling, own)
	}
	cfg.RaftAddr, cfg.GRPCAddr = n.RaftAddr(), n.GRPCAddr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.ReserveWindow = 3 * time.Second // lowered: the lost nodes ran so too
	hw, err := Recover(cfg, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if hw <= ceiling {
		t.Fatalf("recovered mark %d is %s below the ceiling %d the log records, up to which the lost nodes' leaders may have handed out IDs",
			hw, time.Duration((ceiling-hw)>>cfg.Layout.SeqBits)*time.Millisecond*time.Duration(cfg.Layout.UnitMs), ceiling)
	}
}

// Review 26: a backup taken on a leader whose sequencer has not served
// yet in its term (Raft elected it; it is still becoming ready) records
// the lead bound of that sequencer's state, which lacks the ceiling an
// earlier leader recorded. A cluster restored from it, with no jump (one
// clock, no skew), must still start above every tick the old cluster may
// hand out after the copy: up to the recorded ceiling.
func TestReview26BackupBeforeServingCountsTheRecordedCeiling(t *testing.T) {
	nodes := mustClusterWith(t, func(cfg *Config) {
		if cfg.ID == "n1" {
			cfg.ReserveWindow = time.Minute
		}
	})
	leader := mustLeader(t, nodes)
	if leader.ID() != "n1" {
		t.Fatalf("leader %s, want n1, the node of the 1 min window", leader.ID())
	}
	mustNext(t, leader.GRPCAddr(), 10)
	mustRecordCeiling(t, leader)
	x := nodes[1] // 3 s, never led

	// Hold x before it serves: becoming ready takes membershipMu
	// (forgetRemoved) before the sequencer leads.
	x.membershipMu.Lock()
	var once sync.Once
	release := func() { once.Do(x.membershipMu.Unlock) }
	t.Cleanup(release)
	if err := leader.TransferLeadership(x.ID()); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, seqTestWait, "x to lead", x.IsLeader)
	if x.seq.Serving() {
		t.Fatal("x serves before becoming ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := x.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release()

	l := x.cfg.Layout
	taken := time.UnixMilli(resp.TakenUnixMs)
	window := max(time.Duration(resp.ReserveWindowMs)*time.Millisecond, backup.DefaultReserveWindow)
	restored, err := backup.RestoreHighWater(l, resp.HighWater, taken, taken, 0, window, resp.LeadBoundTicks)
	if err != nil {
		t.Fatal(err)
	}
	ceiling := recordedCeiling(x)
	served := mustLeader(t, nodes)
	st := served.seq.State()
	if reach := st.ClockHigh + st.MaxLead; reach < ceiling {
		t.Fatalf("the leader after the copy reaches only %d, below the recorded ceiling %d", reach, ceiling)
	}
	if restored <= ceiling {
		t.Fatalf("a restore from the backup starts at %d, below the ceiling %d up to which the old cluster's leaders may still hand out IDs (lead bound %d recorded)",
			restored, ceiling, resp.LeadBoundTicks)
	}
}

// Review 26: a cluster restored with a reserve window longer than 5 s
// hands out what the restore said it would (AheadAllowance: the lead bound
// of that window past the restored mark) before the clock reaches the
// mark; before the ceiling, the restored mark counted as a clock reading,
// and leaders measured their own lead bound from it.
func TestReview26RestoredClusterServesItsAllowance(t *testing.T) {
	const window = 30 * time.Second
	old := mustBootstrap(t, testConfig(t, "n1", t.TempDir()))
	mustNext(t, old.GRPCAddr(), 10)
	resp := mustBackup(t, old.GRPCAddr())
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := backup.NewFile(resp)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := freeaddr.Loopback(t, 1)[0]
	dir := t.TempDir()
	res, err := backup.Restore(backup.RestoreOptions{Backup: b, DataDir: dir, ID: "r1", RaftAddr: raftAddr, GRPCAddr: "127.0.0.1:2",
		Jump: time.Minute, ReserveWindow: window})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "r1", dir)
	cfg.RaftAddr, cfg.ReserveWindow = raftAddr, window
	r1 := mustLeader(t, []*Node{mustOpen(t, cfg)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from := r1.seq.State().Next
	bound := res.HighWater + res.AheadAllowance
	if from >= bound {
		t.Fatalf("next tick %d already past the allowance's end %d", from, bound)
	}
	if _, err := r1.seq.Next(ctx, bound-from); err != nil {
		t.Fatalf("IDs up to the allowance the restore printed (%d ticks past the mark): %v", res.AheadAllowance, err)
	}
}

// Review 26: a node recovered with a reserve window longer than 5 s
// serves its lead bound past the recovered mark at once, as it did when
// the recovery recorded the mark as a clock reading; not only the least
// bound (10 s) past it until the clock catches up.
func TestReview26RecoveredNodeServesItsLeadBound(t *testing.T) {
	const window = 30 * time.Second
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.ReserveWindow = window
	n := mustBootstrap(t, cfg)
	mustNext(t, n.GRPCAddr(), 10)
	mustRecordCeiling(t, n) // a cluster that records ceilings
	cfg.RaftAddr, cfg.GRPCAddr = n.RaftAddr(), n.GRPCAddr()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	hw, err := Recover(cfg, backup.DefaultRecoverJump, 0)
	if err != nil {
		t.Fatal(err)
	}
	alone := mustLeader(t, []*Node{mustOpen(t, cfg)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	from := alone.seq.State().Next
	bound := hw + sequencer.MaxLeadTicks(cfg.Layout, window)
	if from >= bound {
		t.Fatalf("next tick %d already past the lead bound's end %d", from, bound)
	}
	if _, err := alone.seq.Next(ctx, bound-from); err != nil {
		t.Fatalf("IDs up to the lead bound past the recovered mark: %v", err)
	}
}
