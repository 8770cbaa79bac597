//go:build unix

package cluster_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
)

// TestMembership adds a fourth node with --join, removes it with
// `ordo remove`, moves leadership with `ordo transfer-leader`, and checks
// that `ordo join`, sent to a follower, refuses a member's id; all under a
// checked workload.
func TestMembership(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the join")

	leader := c.mustLeader()
	n4 := c.newNode("n4", append([]string{"--join", leader.grpcAddr}, fastTimers...)...)
	c.mustStart(n4)
	c.waitStatus(leaderTimeout, "n4 as a voting follower", func(r *api.StatusResponse) bool {
		for _, n := range r.Nodes {
			if n.Id == "n4" {
				return n.Voter && n.Role == "follower" && n.GrpcAddr == n4.grpcAddr && n.RaftAddr == n4.raftAddr
			}
		}
		return false
	})
	t.Log("n4 joined as a voter")
	w.mustAcks(phaseAcks, phaseTimeout, "with four nodes")

	res := mustRunOrdo(t, "remove", "--id", "n4", "--addrs", c.addrList(), "--timeout", "10s")
	if !strings.Contains(res.Stdout, "removed n4") {
		t.Errorf("ordo remove --id n4: stdout %q, want it to say \"removed n4\"", res.Stdout)
	}
	c.waitStatus(leaderTimeout, "three nodes without n4", func(r *api.StatusResponse) bool {
		if len(r.Nodes) != 3 {
			return false
		}
		for _, n := range r.Nodes {
			if n.Id == "n4" || n.Role == "unreachable" {
				return false
			}
		}
		return true
	})
	t.Log("n4 removed")
	if code, exited := c.waitExit(n4, leaderTimeout); !exited || code != 0 {
		t.Errorf("removed n4: exited %v with code %d, want 0 by itself", exited, code)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "after the removal")

	to := c.mustFollowers()[0]
	mustTransferLeader(t, c, to)
	w.mustAcks(phaseAcks, phaseTimeout, "after the transfer")

	// `ordo join` sent to a follower reaches the leader, which refuses a
	// member's id: a node that asks to join under a member's name has lost
	// its data (see TestLostDataDir).
	follower := c.mustFollowers()[0]
	res = runOrdo(t, "join", "--id", follower.id, "--raft-addr", follower.raftAddr, "--grpc-addr", follower.grpcAddr,
		"--addrs", c.mustFollowers()[1].grpcAddr, "--timeout", "10s")
	if res.Code == 0 || !strings.Contains(res.Stderr, "remove it first") {
		t.Errorf("ordo join of member %s through a follower: exit %d, stderr %q; want a refusal naming the fix", follower.id, res.Code, res.Stderr)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "after the refused join")

	mustCheck(t, w.stop())
}

// TestRemoveLeader removes the current leader with `ordo remove` under
// load: it steps down and the other two carry on as a two-voter cluster.
// The removed process is stopped before the status is read (see
// TestRemovedNodeStatus for why).
func TestRemoveLeader(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the removal")

	old := c.mustLeader()
	res := mustRunOrdo(t, "remove", "--id", old.id, "--addrs", c.addrList(), "--timeout", "10s")
	t.Logf("ordo remove --id %s (the leader): %s", old.id, strings.TrimSpace(res.Stdout))
	w.mustAcks(phaseAcks, phaseTimeout, "after the leader was removed")
	if code, exited := c.waitExit(old, leaderTimeout); !exited || code != 0 {
		t.Errorf("removed leader %s: exited %v with code %d, want 0 by itself", old.id, exited, code)
	}
	resp := c.waitStatus(leaderTimeout, "two voters without "+old.id, func(r *api.StatusResponse) bool {
		if len(r.Nodes) != 2 || r.LeaderId == "" || r.LeaderId == old.id || roleOf(r, r.LeaderId) != "leader" {
			return false
		}
		for _, n := range r.Nodes {
			if n.Id == old.id || !n.Voter || n.Role == "unreachable" {
				return false
			}
		}
		return true
	})
	t.Logf("%s leads two voters after %s was removed", resp.LeaderId, old.id)
	w.mustAcks(phaseAcks, phaseTimeout, "after the removed node stopped")
	mustCheck(t, w.stop())
}

