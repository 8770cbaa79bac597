package backup

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/startup"
)

// DefaultRecoverJump is how far, beyond the margin a leader's lead allows
// (one window plus the lead bound), Recover moves the mark past the later
// of the recorded mark and the clock: room for the lost nodes' clocks to
// have been ahead of this one's.
const DefaultRecoverJump = time.Minute

// RecoverOptions describe the node Recover makes the only voter of its
// cluster: server.Recover builds them from a validated Config, with its
// defaults.
type RecoverOptions struct {
	// ID is the node's id; DataDir holds its Raft state.
	ID, DataDir string
	// RaftAddr and GRPCAddr are the addresses peers will dial (the
	// advertised ones when given); nothing listens during recovery.
	RaftAddr, GRPCAddr string
	// Raft is the node's Raft configuration, which RecoverCluster needs.
	Raft *raft.Config
	// ReserveWindow is taken to be the cluster's window; Clock reads the
	// wall clock.
	ReserveWindow time.Duration
	Clock         func() time.Time
	// Jump is how far past the margin the mark moves (DefaultRecoverJump).
	Jump time.Duration
	// DenseSkip is how far every dense sequence moves: at least what the
	// lost nodes may have handed out past this node's log. Required when
	// there is a dense sequence (fsm.ErrDenseSkip).
	DenseSkip uint64
	// Logger must not be nil.
	Logger hclog.Logger
}

// Recover makes the node of o the only voter of its cluster, for when a
// majority is lost for good and the cluster can no longer elect a leader.
// It runs offline, on the data dir, before the node opens; the node then
// starts alone and leads, and the others join it again with wiped data
// dirs.
//
// It uses raft.RecoverCluster, which rewrites the configuration without
// consensus: that is only safe if the lost nodes never come back with
// their data. Two old nodes that came back would still form a majority of
// the old configuration, elect a leader and hand out IDs beside this one.
//
// What the lost nodes handed out may lie above this node's high-water
// mark (a reservation committed by them alone), so the mark moves past
// it by the margin a restore uses: max(mark, now) + window + the lead
// bound + jump (see RestoreHighWater), with o.ReserveWindow taken to be
// the cluster's window, and the lead bound reaching at least the ceiling
// the log records (an earlier leader's, which a leader of the lost nodes
// may have handed out up to whatever its own window). The mark is read
// from the data dir, replayed by RecoverCluster into a scratch FSM, never
// from a running node.
func Recover(o RecoverOptions) (uint64, error) {
	jump := o.Jump
	if jump < 0 {
		return 0, fmt.Errorf("%w: recover jump %s is negative", startup.ErrBadConfig, jump)
	}
	has, err := startup.HasState(o.DataDir)
	if err != nil {
		return 0, err
	}
	if !has {
		return 0, fmt.Errorf("%w: %s holds no Raft state: nothing to recover", startup.ErrBadConfig, o.DataDir)
	}
	store, snaps, err := startup.OpenStores(o.DataDir, o.Logger.Named("snapshot"))
	if err != nil {
		return 0, err
	}
	defer store.Close()
	raftAddr, grpcAddr := o.RaftAddr, o.GRPCAddr
	for _, a := range []string{raftAddr, grpcAddr} {
		if err := grpcapi.CheckDialAddr(a); err != nil {
			return 0, fmt.Errorf("%w: recover needs the addresses the node will serve at: %w", startup.ErrBadConfig, err)
		}
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(raftAddr))
	defer trans.Close()
	state := &recoveringFSM{FSM: fsm.New(nil, nil), id: o.ID, grpcAddr: grpcAddr, clock: o.Clock, jump: jump, window: o.ReserveWindow, denseSkip: o.DenseSkip}
	only := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(o.ID), Address: raft.ServerAddress(raftAddr)}}}
	rc := *o.Raft
	if err := raft.RecoverCluster(&rc, state, store, store, snaps, trans, only); err != nil {
		// An entry the replay could not read holds back the snapshot
		// RecoverCluster takes, before it writes anything; Raft's error
		// does not wrap it.
		if bad := state.Unreadable(); bad != nil {
			err = bad
		} else if state.refused != nil {
			err = state.refused
		}
		return 0, fmt.Errorf("recover: %w", err)
	}
	o.Logger.Error("RECOVERED: this node is now the only voter of its cluster; the lost nodes must never start again with their data",
		"id", o.ID, "high_water", state.HighWater(), "jump", jump)
	return state.HighWater(), nil
}

// recoveringFSM is the scratch FSM RecoverCluster replays the log into.
// Before the snapshot RecoverCluster takes of it, it forgets every other
// node's address, records this node's, and moves the mark forward.
type recoveringFSM struct {
	*fsm.FSM
	id, grpcAddr string
	clock        func() time.Time
	jump, window time.Duration
	denseSkip    uint64
	// refused is why Snapshot refused, which Raft's error does not wrap.
	refused error
}

// Snapshot moves the mark and rewrites the members, then snapshots the
// result: RecoverCluster writes this snapshot as the recovered state.
func (r *recoveringFSM) Snapshot() (raft.FSMSnapshot, error) {
	st := r.State()
	if st.Layout == nil {
		return nil, fmt.Errorf("%w: the data dir records no layout: the cluster never served, create it anew", startup.ErrBadConfig)
	}
	now := r.clock()
	l := *st.Layout
	// The lost nodes' leaders may have handed out up to the ceiling the
	// log records (an earlier leader's, of a longer window), whatever
	// their own windows: the mark moves past it too.
	lead := recordedLead(l, st.ClockHigh, l.TickAt(now))
	upTo, err := RestoreHighWater(l, st.HighWater, now, now, r.jump, r.window, lead)
	if err != nil {
		return nil, err
	}
	// The jump is a decision that time has reached upTo: a leader's lead
	// is measured from there, so it is not refused for running ahead. A
	// cluster that records ceilings records the ceiling of a leader of
	// the window at upTo (recordedAt); one of an earlier version, upTo
	// itself, a clock reading.
	clock := upTo
	if max(st.ClusterVersion, 1) >= fsm.CeilingVersion {
		clock = recordedAt(l, upTo, r.window)
	}
	cmds := []fsm.Command{{Op: fsm.OpReserve, UpTo: upTo, Clock: clock}}
	for id := range st.Nodes {
		if id != r.id {
			cmds = append(cmds, fsm.Command{Op: fsm.OpDeleteNode, NodeID: id})
		}
	}
	cmds = append(cmds, fsm.Command{Op: fsm.OpSetNode, NodeID: r.id, GRPCAddr: r.grpcAddr})
	// Named sequences commit every allocation, but the lost nodes may
	// hold allocations this log lacks: each mark moves past them too.
	if err := r.JumpSequences(now, r.jump, r.denseSkip); err != nil {
		r.refused = fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
		return nil, r.refused
	}
	for _, c := range cmds {
		entry, err := fsm.Entry(c)
		if err != nil {
			return nil, err
		}
		if res, ok := r.Apply(&entry).(fsm.Result); !ok || res.Err != nil {
			return nil, fmt.Errorf("recover: apply %s: %v", c.Op, res.Err)
		}
	}
	return r.FSM.Snapshot()
}
