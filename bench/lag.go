package bench

// The watermark-lag target: how soon a watcher hears that W passed a
// reservation once its writer completed it. One writer, one reservation
// open at a time and nothing else open (the run first checks that W
// passes a completed reservation at all), so W moves in the very entry
// that completes each one; a second client watches W (WatchWatermark),
// as a reader of an event store would.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/seed-e8569b35/ordo/client"
)

// settleWait bounds how long a completed reservation may take to show up
// in the watcher's W before the call fails.
const settleWait = 5 * time.Second

// Lag is what the watermark-lag target measured, over its successful
// calls. Each call reserves one ID, extends the reservation once (a
// single Raft commit through the settle loop, timed as Commit), completes
// it, and waits until the watcher sees W pass the ID.
type Lag struct {
	Samples int `json:"samples"`
	// AfterReturn is from Complete returning to the watcher seeing W pass
	// the ID; negative when the watcher heard first (W moves in the entry
	// that completes the reservation, before the leader answers).
	AfterReturnP50 time.Duration `json:"after_return_p50"`
	AfterReturnP99 time.Duration `json:"after_return_p99"`
	// AfterCall is from Complete being called to the watcher seeing W
	// pass the ID: the commit of the completion and the watch stream.
	AfterCallP50 time.Duration `json:"after_call_p50"`
	AfterCallP99 time.Duration `json:"after_call_p99"`
	// Commit is one Extend as the writer saw it: one batched Raft commit
	// and the round trip to the leader.
	CommitP50 time.Duration `json:"commit_p50"`
	CommitP99 time.Duration `json:"commit_p99"`
}

// String is the human summary.
func (l Lag) String() string {
	return fmt.Sprintf("watermark lag over %d completions: the watcher saw W pass each ID p50 %s  p99 %s after Complete returned, "+
		"p50 %s  p99 %s after Complete was called; one commit (Extend) p50 %s  p99 %s; after the call, over one commit: p50 %s\n",
		l.Samples, l.AfterReturnP50, l.AfterReturnP99, l.AfterCallP50, l.AfterCallP99, l.CommitP50, l.CommitP99, l.AfterCallP50-l.CommitP50)
}

// lagTarget is the writer and the watcher. Its single caller records each
// call's lag; its IDs are checked as any run's are.
type lagTarget struct {
	writer, reader *client.Client
	seen           *watcher
	stopWatch      context.CancelFunc

	mu                          sync.Mutex
	afterReturn, afterCall, ext []time.Duration
}

func newLagTarget(cfg Config) (*lagTarget, error) {
	writer, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	reader, err := newClient(cfg)
	if err != nil {
		writer.Close()
		return nil, err
	}
	return &lagTarget{writer: writer, reader: reader, seen: newWatcher(), stopWatch: func() {}}, nil
}

// warm starts the watcher and makes one call outside the measurement. It
// fails when W does not pass that call's completed reservation: something
// else holds W back (an open reservation, until it completes or expires),
// and the lag would measure that instead.
func (t *lagTarget) warm(ctx context.Context) error {
	wctx, cancel := context.WithCancel(context.Background())
	t.stopWatch = cancel
	go t.seen.run(wctx, t.reader)
	_, _, err := t.settle(ctx)
	if err != nil {
		return fmt.Errorf("W did not pass a completed reservation (is another reservation open?): %w", err)
	}
	return nil
}

// call reserves, extends and completes one ID, and waits until the
// watcher sees W pass it.
func (t *lagTarget) call(ctx context.Context, _ int) ([]uint64, error) {
	ids, s, err := t.settle(ctx)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.afterReturn = append(t.afterReturn, s.seen.Sub(s.returned))
	t.afterCall = append(t.afterCall, s.seen.Sub(s.called))
	t.ext = append(t.ext, s.ext)
	return ids, nil
}

// settled is when one call's Complete was called and returned, when the
// watcher saw W pass its ID, and how long its Extend took.
type settled struct {
	called, returned, seen time.Time
	ext                    time.Duration
}

// settle is one call: the reservation's calls run to their end, as
// reserveTarget's do; the wait for the watcher ends with ctx.
func (t *lagTarget) settle(ctx context.Context) ([]uint64, settled, error) {
	pctx, cancel := detached(ctx)
	defer cancel()
	var s settled
	r, err := t.writer.Reserve(pctx, 1, reserveTTL)
	if err != nil {
		return nil, s, err
	}
	start := time.Now()
	if err := t.writer.Extend(pctx, r.Handle, reserveTTL); err != nil {
		return nil, s, err
	}
	s.ext = time.Since(start)
	s.called = time.Now()
	if err := t.writer.Complete(pctx, r.Handle); err != nil {
		return nil, s, err
	}
	s.returned = time.Now()
	wctx, cancelWait := context.WithTimeout(ctx, settleWait)
	defer cancelWait()
	id := r.IDs[len(r.IDs)-1]
	s.seen, err = t.seen.passed(wctx, id)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("the watcher did not see W pass ID %d within %s of its Complete", id, settleWait)
	}
	return r.IDs, s, err
}

// lag is the measurement so far.
func (t *lagTarget) lag() *Lag {
	t.mu.Lock()
	defer t.mu.Unlock()
	ret, call, ext := slices.Sorted(slices.Values(t.afterReturn)), slices.Sorted(slices.Values(t.afterCall)), slices.Sorted(slices.Values(t.ext))
	return &Lag{
		Samples:        len(ret),
		AfterReturnP50: percentile(ret, 0.5), AfterReturnP99: percentile(ret, 0.99),
		AfterCallP50: percentile(call, 0.5), AfterCallP99: percentile(call, 0.99),
		CommitP50: percentile(ext, 0.5), CommitP99: percentile(ext, 0.99),
	}
}

func (t *lagTarget) close() {
	t.stopWatch()
	t.writer.Close()
	t.reader.Close()
}

// watcher keeps the times at which a WatchWatermark saw W's ID rise.
type watcher struct {
	mu sync.Mutex
	// rises holds each rise of W's ID, in order, from the first that a
	// waiter may still need.
	rises   []rise
	changed chan struct{} // closed and replaced at each rise
	done    chan struct{} // closed when the watch ended
	err     error         // why, set before done closes
}

type rise struct {
	at time.Time
	id uint64
}

func newWatcher() *watcher {
	return &watcher{changed: make(chan struct{}), done: make(chan struct{})}
}

// run watches W through c until ctx ends.
func (w *watcher) run(ctx context.Context, c *client.Client) {
	err := c.WatchWatermark(ctx, w.see)
	w.err = fmt.Errorf("watermark watch ended: %w", err)
	close(w.done)
}

// see notes m, read at once: the time of a rise is when the client handed
// it over.
func (w *watcher) see(m client.Mark) error {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.rises); n > 0 && w.rises[n-1].id >= m.ID {
		return nil // a heartbeat
	}
	w.rises = append(w.rises, rise{at: now, id: m.ID})
	close(w.changed)
	w.changed = make(chan struct{})
	return nil
}

// passed waits until W's ID is above id and returns when the watcher
// first saw it so. The rises before that one are dropped: the writer's
// IDs only grow.
func (w *watcher) passed(ctx context.Context, id uint64) (time.Time, error) {
	for {
		w.mu.Lock()
		i, _ := slices.BinarySearchFunc(w.rises, id+1, func(r rise, v uint64) int { return cmp.Compare(r.id, v) })
		if i < len(w.rises) {
			at := w.rises[i].at
			w.rises = w.rises[i:]
			w.mu.Unlock()
			return at, nil
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-w.done:
			return time.Time{}, w.err
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}
