//go:build unix

package cluster_test

import (
	"os"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
)

// Load phases: how many acknowledged operations each phase waits for, and
// how long it may take.
const (
	phaseAcks    = 50
	phaseTimeout = 10 * time.Second
)

// TestKillLeader SIGKILLs the leader under load, waits for a new leader to
// serve, restarts the killed node, and checks the whole history.
func TestKillLeader(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the fault")

	old := c.mustLeader()
	c.mustKill(old)
	leader := c.mustLeader(old)
	t.Logf("new leader %s after killing %s", leader.id, old.id)
	w.mustAcks(phaseAcks, phaseTimeout, "after the new leader was elected")

	c.mustRestart(old)
	c.mustRole(old.id, "follower", leaderTimeout)
	w.mustAcks(phaseAcks, phaseTimeout, "after the killed leader came back")

	mustCheck(t, w.stop())
}

// TestKillFollower SIGKILLs a follower under load, restarts it, and checks
// the history.
func TestKillFollower(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the fault")

	f := c.mustFollowers()[0]
	c.mustKill(f)
	w.mustAcks(phaseAcks, phaseTimeout, "with a follower down")

	c.mustRestart(f)
	c.mustRole(f.id, "follower", leaderTimeout)
	w.mustAcks(phaseAcks, phaseTimeout, "after the follower came back")

	mustCheck(t, w.stop())
}

// TestRestartWholeCluster SIGKILLs all three nodes, restarts them on the
// same data dirs, and checks one history across the restart: every ID
// handed out after it is above every ID handed out before.
func TestRestartWholeCluster(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	rec := history.NewRecorder()
	w := startWorkload(t, c.addrs(), rec, 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the restart")
	before := w.stop()

	c.mustKillAll()
	for _, n := range c.nodes {
		c.mustRestart(n)
	}
	c.mustLeader()

	w = startWorkload(t, c.addrs(), rec, 100)
	w.mustAcks(phaseAcks, phaseTimeout, "after the restart")
	all := w.stop()
	mustCheck(t, all)

	_, hiBefore, ok1 := idRange(before)
	loAfter, _, ok2 := idRange(all[len(before):])
	if !ok1 || !ok2 {
		t.Fatalf("IDs before the restart: %v, after: %v", ok1, ok2)
	}
	if loAfter <= hiBefore {
		t.Fatalf("smallest ID after the restart %d is not above the largest before %d", loAfter, hiBefore)
	}
	t.Logf("largest ID before the restart %d < smallest after %d", hiBefore, loAfter)
}

// TestClockBackOnLeader moves the leader's wall clock back an hour under
// load, then kills that leader so a node with a normal clock takes over,
// restarts it, and hands leadership back to it (its clock still an hour
// behind). The order must hold throughout.
func TestClockBackOnLeader(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{clockFiles: true})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the clock moved")

	skewed := c.mustLeader()
	if err := os.WriteFile(c.clockFile(skewed.id), []byte("-1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %s's clock back by an hour", skewed.id)
	time.Sleep(2500 * time.Millisecond) // the load keeps running
	w.mustAcks(phaseAcks, phaseTimeout, "with the leader's clock an hour back")

	c.mustKill(skewed)
	normal := c.mustLeader(skewed)
	t.Logf("%s (normal clock) leads after killing %s", normal.id, skewed.id)
	w.mustAcks(phaseAcks, phaseTimeout, "after a normal-clock leader took over")

	c.mustRestart(skewed) // its clock file still says -1h
	c.mustRole(skewed.id, "follower", leaderTimeout)
	mustTransferLeader(t, c, skewed)
	w.mustAcks(phaseAcks, phaseTimeout, "with the skewed node leading again")
	time.Sleep(time.Second)

	mustCheck(t, w.stop())
}

// TestPauseLeader SIGSTOPs the leader under load long enough for the
// others to elect a new leader, then SIGCONTs it: the stale leader wakes up
// with requests in hand and must not answer any of them out of order.
func TestPauseLeader(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the pause")

	old := c.mustLeader()
	c.pause(old)
	t.Logf("paused %s", old.id)
	leader := c.mustLeader(old)
	t.Logf("%s leads while %s is paused", leader.id, old.id)
	w.mustAcks(phaseAcks, phaseTimeout, "with the old leader paused")

	c.resume(old)
	t.Logf("resumed %s", old.id)
	c.mustRole(old.id, "follower", leaderTimeout)
	w.mustAcks(phaseAcks, phaseTimeout, "after the old leader resumed")

	mustCheck(t, w.stop())
}

// mustTransferLeader runs `ordo transfer-leader --id to.id` until the
// status names it leader. A transfer can fail while the target catches up,
// so it is retried within a deadline.
func mustTransferLeader(t *testing.T, c *cluster, to *node) {
	t.Helper()
	deadline := time.Now().Add(leaderTimeout)
	for {
		res := runOrdo(t, "transfer-leader", "--id", to.id, "--addrs", c.addrList(), "--timeout", "5s")
		if res.Code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("transfer-leader --id %s: exit code %d: %s", to.id, res.Code, res.Stderr)
		}
		t.Logf("transfer-leader --id %s: exit code %d: %s; retrying", to.id, res.Code, res.Stderr)
		time.Sleep(200 * time.Millisecond)
	}
	c.waitStatus(leaderTimeout, to.id+" leading", func(r *api.StatusResponse) bool {
		return r.LeaderId == to.id && roleOf(r, to.id) == "leader"
	})
	t.Logf("leadership moved to %s", to.id)
}
