package verify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// Timeouts of the workload's requests: short, so a client stuck on a dead
// or paused node moves on quickly and the history stays dense.
const (
	opTimeout      = 2 * time.Second
	attemptTimeout = 500 * time.Millisecond
)

// Workload runs clients that record every request in a history.
type Workload struct {
	rec  *history.Recorder
	stop chan struct{}
	wg   sync.WaitGroup

	// tally counts every client request as it ends, nemesisTally the
	// requests the nemesis makes itself (nemesisCaller), apart, so that
	// the run's throughput is the clients'. The bad answers of both
	// (responses withheld because they broke the order) are failures of
	// the guarantee.
	tally, nemesisTally history.Tally
	// trackedTally counts the tracked clients' Reserves, apart from the
	// throughput too; trackedCounts how their reservations went and the
	// reads of W (tracked.go).
	trackedTally  history.Tally
	trackedCounts trackedCounters
	// seqTally counts the named sequences' calls (sequences.go), apart
	// from the throughput too.
	seqTally history.Tally
	// keyedTally counts the keyed clients' attempts (keyed.go), apart
	// from the throughput too, and keyedCounts their keys; keyed is set
	// when there are keyed clients.
	keyedTally  history.Tally
	keyedCounts keyedCounters
	keyed       bool
	// lay and group are the cluster's, for the requests the nemesis makes
	// through the workload (nemesisCaller).
	lay   layout.Layout
	group uint64
	// nextClient is the history's number of the next client to record:
	// the nemesis's requests are recorded under numbers of their own.
	nextClient atomic.Int64
	// bad are the first answers withheld, for a failing run's report.
	bad badCalls
}

// WorkloadConfig says who sends what.
type WorkloadConfig struct {
	// Addrs are the nodes' gRPC addresses.
	Addrs []string
	// Clients is the number of failover clients (the Go client).
	Clients int
	// Pinned adds one client per address that talks only to that node and
	// never fails over. A stale leader's answers reach the history through
	// them: a failover client would have left it.
	Pinned bool
	// Streams is the number of clients that share one pipelined stream
	// (client.Stream), which fails over by itself.
	Streams int
	// MaxCount is the largest count per request; each asks for 1 to it.
	MaxCount int
	// Tracked is the number of tracked clients (tracked.go), which
	// reserve IDs and complete, abandon, extend or drop each
	// reservation; with any, one reader per address also reads the
	// settled mark from that node, raw.
	Tracked int
	// TLS, if set, is how every client dials (a client certificate and
	// the cluster CA); nil means plaintext.
	TLS *tls.Config
	// Layout and Group are the cluster's. Under a 128-bit layout the
	// clients ask for UUIDv7s or ULIDs, and the history records their
	// ticks and their text, whose order history.Check also checks.
	Layout layout.Layout
	Group  uint64
	// Sequences are the named sequences the run created; with any, as
	// many clients as Clients (at least one) spread calls over them,
	// each sequence's recorded in its own history (sequences.go).
	Sequences []*namedSequence
	// Keyed is the number of keyed clients (keyed.go), which make every
	// call with an idempotency key of its own and retry it with the key
	// until it is answered.
	Keyed int
	// FirstClient is the history's number of the first client, the
	// others following; workloads sharing one recorder one after the
	// other need numbers of their own.
	FirstClient int
}

// nextFunc asks for n IDs and returns them in order, under a 128-bit
// layout as ticks with their canonical text.
type nextFunc func(ctx context.Context, n int) (ids []uint64, rendered []string, err error)

// narrow is a nextFunc of 64-bit IDs.
func narrow(next func(ctx context.Context, n int) ([]uint64, error)) nextFunc {
	return func(ctx context.Context, n int) ([]uint64, []string, error) {
		ids, err := next(ctx, n)
		return ids, nil, err
	}
}

// wideNext is the nextFunc of c under the 128-bit layout l: the IDs the
// client rendered, taken back apart into ticks. One that does not decode
// is a bad response.
func wideNext(c *client.Client, l layout.Layout) nextFunc {
	return func(ctx context.Context, n int) ([]uint64, []string, error) {
		var ids [][16]byte
		var err error
		if l.Format == layout.FormatULID {
			ids, err = as16(c.NextULIDs(ctx, n))
		} else {
			ids, err = as16(c.NextUUIDs(ctx, n))
		}
		if err != nil {
			return nil, nil, err
		}
		return ticksOf(l, ids)
	}
}

// as16 converts IDs of a [16]byte type to plain [16]byte.
func as16[T ~[16]byte](ids []T, err error) ([][16]byte, error) {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out, err
}

