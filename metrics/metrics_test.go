package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gometrics "github.com/armon/go-metrics"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/internal/buildinfo"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
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

type fakeFSM struct{ settled uint64 }

func (fakeFSM) HighWater() uint64 { return 123456 }
func (f fakeFSM) Settled() uint64 { return f.settled }

// fakeSequencer hands out IDs from next while serving.
type fakeSequencer struct {
	serving bool
	next    uint64
}

func (fakeSequencer) TimestampLead() time.Duration { return 1500 * time.Millisecond }
func (fakeSequencer) LeaseLeft() time.Duration     { return 250 * time.Millisecond }
func (s fakeSequencer) Serving() bool              { return s.serving }
func (s fakeSequencer) State() sequencer.State     { return sequencer.State{Next: s.next} }

type fakeSettler struct{ stats settle.Stats }

func (s fakeSettler) Stats() settle.Stats { return s.stats }

func newFake(r fakeRaft) *Metrics {
	return New(r, fakeFSM{}, fakeSequencer{}, fakeSettler{}, mustLayout(), 0)
}

func mustLayout() layout.Layout {
	l, err := layout.Preset("default")
	if err != nil {
		panic(err)
	}
	return l
}

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

// TestMetricsBuildInfo: ordo_build_info is 1, labelled with the build
// the binary records (a test binary's: buildinfo.Read, whatever it has).
func TestMetricsBuildInfo(t *testing.T) {
	b := buildinfo.Read()
	want := fmt.Sprintf(`ordo_build_info{goversion=%q,revision=%q,version=%q} 1`, b.GoVersion, b.Revision, b.Version)
	if text := scrape(t, newFake(fakeRaft{state: raft.Follower})); !hasLine(text, want) {
		t.Errorf("metrics lack the line %q:\n%s", want, grepLines(text, "build"))
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

// TestMetricsOfTrackedReservations: the settler's counts, W, and W's lag
// behind the last tick handed out, in ticks and in the layout's time,
// while leading; no lag when not leading or when W is at or past it.
func TestMetricsOfTrackedReservations(t *testing.T) {
	l := mustLayout() // 1 ms units, 12 sequence bits
	w := uint64(5000)<<l.SeqBits | 7
	last := uint64(5250)<<l.SeqBits | 3 // 250 ms after W's unit
	stats := settle.Stats{Open: 3, Reserved: 10, Completed: 4, Abandoned: 2, Expired: 1}
	m := New(fakeRaft{state: raft.Leader}, fakeFSM{settled: w}, fakeSequencer{serving: true, next: last + 1}, fakeSettler{stats}, l, 0)
	text := scrape(t, m)
	for _, want := range []string{
		"ordo_reservations_open 3",
		"ordo_reservations_reserved_total 10",
		"ordo_reservations_completed_total 4",
		"ordo_reservations_abandoned_total 2",
		"ordo_reservations_expired_total 1",
		"# TYPE ordo_reservations_expired_total counter",
		"# TYPE ordo_reservations_open gauge",
		"ordo_watermark_ticks 2.0480007e+07",
		"ordo_watermark_lag_ticks 1.023996e+06",
		"ordo_watermark_lag_seconds 0.25",
	} {
		if !hasLine(text, want) {
			t.Errorf("metrics lack the line %q:\n%s", want, grepLines(text, "ordo_watermark"))
		}
	}
	for _, tt := range []struct {
		name string
		seq  fakeSequencer
	}{
		{"not leading", fakeSequencer{next: last + 1}}, // a deposed leader's next is stale
		{"W at the last tick", fakeSequencer{serving: true, next: w + 1}},
		{"W past it", fakeSequencer{serving: true, next: w}},
		{"nothing handed out", fakeSequencer{serving: true}},
	} {
		text := scrape(t, New(fakeRaft{state: raft.Follower}, fakeFSM{settled: w}, tt.seq, fakeSettler{}, l, 0))
		for _, want := range []string{"ordo_watermark_ticks 2.0480007e+07", "ordo_watermark_lag_ticks 0", "ordo_watermark_lag_seconds 0"} {
			if !hasLine(text, want) {
				t.Errorf("%s: metrics lack the line %q:\n%s", tt.name, want, grepLines(text, "ordo_watermark"))
			}
		}
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
