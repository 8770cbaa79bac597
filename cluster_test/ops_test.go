package cluster_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// mustCLIIDs runs `ordo next --count n --json` against addrs and returns
// the IDs, which must increase.
func mustCLIIDs(t *testing.T, addrs string, n int) []uint64 {
	t.Helper()
	res := runOrdoFor(t, time.Minute, "next", "--count", strconv.Itoa(n), "--json", "--addrs", addrs, "--timeout", "30s")
	if res.Code != 0 {
		t.Fatalf("ordo next: exit %d: %s", res.Code, res.Stderr)
	}
	var out struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil || len(out.IDs) != n {
		t.Fatalf("ordo next --json: %v; stdout %q", err, res.Stdout)
	}
	var ids []uint64
	for _, s := range out.IDs {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil || (len(ids) > 0 && id <= ids[len(ids)-1]) {
			t.Fatalf("ordo next --json: bad or unordered IDs %q", out.IDs)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestBackupRestoreAndRecover drives the commands as an operator would,
// on real processes: a backup of a running cluster, a restore into a new
// cluster after the old one is gone, and disaster recovery of a survivor;
// each new cluster hands out IDs above every ID the old one handed out,
// before or after the backup.
func TestBackupRestoreAndRecover(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	before := mustCLIIDs(t, c.addrList(), 50)
	backup := filepath.Join(t.TempDir(), "ordo.backup")
	if res := runOrdo(t, "backup", "--out", backup, "--addrs", c.addrList(), "--timeout", "30s"); res.Code != 0 {
		t.Fatalf("ordo backup: exit %d: %s", res.Code, res.Stderr)
	}
	after := mustCLIIDs(t, c.addrList(), 50)
	last := max(slices.Max(before), slices.Max(after))

	// A restore while the old cluster runs is refused.
	r1 := c.newNode("r1")
	restore := []string{"restore", "--backup", backup, "--data-dir", r1.DataDir, "--id", r1.Name, "--raft-addr", r1.Advertise, "--grpc-addr", r1.GRPCAddr}
	if res := runOrdo(t, restore...); res.Code == 0 {
		t.Fatalf("ordo restore while the old cluster runs succeeded: %s", res.Stdout)
	}
	c.mustKillAll()
	if res := runOrdo(t, restore...); res.Code != 0 {
		t.Fatalf("ordo restore: exit %d: %s", res.Code, res.Stderr)
	}
	c.mustStart(r1)
	if ids := mustCLIIDs(t, r1.GRPCAddr, 10); ids[0] <= last {
		t.Fatalf("restored cluster's first ID %d is not above %d, the old cluster's last", ids[0], last)
	}
	c.mustKill(r1)

	// Disaster recovery: n2 and n3 are lost for good; n1 recovers alone.
	n1 := c.node("n1")
	recoverArgs := []string{"serve", "--id", n1.Name, "--data-dir", n1.DataDir, "--raft-addr", n1.RaftAddr, "--raft-advertise", n1.Advertise, "--grpc-addr", n1.GRPCAddr, "--recover"}
	if res := runOrdo(t, recoverArgs...); res.Code != 0 {
		t.Fatalf("ordo serve --recover: exit %d: %s", res.Code, res.Stderr)
	}
	c.mustStart(n1)
	if ids := mustCLIIDs(t, n1.GRPCAddr, 10); ids[0] <= last {
		t.Fatalf("recovered node's first ID %d is not above %d, the cluster's last", ids[0], last)
	}
}
