package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
)

// TestCheckClusterRefusesAnotherClustersData: a data dir is read without
// Raft, and refused when its cluster id differs from the one configured or
// from the one a recorded member reports.
func TestCheckClusterRefusesAnotherClustersData(t *testing.T) {
	other := mustOpen(t, testConfig(t, "b1", t.TempDir()))
	if err := other.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, other.GRPCAddr(), 1)

	dir := t.TempDir()
	n := mustOpen(t, testConfig(t, "n1", dir))
	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, n.GRPCAddr(), 1)
	own := n.fsm.ClusterID()
	// A member record that points at the other cluster's node, as a data
	// dir copied from another cluster would hold.
	if _, err := n.apply(fsm.Command{Op: fsm.OpSetNode, NodeID: "n2", GRPCAddr: other.GRPCAddr()}); err != nil {
		t.Fatal(err)
	}
	n.Close()

	st, err := StoredState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterID != own || st.Nodes["n2"] != other.GRPCAddr() {
		t.Fatalf("stored state: cluster %q nodes %v, want cluster %q and n2 at %s", st.ClusterID, st.Nodes, own, other.GRPCAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckCluster(ctx, "n1", dir, "not-this-cluster", nil); !errors.Is(err, ErrOtherCluster) {
		t.Errorf("configured for another cluster: %v, want ErrOtherCluster", err)
	}
	if err := CheckCluster(ctx, "n1", dir, own, nil); !errors.Is(err, ErrOtherCluster) {
		t.Errorf("a recorded member reports another cluster: %v, want ErrOtherCluster", err)
	}
	other.Close()
	if err := CheckCluster(ctx, "n1", dir, own, nil); err != nil {
		t.Errorf("own id configured, member unreachable: %v, want nil", err)
	}
}
