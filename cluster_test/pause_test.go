//go:build unix

package cluster_test

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"
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
	c, w := mustLoadedCluster(t, "before the stall")

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

// TestLeaderPauseJitter pauses whichever node leads, again and again, for
// random spans around the election timeout: some pauses end before the
// others notice, some after they elected a new leader, so stale leaders
// wake up holding assigned but unconfirmed IDs.
func TestLeaderPauseJitter(t *testing.T) {
	c, w := mustLoadedCluster(t, "before the pauses")
	deadline := time.Now().Add(6 * time.Second)
	for round := 1; time.Now().Before(deadline); round++ {
		leader := c.mustLeader()
		pause := time.Duration(50+rand.IntN(900)) * time.Millisecond
		c.pause(leader)
		time.Sleep(pause)
		c.resume(leader)
		t.Logf("round %d: paused leader %s for %v", round, leader.Name, pause)
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
	}
	c.mustLeader()
	w.mustAcks(phaseAcks, phaseTimeout, "after the pauses")
	mustCheck(t, w.stop())
}
