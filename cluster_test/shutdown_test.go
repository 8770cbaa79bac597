package cluster_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

// stopBound is how long a node may take to stop on SIGTERM with a stalled
// peer: Close's hand-over and Raft shutdown bounds (5 s and 10 s), the
// gRPC drain (2 s), and as much again for a loaded machine. A deadline,
// not a measure of speed.
const stopBound = 45 * time.Second

// TestTerminateWithAStalledPeer: the leader stops on SIGTERM while one
// follower is paused (its kernel accepts Raft's connections and nobody
// reads them, so replication to it stalls), and the others then serve in
// order once the follower resumes.
func TestTerminateWithAStalledPeer(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	rec := history.NewRecorder()
	w := startWorkload(t, c.addrs(), rec, 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the stall")

	leader := c.mustLeader()
	stalled := c.mustFollowers()[0]
	c.pause(stalled)
	t.Logf("paused %s", stalled.Name)
	w.mustAcks(phaseAcks, phaseTimeout, "with a follower stalled")

	c.signal(leader, syscall.SIGTERM)
	code, exited := leader.WaitExit(stopBound)
	if !exited {
		t.Fatalf("%s still runs %v after SIGTERM with %s stalled\n%s", leader.Name, stopBound, stalled.Name, c.output(leader))
	}
	if code != 0 || !strings.Contains(c.output(leader), "shutting down") {
		t.Fatalf("%s exited with code %d after SIGTERM\n%s", leader.Name, code, c.output(leader))
	}
	c.resume(stalled)
	t.Logf("resumed %s", stalled.Name)
	c.mustLeader(leader)
	w.mustAcks(phaseAcks, phaseTimeout, "after the leader stopped")
	mustCheck(t, w.stop())
}
