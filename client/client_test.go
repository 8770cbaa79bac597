package client

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

func TestNewNoAddrs(t *testing.T) {
	for _, addrs := range [][]string{nil, {}} {
		c, err := New(addrs)
		if !errors.Is(err, ErrNoAddrs) || c != nil {
			t.Errorf("New(%#v) = %v, %v; want nil, ErrNoAddrs", addrs, c, err)
		}
	}
}

func TestNextNBadCount(t *testing.T) {
	f := &fakeSeq{next: counter()}
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	for _, n := range []int{0, -1, math.MinInt, 1 << 32} {
		ids, err := c.NextN(ctx, n)
		if !errors.Is(err, ErrBadCount) || ids != nil {
			t.Errorf("NextN(%d) = %v, %v; want nil, ErrBadCount", n, ids, err)
		}
		// The range, not "at least 1" for a count too large.
		if err == nil || !strings.Contains(err.Error(), "want 1 to 4294967295") {
			t.Errorf("NextN(%d): %v, want the range named", n, err)
		}
	}
	if got := f.nextCalls.Load(); got != 0 {
		t.Errorf("server got %d Next calls for bad counts, want 0", got)
	}
}

func TestNextHappyPath(t *testing.T) {
	tests := []struct {
		name string
		n    int
		runs []*api.IDRun
		want []uint64
	}{
		{"one", 1, []*api.IDRun{{First: 42, Count: 1, Step: 1}}, []uint64{42}},
		{"one run step 1", 4, []*api.IDRun{{First: 100, Count: 4, Step: 1}}, []uint64{100, 101, 102, 103}},
		{"one run step 1024", 3, []*api.IDRun{{First: 7, Count: 3, Step: 1024}}, []uint64{7, 1031, 2055}},
		{"single ID step 0", 1, []*api.IDRun{{First: 9, Count: 1, Step: 0}}, []uint64{9}},
		{
			"two runs step 1 across a time unit", 5,
			[]*api.IDRun{{First: 4094, Count: 2, Step: 1}, {First: 1 << 22, Count: 3, Step: 1}},
			[]uint64{4094, 4095, 1 << 22, 1<<22 + 1, 1<<22 + 2},
		},
		{
			"two runs step 1024 across a time unit", 4,
			[]*api.IDRun{{First: 3<<10 | 5, Count: 2, Step: 1024}, {First: 1<<24 | 5, Count: 2, Step: 1024}},
			[]uint64{3<<10 | 5, 4<<10 | 5, 1<<24 | 5, 1<<24 | 1<<10 | 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen atomic.Uint32
			f := &fakeSeq{next: func(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
				seen.Store(req.Count)
				return &api.NextResponse{Runs: tt.runs}, nil
			}}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			got := mustNextN(ctx, t, c, tt.n)
			if !slices.Equal(got, tt.want) {
				t.Errorf("NextN(%d) = %v, want %v", tt.n, got, tt.want)
			}
			if got := seen.Load(); got != uint32(tt.n) {
				t.Errorf("server was asked for %d IDs, want %d", got, tt.n)
			}
		})
	}
}

func TestNextReturnsOneID(t *testing.T) {
	f := &fakeSeq{next: counter()}
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	for want := uint64(1); want <= 3; want++ {
		got, err := c.Next(ctx)
		if err != nil || got != want {
			t.Fatalf("Next = %d, %v; want %d, nil", got, err, want)
		}
	}
}

func TestFollowsLeaderHint(t *testing.T) {
	b := &fakeSeq{next: counter()}
	bAddr := mustSequencer(t, b)
	a := &fakeSeq{next: fail(codes.Unavailable, bAddr)}
	// other is next in turn after a: if the client ignored the hint it
	// would try other, which never answers well.
	other := &fakeSeq{next: fail(codes.Unavailable, "")}
	// b is not among the addresses: the client can only learn it from
	// the hint.
	c := mustNew(t, []string{mustSequencer(t, a), mustSequencer(t, other)})
	ctx := testCtx(t, 5*time.Second)

	if got := mustNextN(ctx, t, c, 2); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("first NextN = %v, want [1 2]", got)
	}
	if got := mustNextN(ctx, t, c, 1); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("second NextN = %v, want [3]", got)
	}
	if a, b, o := a.nextCalls.Load(), b.nextCalls.Load(), other.nextCalls.Load(); a != 1 || b != 2 || o != 0 {
		t.Errorf("calls a=%d b=%d other=%d, want 1, 2, 0 (second call straight to the hinted leader)", a, b, o)
	}
}

