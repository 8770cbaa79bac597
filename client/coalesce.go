package client

import (
	"context"

	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxCoalesced caps the IDs one coalesced request asks for, well under the
// server's default maximum per request.
const maxCoalesced = 10_000

// coalescer groups concurrent calls into shared requests.
//
// Why sharing keeps the order: every call in a request was made before the
// request was sent, and completes after its reply, so the calls of one
// request are concurrent with each other and owe each other no order; each
// gets a contiguous part of the reply, which is contiguous in the
// cluster's order; and each part is checked against the floor its own call
// took when it started, exactly as an unshared call is.
type coalescer struct {
	c           *Client
	maxInFlight int
	ticks       bool // asks for ticks of a 128-bit layout (api.TicksKey)

	mu       sync.Mutex
	queue    []*waiter
	inFlight int
}

// waiter is one call waiting for its part of a shared request.
type waiter struct {
	n     int
	floor uint64
	ctx   context.Context
	done  chan struct{}
	ids   []uint64
	err   error
}

func (co *coalescer) nextN(ctx context.Context, n int, floor uint64) ([]uint64, error) {
	w := &waiter{n: n, floor: floor, ctx: ctx, done: make(chan struct{})}
	co.mu.Lock()
	co.queue = append(co.queue, w)
	co.sendLocked()
	co.mu.Unlock()
	select {
	case <-w.done:
		return w.ids, w.err
	case <-ctx.Done():
		return nil, ctx.Err() // its IDs, if they come, are a gap
	}
}

// sendLocked starts requests for queued calls while fewer than maxInFlight
// are out.
func (co *coalescer) sendLocked() {
	for co.inFlight < co.maxInFlight && len(co.queue) > 0 {
		total, i := 0, 0
		for i < len(co.queue) && (i == 0 || total+co.queue[i].n <= maxCoalesced) {
			total += co.queue[i].n
			i++
		}
		batch := co.queue[:i:i]
		co.queue = co.queue[i:]
		co.inFlight++
		go co.send(batch, total)
	}
}

func (co *coalescer) send(batch []*waiter, total int) {
	ctx, cancel := batchContext(batch)
	ids, err := co.c.fetch(ctx, total, co.ticks)
	cancel()
	if status.Code(err) == codes.InvalidArgument && len(batch) > 1 {
		// The shared count is more than the server allows (its
		// --max-count may be below maxCoalesced): ask for each alone.
		for _, w := range batch {
			ids, err := co.c.fetch(w.ctx, w.n, co.ticks)
			if err == nil {
				ids, err = co.c.accept(ids, w.floor)
			}
			w.ids, w.err = ids, err
			close(w.done)
		}
		co.finish()
		return
	}
	off := 0
	for _, w := range batch {
		if err != nil {
			w.err = err
		} else {
			w.ids, w.err = co.c.accept(ids[off:off+w.n:off+w.n], w.floor)
		}
		off += w.n
		close(w.done)
	}
	co.finish()
}

// finish ends one request and starts the next if calls are waiting.
func (co *coalescer) finish() {
	co.mu.Lock()
	co.inFlight--
	co.sendLocked()
	co.mu.Unlock()
}

// batchContext lasts as long as the most patient call of the batch wants:
// until the latest deadline, or without one if any call has none. It ends
// early once every call has given up.
func batchContext(batch []*waiter) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, w := range batch {
		d, ok := w.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	deadline := latest
	if deadline.IsZero() {
		deadline = time.Now().Add(100 * 365 * 24 * time.Hour) // none
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	stop := make(chan struct{})
	go func() {
		for _, w := range batch {
			select {
			case <-w.ctx.Done():
			case <-stop:
				return
			}
		}
		cancel()
	}()
	return ctx, func() { close(stop); cancel() }
}
