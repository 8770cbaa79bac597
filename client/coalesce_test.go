package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// TestCoalescingSharesRequests holds the first request at the server while
// 50 more calls arrive: they must go out together in one request, and each
// must get its own contiguous, distinct IDs.
func TestCoalescingSharesRequests(t *testing.T) {
	release := make(chan struct{})
	first := make(chan struct{})
	var once sync.Once
	count := counter()
	var sizes []uint32
	var mu sync.Mutex
	f := &fakeSeq{next: func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		mu.Lock()
		sizes = append(sizes, req.Count)
		mu.Unlock()
		held := false
		once.Do(func() { held = true })
		if held {
			close(first)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return count(ctx, req)
	}}
	c := mustNew(t, []string{mustSequencer(t, f)}, WithCoalescing(1))
	ctx := testCtx(t, 10*time.Second)

	results := make(chan []uint64, 51)
	errs := make(chan error, 51)
	call := func(n int) {
		ids, err := c.NextN(ctx, n)
		if err != nil {
			errs <- err
			return
		}
		results <- ids
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); call(1) }()
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("first request never reached the server")
	}
	for i := range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); call(1 + i%3) }()
	}
	// The 50 calls are queued behind the held request; wait until they are.
	mustQueued(t, c, 50)
	close(release)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatalf("a call failed: %v", err)
	}
	seen := map[uint64]bool{}
	calls := 0
	for ids := range results {
		calls++
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d handed to two calls", id)
			}
			seen[id] = true
			if i > 0 && id != ids[i-1]+1 {
				t.Fatalf("a call's IDs are not contiguous: %v", ids)
			}
		}
	}
	if calls != 51 {
		t.Fatalf("%d calls returned, want 51", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 {
		t.Fatalf("requests of sizes %v: want the held one and ONE shared request", sizes)
	}
}

// TestCoalescingChecksEachFloor: a shared reply whose IDs are not above what
// the client already returned is refused to every call in it.
func TestCoalescingChecksEachFloor(t *testing.T) {
	f := &fakeSeq{next: func(context.Context, *api.NextRequest) (*api.NextResponse, error) {
		return &api.NextResponse{Runs: []*api.IDRun{{First: 10, Count: 1, Step: 1}}}, nil
	}}
	c := mustNew(t, []string{mustSequencer(t, f)}, WithCoalescing(2))
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.NextN(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if ids, err := c.NextN(ctx, 1); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("a repeated ID: %v, %v; want ErrBadResponse", ids, err)
	}
}

// TestCoalescingGivesUpWithItsContext: a call whose context ends returns at
// once even while its shared request is still out.
func TestCoalescingGivesUpWithItsContext(t *testing.T) {
	f := &fakeSeq{next: func(ctx context.Context, _ *api.NextRequest) (*api.NextResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	c := mustNew(t, []string{mustSequencer(t, f)}, WithCoalescing(1))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.NextN(ctx, 1); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("NextN: %v, want DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("NextN did not return when its context ended")
	}
}

func TestCoalescingBadOption(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := New([]string{"127.0.0.1:1"}, WithCoalescing(n)); !errors.Is(err, ErrBadOption) {
			t.Errorf("WithCoalescing(%d): %v, want ErrBadOption", n, err)
		}
	}
}

// BenchmarkCoalescedNext measures the client's batching path against a
// server that answers at once: the cost per ID of queueing, one shared
// request and handing out the parts.
func BenchmarkCoalescedNext(b *testing.B) {
	addr := mustSequencer(b, &fakeSeq{next: counter()})
	c := mustClient(b, []string{addr}, WithCoalescing(2))
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Next(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestCoalescingSplitsWhatTheServerRefuses: a shared request larger than
// the server allows is asked again call by call.
func TestCoalescingSplitsWhatTheServerRefuses(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	count := counter()
	f := &fakeSeq{next: func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		if held.CompareAndSwap(false, true) {
			<-release // hold the first request so that the next ones share
		}
		if req.Count > 3 {
			return nil, status.Error(codes.InvalidArgument, "count above the maximum")
		}
		return count(ctx, req)
	}}
	c := mustNew(t, []string{mustSequencer(t, f)}, WithCoalescing(1))
	ctx := testCtx(t, 10*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.NextN(ctx, 2)
			errs <- err
		}()
	}
	mustQueued(t, c, 3)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed: %v", err)
		}
	}
}

// mustQueued waits until n calls wait in c's coalescer, or fails.
func mustQueued(t *testing.T, c *Client, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.coalescer.mu.Lock()
		queued := len(c.coalescer.queue)
		c.coalescer.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", queued, n)
		}
	}
}