// ticksOf returns the ticks and canonical text of 128-bit IDs of l.
func ticksOf(l layout.Layout, ids [][16]byte) ([]uint64, []string, error) {
	ticks, rendered := make([]uint64, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		p, err := l.DecodeWide(id)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", client.ErrBadResponse, err)
		}
		ticks[i], rendered[i] = p.Tick, l.FormatWide(id)
	}
	return ticks, rendered, nil
}

// StartWorkload starts the clients; Stop ends them.
func StartWorkload(cfg WorkloadConfig, rec *history.Recorder) (*Workload, error) {
	if cfg.Clients < 0 || cfg.Streams < 0 || cfg.Tracked < 0 || cfg.Keyed < 0 || cfg.MaxCount < 1 || len(cfg.Addrs) == 0 {
		return nil, ErrBadConfig
	}
	w := &Workload{rec: rec, stop: make(chan struct{}), lay: cfg.Layout, group: cfg.Group}
	opts := []client.Option{client.WithAttemptTimeout(attemptTimeout), client.WithBackoff(5*time.Millisecond, 100*time.Millisecond)}
	if cfg.TLS != nil {
		opts = append(opts, client.WithTLS(cfg.TLS))
	}
	id := cfg.FirstClient
	for range cfg.Clients {
		// Unary, as non-Go clients call: the streams below cover the
		// default client's path.
		c, err := client.New(cfg.Addrs, append(opts, client.WithUnary())...)
		if err != nil {
			w.Stop()
			return nil, err
		}
		next := narrow(c.NextN)
		if cfg.Layout.Wide() {
			next = wideNext(c, cfg.Layout)
		}
		w.spawn(id, cfg.MaxCount, next, func() { c.Close() })
		id++
	}
	if cfg.Streams > 0 {
		c, err := client.New(cfg.Addrs, opts...)
		if err != nil {
			w.Stop()
			return nil, err
		}
		// A stream of its own for 64-bit IDs; the client's own stream
		// for 128-bit ones, which is the only stream that carries them.
		s := c.OpenStream()
		next := narrow(s.NextN)
		if cfg.Layout.Wide() {
			next = wideNext(c, cfg.Layout)
		}
		var closers sync.WaitGroup
		closers.Add(cfg.Streams)
		go func() { closers.Wait(); s.Close(); c.Close() }()
		for range cfg.Streams {
			w.spawn(id, cfg.MaxCount, next, closers.Done)
			id++
		}
	}
	if cfg.Pinned {
		for _, addr := range cfg.Addrs {
			conn, err := dial(addr, cfg.TLS)
			if err != nil {
				w.Stop()
				return nil, err
			}
			w.spawn(id, cfg.MaxCount, nodeNext(api.NewSequencerClient(conn), cfg.Layout, cfg.Group), func() { conn.Close() })
			id++
		}
	}
	id, err := w.startTracked(cfg, opts, id)
	if err != nil {
		w.Stop()
		return nil, err
	}
	if id, err = w.startSequences(cfg, opts, id); err != nil {
		w.Stop()
		return nil, err
	}
	if id, err = w.startKeyed(cfg, opts, id); err != nil {
		w.Stop()
		return nil, err
	}
	w.nextClient.Store(int64(id))
	return w, nil
}

// startTracked starts cfg.Tracked tracked clients and, with any, a
// reader of W on each node, numbered from id; it returns the next
// number.
func (w *Workload) startTracked(cfg WorkloadConfig, opts []client.Option, id int) (int, error) {
	for range cfg.Tracked {
		c, err := client.New(cfg.Addrs, opts...)
		if err != nil {
			return id, err
		}
		w.spawnTracked(id, c, cfg.Layout)
		id++
	}
	if cfg.Tracked == 0 {
		return id, nil
	}
	for _, addr := range cfg.Addrs {
		conn, err := dial(addr, cfg.TLS)
		if err != nil {
			return id, err
		}
		w.spawnReader(id, api.NewSequencerClient(conn), func() { conn.Close() })
		id++
	}
	return id, nil
}

// nodeNext is the nextFunc of one node, asked directly as a client
// without Ordo's would ask it: a bare unary Next, no failover, each
// attempt up to attemptTimeout.
func nodeNext(seq api.SequencerClient, l layout.Layout, group uint64) nextFunc {
	return func(ctx context.Context, n int) ([]uint64, []string, error) {
		return nodeAsk(ctx, seq, l, group, &api.NextRequest{Count: uint32(n)})
	}
}

