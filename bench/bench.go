// Package bench is Ordo's load generator: concurrent callers ask a running
// cluster for IDs as fast as they can for a while, and the run reports
// throughput and latency percentiles. Everything received is also checked
// with package history, so a fast result is never a wrong one.
//
// The same callers can drive an etcd cluster instead (Config.Target), one
// Put per number with the store revision as the sequence number, so the
// two systems are measured and checked by exactly the same code. Tracked
// reservations are measured too (Reserve then Complete), beside their
// floor of bare batched Raft commits and the settled mark's lag.
package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
)

// Errors of this package.
var (
	// ErrBadConfig means a Config field is out of range.
	ErrBadConfig = errors.New("invalid bench configuration")
	// ErrBadResponse means an etcd reply could not be decoded, or lacked
	// the revision the benchmark needs.
	ErrBadResponse = errors.New("malformed etcd response")
)

// Targets a run can measure (Config.Target).
const (
	// TargetOrdo is an Ordo cluster, through package client.
	TargetOrdo = "ordo"
	// TargetEtcd is an etcd v3 cluster: each call is one Put, and the
	// revision it was applied at is the call's single ID.
	TargetEtcd = "etcd"
	// TargetFloor is the gRPC floor: each call is one standard health
	// check to the first address (any Ordo node serves it), which does no
	// work and yields no IDs. It measures what one round trip costs on
	// this machine, so the other targets' figures can be read as ratios.
	TargetFloor = "floor"
	// TargetStreamFloor is the stream floor: the callers share one stream
	// to the first address's Floor service, which answers every call at
	// once with no IDs, and send their calls as the default client sends
	// them on its stream. It is what the default client's figures would be
	// if Ordo cost nothing.
	TargetStreamFloor = "stream-floor"
	// TargetReserve is tracked reservations through the default client:
	// each call reserves Count IDs (TTL 30 s) and completes them, two
	// batched Raft commits; its IDs are checked as TargetOrdo's.
	TargetReserve = "reserve"
	// TargetCommitFloor is TargetReserve's floor: each caller holds one
	// open reservation and each call extends it twice, two batched Raft
	// commits through the same settle loop with nothing else, no IDs.
	TargetCommitFloor = "commit-floor"
	// TargetWatermarkLag is one writer reserving, extending and completing
	// one ID at a time, and a watcher of W: each call's Result.Lag is how
	// soon the watcher saw W pass the ID. Concurrency is ignored.
	TargetWatermarkLag = "watermark-lag"
	// TargetSequences is Config.Sequences named sequences of
	// Config.Kind, created before the run (bench-0 .. bench-N-1, kept
	// afterwards): caller i calls sequence i mod N through the default
	// client's Sequence handle, one batched Raft commit entry per call.
	// Each sequence's IDs are checked alone (sequences owe each other no
	// order).
	TargetSequences = "sequences"
)

// Targets lists every target, for usage messages.
var Targets = []string{TargetOrdo, TargetEtcd, TargetFloor, TargetStreamFloor, TargetReserve, TargetCommitFloor, TargetWatermarkLag, TargetSequences}

// Config is one benchmark run.
type Config struct {
	// Target is one of Targets; empty is TargetOrdo.
	Target string
	// Addrs are the cluster's gRPC addresses: Ordo nodes, or etcd client
	// endpoints (host:port) for TargetEtcd.
	Addrs []string
	// Concurrency is the number of callers: sharing one client for Ordo,
	// spread over the endpoints round-robin for etcd.
	Concurrency int
	// Count is the number of IDs each request asks for. It must be 1 for
	// TargetEtcd, where a Put yields one revision.
	Count int
	// Duration is how long the callers run.
	Duration time.Duration
	// TLS, if set, is how to reach the Ordo nodes (every target but
	// TargetEtcd): the cluster CA and a client certificate.
	TLS *tls.Config
	// Coalesce, if positive, makes the callers' client share requests,
	// with at most this many in flight (client.WithCoalescing). Ordo only.
	Coalesce int
	// Unary makes every call one bare unary Next on the leader, as callers
	// without the Go client make them (generated stubs, no retries);
	// by default the callers share the default client's stream. Ordo only.
	Unary bool
	// Sequences is how many named sequences TargetSequences spreads its
	// callers over; 0 is 1. Other targets ignore it.
	Sequences int
	// Kind is TargetSequences' kind: "dense" (the default when empty) or
	// a 64-bit layout spec ("default", "twitter", "custom:...").
	Kind string
	// EtcdAddrs, if set, are TargetEtcd's endpoints in place of Addrs, so
	// one run can measure an Ordo cluster and an etcd cluster side by side.
	EtcdAddrs []string
	// Progress, if set, gets a line a second.
	Progress io.Writer
}

