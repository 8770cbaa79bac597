package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// settleCalls are the settled-order calls, each made once, for the tests
// that check what every one of them shares.
var settleCalls = map[string]func(ctx context.Context, c *Client) error{
	"Reserve":   func(ctx context.Context, c *Client) error { _, err := c.Reserve(ctx, 1, 0); return err },
	"Complete":  func(ctx context.Context, c *Client) error { return c.Complete(ctx, "r1.1.1") },
	"Abandon":   func(ctx context.Context, c *Client) error { _, err := c.Abandon(ctx, "r1.1.1"); return err },
	"Extend":    func(ctx context.Context, c *Client) error { return c.Extend(ctx, "r1.1.1", time.Second) },
	"Watermark": func(ctx context.Context, c *Client) error { _, err := c.Watermark(ctx); return err },
	"WatchWatermark": func(ctx context.Context, c *Client) error {
		stop := errors.New("stop")
		if err := c.WatchWatermark(ctx, func(Mark) error { return stop }); !errors.Is(err, stop) {
			return err
		}
		return nil
	},
}

// leaderNode answers every settled-order call well, as a leader does.
func leaderNode() *fakeSettle {
	f := settleNode()
	var last atomic.Uint64
	f.reserve = func(_ context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
		first := last.Add(uint64(req.Count)) - uint64(req.Count) + 1
		return &api.ReserveResponse{Handle: "r1.1.1", Runs: []*api.IDRun{{First: first, Count: req.Count, Step: 1}}}, nil
	}
	f.settle = func(_ context.Context, call, _ string, _ uint32) (*api.SettleResponse, error) {
		fate := map[string]api.Fate{"Complete": api.Fate_FATE_COMPLETED, "Abandon": api.Fate_FATE_ABANDONED, "Extend": api.Fate_FATE_OPEN}[call]
		return &api.SettleResponse{Fate: fate}, nil
	}
	f.watermark = func(context.Context) (*api.WatermarkResponse, error) { return mark(1, 1), nil }
	f.watch = func(_ *api.WatchRequest, st watchStream) error { return sendMarks(st, mark(1, 1)) }
	return f
}

// followerNode refuses every settled-order call with Unavailable, naming
// leader (if any) in the trailer.
func followerNode(leader string) *fakeSettle {
	f := settleNode()
	f.reserve = func(ctx context.Context, _ *api.ReserveRequest) (*api.ReserveResponse, error) {
		return nil, refuse(ctx, codes.Unavailable, leader)
	}
	f.settle = func(ctx context.Context, _, _ string, _ uint32) (*api.SettleResponse, error) {
		return nil, refuse(ctx, codes.Unavailable, leader)
	}
	f.watermark = func(ctx context.Context) (*api.WatermarkResponse, error) {
		return nil, refuse(ctx, codes.Unavailable, leader)
	}
	f.watch = func(_ *api.WatchRequest, st watchStream) error { return refuseStream(st, codes.Unavailable, leader) }
	return f
}

// TestSettleCallsFollowLeaderHint: every settled-order call that reaches
// a follower goes to the leader its refusal names, which only the hint
// tells (the leader is not among the addresses; the other address never
// answers well), and the next call goes straight there.
func TestSettleCallsFollowLeaderHint(t *testing.T) {
	for name, call := range settleCalls {
		t.Run(name, func(t *testing.T) {
			leader := leaderNode()
			follower := followerNode(mustSequencer(t, leader))
			other := followerNode("")
			c := mustNew(t, []string{mustSequencer(t, follower), mustSequencer(t, other)})
			ctx := testCtx(t, 5*time.Second)
			for i := range 2 {
				if err := call(ctx, c); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
			}
			if f, l, o := follower.calls.Load(), leader.calls.Load(), other.calls.Load(); f != 1 || l != 2 || o != 0 {
				t.Errorf("calls follower=%d leader=%d other=%d, want 1, 2, 0", f, l, o)
			}
		})
	}
}

