package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// Reservation is IDs that Reserve handed out and the cluster tracks until
// they are settled: the settled mark does not pass them until Complete or
// Abandon names the handle, or until they expire.
type Reservation struct {
	// Handle names the reservation in Complete, Abandon and Extend.
	Handle string
	IDs    []uint64
	// TTL is how long the reservation lives unless extended, as the
	// cluster granted it.
	TTL time.Duration
	// Fate is FATE_OPEN, except for a keyed Reserve (WithIdempotencyKey)
	// whose key holds a reservation already: where that one stands now
	// (FATE_COMPLETED, FATE_ABANDONED, FATE_EXPIRED, or FATE_UNSPECIFIED
	// when the cluster no longer knows). Its handle still names it, and
	// Complete answers as for any reservation.
	Fate api.Fate
}

// Mark is the settled mark W: every ID below ID, and every ID whose tick
// is below Tick, was completed, abandoned, expired, or handed out by
// Next. ID is 0 under a 128-bit layout: compare ticks there.
type Mark struct{ ID, Tick uint64 }

// Reserve returns count IDs as NextN does, with every one of its checks,
// and the cluster holds the settled mark below them until Complete or
// Abandon, or until ttl passes (0: the cluster's default). A retry after
// a lost answer may leave an earlier reservation to expire, which only
// holds the mark back for its TTL, unless the call is keyed. 64-bit
// layouts only: see ReserveUUIDs.
//
// Keyed (WithIdempotencyKey, or WithIdempotentRetries), every attempt
// carries the key, and the cluster answers every call with it (same
// caller, count, and TTL when one is named; ttl 0 takes the first's),
// from any node, after any leader change or restart, with the first
// call's reservation: its handle, IDs and TTL as first granted, and its
// Fate now. It opens nothing more, and does not extend it. So a writer
// that crashed after its database write reserves again with its key,
// looks its IDs up, and completes (or abandons) the reservation instead
// of leaving it to expire. Another count or TTL is ErrKeyReused, as is a
// key this caller used for Next. The answer is checked against the floor
// of the call's first attempt, as a keyed NextN's is (ErrReplayBelowFloor).
func (c *Client) Reserve(ctx context.Context, count int, ttl time.Duration) (Reservation, error) {
	if err := c.checkNarrow(); err != nil {
		return Reservation{}, err
	}
	if err := checkCount(count); err != nil {
		return Reservation{}, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return Reservation{}, err
	}
	return c.reserve(ctx, c.defaultTarget(), count, ms, false)
}

// target is the sequence a settled-order call is about, with the floors
// this client keeps for it: of its IDs, and of its settled mark.
type target struct {
	seq      string // "" for the default sequence
	returned *atomic.Uint64
	mark     *atomic.Pointer[Mark]
}

// defaultTarget is the cluster's default sequence.
func (c *Client) defaultTarget() target {
	return target{returned: &c.returned, mark: &c.mark}
}

// ReserveUUIDs is Reserve for a cluster of the uuidv7 layout, rendering
// the ticks it sends as NextUUIDs does.
func (c *Client) ReserveUUIDs(ctx context.Context, count int, ttl time.Duration) (handle string, ids []layout.UUID, err error) {
	return reserveWide[layout.UUID](ctx, c, layout.FormatUUIDv7, count, ttl)
}

// ReserveULIDs is Reserve for a cluster of the ulid layout, rendering the
// ticks it sends as NextULIDs does.
func (c *Client) ReserveULIDs(ctx context.Context, count int, ttl time.Duration) (handle string, ids []layout.ULID, err error) {
	return reserveWide[layout.ULID](ctx, c, layout.FormatULID, count, ttl)
}

// reserveWide reserves count ticks and renders them in format.
func reserveWide[T ~[16]byte](ctx context.Context, c *Client, format layout.Format, count int, ttl time.Duration) (string, []T, error) {
	if err := checkCount(count); err != nil {
		return "", nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return "", nil, err
	}
	w, err := c.wideLayout(ctx, format)
	if err != nil {
		return "", nil, err
	}
	r, err := c.reserve(ctx, c.defaultTarget(), count, ms, true)
	if err != nil {
		return "", nil, err
	}
	ids, err := render[T](w, r.IDs)
	if err != nil {
		return "", nil, err
	}
	return r.Handle, ids, nil
}

