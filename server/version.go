package server

// The cluster version: which ops the log may hold (fsm.Reads). A node that
// meets an op it does not know stops (fsm.Unreadable), so the leader
// raises the version only once every voter says it reads the new one, and
// a cluster refuses to add a voter that does not read its version.

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
)

// versionRetry spaces out the leader's attempts to raise the version.
const versionRetry = time.Second

// readsVersion is the version a node reports it reads: 0 from nodes that
// predate cluster versions, which read version 1.
func readsVersion(reported uint32) int { return max(int(reported), 1) }

// raiseClusterVersion records fsm.Reads as the cluster's version once
// every voter reports that it reads it, and says which did not. It holds
// membershipMu, so no voter joins between the asking and the raise.
func (n *Node) raiseClusterVersion(ctx context.Context) error {
	if n.fsm.ClusterVersion() >= fsm.Reads {
		return nil
	}
	n.membershipMu.Lock()
	defer n.membershipMu.Unlock()
	servers, err := n.servers()
	if err != nil {
		return err
	}
	answers := map[string]voterAnswer{}
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.cfg.ID {
			continue
		}
		v, err := n.voterReads(ctx, string(s.ID))
		answers[string(s.ID)] = voterAnswer{reads: v, err: err}
	}
	if behind := notReading(answers, fsm.Reads); len(behind) > 0 {
		return fmt.Errorf("cluster version %d stays until every voter reads %d; not yet: %s", n.fsm.ClusterVersion(), fsm.Reads, strings.Join(behind, ", "))
	}
	if _, err := n.apply(fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.Reads}); err != nil {
		return fmt.Errorf("record cluster version %d: %w", fsm.Reads, err)
	}
	n.logger.Info("cluster version raised: every voter reads it", "version", fsm.Reads)
	return nil
}

// voterAnswer is what a voter answered when asked which version it reads.
type voterAnswer struct {
	reads int
	err   error
}

// notReading is the rule of the raise: the voters that did not answer
// that they read version want, each with why, sorted. The raise waits for
// none: a voter that cannot be asked cannot be shown to read it.
func notReading(answers map[string]voterAnswer, want int) []string {
	var behind []string
	for id, a := range answers {
		switch {
		case a.err != nil:
			behind = append(behind, fmt.Sprintf("%s (cannot tell: %v)", id, a.err))
		case a.reads < want:
			behind = append(behind, fmt.Sprintf("%s (reads %d)", id, a.reads))
		}
	}
	slices.Sort(behind)
	return behind
}

// voterReads asks voter id which cluster version it reads.
func (n *Node) voterReads(ctx context.Context, id string) (int, error) {
	addr, ok := n.fsm.NodeAddr(id)
	if !ok {
		return 0, fmt.Errorf("gRPC address unknown")
	}
	conn, err := n.peers.Get(addr)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, nodeStatusTimeout)
	defer cancel()
	info, err := api.NewAdminClient(conn).NodeStatus(ctx, &api.NodeStatusRequest{})
	if err != nil {
		return 0, err
	}
	if info.Id != id {
		return 0, fmt.Errorf("the node at %s answers as %q", addr, info.Id)
	}
	return readsVersion(info.ReadsVersion), nil
}

// checkJoinerReads refuses joining node id, which reports that it reads
// cluster version reported, if it cannot read the cluster's log: it would
// stop at the first entry of a version it does not know.
func (n *Node) checkJoinerReads(id string, reported uint32) error {
	if have, reads := n.fsm.ClusterVersion(), readsVersion(reported); reads < have {
		return fmt.Errorf("%w: node %q runs an Ordo that reads cluster version %d, and this cluster's is %d: upgrade it before it joins",
			grpcapi.ErrVersionTooOld, id, reads, have)
	}
	return nil
}

// tryRaiseVersion raises the cluster version (raiseClusterVersion) at most
// once a versionRetry, and logs what it waits for when that changes.
func (n *Node) tryRaiseVersion(ctx context.Context) {
	if n.fsm.ClusterVersion() >= fsm.Reads || time.Since(n.versionTried) < versionRetry {
		return
	}
	n.versionTried = time.Now()
	err := n.raiseClusterVersion(ctx)
	if msg := fmt.Sprint(err); err != nil && msg != n.versionWaits {
		n.logger.Info("waiting to raise the cluster version (tracked reservations need it)", "reason", msg)
		n.versionWaits = msg
	}
}
