package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seed-e8569b35/ordo/server"
	"github.com/seed-e8569b35/ordo/verify"
)

// errVerifyFailed is returned when the history or recovery check fails.
var errVerifyFailed = errors.New("verification failed")

func runVerify(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var (
		addrs       = fs.String("addrs", "", "check an existing cluster (client side only, no faults); by default verify starts its own")
		nodes       = fs.Int("nodes", 3, "nodes of the cluster verify starts")
		duration    = fs.Duration("duration", 30*time.Second, "how long the workload runs")
		clients     = fs.Int("clients", 16, "concurrent failover clients")
		streams     = fs.Int("streams", 4, "clients that share one pipelined stream")
		pinned      = fs.Bool("pinned", true, "also one client per node that never fails over (catches a stale leader's answers)")
		maxCount    = fs.Int("max-count", 8, "each request asks for 1 to this many IDs")
		faultList   = fs.String("faults", "all", "comma-separated fault kinds, 'all', or 'none': "+strings.Join(verify.FaultNames(), ", "))
		interval    = fs.Duration("interval", 5*time.Second, "a fault every interval: quiet for interval-hold, then the fault for hold (the quiet time starts when the cluster serves again)")
		rounds      = fs.Int("rounds", 0, "stop once every fault has run this many times (0: run for --duration, which then caps the run only if given)")
		hold        = fs.Duration("hold", 2500*time.Millisecond, "how long each fault lasts before it is healed")
		dir         = fs.String("dir", "", "directory for the nodes' data and logs (default: a temporary one, removed unless the run fails)")
		seed        = fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the nemesis's choices")
		heartbeat   = fs.Duration("heartbeat-timeout", 300*time.Millisecond, "raft heartbeat timeout of the nodes verify starts")
		election    = fs.Duration("election-timeout", 300*time.Millisecond, "raft election timeout of the nodes verify starts")
		raftLease   = fs.Duration("leader-lease-timeout", 150*time.Millisecond, "raft leader lease timeout of the nodes verify starts")
		lease       = &leaseFlag{}
		unsafeTrust = fs.Bool("unsafe-trust-reservation", false, "TESTS ONLY: start nodes with the stale-leader bug built in (see ordo serve --test-unsafe-trust-reservation), to show the checker catches it")
		asJSON      = fs.Bool("json", false, "print the result as JSON")
		spec        = fs.String("layout", "", "layout of the nodes verify starts (ordo serve --layout; default: serve's); under uuidv7 or ulid the clients ask for those IDs and the checker also checks that their text and bytes sort as their ticks")
		tlsDir      = fs.String("tls-dir", "", "mutual TLS with the certificates scripts/gen-certs.sh writes into this directory: nodes verify starts serve node.pem and grant admin to admin.pem's subject, workload clients present client.pem, the nemesis admin.pem; with --addrs only ca.pem and client.pem are used")
	)
	fs.Var(lease, "lease", "start nodes with ordo serve --lease: bare, half their heartbeat timeout; or a duration")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := verify.Config{
		Nodes: *nodes, Duration: *duration, Clients: *clients, Streams: *streams, Pinned: *pinned, MaxCount: *maxCount,
		Interval: *interval, Hold: *hold, Rounds: *rounds, Seed: *seed, Progress: os.Stderr, Layout: *spec,
		ServeArgs: []string{
			"--heartbeat-timeout", heartbeat.String(), "--election-timeout", election.String(),
			"--leader-lease-timeout", raftLease.String(), "--log-level", "warn",
		},
	}
	if *tlsDir != "" {
		if st, err := os.Stat(*tlsDir); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: --tls-dir %s is not a directory", errUsage, *tlsDir)
		}
		cfg.TLS = verify.TLSDir(*tlsDir)
	}
	if *unsafeTrust {
		cfg.ServeArgs = append(cfg.ServeArgs, "--test-unsafe-trust-reservation")
	}
	if lease.d != 0 {
		if lease.d == server.DefaultLease && *heartbeat <= lease.d {
			lease.d = *heartbeat / 2 // bare --lease: half of the nodes' heartbeat timeout
		}
		cfg.ServeArgs = append(cfg.ServeArgs, "--lease="+lease.d.String())
	}
	switch *faultList {
	case "all":
		if *addrs == "" {
			cfg.Faults = verify.FaultNames()
		}
	case "none", "":
	default:
		cfg.Faults = strings.Split(*faultList, ",")
	}
	if *rounds > 0 && !flagSet(fs, "duration") && len(cfg.Faults) > 0 {
		// --rounds alone means every fault that many times: each takes an
		// interval, plus the wait until the cluster serves again.
		cfg.Duration = time.Duration(*rounds*len(cfg.Faults)) * (*interval + 30*time.Second)
	}
	if *addrs != "" {
		cfg.Addrs = strings.Split(*addrs, ",")
	} else {
		bin, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the ordo binary: %w", err)
		}
		cfg.Binary = bin
		cfg.Dir = *dir
		if cfg.Dir == "" {
			if cfg.Dir, err = os.MkdirTemp("", "ordo-verify-"); err != nil {
				return err
			}
		}
	}
	security := "plaintext"
	if cfg.TLS != nil {
		security = "mutual TLS from " + *tlsDir
	}
	fmt.Fprintf(os.Stderr, "ordo verify: %s, %d clients, %d on a stream, pinned %t, faults %v, seed %d, %s, data in %s\n",
		cfg.Duration, cfg.Clients, cfg.Streams, cfg.Pinned, cfg.Faults, cfg.Seed, security, cfg.Dir)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := verify.Run(ctx, cfg)
	if err != nil {
		if errors.Is(err, verify.ErrBadConfig) {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return err
	}
	if *asJSON {
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
		if cfg.Dir != "" {
			fmt.Fprintf(os.Stderr, "node logs kept in %s\n", cfg.Dir)
		}
		return errVerifyFailed
	}
	if *dir == "" && cfg.Dir != "" {
		os.RemoveAll(cfg.Dir)
	}
	return nil
}