// ttlMillis is ttl as a request carries it: 0 for the cluster's default,
// else whole milliseconds rounded up, so that a TTL under a millisecond is
// not taken for the default.
func ttlMillis(ttl time.Duration) (uint32, error) {
	if ttl < 0 || ttl > math.MaxUint32*time.Millisecond {
		return 0, fmt.Errorf("%w: %s, want 0 (the cluster's default) up to %s", ErrBadTTL, ttl, math.MaxUint32*time.Millisecond)
	}
	return uint32((ttl + time.Millisecond - 1) / time.Millisecond), nil
}

// reserve asks for a reservation of count IDs of sequence to, or ticks
// when ticks is set, with NextN's retries and checks: the IDs must be
// above every one of the sequence returned before the call began, and a
// named sequence's answer must name it (a node too old for named
// reservations answers the default sequence's).
func (c *Client) reserve(ctx context.Context, to target, count int, ttlMs uint32, ticks bool) (Reservation, error) {
	ctx, k, err := c.keyed(ctx)
	if err != nil {
		return Reservation{}, err
	}
	floor := to.returned.Load()
	var resp *api.ReserveResponse
	req := &api.ReserveRequest{Count: uint32(count), TtlMs: ttlMs, IdempotencyKey: k.key, Sequence: to.seq}
	err = c.retry(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = api.NewSequencerClient(conn).Reserve(api.WithTicks(ctx, ticks), req, opts...)
		return err
	})
	if err != nil {
		return Reservation{}, keyErr(err)
	}
	if resp.Handle == "" {
		return Reservation{}, fmt.Errorf("%w: a reservation without a handle", ErrBadResponse)
	}
	if resp.Sequence != to.seq || to.seq != "" && !handleOf(resp.Handle, to.seq) {
		// A reservation of another sequence: left to expire.
		return Reservation{}, fmt.Errorf("%w: a Reserve of %s answered with handle %q of sequence %q: the node serves no named reservations (upgrade every node)",
			ErrBadResponse, seqName(to.seq), resp.Handle, resp.Sequence)
	}
	ids, err := expand(resp.Runs, count)
	if err != nil {
		return Reservation{}, err
	}
	c.noteLeader(resp.LeaderAddr)
	if k.key != "" {
		ids, err = acceptKeyed(to.returned, ids, floor, k)
	} else {
		ids, err = acceptAbove(to.returned, ids, floor)
	}
	if err != nil {
		return Reservation{}, err
	}
	fate := resp.Fate
	if fate == api.Fate_FATE_UNSPECIFIED && k.key == "" {
		fate = api.Fate_FATE_OPEN // a leader of an Ordo before keys names no fate
	}
	return Reservation{Handle: resp.Handle, IDs: ids, TTL: time.Duration(resp.TtlMs) * time.Millisecond, Fate: fate}, nil
}

// Complete settles the reservation handle names once its IDs are
// published. It is idempotent, so it is retried as NextN is. A
// reservation that expired or was abandoned first returns ErrExpired or
// ErrAbandoned (errors.Is), wrapping the cluster's FailedPrecondition:
// the mark may have passed its IDs, so they must not be published.
func (c *Client) Complete(ctx context.Context, handle string) error {
	return c.complete(ctx, "", handle)
}

func (c *Client) complete(ctx context.Context, seq, handle string) error {
	_, err := c.settle(ctx, []api.Fate{api.Fate_FATE_COMPLETED}, func(ctx context.Context, s api.SequencerClient, opts ...grpc.CallOption) (*api.SettleResponse, error) {
		return s.Complete(ctx, &api.HandleRequest{Handle: handle, Sequence: seq}, opts...)
	})
	return err
}

// Abandon settles the reservation handle names without publishing its
// IDs, and returns its fate: FATE_ABANDONED, or FATE_EXPIRED when it had
// expired. It is idempotent; a completed reservation is the cluster's
// FailedPrecondition.
func (c *Client) Abandon(ctx context.Context, handle string) (api.Fate, error) {
	return c.abandon(ctx, "", handle)
}

func (c *Client) abandon(ctx context.Context, seq, handle string) (api.Fate, error) {
	return c.settle(ctx, []api.Fate{api.Fate_FATE_ABANDONED, api.Fate_FATE_EXPIRED}, func(ctx context.Context, s api.SequencerClient, opts ...grpc.CallOption) (*api.SettleResponse, error) {
		return s.Abandon(ctx, &api.HandleRequest{Handle: handle, Sequence: seq}, opts...)
	})
}

// Extend gives the open reservation handle names ttl more, counted from
// now on the leader (0: the cluster's default). Expired or abandoned, it
// returns ErrExpired or ErrAbandoned as Complete does.
func (c *Client) Extend(ctx context.Context, handle string, ttl time.Duration) error {
	return c.extend(ctx, "", handle, ttl)
}

