package metrics

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gometrics "github.com/armon/go-metrics"
	"github.com/hashicorp/raft"
)

// fakeRaft is a node's Raft as the gauges read it.
type fakeRaft struct {
	state   raft.RaftState
	contact time.Time
}

func (fakeRaft) CurrentTerm() uint64      { return 7 }
func (r fakeRaft) State() raft.RaftState  { return r.state }
func (fakeRaft) CommitIndex() uint64      { return 42 }
func (fakeRaft) AppliedIndex() uint64     { return 41 }
func (r fakeRaft) LastContact() time.Time { return r.contact }

type fakeFSM struct{}

func (fakeFSM) HighWater() uint64 { return 123456 }

type fakeSequencer struct{}

func (fakeSequencer) TimestampLead() time.Duration { return 1500 * time.Millisecond }
func (fakeSequencer) LeaseLeft() time.Duration     { return 250 * time.Millisecond }

func newFake(r fakeRaft) *Metrics { return New(r, fakeFSM{}, fakeSequencer{}) }

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestMetricsReport(t *testing.T) {
	m := newFake(fakeRaft{state: raft.Leader})
	m.Issued(5)
	m.Issued(3)
	m.Served("/ordo.v1.Sequencer/Next", "OK", time.Millisecond)
	m.Served("/ordo.v1.Admin/Remove", "PermissionDenied", time.Millisecond)
	m.Reserved(2*time.Millisecond, nil)
	m.Reserved(time.Second, errors.New("lost"))
	m.Confirmed(time.Millisecond, nil)
	m.LeaderChanged()
	text := scrape(t, m)
	for _, want := range []string{
		"ordo_ids_issued_total 8",
		`ordo_requests_total{code="OK",method="/ordo.v1.Sequencer/Next"} 1`,
		`ordo_requests_total{code="PermissionDenied",method="/ordo.v1.Admin/Remove"} 1`,
		`ordo_request_duration_seconds_count{method="/ordo.v1.Sequencer/Next"} 1`,
		`ordo_reservations_total{result="ok"} 1`,
		`ordo_reservations_total{result="error"} 1`,
		`ordo_leadership_confirmations_total{result="ok"} 1`,
		"ordo_leadership_confirmation_duration_seconds_count 1",
		"ordo_leader_changes_total 1",
		"ordo_raft_term 7",
		"ordo_raft_commit_index 42",
		"ordo_raft_applied_index 41",
		"ordo_high_water_ticks 123456",
		"ordo_timestamp_lead_seconds 1.5",
		"ordo_lease_remaining_seconds 0.25",
		"ordo_last_leader_contact_seconds 0",
		`ordo_raft_role{role="leader"} 1`,
		`ordo_raft_role{role="follower"} 0`,
		"go_goroutines",
	} {
		if !hasLine(text, want) {
			t.Errorf("metrics lack the line %q", want)
		}
	}
}

// TestMetricsOfAFollower: a follower's role, and its last contact with a
// leader, -1 before it hears from one.
func TestMetricsOfAFollower(t *testing.T) {
	text := scrape(t, newFake(fakeRaft{state: raft.Follower}))
	for _, want := range []string{
		`ordo_raft_role{role="follower"} 1`,
		`ordo_raft_role{role="leader"} 0`,
		`ordo_raft_role{role="candidate"} 0`,
		`ordo_raft_role{role="shutdown"} 0`,
		"ordo_last_leader_contact_seconds -1",
	} {
		if !hasLine(text, want) {
			t.Errorf("metrics lack the line %q", want)
		}
	}
	text = scrape(t, newFake(fakeRaft{state: raft.Follower, contact: time.Now().Add(-time.Minute)}))
	if hasLine(text, "ordo_last_leader_contact_seconds -1") || hasLine(text, "ordo_last_leader_contact_seconds 0") {
		t.Errorf("a follower that heard from a leader a minute ago:\n%s", grepLines(text, "contact"))
	}
}

// hasLine reports whether text has the line want, or a line that starts
// with it if want names a metric only.
func hasLine(text, want string) bool {
	return strings.Contains("\n"+text, "\n"+want+"\n") || !strings.Contains(want, " ") && strings.Contains("\n"+text, "\n"+want)
}

// TestCollectRaft: what Raft reports through go-metrics reaches the
// registry.
func TestCollectRaft(t *testing.T) {
	m := newFake(fakeRaft{state: raft.Follower})
	if err := m.CollectRaft(); err != nil {
		t.Fatal(err)
	}
	gometrics.IncrCounter([]string{"raft", "test_counter"}, 3)
	if text := scrape(t, m); !strings.Contains(text, "raft_test_counter") {
		t.Fatalf("raft's metric is not in the registry:\n%s", grepLines(text, "raft"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
