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
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
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
	n4 := c.newNode("n4", append([]string{"--join", leader.GRPCAddr}, fastTimers...)...)
	c.mustStart(n4)
	c.waitStatus(leaderTimeout, "n4 as a voting follower", func(r *api.StatusResponse) bool {
		for _, n := range r.Nodes {
			if n.Id == "n4" {
				return n.Voter && n.Role == "follower" && n.GrpcAddr == n4.GRPCAddr && n.RaftAddr == n4.Advertise
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
	if code, exited := n4.WaitExit(leaderTimeout); !exited || code != 0 {
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
	res = runOrdo(t, "join", "--id", follower.Name, "--raft-addr", follower.Advertise, "--grpc-addr", follower.GRPCAddr,
		"--addrs", c.mustFollowers()[1].GRPCAddr, "--timeout", "10s")
	if res.Code == 0 || !strings.Contains(res.Stderr, "remove it first") {
		t.Errorf("ordo join of member %s through a follower: exit %d, stderr %q; want a refusal naming the fix", follower.Name, res.Code, res.Stderr)
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
	res := mustRunOrdo(t, "remove", "--id", old.Name, "--addrs", c.addrList(), "--timeout", "10s")
	t.Logf("ordo remove --id %s (the leader): %s", old.Name, strings.TrimSpace(res.Stdout))
	w.mustAcks(phaseAcks, phaseTimeout, "after the leader was removed")
	if code, exited := old.WaitExit(leaderTimeout); !exited || code != 0 {
		t.Errorf("removed leader %s: exited %v with code %d, want 0 by itself", old.Name, exited, code)
	}
	resp := c.waitStatus(leaderTimeout, "two voters without "+old.Name, func(r *api.StatusResponse) bool {
		if len(r.Nodes) != 2 || r.LeaderId == "" || r.LeaderId == old.Name || roleOf(r, r.LeaderId) != "leader" {
			return false
		}
		for _, n := range r.Nodes {
			if n.Id == old.Name || !n.Voter || n.Role == "unreachable" {
				return false
			}
		}
		return true
	})
	t.Logf("%s leads two voters after %s was removed", resp.LeaderId, old.Name)
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
	mustRunOrdo(t, "remove", "--id", old.Name, "--addrs", c.addrList(), "--timeout", "10s")
	code, exited := old.WaitExit(leaderTimeout)
	if !exited || code != 0 {
		t.Fatalf("removed node %s: exited %v with code %d, want it to exit 0 by itself within %v:\n%s",
			old.Name, exited, code, leaderTimeout, c.output(old))
	}
	addrs := old.GRPCAddr + "," + c.addrList()
	deadline := time.Now().Add(leaderTimeout)
	for {
		res := runOrdo(t, "status", "--json", "--addrs", addrs, "--timeout", "5s")
		var st struct {
			LeaderID string `json:"leader_id"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
			t.Fatalf("ordo status --json: %v: %q", err, res.Stdout)
		}
		if st.LeaderID != "" && st.LeaderID != old.Name {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ordo status --addrs %s still reports leader_id %q %v after removing %s (process running: %v):\n%s",
				addrs, st.LeaderID, leaderTimeout, old.Name, old.Running(), res.Stdout)
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
	if err := os.RemoveAll(lost.DataDir); err != nil {
		t.Fatal(err)
	}
	c.mustRestart(lost) // the same command line, --bootstrap included
	code, exited := lost.WaitExit(exitTimeout)
	if !exited || code == 0 || !strings.Contains(c.output(lost), "holds Raft state") {
		t.Fatalf("%s with an empty data dir and --bootstrap: exited %v code %d, want a refusal\n%s", lost.Name, exited, code, c.output(lost))
	}
	w.mustAcks(phaseAcks, phaseTimeout, "while the node is refused")

	saved := lost.Args
	everyStart := append(append([]string{}, saved...), "--join", c.addrList())
	lost.Args = everyStart
	c.mustRestart(lost)
	code, exited = lost.WaitExit(exitTimeout)
	if !exited || code == 0 || !strings.Contains(c.output(lost), "remove it first") {
		t.Fatalf("%s joining while still a member: exited %v code %d, want a refusal\n%s", lost.Name, exited, code, c.output(lost))
	}

	mustRunOrdo(t, "remove", "--id", lost.Name, "--addrs", c.addrList(), "--timeout", "10s")
	c.mustRestart(lost)
	c.waitStatus(leaderTimeout, lost.Name+" back as a voter", func(r *api.StatusResponse) bool {
		for _, n := range r.Nodes {
			if n.Id == lost.Name {
				return n.Voter && n.Role == "follower"
			}
		}
		return false
	})
	lost.Args = saved
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

// TestJoinAsksTheNode (issue 26): `ordo join` naming an address where
// nothing listens, or a member's gRPC address, is refused and adds no
// voter, so the cluster survives a member going down afterwards; and
// `ordo remove` of the member that is down then works. Before, the first
// join printed "joined n7" and made a voter that never ran: one member
// down left 2 of 4 voters, no leader, and a remove that timed out.
func TestJoinAsksTheNode(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the joins")

	spare := freeaddr.Loopback(t, 2)
	res := runOrdo(t, "join", "--id", "n7", "--raft-addr", spare[0], "--grpc-addr", spare[1], "--addrs", c.addrList(), "--timeout", "3s")
	if res.Code == 0 || !strings.Contains(res.Stderr, spare[1]) || !strings.Contains(res.Stderr, "ordo serve --id n7 --join") {
		t.Errorf("ordo join of a node that does not run: exit %d, stdout %q, stderr %q; want a refusal naming the address and the fix", res.Code, res.Stdout, res.Stderr)
	}
	n1 := c.node("n1")
	res = runOrdo(t, "join", "--id", "n7", "--raft-addr", spare[0], "--grpc-addr", n1.GRPCAddr, "--addrs", c.addrList(), "--timeout", "10s")
	if res.Code == 0 || !strings.Contains(res.Stderr, "AlreadyExists") || !strings.Contains(res.Stderr, n1.GRPCAddr) {
		t.Errorf("ordo join at n1's gRPC address: exit %d, stdout %q, stderr %q; want AlreadyExists naming the address", res.Code, res.Stdout, res.Stderr)
	}
	c.waitStatus(leaderTimeout, "three voters after the refused joins", func(r *api.StatusResponse) bool { return len(r.Nodes) == 3 })

	down := c.mustFollowers()[0]
	c.mustKill(down)
	w.mustAcks(phaseAcks, phaseTimeout, "with "+down.Name+" down")
	res = mustRunOrdo(t, "remove", "--id", down.Name, "--addrs", c.addrList(), "--timeout", "10s")
	if !strings.Contains(res.Stdout, "removed "+down.Name) {
		t.Errorf("ordo remove --id %s (down): stdout %q", down.Name, res.Stdout)
	}
	c.waitStatus(leaderTimeout, "two voters without "+down.Name, func(r *api.StatusResponse) bool {
		return len(r.Nodes) == 2 && roleOf(r, down.Name) == "" && r.LeaderId != ""
	})
	w.mustAcks(phaseAcks, phaseTimeout, "after the removal")
	mustCheck(t, w.stop())
}
