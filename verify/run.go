package verify

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// Config is one verification run.
type Config struct {
	// Binary is the ordo binary that nodes run. Unused with Addrs.
	Binary string
	// Dir holds the nodes' data and logs. Unused with Addrs.
	Dir string
	// Nodes is the cluster size when the run starts its own cluster.
	Nodes int
	// Addrs, if set, is an existing cluster: only the client side runs,
	// and Faults must be empty.
	Addrs []string
	// Duration is how long the workload runs.
	Duration time.Duration
	// Clients, Streams, Pinned, MaxCount and Tracked shape the workload
	// (see WorkloadConfig).
	Clients  int
	Streams  int
	Pinned   bool
	MaxCount int
	Tracked  int
	// Sequences is the number of named sequences the run creates and
	// spreads calls over (sequences.go), every third dense; 0 means none.
	Sequences int
	// Keyed is the number of keyed clients (keyed.go): every call of
	// theirs carries an idempotency key, retried with it until answered.
	Keyed int
	// Faults are the kinds the nemesis picks from, in turn; empty means
	// none.
	Faults []string
	// Interval less Hold is the quiet time before each fault (counted
	// from when the cluster served again after the previous one); Hold is
	// how long each fault lasts before it is healed.
	Interval, Hold time.Duration
	// Rounds, if positive, ends the run once every fault has run that many
	// times (Duration still caps it).
	Rounds int
	// ServeArgs are extra `ordo serve` flags for every node.
	ServeArgs []string
	// Layout is the layout spec of the nodes the run starts (--layout);
	// "" is ordo serve's default. The workload asks the cluster for its
	// layout either way.
	Layout string
	// TLS, if set, turns on mutual TLS: every node verify starts serves
	// with TLS.Node, the workload's clients present TLS.Client and the
	// nemesis TLS.Admin. With Addrs only TLS.Client is used.
	TLS *TLS
	// Seed makes the nemesis's choices repeatable.
	Seed uint64
	// Progress, if set, gets a line a second and one per fault.
	Progress io.Writer
}

// FaultRecord is what happened around one fault.
type FaultRecord struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// Round counts the times this kind has run, from 1.
	Round int `json:"round"`
	// Start, Healed and End are offsets from the start of the run; End is
	// the next fault's start or the end of the run.
	Start  time.Duration `json:"start"`
	Healed time.Duration `json:"healed"`
	End    time.Duration `json:"end"`
	// LongestGap is the longest time in [Start, End) in which no request
	// succeeded (completions, so it includes the time to fail over).
	LongestGap time.Duration `json:"longest_gap"`
	// Recovered says a request succeeded within the recovery timeout
	// after the fault was healed; Recovery is how long that took. The
	// next fault starts only after recovery (or the timeout).
	Recovered bool          `json:"recovered"`
	Recovery  time.Duration `json:"recovery"`
	Err       string        `json:"error,omitempty"`
}

// Result is a run's verdict and figures.
type Result struct {
	Report       history.Report `json:"report"`
	BadResponses int64          `json:"bad_responses"`
	// Tracked is what the tracked clients and the readers of W saw; the
	// settled-order checks are in Report.Settled.
	Tracked TrackedCounts `json:"tracked"`
	// Sequences are the named sequences' verdicts, one each.
	Sequences []SequenceResult `json:"sequences,omitempty"`
	// Keyed is what the keyed clients did, with the calls leaders ended
	// before answering; their replays and conflicts are in Report.
	Keyed     KeyedCounts   `json:"keyed"`
	Elapsed   time.Duration `json:"elapsed"`
	OpsPerSec float64       `json:"ops_per_sec"`
	IDsPerSec float64       `json:"ids_per_sec"`
	Faults    []FaultRecord `json:"faults"`
	// Recovered says requests succeeded after the last fault was healed.
	Recovered bool `json:"recovered"`
	// Exited names the nodes whose process had ended by itself when the
	// run ended (verify stops nodes only to restart them), with how: a
	// node that crashed, or failed to rejoin after remove-readd.
	Exited []string `json:"exited,omitempty"`
	// Findings say what a failing run found wrong: each check that
	// failed, with a few calls that show it and the fault they happened
	// during. Empty when the run passed.
	Findings []Finding `json:"findings,omitempty"`
	// Logs are the ends of the nodes' logs, when the run failed and
	// started its own cluster.
	Logs []NodeLog `json:"logs,omitempty"`
}

