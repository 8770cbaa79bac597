package server

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/metrics"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/sequencer"
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
	// ReserveWindow is how far ahead of now a reservation reaches.
	ReserveWindow time.Duration
	// MaxCount is the largest count per Next request.
	MaxCount uint64
	// MetricsSequences is how many named sequences, the busiest, the
	// per-sequence metrics name (0: metrics.DefaultSequenceSeries; at
	// most metrics.MaxSequenceSeries).
	MetricsSequences int
	// Reservations bounds tracked reservations (package settle): the
	// default TTL, the largest TTL, and the most open at once. Zero
	// fields take settle's defaults.
	Reservations settle.Config
	// ApplyTimeout bounds Raft commits made by this node.
	ApplyTimeout time.Duration
	// MaxConnsPerHost bounds the gRPC connections from one remote host;
	// a negative value means no limit.
	MaxConnsPerHost int
	// RPCTimeout bounds every unary call.
	RPCTimeout time.Duration
	// Lease, when not 0, turns the lease on (see package leadership):
	// the leader answers from memory while a majority's promises hold,
	// one round trip instead of two, on the assumption that clocks run at
	// nearly the same rate. This node then also promises, and after a restart
	// confirms no leader until the longest lease it may have promised has
	// passed. It must be shorter than Raft's heartbeat timeout. 0: off.
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

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.ReserveWindow == 0 {
		c.ReserveWindow = DefaultReserveWindow
	}
	if c.MaxCount == 0 {
		c.MaxCount = DefaultMaxCount
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
	if c.Raft == nil {
		c.Raft = raft.DefaultConfig()
	} else {
		rc := *c.Raft
		c.Raft = &rc
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

// Validate reports the first invalid field, after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case grpcapi.CheckNodeID(c.ID) != nil:
		return fmt.Errorf("%w: %w", startup.ErrBadConfig, grpcapi.CheckNodeID(c.ID))
	case c.DataDir == "":
		return fmt.Errorf("%w: data dir is empty", startup.ErrBadConfig)
	case c.RaftAddr == "":
		return fmt.Errorf("%w: raft address is empty", startup.ErrBadConfig)
	case c.GRPCAddr == "":
		return fmt.Errorf("%w: gRPC address is empty", startup.ErrBadConfig)
	case c.ReserveWindow < 0:
		return fmt.Errorf("%w: reserve window %s is negative", startup.ErrBadConfig, c.ReserveWindow)
	case c.ApplyTimeout < 0:
		return fmt.Errorf("%w: apply timeout %s is negative", startup.ErrBadConfig, c.ApplyTimeout)
	case c.RPCTimeout < 0:
		return fmt.Errorf("%w: RPC timeout %s is negative", startup.ErrBadConfig, c.RPCTimeout)
	case c.Lease < 0:
		return fmt.Errorf("%w: lease %s is negative", startup.ErrBadConfig, c.Lease)
	case c.Lease > 0 && c.Lease < 10*time.Millisecond:
		return fmt.Errorf("%w: lease %s is shorter than 10ms, less than a round takes", startup.ErrBadConfig, c.Lease)
	case c.Lease >= c.Raft.HeartbeatTimeout:
		// A follower stands for election once it has heard nothing for
		// the heartbeat timeout: a shorter lease has run out by then.
		return fmt.Errorf("%w: lease %s is not shorter than the heartbeat timeout %s: after a leader crash the next one would wait out its lease", startup.ErrBadConfig, c.Lease, c.Raft.HeartbeatTimeout)
	case c.MaxCount > c.Layout.MaxTick():
		return fmt.Errorf("%w: max count %d exceeds the layout's capacity", startup.ErrBadConfig, c.MaxCount)
	case c.MetricsSequences < 0 || c.MetricsSequences > metrics.MaxSequenceSeries:
		return fmt.Errorf("%w: metrics sequences %d: want 1 to %d (0 for the default, %d)", startup.ErrBadConfig,
			c.MetricsSequences, metrics.MaxSequenceSeries, metrics.DefaultSequenceSeries)
	}
	if c.ReserveWindow < time.Duration(c.Layout.UnitMs)*time.Millisecond {
		return fmt.Errorf("%w: reserve window %s is shorter than one time unit (%d ms)", startup.ErrBadConfig, c.ReserveWindow, c.Layout.UnitMs)
	}
	// A request's last ID may be at most the lead bound ahead of the
	// clock, so a larger count could never be served.
	if lead := sequencer.MaxLeadTicks(c.Layout, c.ReserveWindow); c.MaxCount > lead+1 {
		return fmt.Errorf("%w: max count %d is more IDs than the layout hands out in the lead bound (%d, %s of its capacity); lower --max-count or widen --reserve-window",
			startup.ErrBadConfig, c.MaxCount, lead+1, time.Duration(lead>>c.Layout.SeqBits)*time.Duration(c.Layout.UnitMs)*time.Millisecond)
	}
	if err := c.Reservations.Validate(); err != nil {
		return fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
	}
	if err := c.Layout.Validate(c.Clock()); err != nil {
		return fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
	}
	if err := c.Layout.CheckGroup(c.Group); err != nil {
		return fmt.Errorf("%w: %w", startup.ErrBadConfig, err)
	}
	if err := raft.ValidateConfig(c.Raft); err != nil {
		return fmt.Errorf("%w: raft: %w", startup.ErrBadConfig, err)
	}
	if c.TLS != nil {
		if leaf := c.TLS.Leaf(); leaf == nil || !secure.IsNode(leaf) {
			return fmt.Errorf("%w: a node needs a node certificate (with the serverAuth usage) to serve TLS", startup.ErrBadConfig)
		}
	} else if !c.Insecure {
		for _, a := range []string{c.RaftAddr, c.GRPCAddr, c.HTTPAddr} {
			if a != "" && !isLoopback(a) {
				return fmt.Errorf("%w: %q is not a loopback address and TLS is off: give a certificate (--tls-cert, --tls-key, --tls-ca), or --insecure to serve plaintext anyway", startup.ErrBadConfig, a)
			}
		}
	}
	return nil
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