func TestFollowsLeaderAddrInResponse(t *testing.T) {
	var last atomic.Uint64
	last.Store(1000)
	leader := &fakeSeq{next: func(context.Context, *api.NextRequest) (*api.NextResponse, error) {
		return &api.NextResponse{Runs: []*api.IDRun{{First: last.Add(1), Count: 1, Step: 1}}}, nil
	}}
	leaderAddr := mustSequencer(t, leader)
	// follower answers (as if it forwarded) and names the leader.
	follower := &fakeSeq{next: func(context.Context, *api.NextRequest) (*api.NextResponse, error) {
		return &api.NextResponse{Runs: []*api.IDRun{{First: 1000, Count: 1, Step: 1}}, LeaderAddr: leaderAddr}, nil
	}}
	c := mustNew(t, []string{mustSequencer(t, follower)})
	ctx := testCtx(t, 5*time.Second)
	if got := mustNextN(ctx, t, c, 1); got[0] != 1000 {
		t.Fatalf("first NextN = %v, want [1000]", got)
	}
	if got := mustNextN(ctx, t, c, 1); got[0] != 1001 {
		t.Fatalf("second NextN = %v, want [1001]", got)
	}
	if f, l := follower.nextCalls.Load(), leader.nextCalls.Load(); f != 1 || l != 1 {
		t.Errorf("calls follower=%d leader=%d, want 1, 1", f, l)
	}
}

func TestFailsOverWithoutHint(t *testing.T) {
	tests := []struct {
		name  string
		first func(t *testing.T) (addr string, calls func() int64)
	}{
		{"connection refused", func(t *testing.T) (string, func() int64) {
			return mustDeadAddr(t), func() int64 { return 0 }
		}},
		{"unavailable", func(t *testing.T) (string, func() int64) {
			f := &fakeSeq{next: fail(codes.Unavailable, "")}
			return mustSequencer(t, f), f.nextCalls.Load
		}},
		{"hint names the failing node itself", func(t *testing.T) (string, func() int64) {
			lis := mustListen(t)
			f := &fakeSeq{next: fail(codes.Unavailable, lis.Addr().String())}
			return mustSequencerOn(t, lis, f), f.nextCalls.Load
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			firstAddr, firstCalls := tt.first(t)
			good := &fakeSeq{next: counter()}
			c := mustNew(t, []string{firstAddr, mustSequencer(t, good)})
			ctx := testCtx(t, 5*time.Second)
			if got := mustNextN(ctx, t, c, 3); !slices.Equal(got, []uint64{1, 2, 3}) {
				t.Fatalf("NextN = %v, want [1 2 3]", got)
			}
			// The client stays on the node that answered.
			if got := mustNextN(ctx, t, c, 1); !slices.Equal(got, []uint64{4}) {
				t.Fatalf("NextN = %v, want [4]", got)
			}
			if f, g := firstCalls(), good.nextCalls.Load(); f > 1 || g != 2 {
				t.Errorf("calls first=%d good=%d, want <=1, 2", f, g)
			}
		})
	}
}

func TestRetryableCodes(t *testing.T) {
	for _, code := range []codes.Code{
		codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Internal,
		codes.Unknown, codes.Canceled, codes.ResourceExhausted,
	} {
		t.Run(code.String(), func(t *testing.T) {
			f := &fakeSeq{next: failOnce(code, counter())}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			if got := mustNextN(ctx, t, c, 1); !slices.Equal(got, []uint64{1}) {
				t.Fatalf("NextN = %v, want [1]", got)
			}
			if got := f.nextCalls.Load(); got != 2 {
				t.Errorf("attempts = %d, want 2", got)
			}
		})
	}
}