// OK reports whether the run found nothing wrong: a valid history, no
// response the client had to withhold, no reservation answered with a
// fate its writer could not have led to or forgotten, no keyed retry
// refused as reusing its key and every keyed call a leader ended before
// answering answered afterwards with what was committed, recovery after
// every fault, and every node still running.
func (r Result) OK() bool {
	if !r.Report.OK() || r.BadResponses > 0 || r.Tracked.Failures() > 0 || r.Keyed.Failures() > 0 || !r.Recovered || len(r.Exited) > 0 {
		return false
	}
	for _, f := range r.Faults {
		if !f.Recovered || f.Err != "" {
			return false
		}
	}
	for _, s := range r.Sequences {
		if !s.OK() {
			return false
		}
	}
	return true
}

// String is the human verdict.
func (r Result) String() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "verdict: %s\n", verdict)
	fmt.Fprintf(&b, "%s\n", r.Report)
	fmt.Fprintf(&b, "withheld bad responses: %d\n", r.BadResponses)
	if t := r.Tracked; t.Reserved > 0 || t.Reads > 0 {
		fmt.Fprintf(&b, "tracked: %d reserved, %d completed, %d abandoned, %d extended, %d left to expire; late completes %d expired, %d ok; %d answers said expired, %d undecided, %d wrong fate, %d lost; %d reads of W\n",
			t.Reserved, t.Completed, t.Abandoned, t.Extended, t.LeftToExpire, t.LateExpired, t.LateCompleted, t.Expired, t.Undecided, t.WrongFate, t.Lost, t.Reads)
	}
	if len(r.Sequences) > 0 {
		b.WriteString(sequenceSummary(r.Sequences))
	}
	if r.Keyed.Calls > 0 || r.Report.Keyed > 0 {
		b.WriteString(keyedSummary(r.Keyed, r.Report))
	}
	fmt.Fprintf(&b, "throughput: %.0f requests/s, %.0f IDs/s over %s\n", r.OpsPerSec, r.IDsPerSec, r.Elapsed.Round(time.Millisecond))
	for _, f := range r.Faults {
		state := "recovered"
		if !f.Recovered {
			state = "NOT RECOVERED"
		}
		if f.Err != "" {
			state = "ERROR: " + f.Err
		}
		fmt.Fprintf(&b, "  %7.1fs %-16s %-28s longest gap %6s, served again %6s after heal: %s\n",
			f.Start.Seconds(), f.Kind, f.Target, f.LongestGap.Round(time.Millisecond), f.Recovery.Round(time.Millisecond), state)
	}
	if !r.Recovered {
		fmt.Fprintf(&b, "the cluster did not serve again after the last fault was healed\n")
	}
	for _, e := range r.Exited {
		fmt.Fprintf(&b, "node exited by itself: %s\n", e)
	}
	if len(r.Findings) > 0 {
		fmt.Fprintf(&b, "what failed:\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "  %s: %s\n", f.Check, f.Detail)
		if f.When != "" {
			fmt.Fprintf(&b, "    when: %s\n", f.When)
		}
		for _, c := range f.Calls {
			fmt.Fprintf(&b, "    call: %s\n", c)
		}
	}
	for _, l := range r.Logs {
		b.WriteString(l.String())
	}
	return b.String()
}

// recoveryTimeout is how long the cluster has, after the last heal, to
// serve again before the run fails.
const recoveryTimeout = 30 * time.Second

