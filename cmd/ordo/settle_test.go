package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
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
)

// TestSettleCommandsRefuseBadInput: each bad command line is a usage
// error naming the fix, found before any node is asked (nothing listens
// at --addrs).
func TestSettleCommandsRefuseBadInput(t *testing.T) {
	addrs := []string{"--addrs", "127.0.0.1:1", "--timeout", "1s"}
	tests := []struct {
		run    func([]string) error
		args   []string
		wantIn string
	}{
		{runComplete, nil, "give the reservation's handle"},
		{runComplete, []string{"r1.1.1", "r1.2.1"}, "one handle only"},
		{runComplete, []string{""}, "the handle is empty"},
		{runAbandon, nil, "ordo abandon HANDLE"},
		{runAbandon, []string{"r1.1.1", "--json", "r1.2.1"}, "one handle only"},
		{runExtend, []string{"--ttl", "1m"}, "ordo extend HANDLE"},
		{runExtend, []string{"r1.1.1", "--ttl", "-5s"}, "--ttl -5s: want 0"},
		{runExtend, []string{"r1.1.1", "--ttl", "soon"}, `--ttl "soon": want a duration`},
		{runReserve, []string{"--ttl", "-1s"}, "--ttl -1s: want 0"},
		{runReserve, []string{"--count", "0"}, "--count 0: want 1 to 4294967295"},
		{runReserve, []string{"5"}, "give the count with --count"},
		{runReserve, []string{"--idempotency-key", strings.Repeat("k", 129)}, "--idempotency-key of 129 bytes: want at most 128"},
		{runWatermark, []string{"now"}, "give --watch"},
	}
	for _, tt := range tests {
		err := tt.run(append(append([]string(nil), addrs...), tt.args...))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("%q: %v, want a usage error containing %q", tt.args, err, tt.wantIn)
		}
	}
}

// TestParseHandle: the handle may come before or after the flags.
func TestParseHandle(t *testing.T) {
	for _, args := range [][]string{
		{"r1.5.2", "--ttl", "1m"},
		{"--ttl", "1m", "r1.5.2"},
		{"--ttl=1m", "r1.5.2", "--json"},
	} {
		fs := flag.NewFlagSet("extend", flag.ContinueOnError)
		ttl := fs.Duration("ttl", 0, "")
		fs.Bool("json", false, "")
		handle, err := parseHandle(fs, args)
		if err != nil || handle != "r1.5.2" || *ttl != time.Minute {
			t.Errorf("parseHandle(%q) = %q, %v with --ttl %s; want r1.5.2, nil, 1m", args, handle, err, *ttl)
		}
	}
}

func TestExitCode(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("%w: --count 0", errUsage):                           2,
		fmt.Errorf("reservation r1.1.1 expired: %w", errMustNotPublish): 3,
		errors.New("unreachable"):                                       1,
	} {
		if got := exitCode(err); got != want {
			t.Errorf("exitCode(%v) = %d, want %d", err, got, want)
		}
	}
}

// fakeNode is a leader of a 64-bit layout that answers the settled-order
// calls: Reserve with IDs from 10, Complete, Abandon and Extend with
// settleErr when set, and the mark with 1000, tick 7.
type fakeNode struct {
	api.UnimplementedSequencerServer
	settleErr error
	// reserved is each Reserve's caller and key, as "caller/key".
	mu       sync.Mutex
	reserved []string
}

func (f *fakeNode) Layout(context.Context, *api.LayoutRequest) (*api.LayoutResponse, error) {
	return &api.LayoutResponse{Layout: "default"}, nil
}

func (f *fakeNode) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	caller := ""
	if v := metadata.ValueFromIncomingContext(ctx, api.CallerKey); len(v) > 0 {
		caller = v[0]
	}
	f.mu.Lock()
	f.reserved = append(f.reserved, caller+"/"+req.IdempotencyKey)
	f.mu.Unlock()
	return &api.ReserveResponse{Handle: "r1.10.2", TtlMs: req.TtlMs, Runs: []*api.IDRun{{First: 10, Count: req.Count, Step: 1}}}, nil
}

func (f *fakeNode) Complete(context.Context, *api.HandleRequest) (*api.SettleResponse, error) {
	return &api.SettleResponse{Fate: api.Fate_FATE_COMPLETED}, f.settleErr
}

func (f *fakeNode) Abandon(context.Context, *api.HandleRequest) (*api.SettleResponse, error) {
	return &api.SettleResponse{Fate: api.Fate_FATE_EXPIRED}, f.settleErr
}

func (f *fakeNode) Extend(context.Context, *api.ExtendRequest) (*api.SettleResponse, error) {
	return &api.SettleResponse{Fate: api.Fate_FATE_OPEN}, f.settleErr
}

