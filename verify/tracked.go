package verify

// The tracked workload (issue 24): clients that reserve IDs and settle
// each reservation one way or another, and readers that ask every node
// for the settled mark W, all recorded in the history's settled-order
// calls, which history.CheckSettled checks. The IDs Reserve hands out go
// into the ID history too, where they must be unique and in real-time
// order with every Next.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// Shape of a tracked client's reservations: a few IDs each, with TTLs
// short enough that the ones left to expire, or completed late, expire
// several times in one fault's window.
const (
	trackedMaxCount = 4
	minTTL, maxTTL  = 2 * time.Second, 5 * time.Second
	// settleDelay bounds the time a writer takes to commit before it
	// completes or abandons in time.
	settleDelay = 200 * time.Millisecond
	// lateBy is how far past its TTL a late writer completes: enough
	// that the leader's expiry has committed, unless a leader change
	// gave the reservation its TTL again.
	lateBy = time.Second
	// readPause spaces one reader's reads of W, which each cost the
	// leader a round of confirmation when nothing else commits.
	readPause = 10 * time.Millisecond
)

// TrackedCounts are what the tracked clients and the readers of W saw.
// How each reservation ended is as its writer heard it; the checker
// judges every answer against the reads of W (history.CheckSettled).
type TrackedCounts struct {
	// Reserved counts the reservations handed out.
	Reserved int64 `json:"reserved"`
	// Completed counts Completes in time answered OK; Abandoned, Abandons
	// answered ABANDONED; Extended, Extends answered OK.
	Completed int64 `json:"completed"`
	Abandoned int64 `json:"abandoned"`
	Extended  int64 `json:"extended"`
	// LeftToExpire counts reservations their writer walked away from.
	LeftToExpire int64 `json:"left_to_expire"`
	// LateExpired and LateCompleted count the Completes made past the
	// TTL: answered expired, as they should be, or OK, which is right
	// only if a leader change gave the reservation its TTL again and no
	// W above it had been read (the checker decides).
	LateExpired   int64 `json:"late_expired"`
	LateCompleted int64 `json:"late_completed"`
	// Expired counts every answer that said a reservation had expired
	// (late Completes included): the expiries the writers saw.
	Expired int64 `json:"expired"`
	// Undecided counts Completes, Abandons and Extends whose effect is
	// unknown (a timeout through a fault).
	Undecided int64 `json:"undecided"`
	// WrongFate counts answers that name a fate no call of the writer
	// could have led to (a Complete answered abandoned, an Abandon
	// answered completed), and Lost answers that the cluster knows no
	// reservation it handed out: each fails the run.
	WrongFate int64 `json:"wrong_fate"`
	Lost      int64 `json:"lost"`
	// Reads counts the reads of W answered.
	Reads int64 `json:"reads"`
}

// Failures is how many answers broke what a writer may be told.
func (c TrackedCounts) Failures() int64 { return c.WrongFate + c.Lost }

// trackedCounters is TrackedCounts as the clients count it.
type trackedCounters struct {
	reserved, completed, abandoned, extended, leftToExpire atomic.Int64
	lateExpired, lateCompleted, expired, undecided         atomic.Int64
	wrongFate, lost, reads                                 atomic.Int64
}

func (t *trackedCounters) counts() TrackedCounts {
	return TrackedCounts{
		Reserved: t.reserved.Load(), Completed: t.completed.Load(), Abandoned: t.abandoned.Load(),
		Extended: t.extended.Load(), LeftToExpire: t.leftToExpire.Load(),
		LateExpired: t.lateExpired.Load(), LateCompleted: t.lateCompleted.Load(), Expired: t.expired.Load(),
		Undecided: t.undecided.Load(), WrongFate: t.wrongFate.Load(), Lost: t.lost.Load(), Reads: t.reads.Load(),
	}
}

// reserveFunc reserves n IDs for ttl and returns the handle with the IDs
// as the history records them (ticks and text under a 128-bit layout).
type reserveFunc func(ctx context.Context, n int, ttl time.Duration) (handle string, ids []uint64, rendered []string, err error)

