// Package metrics is a node's Prometheus metrics: what it served, how its
// reservations and leadership confirmations went, its tracked
// reservations and how far the settled mark W trails, and where its Raft
// state stands. Each node has its own registry, so that tests can run
// several nodes in one process; Raft's own metrics (hashicorp/raft emits
// them through armon/go-metrics) join the registry of the process's node
// with CollectRaft.
package metrics

import (
	"net/http"
	"sync/atomic"
	"time"

	gometrics "github.com/armon/go-metrics"
	gometricsprom "github.com/armon/go-metrics/prometheus"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/buildinfo"
	"github.com/seed-e8569b35/ordo/internal/proc"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
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
	// Settled is the settled mark W, in ticks.
	Settled() uint64
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
	// Serving reports whether it hands out IDs: while this node leads.
	Serving() bool
	// State is where it stands: Next is the next tick to hand out.
	State() sequencer.State
}

// Settler is what the gauges and counters read of the leader's side of
// tracked reservations: *settle.Settler.
type Settler interface {
	// Stats counts the reservations this node decided while leading,
	// and those open now (0 when not leading).
	Stats() settle.Stats
}

// Metrics holds one node's collectors.
type Metrics struct {
	reg *prometheus.Registry

	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	reservations  *prometheus.CounterVec
	reserveTime   prometheus.Histogram
	confirmations *prometheus.CounterVec
	confirmTime   prometheus.Histogram
	leaderChanges prometheus.Counter
	sequences     *SequenceCounts

	// Counted on the hot path with one atomic add each, read by Usage
	// and by the counters of the same names.
	ids, rounds               atomic.Uint64
	messagesRead, callsRead   atomic.Uint64
	messagesSent, answersSent atomic.Uint64
}

// latencyBuckets span 50 µs to about 3 s: a confirmed call takes two
// round trips, a reservation one fsync, a failover a second or more.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 17)

// New returns the metrics of the node whose Raft, replicated state,
// sequencer and settler are r, f, seq and st, and whose IDs are made with
// l, with the Go runtime's and the process's collectors. The
// per-sequence series name the sequenceSeries busiest named sequences
// (0: DefaultSequenceSeries; at most MaxSequenceSeries).
func New(r Raft, f FSM, seq Sequencer, st Settler, l layout.Layout, sequenceSeries int) *Metrics {
	if sequenceSeries <= 0 {
		sequenceSeries = DefaultSequenceSeries
	}
	m := &Metrics{reg: prometheus.NewRegistry(), sequences: NewSequenceCounts(time.Now)}
	m.reg.MustRegister(newSequenceCollector(m.sequences, min(sequenceSeries, MaxSequenceSeries)))
	m.reg.MustRegister(
		counter("ordo_ids_issued_total", "IDs handed out by this node as leader.", loadFloat(&m.ids)),
		counter("ordo_stream_messages_read_total", "NextStream messages this node read as leader.", loadFloat(&m.messagesRead)),
		counter("ordo_stream_calls_read_total", "Calls the NextStream messages this node read carried.", loadFloat(&m.callsRead)),
		counter("ordo_stream_messages_sent_total", "NextStream messages this node sent as leader.", loadFloat(&m.messagesSent)),
		counter("ordo_stream_answers_sent_total", "Answers the NextStream messages this node sent carried (a joint answer is one).", loadFloat(&m.answersSent)),
	)
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
		gauge("ordo_reservations_open", "Tracked reservations open now, of every sequence, as this leader counts them (0 when not leading).", func() float64 { return float64(st.Stats().Open) }),
		counter("ordo_reservations_reserved_total", "Tracked reservations of every sequence this node opened as leader.", func() float64 { return float64(st.Stats().Reserved) }),
		counter("ordo_reservations_completed_total", "Tracked reservations of every sequence this node completed as leader.", func() float64 { return float64(st.Stats().Completed) }),
		counter("ordo_reservations_abandoned_total", "Tracked reservations of every sequence this node abandoned as leader.", func() float64 { return float64(st.Stats().Abandoned) }),
		counter("ordo_reservations_expired_total", "Tracked reservations of every sequence this node expired as leader.", func() float64 { return float64(st.Stats().Expired) }),
		gauge("ordo_watermark_ticks", "The default sequence's settled mark W, in ticks: every ID with a tick below it is settled (a named sequence's: ordo watermark --sequence).", func() float64 { return float64(f.Settled()) }),
		gauge("ordo_watermark_lag_ticks", "Ticks from W to the highest tick this leader handed out (0 when not leading).", func() float64 {
			w, last := lagSpan(f, seq)
			return float64(last - w)
		}),
		gauge("ordo_watermark_lag_seconds", "Time from W to the highest ID this leader handed out, to the layout's time unit (0 when not leading).", func() float64 {
			w, last := lagSpan(f, seq)
			return l.TickTime(last).Sub(l.TickTime(w)).Seconds()
		}),
	)
	m.reg.MustRegister(buildInfo(buildinfo.Read()))
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

