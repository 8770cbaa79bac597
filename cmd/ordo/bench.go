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

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	addrs := fs.String("addrs", defaultAddrs, "comma-separated gRPC addresses of cluster nodes")
	concurrency := fs.Int("concurrency", 64, "concurrent callers (sharing one client)")
	count := fs.Int("count", 1, "IDs per request")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	stream := fs.Bool("stream", false, "pipeline every call on one stream to the leader")
	coalesce := fs.Int("coalesce", 0, "share requests among the callers, with at most this many in flight (0: one request per call)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "ordo bench: %d callers, %d IDs per call, coalescing %d, stream %t, %s\n", *concurrency, *count, *coalesce, *stream, *duration)
	res, err := bench.Run(ctx, bench.Config{
		Addrs: strings.Split(*addrs, ","), Concurrency: *concurrency, Count: *count,
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