// clientReserve is the reserveFunc of c under layout l.
func clientReserve(c *client.Client, l layout.Layout) reserveFunc {
	return func(ctx context.Context, n int, ttl time.Duration) (string, []uint64, []string, error) {
		if !l.Wide() {
			r, err := c.Reserve(ctx, n, ttl)
			return r.Handle, r.IDs, nil, err
		}
		var handle string
		var ids [][16]byte
		var err error
		if l.Format == layout.FormatULID {
			var u []layout.ULID
			handle, u, err = c.ReserveULIDs(ctx, n, ttl)
			ids, err = as16(u, err)
		} else {
			var u []layout.UUID
			handle, u, err = c.ReserveUUIDs(ctx, n, ttl)
			ids, err = as16(u, err)
		}
		if err != nil {
			return "", nil, nil, err
		}
		ticks, rendered, err := ticksOf(l, ids)
		return handle, ticks, rendered, err
	}
}

// handleOf reads handle and checks that it names the reservation of
// ids: the checker compares W with the handle's ticks, which must be
// the IDs'. A handle that does not is a bad answer.
func handleOf(handle string, ids []uint64, l layout.Layout) (api.Handle, error) {
	h, err := api.ParseHandle(handle)
	if err != nil {
		return h, fmt.Errorf("%w: %w", client.ErrBadResponse, err)
	}
	first := uint64(0)
	if len(ids) > 0 {
		first = ids[0] // a tick under a 128-bit layout
		if !l.Wide() {
			first = l.Tick(ids[0])
		}
	}
	if h.Count != uint64(len(ids)) || h.First != first {
		return h, fmt.Errorf("%w: handle %s for %d IDs from tick %d", client.ErrBadResponse, handle, len(ids), first)
	}
	return h, nil
}

// tracker is one tracked client: it reserves, then completes, abandons,
// extends, completes late, or walks away, and records every call.
type tracker struct {
	w       *Workload
	id      int
	rng     *rand.Rand
	c       *client.Client
	reserve reserveFunc
	lay     layout.Layout
}

// spawnTracked starts a tracked client on c, recorded as client id.
func (w *Workload) spawnTracked(id int, c *client.Client, l layout.Layout) {
	t := &tracker{w: w, id: id, rng: rand.New(rand.NewPCG(uint64(id), 24)), c: c, reserve: clientReserve(c, l), lay: l}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer c.Close()
		for !w.stopped() {
			t.round()
		}
	}()
}

// round makes one reservation and settles it one of the ways a writer
// may.
func (t *tracker) round() {
	ttl := minTTL + time.Duration(t.rng.Int64N(int64(maxTTL-minTTL)))
	h, handle, ok := t.reserveOne(1+t.rng.IntN(trackedMaxCount), ttl)
	if !ok {
		t.w.pause(time.Duration(t.rng.IntN(20)) * time.Millisecond)
		return
	}
	n := &t.w.trackedCounts
	switch k := t.rng.IntN(20); {
	case k < 8:
		if t.w.pause(time.Duration(t.rng.Int64N(int64(settleDelay)))) {
			t.complete(h, handle, false)
		}
	case k < 11:
		if t.w.pause(time.Duration(t.rng.Int64N(int64(settleDelay)))) {
			t.abandon(h, handle)
		}
	case k < 13:
		t.extendThenComplete(h, handle, ttl)
	case k < 16:
		if t.w.pause(ttl + lateBy) {
			t.complete(h, handle, true)
		}
	default:
		n.leftToExpire.Add(1)
	}
}

// reserveOne reserves count IDs for ttl, recorded in both histories.
func (t *tracker) reserveOne(count int, ttl time.Duration) (api.Handle, string, bool) {
	var h api.Handle
	var handle string
	p := t.w.rec.BeginSettle(t.id, history.CallReserve, 0, 0)
	c := history.Caller{Rec: t.w.rec, Tally: &t.w.trackedTally, Client: t.id, Judge: judge}
	end, err := t.w.call(c, func() ([]uint64, []string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		var ids []uint64
		var rendered []string
		var err error
		if handle, ids, rendered, err = t.reserve(ctx, count, ttl); err != nil {
			return nil, nil, err
		}
		if h, err = handleOf(handle, ids, t.lay); err != nil {
			return nil, nil, err
		}
		return ids, rendered, nil
	})
	if end != history.Answered {
		settleEnded(p, end, err)
		return h, "", false
	}
	p.Reserved(h.First, h.Count)
	t.w.trackedCounts.reserved.Add(1)
	return h, handle, true
}

// settleEnded records how a settled-order call that did not answer as
// asked ended.
func settleEnded(p history.SettlePending, end history.Ending, err error) {
	if end == history.Refused {
		p.Fail(err)
		return
	}
	p.Unknown(err)
}

