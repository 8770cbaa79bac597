// Package metrics is a node's Prometheus metrics: what it served, how its
// reservations and leadership confirmations went, and where its Raft
// state stands. Each node has its own registry, so that tests can run
// several nodes in one process; Raft's own metrics (hashicorp/raft emits
// them through armon/go-metrics) join the registry of the process's node
// with CollectRaft.
package metrics

import (
	"net/http"
	"time"

	gometrics "github.com/armon/go-metrics"
	gometricsprom "github.com/armon/go-metrics/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Raft is what the gauges read of Raft at each scrape, so they are never
// stale: *raft.Raft.
type Raft interface {
	CurrentTerm() uint64
	State() raft.RaftState
	CommitIndex() uint64
	AppliedIndex() uint64
	// LastContact is when this node last heard from a leader (zero if
	// never).
	LastContact() time.Time
}

// FSM is what the gauges read of the replicated state: *fsm.FSM.
type FSM interface {
	// HighWater is the replicated high-water mark, in ticks.
	HighWater() uint64
}

// Sequencer is what the gauges read of the node's sequencer:
// *sequencer.Sequencer.
type Sequencer interface {
	// TimestampLead is how far the time field of the last ID handed out
	// is ahead of the wall clock (negative: behind; 0 on followers).
	TimestampLead() time.Duration
	// LeaseLeft is how long this leader may still answer from its lease
	// (0: no lease, or not the leader).
	LeaseLeft() time.Duration
}

// Metrics holds one node's collectors.
type Metrics struct {
	reg *prometheus.Registry

	ids           prometheus.Counter
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	reservations  *prometheus.CounterVec
	reserveTime   prometheus.Histogram
	confirmations *prometheus.CounterVec
	confirmTime   prometheus.Histogram
	leaderChanges prometheus.Counter
}

// latencyBuckets span 50 µs to about 3 s: a confirmed call takes two
// round trips, a reservation one fsync, a failover a second or more.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 17)

// New returns the metrics of the node whose Raft, replicated state and
// sequencer are r, f and seq, with the Go runtime's and the process's
// collectors.
func New(r Raft, f FSM, seq Sequencer) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.ids = register(m.reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "ordo_ids_issued_total", Help: "IDs handed out by this node as leader."}))
	m.requests = register(m.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ordo_requests_total", Help: "Calls served, by gRPC method (or HTTP route) and status code."}, []string{"method", "code"}))
	m.latency = register(m.reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ordo_request_duration_seconds", Help: "Time to serve a call, by method.", Buckets: latencyBuckets}, []string{"method"}))
	m.reservations = register(m.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ordo_reservations_total", Help: "Reservations committed through Raft, by result (ok, error)."}, []string{"result"}))
	m.reserveTime = register(m.reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ordo_reservation_duration_seconds", Help: "Time to commit one reservation.", Buckets: latencyBuckets}))
	m.confirmations = register(m.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ordo_leadership_confirmations_total", Help: "Leadership confirmation rounds, by result (ok, error)."}, []string{"result"}))
	m.confirmTime = register(m.reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ordo_leadership_confirmation_duration_seconds", Help: "Time of one confirmation round.", Buckets: latencyBuckets}))
	m.leaderChanges = register(m.reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "ordo_leader_changes_total", Help: "Times this node became or stopped being the leader."}))
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		gauge("ordo_raft_term", "Current Raft term.", func() float64 { return float64(r.CurrentTerm()) }),
		gauge("ordo_raft_commit_index", "Raft commit index.", func() float64 { return float64(r.CommitIndex()) }),
		gauge("ordo_raft_applied_index", "Raft applied index.", func() float64 { return float64(r.AppliedIndex()) }),
		gauge("ordo_high_water_ticks", "The replicated high-water mark, in ticks.", func() float64 { return float64(f.HighWater()) }),
		gauge("ordo_lease_remaining_seconds", "How long this leader may still answer from its lease without a round (0: no lease, or not the leader).", func() float64 { return seq.LeaseLeft().Seconds() }),
		gauge("ordo_timestamp_lead_seconds", "How far the time field of the last ID handed out is ahead of the wall clock.", func() float64 { return seq.TimestampLead().Seconds() }),
		gauge("ordo_last_leader_contact_seconds", "Seconds since this node last heard from a leader (-1: never).", func() float64 { return sinceContact(r) }),
	)
	for role, state := range roles {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ordo_raft_role", Help: "1 for this node's Raft role, 0 for the others.", ConstLabels: prometheus.Labels{"role": role},
		}, func() float64 {
			if r.State() == state {
				return 1
			}
			return 0
		}))
	}
	return m
}

// roles are ordo_raft_role's labels, the names node status gives Raft's
// states.
var roles = map[string]raft.RaftState{
	"leader": raft.Leader, "follower": raft.Follower, "candidate": raft.Candidate, "shutdown": raft.Shutdown,
}

// sinceContact is the seconds since this node last heard from a leader,
// -1 if never. A leader counts as hearing from itself now: Raft's
// LastContact is a follower's clock, stale on a leader.
func sinceContact(r Raft) float64 {
	if r.State() == raft.Leader {
		return 0
	}
	t := r.LastContact()
	if t.IsZero() {
		return -1
	}
	return time.Since(t).Seconds()
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// CollectRaft makes Raft's own metrics (ordo_raft_commitTime and the
// like) part of this registry.
// Raft reports to a process-wide sink, so only one node per process can
// do this: the one `ordo serve` runs.
func (m *Metrics) CollectRaft() error {
	sink, err := gometricsprom.NewPrometheusSinkFrom(gometricsprom.PrometheusOpts{Registerer: m.reg, Expiration: time.Minute})
	if err != nil {
		return err
	}
	cfg := gometrics.DefaultConfig("ordo")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false // the Go collector has them
	cfg.EnableServiceLabel = false
	_, err = gometrics.NewGlobal(cfg, sink)
	return err
}

// Served counts one call of method that ended with code (a gRPC code name
// or an HTTP status) after d.
func (m *Metrics) Served(method, code string, d time.Duration) {
	m.requests.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

// Issued counts n IDs handed out.
func (m *Metrics) Issued(n uint64) { m.ids.Add(float64(n)) }

// Reserved counts one reservation attempt that took d.
func (m *Metrics) Reserved(d time.Duration, err error) {
	m.reservations.WithLabelValues(result(err)).Inc()
	m.reserveTime.Observe(d.Seconds())
}

// Confirmed counts one confirmation round that took d.
func (m *Metrics) Confirmed(d time.Duration, err error) {
	m.confirmations.WithLabelValues(result(err)).Inc()
	m.confirmTime.Observe(d.Seconds())
}

// LeaderChanged counts a change of this node's leadership.
func (m *Metrics) LeaderChanged() { m.leaderChanges.Inc() }

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func gauge(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// register registers c with reg and returns it, so that each metric is
// made and registered in one statement.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	reg.MustRegister(c)
	return c
}
