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

	"github.com/seed-e8569b35/ordo/bench"
)

// errBenchWrong is returned when the IDs a benchmark received break the
// guarantees.
var errBenchWrong = errors.New("the IDs received break the order")

// defaultEtcdAddrs is etcd's own default client endpoint.
const defaultEtcdAddrs = "127.0.0.1:2379"

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	target := fs.String("target", bench.TargetOrdo, "what to measure: \"ordo\", or \"etcd\" (one Put per ID, its revision as the ID; --addrs are then etcd client endpoints)")
	// The default depends on --target, so it is chosen after parsing.
	addrs := fs.String("addrs", "", "comma-separated gRPC addresses of cluster nodes (default "+defaultAddrs+", or "+defaultEtcdAddrs+" for etcd)")
	concurrency := fs.Int("concurrency", 64, "concurrent callers (sharing one Ordo client; for etcd, spread over the endpoints round-robin)")
	count := fs.Int("count", 1, "IDs per request")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	stream := fs.Bool("stream", false, "pipeline every call on one stream to the leader")
	coalesce := fs.Int("coalesce", 0, "share requests among the callers, with at most this many in flight (0: one request per call)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *addrs == "" {
		*addrs = defaultAddrs
		if *target == bench.TargetEtcd {
			*addrs = defaultEtcdAddrs
		}
	}
	var addrList []string
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrList = append(addrList, a)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "ordo bench: target %s at %s: %d callers, %d IDs per call, coalescing %d, stream %t, %s\n",
		*target, strings.Join(addrList, ","), *concurrency, *count, *coalesce, *stream, *duration)
	res, err := bench.Run(ctx, bench.Config{
		Target: *target, Addrs: addrList, Concurrency: *concurrency, Count: *count,
		Duration: *duration, Coalesce: *coalesce, Stream: *stream, Progress: os.Stderr,
	})
	if errors.Is(err, bench.ErrBadConfig) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		err = printJSON(struct {
			OK bool `json:"ok"`
			bench.Result
		}{res.OK(), res})
	} else {
		fmt.Print(res)
	}
	if err == nil && !res.OK() {
		err = errBenchWrong
	}
	return err
}
