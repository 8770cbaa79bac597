//go:build unix

package cluster_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

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
		t.Logf("round %d: paused leader %s for %v", round, leader.Name, pause)
		time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond)
	}
	c.mustLeader()
	w.mustAcks(phaseAcks, phaseTimeout, "after the pauses")
	mustCheck(t, w.stop())
}
