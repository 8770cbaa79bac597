package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// namedReservations is a fake leader of named sequences' reservations:
// each sequence's IDs from its own counter, handles naming it, a
// decision refused for a handle of another sequence, and each
// sequence's W from marks (its next answers, in turn; the last one
// repeated). old makes it answer as a node before named reservations:
// no sequence echoed, the default sequence's handles.
type namedReservations struct {
	api.UnimplementedSequencerServer
	api.UnimplementedAdminServer
	old bool

	mu    sync.Mutex
	last  map[string]uint64
	marks map[string][]*api.WatermarkResponse
	asked []string
	kinds map[string]*api.SequenceInfo
}

func newNamedReservations() *namedReservations {
	return &namedReservations{last: map[string]uint64{}, marks: map[string][]*api.WatermarkResponse{}, kinds: map[string]*api.SequenceInfo{}}
}

func (f *namedReservations) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, s)
}

func (f *namedReservations) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

func (f *namedReservations) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	ticks := ""
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(api.TicksKey)) > 0 {
		ticks = "+ticks"
	}
	f.record(fmt.Sprintf("reserve %s%s %d key=%s", req.Sequence, ticks, req.Count, req.IdempotencyKey))
	f.mu.Lock()
	first := f.last[req.Sequence] + 1
	f.last[req.Sequence] += uint64(req.Count)
	f.mu.Unlock()
	h := api.Handle{First: first, Count: uint64(req.Count), Seq: req.Sequence}
	resp := &api.ReserveResponse{Handle: h.String(), Runs: []*api.IDRun{{First: first, Count: req.Count, Step: 1}}, TtlMs: 1000, Fate: api.Fate_FATE_OPEN, Sequence: req.Sequence}
	if f.old {
		resp.Sequence, resp.Handle = "", api.Handle{First: first, Count: uint64(req.Count)}.String()
	}
	return resp, nil
}

func (f *namedReservations) decide(call string, req *api.HandleRequest) (*api.SettleResponse, error) {
	f.record(fmt.Sprintf("%s %s %s", call, req.Sequence, req.Handle))
	h, err := api.ParseHandle(req.Handle)
	if err != nil || h.Seq != req.Sequence {
		return nil, status.Errorf(codes.InvalidArgument, "bad reservation handle: %q is not of sequence %q", req.Handle, req.Sequence)
	}
	fate := map[string]api.Fate{"complete": api.Fate_FATE_COMPLETED, "abandon": api.Fate_FATE_ABANDONED, "extend": api.Fate_FATE_OPEN}[call]
	return &api.SettleResponse{Fate: fate}, nil
}

func (f *namedReservations) Complete(_ context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return f.decide("complete", req)
}

func (f *namedReservations) Abandon(_ context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return f.decide("abandon", req)
}

func (f *namedReservations) Extend(_ context.Context, req *api.ExtendRequest) (*api.SettleResponse, error) {
	return f.decide("extend", &api.HandleRequest{Handle: req.Handle, Sequence: req.Sequence})
}

// mark is the next of seq's marks.
func (f *namedReservations) mark(seq string) *api.WatermarkResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := &api.WatermarkResponse{}
	if ms := f.marks[seq]; len(ms) > 0 {
		m = ms[0]
		if len(ms) > 1 {
			f.marks[seq] = ms[1:]
		}
	}
	out := &api.WatermarkResponse{Watermark: m.Watermark, WatermarkTick: m.WatermarkTick, Sequence: seq}
	if f.old {
		out.Sequence = ""
	}
	return out
}

func (f *namedReservations) Watermark(_ context.Context, req *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	f.record("watermark " + req.Sequence)
	return f.mark(req.Sequence), nil
}