// Run starts a cluster (unless cfg.Addrs names one), runs the workload and
// the nemesis for cfg.Duration, heals everything, and checks the history.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	var clientTLS *tls.Config
	if cfg.TLS != nil {
		var err error
		if clientTLS, _, err = clientConfig("client", cfg.TLS.Client); err != nil {
			return Result{}, err
		}
	}
	addrs := cfg.Addrs
	var cluster *Cluster
	if len(addrs) == 0 {
		var err error
		cluster, err = StartCluster(ctx, ClusterConfig{
			Binary: cfg.Binary, Dir: cfg.Dir, Nodes: cfg.Nodes, ServeArgs: cfg.ServeArgs, Layout: cfg.Layout, TLS: cfg.TLS,
			CrashBeforeKeyedAnswer: slices.ContainsFunc(cfg.Faults, func(f string) bool { return faults[f].keyed }),
			Logf:                   func(f string, a ...any) { fmt.Fprintf(progress, "  cluster: "+f+"\n", a...) },
		})
		if err != nil {
			return Result{}, err
		}
		defer cluster.Stop()
		addrs = cluster.Addrs()
	}

	lay, group, err := askLayout(ctx, addrs, clientTLS)
	if err != nil {
		return Result{}, err
	}
	var seqs []*namedSequence
	if cfg.Sequences > 0 {
		if seqs, err = createSequences(ctx, addrs, clientTLS, cfg.Sequences); err != nil {
			return Result{}, err
		}
	}
	rec := history.NewRecorder()
	w, err := StartWorkload(WorkloadConfig{
		Addrs: addrs, Clients: cfg.Clients, Streams: cfg.Streams, Pinned: cfg.Pinned, MaxCount: cfg.MaxCount, Tracked: cfg.Tracked,
		TLS: clientTLS, Layout: lay, Group: group, Sequences: seqs, Keyed: cfg.Keyed,
	}, rec)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	stopProgress := reportProgress(progress, w, start)
	var records []FaultRecord
	if cluster != nil && len(cfg.Faults) > 0 {
		// The IDs the nemesis asks for itself are the workload's too.
		cluster.workload = w
		records = runNemesis(runCtx, cluster, w, cfg, start, progress)
	} else {
		<-runCtx.Done()
	}
	// Everything is healed: the cluster must serve again.
	recovered := waitRecovered(ctx, w)
	var exited []string
	if cluster != nil {
		exited = cluster.Exited()
	}
	w.Stop()
	stopProgress()
	elapsed := time.Since(start)

	ops, settled := rec.Ops(), rec.SettleOps()
	res := Result{
		Report:       history.Check(ops),
		BadResponses: w.BadResponses(),
		Tracked:      w.TrackedCounts(),
		Elapsed:      elapsed,
		Faults:       records,
		Recovered:    recovered,
		Exited:       exited,
	}
	okCount, _, _, ids := w.Counts()
	res.OpsPerSec = float64(okCount) / elapsed.Seconds()
	res.IDsPerSec = float64(ids) / elapsed.Seconds()
	// The history's clock started before the run's: count both from the
	// run's start, as the faults are, so that calls and faults line up.
	shift := rec.Offset(start)
	for i := range ops {
		ops[i].Start -= shift
		ops[i].End -= shift
	}
	for i := range settled {
		settled[i].Start -= shift
		settled[i].End -= shift
	}
	res.Report.Settled = history.CheckSettled(settled)
	res.Keyed = w.keyedCountsOf(ops)
	res.Sequences = checkSequences(seqs)
	bad := w.bad.list()
	for i := range bad {
		bad[i].Start -= shift
		bad[i].End -= shift
	}
	measureGaps(ops, res.Faults, elapsed)
	res.Findings = append(diagnose(res, ops, bad, elapsed), diagnoseSettled(res, settled)...)
	if !res.OK() && cluster != nil {
		var files []string
		for _, n := range slices.Concat(cluster.Nodes, cluster.extra) {
			files = append(files, n.LogFile)
		}
		res.Logs = TailLogs(files, logTailLines)
	}
	return res, nil
}

