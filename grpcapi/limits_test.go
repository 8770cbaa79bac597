package grpcapi

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// TestBoundUnary: a call without a deadline, or with a longer one, gets
// the bound; a shorter deadline is kept.
func TestBoundUnary(t *testing.T) {
	bound := BoundUnary(50 * time.Millisecond)
	left := func(ctx context.Context) time.Duration {
		var got time.Duration
		_, _ = bound(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			d, ok := ctx.Deadline()
			if !ok {
				got = -1
				return nil, nil
			}
			got = time.Until(d)
			return nil, nil
		})
		return got
	}
	if d := left(context.Background()); d < 0 || d > 50*time.Millisecond {
		t.Errorf("no deadline: handler saw %v left, want at most 50ms", d)
	}
	long, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if d := left(long); d < 0 || d > 50*time.Millisecond {
		t.Errorf("an hour: handler saw %v left, want at most 50ms", d)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if d := left(short); d < 0 || d > 10*time.Millisecond {
		t.Errorf("10ms: handler saw %v left, want at most 10ms", d)
	}
}
