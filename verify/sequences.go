package verify

// Named sequences (issue 25): with Config.Sequences, the run creates that
// many named sequences, every third one dense and the others of 64-bit
// layouts, and clients of their own spread calls over them. Each
// sequence's calls are recorded in a history of its own, since IDs of
// different sequences may be equal: each is checked by history.Check
// (uniqueness, real-time order), and each dense one also by
// history.CheckDense (no gap the cluster made).
//
// The calls of a layout sequence go through client.Sequence(name).NextN,
// which fails over and retries by itself. The calls of a dense sequence
// are made one attempt at a time, each recorded as an operation: an
// attempt the client retried after it timed out may have been committed,
// and its IDs are a gap only the attempt, recorded unknown with its
// count, explains.

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
)

// sequenceKinds are the kinds the run's sequences take in turn: every
// third dense.
var sequenceKinds = []string{client.DenseKind, "default", "twitter"}

// SequenceResult is one named sequence's verdict.
type SequenceResult struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Start uint64 `json:"start,omitempty"`
	// Report is history.Check's of the sequence's calls.
	Report history.Report `json:"report"`
	// Dense is history.CheckDense's, for a dense sequence.
	Dense *history.DenseReport `json:"dense,omitempty"`
	// Refusal is the first error a call was refused with, if any: a
	// definite refusal of a sequence's call is no violation, but many of
	// them are worth reading.
	Refusal string `json:"refusal,omitempty"`
}

// OK reports whether the sequence's history passed its checks.
func (s SequenceResult) OK() bool {
	return s.Report.OK() && (s.Dense == nil || s.Dense.OK())
}

// namedSequence is one sequence the run created, with its history.
type namedSequence struct {
	name, kind string
	start      uint64
	rec        *history.Recorder
}

// createSequences creates n named sequences on the cluster at addrs.
func createSequences(ctx context.Context, addrs []string, tlsConfig *tls.Config, n int) ([]*namedSequence, error) {
	var opts []client.Option
	if tlsConfig != nil {
		opts = append(opts, client.WithTLS(tlsConfig))
	}
	c, err := client.New(addrs, opts...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	defer cancel()
	var out []*namedSequence
	for i := range n {
		kind := sequenceKinds[i%len(sequenceKinds)]
		name := fmt.Sprintf("verify-%d-%s", i, kind)
		info, err := c.CreateSequence(ctx, name, kind, 0, 0)
		if err != nil {
			return nil, fmt.Errorf("create sequence %s: %w", name, err)
		}
		out = append(out, &namedSequence{name: name, kind: kind, start: info.Start, rec: history.NewRecorder()})
	}
	return out, nil
}

// startSequences starts clients clients that spread calls over seqs,
// numbered from id; it returns the next number.
func (w *Workload) startSequences(cfg WorkloadConfig, opts []client.Option, id int) (int, error) {
	if len(cfg.Sequences) == 0 {
		return id, nil
	}
	conns := make([]*grpc.ClientConn, len(cfg.Addrs))
	for i, addr := range cfg.Addrs {
		conn, err := dial(addr, cfg.TLS)
		if err != nil {
			return id, err
		}
		conns[i] = conn
	}
	var users sync.WaitGroup
	for i := range max(cfg.Clients, 1) {
		// Half the clients call layout sequences unary, half on the
		// client's stream for named calls (windows' calls answered
		// jointly, several sequences in one answer).
		copts := opts
		if i%2 == 0 {
			copts = append(copts[:len(copts):len(copts)], client.WithUnary())
		}
		c, err := client.New(cfg.Addrs, copts...)
		if err != nil {
			return id, err
		}
		users.Add(1)
		w.spawnSequences(id, cfg, c, conns, func() { c.Close(); users.Done() })
		id++
	}
	go func() {
		users.Wait()
		for _, conn := range conns {
			conn.Close()
		}
	}()
	return id, nil
}

// spawnSequences starts one client that calls a random sequence of
// cfg.Sequences at a time.
func (w *Workload) spawnSequences(id int, cfg WorkloadConfig, c *client.Client, conns []*grpc.ClientConn, closeFn func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer closeFn()
		rng := rand.New(rand.NewPCG(uint64(id), 25))
		d := &denseCaller{addrs: cfg.Addrs, conns: conns, at: rng.IntN(len(conns))}
		for !w.stopped() {
			s := cfg.Sequences[rng.IntN(len(cfg.Sequences))]
			n := 1 + rng.IntN(cfg.MaxCount)
			caller := history.Caller{Rec: s.rec, Tally: &w.seqTally, Client: id, Judge: judge}
			var end history.Ending
			if s.kind == client.DenseKind {
				end, _ = caller.CallN(n, func() ([]uint64, []string, error) { return d.attempt(s.name, n) })
			} else {
				seq := c.Sequence(s.name)
				end, _ = caller.CallN(n, func() ([]uint64, []string, error) {
					ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
					defer cancel()
					ids, err := seq.NextN(ctx, n)
					return ids, nil, err
				})
			}
			if end != history.Answered {
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			}
		}
	}()
}

