package bench

import (
	"context"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/proc"
)

// TestCostsPerIDFromTwoStatuses: a node's cost is what its counters moved
// between the two statuses, over the IDs the run received; the leader
// comes first after the bench, and a node that answered only once is
// left out rather than counted from zero.
func TestCostsPerIDFromTwoStatuses(t *testing.T) {
	usage := func(cpuMicros, reads, msgsIn, callsIn, msgsOut, answers, rounds uint64) *api.NodeUsage {
		return &api.NodeUsage{CpuMicros: cpuMicros, ReadSyscalls: reads, StreamMessagesReceived: msgsIn, StreamCallsReceived: callsIn,
			StreamMessagesSent: msgsOut, StreamAnswersSent: answers, ConfirmRounds: rounds}
	}
	before := map[string]*api.NodeInfo{
		"n1": {Id: "n1", Role: "follower", Usage: usage(1000, 10, 0, 0, 0, 0, 0)},
		"n2": {Id: "n2", Role: "leader", Usage: usage(5000, 100, 10, 100, 10, 20, 7)},
		"n3": {Id: "n3", Role: "follower", Usage: usage(1, 1, 0, 0, 0, 0, 0)},
		"n5": {Id: "n5", Role: "follower", Usage: usage(90000, 900, 0, 0, 0, 0, 3)},
	}
	after := map[string]*api.NodeInfo{
		"n1": {Id: "n1", Role: "follower", Usage: usage(1500, 30, 0, 0, 0, 0, 0)},
		"n2": {Id: "n2", Role: "leader", Usage: usage(9000, 300, 30, 900, 50, 100, 207)},
		"n4": {Id: "n4", Role: "follower", Usage: usage(9, 9, 0, 0, 0, 0, 0)},
		// n5 restarted during the run: its counts went back.
		"n5": {Id: "n5", Role: "follower", Usage: usage(100, 10, 0, 0, 0, 0, 0)},
	}
	calls := 0
	m := startCosts(context.Background(), func(context.Context) map[string]*api.NodeInfo {
		calls++
		if calls == 1 {
			return before
		}
		return after
	})
	costs := m.end(context.Background()).perID(2000, 2*time.Second)
	if len(costs) != 3 || costs[0].Name != "bench" || costs[1].Name != "n2" || costs[2].Name != "n1" {
		t.Fatalf("costs %+v: want bench, the leader n2, then n1 (n3 and n4 answered once, n5 restarted)", costs)
	}
	leader := costs[1]
	want := Cost{Name: "n2", Role: "leader", CPU: 4 * time.Millisecond, CPUPerID: 2, ReadsPerID: 0.1,
		CallsPerMessage: 40, AnswersPerMessage: 2, RoundsPerSecond: 100}
	if leader != want {
		t.Fatalf("leader's cost %+v, want %+v", leader, want)
	}
	if f := costs[2]; f.CPUPerID != 0.25 || f.CallsPerMessage != 0 || f.RoundsPerSecond != 0 {
		t.Fatalf("follower's cost %+v, want 0.25 µs/ID and no stream or rounds", f)
	}
	if none := costOf("x", "", proc.Usage{CPU: time.Second, ReadCalls: 5}, 0); none.CPUPerID != 0 {
		t.Fatalf("a run with no IDs costs %v µs per ID, want 0 (no division by zero)", none.CPUPerID)
	}
}