func TestRetriesUntilContextEnds(t *testing.T) {
	tests := []struct {
		name string
		// end returns the call's context; it ends after about 200ms.
		end  func(t *testing.T) context.Context
		want error
	}{
		{"deadline", func(t *testing.T) context.Context { return testCtx(t, 200*time.Millisecond) }, context.DeadlineExceeded},
		{"cancel", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(testCtx(t, 5*time.Second))
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx
		}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &fakeSeq{next: fail(codes.Unavailable, "")}
			b := &fakeSeq{next: fail(codes.Unavailable, "")} // no hint: round robin
			c := mustNew(t, []string{mustSequencer(t, a), mustSequencer(t, b), mustDeadAddr(t)})
			ctx := tt.end(t)
			start := time.Now()
			ids, err := c.NextN(ctx, 1)
			elapsed := time.Since(start)
			if !errors.Is(err, tt.want) || ids != nil {
				t.Fatalf("NextN = %v, %v; want nil and an error wrapping %v", ids, err, tt.want)
			}
			attempts := a.nextCalls.Load() + b.nextCalls.Load()
			if attempts < 2 || attempts > 1000 {
				t.Errorf("attempts on live servers = %d, want >1 and finite", attempts)
			}
			if a.nextCalls.Load() == 0 || b.nextCalls.Load() == 0 {
				t.Errorf("calls a=%d b=%d: want both servers tried", a.nextCalls.Load(), b.nextCalls.Load())
			}
			if elapsed > 2*time.Second {
				t.Errorf("NextN returned after %v, long after its context ended", elapsed)
			}
		})
	}
}

func TestNonRetryableReturnsAtOnce(t *testing.T) {
	for _, code := range []codes.Code{
		codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange,
		codes.NotFound, codes.PermissionDenied, codes.Unimplemented,
	} {
		t.Run(code.String(), func(t *testing.T) {
			other := &fakeSeq{next: counter()}
			otherAddr := mustSequencer(t, other)
			// A hint must not make a non-retryable error retry either.
			a := &fakeSeq{next: fail(code, otherAddr)}
			c := mustNew(t, []string{mustSequencer(t, a), otherAddr})
			ctx := testCtx(t, 5*time.Second)
			ids, err := c.NextN(ctx, 1)
			if status.Code(err) != code || ids != nil {
				t.Fatalf("NextN = %v, %v; want nil and code %v", ids, err, code)
			}
			if a, o := a.nextCalls.Load(), other.nextCalls.Load(); a != 1 || o != 0 {
				t.Errorf("calls = %d and %d, want exactly one attempt", a, o)
			}
		})
	}
}

func TestAttemptTimeoutMovesOn(t *testing.T) {
	abandoned := make(chan struct{}, 1)
	hang := &fakeSeq{next: func(ctx context.Context, _ *api.NextRequest) (*api.NextResponse, error) {
		<-ctx.Done()
		abandoned <- struct{}{}
		return nil, ctx.Err()
	}}
	good := &fakeSeq{next: counter()}
	const attempt = 100 * time.Millisecond
	c := mustNew(t, []string{mustSequencer(t, hang), mustSequencer(t, good)}, WithAttemptTimeout(attempt))
	ctx := testCtx(t, 5*time.Second)
	start := time.Now()
	if got := mustNextN(ctx, t, c, 2); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("NextN = %v, want [1 2]", got)
	}
	if elapsed := time.Since(start); elapsed < attempt {
		t.Errorf("NextN took %v, less than the attempt timeout %v", elapsed, attempt)
	}
	if h, g := hang.nextCalls.Load(), good.nextCalls.Load(); h != 1 || g != 1 {
		t.Errorf("calls hang=%d good=%d, want 1, 1", h, g)
	}
	select {
	case <-abandoned:
	case <-ctx.Done():
		t.Fatal("the hanging call's context never ended on the server")
	}
}

func TestBadResponses(t *testing.T) {
	tests := []struct {
		name string
		n    int
		runs []*api.IDRun
	}{
		{"no runs", 1, nil},
		{"too few IDs", 3, []*api.IDRun{{First: 1, Count: 2, Step: 1}}},
		{"too many IDs in one run", 2, []*api.IDRun{{First: 1, Count: 3, Step: 1}}},
		{"too many IDs across runs", 2, []*api.IDRun{{First: 1, Count: 2, Step: 1}, {First: 10, Count: 1, Step: 1}}},
		{"step 0", 2, []*api.IDRun{{First: 5, Count: 2, Step: 0}}},
		{"runs going down", 2, []*api.IDRun{{First: 10, Count: 1, Step: 1}, {First: 5, Count: 1, Step: 1}}},
		{"runs repeating an ID", 3, []*api.IDRun{{First: 10, Count: 2, Step: 1}, {First: 11, Count: 1, Step: 1}}},
		{"empty run", 1, []*api.IDRun{{First: 5, Count: 0, Step: 1}, {First: 5, Count: 1, Step: 1}}},
		{"only an empty run", 1, []*api.IDRun{{First: 5, Count: 0, Step: 1}}},
		{"run wraps past 2^64", 2, []*api.IDRun{{First: math.MaxUint64, Count: 2, Step: 1}}},
		{"step wraps past 2^64", 2, []*api.IDRun{{First: 10, Count: 2, Step: math.MaxUint64}}},
		{"nil run", 1, []*api.IDRun{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSeq{next: serve(tt.runs...)}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			ids, err := c.NextN(ctx, tt.n)
			if !errors.Is(err, ErrBadResponse) || ids != nil {
				t.Fatalf("NextN(%d) = %v, %v; want nil, ErrBadResponse", tt.n, ids, err)
			}
			if got := f.nextCalls.Load(); got != 1 {
				t.Errorf("attempts = %d, want 1 (a bad response is not retried)", got)
			}
		})
	}
}

