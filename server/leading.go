package server

// Leading: Raft's leadership turned into the sequencer's lifecycle
// (watchLeadership, lead), a new leader's duties (becomeReady), handing
// leadership over, and the rounds of package leadership that prove this
// node still leads before it answers (confirm).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/leadership"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

// openConfirmer wires package leadership to this node: its Raft, its
// addresses and peer connections, and store, Raft's stable store, for the
// restart hold. It runs before Raft starts and before the gRPC address is
// known, so the views below read the node at each call.
func (n *Node) openConfirmer(store raft.StableStore) (*leadership.Confirmer, error) {
	return leadership.Open(leadership.Config{
		ID:      n.cfg.ID,
		Lease:   n.cfg.Lease,
		Timeout: n.cfg.ApplyTimeout,
		Raft:    raftView{n},
		Node:    leadershipView{n},
		Store:   store,
		Logger:  n.logger,
	})
}

// raftView is package leadership's view of this node's Raft.
type raftView struct{ n *Node }

func (v raftView) CurrentTerm() uint64 { return v.n.raft.CurrentTerm() }
func (v raftView) Leads() bool         { return v.n.IsLeader() }

func (v raftView) Leader() string {
	_, id := v.n.raft.LeaderWithID()
	return string(id)
}

func (v raftView) Voters() ([]string, error) {
	servers, err := v.n.servers()
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return ids, nil
}

// leadershipView is package leadership's view of the rest of this node.
type leadershipView struct{ n *Node }

func (v leadershipView) ClusterID() string { return v.n.ClusterID() }
func (v leadershipView) GRPCAddr() string  { return v.n.grpcAddr }

func (v leadershipView) NodeAddr(id string) (string, bool) { return v.n.fsm.NodeAddr(id) }

// Conn is a grpcapi.Peers connection: it names this node's cluster and, in
// plaintext with an admin token, sends the token (see grpcapi.Auth.MayRelease).
func (v leadershipView) Conn(addr string) (grpc.ClientConnInterface, error) {
	return v.n.peers.Get(addr)
}

func (v leadershipView) MayRelease(ctx context.Context) bool { return v.n.auth.MayRelease(ctx) }

// watchLeadership turns Raft's leadership notifications into the
// sequencer's lifecycle: each time this node wins, a lead loop runs until
// it loses.
func (n *Node) watchLeadership(notify <-chan bool) {
	defer n.wg.Done()
	var (
		cancel = context.CancelFunc(func() {})
		done   chan struct{}
	)
	stopLeading := func() {
		cancel()
		if done != nil {
			<-done
			done = nil
		}
		n.settler.StepDown()
		if !n.cfg.TestHooks.UnsafeTrustReservation {
			n.seq.StepDown()
		}
	}
	defer stopLeading()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-notify:
			n.metrics.LeaderChanged()
			stopLeading()
			if !leader {
				n.logger.Info("lost leadership")
				n.confirmer.Release()
				continue
			}
			n.logger.Info("won leadership")
			ctx, c := context.WithCancel(context.Background())
			cancel, done = c, make(chan struct{})
			go func() { defer close(done); n.lead(ctx) }()
		}
	}
}

