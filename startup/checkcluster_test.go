package startup

import (
	"errors"
	"strings"
	"testing"

	"github.com/seed-e8569b35/ordo/api"
)

// TestJudgeCluster: every small case of the rule a node with state starts
// by. This node is n1 of cluster A; the other voters are n2, n3 (n4, n5).
// It refuses only when a majority of the other voters answer, under their
// own ids, for one other cluster and nothing answers for A.
func TestJudgeCluster(t *testing.T) {
	as := func(voter, id, cluster string) voterAnswer {
		return voterAnswer{ID: voter, Addr: voter + ":9", Info: &api.NodeInfo{Id: id, ClusterId: cluster}}
	}
	said := func(voter, cluster string) voterAnswer { return as(voter, voter, cluster) }
	down := func(voter string) voterAnswer { return voterAnswer{ID: voter, Addr: voter + ":9"} }
	unrecorded := func(voter string) voterAnswer { return voterAnswer{ID: voter} }
	// A --join address answers under any id.
	join := func(id, cluster string) voterAnswer {
		return voterAnswer{Addr: id + ":9", Info: &api.NodeInfo{Id: id, ClusterId: cluster}}
	}
	joinDown := func(addr string) voterAnswer { return voterAnswer{Addr: addr + ":9"} }
	cases := []struct {
		name    string
		answers []voterAnswer
		named   []voterAnswer // the command line's addresses
		refuse  bool
		text    string // in the refusal
		stale   int    // answers logged
	}{
		{"alone", nil, nil, false, "", 0},
		{"every other voter down", []voterAnswer{down("n2"), down("n3")}, nil, false, "", 0},
		{"every other voter answers for A", []voterAnswer{said("n2", "A"), said("n3", "A")}, nil, false, "", 0},
		{"every other voter answers for B", []voterAnswer{said("n2", "B"), said("n3", "B")}, nil, true, "n2 at n2:9 for B, n3 at n3:9 for B", 0},
		{"the refusal says what to do", []voterAnswer{said("n2", "B"), said("n3", "B")}, nil, true, "ordo remove --id n1", 0},
		{"the refusal names both clusters", []voterAnswer{said("n2", "B"), said("n3", "B")}, nil, true, "holds cluster A, but 2 of the 2 other voters of its Raft configuration answer for cluster B", 0},
		{"one for B, one down", []voterAnswer{said("n2", "B"), down("n3")}, nil, false, "", 1},
		{"one for B, one not recorded", []voterAnswer{said("n2", "B"), unrecorded("n3")}, nil, false, "", 1},
		{"one for B, one for A", []voterAnswer{said("n2", "B"), said("n3", "A")}, nil, false, "", 1},
		{"one for B, another node for B at the other's address", []voterAnswer{said("n2", "B"), as("n3", "x", "B")}, nil, false, "", 2},
		{"other nodes for B at both addresses", []voterAnswer{as("n2", "x", "B"), as("n3", "y", "B")}, nil, false, "", 2},
		{"one for B, one for C", []voterAnswer{said("n2", "B"), said("n3", "C")}, nil, false, "", 2},
		{"both for B, another node for A elsewhere", []voterAnswer{said("n2", "B"), said("n3", "B"), as("n4", "n9", "A"), down("n5")}, nil, false, "", 3},
		{"answers without a cluster id", []voterAnswer{said("n2", ""), said("n3", "")}, nil, false, "", 0},
		{"one for B, one without a cluster id", []voterAnswer{said("n2", "B"), said("n3", "")}, nil, false, "", 1},
		{"two voters, the other for B", []voterAnswer{said("n2", "B")}, nil, true, "1 of the 1", 0},
		{"five voters, three for B, one down", []voterAnswer{said("n2", "B"), said("n3", "B"), said("n4", "B"), down("n5")}, nil, true, "3 of the 4", 0},
		{"five voters, two for B, two down", []voterAnswer{said("n2", "B"), said("n3", "B"), down("n4"), down("n5")}, nil, false, "", 2},
		{"five voters, three for B, one for A", []voterAnswer{said("n2", "B"), said("n3", "B"), said("n4", "B"), said("n5", "A")}, nil, false, "", 3},
		{"one-node cluster, --join answers for B", nil, []voterAnswer{join("m1", "B"), join("m2", "B")}, true, "the only voter, but the addresses of its command line answer for another cluster (m1 at m1:9 for B, m2 at m2:9 for B)", 0},
		{"one-node cluster, one --join address for B, one down", nil, []voterAnswer{join("m1", "B"), joinDown("m2")}, true, "ordo remove --id n1", 0},
		{"one-node cluster, a --bootstrap peer for B", nil, []voterAnswer{said("n2", "B"), down("n3")}, true, "n2 at n2:9 for B", 0},
		{"one-node cluster, a --bootstrap peer's address answered by another node for B", nil, []voterAnswer{as("n2", "x", "B")}, false, "", 1},
		{"one-node cluster, --join answers for A", nil, []voterAnswer{join("m1", "A"), join("m2", "B")}, false, "", 1},
		{"one-node cluster, the node itself answers at a --join address", nil, []voterAnswer{join("n1", "A")}, false, "", 0},
		{"one-node cluster, the node's own id answers for B at a --join address", nil, []voterAnswer{join("n1", "B")}, false, "", 0},
		{"one-node cluster, --join answers without a cluster id", nil, []voterAnswer{join("m1", "")}, false, "", 0},
		{"other voters down, --join answers for B", []voterAnswer{down("n2"), down("n3")}, []voterAnswer{join("m1", "B"), join("m2", "B")}, false, "", 2},
		{"other voters for A, --join answers for B", []voterAnswer{said("n2", "A")}, []voterAnswer{join("m1", "B")}, false, "", 1},
		{"a voter for B, --join answers for A", []voterAnswer{said("n2", "B")}, []voterAnswer{join("m1", "A")}, false, "", 1},
		{"every other voter for B, a --join address too", []voterAnswer{said("n2", "B"), said("n3", "B")}, []voterAnswer{join("m1", "B")}, true, "2 of the 2 other voters", 0},
		{"every other voter for B, the --bootstrap peers down", []voterAnswer{said("n2", "B"), said("n3", "B")}, []voterAnswer{down("n2"), down("n3"), joinDown("m1")}, true, "2 of the 2 other voters", 0},
		{"one of two other voters for B, a --join address for B", []voterAnswer{said("n2", "B"), down("n3")}, []voterAnswer{join("m1", "B")}, false, "", 2},
		{"five voters, three for B, one for C", []voterAnswer{said("n2", "B"), said("n3", "B"), said("n4", "B"), said("n5", "C")}, nil, true, "cluster B", 0},
	}
	for _, tc := range cases {
		stale, err := judgeCluster("n1", "/data", "A", tc.answers, tc.named)
		switch {
		case !tc.refuse && err != nil:
			t.Errorf("%s: refused (%v), want a start", tc.name, err)
		case tc.refuse && (!errors.Is(err, ErrOtherCluster) || !strings.Contains(err.Error(), tc.text)):
			t.Errorf("%s: %v, want ErrOtherCluster containing %q", tc.name, err, tc.text)
		case len(stale) != tc.stale:
			t.Errorf("%s: logged %d answers (%+v), want %d", tc.name, len(stale), stale, tc.stale)
		}
		for _, s := range stale {
			if s.Why == "" || s.Addr == "" || s.AnsweredAs == "" || s.Cluster == "" {
				t.Errorf("%s: a logged answer that does not say who answered where for which cluster: %+v", tc.name, s)
			}
		}
	}
}