func (f *fakeNode) Watermark(context.Context, *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	return &api.WatermarkResponse{Watermark: 1000, WatermarkTick: 7}, nil
}

func (f *fakeNode) WatchWatermark(_ *api.WatchRequest, st grpc.ServerStreamingServer[api.WatermarkResponse]) error {
	for _, m := range []*api.WatermarkResponse{{Watermark: 1000, WatermarkTick: 7}, {Watermark: 2000, WatermarkTick: 8}} {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return nil
}

// serve serves f on 127.0.0.1:0 until the test ends and returns its
// address.
func (f *fakeNode) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterSequencerServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// output runs a command and returns what it printed.
func output(t *testing.T, run func([]string) error, args ...string) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	stdout := os.Stdout
	os.Stdout = w
	err = run(args)
	os.Stdout = stdout
	w.Close()
	return string(<-read), err
}

// TestSettleCommands checks what each command prints against a fake
// leader.
func TestSettleCommands(t *testing.T) {
	addr := (&fakeNode{}).serve(t)
	tests := []struct {
		run  func([]string) error
		args []string
		want string
	}{
		{runReserve, []string{"--count", "2", "--ttl", "1m"}, "r1.10.2\n10\n11\n"},
		{runReserve, []string{"--count", "2", "--json"}, `{"handle":"r1.10.2","ids":["10","11"]}`},
		{runComplete, []string{"r1.10.2"}, "completed r1.10.2\n"},
		{runAbandon, []string{"r1.10.2"}, "expired\n"},
		{runAbandon, []string{"r1.10.2", "--json"}, `{"fate":"expired","handle":"r1.10.2"}`},
		{runExtend, []string{"r1.10.2", "--ttl", "1m"}, "extended r1.10.2\n"},
		{runWatermark, nil, "watermark 1000 tick 7\n"},
		{runWatermark, []string{"--json"}, `{"tick":"7","watermark":"1000"}`},
		{runWatermark, []string{"--watch", "--timeout", "1s"}, "watermark 1000 tick 7\nwatermark 2000 tick 8\n"},
		{runWatermark, []string{"--watch", "--json", "--timeout", "1s"}, "{\"tick\":\"7\",\"watermark\":\"1000\"}\n{\"tick\":\"8\",\"watermark\":\"2000\"}\n"},
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
}

// compactJSON is out compacted when it is one indented JSON value, as
// printJSON writes; otherwise out itself.
func compactJSON(out string) string {
	var v any
	if strings.Count(out, "\n{") > 0 || json.Unmarshal([]byte(out), &v) != nil {
		return out
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCompleteRefusedMustNotPublish: a reservation that expired or was
// abandoned makes complete and extend fail with errMustNotPublish (exit
// 3) and say so; other refusals are passed on.
func TestCompleteRefusedMustNotPublish(t *testing.T) {
	for msg, fate := range map[string]string{
		"reservation expired: do not publish these IDs":   "expired",
		"reservation abandoned: do not publish these IDs": "was abandoned",
	} {
		addr := (&fakeNode{settleErr: status.Error(codes.FailedPrecondition, msg)}).serve(t)
		for _, run := range []func([]string) error{runComplete, runExtend} {
			_, err := output(t, run, "--addrs", addr, "r1.10.2")
			if !errors.Is(err, errMustNotPublish) || !strings.Contains(err.Error(), "r1.10.2 "+fate+": do NOT publish its IDs") {
				t.Errorf("%q: %v, want errMustNotPublish naming the handle and its fate", msg, err)
			}
		}
	}
	addr := (&fakeNode{settleErr: status.Error(codes.NotFound, "no such reservation")}).serve(t)
	if _, err := output(t, runComplete, "--addrs", addr, "r1.10.2"); errors.Is(err, errMustNotPublish) || status.Code(err) != codes.NotFound {
		t.Errorf("an unknown handle: %v, want the node's NotFound", err)
	}
}

// TestReserveKeyAndCaller: ordo reserve --idempotency-key sends the key,
// and --caller names the caller, with the call.
func TestReserveKeyAndCaller(t *testing.T) {
	f := &fakeNode{}
	addr := f.serve(t)
	out, err := output(t, runReserve, "--addrs", addr, "--count", "2", "--idempotency-key", "batch-9", "--caller", "billing")
	if err != nil || out != "r1.10.2\n10\n11\n" {
		t.Fatalf("keyed reserve printed %q, %v", out, err)
	}
	if _, err := output(t, runReserve, "--addrs", addr); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"billing/batch-9", "/"}; !slices.Equal(f.reserved, want) {
		t.Errorf("calls carried caller/key %q, want %q", f.reserved, want)
	}
}
