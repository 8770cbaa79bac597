package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/metrics"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/server"
	"github.com/seed-e8569b35/ordo/settle"
	"github.com/seed-e8569b35/ordo/startup"
)

const serveUsage = `Usage: ordo serve [flags]

Runs one node of an Ordo cluster. The first start needs --bootstrap (create
the cluster; give every initial node the same list) or --join (join an
existing one); later starts need neither, the data dir holds the state.
With both, a node named in --bootstrap creates the cluster with the others
only when every other node of the list, and every --join address, answers
that it holds no Raft state; when one does, it joins through --join, like
any node the list does not name: one command line for every node of a
StatefulSet. A list that names only this node creates nothing without
--force-bootstrap, given once: nothing could tell its first start from a
start after a lost data dir. A node that is
still a member but lost its data is refused either way (remove it with
ordo remove, and start it again), and so is one that cannot tell, after
--join-timeout.
SIGTERM or SIGINT stops the node, handing leadership over first if it leads.

Each setting comes from its flag, else from its ORDO_ environment variable
(shown in brackets), else from the --config file, else the default.

Flags:
`

// runServe is ordo serve: it runs one node until a signal stops it or
// the node fails.
// nodeGCPercent is the garbage collector's target a node runs at unless
// GOGC sets one. A node's live heap is small (tens of MB) and nearly all
// it allocates is per call, so at Go's default of 100 it collects many
// times a second under load; at 400 it spends about a tenth less CPU per
// ID (docs/performance.md) for a heap a few times as large, still small.
const nodeGCPercent = 400

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f, cfg, peers, err := parseServe(fs, args)
	if err != nil {
		return err
	}
	logger := cfg.Logger
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(nodeGCPercent)
	}
	if *f.pprofAddr != "" {
		_, stop, err := servePprof(*f.pprofAddr, logger.Named("pprof"))
		if err != nil {
			return err
		}
		defer stop()
	}
	if *f.clockFile != "" {
		logger.Warn("TEST CLOCK ENABLED: the wall clock is shifted by the offset in a file; never use this in production", "file", *f.clockFile)
		var stopClock func()
		cfg.TestHooks.ClockOffset, stopClock = fileClockOffset(*f.clockFile, logger)
		defer stopClock()
	}
	if *f.crashFile != "" {
		logger.Warn("TEST CRASH ENABLED: a file can end this node between a keyed call's commit and its answer; never use this in production", "file", *f.crashFile)
		cfg.TestHooks.AfterKeyedCommit = crashBeforeKeyedAnswer(*f.crashFile, logger)
	}
	if *f.recoverAlone {
		return namingFlags(recoverAlone(args, f, cfg, logger), fs, args)
	}
	entry, err := f.entry(args, peers)
	if err != nil {
		return err
	}
	node, start, err := enter(cfg, entry, *f.joinTimeout, logger)
	if err != nil {
		return namingFlags(err, fs, args)
	}
	logger.Info("serving", "start", start.String(), "id", cfg.ID, "grpc_addr", node.GRPCAddr(), "raft_addr", node.RaftAddr(), "http_addr", node.HTTPAddr(), "layout", cfg.Layout.String(), "group", cfg.Group)
	return serveUntilStopped(node, logger)
}

// parseServe parses ordo serve's command line args into fs, with the
// ORDO_ variables and the --config file, and checks every setting: it
// returns the flags, the node they describe and the --bootstrap list.
// Nothing starts.
func parseServe(fs *flag.FlagSet, args []string) (*serveFlags, server.Config, []server.Peer, error) {
	f := newServeFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return nil, server.Config{}, nil, err
	}
	if fs.NArg() > 0 {
		return nil, server.Config{}, nil, fmt.Errorf("%w: unexpected arguments %q: ordo serve takes flags only (a flag's value goes after it, or after =)", errUsage, fs.Args())
	}
	cfg, peers, err := f.config(fs, args)
	if err != nil {
		return nil, server.Config{}, nil, err
	}
	return f, cfg, peers, nil
}