// askLayout asks the cluster at addrs for its layout and group, so that
// the workload asks for IDs of the width the cluster makes.
func askLayout(ctx context.Context, addrs []string, tlsConfig *tls.Config) (layout.Layout, uint64, error) {
	var opts []client.Option
	if tlsConfig != nil {
		opts = append(opts, client.WithTLS(tlsConfig))
	}
	c, err := client.New(addrs, opts...)
	if err != nil {
		return layout.Layout{}, 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	l, group, err := c.Layout(ctx)
	if err != nil {
		return layout.Layout{}, 0, fmt.Errorf("ask the cluster for its layout: %w", err)
	}
	return l, group, nil
}

// Bounds of a run's named sequences and keyed clients: each sequence is
// checked alone and each keyed client keeps its keys, so past these a run
// measures the checker, not the cluster.
const (
	maxSequences = 1000
	maxKeyed     = 256
)

func (cfg Config) validate() error {
	switch {
	case cfg.Duration <= 0:
		return fmt.Errorf("%w: duration %s", ErrBadConfig, cfg.Duration)
	case cfg.Clients < 0 || cfg.Streams < 0 || (cfg.Clients == 0 && cfg.Streams == 0 && !cfg.Pinned):
		return fmt.Errorf("%w: no clients", ErrBadConfig)
	case cfg.Sequences < 0 || cfg.Sequences > maxSequences:
		return fmt.Errorf("%w: --sequences %d, want 0 to %d", ErrBadConfig, cfg.Sequences, maxSequences)
	case cfg.Tracked < 0:
		return fmt.Errorf("%w: %d tracked clients", ErrBadConfig, cfg.Tracked)
	case cfg.Keyed < 0 || cfg.Keyed > maxKeyed:
		return fmt.Errorf("%w: --keyed %d clients, want 0 to %d", ErrBadConfig, cfg.Keyed, maxKeyed)
	case cfg.MaxCount < 1:
		return fmt.Errorf("%w: max count %d", ErrBadConfig, cfg.MaxCount)
	case len(cfg.Addrs) > 0 && len(cfg.Faults) > 0:
		return fmt.Errorf("%w: faults need a cluster this run starts itself; drop --addrs or the faults", ErrBadConfig)
	case len(cfg.Addrs) == 0 && (cfg.Binary == "" || cfg.Dir == ""):
		return fmt.Errorf("%w: starting a cluster needs a binary and a directory", ErrBadConfig)
	case len(cfg.Faults) > 0 && (cfg.Interval <= 0 || cfg.Hold <= 0 || cfg.Hold > cfg.Interval):
		return fmt.Errorf("%w: want 0 < hold (%s) <= interval (%s)", ErrBadConfig, cfg.Hold, cfg.Interval)
	}
	for _, f := range cfg.Faults {
		k, ok := faults[f]
		if !ok {
			return fmt.Errorf("%w: unknown fault %q (known: %s)", ErrBadConfig, f, strings.Join(FaultNames(), ", "))
		}
		if len(cfg.Addrs) == 0 && cfg.Nodes < k.needs {
			return fmt.Errorf("%w: fault %q needs at least %d nodes", ErrBadConfig, f, k.needs)
		}
		if k.keyed && cfg.Keyed == 0 {
			return fmt.Errorf("%w: fault %q needs keyed clients", ErrBadConfig, f)
		}
	}
	return nil
}

// runNemesis starts a fault every Interval, heals it after Hold, until
// ctx ends; the last fault is healed before it returns.
func runNemesis(ctx context.Context, c *Cluster, w *Workload, cfg Config, start time.Time, progress io.Writer) []FaultRecord {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6f72646f))
	var records []FaultRecord
	for i := 0; cfg.Rounds <= 0 || i < cfg.Rounds*len(cfg.Faults); i++ {
		// Let the cluster settle before the first fault.
		if !sleep(ctx, cfg.Interval-cfg.Hold) {
			return records
		}
		kind := cfg.Faults[i%len(cfg.Faults)]
		rec := FaultRecord{Kind: kind, Round: i/len(cfg.Faults) + 1, Start: time.Since(start)}
		target, healFn, err := faults[kind].start(ctx, c, rng)
		rec.Target = target
		if err != nil {
			rec.Err = err.Error()
			rec.Healed, rec.End = time.Since(start), time.Since(start)
			fmt.Fprintf(progress, "%6.1fs fault %s failed to start: %v\n", rec.Start.Seconds(), kind, err)
			records = append(records, rec)
			if ctx.Err() != nil {
				return records
			}
			continue
		}
		fmt.Fprintf(progress, "%6.1fs fault %s: %s\n", rec.Start.Seconds(), kind, target)
		sleep(ctx, cfg.Hold)
		// Heal even when the run is over: the cluster must recover.
		hctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := healFn(hctx); err != nil {
			rec.Err = "heal: " + err.Error()
		}
		cancel()
		rec.Healed = time.Since(start)
		fmt.Fprintf(progress, "%6.1fs healed %s\n", rec.Healed.Seconds(), kind)
		rec.Recovered = waitRecovered(context.Background(), w)
		rec.Recovery = time.Since(start) - rec.Healed
		records = append(records, rec)
		if ctx.Err() != nil {
			return records
		}
	}
	return records
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitRecovered waits until the workload has a new success.
func waitRecovered(ctx context.Context, w *Workload) bool {
	before, _, _, _ := w.Counts()
	deadline := time.Now().Add(recoveryTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if ok, _, _, _ := w.Counts(); ok > before {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// reportProgress prints a line a second until stopped.
func reportProgress(out io.Writer, w *Workload, start time.Time) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var lastIDs int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ok, failed, unknown, ids := w.Counts()
				line := fmt.Sprintf("%6.1fs ok=%d failed=%d unknown=%d ids/s=%d", time.Since(start).Seconds(), ok, failed, unknown, ids-lastIDs)
				bad := w.BadResponses()
				if bad > 0 {
					line += fmt.Sprintf(" BAD=%d", bad)
				}
				if e := w.LastError(); e != "" && failed+unknown+bad > 0 {
					line += "  last error: " + truncate(e, 100)
				}
				fmt.Fprintln(out, line)
				lastIDs = ids
			}
		}
	}()
	return func() { close(done); <-finished }
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// measureGaps fills each fault's End and LongestGap from the completion
// times of successful requests.
func measureGaps(ops []history.Op, recs []FaultRecord, elapsed time.Duration) {
	var done []time.Duration
	for _, op := range ops {
		if op.Outcome == history.OK {
			done = append(done, op.End)
		}
	}
	slices.Sort(done)
	for i := range recs {
		r := &recs[i]
		r.End = elapsed
		if i+1 < len(recs) {
			r.End = recs[i+1].Start
		}
		prev := r.Start
		lo, _ := slices.BinarySearch(done, r.Start)
		for _, t := range done[lo:] {
			if t >= r.End {
				break
			}
			r.LongestGap = max(r.LongestGap, t-prev)
			prev = t
		}
		r.LongestGap = max(r.LongestGap, r.End-prev)
	}
}
