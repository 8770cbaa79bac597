package server

// Applying: the node's path into the replicated log (apply), and the
// FSM's calls back into the node, which make it refuse to serve for good
// (refuse, Refusal).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
)

// checkLayout is called by the FSM whenever the cluster's layout becomes
// known. A node whose own layout differs must not serve: IDs made with two
// layouts do not sort as one sequence.
func (n *Node) checkLayout(l layout.Layout, group uint64) {
	if l == n.cfg.Layout && group == n.cfg.Group {
		return
	}
	n.refuse(fmt.Errorf("%w: this node is configured with layout %s group %d, but the cluster was created with layout %s group %d",
		grpcapi.ErrLayoutMismatch, n.cfg.Layout, n.cfg.Group, l, group))
}

func (n *Node) refuse(err error) {
	n.fatalOnce.Do(func() {
		if errors.Is(err, ErrRemoved) {
			n.logger.Info("this node was removed from the cluster; stopping. To serve in it again, empty its data dir and start it with --join (or add it with ordo join)")
		} else {
			n.logger.Error("refusing to serve", "error", err)
		}
		n.refuseErr = err
		close(n.refused)
		n.seq.StepDown()
		n.fatal <- err
	})
}

// refusal returns the error that made this node refuse to serve, or nil.
func (n *Node) Refusal() error {
	select {
	case <-n.refused:
		return n.refuseErr
	default:
		return nil
	}
}

// apply commits a command and returns the FSM's result.
func (n *Node) apply(c fsm.Command) (fsm.Result, error) {
	return n.applyCtx(context.Background(), c)
}

// applyCtx is apply, giving up on entering the log when ctx ends. Once in
// the log, an entry commits or fails with leadership; Raft has no way to
// withdraw it.
func (n *Node) applyCtx(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	entry, err := fsm.Entry(c)
	if err != nil {
		return fsm.Result{}, err
	}
	timeout := n.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	f := n.raft.ApplyLog(entry, timeout)
	if err := f.Error(); err != nil {
		return fsm.Result{}, err
	}
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("unexpected FSM response %T", f.Response())
	}
	return res, res.Err
}