// serveFlags are ordo serve's flags.
type serveFlags struct {
	id             *string
	dataDir        *string
	raftAddr       *string
	raftAdvertise  *string
	grpcAddr       *string
	grpcAdvertise  *string
	httpAddr       *string
	bootstrap      *string
	join           *string
	joinTimeout    *time.Duration
	forceBootstrap *bool
	recoverAlone   *bool
	recoverJump    *time.Duration
	denseSkip      *uint64
	layoutSpec     *string
	group          *uint64
	window         *time.Duration
	maxCount       *uint64
	metricsSeqs    *int
	maxConns       *int
	rpcTimeout     *time.Duration
	applyTimeout   *time.Duration
	heartbeat      *time.Duration
	election       *time.Duration
	raftLease      *time.Duration
	snapThreshold  *uint64
	snapInterval   *time.Duration
	trailingLogs   *uint64
	clusterID      *string
	tlsFiles       tlsFlags
	insecure       *bool
	adminSubjects  *string
	adminToken     *string
	lease          *leaseFlag
	pprofAddr      *string
	logLevel       *string
	logJSON        *bool
	unsafeTrust    *bool
	settleEarly    *bool
	clockFile      *string
	crashFile      *string
	resTTL         *time.Duration
	resMaxTTL      *time.Duration
	resMaxOpen     *int
}