func (c *Client) extend(ctx context.Context, seq, handle string, ttl time.Duration) error {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	_, err = c.settle(ctx, []api.Fate{api.Fate_FATE_OPEN}, func(ctx context.Context, s api.SequencerClient, opts ...grpc.CallOption) (*api.SettleResponse, error) {
		return s.Extend(ctx, &api.ExtendRequest{Handle: handle, TtlMs: ms, Sequence: seq}, opts...)
	})
	return err
}

// settleCall is one of the calls that settle or extend a reservation.
type settleCall func(ctx context.Context, s api.SequencerClient, opts ...grpc.CallOption) (*api.SettleResponse, error)

// settle makes ask with NextN's retries, safe since each such call is
// idempotent, and checks that the fate answered is one of want: a caller
// told "completed" publishes its IDs, so an answer that says otherwise is
// the server's bug, not a success.
func (c *Client) settle(ctx context.Context, want []api.Fate, ask settleCall) (api.Fate, error) {
	var resp *api.SettleResponse
	err := c.retry(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = ask(ctx, api.NewSequencerClient(conn), opts...)
		return err
	})
	if err != nil {
		return api.Fate_FATE_UNSPECIFIED, fateErr(err)
	}
	if !slices.Contains(want, resp.Fate) {
		return resp.Fate, fmt.Errorf("%w: fate %s, want one of %v", ErrBadResponse, resp.Fate, want)
	}
	return resp.Fate, nil
}

// fateErr marks the cluster's refusal of a reservation that expired or
// was abandoned with ErrExpired or ErrAbandoned. The status stays wrapped,
// so status.Code still reads it.
func fateErr(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return err
	}
	switch msg := st.Message(); {
	case strings.Contains(msg, "reservation expired"):
		return fmt.Errorf("%w: %w", ErrExpired, err)
	case strings.Contains(msg, "reservation abandoned"):
		return fmt.Errorf("%w: %w", ErrAbandoned, err)
	}
	return err
}

// Watermark returns the settled mark, read by the leader after every call
// that completed before this one began; never a mark below one this
// client reported before (a new leader may briefly answer lower).
func (c *Client) Watermark(ctx context.Context) (Mark, error) {
	return c.watermark(ctx, c.defaultTarget())
}

func (c *Client) watermark(ctx context.Context, to target) (Mark, error) {
	var resp *api.WatermarkResponse
	err := c.retry(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = api.NewSequencerClient(conn).Watermark(ctx, &api.WatermarkRequest{Sequence: to.seq}, opts...)
		return err
	})
	if err != nil {
		return Mark{}, err
	}
	return c.raiseMark(to, resp)
}

// raiseMark raises to's floor of marks to an answer's and returns the
// floor: the answer's mark, or the highest reported before when the
// answer is lower. ID and tick are kept together, as the cluster sent
// them. An answer for another sequence than to's is refused: a node too
// old for named reservations answers the default sequence's W.
func (c *Client) raiseMark(to target, resp *api.WatermarkResponse) (Mark, error) {
	if resp.Sequence != to.seq {
		return Mark{}, fmt.Errorf("%w: the settled mark of %s answered as sequence %q's: the node serves no named reservations (upgrade every node)",
			ErrBadResponse, seqName(to.seq), resp.Sequence)
	}
	c.noteLeader(resp.LeaderAddr)
	m := &Mark{ID: resp.Watermark, Tick: resp.WatermarkTick}
	for {
		floor := to.mark.Load()
		if floor != nil && floor.Tick >= m.Tick {
			return *floor, nil
		}
		if to.mark.CompareAndSwap(floor, m) {
			return *m, nil
		}
	}
}

// handleOf reports whether handle names a reservation of named sequence
// seq. (A default sequence's handle is opaque to clients.)
func handleOf(handle, seq string) bool {
	h, err := api.ParseHandle(handle)
	return err == nil && h.Seq == seq
}

// seqName names a sequence in an error: "" is the default one.
func seqName(seq string) string {
	if seq == "" {
		return "the default sequence"
	}
	return fmt.Sprintf("sequence %q", seq)
}

// watchHeartbeat is how often WatchWatermark asks to hear the mark while
// it does not move. A stream silent for this and the attempt timeout is
// given up: a paused or cut-off leader keeps its connection open.
const watchHeartbeat = time.Second