// TestRemovedNodeStatus removes the leader and checks that its process
// stops by itself with exit code 0 (a lingering removed node would answer
// every client "no leader"), and that `ordo status` with the removed node
// first in --addrs still finds the leader.
func TestRemovedNodeStatus(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	old := c.mustLeader()
	mustRunOrdo(t, "remove", "--id", old.id, "--addrs", c.addrList(), "--timeout", "10s")
	code, exited := c.waitExit(old, leaderTimeout)
	if !exited || code != 0 {
		t.Fatalf("removed node %s: exited %v with code %d, want it to exit 0 by itself within %v:\n%s",
			old.id, exited, code, leaderTimeout, c.output(old))
	}
	addrs := old.grpcAddr + "," + c.addrList()
	deadline := time.Now().Add(leaderTimeout)
	for {
		res := runOrdo(t, "status", "--json", "--addrs", addrs, "--timeout", "5s")
		var st struct {
			LeaderID string `json:"leader_id"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
			t.Fatalf("ordo status --json: %v: %q", err, res.Stdout)
		}
		if st.LeaderID != "" && st.LeaderID != old.id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ordo status --addrs %s still reports leader_id %q %v after removing %s (process running: %v):\n%s",
				addrs, st.LeaderID, leaderTimeout, old.id, old.running(), res.Stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLostDataDir: a node whose data dir is lost must not come back as a
// voter with an empty log (it could elect a leader that missed committed
// reservations). Restarted with its usual --bootstrap line it refuses and
// exits; with that line plus --join (one line for every start, as in the
// Kubernetes example) it is refused too while it is a member; after `ordo
// remove` the same line makes it join again, and makes a node the list
// does not name join as well; all under a checked workload.
func TestLostDataDir(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the loss")

	lost := c.mustFollowers()[0]
	c.mustKill(lost)
	if err := os.RemoveAll(lost.dataDir); err != nil {
		t.Fatal(err)
	}
	c.mustRestart(lost) // the same command line, --bootstrap included
	code, exited := c.waitExit(lost, exitTimeout)
	if !exited || code == 0 || !strings.Contains(c.output(lost), "holds Raft state") {
		t.Fatalf("%s with an empty data dir and --bootstrap: exited %v code %d, want a refusal\n%s", lost.id, exited, code, c.output(lost))
	}
	w.mustAcks(phaseAcks, phaseTimeout, "while the node is refused")

	saved := lost.args
	everyStart := append(append([]string{}, saved...), "--join", c.addrList())
	lost.args = everyStart
	c.mustRestart(lost)
	code, exited = c.waitExit(lost, exitTimeout)
	if !exited || code == 0 || !strings.Contains(c.output(lost), "remove it first") {
		t.Fatalf("%s joining while still a member: exited %v code %d, want a refusal\n%s", lost.id, exited, code, c.output(lost))
	}

	mustRunOrdo(t, "remove", "--id", lost.id, "--addrs", c.addrList(), "--timeout", "10s")
	c.mustRestart(lost)
	c.waitStatus(leaderTimeout, lost.id+" back as a voter", func(r *api.StatusResponse) bool {
		for _, n := range r.Nodes {
			if n.Id == lost.id {
				return n.Voter && n.Role == "follower"
			}
		}
		return false
	})
	lost.args = saved
	w.mustAcks(phaseAcks, phaseTimeout, "after it joined again")

	n4 := c.newNode("n4", everyStart...)
	c.mustStart(n4)
	c.waitStatus(leaderTimeout, "n4 joined as a voter", func(r *api.StatusResponse) bool {
		for _, n := range r.Nodes {
			if n.Id == "n4" {
				return n.Voter && n.Role == "follower"
			}
		}
		return false
	})
	w.mustAcks(phaseAcks, phaseTimeout, "after n4 joined")
	mustCheck(t, w.stop())
}