// newServeFlags registers ordo serve's flags on fs, with its usage.
func newServeFlags(fs *flag.FlagSet) *serveFlags {
	defaults := raft.DefaultConfig()
	// parseFlags reads the file and fills in the flags it sets; nothing
	// here needs its name.
	fs.String("config", "", "a file of settings, one 'name = value' a line (names as these flags, without dashes; # comments); flags and ORDO_ variables win over it")
	f := &serveFlags{
		id:             fs.String("id", "", "node id, stable across restarts (required)"),
		dataDir:        fs.String("data-dir", "", "directory for the raft log, stable store and snapshots (required)"),
		raftAddr:       fs.String("raft-addr", "127.0.0.1:7101", "raft address: bound and advertised to peers"),
		raftAdvertise:  fs.String("raft-advertise", "", "raft address peers dial, if not --raft-addr (a proxy, NAT, or binding 0.0.0.0)"),
		grpcAddr:       fs.String("grpc-addr", "127.0.0.1:7001", "gRPC address for clients and peers"),
		grpcAdvertise:  fs.String("grpc-advertise", "", "gRPC address other nodes and clients are told, if not --grpc-addr (NAT, or binding 0.0.0.0)"),
		httpAddr:       fs.String("http-addr", "", "HTTP/JSON address for health probes (/healthz, /readyz), IDs (/v1/ids) and status (/v1/status); empty: no HTTP. HTTPS with the TLS flags"),
		bootstrap:      fs.String("bootstrap", "", "create a cluster on first start: id=raftaddr@grpcaddr,... (once the data dir holds state, its peers only check that it is this cluster's; with --join, a node it does not name joins)"),
		join:           fs.String("join", "", "join the cluster on first start through these gRPC addresses (members or a service in front of them; comma-separated, tried in turn)"),
		joinTimeout:    fs.Duration("join-timeout", time.Minute, fmt.Sprintf("how long a node with an empty data dir keeps asking its peers whether it may bootstrap or join, and then keeps trying to join (%s to %s)", minJoinTimeout, server.DurationText(maxJoinTimeout))),
		forceBootstrap: fs.Bool("force-bootstrap", false, "ONE-SHOT, command line only: with an empty data dir, bootstrap the --bootstrap list without asking anyone whether its cluster exists: the first start of a list of this node alone, or disaster recovery when no listed node ever held the cluster's state or it is gone for good; never on a node's usual command line (see docs/operations.md)"),
		recoverAlone:   fs.Bool("recover", false, "DISASTER RECOVERY, when a majority is lost for good: make this node the only voter of its cluster, move the high-water mark past what the lost nodes may have handed out, and exit; then start it again without --recover. Command line only. The lost nodes must NEVER start again with their data (see docs/operations.md)"),
		denseSkip:      fs.Uint64("dense-skip", 0, "with --recover: how far every dense sequence moves past its recorded mark, at least what the lost nodes may have handed out that this node's log lacks (a gap of that many values); required when the cluster has a dense sequence (0, no skip, only when it has none)"),
		recoverJump:    fs.Duration("recover-jump", backup.DefaultRecoverJump, fmt.Sprintf("with --recover: how far the mark moves past the later of the recorded mark and the clock, beyond one window and the lead bound, to stay above what the lost nodes may have handed out (0 to %s; 0: no further)", server.DurationText(maxRecoverJump))),
		layoutSpec:     fs.String("layout", "default", "ID layout: 64-bit default, twitter, discord, instagram, sonyflake, or custom:epoch=<unix ms>,unit=<ms>,bits=<time>/<group>/<seq>[,order=time-seq-group]; 128-bit uuidv7 or ulid"),
		group:          fs.Uint64("group", 0, "group field of every ID (names this cluster): 0 to the largest the layout's group bits hold"),
		window:         fs.Duration("reserve-window", server.DefaultReserveWindow, fmt.Sprintf("how far ahead of the wall clock one reservation reaches (one time unit of the layout, 1ms by default, to %s): longer commits less often when idle, shorter lets a new leader's first IDs run less far ahead", server.DurationText(server.MaxReserveWindow))),
		maxCount:       fs.Uint64("max-count", server.DefaultMaxCount, "largest count one request may ask for (1 to what the layout hands out in the lead bound, the larger of twice --reserve-window and 10s)"),
		metricsSeqs:    fs.Int("metrics-sequences", metrics.DefaultSequenceSeries, fmt.Sprintf("how many named sequences, the busiest, the per-sequence metrics name (1 to %d; the others are summed)", metrics.MaxSequenceSeries)),
		resTTL:         fs.Duration("reservation-ttl", settle.DefaultTTL, fmt.Sprintf("how long a tracked reservation lives when Reserve names no TTL (%s to --max-reservation-ttl; see docs/event-stores.md)", settle.MinTTL)),
		resMaxTTL:      fs.Duration("max-reservation-ttl", settle.DefaultMaxTTL, fmt.Sprintf("longest TTL a Reserve or Extend may ask for (%s to %s): a writer that vanished holds the settled mark back this long", settle.MinTTL, server.DurationText(settle.TTLLimit))),
		resMaxOpen:     fs.Int("max-open-reservations", settle.DefaultMaxOpen, fmt.Sprintf("most tracked reservations open at once (1 to %d); past it Reserve answers ResourceExhausted", settle.OpenLimit)),
		maxConns:       fs.Int("max-conns-per-host", server.DefaultMaxConnsPerHost, fmt.Sprintf("gRPC connections one remote host may hold open (1 to %d, or -1: no limit)", server.ConnsLimit)),
		rpcTimeout:     fs.Duration("rpc-timeout", server.DefaultRPCTimeout, fmt.Sprintf("longest any unary call may run, whatever deadline the caller gave (%s to %s)", server.MinTimeout, server.DurationText(server.MaxRPCTimeout))),
		applyTimeout:   fs.Duration("apply-timeout", server.DefaultApplyTimeout, fmt.Sprintf("longest one Raft commit this node makes may take: a reservation, a confirmation, a membership change (%s to %s)", server.MinTimeout, server.DurationText(server.MaxApplyTimeout))),
		heartbeat:      fs.Duration("heartbeat-timeout", defaults.HeartbeatTimeout, fmt.Sprintf("raft heartbeat timeout: a follower that hears nothing from the leader this long stands for election (%s to %s)", server.MinRaftTimeout, server.DurationText(server.MaxRaftTimeout))),
		election:       fs.Duration("election-timeout", defaults.ElectionTimeout, fmt.Sprintf("raft election timeout (--heartbeat-timeout to %s)", server.DurationText(server.MaxRaftTimeout))),
		raftLease:      fs.Duration("leader-lease-timeout", defaults.LeaderLeaseTimeout, fmt.Sprintf("raft leader lease timeout: a leader that has heard from no majority this long steps down (%s to --heartbeat-timeout)", server.MinRaftTimeout)),
		snapThreshold:  fs.Uint64("snapshot-threshold", defaults.SnapshotThreshold, fmt.Sprintf("log entries between snapshots (1 to %d)", server.RaftEntriesLimit)),
		snapInterval:   fs.Duration("snapshot-interval", defaults.SnapshotInterval, fmt.Sprintf("how often to check whether a snapshot is due (%s to %s)", server.MinSnapshotInterval, server.DurationText(server.MaxSnapshotInterval))),
		trailingLogs:   fs.Uint64("trailing-logs", defaults.TrailingLogs, fmt.Sprintf("log entries kept after a snapshot, so a slow follower can catch up without one (0 to %d; 0: none, a follower behind by any entry is sent the whole snapshot)", server.RaftEntriesLimit)),
		clusterID:      fs.String("cluster-id", "", "refuse to start on a data dir of any other cluster (the id 'ordo status' shows: 32 hex digits); without it a node still refuses when its recorded peers report another cluster"),
		tlsFiles:       addTLSFlags(fs, "this node's"),
		insecure:       fs.Bool("insecure", false, "serve plaintext even on addresses that are not loopback (anyone who reaches the raft port can then rewrite the cluster)"),
		adminSubjects:  fs.String("admin-subject", "", "certificate subjects allowed to call admin RPCs (join, remove, transfer-leader), as Go prints them (CN=ordo-admin,O=Example); several are separated by ';'"),
		adminToken:     fs.String("admin-token-file", "", "file holding a token that grants admin RPCs to whoever presents it (compared in constant time)"),
		lease:          &leaseFlag{},
		pprofAddr:      fs.String("pprof-addr", "", "serve Go's profiler (net/http/pprof) on this loopback address, for profiling a running node; empty: off"),
		logLevel:       fs.String("log-level", "info", "one of "+strings.Join(logLevels, ", ")),
		logJSON:        fs.Bool("log-json", false, "log as JSON"),
		unsafeTrust:    fs.Bool("test-unsafe-trust-reservation", false, "TESTS ONLY: hand out IDs from the reservation without confirming leadership, even after losing it; breaks the order on purpose so tests can show the checker catches it"),
		settleEarly:    fs.Bool("test-unsafe-settle-early", false, "TESTS ONLY: answer reads of the settled mark past open reservations; breaks the settled order on purpose so tests can show the checker catches it"),
		clockFile:      fs.String("test-clock-offset-file", "", "TESTS ONLY: read a clock offset (a Go duration such as -1h) from this file and add it to the wall clock"),
		crashFile:      fs.String("test-crash-before-keyed-answer", "", "TESTS ONLY: while this file holds 'arm', the next keyed call committed on this node as the leader ends the process before it is answered, writing what was committed over the file (ordo verify's kill-leader-before-answer)"),
	}
	fs.Var(f.lease, "lease", fmt.Sprintf("answer from memory while a majority has promised, for this long, to confirm no other leader: one round trip per request instead of two, assuming clocks run at nearly the same rate (see docs/design.md); bare --lease means %s, --lease 300ms or --lease=300ms sets it (%s to below --heartbeat-timeout; 0 or false: off). Off by default", server.DefaultLease, server.MinLease))
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	return f
}