// Result is what a run measured.
type Result struct {
	Target   string `json:"target"`
	Requests int64  `json:"requests"`
	Errors   int64  `json:"errors"`
	// BadResponses counts the errors that were answers refused for
	// breaking the guarantees or the wire format (runs that repeat or go
	// back, a malformed etcd reply): each fails the run, as an order
	// violation the checker finds does.
	BadResponses int64         `json:"bad_responses"`
	LastError    string        `json:"last_error,omitempty"`
	IDs          int64         `json:"ids"`
	Elapsed      time.Duration `json:"elapsed"`
	RequestsS    float64       `json:"requests_per_sec"`
	IDsS         float64       `json:"ids_per_sec"`
	// Latencies of successful requests.
	P50  time.Duration `json:"p50"`
	P90  time.Duration `json:"p90"`
	P99  time.Duration `json:"p99"`
	P999 time.Duration `json:"p999"`
	Max  time.Duration `json:"max"`
	// LongestGap is the longest time without a successful response
	// during the run: what a failover or a stall cost the callers.
	LongestGap time.Duration `json:"longest_gap"`
	// Check is the history checker's report on every response.
	Check history.Report `json:"check"`
	// Lag is TargetWatermarkLag's measurement, nil for the other targets.
	Lag *Lag `json:"watermark_lag,omitempty"`
	// Costs is what the run cost this process and, for every target but
	// etcd, each node whose status answered before and after it.
	Costs []Cost `json:"costs"`
}

// OK reports whether everything received kept the guarantees: the
// checker found nothing, and no answer was refused as bad.
func (r Result) OK() bool { return r.Check.OK() && r.BadResponses == 0 }

// String is the human summary.
func (r Result) String() string {
	s := fmt.Sprintf("%d requests (%d errors), %d IDs in %s: %.0f requests/s, %.0f IDs/s\n"+
		"latency p50 %s  p90 %s  p99 %s  p99.9 %s  max %s; longest gap without a response %s\n%s\n",
		r.Requests, r.Errors, r.IDs, r.Elapsed.Round(time.Millisecond), r.RequestsS, r.IDsS,
		r.P50, r.P90, r.P99, r.P999, r.Max, r.LongestGap.Round(time.Microsecond), r.Check)
	if r.BadResponses > 0 {
		s += fmt.Sprintf("bad responses: %d refused for breaking the guarantees or the wire format\n", r.BadResponses)
	}
	if r.LastError != "" {
		s += "last error: " + r.LastError + "\n"
	}
	if r.Lag != nil {
		s += r.Lag.String()
	}
	for _, c := range r.Costs {
		s += c.String() + "\n"
	}
	return s
}

// Run runs the callers for cfg.Duration and measures them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Target == "" {
		cfg.Target = TargetOrdo
	}
	if cfg.Target == TargetWatermarkLag && cfg.Concurrency > 0 {
		cfg.Concurrency = 1 // one writer: nothing else holds W back
	}
	groups := 1
	if cfg.Target == TargetSequences {
		cfg.Sequences = max(cfg.Sequences, 1)
		groups = cfg.Sequences
	}
	tgt, err := newTarget(cfg)
	if err != nil {
		return Result{}, err
	}
	defer tgt.close()
	// Requests first, so connecting and finding the leader are not
	// counted as latency; a cluster that is down fails here, not later.
	firstCtx, cancelFirst := context.WithTimeout(ctx, 30*time.Second)
	err = tgt.warm(firstCtx)
	cancelFirst()
	if err != nil {
		return Result{}, fmt.Errorf("first request: %w", err)
	}
	nodes, err := statusOf(cfg)
	if err != nil {
		return Result{}, err
	}
	defer nodes.close()
	rec := history.NewRecorder()
	var tally history.Tally
	costs := startCosts(ctx, nodes.ask)
	start, elapsed := drive(ctx, cfg, tgt, rec, &tally)
	spent := costs.end(ctx)
	res := result(cfg.Target, rec, &tally, start, elapsed, groups)
	res.Costs = spent.perID(res.IDs, elapsed)
	if l, ok := tgt.(*lagTarget); ok {
		res.Lag = l.lag()
	}
	return res, nil
}

