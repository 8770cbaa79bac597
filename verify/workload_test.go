package verify

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// badFirst answers its first bad calls to Next with one ID twice, a
// leader bug that breaks "never a duplicate" inside one answer, and every
// later one with IDs far past any mark.
type badFirst struct {
	api.UnimplementedSequencerServer
	bad   int64
	calls atomic.Int64
}

// farID is the first ID of badFirst's good answers.
const farID = 1 << 60

func (s *badFirst) Next(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if s.calls.Add(1) <= s.bad {
		return &api.NextResponse{Runs: []*api.IDRun{{First: 5, Count: 1, Step: 1}, {First: 5, Count: 1, Step: 1}}}, nil
	}
	return &api.NextResponse{Runs: []*api.IDRun{{First: farID, Count: req.Count, Step: 1}}}, nil
}

// serveSequencer serves s on a free loopback port until the test ends.
func serveSequencer(t *testing.T, s api.SequencerServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterSequencerServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// idleWorkload is a workload with no clients of its own, recording into
// rec under the default layout, for the nemesis's requests alone.
func idleWorkload(t *testing.T, addr string, rec *history.Recorder) *Workload {
	t.Helper()
	lay, err := layout.Parse("default")
	if err != nil {
		t.Fatal(err)
	}
	w, err := StartWorkload(WorkloadConfig{Addrs: []string{addr}, MaxCount: 1, Layout: lay}, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// TestPassMarkCountsABadAnswer: lose-data-restart's passMark asks the
// leader for IDs itself. A bad answer it gets must not be retried away
// unseen: it counts among the run's bad responses (Result.BadResponses,
// which fails the run), and the IDs it is handed after that are in the
// history, where the checker holds the laggards to them, but not in the
// clients' counts, which the run's throughput is.
func TestPassMarkCountsABadAnswer(t *testing.T) {
	addr := serveSequencer(t, &badFirst{bad: 1})
	rec := history.NewRecorder()
	w := idleWorkload(t, addr, rec)
	c := &Cluster{cfg: ClusterConfig{Logf: t.Logf}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	passMark(ctx, c, w, &Node{Name: "n1", GRPCAddr: addr}, 1)

	if got := w.BadResponses(); got != 1 {
		t.Errorf("%d bad responses counted; want the 1 the leader gave passMark", got)
	}
	if ok, _, _, ids := w.Counts(); ok != 0 || ids != 0 {
		t.Errorf("the clients' counts hold %d requests and %d IDs of passMark's; want its requests kept out of the throughput", ok, ids)
	}
	var unknown, acked int
	for _, op := range rec.Ops() {
		switch {
		case op.Outcome == history.Unknown:
			unknown++
		case op.Outcome == history.OK && len(op.IDs) == markCount && op.IDs[0] == farID:
			acked++
		default:
			t.Errorf("unexpected operation %+v", op)
		}
	}
	if unknown != 1 || acked != 1 {
		t.Errorf("history holds %d unknown and %d acknowledged operations of %d IDs from %d; want the bad answer (unknown) and the good one",
			unknown, acked, markCount, farID)
	}
	mustKeepBadCalls(t, w, 1)
}

// mustKeepBadCalls fails unless w kept want withheld answers for the
// report, each with its error and its times.
func mustKeepBadCalls(t *testing.T, w *Workload, want int) {
	t.Helper()
	bad := w.bad.list()
	if len(bad) != want {
		t.Fatalf("%d withheld answers kept for the report, want %d: %+v", len(bad), want, bad)
	}
	for _, c := range bad {
		if !strings.Contains(c.Err, "bad response") || c.End < c.Start || c.Start <= 0 {
			t.Errorf("withheld answer kept as %+v; want its error and times", c)
		}
	}
}

// TestWorkloadCountsBadAnswersApart: a client's bad answer is recorded as
// unknown (its IDs may have been handed out) and counted as bad, not as a
// refusal of the server.
func TestWorkloadCountsBadAnswersApart(t *testing.T) {
	addr := serveSequencer(t, &badFirst{bad: 1 << 62})
	rec := history.NewRecorder()
	w, err := StartWorkload(WorkloadConfig{Addrs: []string{addr}, Pinned: true, MaxCount: 2}, rec)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.BadResponses() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	w.Stop()
	bad := w.BadResponses()
	ok, failed, unknown, _ := w.Counts()
	if bad == 0 || ok != 0 || failed != 0 || unknown != 0 {
		t.Fatalf("bad %d, ok %d, failed %d, unknown %d; want only bad answers", bad, ok, failed, unknown)
	}
	rep := history.Check(rec.Ops())
	if int64(rep.Unknown) != bad || rep.Failed != 0 {
		t.Errorf("history: %d unknown, %d failed; want the %d bad answers as unknown", rep.Unknown, rep.Failed, bad)
	}
	mustKeepBadCalls(t, w, int(min(bad, findingCalls)))
}