// Bounds of the flags that only ordo serve reads (server.Config bounds
// the others).
const (
	minJoinTimeout = time.Second
	maxJoinTimeout = 24 * time.Hour
	maxRecoverJump = 24 * time.Hour
)

// logLevels are the levels --log-level takes.
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

// config is the node the flags of fs describe, parsed from args, and the
// --bootstrap list: every flag is checked here, before anything starts,
// and a bad one is a usage error naming it and what it takes. It reads
// the TLS files and the admin token the flags name; the node logs to
// cfg.Logger.
func (f *serveFlags) config(fs *flag.FlagSet, args []string) (server.Config, []server.Peer, error) {
	if err := f.checkOwn(); err != nil {
		return server.Config{}, nil, err
	}
	l, err := layout.Parse(*f.layoutSpec)
	if err != nil {
		return server.Config{}, nil, fmt.Errorf("%w: --layout %q: %v", errUsage, *f.layoutSpec, err)
	}
	var peers []server.Peer
	if *f.bootstrap != "" {
		if peers, err = parsePeers(*f.bootstrap); err != nil {
			return server.Config{}, nil, fmt.Errorf("%w: --bootstrap: %v", errUsage, err)
		}
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name: "ordo", Level: hclog.LevelFromString(*f.logLevel), JSONFormat: *f.logJSON, Output: os.Stderr,
	})
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = *f.heartbeat, *f.election, *f.raftLease
	rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = *f.snapThreshold, *f.snapInterval, *f.trailingLogs
	cfg := server.Config{
		ID: *f.id, DataDir: *f.dataDir, RaftAddr: *f.raftAddr, RaftAdvertise: *f.raftAdvertise, GRPCAddr: *f.grpcAddr, GRPCAdvertise: *f.grpcAdvertise, HTTPAddr: *f.httpAddr,
		Layout: l, Group: *f.group, ReserveWindow: *f.window, MaxCount: *f.maxCount, MetricsSequences: *f.metricsSeqs, MaxConnsPerHost: *f.maxConns,
		RPCTimeout: *f.rpcTimeout, ApplyTimeout: *f.applyTimeout, Lease: f.lease.d, Raft: rc, Logger: logger,
		Reservations: settle.Config{DefaultTTL: *f.resTTL, MaxTTL: *f.resMaxTTL, MaxOpen: *f.resMaxOpen},
		TestHooks:    server.TestHooks{UnsafeTrustReservation: *f.unsafeTrust, UnsafeSettleEarly: *f.settleEarly},
	}
	if cfg.TLS, err = f.tlsFiles.load(); err != nil {
		return server.Config{}, nil, err
	}
	cfg.Insecure = *f.insecure
	for _, s := range strings.Split(*f.adminSubjects, ";") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.AdminSubjects = append(cfg.AdminSubjects, s)
		}
	}
	if *f.adminToken != "" {
		if _, cfg.AdminToken, err = secure.ReadToken(*f.adminToken); err != nil {
			// Not the TLS files ReadToken's error names: the token's.
			why := strings.TrimPrefix(err.Error(), secure.ErrBadFiles.Error()+": ")
			return server.Config{}, nil, fmt.Errorf("%w: --admin-token-file: %s", errUsage, why)
		}
	}
	// As given: a 0 from a flag is refused, not taken for the default.
	if err := cfg.ValidateAsGiven(); err != nil {
		return server.Config{}, nil, serveConfigError(err, fs, args)
	}
	return cfg, peers, nil
}

