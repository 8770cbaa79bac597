//go:build unix

package cluster_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
)

// Load phases: how many acknowledged operations each phase waits for, and
// how long it may take.
const (
	phaseAcks    = 50
	phaseTimeout = 10 * time.Second
)

// TestClockBackOnLeader moves the leader's wall clock back an hour under
// load, then kills that leader so a node with a normal clock takes over,
// restarts it, and hands leadership back to it (its clock still an hour
// behind). The order must hold throughout.
func TestClockBackOnLeader(t *testing.T) {
	c, w := mustLoadedCluster(t, "before the clock moved")

	skewed := c.mustLeader()
	if err := os.WriteFile(skewed.ClockFile, []byte("-1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %s's clock back by an hour", skewed.Name)
	time.Sleep(2500 * time.Millisecond) // the load keeps running
	w.mustAcks(phaseAcks, phaseTimeout, "with the leader's clock an hour back")

	c.mustKill(skewed)
	normal := c.mustLeader(skewed)
	t.Logf("%s (normal clock) leads after killing %s", normal.Name, skewed.Name)
	w.mustAcks(phaseAcks, phaseTimeout, "after a normal-clock leader took over")

	c.mustRestart(skewed) // its clock file still says -1h
	c.mustRole(skewed.Name, "follower", leaderTimeout)
	mustTransferLeader(t, c, skewed)
	w.mustAcks(phaseAcks, phaseTimeout, "with the skewed node leading again")
	time.Sleep(time.Second)

	mustCheck(t, w.stop())
}

// mustTransferLeader runs `ordo transfer-leader --id to.Name` until the
// status names it leader. A transfer can fail while the target catches up,
// and an election of the cluster's own can move leadership elsewhere just
// after a transfer succeeds, so both are retried within a deadline.
func mustTransferLeader(t *testing.T, c *cluster, to *node) {
	t.Helper()
	leads := func(r *api.StatusResponse) bool { return r.LeaderId == to.Name && roleOf(r, to.Name) == "leader" }
	for deadline := time.Now().Add(2 * leaderTimeout); ; time.Sleep(200 * time.Millisecond) {
		res := runOrdo(t, "transfer-leader", "--id", to.Name, "--addrs", c.addrList(), "--timeout", "5s")
		if res.Code == 0 {
			last, err, ok := c.pollStatus(5*time.Second, leads)
			if ok {
				break
			}
			res.Stderr = fmt.Sprintf("succeeded, but %s does not lead (last status %v, last error %v)", to.Name, last, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("transfer-leader --id %s: exit code %d: %s", to.Name, res.Code, res.Stderr)
		}
		t.Logf("transfer-leader --id %s: exit code %d: %s; retrying", to.Name, res.Code, res.Stderr)
	}
	t.Logf("leadership moved to %s", to.Name)
}