func TestBadResponseNotAboveEarlierCall(t *testing.T) {
	tests := []struct {
		name   string
		second *api.IDRun // the first call returns 10, 11, 12
	}{
		{"below", &api.IDRun{First: 5, Count: 1, Step: 1}},
		{"equal to the last", &api.IDRun{First: 12, Count: 1, Step: 1}},
		{"overlapping", &api.IDRun{First: 11, Count: 3, Step: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			f := &fakeSeq{next: func(context.Context, *api.NextRequest) (*api.NextResponse, error) {
				if calls.Add(1) == 1 {
					return &api.NextResponse{Runs: []*api.IDRun{{First: 10, Count: 3, Step: 1}}}, nil
				}
				return &api.NextResponse{Runs: []*api.IDRun{tt.second}}, nil
			}}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			mustNextN(ctx, t, c, 3)
			ids, err := c.NextN(ctx, int(tt.second.Count))
			if !errors.Is(err, ErrBadResponse) || ids != nil {
				t.Fatalf("second NextN = %v, %v; want nil, ErrBadResponse", ids, err)
			}
		})
	}
}

// TestConcurrentCallsOutOfOrder: the leader hands out 1 to the first call
// and 2 to the second, but the second reply arrives first. Both calls
// overlap, so both are correct; the floor must be taken when a call starts,
// not when its reply arrives.
func TestConcurrentCallsOutOfOrder(t *testing.T) {
	firstArrived := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	var third atomic.Uint64
	f := &fakeSeq{next: func(ctx context.Context, _ *api.NextRequest) (*api.NextResponse, error) {
		switch calls.Add(1) {
		case 1:
			close(firstArrived)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, status.Error(codes.Aborted, "fake: never released")
			}
			return &api.NextResponse{Runs: []*api.IDRun{{First: 1, Count: 1, Step: 1}}}, nil
		case 2:
			return &api.NextResponse{Runs: []*api.IDRun{{First: 2, Count: 1, Step: 1}}}, nil
		default:
			return &api.NextResponse{Runs: []*api.IDRun{{First: third.Load(), Count: 1, Step: 1}}}, nil
		}
	}}
	// A long attempt timeout, so the held call is not retried.
	c := mustNew(t, []string{mustSequencer(t, f)}, WithAttemptTimeout(30*time.Second))
	ctx := testCtx(t, 10*time.Second)

	type result struct {
		id  uint64
		err error
	}
	firstDone := make(chan result, 1)
	go func() {
		id, err := c.Next(ctx)
		firstDone <- result{id, err}
	}()
	select {
	case <-firstArrived:
	case <-ctx.Done():
		t.Fatal("first request never reached the server")
	}
	if id, err := c.Next(ctx); err != nil || id != 2 {
		t.Fatalf("second call = %d, %v; want 2, nil", id, err)
	}
	close(release)
	select {
	case r := <-firstDone:
		if r.err != nil || r.id != 1 {
			t.Fatalf("first call = %d, %v; want 1, nil", r.id, r.err)
		}
	case <-ctx.Done():
		t.Fatal("first call never returned")
	}

	// Both completed; the highest ID returned is 2, not the last one (1).
	third.Store(2)
	if ids, err := c.NextN(ctx, 1); !errors.Is(err, ErrBadResponse) || ids != nil {
		t.Fatalf("third call answered 2 = %v, %v; want nil, ErrBadResponse", ids, err)
	}
	third.Store(3)
	if id, err := c.Next(ctx); err != nil || id != 3 {
		t.Fatalf("fourth call = %d, %v; want 3, nil", id, err)
	}
}