// denseCaller makes one attempt at a time at one node, moving to the
// leader a refusal names or to the next node after a failure.
type denseCaller struct {
	addrs []string
	conns []*grpc.ClientConn
	at    int
}

// attempt asks the current node for n IDs of sequence name, once.
func (d *denseCaller) attempt(name string, n int) ([]uint64, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	var trailer metadata.MD
	resp, err := api.NewSequencerClient(d.conns[d.at]).Next(ctx, &api.NextRequest{Count: uint32(n), Sequence: name}, grpc.Trailer(&trailer))
	if err != nil {
		d.move(trailer)
		return nil, nil, err
	}
	ids, err := api.ExpandRuns(resp.Runs, uint64(n))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", client.ErrBadResponse, err)
	}
	return ids, nil, nil
}

// move goes to the leader trailer names, if it is one of the nodes, or
// else to the next node.
func (d *denseCaller) move(trailer metadata.MD) {
	if v := trailer.Get(api.LeaderAddrKey); len(v) > 0 {
		for i, addr := range d.addrs {
			if addr == v[0] {
				d.at = i
				return
			}
		}
	}
	d.at = (d.at + 1) % len(d.conns)
}

// checkSequences checks each sequence's history.
func checkSequences(seqs []*namedSequence) []SequenceResult {
	var out []SequenceResult
	for _, s := range seqs {
		ops := s.rec.Ops()
		r := SequenceResult{Name: s.name, Kind: s.kind, Start: s.start, Report: history.Check(ops)}
		for _, op := range ops {
			if op.Outcome == history.Failed {
				r.Refusal = op.Err
				break
			}
		}
		if s.kind == client.DenseKind {
			d := history.CheckDense(ops, s.start)
			r.Dense = &d
		}
		out = append(out, r)
	}
	return out
}

// sequenceSummary is the per-kind totals of results, one line a kind,
// then each failing sequence's reports.
func sequenceSummary(results []SequenceResult) string {
	type totals struct {
		seqs, failed                     int
		calls, ok, refused, unknown, ids int
		violations                       int64
		missing, gaps, unexplained, bad  uint64
	}
	byKind := map[string]*totals{}
	refusals := map[string]string{} // a kind's first refusal
	var kinds []string
	for _, r := range results {
		t := byKind[r.Kind]
		if t == nil {
			t = &totals{}
			byKind[r.Kind] = t
			kinds = append(kinds, r.Kind)
		}
		rep := r.Report
		t.seqs++
		t.calls += rep.Attempted
		t.ok += rep.Acknowledged
		t.refused += rep.Failed
		t.unknown += rep.Unknown
		t.ids += rep.IDs
		t.violations += int64(rep.Duplicates+rep.NotIncreasing+rep.Interleaved+rep.Misrendered) + rep.OrderViolations
		if d := r.Dense; d != nil {
			t.missing += d.Missing
			t.gaps += uint64(d.Gaps)
			t.unexplained += d.Unexplained
			t.bad += uint64(d.BadGaps + d.BelowStart)
		}
		if !r.OK() {
			t.failed++
		}
		if refusals[r.Kind] == "" {
			refusals[r.Kind] = r.Refusal
		}
	}
	var b strings.Builder
	for _, k := range kinds {
		t := byKind[k]
		fmt.Fprintf(&b, "sequences %s: %d (%d failed), calls=%d ok=%d failed=%d unknown=%d ids=%d order/uniqueness violations=%d",
			k, t.seqs, t.failed, t.calls, t.ok, t.refused, t.unknown, t.ids, t.violations)
		if k == client.DenseKind {
			fmt.Fprintf(&b, "; missing=%d in %d gaps, unexplained=%d, bad gaps=%d", t.missing, t.gaps, t.unexplained, t.bad)
		}
		if refusals[k] != "" {
			fmt.Fprintf(&b, "; first refusal: %s", refusals[k])
		}
		b.WriteString("\n")
	}
	for _, r := range results {
		if r.OK() {
			continue
		}
		fmt.Fprintf(&b, "sequence %s (%s): %s\n", r.Name, r.Kind, r.Report)
		if r.Dense != nil {
			fmt.Fprintf(&b, "sequence %s: %s\n", r.Name, r.Dense)
		}
	}
	return b.String()
}
