package grpcapi

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// namedSettle is a settler that answers every named call from fixed
// values and records each as a line ("reserve books 3", "complete books
// 5+2", "watermark books").
type namedSettle struct {
	Settle
	mu    sync.Mutex
	calls []string
	first uint64
	w     uint64
	fate  fsm.Fate
	err   error
}

func (f *namedSettle) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *namedSettle) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *namedSettle) ReserveIn(_ context.Context, seq string, key fsm.Keyed, count uint64, ttl time.Duration) (settle.Reservation, error) {
	f.record("reserve %s %d", seq, count)
	return settle.Reservation{Block: sequencer.Block{First: f.first, Count: count}, TTL: time.Minute, Fate: fsm.FateOpen}, f.err
}

func (f *namedSettle) DecideIn(_ context.Context, seq string, do fsm.Do, first, count uint64, ttl time.Duration) (fsm.Fate, uint64, error) {
	f.record("%s %s %d+%d", do, seq, first, count)
	return f.fate, f.w, f.err
}

func (f *namedSettle) WatermarkOf(_ context.Context, seq string) (uint64, error) {
	f.record("watermark %s", seq)
	return f.w, f.err
}

func (f *namedSettle) WatchOf(seq string) (uint64, <-chan struct{}) { return f.w, nil }