// lead keeps the sequencer serving while this node leads: Barrier so that
// every earlier entry is applied, record the layout if this is a new
// cluster, register addresses, then commit a fresh reservation. It starts
// over whenever the sequencer stops serving (a failed confirmation) while
// Raft still says this node leads.
func (n *Node) lead(ctx context.Context) {
	for ctx.Err() == nil {
		if n.Refusal() != nil {
			// Let a node that can serve lead instead.
			if err := n.handOver(n.raft.LeadershipTransfer); err != nil {
				n.logger.Warn("refusing node could not hand over leadership", "error", err)
				sleepCtx(ctx, time.Second)
			}
		} else if !n.seq.Serving() {
			// A refusal was logged as one, and is handed over next.
			if err := n.becomeReady(ctx); err != nil && ctx.Err() == nil && n.Refusal() == nil {
				n.logger.Warn("not ready to serve yet", "error", err)
			}
		} else {
			n.seq.RenewIfLow()
			n.tryRaiseVersion(ctx)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// handOver ends the lease and releases the voters' promises before it
// transfers leadership with transfer, so the next leader need not wait
// them out.
func (n *Node) handOver(transfer func() raft.Future) error {
	n.seq.EndLease()
	n.confirmer.Release()
	err := transfer().Error()
	if err != nil && n.IsLeader() {
		n.seq.ResumeLease()
	}
	return err
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (n *Node) becomeReady(ctx context.Context) error {
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	st := n.fsm.State()
	if st.Layout == nil {
		l := n.cfg.Layout
		id, err := fsm.NewClusterID()
		if err != nil {
			return err
		}
		if _, err := n.apply(fsm.Command{Op: fsm.OpInit, Layout: &l, Group: n.cfg.Group, ClusterID: id}); err != nil {
			return fmt.Errorf("record layout: %w", err)
		}
	}
	if err := n.Refusal(); err != nil {
		return err
	}
	if err := n.registerAddrs(st.Nodes); err != nil {
		return err
	}
	if err := n.forgetRemoved(); err != nil {
		return err
	}
	// A round before serving, so that a leader whose voters hold another
	// cluster refuses even if no client reaches it but through them
	// (they forward naming their cluster, which it refuses). Any other
	// failure is left to the rounds of the first requests, as before.
	if _, err := n.confirm(ctx, false); errors.Is(err, leadership.ErrOtherCluster) {
		return err
	}
	// The bootstrap list is registered once: a peer removed later must
	// not come back with this node's next term.
	n.mu.Lock()
	n.bootstrapPeers = nil
	n.mu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := n.seq.Lead(ctx, n.fsm.HighWater()); err != nil {
		return err
	}
	n.settler.Lead()
	return nil
}

// confirm runs a confirmation round (leadership.Confirmer.Confirm). A
// round that a majority of the voters refused as nodes of another cluster
// means this node's state names another cluster than the members it
// leads: it refuses to serve, and lead hands leadership over. It would
// otherwise keep winning elections it cannot serve in, its rounds failing
// for good.
func (n *Node) confirm(ctx context.Context, askLease bool) (sequencer.Confirmation, error) {
	c, err := n.confirmer.Confirm(ctx, askLease)
	if errors.Is(err, leadership.ErrOtherCluster) {
		n.refuse(fmt.Errorf("%w: %w. This node's data dir is another cluster's: stop it, move the data dir aside, "+
			"remove it from the cluster (ordo remove --id %s), and start it with an empty data dir and --join",
			startup.ErrOtherCluster, err, n.cfg.ID))
	}
	return c, err
}

// raftLog is the Sequencer's view of Raft.
type raftLog struct{ n *Node }

func (l raftLog) Reserve(ctx context.Context, upTo, clock uint64) (sequencer.Reservation, error) {
	start := time.Now()
	res, err := l.n.applyCtx(ctx, fsm.Command{Op: fsm.OpReserve, UpTo: upTo, Clock: clock})
	l.n.metrics.Reserved(time.Since(start), err)
	return sequencer.Reservation{Prev: res.Prev, HighWater: res.HighWater, ClockHigh: res.ClockHigh, PrevClock: res.PrevClock, Term: res.Term}, err
}

// RecordsCeilings implements sequencer.CeilingLog: every voter reads a
// reservation's reading as a lead ceiling once the cluster version says
// so (fsm.CeilingVersion).
func (l raftLog) RecordsCeilings() bool { return l.n.fsm.ClusterVersion() >= fsm.CeilingVersion }

// Settle proposes a settle entry. Called from the settler's one loop, so
// entries enter the log in the order it proposes them.
func (l raftLog) Settle(c fsm.Command) settle.Pending {
	entry, err := fsm.Entry(c)
	if err != nil {
		return settled{err: err}
	}
	return settled{f: l.n.raft.ApplyLog(entry, l.n.cfg.ApplyTimeout)}
}

// settled is a proposed settle entry (settle.Pending).
type settled struct {
	f   raft.ApplyFuture
	err error
}

func (s settled) Result() (fsm.Result, error) {
	if s.err != nil {
		return fsm.Result{}, s.err
	}
	if err := s.f.Error(); err != nil {
		return fsm.Result{}, err
	}
	res, ok := s.f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("unexpected FSM response %T", s.f.Response())
	}
	return res, nil
}

func (l raftLog) Confirm(ctx context.Context, askLease bool) (sequencer.Confirmation, error) {
	start := time.Now()
	c, err := l.n.confirm(ctx, askLease)
	l.n.metrics.Confirmed(time.Since(start), err)
	return c, err
}

// leader returns the leader's id and gRPC address, as far as this node
// knows.
func (n *Node) Leader() (id, addr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	if string(lid) == n.cfg.ID {
		return n.cfg.ID, n.grpcAddr
	}
	a, _ := n.fsm.NodeAddr(string(lid))
	return string(lid), a
}

// Leads reports whether this node serves the calls only a leader serves
// (grpcapi.Node): while Raft says it leads. Under
// TestHooks.UnsafeTrustReservation also while its sequencer still serves
// a reservation after Raft has moved on: the stale-leader bug
// (trustingLog).
func (n *Node) Leads() bool {
	return n.IsLeader() || (n.cfg.TestHooks.UnsafeTrustReservation && n.seq.Serving())
}

// IsLeader reports whether Raft says this node leads (grpcapi.Cluster).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// transferLeader hands leadership, on the leader, to member id, or to
// whichever voter Raft picks when id is "", through handOver, which stops
// the sequencer first. Naming this node, the leader, changes nothing.
func (n *Node) TransferLeadership(id string) error {
	if id == "" {
		return n.handOver(n.raft.LeadershipTransfer)
	}
	if id == n.cfg.ID {
		return nil // already leads
	}
	servers, err := n.servers()
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	for _, srv := range servers {
		if string(srv.ID) == id {
			return n.handOver(func() raft.Future { return n.raft.LeadershipTransferToServer(srv.ID, srv.Address) })
		}
	}
	return fmt.Errorf("%w: %q is not a member", grpcapi.ErrUnknownNode, id)
}