// checkOwn checks what the flags say that server.Config does not hold:
// the required flags first, then the flags only ordo serve reads.
func (f *serveFlags) checkOwn() error {
	var missing []string
	if *f.id == "" {
		missing = append(missing, "--id")
	}
	if *f.dataDir == "" {
		missing = append(missing, "--data-dir")
	}
	if len(missing) > 0 {
		verb := " is"
		if len(missing) > 1 {
			verb = " are"
		}
		return fmt.Errorf("%w: %s%s missing: ordo serve needs --id (this node's name, stable across restarts) and --data-dir (the directory of its state), and on a first start --bootstrap or --join ('ordo serve -h' explains them)",
			errUsage, strings.Join(missing, " and "), verb)
	}
	if !slices.Contains(logLevels, strings.ToLower(strings.TrimSpace(*f.logLevel))) {
		return fmt.Errorf("%w: --log-level %q: want one of %s", errUsage, *f.logLevel, strings.Join(logLevels, ", "))
	}
	if d := *f.joinTimeout; d < minJoinTimeout || d > maxJoinTimeout {
		return fmt.Errorf("%w: --join-timeout %s: want %s to %s", errUsage, server.DurationText(d), minJoinTimeout, server.DurationText(maxJoinTimeout))
	}
	if d := *f.recoverJump; d < 0 || d > maxRecoverJump {
		return fmt.Errorf("%w: --recover-jump %s: want 0 to %s", errUsage, server.DurationText(d), server.DurationText(maxRecoverJump))
	}
	if id := *f.clusterID; id != "" && !isClusterID(id) {
		return fmt.Errorf("%w: --cluster-id %q: want the cluster's id as 'ordo status' shows it, 32 hex digits (0-9, a-f)", errUsage, id)
	}
	if *f.join != "" {
		for _, a := range strings.Split(*f.join, ",") {
			if a = strings.TrimSpace(a); a == "" {
				return fmt.Errorf("%w: --join %q: an empty address: want gRPC addresses separated by single commas", errUsage, *f.join)
			}
			if err := server.CheckAddr(a, true, "10.0.0.1:7001"); err != nil {
				return fmt.Errorf("%w: --join: %v", errUsage, err)
			}
		}
	}
	if *f.pprofAddr != "" {
		if err := checkPprofAddr(*f.pprofAddr); err != nil {
			return err
		}
	}
	return nil
}

