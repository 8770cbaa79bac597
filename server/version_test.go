package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// TestNotReadingEveryAnswer: on every mix of up to four other voters'
// answers (reads the new version, reads an older one, predates versions
// (0, read as 1), cannot be asked), the version is raised only when every
// voter answered that it reads it, and every other voter is named.
func TestNotReadingEveryAnswer(t *testing.T) {
	kinds := []voterAnswer{{reads: fsm.Reads}, {reads: fsm.Reads - 1}, {reads: readsVersion(0)}, {err: errors.New("unreachable")}}
	ids := []string{"a", "b", "c", "d"}
	checked := 0
	for voters := 0; voters <= len(ids); voters++ {
		combos := 1
		for range voters {
			combos *= len(kinds)
		}
		for c := range combos {
			answers, wantBehind := map[string]voterAnswer{}, 0
			for i, k := 0, c; i < voters; i, k = i+1, k/len(kinds) {
				a := kinds[k%len(kinds)]
				answers[ids[i]] = a
				if a.err != nil || a.reads < fsm.Reads {
					wantBehind++
				}
			}
			behind := notReading(answers, fsm.Reads)
			if len(behind) != wantBehind {
				t.Fatalf("answers %v: %d named (%v), want %d", answers, len(behind), behind, wantBehind)
			}
			for _, b := range behind {
				if a := answers[b[:1]]; a.err == nil && a.reads >= fsm.Reads {
					t.Fatalf("answers %v: %q named though it reads %d", answers, b, a.reads)
				}
			}
			checked++
		}
	}
	if checked != 1+4+16+64+256 {
		t.Fatalf("checked %d mixes", checked)
	}
}

// A node that reads an older cluster version than the cluster's is
// refused when it asks to join (it would stop at the first entry it
// cannot read), and the message says to upgrade it. The version is the
// one the node answers when asked (NodeStatus), not the request's, which
// an operator's ordo join does not fill in.
func TestJoinRefusesANodeThatCannotReadTheClusterVersion(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the leader to raise the cluster version once every voter reads it", func() bool {
		return leader.fsm.ClusterVersion() == fsm.Reads
	})
	admin := api.NewAdminClient(grpctest.Dial(t, leader.GRPCAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, reads := range []uint32{0, fsm.Reads - 1} {
		info := freshNode("n9", "127.0.0.1:9")
		info.ReadsVersion = reads
		_, err := admin.Join(ctx, &api.JoinRequest{Id: "n9", RaftAddr: "127.0.0.1:9", GrpcAddr: answering(t, info), Layout: "default", ReadsVersion: fsm.Reads})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "upgrade it") {
			t.Fatalf("join of a node reading version %d: %v, want FailedPrecondition saying to upgrade it", reads, err)
		}
	}
	servers, err := leader.servers()
	if err != nil || len(servers) != 3 {
		t.Fatalf("configuration after the refused joins: %v, %v; want the 3 members", servers, err)
	}
}
