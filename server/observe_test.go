package server

import (
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
)

// metricValue scrapes n's metrics and returns the value of the line that
// starts with series (a name with its labels, as Prometheus prints it).
func metricValue(t *testing.T, n *Node, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in the metrics", series)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMetricsCountWhatANodeDoes: IDs, calls, reservations and rounds are
// counted on the leader; role and term on every node.
func TestMetricsCountWhatANodeDoes(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	before := metricValue(t, leader, "ordo_ids_issued_total")
	mustNext(t, leader.GRPCAddr(), 7)
	mustNext(t, leader.GRPCAddr(), 3)
	if got := metricValue(t, leader, "ordo_ids_issued_total") - before; got != 10 {
		t.Errorf("ids issued grew by %v, want 10", got)
	}
	if got := metricValue(t, leader, `ordo_requests_total{code="OK",method="/ordo.v1.Sequencer/Next"}`); got < 2 {
		t.Errorf("OK Next calls: %v, want at least 2", got)
	}
	if got := metricValue(t, leader, `ordo_reservations_total{result="ok"}`); got < 1 {
		t.Errorf("reservations: %v, want at least 1", got)
	}
	if got := metricValue(t, leader, `ordo_leadership_confirmations_total{result="ok"}`); got < 2 {
		t.Errorf("confirmations: %v, want at least 2", got)
	}
	for _, n := range nodes {
		want := 0.0
		if n == leader {
			want = 1
		}
		if got := metricValue(t, n, `ordo_raft_role{role="leader"}`); got != want {
			t.Errorf("%s: leader role %v, want %v", n.ID(), got, want)
		}
		if got := metricValue(t, n, "ordo_raft_term"); got != float64(leader.raft.CurrentTerm()) {
			t.Errorf("%s: term %v, want %d", n.ID(), got, leader.raft.CurrentTerm())
		}
		if got := metricValue(t, n, "ordo_high_water_ticks"); got <= 0 {
			t.Errorf("%s: high water %v", n.ID(), got)
		}
	}
}
