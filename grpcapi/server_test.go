package grpcapi

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
)

// TestClusterLayoutIsTheClusters: the layout calls render with (HTTP's
// /v1/ids, the Layout RPC) is the one the cluster recorded, not this
// node's flags.
func TestClusterLayoutIsTheClusters(t *testing.T) {
	f := fsm.New(nil, nil)
	s := NewServer(Config{Layout: layout.MustPreset("default"), Group: 1}, Parts{State: f, Node: fakeNode{}})
	if _, _, err := s.ClusterLayout(); err == nil {
		t.Fatal("ClusterLayout before the cluster recorded one: no error")
	}
	recorded := layout.MustPreset("ulid")
	data, err := fsm.Encode(fsm.Command{Op: fsm.OpInit, Layout: &recorded, Group: 7, ClusterID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := f.Apply(&raft.Log{Data: data}).(fsm.Result); !ok || res.Err != nil {
		t.Fatalf("apply init: %+v", res)
	}
	l, group, err := s.ClusterLayout()
	if err != nil || l != recorded || group != 7 {
		t.Fatalf("ClusterLayout() = %s, %d, %v; want the recorded ulid, 7", l, group, err)
	}
}