func TestLayout(t *testing.T) {
	def, err := layout.Preset("default")
	if err != nil {
		t.Fatal(err)
	}
	sony, err := layout.Preset("sonyflake")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		spec  string
		group uint64
		want  layout.Layout
	}{
		{"default", 3, def},
		{"sonyflake", 65535, sony},
		{def.String(), 0, def},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			f := &fakeSeq{layout: func(context.Context) (*api.LayoutResponse, error) {
				return &api.LayoutResponse{Layout: tt.spec, Group: tt.group}, nil
			}}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			l, g, err := c.Layout(ctx)
			if err != nil {
				t.Fatalf("Layout: %v", err)
			}
			if l != tt.want || g != tt.group {
				t.Errorf("Layout = %+v, %d; want %+v, %d", l, g, tt.want, tt.group)
			}
		})
	}
}

func TestLayoutGarbage(t *testing.T) {
	for _, spec := range []string{"garbage", "", "custom:epoch=0,unit=1,bits=99/0/0"} {
		t.Run(spec, func(t *testing.T) {
			f := &fakeSeq{layout: func(context.Context) (*api.LayoutResponse, error) {
				return &api.LayoutResponse{Layout: spec, Group: 3}, nil
			}}
			c := mustNew(t, []string{mustSequencer(t, f)})
			ctx := testCtx(t, 5*time.Second)
			if _, _, err := c.Layout(ctx); !errors.Is(err, ErrBadResponse) {
				t.Fatalf("Layout with spec %q: err = %v, want ErrBadResponse", spec, err)
			}
		})
	}
}

func TestLayoutFollowsHint(t *testing.T) {
	b := &fakeSeq{layout: func(context.Context) (*api.LayoutResponse, error) {
		return &api.LayoutResponse{Layout: "default", Group: 7}, nil
	}}
	bAddr := mustSequencer(t, b)
	a := &fakeSeq{layout: func(ctx context.Context) (*api.LayoutResponse, error) {
		return nil, refuse(ctx, codes.Unavailable, bAddr)
	}}
	c := mustNew(t, []string{mustSequencer(t, a)})
	ctx := testCtx(t, 5*time.Second)
	if _, g, err := c.Layout(ctx); err != nil || g != 7 {
		t.Fatalf("Layout = group %d, %v; want 7, nil", g, err)
	}
	if a, b := a.layoutCalls.Load(), b.layoutCalls.Load(); a != 1 || b != 1 {
		t.Errorf("calls a=%d b=%d, want 1, 1", a, b)
	}
}

func TestAdminFollowsHint(t *testing.T) {
	b := &fakeAdmin{nodeStatus: func(context.Context) (*api.NodeInfo, error) {
		return &api.NodeInfo{Id: "b", Role: "leader"}, nil
	}}
	bAddr := mustAdmin(t, b)
	a := &fakeAdmin{nodeStatus: func(ctx context.Context) (*api.NodeInfo, error) {
		return nil, refuse(ctx, codes.Unavailable, bAddr)
	}}
	c := mustNew(t, []string{mustAdmin(t, a)})
	ctx := testCtx(t, 5*time.Second)
	var info *api.NodeInfo
	err := c.Admin(ctx, func(ctx context.Context, ac api.AdminClient, opts ...grpc.CallOption) error {
		var err error
		info, err = ac.NodeStatus(ctx, &api.NodeStatusRequest{}, opts...)
		return err
	})
	if err != nil || info.GetId() != "b" {
		t.Fatalf("Admin = %v, %v; want node b", info, err)
	}
	if a, b := a.calls.Load(), b.calls.Load(); a != 1 || b != 1 {
		t.Errorf("calls a=%d b=%d, want 1, 1", a, b)
	}
}

