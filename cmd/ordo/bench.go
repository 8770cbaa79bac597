package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seed-e8569b35/ordo/bench"
	"github.com/seed-e8569b35/ordo/verify"
)

// errBenchWrong is returned when the IDs a benchmark received break the
// guarantees.
var errBenchWrong = errors.New("the IDs received break the order")

// defaultEtcdAddrs is etcd's own default client endpoint.
const defaultEtcdAddrs = "127.0.0.1:2379"

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	target := fs.String("target", bench.TargetOrdo, "what to measure, or several, comma-separated, measured one after the other in one run and compared (the first over each other): "+
		"\"ordo\"; \"etcd\" (one Put per ID, its revision as the ID; --addrs are then etcd client endpoints); "+
		"\"floor\" (a bare gRPC health check to the first address, which any Ordo node serves: what one unary round trip costs on this machine, the floor of --unary); "+
		"\"stream-floor\" (the callers share one stream to the first address, which echoes every call at once with no IDs, sent as the default client sends them: the floor of the default client); "+
		"\"reserve\" (each call is Reserve, TTL 30s, then Complete: two batched Raft commits); "+
		"\"commit-floor\" (each caller holds one reservation and each call extends it twice: two batched Raft commits and nothing else, the floor of reserve); "+
		"\"sequences\" (--sequences named sequences of --kind, bench-0 .. bench-N-1, created before the run if missing: caller i calls sequence i mod N, one batched Raft commit entry per call, each sequence's IDs checked alone); "+
		"\"watermark-lag\" (one writer reserves, extends and completes one ID at a time while a watcher follows W: how soon W passes each completed ID, against one commit; --concurrency does not apply)")
	// The default depends on --target, so it is chosen after parsing.
	addrs := fs.String("addrs", "", "comma-separated gRPC addresses of cluster nodes (default "+defaultAddrs+", or "+defaultEtcdAddrs+" for etcd)")
	concurrency := fs.Int("concurrency", 64, "concurrent callers (sharing one Ordo client; for etcd, spread over the endpoints round-robin)")
	count := fs.Int("count", 1, "IDs per request")
	duration := fs.Duration("duration", 10*time.Second, "how long to run each target")
	unary := fs.Bool("unary", false, "one unary RPC per call, as callers without the Go client make them (default: the Go client's shared stream)")
	coalesce := fs.Int("coalesce", 0, "share requests among the callers, with at most this many in flight (0: one request per call)")
	sequences := fs.Int("sequences", 1, "named sequences the \"sequences\" target spreads its callers over (caller i uses bench-<i mod N>)")
	kind := fs.String("kind", "dense", "kind of the \"sequences\" target's sequences: dense, or a 64-bit layout (default, twitter, discord, instagram, sonyflake, custom:...)")
	etcdAddrs := fs.String("etcd-addrs", "", "comma-separated etcd client endpoints for the \"etcd\" target, so one run can measure Ordo (--addrs or --start) and etcd side by side (default: --addrs)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	tlsFiles := addTLSFlags(fs, "client")
	cpuProfile := fs.String("cpuprofile", "", "write the bench process's own CPU profile (the callers and the client, not the nodes: see serve --pprof-addr) to this file")
	start := fs.Int("start", 0, "start this many local nodes (default Raft timers, data in a temporary dir removed afterwards) and measure them instead of --addrs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	targets := splitList(*target)
	if len(targets) == 0 {
		return fmt.Errorf("%w: --target names nothing", errUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *start != 0 {
		if *addrs != "" || slices.Contains(targets, bench.TargetEtcd) && *etcdAddrs == "" {
			return fmt.Errorf("%w: --start measures the Ordo nodes it starts: no --addrs, and an etcd target needs --etcd-addrs", errUsage)
		}
		c, err := startLocalCluster(ctx, *start)
		if err != nil {
			return err
		}
		defer c.stop()
		*addrs = strings.Join(c.Addrs(), ",")
	}
	if *addrs == "" {
		*addrs = defaultAddrs
		if slices.Contains(targets, bench.TargetEtcd) && *etcdAddrs == "" {
			*addrs = defaultEtcdAddrs
		}
	}
	t, err := tlsFiles.load()
	if err != nil {
		return err
	}
	var tlsConf *tls.Config
	if t != nil {
		tlsConf = t.ClientConfig()
	}
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	cfg := bench.Config{
		Addrs: splitList(*addrs), Concurrency: *concurrency, Count: *count,
		Duration: *duration, Coalesce: *coalesce, Unary: *unary, Progress: os.Stderr, TLS: tlsConf,
		Sequences: *sequences, Kind: *kind, EtcdAddrs: splitList(*etcdAddrs),
	}
	results, err := runTargets(ctx, cfg, targets)
	if err != nil {
		return err
	}
	return printBench(results, *asJSON)
}

// splitList is a comma-separated list, blanks dropped.
func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// runTargets measures each target in turn with cfg.
func runTargets(ctx context.Context, cfg bench.Config, targets []string) ([]bench.Result, error) {
	var results []bench.Result
	for _, tg := range targets {
		cfg.Target = tg
		addrs := cfg.Addrs
		if tg == bench.TargetEtcd && len(cfg.EtcdAddrs) > 0 {
			addrs = cfg.EtcdAddrs
		}
		fmt.Fprintf(os.Stderr, "ordo bench: target %s at %s: %s\n", tg, strings.Join(addrs, ","), describeRun(cfg))
		res, err := bench.Run(ctx, cfg)
		if errors.Is(err, bench.ErrBadConfig) {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", tg, err)
		}
		results = append(results, res)
	}
	return results, nil
}

// describeRun is what cfg runs, for the line before it.
func describeRun(cfg bench.Config) string {
	if cfg.Target == bench.TargetWatermarkLag {
		return fmt.Sprintf("one writer, one ID at a time, and a watcher of W, %s", cfg.Duration)
	}
	if cfg.Target == bench.TargetSequences {
		return fmt.Sprintf("%d callers over %d named sequences of kind %s, %d IDs per call, %s", cfg.Concurrency, cfg.Sequences, cfg.Kind, cfg.Count, cfg.Duration)
	}
	return fmt.Sprintf("%d callers, %d IDs per call, coalescing %d, unary %t, %s", cfg.Concurrency, cfg.Count, cfg.Coalesce, cfg.Unary, cfg.Duration)
}

// printBench prints the results, and with several how the first compares
// with each other; it fails when any run received IDs that break the
// order. One result prints as it always has.
func printBench(results []bench.Result, asJSON bool) error {
	type run struct {
		OK bool `json:"ok"`
		bench.Result
	}
	ok, runs := true, make([]run, len(results))
	for i, r := range results {
		ok = ok && r.OK()
		runs[i] = run{r.OK(), r}
	}
	var err error
	switch {
	case asJSON && len(runs) == 1:
		err = printJSON(runs[0])
	case asJSON:
		err = printJSON(struct {
			OK     bool          `json:"ok"`
			Runs   []run         `json:"runs"`
			Ratios []bench.Ratio `json:"ratios"`
		}{ok, runs, bench.Ratios(results)})
	default:
		printBenchText(results)
	}
	if err == nil && !ok {
		err = errBenchWrong
	}
	return err
}

func printBenchText(results []bench.Result) {
	if len(results) == 1 {
		fmt.Print(results[0])
		return
	}
	for _, r := range results {
		fmt.Printf("== %s ==\n%s\n", r.Target, r)
	}
	for _, r := range bench.Ratios(results) {
		fmt.Println(r)
	}
}

// startCPUProfile profiles this process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// localCluster is a cluster `ordo bench --start` runs for itself.
type localCluster struct {
	*verify.Cluster
	dir string
}

// startLocalCluster starts n nodes of this binary on loopback, in a
// temporary dir, and waits until they serve.
func startLocalCluster(ctx context.Context, n int) (*localCluster, error) {
	if n != 1 && n != 3 && n != 5 {
		return nil, fmt.Errorf("%w: --start %d, want 1, 3 or 5 nodes", errUsage, n)
	}
	bin, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the ordo binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "ordo-bench-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "ordo bench: starting %d nodes, data in %s on %s\n", n, dir, diskOf(dir))
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := verify.StartCluster(sctx, verify.ClusterConfig{Binary: bin, Dir: dir, Nodes: n})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %d nodes: %w", n, err)
	}
	return &localCluster{Cluster: c, dir: dir}, nil
}

func (c *localCluster) stop() {
	c.Stop()
	os.RemoveAll(c.dir)
}