// TestSettleCallsRetryAfterUnavailable: Complete, Abandon and Extend are
// idempotent, so an attempt whose answer was lost (here: the node applied
// the call, then failed to answer) is retried, and the retry's answer is
// the call's.
func TestSettleCallsRetryAfterUnavailable(t *testing.T) {
	for name, want := range map[string]api.Fate{"Complete": api.Fate_FATE_COMPLETED, "Abandon": api.Fate_FATE_ABANDONED, "Extend": api.Fate_FATE_OPEN} {
		t.Run(name, func(t *testing.T) {
			var applied atomic.Int64
			f := settleNode()
			f.settle = func(_ context.Context, call, handle string, _ uint32) (*api.SettleResponse, error) {
				if call != name || handle != "r1.7.3" {
					return nil, status.Errorf(codes.InvalidArgument, "fake: %s %q", call, handle)
				}
				if applied.Add(1) == 1 {
					return nil, status.Error(codes.Unavailable, "fake: applied, answer lost")
				}
				return &api.SettleResponse{Fate: want}, nil
			}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			var err error
			switch name {
			case "Complete":
				err = c.Complete(ctx, "r1.7.3")
			case "Abandon":
				var fate api.Fate
				if fate, err = c.Abandon(ctx, "r1.7.3"); fate != want {
					t.Errorf("Abandon's fate = %s, want %s", fate, want)
				}
			case "Extend":
				err = c.Extend(ctx, "r1.7.3", time.Minute)
			}
			if err != nil || applied.Load() != 2 {
				t.Fatalf("%s = %v after %d attempts, want nil after 2", name, err, applied.Load())
			}
		})
	}
}

// TestFateErrors: the cluster's refusals of a reservation that expired or
// was abandoned are ErrExpired and ErrAbandoned, still with the status
// (its code), and returned at once; other refusals are not; an answer
// whose fate contradicts the call is ErrBadResponse, never a success.
func TestFateErrors(t *testing.T) {
	tests := []struct {
		name     string
		call     string
		code     codes.Code
		msg      string
		fate     api.Fate // answered when code is OK
		want     error
		wantCode codes.Code
	}{
		{"Complete expired", "Complete", codes.FailedPrecondition, "reservation expired: do not publish these IDs", 0, ErrExpired, codes.FailedPrecondition},
		{"Complete abandoned", "Complete", codes.FailedPrecondition, "reservation abandoned: do not publish these IDs", 0, ErrAbandoned, codes.FailedPrecondition},
		{"Extend expired", "Extend", codes.FailedPrecondition, "reservation expired: do not publish these IDs", 0, ErrExpired, codes.FailedPrecondition},
		{"Extend abandoned", "Extend", codes.FailedPrecondition, "reservation abandoned: do not publish these IDs", 0, ErrAbandoned, codes.FailedPrecondition},
		{"Extend completed", "Extend", codes.FailedPrecondition, "reservation completed", 0, nil, codes.FailedPrecondition},
		{"Complete old cluster", "Complete", codes.FailedPrecondition, "the cluster version is too old: upgrade every voter", 0, nil, codes.FailedPrecondition},
		{"Complete unknown", "Complete", codes.NotFound, "no such reservation", 0, nil, codes.NotFound},
		{"Abandon completed", "Abandon", codes.FailedPrecondition, "reservation completed", 0, nil, codes.FailedPrecondition},
		{"Complete answered expired", "Complete", codes.OK, "", api.Fate_FATE_EXPIRED, ErrBadResponse, codes.Unknown},
		{"Abandon answered open", "Abandon", codes.OK, "", api.Fate_FATE_OPEN, ErrBadResponse, codes.Unknown},
		{"Extend answered completed", "Extend", codes.OK, "", api.Fate_FATE_COMPLETED, ErrBadResponse, codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := settleNode()
			f.settle = func(context.Context, string, string, uint32) (*api.SettleResponse, error) {
				if tt.code != codes.OK {
					return nil, status.Error(tt.code, tt.msg)
				}
				return &api.SettleResponse{Fate: tt.fate}, nil
			}
			c := mustNew(t, []string{mustSequencer(t, f)})
			err := settleCalls[tt.call](testCtx(t, 5*time.Second), c)
			for _, sentinel := range []error{ErrExpired, ErrAbandoned, ErrBadResponse} {
				if want := sentinel == tt.want; errors.Is(err, sentinel) != want {
					t.Errorf("%s = %v: errors.Is(err, %q) = %v, want %v", tt.call, err, sentinel, !want, want)
				}
			}
			if status.Code(err) != tt.wantCode {
				t.Errorf("%s = %v: code %s, want %s", tt.call, err, status.Code(err), tt.wantCode)
			}
			if f.calls.Load() != 1 {
				t.Errorf("%d attempts, want 1: none of these is retried", f.calls.Load())
			}
		})
	}
}