// complete completes the reservation, late or in time, and counts how
// it went.
func (t *tracker) complete(h api.Handle, handle string, late bool) {
	n := &t.w.trackedCounts
	err := t.decide(history.CallComplete, h, func(ctx context.Context) error { return t.c.Complete(ctx, handle) })
	switch {
	case err == nil && late:
		n.lateCompleted.Add(1)
	case err == nil:
		n.completed.Add(1)
	case errors.Is(err, client.ErrExpired):
		n.expired.Add(1)
		if late {
			n.lateExpired.Add(1)
		}
	default:
		t.miss(err, client.ErrAbandoned)
	}
}

// abandon abandons the reservation and counts how it went.
func (t *tracker) abandon(h api.Handle, handle string) {
	n := &t.w.trackedCounts
	var fate api.Fate
	err := t.decide(history.CallAbandon, h, func(ctx context.Context) error {
		var err error
		fate, err = t.c.Abandon(ctx, handle)
		return err
	})
	switch {
	case err == nil && fate == api.Fate_FATE_EXPIRED:
		n.expired.Add(1)
	case err == nil:
		n.abandoned.Add(1)
	default:
		t.miss(err, nil)
	}
}

// extendThenComplete extends the reservation past its first TTL and
// completes it after that TTL, as a long write does.
func (t *tracker) extendThenComplete(h api.Handle, handle string, ttl time.Duration) {
	if !t.w.pause(ttl * 6 / 10) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := t.c.Extend(ctx, handle, ttl)
	cancel()
	switch {
	case err == nil:
		t.w.trackedCounts.extended.Add(1)
	case errors.Is(err, client.ErrExpired):
		t.w.trackedCounts.expired.Add(1)
		return
	default:
		t.miss(err, client.ErrAbandoned)
		return
	}
	if t.w.pause(ttl * 6 / 10) {
		t.complete(h, handle, false)
	}
}

// decide makes a Complete or Abandon through do, recorded as call.
func (t *tracker) decide(call history.SettleCall, h api.Handle, do func(context.Context) error) error {
	p := t.w.rec.BeginSettle(t.id, call, h.First, h.Count)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	err := do(ctx)
	cancel()
	if err == nil {
		p.OK()
		return nil
	}
	settleEnded(p, judge(err), err)
	return err
}

// miss counts a call that did not settle as asked and did not expire:
// unknown, or a fate the writer could not have led to (wrong, which this
// writer never asked for; an answer of a fate not asked for, which the
// client withholds as a bad response), or a reservation the cluster
// lost.
func (t *tracker) miss(err, wrong error) {
	n := &t.w.trackedCounts
	switch {
	case wrong != nil && errors.Is(err, wrong), completedAnswer(err), errors.Is(err, client.ErrBadResponse):
		n.wrongFate.Add(1)
	case status.Code(err) == codes.NotFound:
		n.lost.Add(1)
	default:
		n.undecided.Add(1)
	}
}

// completedAnswer reports whether err is the cluster's refusal of a
// reservation already completed: only its own writer completes one.
func completedAnswer(err error) bool {
	return status.Code(err) == codes.FailedPrecondition && strings.Contains(status.Convert(err).Message(), "already completed")
}

// spawnReader starts a reader of W on one node, recorded as client id:
// bare unary Watermark calls, no client floor and no failover, so a
// node's answer that goes down reaches the history as it was sent.
func (w *Workload) spawnReader(id int, seq api.SequencerClient, closeFn func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer closeFn()
		for w.pause(readPause) {
			w.readMark(id, seq)
		}
	}()
}

// readMark reads W once from seq, recorded as client id.
func (w *Workload) readMark(id int, seq api.SequencerClient) {
	p := w.rec.BeginSettle(id, history.CallWatermark, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	resp, err := seq.Watermark(ctx, &api.WatermarkRequest{})
	cancel()
	if err != nil {
		settleEnded(p, judge(err), err)
		return
	}
	p.Mark(resp.WatermarkTick)
	w.trackedCounts.reads.Add(1)
}

// stopped reports whether Stop was called.
func (w *Workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// pause waits d, or less if Stop is called; it reports whether d passed.
func (w *Workload) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stop:
		return false
	case <-t.C:
		return true
	}
}

// TrackedCounts returns what the tracked clients and readers saw so far.
func (w *Workload) TrackedCounts() TrackedCounts { return w.trackedCounts.counts() }