// newTarget checks cfg and connects to what it names.
func newTarget(cfg Config) (target, error) {
	if len(cfg.Addrs) == 0 || cfg.Concurrency < 1 || cfg.Count < 1 || cfg.Duration <= 0 || cfg.Coalesce < 0 {
		return nil, fmt.Errorf("%w: want addresses, concurrency >= 1, count >= 1, duration > 0, coalesce >= 0", ErrBadConfig)
	}
	if cfg.Unary && cfg.Coalesce > 0 {
		return nil, fmt.Errorf("%w: choose unary or coalescing, not both", ErrBadConfig)
	}
	switch cfg.Target {
	case TargetOrdo:
		if cfg.Unary {
			return newUnaryTarget(cfg.Addrs, cfg.TLS, cfg.Count), nil
		}
		return newOrdoTarget(cfg)
	case TargetEtcd:
		if cfg.Count != 1 || cfg.Unary || cfg.Coalesce > 0 {
			return nil, fmt.Errorf("%w: etcd gives one revision per Put: want count 1, no Ordo client modes", ErrBadConfig)
		}
		addrs := cfg.Addrs
		if len(cfg.EtcdAddrs) > 0 {
			addrs = cfg.EtcdAddrs
		}
		return newEtcdTarget(addrs, cfg.Concurrency)
	case TargetFloor:
		if cfg.Count != 1 || cfg.Unary || cfg.Coalesce > 0 {
			return nil, fmt.Errorf("%w: the floor is one bare unary call: want count 1, no Ordo client modes", ErrBadConfig)
		}
		return newFloorTarget(cfg.Addrs[0], cfg.TLS)
	case TargetStreamFloor:
		if cfg.Count != 1 || cfg.Unary || cfg.Coalesce > 0 {
			return nil, fmt.Errorf("%w: the stream floor is the default client's stream with nothing behind it: want count 1, no other Ordo client modes", ErrBadConfig)
		}
		return newStreamFloorTarget(cfg.Addrs[0], cfg.TLS)
	case TargetSequences:
		if cfg.Unary || cfg.Coalesce > 0 {
			return nil, fmt.Errorf("%w: named sequences are unary calls of the default client: no --unary or --coalesce", ErrBadConfig)
		}
		if cfg.Sequences < 1 {
			return nil, fmt.Errorf("%w: want sequences >= 1", ErrBadConfig)
		}
		return newSequencesTarget(cfg)
	case TargetReserve, TargetCommitFloor, TargetWatermarkLag:
		return newSettleTarget(cfg)
	default:
		return nil, fmt.Errorf("%w: unknown target %q (want one of %s)", ErrBadConfig, cfg.Target, strings.Join(Targets, ", "))
	}
}

// newSettleTarget checks cfg for a target of the settled order and
// connects to the cluster. They measure the default client, whose settle
// calls are unary with retries, so no other client mode applies.
func newSettleTarget(cfg Config) (target, error) {
	if cfg.Unary || cfg.Coalesce > 0 {
		return nil, fmt.Errorf("%w: target %s measures the default client: no --unary or --coalesce", ErrBadConfig, cfg.Target)
	}
	switch cfg.Target {
	case TargetReserve:
		return newReserveTarget(cfg)
	case TargetCommitFloor:
		if cfg.Count != 1 {
			return nil, fmt.Errorf("%w: the commit floor hands out no IDs: want count 1", ErrBadConfig)
		}
		return newCommitFloorTarget(cfg)
	}
	if cfg.Count != 1 {
		return nil, fmt.Errorf("%w: the watermark lag is measured on reservations of one ID: want count 1", ErrBadConfig)
	}
	return newLagTarget(cfg)
}

// drive runs cfg.Concurrency callers on tgt until cfg.Duration ends or ctx
// does, recording every call in rec and counting it in tally, and returns
// when all have stopped.
func drive(ctx context.Context, cfg Config, tgt target, rec *history.Recorder, tally *history.Tally) (start time.Time, elapsed time.Duration) {
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var wg sync.WaitGroup
	stopProgress := progress(cfg.Progress, tally)
	start = time.Now()
	end, _ := runCtx.Deadline()
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(runCtx, tgt, history.Caller{Rec: rec, Tally: tally, Client: i, Judge: judge(runCtx, end)})
		}()
	}
	wg.Wait()
	elapsed = time.Since(start)
	stopProgress()
	return start, elapsed
}

// call makes c's calls, one after another, until ctx ends.
func call(ctx context.Context, tgt target, c history.Caller) {
	for ctx.Err() == nil {
		c.Call(func() ([]uint64, []string, error) {
			ids, err := tgt.call(ctx, c.Client)
			return ids, nil, err
		})
	}
}

// judge tells how a call of a run that ends at end (or with ctx) ended:
// an error the end of the run caused says nothing about the system (a
// shared request may notice the deadline before this call does), a bad
// answer fails the run, and every other error is an error of the call.
func judge(ctx context.Context, end time.Time) history.Judge {
	return func(err error) history.Ending {
		switch {
		case ctx.Err() != nil || !time.Now().Before(end):
			return history.CutOff
		case isBadResponse(err):
			return history.BadAnswer
		}
		return history.Uncertain
	}
}