// reservingServer is node id's Server over st, its state at cluster version
// version with sequences "books" (dense), "ev" (default layout, group
// 5), "wide" (uuidv7) and "gone" (dropped).
func reservingServer(t *testing.T, id string, n Node, st Settle, version int) *Server {
	t.Helper()
	state := fsm.New(nil, nil)
	cmds := []fsm.Command{{Op: fsm.OpClusterVersion, ClusterVersion: version}}
	if version >= fsm.SequencesVersion {
		cmds = append(cmds,
			fsm.Command{Op: fsm.OpCreateSequence, Sequence: "books", Kind: fsm.KindDense},
			fsm.Command{Op: fsm.OpCreateSequence, Sequence: "ev", Kind: "default", Group: 5},
			fsm.Command{Op: fsm.OpCreateSequence, Sequence: "wide", Kind: "uuidv7"},
			fsm.Command{Op: fsm.OpCreateSequence, Sequence: "gone", Kind: fsm.KindDense},
			fsm.Command{Op: fsm.OpDropSequence, Sequence: "gone"})
	}
	for i, c := range cmds {
		e, err := fsm.Entry(c)
		if err != nil {
			t.Fatal(err)
		}
		e.Index, e.Term = uint64(i+1), 1
		if res := state.Apply(&e).(fsm.Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	return NewServer(Config{ID: id, Layout: layout.MustPreset("default"), MaxCount: 10},
		Parts{Node: n, IDs: &fakeIDs{}, State: state, Settle: st, Meter: nopMeter{}, Stop: make(chan struct{}),
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A named Reserve, on the leader or forwarded by a follower, reaches the
// settler with its sequence and answers the sequence's IDs (a dense
// sequence's values, a layout one's IDs of its group), a handle naming
// the sequence, and the sequence echoed.
func TestNamedReserve(t *testing.T) {
	st := &namedSettle{first: 40}
	leaderAddr := grpctest.Serve(t, reservingServer(t, "n1", fakeNode{leader: true}, st, fsm.SequencesVersion).Register)
	follower := serveSequencer(t, reservingServer(t, "n2", fakeNode{addr: leaderAddr}, &namedSettle{err: sequencer.ErrNotLeader}, fsm.SequencesVersion))
	ev := layout.MustPreset("default")
	for _, c := range []struct {
		name string
		cl   api.SequencerClient
	}{{"leader", api.NewSequencerClient(grpctest.Dial(t, leaderAddr))}, {"follower", follower}} {
		resp, err := c.cl.Reserve(tctx(t), &api.ReserveRequest{Count: 3, Sequence: "books"})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if resp.Handle != "s1.books.40.3" || resp.Sequence != "books" || len(resp.Runs) != 1 || resp.Runs[0].First != 40 || resp.Runs[0].Step != 1 {
			t.Fatalf("%s: %+v", c.name, resp)
		}
		resp, err = c.cl.Reserve(tctx(t), &api.ReserveRequest{Count: 1, Sequence: "ev"})
		if err != nil || resp.Runs[0].First != ev.ID(40, 5) || resp.Handle != "s1.ev.40.1" {
			t.Fatalf("%s: layout sequence: %+v, %v; want ID %d", c.name, resp, err, ev.ID(40, 5))
		}
		resp, err = c.cl.Reserve(api.WithTicks(tctx(t), true), &api.ReserveRequest{Count: 1, Sequence: "wide"})
		if err != nil || resp.Runs[0].First != 40 {
			t.Fatalf("%s: 128-bit sequence, asking for ticks: %+v, %v", c.name, resp, err)
		}
	}
	if got := strings.Join(st.asked(), ","); got != "reserve books 3,reserve ev 1,reserve wide 1,reserve books 3,reserve ev 1,reserve wide 1" {
		t.Fatalf("the settler was asked %s", got)
	}
}

// Every bad Reserve is refused with its code before the settler is
// asked: a malformed name, an unknown or dropped sequence, the wrong
// width, a bad count.
func TestNamedReserveRefusals(t *testing.T) {
	st := &namedSettle{first: 40}
	c := serveSequencer(t, reservingServer(t, "n1", fakeNode{leader: true}, st, fsm.SequencesVersion))
	for _, tt := range []struct {
		name  string
		ticks bool
		req   *api.ReserveRequest
		code  codes.Code
		says  string
	}{
		{"malformed name", false, &api.ReserveRequest{Count: 1, Sequence: "Books"}, codes.InvalidArgument, "bad sequence name"},
		{"unknown", false, &api.ReserveRequest{Count: 1, Sequence: "nope"}, codes.NotFound, `no such sequence: "nope"`},
		{"dropped", false, &api.ReserveRequest{Count: 1, Sequence: "gone"}, codes.NotFound, `"gone"`},
		{"128-bit without ticks", false, &api.ReserveRequest{Count: 1, Sequence: "wide"}, codes.FailedPrecondition, "must name ordo-ticks"},
		{"64-bit with ticks", true, &api.ReserveRequest{Count: 1, Sequence: "ev"}, codes.FailedPrecondition, "must not name"},
		{"dense with ticks", true, &api.ReserveRequest{Count: 1, Sequence: "books"}, codes.FailedPrecondition, "must not name"},
		{"count 0", false, &api.ReserveRequest{Count: 0, Sequence: "books"}, codes.InvalidArgument, "count"},
		{"count over the maximum", false, &api.ReserveRequest{Count: 11, Sequence: "books"}, codes.InvalidArgument, "count"},
	} {
		_, err := c.Reserve(api.WithTicks(tctx(t), tt.ticks), tt.req)
		if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.says) {
			t.Errorf("%s: %v, want %s saying %q", tt.name, err, tt.code, tt.says)
		}
	}
	if got := st.asked(); len(got) != 0 {
		t.Fatalf("the settler was asked %q", got)
	}
}

// Complete, Abandon and Extend name the sequence: a handle of another
// sequence (or of the default one, or a named handle without its
// sequence) is InvalidArgument before anything is asked; an unknown
// sequence NotFound; a dropped one's reservations are decided. The
// answer's W is the sequence's, as an ID of its kind.
func TestNamedDecide(t *testing.T) {
	st := &namedSettle{w: 77, fate: fsm.FateCompleted}
	leaderAddr := grpctest.Serve(t, reservingServer(t, "n1", fakeNode{leader: true}, st, fsm.SequencesVersion).Register)
	leader := api.NewSequencerClient(grpctest.Dial(t, leaderAddr))
	follower := serveSequencer(t, reservingServer(t, "n2", fakeNode{addr: leaderAddr}, &namedSettle{err: sequencer.ErrNotLeader}, fsm.SequencesVersion))
	for _, c := range []api.SequencerClient{leader, follower} {
		resp, err := c.Complete(tctx(t), &api.HandleRequest{Handle: "s1.books.5.2", Sequence: "books"})
		if err != nil || resp.Watermark != 77 || resp.WatermarkTick != 77 || resp.Fate != api.Fate_FATE_COMPLETED {
			t.Fatalf("complete in a dense sequence: %+v, %v", resp, err)
		}
		resp, err = c.Abandon(tctx(t), &api.HandleRequest{Handle: "s1.ev.5.2", Sequence: "ev"})
		if want := layout.MustPreset("default").ID(77, 5); err != nil || resp.Watermark != want || resp.WatermarkTick != 77 {
			t.Fatalf("abandon in a layout sequence: %+v, %v; want W %d", resp, err, want)
		}
		if _, err := c.Extend(tctx(t), &api.ExtendRequest{Handle: "s1.wide.5.2", Sequence: "wide", TtlMs: 1000}); err != nil {
			t.Fatalf("extend in a 128-bit sequence: %v", err)
		}
		if _, err := c.Complete(tctx(t), &api.HandleRequest{Handle: "s1.gone.5.2", Sequence: "gone"}); err != nil {
			t.Fatalf("complete in a dropped sequence: %v", err)
		}
	}
	want := "complete books 5+2,abandon ev 5+2,extend wide 5+2,complete gone 5+2"
	if got := strings.Join(st.asked(), ","); got != want+","+want {
		t.Fatalf("the settler was asked %s", got)
	}
	n := len(st.asked())
	for _, tt := range []struct {
		name        string
		handle, seq string
		code        codes.Code
		says        string
	}{
		{"a handle of another sequence", "s1.ev.5.2", "books", codes.InvalidArgument, `handle "s1.ev.5.2" is of sequence "ev", and the call names sequence "books"`},
		{"the default sequence's handle", "r1.5.2", "books", codes.InvalidArgument, "is of the default sequence"},
		{"a named handle without its sequence", "s1.books.5.2", "", codes.InvalidArgument, "the call names the default sequence"},
		{"an unknown sequence", "s1.nope.5.2", "nope", codes.NotFound, "nope"},
		{"a malformed name", "s1.books.5.2", "Books", codes.InvalidArgument, "bad sequence name"},
		{"a malformed handle", "s1.books.0.2", "books", codes.InvalidArgument, "bad reservation handle"},
	} {
		for _, c := range []api.SequencerClient{leader, follower} {
			_, err := c.Complete(tctx(t), &api.HandleRequest{Handle: tt.handle, Sequence: tt.seq})
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.says) {
				t.Errorf("%s: %v, want %s saying %q", tt.name, err, tt.code, tt.says)
			}
		}
	}
	if got := st.asked(); len(got) != n {
		t.Fatalf("refused calls reached the settler: %q", got[n:])
	}
}

// A named sequence's W: read with its sequence, answered with it echoed
// and rendered in the sequence's kind; a malformed name is refused.
func TestNamedWatermark(t *testing.T) {
	st := &namedSettle{w: 12}
	leaderAddr := grpctest.Serve(t, reservingServer(t, "n1", fakeNode{leader: true}, st, fsm.SequencesVersion).Register)
	follower := serveSequencer(t, reservingServer(t, "n2", fakeNode{addr: leaderAddr}, &namedSettle{err: sequencer.ErrNotLeader}, fsm.SequencesVersion))
	for _, c := range []api.SequencerClient{api.NewSequencerClient(grpctest.Dial(t, leaderAddr)), follower} {
		resp, err := c.Watermark(tctx(t), &api.WatermarkRequest{Sequence: "wide"})
		if err != nil || resp.Sequence != "wide" || resp.Watermark != 0 || resp.WatermarkTick != 12 {
			t.Fatalf("W of a 128-bit sequence: %+v, %v", resp, err)
		}
		resp, err = c.Watermark(tctx(t), &api.WatermarkRequest{})
		if err != nil || resp.Sequence != "" || resp.Watermark != layout.MustPreset("default").ID(12, 0) {
			t.Fatalf("W of the default sequence: %+v, %v", resp, err)
		}
		if _, err := c.Watermark(tctx(t), &api.WatermarkRequest{Sequence: "-x"}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a malformed name: %v", err)
		}
		// The watch: its first value at once, echoing the sequence.
		ctx, cancel := context.WithCancel(tctx(t))
		stream, err := c.WatchWatermark(ctx, &api.WatchRequest{Sequence: "books", HeartbeatMs: 10})
		if err != nil {
			t.Fatal(err)
		}
		m, err := stream.Recv()
		cancel()
		if err != nil || m.Sequence != "books" || m.Watermark != 12 || m.WatermarkTick != 12 {
			t.Fatalf("watch of books: %+v, %v", m, err)
		}
	}
	if got := st.asked(); len(got) < 4 || got[0] != "watermark wide" || got[1] != "watermark " {
		t.Fatalf("the settler was asked %q", got)
	}
}

// A follower whose state is below cluster version 3 forwards no call of
// a named sequence's reservations (a leader of an older Ordo would take
// it for the default sequence's): Unavailable, which clients retry.
func TestNamedCallsNotForwardedBeforeVersion3(t *testing.T) {
	st := &namedSettle{first: 40}
	leaderAddr := grpctest.Serve(t, reservingServer(t, "n1", fakeNode{leader: true}, st, fsm.SequencesVersion).Register)
	c := serveSequencer(t, reservingServer(t, "n2", fakeNode{addr: leaderAddr}, &namedSettle{}, fsm.SettleVersion))
	calls := map[string]func() error{
		"reserve": func() error {
			_, err := c.Reserve(tctx(t), &api.ReserveRequest{Count: 1, Sequence: "books"})
			return err
		},
		"complete": func() error {
			_, err := c.Complete(tctx(t), &api.HandleRequest{Handle: "s1.books.1.1", Sequence: "books"})
			return err
		},
		"watermark": func() error { _, err := c.Watermark(tctx(t), &api.WatermarkRequest{Sequence: "books"}); return err },
		"watch": func() error {
			s, err := c.WatchWatermark(tctx(t), &api.WatchRequest{Sequence: "books"})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
	}
	for name, call := range calls {
		if err := call(); status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "version") {
			t.Errorf("%s through a follower at version 2: %v, want Unavailable naming the version", name, err)
		}
	}
	if got := st.asked(); len(got) != 0 {
		t.Fatalf("forwarded: %q", got)
	}
}

// oldLeader is a leader of an Ordo before named reservations: it ignores
// the sequence and answers the default sequence's reservation and W.
type oldLeader struct {
	api.UnimplementedSequencerServer
}

func (oldLeader) Reserve(context.Context, *api.ReserveRequest) (*api.ReserveResponse, error) {
	return &api.ReserveResponse{Handle: "r1.5.1", Runs: []*api.IDRun{{First: 5, Count: 1, Step: 1}}, TtlMs: 1000}, nil
}

func (oldLeader) Watermark(context.Context, *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	return &api.WatermarkResponse{Watermark: 9, WatermarkTick: 9}, nil
}

// A follower refuses an answer to a named call that does not echo the
// sequence: the leader took it for the default sequence's.
func TestNamedAnswerWithoutTheSequenceIsRefused(t *testing.T) {
	leaderAddr := grpctest.Serve(t, func(g *grpc.Server) { api.RegisterSequencerServer(g, oldLeader{}) })
	c := serveSequencer(t, reservingServer(t, "n2", fakeNode{addr: leaderAddr}, &namedSettle{}, fsm.SequencesVersion))
	if _, err := c.Reserve(tctx(t), &api.ReserveRequest{Count: 1, Sequence: "books"}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "too old") {
		t.Errorf("reserve: %v", err)
	}
	if _, err := c.Watermark(tctx(t), &api.WatermarkRequest{Sequence: "books"}); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "too old") {
		t.Errorf("watermark: %v", err)
	}
}
