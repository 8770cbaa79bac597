package leadership

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// refusingPeer refuses every Term stream as it opens, naming its cluster
// in the header, as grpcapi.Auth refuses a call meant for another cluster.
type refusingPeer struct {
	api.UnimplementedPeerServer
	cluster string
}

func (p refusingPeer) Term(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	_ = stream.SetHeader(metadata.Pairs(api.ClusterIDKey, p.cluster))
	return status.Errorf(codes.Unavailable, "call meant for another cluster: this node belongs to cluster %s", p.cluster)
}

// TestRoundTellsAnotherCluster: a round that fails because a majority of
// the voters refused it as nodes of one other cluster says so
// (ErrOtherCluster, with sequencer.ErrNotLeader), naming both clusters;
// any other failure is only sequencer.ErrNotLeader, and a majority still
// confirms. Each case runs several rounds: a refused stream is opened
// anew each time, and its refusal must be read every time.
func TestRoundTellsAnotherCluster(t *testing.T) {
	leader, node := mustLeader(t)
	same := func() uint64 { return testTerm }
	other := func(cluster string) string { return mustServe(t, refusingPeer{cluster: cluster}) }
	dead := "127.0.0.1:1" // nothing listens there
	tests := []struct {
		name    string
		peers   [2]string
		ok      bool
		another bool
	}{
		{"both of another cluster", [2]string{other("beef"), other("beef")}, false, true},
		{"one of another cluster, one in term", [2]string{other("beef"), mustFakePeer(t, same)}, true, false},
		{"one in term, one of another cluster", [2]string{mustFakePeer(t, same), other("beef")}, true, false},
		{"of two other clusters", [2]string{other("beef"), other("cafe")}, false, false},
		{"one of another cluster, one unreachable", [2]string{other("beef"), dead}, false, false},
		{"one of another cluster, one silent", [2]string{other("beef"), mustPeerServer(t, fakePeer{term: same, silent: true})}, false, false},
		{"both refusing in this cluster's name", [2]string{other(testCluster), other(testCluster)}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pointVoters(node, tt.peers[:]...)
			for round := range 3 {
				// A round ends when a silent voter's time is up.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err := leader.Confirm(ctx, false)
				cancel()
				switch {
				case tt.ok && err != nil:
					t.Fatalf("round %d: %v, want confirmed", round, err)
				case !tt.ok && !errors.Is(err, sequencer.ErrNotLeader):
					t.Fatalf("round %d: %v, want sequencer.ErrNotLeader", round, err)
				case errors.Is(err, ErrOtherCluster) != tt.another:
					t.Fatalf("round %d: %v; ErrOtherCluster: %v, want %v", round, err, !tt.another, tt.another)
				case tt.another && (!strings.Contains(err.Error(), "cluster beef") || !strings.Contains(err.Error(), "holds cluster "+testCluster)):
					t.Fatalf("round %d: %v, want both clusters named", round, err)
				}
			}
		})
	}
}

// TestForeignMajority: the rule behind ErrOtherCluster.
func TestForeignMajority(t *testing.T) {
	for _, tc := range []struct {
		name    string
		foreign map[string]string
		need    int
		cluster string
		voters  []string
	}{
		{"none", nil, 2, "", nil},
		{"fewer than need", map[string]string{"n2": "b"}, 2, "", nil},
		{"need, one cluster", map[string]string{"n2": "b", "n3": "b"}, 2, "b", []string{"n2", "n3"}},
		{"need, split", map[string]string{"n2": "b", "n3": "c"}, 2, "", nil},
		{"five voters, three of one", map[string]string{"n5": "b", "n2": "b", "n4": "c", "n3": "b"}, 3, "b", []string{"n2", "n3", "n5"}},
		{"five voters, two and two", map[string]string{"n2": "b", "n3": "b", "n4": "c", "n5": "c"}, 3, "", nil},
	} {
		cluster, voters := foreignMajority(tc.foreign, tc.need)
		if cluster != tc.cluster || !slices.Equal(voters, tc.voters) {
			t.Errorf("%s: foreignMajority = %q %v, want %q %v", tc.name, cluster, voters, tc.cluster, tc.voters)
		}
	}
}