// result measures the run from the tally and the history in rec, and
// checks the history.
// Caller i's calls are of group i mod groups, each checked alone
// (checkGroups).
func result(target string, rec *history.Recorder, tally *history.Tally, start time.Time, elapsed time.Duration, groups int) Result {
	ops := rec.Ops()
	// Latencies of the successful requests, as the history recorded them:
	// the callers read the clock no more than the recorder does.
	var latencies []time.Duration
	for _, op := range ops {
		if op.Outcome == history.OK {
			latencies = append(latencies, op.End-op.Start)
		}
	}
	slices.Sort(latencies)
	n := tally.Counts()
	res := Result{
		Target:   target,
		Requests: n.OK, Errors: n.Errors(), BadResponses: n.Bad, IDs: n.IDs, Elapsed: elapsed,
		RequestsS: float64(n.OK) / elapsed.Seconds(),
		IDsS:      float64(n.IDs) / elapsed.Seconds(),
		P50:       percentile(latencies, 0.50), P90: percentile(latencies, 0.90),
		P99: percentile(latencies, 0.99), P999: percentile(latencies, 0.999),
		Check:      checkGroups(ops, groups),
		LongestGap: longestGap(ops, rec.Offset(start), rec.Offset(start.Add(elapsed))),
		LastError:  n.LastError,
	}
	if n := len(latencies); n > 0 {
		res.Max = latencies[n-1]
	}
	return res
}

// isBadResponse reports whether err refused an answer for what it said,
// not for how the call went: the answer broke the guarantees (the client's
// checks, or the run decoder's for bare unary calls) or the wire format.
// Such an answer may hide exactly the duplicate or reordering the bench
// exists to catch, so it fails the run.
func isBadResponse(err error) bool {
	return errors.Is(err, client.ErrBadResponse) || errors.Is(err, api.ErrBadRuns) || errors.Is(err, ErrBadResponse)
}

// target is what the callers drive. Only how one call is made differs
// between systems; timing, counting and checking stay in Run.
type target interface {
	// call makes one call for caller (0 <= caller < Concurrency) and
	// returns the IDs it was given, in the order given.
	call(ctx context.Context, caller int) ([]uint64, error)
	// warm makes the first request(s), outside the measurement.
	warm(ctx context.Context) error
	close()
}

// ordoTarget asks an Ordo cluster for IDs through one shared client.
type ordoTarget struct {
	c     *client.Client
	count int
}

func newOrdoTarget(cfg Config) (*ordoTarget, error) {
	var opts []client.Option
	if cfg.TLS != nil {
		opts = append(opts, client.WithTLS(cfg.TLS))
	}
	if cfg.Coalesce > 0 {
		opts = append(opts, client.WithCoalescing(cfg.Coalesce))
	}
	c, err := client.New(cfg.Addrs, opts...)
	if err != nil {
		return nil, err
	}
	return &ordoTarget{c: c, count: cfg.Count}, nil
}

// call ignores caller: the callers share one client (or stream), which is
// the point of measuring coalescing and pipelining.
func (t *ordoTarget) call(ctx context.Context, _ int) ([]uint64, error) {
	return t.c.NextN(ctx, t.count)
}

func (t *ordoTarget) warm(ctx context.Context) error {
	_, err := t.c.NextN(ctx, t.count)
	return err
}

func (t *ordoTarget) close() { t.c.Close() }

// longestGap is the longest time between from and to in which no
// operation of ops completed successfully.
func longestGap(ops []history.Op, from, to time.Duration) time.Duration {
	ends := []time.Duration{from, to}
	for _, op := range ops {
		if op.Outcome == history.OK && op.End > from && op.End < to {
			ends = append(ends, op.End)
		}
	}
	slices.Sort(ends)
	var gap time.Duration
	for i := 1; i < len(ends); i++ {
		gap = max(gap, ends[i]-ends[i-1])
	}
	return gap
}

// percentile returns the q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	return sorted[min(i, len(sorted)-1)]
}

// progress writes to out, once a second, the requests and IDs tally
// counted in that second, until stopped.
func progress(out io.Writer, tally *history.Tally) (stop func()) {
	if out == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		var lastR, lastI int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := tally.Counts()
				r, i := n.OK, n.IDs
				fmt.Fprintf(out, "%5.1fs %8d requests/s %10d IDs/s\n", time.Since(start).Seconds(), r-lastR, i-lastI)
				lastR, lastI = r, i
			}
		}
	}()
	return func() { close(done); <-finished }
}
