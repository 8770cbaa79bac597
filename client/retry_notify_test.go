package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WithRetryNotify hears of the attempts the client retries, with why:
// here every node is down, on the stream (Next) and on unary calls
// (Layout's), until the call's deadline; the call then fails leading with
// the last attempt's cause (GaveUp).
func TestRetryNotifyHearsEveryRetriedFailure(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	var mu sync.Mutex
	var heard []string
	c, err := New([]string{dead}, WithRetryNotify(func(addr string, err error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, addr+": "+err.Error())
	}), WithAttemptTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, call := range map[string]func(context.Context) error{
		"Next":   func(ctx context.Context) error { _, err := c.Next(ctx); return err },
		"Layout": func(ctx context.Context) error { _, _, err := c.Layout(ctx); return err },
	} {
		mu.Lock()
		heard = nil
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := call(ctx)
		cancel()
		if err == nil {
			t.Fatalf("%s against a dead node: no error", name)
		}
		// It leads with the cause and still is the deadline's, and the
		// last attempt's code.
		if !strings.HasPrefix(err.Error(), dead+": cannot connect") || !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.Unavailable {
			t.Errorf("%s gave up with %q (code %s, deadline %v): want it to lead with %s's cause", name, err, status.Code(err), errors.Is(err, context.DeadlineExceeded), dead)
		}
		mu.Lock()
		n, first := len(heard), strings.Join(heard, "; ")
		mu.Unlock()
		if n == 0 {
			t.Errorf("%s: the notify heard of no retried attempt (call failed with %v)", name, err)
		} else if !strings.Contains(first, dead+": ") || !strings.Contains(first, "connect") {
			t.Errorf("%s: heard %q, which says neither the address nor why", name, first)
		}
	}
}
