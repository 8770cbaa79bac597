package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seed-e8569b35/ordo/server"
	"github.com/seed-e8569b35/ordo/verify"
)

// errVerifyFailed is returned when the history or recovery check fails.
var errVerifyFailed = errors.New("verification failed")

// runVerify is ordo verify: a workload against a cluster, under faults
// when verify starts the cluster itself, and a check of every answer.
func runVerify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	f := newVerifyFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := f.config(fs)
	if err != nil {
		return err
	}
	security := "plaintext"
	if cfg.TLS != nil {
		security = "mutual TLS from " + *f.tlsDir
	}
	fmt.Fprintf(os.Stderr, "ordo verify: %s, %d clients, %d on a stream, pinned %t, %d tracked, %d sequences, %d keyed, faults %v, seed %d, %s, data in %s\n",
		cfg.Duration, cfg.Clients, cfg.Streams, cfg.Pinned, cfg.Tracked, cfg.Sequences, cfg.Keyed, cfg.Faults, cfg.Seed, security, cfg.Dir)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := verify.Run(ctx, cfg)
	if err != nil {
		if errors.Is(err, verify.ErrBadConfig) {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return err
	}
	return reportVerify(res, cfg.Dir, *f.asJSON, *f.dir != "")
}

// verifyFlags are ordo verify's flags.
type verifyFlags struct {
	addrs, faultList, dir, spec, tlsDir       *string
	nodes, clients, streams, maxCount, rounds *int
	tracked, sequences, keyed                 *int
	duration, interval, hold                  *time.Duration
	heartbeat, election, raftLease            *time.Duration
	pinned, unsafeTrust, settleEarly, asJSON  *bool
	seed                                      *uint64
	lease                                     *leaseFlag
}

// newVerifyFlags registers ordo verify's flags on fs.
func newVerifyFlags(fs *flag.FlagSet) *verifyFlags {
	f := &verifyFlags{
		addrs:       fs.String("addrs", "", "check an existing cluster (client side only, no faults); by default verify starts its own"),
		nodes:       fs.Int("nodes", 3, "nodes of the cluster verify starts"),
		duration:    fs.Duration("duration", 30*time.Second, "how long the workload runs"),
		clients:     fs.Int("clients", 16, "concurrent failover clients"),
		streams:     fs.Int("streams", 4, "clients that share one pipelined stream"),
		pinned:      fs.Bool("pinned", true, "also one client per node that never fails over (catches a stale leader's answers)"),
		maxCount:    fs.Int("max-count", 8, "each request asks for 1 to this many IDs"),
		tracked:     fs.Int("tracked", 8, "clients that reserve IDs and complete, abandon, extend, complete late or drop each reservation, with a reader of the settled mark on every node; the checker checks the settled order (0: off)"),
		sequences:   fs.Int("sequences", 0, "named sequences to create and spread clients' calls over, every third dense; each is checked apart, dense ones also for gaps no lost call explains (0: none)"),
		keyed:       fs.Int("keyed", 4, "clients that make every call with an idempotency key of its own and retry it with the key until answered, asking some keys again on one node; the checker takes a key's attempts as one call and fails the run if a key gets two answers (0: none, and no kill-leader-before-answer)"),
		faultList:   fs.String("faults", "all", "comma-separated fault kinds, 'all', or 'none': "+strings.Join(verify.FaultNames(), ", ")),
		interval:    fs.Duration("interval", 5*time.Second, "a fault every interval: quiet for interval-hold, then the fault for hold (the quiet time starts when the cluster serves again)"),
		rounds:      fs.Int("rounds", 0, "stop once every fault has run this many times (0: run for --duration, which then caps the run only if given)"),
		hold:        fs.Duration("hold", 2500*time.Millisecond, "how long each fault lasts before it is healed"),
		dir:         fs.String("dir", "", "directory for the nodes' data and logs (default: a temporary one, removed unless the run fails)"),
		seed:        fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the nemesis's choices"),
		heartbeat:   fs.Duration("heartbeat-timeout", 300*time.Millisecond, "raft heartbeat timeout of the nodes verify starts"),
		election:    fs.Duration("election-timeout", 300*time.Millisecond, "raft election timeout of the nodes verify starts"),
		raftLease:   fs.Duration("leader-lease-timeout", 150*time.Millisecond, "raft leader lease timeout of the nodes verify starts"),
		lease:       &leaseFlag{},
		unsafeTrust: fs.Bool("unsafe-trust-reservation", false, "TESTS ONLY: start nodes with the stale-leader bug built in (see ordo serve --test-unsafe-trust-reservation), to show the checker catches it"),
		settleEarly: fs.Bool("unsafe-settle-early", false, "TESTS ONLY: start nodes whose reads of the settled mark pass open reservations (see ordo serve --test-unsafe-settle-early), to show the checker catches it"),
		asJSON:      fs.Bool("json", false, "print the result as JSON"),
		spec:        fs.String("layout", "", "layout of the nodes verify starts (ordo serve --layout; default: serve's); under uuidv7 or ulid the clients ask for those IDs and the checker also checks that their text and bytes sort as their ticks"),
		tlsDir:      fs.String("tls-dir", "", "mutual TLS with the certificates scripts/gen-certs.sh writes into this directory: nodes verify starts serve node.pem and grant admin to admin.pem's subject, workload clients present client.pem, the nemesis admin.pem; with --addrs only ca.pem and client.pem are used"),
	}
	fs.Var(f.lease, "lease", "start nodes with ordo serve --lease: bare, half their heartbeat timeout; or a duration")
	return f
}

