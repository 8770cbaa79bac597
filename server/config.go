package server

import (
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/metrics"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

// Defaults for Config.
const (
	// DefaultReserveWindow is how far ahead of the wall clock one
	// reservation reaches. Longer means fewer Raft commits when idle (one
	// every half window); shorter means a new leader's first IDs run less
	// far ahead of the wall clock. 3 s is what PD's TSO keeps.
	DefaultReserveWindow = 3 * time.Second
	// DefaultMaxCount is the largest count one Next request may ask for:
	// 100,000 IDs are about 25 ms of the default layout's capacity.
	DefaultMaxCount = 100_000
	// DefaultApplyTimeout bounds one Raft commit (reservation, confirmation
	// or membership change).
	DefaultApplyTimeout = 5 * time.Second
	// DefaultLease is the lease a leader holds with --lease and no
	// duration: well below Raft's default election timeout (1 s), so a
	// leader that crashed has let it run out before the next is elected.
	DefaultLease = 500 * time.Millisecond
	// DefaultSnapshotRetain is how many snapshots stay on disk: package
	// startup opens the snapshot store, so it owns the number.
	DefaultSnapshotRetain = startup.SnapshotRetain
	// DefaultMaxConnsPerHost bounds the gRPC connections one host may
	// hold open. Peers hold one each; a client one per node.
	DefaultMaxConnsPerHost = 512
	// DefaultRPCTimeout bounds every unary call, whatever deadline its
	// caller gave (streams live as long as their caller keeps them).
	DefaultRPCTimeout = 30 * time.Second
)

// Config configures one node.
type Config struct {
	// ID names the node in the Raft configuration; stable across restarts.
	ID string
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string
	// RaftAddr is the address the Raft transport binds and advertises;
	// port 0 picks a free port.
	RaftAddr string
	// RaftAdvertise is the Raft address peers dial, when it differs from
	// RaftAddr (a proxy, NAT, or a bind to every interface).
	RaftAdvertise string
	// GRPCAddr is the client-facing address; port 0 picks a free port.
	// GRPCAdvertise is the address other nodes and clients are told, when
	// it differs (a bind to every interface, NAT).
	GRPCAddr      string
	GRPCAdvertise string
	// HTTPAddr, when set, serves HTTP/JSON there (package httpapi):
	// health and readiness probes, IDs, status and the node's metrics.
	// With TLS it is HTTPS under the same rules as gRPC; without, it is
	// held to loopback like the other ports. Port 0 picks a free port.
	HTTPAddr string
	// Layout and Group fix how IDs are built. They must match the
	// cluster's, which the first leader records.
	Layout layout.Layout
	Group  uint64
	// ReserveWindow is how far ahead of now a reservation reaches: one
	// time unit of the layout to MaxReserveWindow.
	ReserveWindow time.Duration
	// MaxCount is the largest count per Next request: at most what the
	// layout hands out in the lead bound (sequencer.MaxLeadTicks).
	MaxCount uint64
	// MetricsSequences is how many named sequences, the busiest, the
	// per-sequence metrics name (0: metrics.DefaultSequenceSeries; at
	// most metrics.MaxSequenceSeries).
	MetricsSequences int
	// Reservations bounds tracked reservations (package settle): the
	// default TTL, the largest TTL, and the most open at once. Zero
	// fields take settle's defaults.
	Reservations settle.Config
	// ApplyTimeout bounds Raft commits made by this node: MinTimeout to
	// MaxApplyTimeout.
	ApplyTimeout time.Duration
	// MaxConnsPerHost bounds the gRPC connections from one remote host:
	// 1 to ConnsLimit, or -1 for no limit.
	MaxConnsPerHost int
	// RPCTimeout bounds every unary call: MinTimeout to MaxRPCTimeout.
	RPCTimeout time.Duration
	// Lease, when not 0, turns the lease on (see package leadership):
	// the leader answers from memory while a majority's promises hold,
	// one round trip instead of two, on the assumption that clocks run at
	// nearly the same rate. This node then also promises, and after a restart
	// confirms no leader until the longest lease it may have promised has
	// passed. It must be at least MinLease and shorter than Raft's
	// heartbeat timeout. 0: off.
	Lease time.Duration
	// Raft tunes Raft's timers; LocalID, Logger and NotifyCh are set by
	// Open. Nil means raft.DefaultConfig().
	Raft *raft.Config
	// TLS, when set, is this node's certificate and the cluster CA: every
	// gRPC and Raft connection is then mutual TLS, and only node
	// certificates may replicate, vote or answer term rounds. The
	// certificate must be a node certificate (see package secure). Nil
	// means plaintext, which Validate refuses on any address that is not
	// loopback unless Insecure is set.
	TLS *secure.TLS
	// Insecure allows plaintext on addresses other than loopback.
	Insecure bool
	// AdminSubjects are the certificate subjects (pkix.Name.String form,
	// e.g. "CN=ordo-admin") that may call admin RPCs: join, remove,
	// transfer-leader. Node certificates may too.
	AdminSubjects []string
	// AdminToken, when set, also grants admin rights to a call that
	// carries it ("authorization: Bearer <token>"); without TLS it is the
	// only thing that does. The node sends it with its own join request.
	AdminToken string
	// Clock is the wall clock; nil means time.Now. It stays an ordinary
	// injection point, not a test hook: a node must run correctly on
	// whatever clock it is given (in-package tests hand it one that lags),
	// so setting it breaks nothing on purpose. TestHooks.ClockOffset, the
	// offset a running test moves, shifts it.
	Clock func() time.Time
	// TestHooks is for tests only; the zero value is production. It
	// carries every behaviour that breaks a node on purpose (see
	// TestHooks), and nothing else in Config does.
	TestHooks TestHooks
	// Logger is the root of the node's logger tree; nil means a default
	// hclog logger.
	Logger hclog.Logger
}

// withDefaults fills zero fields with their defaults, and wires what
// Open sets (wired).
func (c Config) withDefaults() Config {
	if c.ReserveWindow == 0 {
		c.ReserveWindow = DefaultReserveWindow
	}
	if c.MaxCount == 0 {
		c.MaxCount = DefaultMaxCount
	}
	if c.MetricsSequences == 0 {
		c.MetricsSequences = metrics.DefaultSequenceSeries
	}
	c.Reservations = c.Reservations.WithDefaults()
	if c.ApplyTimeout == 0 {
		c.ApplyTimeout = DefaultApplyTimeout
	}
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	if c.RPCTimeout == 0 {
		c.RPCTimeout = DefaultRPCTimeout
	}
	return c.wired()
}

// wired fills what no setting gives: Raft (a copy, raft.DefaultConfig()
// when nil), the clock, the logger, Reservations.Window, and what Open
// sets in Raft's configuration.
func (c Config) wired() Config {
	if c.Raft == nil {
		c.Raft = raft.DefaultConfig()
	} else {
		rc := *c.Raft
		c.Raft = &rc
	}
	if c.Reservations.Window == 0 {
		c.Reservations.Window = settle.DefaultWindow
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	c.TestHooks, c.Clock = c.TestHooks.withClock(c.Clock)
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "ordo"})
	}
	c.Raft.LocalID = raft.ServerID(c.ID)
	c.Raft.Logger = c.Logger.Named("raft")
	return c
}

// Validate reports the first field out of its bounds (see the Min and
// Max constants), after zero fields took their defaults: a *FieldError
// naming the field when one field is at fault. Every error wraps
// startup.ErrBadConfig.
func (c Config) Validate() error {
	return c.withDefaults().check()
}

// isLoopback reports whether the bind address addr (host:port) listens on
// loopback only. An empty host binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
