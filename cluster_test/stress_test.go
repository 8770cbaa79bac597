//go:build unix

package cluster_test

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

// TestKillLeaderRepeatedly SIGKILLs whichever node leads, three times in a
// row, restarting each victim before the next round.
func TestKillLeaderRepeatedly(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the first kill")
	for round := 1; round <= 3; round++ {
		old := c.mustLeader()
		c.mustKill(old)
		leader := c.mustLeader(old)
		t.Logf("round %d: %s leads after killing %s", round, leader.id, old.id)
		w.mustAcks(phaseAcks, phaseTimeout, "after a kill")
		c.mustRestart(old)
		c.mustRole(old.id, "follower", leaderTimeout)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "after the last restart")
	mustCheck(t, w.stop())
}

// TestRollingRestart stops each node in turn with SIGTERM (a leader hands
// over leadership before it exits) and starts it again, as an operator
// upgrading the cluster would.
func TestRollingRestart(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the rolling restart")
	for _, n := range c.nodes {
		c.signal(n, syscall.SIGTERM)
		if code, ok := c.waitExit(n, exitTimeout); !ok || code != 0 {
			t.Fatalf("%s after SIGTERM: exited %v, code %d; want a clean exit", n.id, ok, code)
		}
		c.mustLeader(n)
		w.mustAcks(phaseAcks, phaseTimeout, "with "+n.id+" stopped")
		c.mustRestart(n)
		c.mustRole(n.id, "follower", leaderTimeout)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "after the rolling restart")
	mustCheck(t, w.stop())
}

// TestLeaderPauseJitter pauses whichever node leads, again and again, for
// random spans around the election timeout: some pauses end before the
// others notice, some after they elected a new leader, so stale leaders
// wake up holding assigned but unconfirmed IDs.
func TestLeaderPauseJitter(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the pauses")
	deadline := time.Now().Add(6 * time.Second)
	for round := 1; time.Now().Before(deadline); round++ {
		leader := c.mustLeader()
		pause := time.Duration(50+rand.IntN(900)) * time.Millisecond
		c.pause(leader)
		time.Sleep(pause)
		c.resume(leader)
		t.Logf("round %d: paused leader %s for %v", round, leader.id, pause)
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
	}
	c.mustLeader()
	w.mustAcks(phaseAcks, phaseTimeout, "after the pauses")
	mustCheck(t, w.stop())
}