// isClusterID reports whether id is a cluster id as a cluster makes them
// (fsm.NewClusterID): 32 lower-case hex digits.
func isClusterID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, r := range id {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// serveFieldFlags names the flag that sets each server.Config field a
// server.FieldError may name.
var serveFieldFlags = map[string]string{
	"ID":                      "id",
	"DataDir":                 "data-dir",
	"RaftAddr":                "raft-addr",
	"RaftAdvertise":           "raft-advertise",
	"GRPCAddr":                "grpc-addr",
	"GRPCAdvertise":           "grpc-advertise",
	"HTTPAddr":                "http-addr",
	"Layout":                  "layout",
	"Group":                   "group",
	"ReserveWindow":           "reserve-window",
	"MaxCount":                "max-count",
	"MetricsSequences":        "metrics-sequences",
	"Reservations.DefaultTTL": "reservation-ttl",
	"Reservations.MaxTTL":     "max-reservation-ttl",
	"Reservations.MaxOpen":    "max-open-reservations",
	"ApplyTimeout":            "apply-timeout",
	"RPCTimeout":              "rpc-timeout",
	"MaxConnsPerHost":         "max-conns-per-host",
	"Lease":                   "lease",
	"Raft.HeartbeatTimeout":   "heartbeat-timeout",
	"Raft.ElectionTimeout":    "election-timeout",
	"Raft.LeaderLeaseTimeout": "leader-lease-timeout",
	"Raft.SnapshotThreshold":  "snapshot-threshold",
	"Raft.SnapshotInterval":   "snapshot-interval",
	"Raft.TrailingLogs":       "trailing-logs",
	"TLS":                     "tls-cert",
	"Insecure":                "insecure",
	"AdminSubjects":           "admin-subject",
	"AdminToken":              "admin-token-file",
}

// serveConfigError is err, from server.Config's validation, as a usage
// error in the words of ordo serve's flags: each field named as its flag,
// and the value's source when it is not the command line args.
func serveConfigError(err error, fs *flag.FlagSet, args []string) error {
	var fe *server.FieldError
	if !errors.As(err, &fe) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	msg := fe.Explain(func(field string) string {
		if name, ok := serveFieldFlags[field]; ok {
			return "--" + name
		}
		return ""
	})
	if name, ok := serveFieldFlags[fe.Field]; ok {
		msg += flagSource(fs, args, name)
	}
	return fmt.Errorf("%w: %s", errUsage, msg)
}

// namingFlags is err, when a setting is at fault (a bind to every
// interface without an advertised address is found only when the node
// listens), in the words of the flags (serveConfigError); else err.
func namingFlags(err error, fs *flag.FlagSet, args []string) error {
	var fe *server.FieldError
	if errors.As(err, &fe) {
		return serveConfigError(fe, fs, args)
	}
	return err
}

// flagSource says where flag name's value came from, when not from the
// command line args: " (from $ORDO_…)", " (from --config)", or " (the
// default)".
func flagSource(fs *flag.FlagSet, args []string, name string) string {
	switch {
	case onCommandLine(args, name):
		return ""
	case envSet(name):
		return " (from $" + envName(name) + ")"
	case flagSet(fs, name):
		return " (from --config)"
	}
	return " (the default)"
}

// envSet reports whether flag name's environment variable is set.
func envSet(name string) bool {
	_, ok := os.LookupEnv(envName(name))
	return ok
}

// recoverAlone is ordo serve --recover: it makes the node of cfg the only
// voter of its cluster and returns; the node is then started again
// without --recover.
func recoverAlone(args []string, f *serveFlags, cfg server.Config, logger hclog.Logger) error {
	if *f.bootstrap != "" || *f.join != "" {
		return fmt.Errorf("%w: --recover works on an existing data dir: no --bootstrap, no --join", errUsage)
	}
	// Only from the command line, and once: a --recover left in an
	// environment file or a config file would run again at the next
	// restart, after other nodes joined, and drop them from the
	// configuration while they still count themselves a majority.
	if _, inEnv := os.LookupEnv(envName("recover")); inEnv || !onCommandLine(args, "recover") {
		return fmt.Errorf("%w: --recover must be given on the command line, not in $%s or --config", errUsage, envName("recover"))
	}
	hw, err := server.Recover(cfg, *f.recoverJump, *f.denseSkip)
	if err != nil {
		return err
	}
	logger.Warn("recovered: start this node again WITHOUT --recover; restart the other nodes only with wiped data dirs and --join", "high_water", hw)
	return nil
}

// entry is how the flags say the node may enter its cluster on a first
// start, peers being the --bootstrap list.
func (f *serveFlags) entry(args []string, peers []server.Peer) (server.Entry, error) {
	// Like --recover: a --force-bootstrap left in an environment or config
	// file would bootstrap again whenever the data dir is lost, which is
	// exactly what the check it skips prevents.
	if *f.forceBootstrap {
		if _, inEnv := os.LookupEnv(envName("force-bootstrap")); inEnv || !onCommandLine(args, "force-bootstrap") {
			return server.Entry{}, fmt.Errorf("%w: --force-bootstrap must be given on the command line, not in $%s or --config", errUsage, envName("force-bootstrap"))
		}
	}
	entry := server.Entry{Bootstrap: peers, ClusterID: *f.clusterID, ForceBootstrap: *f.forceBootstrap}
	if *f.join != "" {
		entry.Join = strings.Split(*f.join, ",")
	}
	return entry, nil
}

// enter decides how the node of cfg enters its cluster, opens it, and
// bootstraps or joins as decided, each within joinTimeout. How it enters
// is decided before Raft starts, from what its data dir and its peers
// hold: if it lost its data, Raft must not run it as the member it was.
func enter(cfg server.Config, entry server.Entry, joinTimeout time.Duration, logger hclog.Logger) (*server.Node, startup.Start, error) {
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
	start, err := server.DecideStart(ctx, cfg, entry)
	cancel()
	if errors.Is(err, startup.ErrBadConfig) {
		return nil, start, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return nil, start, err
	}
	node, err := server.Open(cfg)
	if err != nil {
		return nil, start, err
	}
	// Raft's own metrics (ordo_raft_*) go to a process-wide sink: this
	// process's one node takes them.
	if err := node.Metrics().CollectRaft(); err != nil {
		logger.Warn("raft metrics unavailable", "error", err)
	}
	switch start {
	case startup.StartBootstrap:
		err = node.Bootstrap(entry.Bootstrap)
	case startup.StartJoin:
		ctx, cancel := context.WithTimeout(context.Background(), joinTimeout)
		err = node.Join(ctx, entry.Join...)
		cancel()
	}
	if err != nil {
		node.Close()
		return nil, start, err
	}
	return node, start, nil
}

// serveUntilStopped runs node until SIGINT or SIGTERM, or until it fails,
// and closes it. Being removed from the cluster is no failure: an
// operator asked for it.
func serveUntilStopped(node *server.Node, logger hclog.Logger) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	var fatal error
	select {
	case s := <-sig:
		logger.Info("shutting down", "signal", s.String())
	case fatal = <-node.Fatal():
	}
	if err := node.Close(); err != nil {
		logger.Error("close", "error", err)
	}
	if errors.Is(fatal, server.ErrRemoved) {
		return nil
	}
	return fatal
}