// config is the run the flags ask for; fs tells which flags were given.
// Without --addrs it names this binary to start the nodes, and a
// directory for them.
func (f *verifyFlags) config(fs *flag.FlagSet) (verify.Config, error) {
	cfg := verify.Config{
		Nodes: *f.nodes, Duration: *f.duration, Clients: *f.clients, Streams: *f.streams, Pinned: *f.pinned, MaxCount: *f.maxCount, Tracked: *f.tracked,
		Sequences: *f.sequences, Keyed: *f.keyed, Interval: *f.interval, Hold: *f.hold, Rounds: *f.rounds, Seed: *f.seed, Progress: os.Stderr, Layout: *f.spec,
		ServeArgs: f.serveArgs(),
	}
	if *f.tlsDir != "" {
		if st, err := os.Stat(*f.tlsDir); err != nil || !st.IsDir() {
			return verify.Config{}, fmt.Errorf("%w: --tls-dir %s is not a directory", errUsage, *f.tlsDir)
		}
		cfg.TLS = verify.TLSDir(*f.tlsDir)
	}
	cfg.Faults = f.faults()
	if *f.rounds > 0 && !flagSet(fs, "duration") && len(cfg.Faults) > 0 {
		// --rounds alone means every fault that many times: each takes an
		// interval, plus the wait until the cluster serves again.
		cfg.Duration = time.Duration(*f.rounds*len(cfg.Faults)) * (*f.interval + 30*time.Second)
	}
	if *f.addrs != "" {
		cfg.Addrs = strings.Split(*f.addrs, ",")
		return cfg, nil
	}
	bin, err := os.Executable()
	if err != nil {
		return verify.Config{}, fmt.Errorf("find the ordo binary: %w", err)
	}
	cfg.Binary = bin
	cfg.Dir = *f.dir
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "ordo-verify-"); err != nil {
			return verify.Config{}, err
		}
	}
	return cfg, nil
}

// serveArgs are the ordo serve flags of the nodes verify starts.
func (f *verifyFlags) serveArgs() []string {
	args := []string{
		"--heartbeat-timeout", f.heartbeat.String(), "--election-timeout", f.election.String(),
		"--leader-lease-timeout", f.raftLease.String(), "--log-level", "warn",
	}
	if *f.unsafeTrust {
		args = append(args, "--test-unsafe-trust-reservation")
	}
	if *f.settleEarly {
		args = append(args, "--test-unsafe-settle-early")
	}
	if d := f.lease.d; d != 0 {
		if d == server.DefaultLease && *f.heartbeat <= d {
			d = *f.heartbeat / 2 // bare --lease: half of the nodes' heartbeat timeout
		}
		args = append(args, "--lease="+d.String())
	}
	return args
}

// faults are the fault kinds --faults names. "all" is none against a
// cluster verify did not start (--addrs): it has no processes or proxies
// there to fault.
func (f *verifyFlags) faults() []string {
	switch *f.faultList {
	case "all":
		if *f.addrs != "" {
			return nil
		}
		all := verify.FaultNames()
		if *f.keyed == 0 {
			// Without keyed clients there is no keyed call to end the
			// leader between.
			all = slices.DeleteFunc(all, verify.NeedsKeyed)
		}
		return all
	case "none", "":
		return nil
	default:
		return strings.Split(*f.faultList, ",")
	}
}

// reportVerify prints res, as JSON when asJSON, and fails when the run
// did. The nodes' data in dir is removed after a passing run unless the
// caller chose dir (keepDir), and always kept after a failing one, for
// its logs.
func reportVerify(res verify.Result, dir string, asJSON, keepDir bool) error {
	if asJSON {
		if err := printJSON(struct {
			OK bool `json:"ok"`
			verify.Result
		}{res.OK(), res}); err != nil {
			return err
		}
	} else {
		fmt.Print(res)
	}
	if !res.OK() {
		if dir != "" {
			fmt.Fprintf(os.Stderr, "node logs kept in %s\n", dir)
		}
		return errVerifyFailed
	}
	if !keepDir && dir != "" {
		os.RemoveAll(dir)
	}
	return nil
}
