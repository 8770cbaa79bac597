package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// TestHooks carries every behaviour that exists only so tests can provoke
// what production must never do: building the stale-leader bug, holding a
// node's address still, moving its clock. Keeping them in one struct, in
// one Config field, means there is one place to look for test-only paths
// through production code, and one thing to leave alone in production:
// the zero value turns every hook off.
type TestHooks struct {
	// UnsafeTrustReservation builds the classic stale-leader bug on
	// purpose: a node hands out IDs from its committed reservation without
	// confirming that it still leads, and keeps doing so after it lost
	// leadership (its sequencer's Log is a trustingLog, its sequencer is
	// not stopped when leadership is lost, and its gRPC service serves
	// instead of forwarding while the sequencer does). The sequencer
	// itself knows nothing of it. Tests use it to show that the history checker catches the
	// reordering this causes. ordo serve --test-unsafe-trust-reservation
	// sets it.
	UnsafeTrustReservation bool
	// UnsafeSettleEarly breaks the settled mark on purpose: a read of W
	// (Watermark, and WatchWatermark's heartbeats) answers the tracked
	// frontier, which passes every open reservation, so a writer can
	// complete a reservation after a reader saw W above it. Only what
	// the node answers changes: the FSM, every decision and the W each
	// decision carries are as in production. Tests use it to show that
	// the settled-order checker (history.CheckSettled) catches it. ordo
	// serve --test-unsafe-settle-early sets it.
	UnsafeSettleEarly bool
	// HoldAddress, while it holds true, stops the node from registering
	// its gRPC address with the leader, so a test can point the leader at
	// a fake peer in this node's place without the node correcting it.
	// It is a switch rather than a bool because a test picks the node to
	// hold only once the cluster runs and a leader is known; this
	// package's tests flip it under the node's registration lock, which
	// also waits out a registration in flight. Nil never holds.
	HoldAddress *atomic.Bool
	// ClockOffset, when not nil, is added to every reading of Config.Clock
	// (time.Now when nil), so a test can move one node's wall clock while
	// it runs. It is a source rather than a fixed duration because the
	// offset changes during a run; ordo serve --test-clock-offset-file
	// reads it from a file. It is folded into Config.Clock once, when the
	// defaults are applied, so every reader of the clock (Validate, the
	// start-up decision, Recover, the sequencer, backups) sees the same
	// shifted time.
	ClockOffset func() time.Duration
	// AfterKeyedCommit, when not nil, is called by every keyed call for
	// IDs served from this node as the leader (the default sequence's
	// Claim, a named sequence's keyed Alloc) once its entry is committed
	// and before it is answered, with its key, its sequence ("" for the
	// default), and the first tick (or value) and count it will be
	// answered with; the answer waits until it returns. Tests use it to
	// end the process between commit and answer, the crash idempotency
	// keys exist for, so that the retry can be shown to get the
	// committed answer. ordo serve --test-crash-before-keyed-answer sets
	// it. Only what the node does between commit and answer changes.
	AfterKeyedCommit func(key fsm.Keyed, seq string, first, count uint64)
}

// trustingLog is the stale-leader bug of UnsafeTrustReservation: it
// commits reservations through Raft, but confirms without asking anyone,
// in the term of its last reservation, so the sequencer answers from a
// reservation this node may no longer lead.
type trustingLog struct {
	raftLog
	term atomic.Uint64
}

func (l *trustingLog) Reserve(ctx context.Context, upTo, clock uint64) (sequencer.Reservation, error) {
	res, err := l.raftLog.Reserve(ctx, upTo, clock)
	if err == nil {
		l.term.Store(res.Term)
	}
	return res, err
}

func (l *trustingLog) Confirm(context.Context, bool) (sequencer.Confirmation, error) {
	return sequencer.Confirmation{Term: l.term.Load()}, nil
}

// earlySettle is the broken settled mark of UnsafeSettleEarly: the
// settler's answers, with every read of W raised to the frontier.
type earlySettle struct {
	*settle.Settler
	state settle.State
}

// WatermarkOf reads W as the settler does, so it fails and waits as a
// read must, then answers the frontier of the state the read saw (a
// named sequence's: its mark).
func (s earlySettle) WatermarkOf(ctx context.Context, seq string) (uint64, error) {
	w, err := s.Settler.WatermarkOf(ctx, seq)
	if err != nil {
		return w, err
	}
	if seq != "" {
		def, _ := s.state.Sequence(seq)
		return max(w, def.Next), nil
	}
	_, frontier := s.state.Marks()
	return max(w, frontier), nil
}

// Watermark is WatermarkOf the default sequence.
func (s earlySettle) Watermark(ctx context.Context) (uint64, error) {
	return s.WatermarkOf(ctx, "")
}

// settleAPI is the settler the gRPC and HTTP calls serve from: the
// settler itself, or with UnsafeSettleEarly, one that answers W early;
// with AfterKeyedCommit, its keyed calls call the hook before they are
// answered.
func (n *Node) settleAPI() grpcapi.Settle {
	var s grpcapi.Settle = n.settler
	if n.cfg.TestHooks.UnsafeSettleEarly {
		n.logger.Error("UNSAFE: reads of the settled mark answer past open reservations; tests only")
		s = earlySettle{Settler: n.settler, state: n.fsm}
	}
	if hook := n.cfg.TestHooks.AfterKeyedCommit; hook != nil {
		n.logger.Warn("TEST HOOK: keyed calls run a test's hook between commit and answer; tests only")
		s = keyedHook{Settle: s, hook: hook}
	}
	return s
}

// keyedHook is a settler whose keyed calls call AfterKeyedCommit once
// committed, before they return their answer.
type keyedHook struct {
	grpcapi.Settle
	hook func(key fsm.Keyed, seq string, first, count uint64)
}

// Claim claims as the settler does, then calls the hook with the answer.
func (s keyedHook) Claim(ctx context.Context, key fsm.Keyed, count uint64) (uint64, error) {
	first, err := s.Settle.Claim(ctx, key, count)
	if err == nil {
		s.hook(key, "", first, count)
	}
	return first, err
}

// Grants grants as the settler does, then waits for each keyed call's
// answer and calls the hook with it.
func (s keyedHook) Grants(ctx context.Context, asks []settle.Ask) []settle.Grant {
	grants := s.Settle.Grants(ctx, asks)
	for i, a := range asks {
		if a.Key.Key == "" {
			continue
		}
		select {
		case <-grants[i].Done():
		case <-ctx.Done():
			grants[i] = settle.Decided(0, ctx.Err())
			continue
		}
		first, err := grants[i].Result()
		if err == nil {
			s.hook(a.Key, a.Name, first, a.Count)
		}
		grants[i] = settle.Decided(first, err)
	}
	return grants
}

// holdsAddress reports whether HoldAddress is set and true.
func (h TestHooks) holdsAddress() bool {
	return h.HoldAddress != nil && h.HoldAddress.Load()
}

// withClock returns h with ClockOffset folded into clock, and clock
// shifted: clearing the hook keeps a Config that gets its defaults twice
// from being shifted twice.
func (h TestHooks) withClock(clock func() time.Time) (TestHooks, func() time.Time) {
	if h.ClockOffset == nil {
		return h, clock
	}
	offset := h.ClockOffset
	h.ClockOffset = nil
	return h, func() time.Time { return clock().Add(offset()) }
}
