package bench

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
)

// pointer is a node that answers Next with one ID and the name of another
// node as the leader, as a follower's forwarded answer does.
type pointer struct {
	api.UnimplementedSequencerServer
	leader string
	calls  chan struct{}
}

func (p *pointer) Next(context.Context, *api.NextRequest) (*api.NextResponse, error) {
	select {
	case p.calls <- struct{}{}:
	default:
	}
	return &api.NextResponse{Runs: []*api.IDRun{{First: 1, Count: 1, Step: 1}}, LeaderAddr: p.leader}, nil
}

// TestUnaryCallsTheLeader: the bare unary target skips an address that
// does not answer Next (a bare gRPC server), asks the next one, and then
// calls only the leader that answer names; the IDs it gets are checked as
// any run's are.
func TestUnaryCallsTheLeader(t *testing.T) {
	n := mustNode(t)
	mustServeIDs(t, n.GRPCAddr())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pointer{leader: n.GRPCAddr(), calls: make(chan struct{}, 2)}
	s := grpc.NewServer()
	api.RegisterSequencerServer(s, p)
	go s.Serve(lis)
	t.Cleanup(s.Stop)

	res, err := Run(context.Background(), Config{
		Target: TargetOrdo, Unary: true, Addrs: []string{mustServe(t, true), lis.Addr().String()},
		Concurrency: 8, Count: 3, Duration: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.IDs != 3*res.Requests {
		t.Fatalf("unary run: %d requests, %d errors (last %q), %d IDs; want some requests, no errors, 3 IDs each",
			res.Requests, res.Errors, res.LastError, res.IDs)
	}
	if !res.Check.OK() || res.Check.IDs != int(res.IDs) {
		t.Fatalf("unary run's check: %+v, want OK over all %d IDs", res.Check, res.IDs)
	}
	if got := len(p.calls); got != 1 {
		t.Fatalf("the node that named the leader got %d calls, want 1 (the first; the rest go to the leader)", got)
	}
}

// TestUnaryNeedsANode: when no address answers Next, the run fails before
// it starts, naming why.
func TestUnaryNeedsANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := Run(ctx, Config{
		Target: TargetOrdo, Unary: true, Addrs: []string{mustServe(t, true)},
		Concurrency: 1, Count: 1, Duration: 100 * time.Millisecond,
	})
	if err == nil {
		t.Fatal("a run against a server without Next started")
	}
}

// mustServeIDs waits, for at most 10 s, until the node at addr answers Next.
func mustServeIDs(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := newUnaryTarget([]string{addr}, nil, 1)
	defer u.close()
	if err := u.warm(ctx); err != nil {
		t.Fatalf("node %s serves no IDs: %v", addr, err)
	}
}

// repeater answers every Next with one ID twice: a leader bug that breaks
// "never a duplicate" inside a single answer.
type repeater struct {
	api.UnimplementedSequencerServer
}

func (repeater) Next(context.Context, *api.NextRequest) (*api.NextResponse, error) {
	return &api.NextResponse{Runs: []*api.IDRun{{First: 5, Count: 1, Step: 1}, {First: 5, Count: 1, Step: 1}}}, nil
}

// TestUnaryRefusedAnswerFailsTheRun: an answer the run decoder refuses
// holds no IDs for the checker to flag, so the bench itself must count it
// and fail the run (ordo bench exits 1), not pass it off as an error of
// the call.
func TestUnaryRefusedAnswerFailsTheRun(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterSequencerServer(s, repeater{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	res, err := Run(context.Background(), Config{
		Target: TargetOrdo, Unary: true, Addrs: []string{lis.Addr().String()},
		Concurrency: 1, Count: 2, Duration: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() || res.BadResponses == 0 || !strings.Contains(res.String(), "bad responses") {
		t.Fatalf("a leader that repeats an ID in one answer: OK() = %v, %d bad responses, summary %q; want a failed run that says why",
			res.OK(), res.BadResponses, res.String())
	}
}