// nodeAsk makes the request req of one node, as nodeNext does.
func nodeAsk(ctx context.Context, seq api.SequencerClient, l layout.Layout, group uint64, req *api.NextRequest) ([]uint64, []string, error) {
	ctx, cancel := context.WithTimeout(api.WithTicks(ctx, l.Wide()), attemptTimeout)
	defer cancel()
	resp, err := seq.Next(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	// Checked as the Go client checks, so a bad answer counts as one the
	// client withheld.
	expanded, err := api.ExpandRuns(resp.Runs, uint64(req.Count))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", client.ErrBadResponse, err)
	}
	if !l.Wide() {
		return expanded, nil, nil
	}
	// Rendered as a client without Ordo's would: what comes back from the
	// node is ticks.
	ids, err := layout.RenderAll[[16]byte](l, expanded, group)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", client.ErrBadResponse, err)
	}
	return ticksOf(l, ids)
}

// nemesisCaller returns the caller through which the nemesis records the
// requests it makes itself, under a client number of its own, with the
// workload's: the IDs it is handed belong in the history, and an answer
// it refuses counts as one a client refused.
func (w *Workload) nemesisCaller() history.Caller {
	return history.Caller{Rec: w.rec, Tally: &w.nemesisTally, Client: int(w.nextClient.Add(1) - 1), Judge: judge}
}

// call makes one attempt through c, as c.Call does, and keeps a withheld
// answer for the report with its times: the history records it only as
// an unknown operation.
func (w *Workload) call(c history.Caller, call func() ([]uint64, []string, error)) (history.Ending, error) {
	return w.callKeyed(c, "", 0, call)
}

// callKeyed is call for an attempt of n IDs of the keyed call key ("":
// none).
func (w *Workload) callKeyed(c history.Caller, key string, n int, call func() ([]uint64, []string, error)) (history.Ending, error) {
	start := w.rec.Offset(time.Now())
	end, err := c.CallKeyed(key, n, call)
	if end == history.BadAnswer {
		w.bad.add(Call{Client: c.Client, Start: start, End: w.rec.Offset(time.Now()), Outcome: "withheld", Err: err.Error()})
	}
	return end, err
}

// dial connects to one node, with TLS when cfg is set.
func dial(addr string, cfg *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
}

func (w *Workload) spawn(id, maxCount int, next nextFunc, closeFn func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer closeFn()
		rng := rand.New(rand.NewPCG(uint64(id), 7))
		c := history.Caller{Rec: w.rec, Tally: &w.tally, Client: id, Judge: judge}
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			n := 1 + rng.IntN(maxCount)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			end, _ := w.call(c, func() ([]uint64, []string, error) { return next(ctx, n) })
			cancel()
			if end == history.Uncertain {
				// A client whose node is down must not spin.
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			}
		}
	}()
}

// judge tells how a workload's request that returned err ended: an
// answer the client withheld is a bad one, a refusal for a reason that is
// not about leadership or time (definite) handed out nothing, and every
// other error leaves it unknown.
func judge(err error) history.Ending {
	switch {
	case errors.Is(err, client.ErrBadResponse):
		return history.BadAnswer
	case definite(err):
		return history.Refused
	}
	return history.Uncertain
}

// definite reports whether err means the request certainly issued nothing
// to this client: the server refused it for a reason that is not about
// leadership or time.
func definite(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.NotFound, codes.PermissionDenied, codes.Unimplemented:
		return true
	}
	return false
}

// Stop ends every client and waits for them.
func (w *Workload) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// BadResponses is how many responses the clients (the tracked ones'
// Reserves too, and the nemesis, when it asks for IDs itself) withheld because they broke the order or the
// wire format. They are recorded as unknown operations, since the IDs
// they stood for may have been handed out, but counted apart from
// Counts' failed and unknown: each is a failure of the guarantee.
func (w *Workload) BadResponses() int64 {
	return w.tally.Counts().Bad + w.nemesisTally.Counts().Bad + w.trackedTally.Counts().Bad + w.seqTally.Counts().Bad + w.keyedTally.Counts().Bad
}

// LastError is the last error a client saw, or "".
func (w *Workload) LastError() string { return w.tally.Counts().LastError }

// Counts returns the clients' acknowledged operations, operations the
// server certainly refused, operations whose effect is unknown (bad
// responses aside: see BadResponses), and IDs received so far; the
// nemesis's own requests are not among them.
func (w *Workload) Counts() (ok, failed, unknown, ids int64) {
	n := w.tally.Counts()
	return n.OK, n.Failed, n.Unknown, n.IDs
}
