package server

// The Backup call: the leader's copy of the replicated state, which
// package backup writes to a file and restores from. Why the copy covers
// every ID handed out before it: see package backup.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// backup copies the replicated state on the leader: Barrier, read, then a
// confirmation round in the same term as the Barrier.
func (n *Node) Backup(ctx context.Context) (*api.BackupResponse, error) {
	term := n.raft.CurrentTerm()
	if n.raft.State() != raft.Leader {
		return nil, sequencer.ErrNotLeader
	}
	timeout := n.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	if err := n.raft.Barrier(timeout).Error(); err != nil {
		return nil, fmt.Errorf("barrier: %w", err)
	}
	st := n.fsm.State()
	seqs, seqW := n.fsm.SequencesSettled() // together: no W above its mark
	applied := n.raft.AppliedIndex()
	taken := n.cfg.Clock()
	if st.Layout == nil {
		return nil, grpcapi.ErrNotReady
	}
	confirmed, err := n.confirm(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("confirm leadership: %w", err)
	}
	if confirmed.Term != term {
		return nil, fmt.Errorf("%w: confirmed in term %d, the state was read in term %d", sequencer.ErrNotLeader, confirmed.Term, term)
	}
	// The lead bound counts the ceiling the log records (ClockHigh plus
	// the least bound), past the clock at the copy, besides the
	// sequencer's: a leader elected on this state may hand out up to it,
	// and the sequencer's state lacks it while this node has not yet
	// served in its term (Raft elected it; it is still becoming ready).
	lead := n.seq.State().MaxLead
	if recorded := st.ClockHigh + sequencer.MaxLeadTicks(*st.Layout, 0); recorded > st.Layout.TickAt(taken) {
		lead = max(lead, recorded-st.Layout.TickAt(taken))
	}
	n.logger.Info("backup taken", "term", term, "applied_index", applied, "high_water", st.HighWater)
	return &api.BackupResponse{
		ClusterId:    st.ClusterID,
		Layout:       st.Layout.String(),
		Group:        st.Group,
		HighWater:    st.HighWater,
		Members:      st.Nodes,
		LeaderId:     n.cfg.ID,
		Term:         term,
		AppliedIndex: applied,
		TakenUnixMs:  taken.UnixMilli(),
		// What bounds the IDs handed out after the copy, as this
		// leader sees it (per-node settings: a restore takes the larger of
		// these and its own).
		ReserveWindowMs:    n.cfg.ReserveWindow.Milliseconds(),
		LeadBoundTicks:     lead,
		MaxCount:           n.cfg.MaxCount,
		WatermarkTick:      st.Tracking.Settled,
		Sequences:          sequenceInfos(seqs),
		SequenceWatermarks: seqW,
	}, nil
}

// sequenceInfos is every named sequence as a backup carries it.
func sequenceInfos(m map[string]*fsm.Sequence) []*api.SequenceInfo {
	var out []*api.SequenceInfo
	for name, s := range m {
		out = append(out, &api.SequenceInfo{Name: name, Kind: s.Kind, Group: s.Group, Start: s.Start, Next: s.Next, Dropped: s.Dropped})
	}
	slices.SortFunc(out, func(a, b *api.SequenceInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