// parsePeers parses id=raftaddr@grpcaddr,...
func parsePeers(spec string) ([]server.Peer, error) {
	var peers []server.Peer
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		id, addrs, ok := strings.Cut(strings.TrimSpace(item), "=")
		raftAddr, grpcAddr, ok2 := strings.Cut(addrs, "@")
		if !ok || !ok2 || id == "" || raftAddr == "" || grpcAddr == "" {
			return nil, fmt.Errorf("%q is not id=raftaddr@grpcaddr", item)
		}
		if seen[id] {
			return nil, fmt.Errorf("id %q appears twice", id)
		}
		if err := server.CheckAddr(raftAddr, true, "10.0.0.1:7101"); err != nil {
			return nil, fmt.Errorf("%s's raft address %v", id, err)
		}
		if err := server.CheckAddr(grpcAddr, true, "10.0.0.1:7001"); err != nil {
			return nil, fmt.Errorf("%s's gRPC address %v", id, err)
		}
		seen[id] = true
		peers = append(peers, server.Peer{ID: id, RaftAddr: raftAddr, GRPCAddr: grpcAddr})
	}
	return peers, nil
}

// fileClockOffset returns the duration written in path as an offset source
// for server.TestHooks.ClockOffset, re-read every 10 ms, so a test can move
// one node's clock while it runs, and a func that stops the re-reading.
// A missing or empty file means no shift. Reading stays here, beside the
// flag, while the node only sees the offset: the file is how ordo verify
// reaches into a separate process, not something the server knows about.
func fileClockOffset(path string, logger hclog.Logger) (func() time.Duration, func()) {
	var offset atomic.Int64
	read := func() {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			offset.Store(0)
			return
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			logger.Warn("bad test clock offset", "value", s, "error", err)
			return
		}
		if old := offset.Swap(int64(d)); old != int64(d) {
			logger.Warn("test clock offset changed", "offset", d)
		}
	}
	read()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() time.Duration { return time.Duration(offset.Load()) }, func() { close(done) }
}