// TestReserve checks what Reserve sends and returns, and what it refuses
// without asking.
func TestReserve(t *testing.T) {
	var got *api.ReserveRequest
	f := settleNode()
	f.reserve = func(_ context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
		got = req
		return &api.ReserveResponse{
			Handle: "r1.5.4", TtlMs: 1500,
			Runs: []*api.IDRun{{First: 4094, Count: 2, Step: 1}, {First: 1 << 22, Count: 2, Step: 1}},
		}, nil
	}
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	r, err := c.Reserve(ctx, 4, 1500*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Handle != "r1.5.4" || r.TTL != 1500*time.Millisecond || !slices.Equal(r.IDs, []uint64{4094, 4095, 1 << 22, 1<<22 + 1}) {
		t.Errorf("Reserve = %+v", r)
	}
	if got.Count != 4 || got.TtlMs != 2 {
		t.Errorf("asked for count %d, ttl %d ms; want 4, 2 (a TTL rounds up, so one under 1 ms is not the default)", got.Count, got.TtlMs)
	}
	for _, bad := range []struct {
		count int
		ttl   time.Duration
		want  error
	}{{0, 0, ErrBadCount}, {1 << 32, 0, ErrBadCount}, {1, -time.Millisecond, ErrBadTTL}, {1, 50 * 24 * time.Hour, ErrBadTTL}} {
		if _, err := c.Reserve(ctx, bad.count, bad.ttl); !errors.Is(err, bad.want) {
			t.Errorf("Reserve(%d, %s) = %v, want %v", bad.count, bad.ttl, err, bad.want)
		}
	}
	if err := c.Extend(ctx, "r1.5.4", -time.Second); !errors.Is(err, ErrBadTTL) {
		t.Errorf("Extend with a negative TTL = %v, want ErrBadTTL", err)
	}
	if f.calls.Load() != 1 {
		t.Errorf("%d calls reached the node, want 1: bad arguments are refused without asking", f.calls.Load())
	}
}

// TestReserveChecksFloor: Reserve's IDs must be above every ID returned
// by a call (Reserve or NextN) that completed before it began, and a
// reservation must have a handle: else ErrBadResponse and no IDs.
func TestReserveChecksFloor(t *testing.T) {
	tests := []struct {
		name   string
		first  string // the call that returns 10, 11, 12
		second *api.IDRun
		handle string
	}{
		{"below a reservation", "Reserve", &api.IDRun{First: 5, Count: 1, Step: 1}, "r1.2.1"},
		{"equal to a reservation's last", "Reserve", &api.IDRun{First: 12, Count: 1, Step: 1}, "r1.2.1"},
		{"overlapping a reservation", "Reserve", &api.IDRun{First: 11, Count: 3, Step: 1}, "r1.2.3"},
		{"below NextN's", "NextN", &api.IDRun{First: 5, Count: 2, Step: 1}, "r1.2.2"},
		{"no handle", "Reserve", &api.IDRun{First: 13, Count: 1, Step: 1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := []*api.IDRun{{First: 10, Count: 3, Step: 1}}
			f := settleNode()
			f.next = serve(first...)
			var calls atomic.Int64
			f.reserve = func(context.Context, *api.ReserveRequest) (*api.ReserveResponse, error) {
				if calls.Add(1) == 1 && tt.first == "Reserve" {
					return &api.ReserveResponse{Handle: "r1.1.3", Runs: first}, nil
				}
				return &api.ReserveResponse{Handle: tt.handle, Runs: []*api.IDRun{tt.second}}, nil
			}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			if tt.first == "NextN" {
				mustNextN(ctx, t, c, 3)
			} else if _, err := c.Reserve(ctx, 3, 0); err != nil {
				t.Fatal(err)
			}
			r, err := c.Reserve(ctx, int(tt.second.Count), 0)
			if !errors.Is(err, ErrBadResponse) || r.IDs != nil {
				t.Fatalf("second Reserve = %+v, %v; want no IDs, ErrBadResponse", r, err)
			}
		})
	}
}

// TestWatermarkFloor: a lower answer (a new leader's, briefly) is never
// reported: the highest mark reported before is, ID and tick together.
func TestWatermarkFloor(t *testing.T) {
	answers := []*api.WatermarkResponse{mark(1000, 10), mark(500, 5), mark(1000, 10), mark(2000, 20)}
	want := []Mark{{1000, 10}, {1000, 10}, {1000, 10}, {2000, 20}}
	var calls atomic.Int64
	f := settleNode()
	f.watermark = func(context.Context) (*api.WatermarkResponse, error) { return answers[calls.Add(1)-1], nil }
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	for i, w := range want {
		if m, err := c.Watermark(ctx); err != nil || m != w {
			t.Fatalf("Watermark %d (answer %v) = %+v, %v; want %+v", i+1, answers[i], m, err, w)
		}
	}
}

// TestWatchWatermarkReconnects: a stream that fails Unavailable after
// serving is reopened where its trailer points; the new leader's lower
// first mark is reported as the floor, and the floor holds for
// Watermark too. fn's error ends the watch and is returned.
func TestWatchWatermarkReconnects(t *testing.T) {
	next := settleNode()
	next.watch = func(_ *api.WatchRequest, st watchStream) error { return sendMarks(st, mark(150, 15), mark(300, 30)) }
	next.watermark = func(context.Context) (*api.WatermarkResponse, error) { return mark(150, 15), nil }
	nextAddr := mustSequencer(t, next)
	var heartbeat atomic.Uint32
	old := settleNode()
	old.watch = func(req *api.WatchRequest, st watchStream) error {
		heartbeat.Store(req.HeartbeatMs)
		for _, m := range []*api.WatermarkResponse{mark(100, 10), mark(200, 20), mark(200, 20)} {
			if err := st.Send(m); err != nil {
				return err
			}
		}
		return refuseStream(st, codes.Unavailable, nextAddr)
	}
	c := mustNew(t, []string{mustSequencer(t, old)})
	ctx := testCtx(t, 5*time.Second)
	stop := errors.New("seen enough")
	var seen []Mark
	err := c.WatchWatermark(ctx, func(m Mark) error {
		seen = append(seen, m)
		if m.Tick == 30 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("WatchWatermark = %v, want fn's error", err)
	}
	want := []Mark{{100, 10}, {200, 20}, {200, 20}, {200, 20}, {300, 30}}
	if !slices.Equal(seen, want) {
		t.Errorf("marks %v, want %v (heartbeats passed on, the new leader's lower mark replaced)", seen, want)
	}
	if m, err := c.Watermark(ctx); err != nil || m != (Mark{300, 30}) {
		t.Errorf("Watermark after the watch = %+v, %v; want the floor {300 30}", m, err)
	}
	if old.calls.Load() != 1 || next.calls.Load() != 2 || heartbeat.Load() != 1000 {
		t.Errorf("streams old=%d next=%d (heartbeat %d ms), want 1, 1 and a Watermark, 1000 ms", old.calls.Load(), next.calls.Load()-1, heartbeat.Load())
	}
}

// TestWatchWatermarkLeavesASilentStream: a stream that sends nothing (a
// paused leader keeps its connection) is given up after the heartbeat and
// the attempt timeout, and the watch moves on to the next address; it
// ends with ctx, returning ctx.Err().
func TestWatchWatermarkLeavesASilentStream(t *testing.T) {
	silent := settleNode()
	silent.watch = func(_ *api.WatchRequest, st watchStream) error { return sendMarks(st) }
	live := settleNode()
	live.watch = func(_ *api.WatchRequest, st watchStream) error { return sendMarks(st, mark(7, 7)) }
	c := mustNew(t, []string{mustSequencer(t, silent), mustSequencer(t, live)}, WithAttemptTimeout(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.WatchWatermark(ctx, func(m Mark) error {
		if m != (Mark{7, 7}) {
			t.Errorf("mark %+v, want {7 7}", m)
		}
		cancel()
		return nil
	})
	if err != context.Canceled { // the contract: ctx.Err() itself, not wrapped
		t.Fatalf("WatchWatermark = %v, want ctx.Err()", err)
	}
	if silent.calls.Load() != 1 {
		t.Errorf("%d streams to the silent node, want 1", silent.calls.Load())
	}
}

// TestWatchWatermarkPinsTheCluster: marks from a node of another cluster
// are never reported.
func TestWatchWatermarkPinsTheCluster(t *testing.T) {
	foreign := settleNode()
	foreign.watch = func(_ *api.WatchRequest, st watchStream) error {
		if err := st.SetHeader(metadata.Pairs(api.ClusterIDKey, "other")); err != nil {
			return err
		}
		return sendMarks(st, mark(9, 9))
	}
	own := settleNode()
	own.watch = func(_ *api.WatchRequest, st watchStream) error {
		if err := st.SetHeader(metadata.Pairs(api.ClusterIDKey, "ours")); err != nil {
			return err
		}
		return sendMarks(st, mark(3, 3))
	}
	c := mustNew(t, []string{mustSequencer(t, foreign), mustSequencer(t, own)}, WithClusterID("ours"))
	stop := errors.New("stop")
	err := c.WatchWatermark(testCtx(t, 5*time.Second), func(m Mark) error {
		if m != (Mark{3, 3}) {
			t.Errorf("mark %+v reported, want only the own cluster's {3 3}", m)
		}
		return stop
	})
	if !errors.Is(err, stop) {
		t.Fatalf("WatchWatermark = %v, want fn's error", err)
	}
}

// TestWaitSettled: WaitSettled returns the first mark above id, passing
// over heartbeats at or below it; at once from the floor when a mark
// above id was reported before; and ctx.Err() when ctx ends first.
func TestWaitSettled(t *testing.T) {
	f := settleNode()
	f.watch = func(_ *api.WatchRequest, st watchStream) error {
		return sendMarks(st, mark(5, 1), mark(10, 2), mark(10, 2), mark(15, 3), mark(20, 4))
	}
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	if m, err := c.WaitSettled(ctx, 10); err != nil || m != (Mark{15, 3}) {
		t.Fatalf("WaitSettled(10) = %+v, %v; want {15 3}", m, err)
	}
	if m, err := c.WaitSettled(ctx, 14); err != nil || m != (Mark{15, 3}) || f.calls.Load() != 1 {
		t.Fatalf("WaitSettled(14) = %+v, %v after %d streams; want the floor {15 3} after 1", m, err, f.calls.Load())
	}

	// A 128-bit cluster's marks carry only a tick: waiting for an ID to
	// pass one would wait for ever, so it is refused at the first mark.
	wide := settleNode()
	wide.watch = func(_ *api.WatchRequest, st watchStream) error { return sendMarks(st, mark(0, 7)) }
	c = mustNew(t, []string{mustSequencer(t, wide)})
	if _, err := c.WaitSettled(ctx, 10); !errors.Is(err, layout.ErrWrongWidth) {
		t.Fatalf("WaitSettled on marks without an ID = %v, want ErrWrongWidth", err)
	}

	stuck := settleNode()
	stuck.watch = func(_ *api.WatchRequest, st watchStream) error {
		for {
			if err := st.Send(mark(5, 1)); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c = mustNew(t, []string{mustSequencer(t, stuck)})
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		m, err := c.WaitSettled(short, 10)
		if m != (Mark{}) {
			err = fmt.Errorf("mark %+v, %w", m, err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitSettled past the deadline = %v; want DeadlineExceeded and no mark", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("WaitSettled still waits 3 s after its 200 ms deadline")
	}
}

// TestReserveWide: ReserveUUIDs asks for ticks and renders them as
// NextUUIDs does; once the client knows the layout is 128-bit, Reserve
// and WaitSettled are refused without asking, and ReserveULIDs on a
// uuidv7 cluster too; before that the node's refusal is returned.
func TestReserveWide(t *testing.T) {
	const group = 9
	ms := uint64(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	f := &fakeSettle{fakeSeq: wideSeq("uuidv7", group, counter())}
	f.reserve = func(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(api.TicksKey)) == 0 {
			return nil, status.Error(codes.FailedPrecondition, "fake: a 128-bit layout answers only calls for ticks")
		}
		return &api.ReserveResponse{Handle: "r1.9.2", Runs: []*api.IDRun{{First: ms<<15 + 1, Count: req.Count, Step: 1}}}, nil
	}
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.Reserve(ctx, 2, 0); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Reserve before the layout is known = %v, want the node's FailedPrecondition", err)
	}
	handle, ids, err := c.ReserveUUIDs(ctx, 2, 0)
	if err != nil || handle != "r1.9.2" || len(ids) != 2 {
		t.Fatalf("ReserveUUIDs = %q, %v, %v", handle, ids, err)
	}
	l := layout.MustPreset("uuidv7")
	for _, id := range ids {
		if p, err := l.DecodeWide(id); err != nil || p.Group != group || p.Time.UnixMilli() != int64(ms) {
			t.Errorf("ID %s decodes to %+v, %v; want group %d, time %d ms", id, p, err, group, ms)
		}
	}
	if ids[0].String() >= ids[1].String() {
		t.Errorf("%s does not sort below %s", ids[0], ids[1])
	}
	calls := f.calls.Load()
	if _, err := c.Reserve(ctx, 1, 0); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("Reserve on a uuidv7 cluster = %v, want ErrWrongWidth", err)
	}
	if _, err := c.WaitSettled(ctx, 1); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("WaitSettled on a uuidv7 cluster = %v, want ErrWrongWidth", err)
	}
	if _, _, err := c.ReserveULIDs(ctx, 1, 0); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("ReserveULIDs on a uuidv7 cluster = %v, want ErrWrongWidth", err)
	}
	if f.calls.Load() != calls {
		t.Errorf("%d calls for refused calls, want none", f.calls.Load()-calls)
	}
}