func (f *namedReservations) WatchWatermark(req *api.WatchRequest, st watchStream) error {
	f.record("watch " + req.Sequence)
	for {
		if err := st.Send(f.mark(req.Sequence)); err != nil {
			return err
		}
		select {
		case <-st.Context().Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (f *namedReservations) DescribeSequence(_ context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	if info, ok := f.kinds[req.Name]; ok {
		return info, nil
	}
	return nil, noSequence(req.Name)
}

func namedClient(t *testing.T, f *namedReservations) *Client {
	t.Helper()
	lis := mustListen(t)
	addr := mustServeOn(t, lis, func(s *grpc.Server) {
		api.RegisterSequencerServer(s, f)
		api.RegisterAdminServer(s, f)
	})
	return mustNew(t, []string{addr})
}

// A Sequence handle reserves its own sequence's IDs, with handles naming
// it, checked against its own floor (not the default sequence's or
// another's); its decisions name it; the default handle's calls are the
// client's own.
func TestSequenceReserve(t *testing.T) {
	f := newNamedReservations()
	c := namedClient(t, f)
	ctx := testCtx(t, 5*time.Second)
	books, films := c.Sequence("books"), c.Sequence("films")
	r, err := books.Reserve(ctx, 3, time.Second)
	if err != nil || r.Handle != "s1.books.1.3" || !slices.Equal(r.IDs, []uint64{1, 2, 3}) || r.Fate != api.Fate_FATE_OPEN {
		t.Fatalf("books.Reserve = %+v, %v", r, err)
	}
	// films starts at 1 too: its floor is its own.
	if r2, err := films.Reserve(ctx, 2, 0); err != nil || r2.IDs[0] != 1 {
		t.Fatalf("films.Reserve = %+v, %v", r2, err)
	}
	if r3, err := c.Sequence("").Reserve(ctx, 1, 0); err != nil || r3.Handle != "r1.1.1" {
		t.Fatalf("the default handle's Reserve = %+v, %v", r3, err)
	}
	if err := books.Complete(ctx, r.Handle); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if fate, err := books.Abandon(ctx, r.Handle); err != nil || fate != api.Fate_FATE_ABANDONED {
		t.Fatalf("Abandon: %v, %v", fate, err)
	}
	if err := books.Extend(ctx, r.Handle, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	// The handle of another sequence is the cluster's InvalidArgument.
	if err := films.Complete(ctx, r.Handle); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("films.Complete of books' handle: %v", err)
	}
	if err := c.Complete(ctx, r.Handle); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("the default Complete of books' handle: %v", err)
	}
	want := []string{"reserve books 3 key=", "reserve films 2 key=", "reserve  1 key=", "complete books s1.books.1.3",
		"abandon books s1.books.1.3", "extend books s1.books.1.3", "complete films s1.books.1.3", "complete  s1.books.1.3"}
	if got := f.calls(); !slices.Equal(got, want) {
		t.Fatalf("asked\n%q\nwant\n%q", got, want)
	}
	for _, bad := range []struct {
		count int
		ttl   time.Duration
		want  error
	}{{0, 0, ErrBadCount}, {1, -time.Second, ErrBadTTL}} {
		if _, err := books.Reserve(ctx, bad.count, bad.ttl); !errors.Is(err, bad.want) {
			t.Errorf("Reserve(%d, %s) = %v, want %v", bad.count, bad.ttl, err, bad.want)
		}
	}
}

// A reservation of a named sequence is checked against the sequence's
// floor, which its NextN shares: IDs at or below one returned before are
// ErrBadResponse.
func TestSequenceReserveChecksItsFloor(t *testing.T) {
	f := newNamedReservations()
	c := namedClient(t, f)
	ctx := testCtx(t, 5*time.Second)
	books := c.Sequence("books")
	if _, err := books.Reserve(ctx, 3, 0); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.last["books"] = 1 // a broken leader hands out 2.. again
	f.mu.Unlock()
	if r, err := books.Reserve(ctx, 1, 0); !errors.Is(err, ErrBadResponse) || r.IDs != nil {
		t.Fatalf("IDs below the floor: %+v, %v", r, err)
	}
}

// A node too old for named reservations takes a named call for the
// default sequence's: its answer does not echo the sequence, and is
// refused (ErrBadResponse), not taken for the sequence's.
func TestSequenceReserveFromAnOldNode(t *testing.T) {
	f := newNamedReservations()
	f.old = true
	c := namedClient(t, f)
	ctx := testCtx(t, 5*time.Second)
	if r, err := c.Sequence("books").Reserve(ctx, 1, 0); !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), "upgrade") || r.IDs != nil {
		t.Fatalf("Reserve answered by an old node: %+v, %v", r, err)
	}
	if m, err := c.Sequence("books").Watermark(ctx); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("Watermark answered by an old node: %+v, %v", m, err)
	}
	stop := errors.New("stop")
	err := c.Sequence("books").WatchWatermark(ctx, func(Mark) error { return stop })
	if !errors.Is(err, ErrBadResponse) {
		t.Fatalf("WatchWatermark answered by an old node: %v", err)
	}
}