// WatchWatermark calls fn with the settled mark each time the cluster
// sends it: when it moves, and every second while it does not, so fn sees
// that the stream lives. It follows the leader and reopens the stream
// after a failover; fn never sees a mark below one reported before (a
// lower answer is replaced by the highest). It returns ctx.Err() when ctx
// ends, and fn's error when fn returns one.
func (c *Client) WatchWatermark(ctx context.Context, fn func(Mark) error) error {
	return c.watchWatermark(ctx, c.defaultTarget(), fn)
}

func (c *Client) watchWatermark(ctx context.Context, to target, fn func(Mark) error) error {
	w := &watch{c: c, to: to, fn: fn}
	for {
		err := c.follow(ctx, w.stream)
		switch {
		case w.stop != nil:
			return w.stop
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return err
		}
		// A stream that served broke (w.stream left its node): open the
		// next afresh, backoff reset and a leader hint followed at once,
		// but not in a tight loop against a node that breaks every one.
		if pause(ctx, c.minBackoff) != nil {
			return ctx.Err()
		}
	}
}

// watch is one WatchWatermark call.
type watch struct {
	c  *Client
	to target
	fn func(Mark) error
	// stop is fn's error, which ends the watch.
	stop error
}

// stream runs one watermark stream at addr. It returns an error for
// follow to retry when the stream fails before its first mark, and nil
// when fn stopped the watch or the stream broke after serving (having
// left addr as the leader guess, taking the hint the stream's trailer
// names): WatchWatermark then starts afresh.
func (w *watch) stream(ctx context.Context, addr string, conn *grpc.ClientConn, md *sent) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := w.c.attemptTimeout + watchHeartbeat
	var stalled atomic.Bool
	watchdog := time.AfterFunc(idle, func() { stalled.Store(true); cancel() })
	defer watchdog.Stop()
	st, err := api.NewSequencerClient(conn).WatchWatermark(sctx, &api.WatchRequest{HeartbeatMs: uint32(watchHeartbeat.Milliseconds()), Sequence: w.to.seq})
	if err != nil {
		return err
	}
	for served := false; ; served = true {
		resp, err := st.Recv()
		if err != nil {
			md.trailer = st.Trailer() // set once Recv failed
			if stalled.Load() {
				err = fmt.Errorf("%w: no watermark from %s within %s", errStalled, addr, idle)
			}
			if served && ctx.Err() == nil && retryable(err) {
				w.c.leave(addr, md.trailer)
				return nil
			}
			return err
		}
		if !served {
			// The header comes before the first mark: a mark is used only
			// if it names the client's cluster.
			if md.header, err = st.Header(); err != nil {
				return err
			}
			if err := w.c.pin(addr, md.header); err != nil {
				return err
			}
		}
		watchdog.Stop() // the time fn takes is not the stream's silence
		m, err := w.c.raiseMark(w.to, resp)
		if err != nil {
			w.stop = err
			return nil
		}
		if w.stop = w.fn(m); w.stop != nil {
			return nil
		}
		watchdog.Reset(idle)
	}
}

// errSettled ends the watch of WaitSettled once the mark passed its ID.
var errSettled = errors.New("settled")

// WaitSettled returns once the settled mark is above id: every ID up to id
// was completed, abandoned, expired, or handed out by Next, so a reader
// that sees IDs in order misses none below the mark. It returns the first
// such mark (the highest reported before, if already above id), or
// ctx.Err() when ctx ends first. 64-bit layouts only: under a 128-bit
// layout a mark's ID is 0, so watch ticks with WatchWatermark instead.
func (c *Client) WaitSettled(ctx context.Context, id uint64) (Mark, error) {
	if err := c.checkNarrow(); err != nil {
		return Mark{}, err
	}
	return c.waitSettled(ctx, c.defaultTarget(), id)
}

func (c *Client) waitSettled(ctx context.Context, to target, id uint64) (Mark, error) {
	if m := to.mark.Load(); m != nil && m.ID > id {
		return *m, nil
	}
	var settled Mark
	err := c.watchWatermark(ctx, to, func(m Mark) error {
		if m.ID == 0 && m.Tick > 0 {
			// Only a 128-bit layout answers a tick without an ID:
			// no ID of this call's kind will ever pass it.
			return fmt.Errorf("the cluster makes 128-bit IDs (its mark carries only a tick): compare Mark.Tick with the IDs' ticks: %w", layout.ErrWrongWidth)
		}
		if m.ID <= id {
			return nil
		}
		settled = m
		return errSettled
	})
	if !errors.Is(err, errSettled) {
		return Mark{}, err
	}
	return settled, nil
}
