package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// namedNode is a leader of named sequence "books" (dense) that answers
// the settled-order calls with the sequence each names, and records them
// as "reserve books 2", "complete books s1.books.10.2".
type namedNode struct {
	api.UnimplementedSequencerServer
	api.UnimplementedAdminServer
	mu    sync.Mutex
	calls []string
}

func (f *namedNode) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *namedNode) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *namedNode) Layout(context.Context, *api.LayoutRequest) (*api.LayoutResponse, error) {
	return &api.LayoutResponse{Layout: "default"}, nil
}

func (f *namedNode) DescribeSequence(_ context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	if req.Name != "books" {
		return nil, status.Errorf(codes.NotFound, "no such sequence: %q", req.Name)
	}
	return &api.SequenceInfo{Name: "books", Kind: "dense", Next: 10}, nil
}

func (f *namedNode) Reserve(_ context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	f.record("reserve %s %d", req.Sequence, req.Count)
	h := api.Handle{First: 10, Count: uint64(req.Count), Seq: req.Sequence}
	return &api.ReserveResponse{Handle: h.String(), TtlMs: 1000, Runs: []*api.IDRun{{First: 10, Count: req.Count, Step: 1}}, Sequence: req.Sequence}, nil
}

func (f *namedNode) Complete(_ context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	f.record("complete %s %s", req.Sequence, req.Handle)
	return &api.SettleResponse{Fate: api.Fate_FATE_COMPLETED}, nil
}

func (f *namedNode) Abandon(_ context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	f.record("abandon %s %s", req.Sequence, req.Handle)
	return &api.SettleResponse{Fate: api.Fate_FATE_ABANDONED}, nil
}

func (f *namedNode) Extend(_ context.Context, req *api.ExtendRequest) (*api.SettleResponse, error) {
	f.record("extend %s %s %d", req.Sequence, req.Handle, req.TtlMs)
	return &api.SettleResponse{Fate: api.Fate_FATE_OPEN}, nil
}

func (f *namedNode) Watermark(_ context.Context, req *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	f.record("watermark %s", req.Sequence)
	return &api.WatermarkResponse{Watermark: 12, WatermarkTick: 12, Sequence: req.Sequence}, nil
}

func (f *namedNode) WatchWatermark(req *api.WatchRequest, st grpc.ServerStreamingServer[api.WatermarkResponse]) error {
	f.record("watch %s", req.Sequence)
	if err := st.Send(&api.WatermarkResponse{Watermark: 12, WatermarkTick: 12, Sequence: req.Sequence}); err != nil {
		return err
	}
	<-st.Context().Done()
	return nil
}

func (f *namedNode) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterSequencerServer(s, f)
	api.RegisterAdminServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestSettleCommandsOfASequence: --sequence names the sequence of
// reserve and watermark; complete, abandon and extend take it from the
// handle when it is left out, and check it against the handle when
// given.
func TestSettleCommandsOfASequence(t *testing.T) {
	f := &namedNode{}
	addr := f.serve(t)
	tests := []struct {
		run  func([]string) error
		args []string
		want string
	}{
		{runReserve, []string{"--sequence", "books", "--count", "2"}, "s1.books.10.2\n10\n11\n"},
		{runReserve, []string{"--sequence", "books", "--json"}, `{"handle":"s1.books.10.1","ids":["10"]}`},
		{runComplete, []string{"s1.books.10.2"}, "completed s1.books.10.2\n"},
		{runComplete, []string{"--sequence", "books", "s1.books.10.2"}, "completed s1.books.10.2\n"},
		{runAbandon, []string{"s1.books.10.2"}, "abandoned\n"},
		{runExtend, []string{"s1.books.10.2", "--ttl", "2s"}, "extended s1.books.10.2\n"},
		{runWatermark, []string{"--sequence", "books"}, "watermark 12 tick 12\n"},
		{runWatermark, []string{"--sequence", "books", "--watch", "--timeout", "1s"}, "watermark 12 tick 12\n"},
	}
	for _, tt := range tests {
		out, err := output(t, tt.run, append([]string{"--addrs", addr}, tt.args...)...)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if got := compactJSON(out); got != tt.want {
			t.Errorf("%q printed %q, want %q", tt.args, got, tt.want)
		}
	}
	want := []string{"reserve books 2", "reserve books 1", "complete books s1.books.10.2", "complete books s1.books.10.2",
		"abandon books s1.books.10.2", "extend books s1.books.10.2 2000", "watermark books", "watch books"}
	if got := f.asked(); !slices.Equal(got, want) {
		t.Fatalf("asked\n%q\nwant\n%q", got, want)
	}
	if _, err := output(t, runReserve, "--addrs", addr, "--sequence", "nope"); status.Code(err) != codes.NotFound {
		t.Fatalf("reserve of an unknown sequence: %v, want the cluster's NotFound", err)
	}
}

// TestSettleCommandsRefuseABadSequence: a malformed --sequence, or one the
// handle is not of, is a usage error before any node is asked.
func TestSettleCommandsRefuseABadSequence(t *testing.T) {
	addrs := []string{"--addrs", "127.0.0.1:1", "--timeout", "1s"}
	for _, tt := range []struct {
		run    func([]string) error
		args   []string
		wantIn string
	}{
		{runReserve, []string{"--sequence", "Books"}, "--sequence"},
		{runWatermark, []string{"--sequence", "-x"}, "--sequence"},
		{runComplete, []string{"--sequence", "films", "s1.books.10.2"}, "is not of sequence films"},
		{runAbandon, []string{"--sequence", "books", "r1.10.2"}, "is not of sequence books"},
		{runExtend, []string{"--sequence", "Books", "s1.books.10.2"}, "--sequence"},
	} {
		err := tt.run(append(append([]string(nil), addrs...), tt.args...))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("%q: %v, want a usage error containing %q", tt.args, err, tt.wantIn)
		}
	}
}