// Each sequence's W has its own floor: a lower answer is never reported
// for it, whatever another sequence's or the default's W.
func TestSequenceWatermarkFloors(t *testing.T) {
	f := newNamedReservations()
	f.marks["books"] = []*api.WatermarkResponse{mark(10, 10), mark(5, 5), mark(12, 12)}
	f.marks["films"] = []*api.WatermarkResponse{mark(3, 3)}
	f.marks[""] = []*api.WatermarkResponse{mark(100, 100)}
	c := namedClient(t, f)
	ctx := testCtx(t, 5*time.Second)
	for i, want := range []Mark{{10, 10}, {10, 10}, {12, 12}} {
		if m, err := c.Sequence("books").Watermark(ctx); err != nil || m != want {
			t.Fatalf("books' W %d = %+v, %v; want %+v", i, m, err, want)
		}
	}
	if m, err := c.Sequence("films").Watermark(ctx); err != nil || m != (Mark{3, 3}) {
		t.Fatalf("films' W = %+v, %v", m, err)
	}
	if m, err := c.Watermark(ctx); err != nil || m != (Mark{100, 100}) {
		t.Fatalf("the default W = %+v, %v", m, err)
	}
}

// WaitSettled of a sequence watches that sequence's W, with its floor.
func TestSequenceWaitSettled(t *testing.T) {
	f := newNamedReservations()
	f.marks["books"] = []*api.WatermarkResponse{mark(2, 2), mark(4, 4), mark(7, 7)}
	f.marks[""] = []*api.WatermarkResponse{mark(1000, 1000)}
	c := namedClient(t, f)
	ctx := testCtx(t, 5*time.Second)
	if m, err := c.Sequence("books").WaitSettled(ctx, 5); err != nil || m != (Mark{7, 7}) {
		t.Fatalf("WaitSettled(5) = %+v, %v", m, err)
	}
	n := len(f.calls())
	if m, err := c.Sequence("books").WaitSettled(ctx, 6); err != nil || m != (Mark{7, 7}) || len(f.calls()) != n {
		t.Fatalf("WaitSettled(6) = %+v, %v; want the floor without asking", m, err)
	}
	if got := f.calls(); !slices.Contains(got, "watch books") {
		t.Fatalf("asked %q", got)
	}
}

// A 128-bit sequence's reservation: ReserveUUIDs asks for ticks and
// renders them with the sequence's group; Reserve and WaitSettled are
// refused without asking once the kind is known.
func TestSequenceReserveWide(t *testing.T) {
	f := newNamedReservations()
	f.kinds["ev"] = &api.SequenceInfo{Name: "ev", Kind: "uuidv7", Group: 9}
	c := namedClient(t, f)
	ctx := testCtx(t, 5*time.Second)
	ev := c.Sequence("ev")
	f.mu.Lock()
	f.last["ev"] = 1 << 30
	f.mu.Unlock()
	handle, ids, err := ev.ReserveUUIDs(ctx, 2, 0)
	if err != nil || handle != fmt.Sprintf("s1.ev.%d.2", 1<<30+1) || len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("ReserveUUIDs = %q, %v, %v", handle, ids, err)
	}
	l := layout.MustPreset("uuidv7")
	if p, err := l.DecodeWide(ids[0]); err != nil || p.Group != 9 {
		t.Fatalf("UUID %v takes apart to %+v, %v; want group 9", ids[0], p, err)
	}
	n := len(f.calls())
	if _, err := ev.Reserve(ctx, 1, 0); !errors.Is(err, layout.ErrWrongWidth) {
		t.Fatalf("Reserve of a 128-bit sequence: %v", err)
	}
	if _, err := ev.WaitSettled(ctx, 1); !errors.Is(err, layout.ErrWrongWidth) {
		t.Fatalf("WaitSettled of a 128-bit sequence: %v", err)
	}
	if _, _, err := ev.ReserveULIDs(ctx, 1, 0); !errors.Is(err, layout.ErrWrongWidth) {
		t.Fatalf("ReserveULIDs of a uuidv7 sequence: %v", err)
	}
	if got := f.calls(); len(got) != n || got[n-1] != "reserve ev+ticks 2 key=" {
		t.Fatalf("asked %q", got)
	}
}

// A keyed Reserve of a sequence carries the key, as the default one does.
func TestSequenceReserveKeyed(t *testing.T) {
	f := newNamedReservations()
	c := namedClient(t, f)
	ctx := WithIdempotencyKey(testCtx(t, 5*time.Second), "batch-1")
	if _, err := c.Sequence("books").Reserve(ctx, 2, 0); err != nil {
		t.Fatal(err)
	}
	if got := f.calls(); !slices.Equal(got, []string{"reserve books 2 key=batch-1"}) {
		t.Fatalf("asked %q", got)
	}
}