func TestDecode(t *testing.T) {
	def, err := layout.Preset("default")
	if err != nil {
		t.Fatal(err)
	}
	// default is 41 time / 10 group / 12 seq bits, time-group-seq.
	const units, group, seq = 1000, 3, 7
	id := uint64(units)<<22 | group<<12 | seq
	got, err := Decode("default", id)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := layout.Parts{
		Time:  time.UnixMilli(def.EpochMs + units).UTC(),
		Group: group,
		Seq:   seq,
		Tick:  units<<12 | seq,
	}
	if got != want {
		t.Errorf("Decode(default, %d) = %+v, want %+v", id, got, want)
	}
	if l := def.Decode(id); got != l {
		t.Errorf("Decode(default, %d) = %+v, layout's Decode = %+v", id, got, l)
	}
	if back := def.ID(got.Tick, got.Group); back != id {
		t.Errorf("ID(Decode(%d)) = %d", id, back)
	}

	if _, err := Decode("nope", 1); !errors.Is(err, layout.ErrUnknownPreset) {
		t.Errorf("Decode(nope, 1): err = %v, want ErrUnknownPreset", err)
	}
	// A 128-bit layout's IDs are not a uint64, and a 64-bit one's not text.
	if p, err := Decode("uuidv7", id); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("Decode(uuidv7, %d) = %+v, %v; want ErrWrongWidth", id, p, err)
	}
	if p, err := DecodeWide("default", "01ARYZ6S41TSV4RRFFQ69G5FAV"); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("DecodeWide(default, a ULID) = %+v, %v; want ErrWrongWidth", p, err)
	}
	// The ULID spec's example, and RFC 9562's UUIDv7 (without hyphens).
	for spec, text := range map[string]string{"ulid": "01ARYZ6S41TSV4RRFFQ69G5FAV", "uuidv7": "017f22e279b07cc398c4dc0c0c07398f"} {
		want := map[string]int64{"ulid": 1469918176385, "uuidv7": 1645557742000}[spec]
		if p, err := DecodeWide(spec, text); err != nil || p.Time.UnixMilli() != want {
			t.Errorf("DecodeWide(%s, %s) = %+v, %v; want time %d ms", spec, text, p, err, want)
		}
	}
	if _, err := DecodeWide("uuidv7", "550e8400-e29b-41d4-a716-446655440000"); !errors.Is(err, layout.ErrNotUUIDv7) {
		t.Errorf("DecodeWide of a UUIDv4: %v, want ErrNotUUIDv7", err)
	}
}

func TestClose(t *testing.T) {
	f := &fakeSeq{next: counter()}
	addr := mustSequencer(t, f)
	ctx := testCtx(t, 5*time.Second)
	tests := []struct {
		name   string
		before func(t *testing.T, c *Client) // runs before Close
	}{
		{"never used", func(*testing.T, *Client) {}},
		{"after a call", func(t *testing.T, c *Client) { mustNextN(ctx, t, c, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, []string{addr})
			tt.before(t, c)
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			calls := f.nextCalls.Load()
			ids, err := c.NextN(ctx, 1)
			if !errors.Is(err, ErrClosed) || ids != nil {
				t.Fatalf("NextN after Close = %v, %v; want nil, ErrClosed", ids, err)
			}
			if _, _, err := c.Layout(ctx); !errors.Is(err, ErrClosed) {
				t.Errorf("Layout after Close: err = %v, want ErrClosed", err)
			}
			if got := f.nextCalls.Load(); got != calls {
				t.Errorf("NextN after Close reached the server")
			}
			if err := c.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	addrs := []string{"127.0.0.1:1"}
	for name, opt := range map[string]Option{
		"zero min backoff":     WithBackoff(0, 10*time.Millisecond),
		"negative min backoff": WithBackoff(-time.Millisecond, 10*time.Millisecond),
		"max below min":        WithBackoff(time.Second, time.Millisecond),
		"zero attempt timeout": WithAttemptTimeout(0),
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := New(addrs, opt); !errors.Is(err, ErrBadOption) {
				t.Fatalf("New = %v, %v; want ErrBadOption", c, err)
			}
		})
	}
}

// TestRemoveIsDoneWhenARetryFindsTheMemberGone: the first attempt removes
// the member but its answer is lost (Unavailable); the retry finds it no
// member (NotFound), which is what was asked. NotFound on a first attempt
// is an error: the id was no member.
func TestRemoveIsDoneWhenARetryFindsTheMemberGone(t *testing.T) {
	var mu sync.Mutex
	members := map[string]bool{"n2": true}
	lost := true
	a := &fakeAdmin{remove: func(_ context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		if !members[id] {
			return status.Errorf(codes.NotFound, "unknown node: %q is not a member", id)
		}
		delete(members, id)
		if lost {
			lost = false
			return status.Error(codes.Unavailable, "leadership lost while committing")
		}
		return nil
	}}
	c := mustNew(t, []string{mustAdmin(t, a)})
	if err := c.Remove(testCtx(t, 10*time.Second), "n2"); err != nil {
		t.Fatalf("Remove after a lost answer: %v, want done", err)
	}
	if got := a.calls.Load(); got != 2 {
		t.Fatalf("%d attempts, want 2", got)
	}
	if err := c.Remove(testCtx(t, 10*time.Second), "n9"); status.Code(err) != codes.NotFound {
		t.Fatalf("Remove of a non-member: %v, want NotFound", err)
	}
}