// buildInfo is ordo_build_info: always 1, its labels the build b of the
// node's binary, so that a query can tell which nodes run what.
func buildInfo(b buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ordo_build_info",
		Help:        "Always 1: the labels name this node's build, its module version, VCS revision and Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
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

// lagSpan is W and the highest tick this node handed out as leader, or W
// twice when there is no lag to show: when it does not lead, since a
// sequencer that stopped keeps the next tick of its last term while W
// moves on with the log, and when W is at or past that tick.
func lagSpan(f FSM, seq Sequencer) (w, last uint64) {
	w = f.Settled()
	if !seq.Serving() {
		return w, w
	}
	if next := seq.State().Next; next > w+1 {
		return w, next - 1
	}
	return w, w
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
func (m *Metrics) Issued(n uint64) { m.ids.Add(n) }

// StreamRead counts one NextStream message read, carrying calls calls.
func (m *Metrics) StreamRead(calls int) {
	m.messagesRead.Add(1)
	m.callsRead.Add(uint64(calls))
}

// StreamSent counts one NextStream message sent, carrying answers
// answers.
func (m *Metrics) StreamSent(answers int) {
	m.messagesSent.Add(1)
	m.answersSent.Add(uint64(answers))
}

// Usage is what this node's process spent since it started, with the
// counts of what it served, as NodeStatus reports them.
func (m *Metrics) Usage() *api.NodeUsage {
	u := proc.Self()
	return &api.NodeUsage{
		CpuMicros:              uint64(u.CPU.Microseconds()),
		ReadSyscalls:           u.ReadCalls,
		WriteSyscalls:          u.WriteCalls,
		ContextSwitches:        u.Switches,
		IdsIssued:              m.ids.Load(),
		StreamMessagesReceived: m.messagesRead.Load(),
		StreamCallsReceived:    m.callsRead.Load(),
		StreamMessagesSent:     m.messagesSent.Load(),
		StreamAnswersSent:      m.answersSent.Load(),
		ConfirmRounds:          m.rounds.Load(),
	}
}

// IssuedIn counts counts[i] IDs handed out of named sequence names[i],
// for each i (Issued counts them too).
func (m *Metrics) IssuedIn(names []string, counts []uint64) { m.sequences.Add(names, counts) }

// SequenceRate is how many IDs of named sequence name this node handed
// out as leader, and how many a second over about the last RateWindow.
func (m *Metrics) SequenceRate(name string) (issued uint64, perSecond float64) {
	c := m.sequences.Count(name)
	return c.Issued, c.Rate
}

// RateWindow is the interval SequenceRate measures over.
func (m *Metrics) RateWindow() time.Duration { return RateWindow }

// Reserved counts one reservation attempt that took d.
func (m *Metrics) Reserved(d time.Duration, err error) {
	m.reservations.WithLabelValues(result(err)).Inc()
	m.reserveTime.Observe(d.Seconds())
}

// Confirmed counts one confirmation round that took d.
func (m *Metrics) Confirmed(d time.Duration, err error) {
	m.rounds.Add(1)
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

// counter is a counter read from f at each scrape, for counts kept
// elsewhere; f must never go down.
func counter(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
}

// loadFloat reads a count for a counter.
func loadFloat(n *atomic.Uint64) func() float64 {
	return func() float64 { return float64(n.Load()) }
}

// register registers c with reg and returns it, so that each metric is
// made and registered in one statement.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	reg.MustRegister(c)
	return c
}
