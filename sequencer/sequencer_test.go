package sequencer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/layout"
)

// seqTestWait bounds every wait in these tests. It is a deadline, never a
// way to let something happen.
const seqTestWait = 10 * time.Second

// testReserveWindow is the server's default reserve window
// (server.DefaultReserveWindow), for tests that need no other.
const testReserveWindow = 3 * time.Second

// seqTestStart is the fake clock's starting time, well inside the default
// layout's range.
var seqTestStart = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ---- fake Log --------------------------------------------------------------

// seqFakeLog is a Log that keeps its own high-water mark with max() and
// answers like the FSM: Prev is the mark before, HighWater after, Term the
// current term. It can be told to fail, to change term, or to block calls
// until the test releases them.
type seqFakeLog struct {
	mu       sync.Mutex
	hw, term uint64
	// reserve and confirm are the calls of Reserve and Confirm.
	reserve, confirm gatedCalls
	upTos            []uint64
	// lease is what Confirm reports the voters promised when asked;
	// leaseAsks counts the rounds that asked.
	lease     time.Duration
	leaseAsks int
	// numbered numbers rounds and releases, as package leadership's
	// Confirmer does, once a round is past the gate; leaseRounds are the
	// numbers of the rounds that asked for a lease.
	numbered    uint64
	leaseRounds []uint64
	// clockHigh is the highest clock reading Reserve was given, and
	// markClock the reading that came with the current hw, as the FSM
	// keeps them.
	clockHigh, markClock uint64
	// unblock is closed at test cleanup so that no call stays blocked.
	unblock chan struct{}
}

// gatedCalls are the calls of one method of seqFakeLog: how many came,
// the error they return, and the gate a test can hold them at.
type gatedCalls struct {
	n   int
	err error
	// gate, when non-nil, holds each call until it receives a value (one
	// call per send) or the gate is closed.
	gate chan struct{}
	// entered gets each call's 1-based number as it enters.
	entered chan int
}

func newSeqFakeLog(term uint64) *seqFakeLog {
	return &seqFakeLog{
		term:    term,
		reserve: gatedCalls{entered: make(chan int, 1<<16)},
		confirm: gatedCalls{entered: make(chan int, 1<<16)},
		unblock: make(chan struct{}),
	}
}

// enter counts a call of g, tells g.entered and waits at g's gate; then
// it takes f.mu and returns holding it, unless it returns an error (ctx's,
// or g.err).
func (f *seqFakeLog) enter(ctx context.Context, g *gatedCalls) error {
	f.mu.Lock()
	g.n++
	n, gate := g.n, g.gate
	f.mu.Unlock()
	notify(g.entered, n)
	if err := f.wait(ctx, gate); err != nil {
		return err
	}
	f.mu.Lock()
	if err := g.err; err != nil {
		f.mu.Unlock()
		return err
	}
	return nil
}

func (f *seqFakeLog) wait(ctx context.Context, gate chan struct{}) error {
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-f.unblock:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func notify(ch chan int, n int) {
	select {
	case ch <- n:
	default:
	}
}

func (f *seqFakeLog) Reserve(ctx context.Context, upTo, clock uint64) (Reservation, error) {
	f.set(func(f *seqFakeLog) { f.upTos = append(f.upTos, upTo) })
	if err := f.enter(ctx, &f.reserve); err != nil {
		return Reservation{}, err
	}
	defer f.mu.Unlock()
	r := Reservation{Prev: f.hw, PrevClock: f.markClock, Term: f.term}
	if upTo > f.hw {
		f.hw, f.markClock = upTo, clock
	}
	f.clockHigh = max(f.clockHigh, clock)
	r.HighWater, r.ClockHigh = f.hw, f.clockHigh
	return r, nil
}

func (f *seqFakeLog) Confirm(ctx context.Context, askLease bool) (Confirmation, error) {
	if err := f.enter(ctx, &f.confirm); err != nil {
		return Confirmation{}, err
	}
	defer f.mu.Unlock()
	c := Confirmation{Term: f.term}
	f.numbered++
	if askLease {
		f.leaseRounds = append(f.leaseRounds, f.numbered)
		f.leaseAsks++
		c.Lease = f.lease
	}
	return c, nil
}

// releaseLease numbers a release of the voters' promises after the rounds
// numbered so far, as leadership.Confirmer.Release does, and returns its
// number.
func (f *seqFakeLog) releaseLease() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.numbered++
	return f.numbered
}

func (f *seqFakeLog) set(fn func(f *seqFakeLog)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *seqFakeLog) highWater() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hw
}

func (f *seqFakeLog) calls() (reserve, confirm int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reserve.n, f.confirm.n
}

func (f *seqFakeLog) lastUpTo() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.upTos[len(f.upTos)-1]
}

// blockReserve and blockConfirm install a fresh gate and return it.
func (f *seqFakeLog) blockReserve() chan struct{} {
	g := make(chan struct{})
	f.set(func(f *seqFakeLog) { f.reserve.gate = g })
	return g
}

func (f *seqFakeLog) blockConfirm() chan struct{} {
	g := make(chan struct{})
	f.set(func(f *seqFakeLog) { f.confirm.gate = g })
	return g
}

// release lets exactly one call blocked on gate through.
func release(t testing.TB, gate chan struct{}) {
	t.Helper()
	select {
	case gate <- struct{}{}:
	case <-time.After(seqTestWait):
		t.Fatal("timed out releasing a blocked call: nothing is waiting on the gate")
	}
}

// entered waits for the call numbered want to enter (via ch).
func entered(t testing.TB, ch chan int, what string, want int) {
	t.Helper()
	deadline := time.After(seqTestWait)
	for {
		select {
		case n := <-ch:
			if n == want {
				return
			}
			if n > want {
				t.Fatalf("%s call %d entered, expected call %d", what, n, want)
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s call %d", what, want)
		}
	}
}

// ---- fake clock ------------------------------------------------------------

type seqFakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *seqFakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *seqFakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *seqFakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ---- harness ---------------------------------------------------------------

type seqHarness struct {
	t      *testing.T
	l      layout.Layout
	s      *Sequencer
	log    *seqFakeLog
	clock  *seqFakeClock
	window time.Duration
	w      uint64 // window in ticks
}

// newSeqHarness runs one confirmation round at a time, so tests can tell
// which round a request waits for; TestSequencerPipelinesRounds covers
// more.
func newSeqHarness(t *testing.T, l layout.Layout, window time.Duration, start time.Time) *seqHarness {
	return newSeqHarnessRounds(t, l, window, start, 1)
}

func newSeqHarnessRounds(t *testing.T, l layout.Layout, window time.Duration, start time.Time, rounds int) *seqHarness {
	t.Helper()
	h := &seqHarness{
		t:      t,
		l:      l,
		log:    newSeqFakeLog(1),
		clock:  &seqFakeClock{now: start},
		window: window,
		w:      l.TicksIn(window),
	}
	h.s = newSequencer(l, window, h.clock.Now, h.log, hclog.NewNullLogger(), rounds, Lease{})
	// Cleanups run last-in first-out: unblock the fake before Close, which
	// waits for the confirmation loop.
	t.Cleanup(h.s.Close)
	t.Cleanup(func() { close(h.log.unblock) })
	return h
}

func newDefaultHarness(t *testing.T, window time.Duration) *seqHarness {
	t.Helper()
	l := layout.MustPreset("default")
	return newSeqHarness(t, l, window, seqTestStart)
}

func seqCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	t.Cleanup(cancel)
	return ctx
}

func (h *seqHarness) lead(hw uint64) {
	h.t.Helper()
	if err := h.s.Lead(seqCtx(h.t), hw); err != nil {
		h.t.Fatalf("Lead: %v", err)
	}
	if !h.s.Serving() {
		h.t.Fatal("not serving after Lead")
	}
}

// mustNotServe fails the test unless the sequencer has stopped serving
// and refuses a request with ErrNotLeader; when names the moment.
func (h *seqHarness) mustNotServe(when string) {
	h.t.Helper()
	if h.s.Serving() {
		h.t.Fatalf("serving %s", when)
	}
	if _, err := h.s.Next(seqCtx(h.t), 1); !errors.Is(err, ErrNotLeader) {
		h.t.Fatalf("Next %s: %v, want ErrNotLeader", when, err)
	}
}

func (h *seqHarness) now() uint64 { return h.l.TickAt(h.clock.Now()) }

// next calls Next and checks the invariants every answer must satisfy:
// the right count, at or after the clock, and below a committed
// reservation.
func (h *seqHarness) next(n uint64) Block {
	h.t.Helper()
	now := h.now()
	b, err := h.s.Next(seqCtx(h.t), n)
	if err != nil {
		h.t.Fatalf("Next(%d): %v", n, err)
	}
	h.checkBlock(b, n, now)
	return b
}

func (h *seqHarness) checkBlock(b Block, n, nowBefore uint64) {
	h.t.Helper()
	if b.Count != n {
		h.t.Fatalf("Next(%d) returned %d ticks", n, b.Count)
	}
	if b.First < nowBefore {
		h.t.Fatalf("Next(%d).First = %d is behind the clock tick %d", n, b.First, nowBefore)
	}
	if hw := h.log.highWater(); b.First+b.Count > hw {
		h.t.Fatalf("Next(%d) = [%d, %d) reaches past the committed high-water mark %d", n, b.First, b.First+b.Count, hw)
	}
}

type nextResult struct {
	b   Block
	err error
}

// goNext runs Next in a goroutine; the result arrives on the channel.
func (h *seqHarness) goNext(n uint64) <-chan nextResult {
	ch := make(chan nextResult, 1)
	ctx := seqCtx(h.t)
	go func() {
		b, err := h.s.Next(ctx, n)
		ch <- nextResult{b, err}
	}()
	return ch
}

func await(t testing.TB, ch <-chan nextResult) nextResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(seqTestWait):
		t.Fatal("timed out waiting for Next to return")
		return nextResult{}
	}
}

// notReturned checks that Next has not answered yet.
func notReturned(t testing.TB, ch <-chan nextResult, why string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Next returned %+v, %v before %s", r.b, r.err, why)
	default:
	}
}

func (h *seqHarness) assigned() uint64 {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.next
}

// nextTick is the tick the next request would start at with the clock
// where it is now.
func (h *seqHarness) nextTick() uint64 {
	return max(h.assigned(), h.now())
}

func (h *seqHarness) limit() uint64 {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.limit
}

// slack is the sequencer's slack in ticks.
func (h *seqHarness) slack() uint64 { return h.s.slack }

// stretch is how far past what it had to cover the last reservation
// reached.
func (h *seqHarness) stretch() uint64 {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.stretch
}

// lowCount is how many ticks one request must take, with the clock
// standing still, for the reservation to run low (less than half the
// stretch left past it) and a renewal to start.
func (h *seqHarness) lowCount() uint64 {
	return h.limit() - h.nextTick() - h.stretch()/2 + 1
}

// renewing returns the done channel of the renewal in flight, or nil.
func (h *seqHarness) renewing() chan struct{} {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.renewDone
}

// waitRenewal waits until the renewal in flight, if any, has finished.
func (h *seqHarness) waitRenewal() {
	h.t.Helper()
	d := h.renewing()
	if d == nil {
		return
	}
	select {
	case <-d:
	case <-time.After(seqTestWait):
		h.t.Fatal("timed out waiting for the renewal to finish")
	}
}

// ---- tests -----------------------------------------------------------------

func TestSequencerNotLeader(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.mustNotServe("before Lead")
	h.lead(0)
	h.next(1)
	h.s.StepDown()
	h.mustNotServe("after StepDown")
	if _, c := h.log.calls(); c != 1 {
		t.Errorf("%d Confirm calls, want 1 (only the request while leading)", c)
	}
}

func TestSequencerBadCount(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	if _, err := h.s.Next(seqCtx(t), 0); !errors.Is(err, ErrBadCount) {
		t.Fatalf("Next(0) before Lead: %v, want ErrBadCount", err)
	}
	h.lead(0)
	before := h.assigned()
	if _, err := h.s.Next(seqCtx(t), 0); !errors.Is(err, ErrBadCount) {
		t.Fatalf("Next(0): %v, want ErrBadCount", err)
	}
	if h.assigned() != before {
		t.Error("Next(0) consumed ticks")
	}
	if _, c := h.log.calls(); c != 0 {
		t.Errorf("Next(0) caused %d Confirm calls", c)
	}
}

func TestSequencerLeadFails(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	boom := errors.New("no quorum")
	h.log.set(func(f *seqFakeLog) { f.reserve.err = boom })
	if err := h.s.Lead(seqCtx(t), 0); !errors.Is(err, boom) {
		t.Fatalf("Lead: %v, want %v", err, boom)
	}
	h.mustNotServe("after a failed Lead")
}

func TestSequencerLeadStartsAtPrev(t *testing.T) {
	t.Run("mark ahead of clock", func(t *testing.T) {
		h := newDefaultHarness(t, time.Second)
		// An earlier leader reserved 5 s ahead of the clock.
		earlier := h.now() + h.l.TicksIn(5*time.Second)
		h.log.set(func(f *seqFakeLog) { f.hw = earlier })
		hw := h.now() + 7 // the mark this node read, older than the FSM's
		h.lead(hw)
		if got, want := h.log.lastUpTo(), max(h.now()+h.w, hw+h.slack()); got != want {
			t.Errorf("first reservation up to %d, want max(now+window, hw+slack) = %d", got, want)
		}
		// That reservation reached no further than the FSM's mark: the
		// first request waits for one that covers it, a slack beyond.
		b := h.next(1)
		if b.First != earlier {
			t.Errorf("first tick %d, want the reservation's Prev %d", b.First, earlier)
		}
		if b.First < hw {
			t.Errorf("first tick %d below the high-water mark %d", b.First, hw)
		}
		if got, want := h.log.lastUpTo(), earlier+1+h.slack(); got != want {
			t.Errorf("renewal up to %d, want need+slack = %d", got, want)
		}
	})
	t.Run("mark ahead of clock reaches a slack past it", func(t *testing.T) {
		h := newDefaultHarness(t, time.Second)
		earlier := h.now() + h.w // a failover: the last leader's window
		h.log.set(func(f *seqFakeLog) { f.hw = earlier })
		h.lead(earlier)
		if got, want := h.limit(), earlier+h.slack(); got != want {
			t.Errorf("limit %d, want mark+slack = %d, not a window past the mark", got, want)
		}
		if b := h.next(1); b.First != earlier {
			t.Errorf("first tick %d, want the mark %d", b.First, earlier)
		}
		if r, _ := h.log.calls(); r != 1 {
			t.Errorf("%d Reserve calls, want 1: the slack serves the first requests", r)
		}
	})
	t.Run("mark behind clock", func(t *testing.T) {
		h := newDefaultHarness(t, time.Second)
		h.log.set(func(f *seqFakeLog) { f.hw = 1000 })
		h.lead(1000)
		if got, want := h.log.lastUpTo(), h.now()+h.w; got != want {
			t.Errorf("first reservation up to %d, want now+window = %d", got, want)
		}
		if b := h.next(1); b.First != h.now() {
			t.Errorf("first tick %d, want the clock's tick %d", b.First, h.now())
		}
	})
	t.Run("clock before epoch never gives tick 0", func(t *testing.T) {
		l := layout.MustPreset("default")
		h := newSeqHarness(t, l, time.Second, time.UnixMilli(l.EpochMs).Add(-time.Hour))
		if h.now() != 0 {
			t.Fatalf("clock tick %d, want 0", h.now())
		}
		h.lead(0)
		b := h.next(3)
		if b.First == 0 {
			t.Fatal("tick 0 handed out")
		}
		if b2 := h.next(1); b2.First != b.First+3 {
			t.Errorf("tick %d, want %d", b2.First, b.First+3)
		}
	})
	t.Run("new term restarts at new Prev", func(t *testing.T) {
		h := newDefaultHarness(t, time.Second)
		h.lead(0)
		h.next(10)
		h.s.StepDown()
		// Another leader, whose clock was a minute ahead, served meanwhile
		// and recorded its reading.
		other := h.log.highWater() + h.l.TicksIn(time.Minute)
		h.log.set(func(f *seqFakeLog) { f.hw, f.term, f.clockHigh, f.markClock = other, 2, other-h.w, other-h.w })
		h.lead(other)
		if b := h.next(1); b.First != other {
			t.Errorf("first tick in term 2 = %d, want %d", b.First, other)
		}
	})
}

func TestSequencerContiguous(t *testing.T) {
	h := newDefaultHarness(t, 10*time.Millisecond)
	h.lead(0)
	first := h.next(1)
	end := first.First + 1
	for i, n := range []uint64{1, 2, 3, 100, 4096, 1, 10_000, 7, 40_000, 1, 123_457, 1} {
		b := h.next(n)
		if b.First != end {
			t.Fatalf("call %d: Next(%d).First = %d, want %d (contiguous)", i, n, b.First, end)
		}
		end = b.First + b.Count
	}
}

func TestSequencerFollowsClockForward(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	prev := h.next(5)
	for _, d := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 400 * time.Millisecond, 2 * time.Second, time.Hour, 24 * time.Hour} {
		h.clock.Add(d)
		b := h.next(3)
		if b.First <= prev.First+prev.Count-1 {
			t.Fatalf("after +%s: tick %d not above previous %d", d, b.First, prev.First+prev.Count-1)
		}
		if b.First != h.now() {
			t.Errorf("after +%s: tick %d, want the clock's tick %d", d, b.First, h.now())
		}
		prev = b
	}
}

func TestSequencerClockBackwards(t *testing.T) {
	h := newDefaultHarness(t, 10*time.Millisecond)
	h.lead(0)
	b := h.next(1)
	end := b.First + 1
	h.clock.Add(-time.Hour)
	reserves, _ := h.log.calls()
	// The fake clock never moves again: a sequencer that waited for the
	// clock to catch up would hang until the context deadline.
	const calls = 300
	for i := range calls {
		n := uint64(1 + i%500)
		b := h.next(n)
		if b.First != end {
			t.Fatalf("call %d: tick %d, want %d (last+1 with the clock behind)", i, b.First, end)
		}
		end += n
	}
	if r, _ := h.log.calls(); r <= reserves {
		t.Errorf("no renewal while the clock was behind (Reserve calls %d → %d)", reserves, r)
	}
	h.waitRenewal()
	if up := h.log.lastUpTo(); up < end {
		t.Errorf("renewal with the clock behind reserved up to %d, below the next tick %d", up, end)
	}
}

func TestSequencerLargeRequestWaitsForRenewal(t *testing.T) {
	h := newDefaultHarness(t, time.Millisecond) // 4096 ticks
	h.lead(0)
	start := h.nextTick()
	if h.limit()-start != h.w {
		t.Fatalf("reserved %d ticks, want a window of %d", h.limit()-start, h.w)
	}
	gate := h.log.blockReserve()
	const n = 100_000
	ch := h.goNext(n)
	entered(t, h.log.reserve.entered, "Reserve", 2)
	if up := h.log.lastUpTo(); up < start+n {
		t.Fatalf("renewal up to %d does not cover the request [%d, %d)", up, start, start+n)
	}
	notReturned(t, ch, "its reservation was committed")
	release(t, gate)
	r := await(t, ch)
	if r.err != nil {
		t.Fatalf("Next(%d): %v", n, r.err)
	}
	h.checkBlock(r.b, n, h.now())
	if r.b.First != start {
		t.Errorf("First = %d, want %d", r.b.First, start)
	}
	// The request's reservation reached a slack beyond what it needed, so
	// no second commit follows at once.
	if got, want := h.limit(), max(h.now()+h.w, start+n+h.slack()); got != want {
		t.Errorf("limit %d, want %d", got, want)
	}
	h.next(1)
	if res, _ := h.log.calls(); res != 2 {
		t.Errorf("%d Reserve calls, want 2", res)
	}
}

// A renewal starts when the clock eats into the reservation (less than
// half a window left past it) and reaches a window past the clock.
func TestSequencerRenewalFollowsTheClock(t *testing.T) {
	h := newDefaultHarness(t, 10*time.Millisecond)
	h.lead(0)
	h.clock.Add(5 * time.Millisecond) // exactly half a window left
	h.next(1)
	if h.renewing() != nil {
		t.Fatal("renewal started with half a window left")
	}
	h.clock.Add(time.Millisecond)
	h.next(1)
	entered(t, h.log.reserve.entered, "Reserve", 2)
	h.waitRenewal()
	if got, want := h.log.lastUpTo(), h.now()+h.w; got != want {
		t.Errorf("renewal up to %d, want now+window = %d", got, want)
	}
	if h.limit() != h.now()+h.w {
		t.Errorf("limit %d after renewal, want %d", h.limit(), h.now()+h.w)
	}
}

// With the clock standing still, demand alone runs the reservation low: a
// renewal starts when less than half the stretch is left past the next
// tick, and reaches a stretch past it that starts at the slack and grows
// with demand (four times the ticks handed out since the last renewal),
// up to a window: reservations ahead of the clock stay short unless
// demand needs them long.
func TestSequencerRenewalFollowsDemand(t *testing.T) {
	h := newDefaultHarness(t, 10*time.Millisecond)
	h.lead(0)
	if h.stretch() != h.slack() {
		t.Fatalf("stretch %d after Lead, want the slack %d", h.stretch(), h.slack())
	}
	var handed uint64
	for i := range 8 {
		n := h.lowCount()
		h.next(n - 1) // exactly half the stretch left
		if h.renewing() != nil {
			t.Fatalf("round %d: renewal started with half the stretch left", i)
		}
		if r, _ := h.log.calls(); r != i+1 {
			t.Fatalf("round %d: %d Reserve calls, want %d", i, r, i+1)
		}
		h.next(1)
		handed += n
		entered(t, h.log.reserve.entered, "Reserve", i+2)
		h.waitRenewal()
		end := h.nextTick()
		want := min(max(h.slack(), 4*handed), h.w)
		if got := h.stretch(); got != want {
			t.Errorf("round %d: stretch %d after %d ticks handed out, want %d", i, got, handed, want)
		}
		if got := h.log.lastUpTo(); got != end+want {
			t.Errorf("round %d: renewal up to %d, want next+stretch = %d", i, got, end+want)
		}
		handed = 0
	}
	if h.stretch() != h.w {
		t.Errorf("stretch %d after eight renewals under demand, want it grown to the window %d", h.stretch(), h.w)
	}
}

// Right after a change of leader the next tick is a window ahead of the
// clock; a burst of large requests then takes a few commits while the
// stretch grows, not one commit per slack.
func TestSequencerBurstAfterFailover(t *testing.T) {
	h := newDefaultHarness(t, 3*time.Second)
	mark := h.now() + h.w // the last leader's window
	h.log.set(func(f *seqFakeLog) { f.hw = mark })
	h.lead(mark)
	const requests, count = 64, 20_000
	for range requests {
		h.next(count)
	}
	r, _ := h.log.calls()
	perSlack := requests * count / (h.slack() / 2)
	if r > 8 {
		t.Errorf("%d Reserve calls for %d requests of %d ticks (a fixed slack would take about %d), want at most 8", r, requests, count, perSlack)
	}
	t.Logf("%d reservations for %d ticks; the slack is %d ticks", r, requests*count, h.slack())
}

func TestSequencerHotPathDuringBlockedRenewal(t *testing.T) {
	h := newDefaultHarness(t, 10*time.Millisecond)
	h.lead(0)
	start := h.nextTick()
	oldLimit := h.limit()
	gate := h.log.blockReserve()
	n := h.lowCount()
	h.next(n) // starts a renewal, which blocks
	entered(t, h.log.reserve.entered, "Reserve", 2)
	// The remaining reservation keeps serving while the renewal hangs.
	end := start + n
	for end+100 <= oldLimit {
		b := h.next(100)
		if b.First != end {
			t.Fatalf("tick %d, want %d", b.First, end)
		}
		end += 100
	}
	if r, _ := h.log.calls(); r != 2 {
		t.Fatalf("%d Reserve calls while one renewal was in flight, want 2", r)
	}
	// Past the old limit a request must wait for the renewal.
	ch := h.goNext(200)
	notReturned(t, ch, "the renewal finished")
	release(t, gate)
	r := await(t, ch)
	if r.err != nil {
		t.Fatalf("Next after renewal: %v", r.err)
	}
	h.checkBlock(r.b, 200, h.now())
	if r.b.First != end {
		t.Errorf("tick %d, want %d", r.b.First, end)
	}
	if h.limit() <= oldLimit {
		t.Errorf("limit %d not raised above %d", h.limit(), oldLimit)
	}
}

func TestSequencerRenewalErrorRetries(t *testing.T) {
	h := newDefaultHarness(t, time.Millisecond)
	h.lead(0)
	h.log.set(func(f *seqFakeLog) { f.reserve.err = errors.New("apply timeout") })
	ch := h.goNext(3 * h.w)
	entered(t, h.log.reserve.entered, "Reserve", 2)
	entered(t, h.log.reserve.entered, "Reserve", 3) // retried
	if !h.s.Serving() {
		t.Fatal("a failed reservation stopped serving")
	}
	notReturned(t, ch, "a reservation succeeded")
	h.log.set(func(f *seqFakeLog) { f.reserve.err = nil })
	if r := await(t, ch); r.err != nil {
		t.Fatalf("Next after the log recovered: %v", r.err)
	} else {
		h.checkBlock(r.b, 3*h.w, 0)
	}
}

func TestSequencerRenewalInOtherTermStops(t *testing.T) {
	h := newDefaultHarness(t, 10*time.Millisecond)
	h.lead(0)
	gate := h.log.blockReserve()
	h.next(h.lowCount())
	entered(t, h.log.reserve.entered, "Reserve", 2)
	// This request waits for the renewal (or, if it arrives late, finds
	// the sequencer already stopped): either way it must not be served.
	ch := h.goNext(2 * h.w)
	// Leadership was lost and won again while the renewal was in flight.
	h.log.set(func(f *seqFakeLog) { f.term = 2 })
	release(t, gate)
	if r := await(t, ch); !errors.Is(r.err, ErrNotLeader) {
		t.Fatalf("Next after a renewal in another term: %+v, %v; want ErrNotLeader", r.b, r.err)
	}
	h.mustNotServe("after a renewal committed in another term")
}

// twoRoundsInFlight leads on a harness that allows two rounds, and holds
// both at gate: r0 waits for the first, r1 for the second.
func twoRoundsInFlight(t *testing.T) (h *seqHarness, gate chan struct{}, r0, r1 <-chan nextResult) {
	t.Helper()
	h = newSeqHarnessRounds(t, layout.MustPreset("default"), time.Second, seqTestStart, 2)
	h.lead(0)
	gate, r0 = h.holdFirstRound()
	r1 = h.goNext(1)
	entered(t, h.log.confirm.entered, "Confirm", 2)
	return h, gate, r0, r1
}

// holdFirstRound blocks confirmations, starts a request of one tick and
// waits until its round is in Confirm; it returns the gate that releases
// rounds and the request's result.
func (h *seqHarness) holdFirstRound() (chan struct{}, <-chan nextResult) {
	h.t.Helper()
	gate := h.log.blockConfirm()
	r0 := h.goNext(1)
	entered(h.t, h.log.confirm.entered, "Confirm", 1)
	return gate, r0
}

// fillBatch starts k requests of one tick each and waits until all of them
// were assigned, so they sit in the batch for the next confirmation.
func (h *seqHarness) fillBatch(k int) []<-chan nextResult {
	h.t.Helper()
	before := h.assigned()
	chs := make([]<-chan nextResult, k)
	for i := range chs {
		chs[i] = h.goNext(1)
	}
	eventually.True(h.t, seqTestWait, fmt.Sprintf("%d requests to be assigned", k), func() bool {
		return h.assigned() == before+uint64(k)
	})
	return chs
}

func TestSequencerConfirmFailure(t *testing.T) {
	faults := []struct {
		name string
		set  func(f *seqFakeLog)
	}{
		{"error", func(f *seqFakeLog) { f.confirm.err = errors.New("leadership lost") }},
		{"other term", func(f *seqFakeLog) { f.term = 2 }},
	}
	for _, fault := range faults {
		t.Run(fault.name+"/own batch", func(t *testing.T) {
			h := newDefaultHarness(t, time.Second)
			h.lead(0)
			gate, r0 := h.holdFirstRound()
			batch := h.fillBatch(10)
			release(t, gate) // confirmation 1 succeeds
			if r := await(t, r0); r.err != nil {
				t.Fatalf("first request: %v", r.err)
			}
			entered(t, h.log.confirm.entered, "Confirm", 2)
			h.log.set(fault.set)
			release(t, gate) // confirmation 2 fails
			for i, ch := range batch {
				if r := await(t, ch); !errors.Is(r.err, ErrNotLeader) {
					t.Errorf("request %d: %+v, %v; want ErrNotLeader", i, r.b, r.err)
				}
			}
			h.mustNotServe("after a failed confirmation")
			if _, c := h.log.calls(); c != 2 {
				t.Errorf("%d Confirm calls, want 2", c)
			}
		})
		t.Run(fault.name+"/waiting batch", func(t *testing.T) {
			h := newDefaultHarness(t, time.Second)
			h.lead(0)
			gate, r0 := h.holdFirstRound()
			batch := h.fillBatch(10)
			h.log.set(fault.set)
			release(t, gate)
			if r := await(t, r0); !errors.Is(r.err, ErrNotLeader) {
				t.Errorf("first request: %+v, %v; want ErrNotLeader", r.b, r.err)
			}
			// Those waiting for the next round fail with it: the node has
			// stepped down, so no round will confirm them.
			for i, ch := range batch {
				if r := await(t, ch); !errors.Is(r.err, ErrNotLeader) {
					t.Errorf("request %d: %+v, %v; want ErrNotLeader", i, r.b, r.err)
				}
			}
			if h.s.Serving() {
				t.Fatal("still serving after a failed confirmation")
			}
			if _, c := h.log.calls(); c != 1 {
				t.Errorf("%d Confirm calls, want 1", c)
			}
		})
	}
}

// TestSequencerStaleRoundKeepsNewPeriod: a node that stepped down after a
// failed round and leads again in the same term keeps serving when a round
// sent before then fails too: that round says nothing about the new
// serving period, whose own rounds confirm it.
func TestSequencerStaleRoundKeepsNewPeriod(t *testing.T) {
	h, gate, r0, r1 := twoRoundsInFlight(t)
	h.log.set(func(f *seqFakeLog) { f.confirm.err = errors.New("no majority answered") })
	release(t, gate) // one of the two rounds fails
	eventually.True(t, seqTestWait, "a step-down after the failed round", func() bool { return !h.s.Serving() })
	h.lead(0)        // the same term: the fake's term stays 1
	release(t, gate) // the other round, from the first period, fails
	for i, ch := range []<-chan nextResult{r0, r1} {
		if r := await(t, ch); !errors.Is(r.err, ErrNotLeader) {
			t.Errorf("request %d of the first period: %+v, %v; want ErrNotLeader", i, r.b, r.err)
		}
	}
	if !h.s.Serving() {
		t.Fatal("a round from the first serving period ended the second")
	}
	h.log.set(func(f *seqFakeLog) { f.confirm.err = nil })
	close(gate)
	h.next(5)
}

// TestSequencerPipelinesRounds: with two rounds allowed, requests that
// arrive while one round is in flight get a round of their own at once;
// those that arrive while both are in flight wait for the next, together.
func TestSequencerPipelinesRounds(t *testing.T) {
	h, gate, r0, r1 := twoRoundsInFlight(t)
	waiting := h.fillBatch(20)
	for _, ch := range waiting {
		notReturned(t, ch, "a third round, with two in flight")
	}
	if _, c := h.log.calls(); c != 2 {
		t.Fatalf("%d Confirm calls with two rounds in flight, want 2", c)
	}
	close(gate) // release every round
	var got []Block
	for _, ch := range append([]<-chan nextResult{r0, r1}, waiting...) {
		r := await(t, ch)
		if r.err != nil {
			t.Fatal(r.err)
		}
		got = append(got, r.b)
	}
	// r0 was assigned before r1, and both before the waiting ones.
	seen := map[uint64]bool{}
	for i, b := range got {
		if seen[b.First] || (i == 1 && b.First <= got[0].First) || (i > 1 && b.First <= got[1].First) {
			t.Fatalf("block %d %v: repeated or out of assignment order (%v)", i, b, got)
		}
		seen[b.First] = true
	}
	if _, c := h.log.calls(); c != 3 {
		t.Errorf("%d Confirm calls, want 3: the 20 waiting requests share one", c)
	}
}

func TestSequencerConfirmBatching(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	gate, r0 := h.holdFirstRound()
	const k = 50
	batch := h.fillBatch(k)
	for _, ch := range batch {
		notReturned(t, ch, "the confirmation that started after it was assigned")
	}
	close(gate) // release this and every later confirmation
	first := await(t, r0)
	if first.err != nil {
		t.Fatalf("first request: %v", first.err)
	}
	seen := map[uint64]bool{first.b.First: true}
	for i, ch := range batch {
		r := await(t, ch)
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		h.checkBlock(r.b, 1, 0)
		if seen[r.b.First] {
			t.Fatalf("tick %d handed out twice", r.b.First)
		}
		seen[r.b.First] = true
	}
	// One confirmation for the first request, exactly one for all 50.
	if _, c := h.log.calls(); c != 2 {
		t.Errorf("%d Confirm calls, want 2", c)
	}
	for i := range uint64(k + 1) {
		if !seen[first.b.First+i] {
			t.Errorf("tick %d missing: the 51 ticks are not contiguous", first.b.First+i)
		}
	}
}

func TestSequencerStepDownFailsWaiting(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	gate, r0 := h.holdFirstRound()
	batch := h.fillBatch(5)
	h.s.StepDown()
	// They fail at once, while the confirmation in flight still hangs.
	for i, ch := range batch {
		if r := await(t, ch); !errors.Is(r.err, ErrNotLeader) {
			t.Errorf("request %d: %+v, %v; want ErrNotLeader", i, r.b, r.err)
		}
	}
	if h.s.Serving() {
		t.Fatal("serving after StepDown")
	}
	close(gate)
	// The request whose round was already in flight is decided by that
	// round (committed in its own term); it must return either way.
	if r := await(t, r0); r.err == nil {
		h.checkBlock(r.b, 1, 0)
	} else if !errors.Is(r.err, ErrNotLeader) {
		t.Errorf("in-flight request: %v", r.err)
	}
	if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Next after StepDown: %v, want ErrNotLeader", err)
	}
}

func TestSequencerLeadFailsPreviousTermBatch(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	gate, r0 := h.holdFirstRound()
	batch := h.fillBatch(3)
	h.log.set(func(f *seqFakeLog) { f.term = 2 })
	h.lead(0) // a new term, without a StepDown in between
	for i, ch := range batch {
		if r := await(t, ch); !errors.Is(r.err, ErrNotLeader) {
			t.Errorf("term-1 request %d: %+v, %v; want ErrNotLeader", i, r.b, r.err)
		}
	}
	close(gate)
	// The term-1 round now commits in term 2: it must not confirm.
	if r := await(t, r0); !errors.Is(r.err, ErrNotLeader) {
		t.Errorf("term-1 in-flight request: %+v, %v; want ErrNotLeader", r.b, r.err)
	}
	// Term 2 itself keeps serving.
	if !h.s.Serving() {
		t.Fatal("a failed term-1 round stopped term 2")
	}
	h.next(1)
}

// A request waiting for a reservation should fail as soon as the sequencer
// steps down, like one waiting for a confirmation does.
func TestSequencerStepDownFailsRequestWaitingForRenewal(t *testing.T) {
	h := newDefaultHarness(t, time.Millisecond)
	h.lead(0)
	h.log.blockReserve()
	ch := h.goNext(3 * h.w)
	entered(t, h.log.reserve.entered, "Reserve", 2)
	h.s.StepDown()
	select {
	case r := <-ch:
		if !errors.Is(r.err, ErrNotLeader) {
			t.Fatalf("Next: %+v, %v; want ErrNotLeader", r.b, r.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("request waiting for a renewal still waits after StepDown")
	}
}

func TestSequencerContextCancelled(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	h.log.blockConfirm()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { _, err := h.s.Next(ctx, 1); ch <- err }()
	entered(t, h.log.confirm.entered, "Confirm", 1)
	cancel()
	select {
	case err := <-ch:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Next: %v, want context.Canceled", err)
		}
	case <-time.After(seqTestWait):
		t.Fatal("Next ignored its context")
	}
}

func TestSequencerTimeExhausted(t *testing.T) {
	def := layout.MustPreset("default")
	// 20 time bits of 1 ms: the field ends about 17.5 minutes after 2024.
	small, err := layout.Parse("custom:epoch=1704067200000,unit=1,bits=20/31/12")
	if err != nil {
		t.Fatal(err)
	}
	lastUnit := func(l layout.Layout) time.Time {
		return time.UnixMilli(l.EpochMs + int64(l.MaxTick()>>l.SeqBits)*l.UnitMs)
	}
	for _, l := range []layout.Layout{def, small} {
		t.Run(l.String(), func(t *testing.T) {
			perUnit := uint64(1) << l.SeqBits

			t.Run("last unit", func(t *testing.T) {
				h := newSeqHarness(t, l, time.Second, lastUnit(l))
				if h.now() != l.MaxTick()+1-perUnit {
					t.Fatalf("clock tick %d, want the last unit's first tick %d", h.now(), l.MaxTick()+1-perUnit)
				}
				h.lead(0)
				// The last unit's ticks are all still there.
				h.next(perUnit - 1)
				b := h.next(1)
				if b.First != l.MaxTick() {
					t.Fatalf("last tick %d, want MaxTick %d", b.First, l.MaxTick())
				}
				_, c := h.log.calls()
				if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrTimeExhausted) {
					t.Fatalf("Next past MaxTick: %v, want ErrTimeExhausted", err)
				}
				if _, c2 := h.log.calls(); c2 != c {
					t.Error("an exhausted request asked for a confirmation")
				}
			})
			t.Run("request crosses the end", func(t *testing.T) {
				h := newSeqHarness(t, l, time.Second, lastUnit(l))
				h.lead(0)
				if _, err := h.s.Next(seqCtx(t), perUnit+1); !errors.Is(err, ErrTimeExhausted) {
					t.Fatalf("Next(%d): %v, want ErrTimeExhausted", perUnit+1, err)
				}
				h.next(perUnit) // nothing was consumed by the refusal
			})
			t.Run("clock past the field", func(t *testing.T) {
				h := newSeqHarness(t, l, time.Second, lastUnit(l).Add(time.Duration(l.UnitMs)*time.Millisecond))
				if h.now() != l.MaxTick()+1 {
					t.Fatalf("clock tick %d, want MaxTick+1", h.now())
				}
				h.lead(0)
				if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrTimeExhausted) {
					t.Fatalf("Next: %v, want ErrTimeExhausted", err)
				}
				h.clock.Add(1000 * time.Hour)
				if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrTimeExhausted) {
					t.Fatalf("Next: %v, want ErrTimeExhausted", err)
				}
			})
		})
	}
	t.Run("count overflows", func(t *testing.T) {
		h := newDefaultHarness(t, time.Second)
		h.lead(0)
		for _, n := range []uint64{math.MaxUint64, math.MaxUint64 - h.now(), def.MaxTick()} {
			if _, err := h.s.Next(seqCtx(t), n); !errors.Is(err, ErrTimeExhausted) {
				t.Errorf("Next(%d): %v, want ErrTimeExhausted", n, err)
			}
		}
		h.next(1)
	})
}

func TestSequencerConcurrent(t *testing.T) {
	const (
		workers = 16
		calls   = 200
	)
	h := newDefaultHarness(t, time.Millisecond) // small window: many renewals
	h.lead(0)
	ctx := seqCtx(t)
	blocks := make([][]Block, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for i := range calls {
				switch {
				case w == 0 && i%50 == 49:
					h.clock.Add(time.Millisecond)
				case w == 1 && i == 100:
					h.clock.Add(-time.Second)
				}
				n := uint64(1 + (w+i)%4)
				b, err := h.s.Next(ctx, n)
				if err != nil {
					errs <- fmt.Errorf("worker %d call %d: %w", w, i, err)
					return
				}
				if b.Count != n {
					errs <- fmt.Errorf("worker %d call %d: %d ticks, want %d", w, i, b.Count, n)
					return
				}
				if i > 0 && b.First <= last {
					errs <- fmt.Errorf("worker %d call %d: tick %d not above its previous %d", w, i, b.First, last)
					return
				}
				if hw := h.log.highWater(); b.First+b.Count > hw {
					errs <- fmt.Errorf("worker %d: ticks up to %d above the committed mark %d", w, b.First+b.Count, hw)
					return
				}
				last = b.First + b.Count - 1
				blocks[w] = append(blocks[w], b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	var all []Block
	for _, bs := range blocks {
		all = append(all, bs...)
	}
	slices.SortFunc(all, func(a, b Block) int {
		switch {
		case a.First < b.First:
			return -1
		case a.First > b.First:
			return 1
		}
		return 0
	})
	for i := 1; i < len(all); i++ {
		if all[i].First < all[i-1].First+all[i-1].Count {
			t.Fatalf("blocks overlap: [%d,+%d) and [%d,+%d)", all[i-1].First, all[i-1].Count, all[i].First, all[i].Count)
		}
	}
	if r, c := h.log.calls(); r < 2 || c < 1 {
		t.Errorf("Reserve calls %d, Confirm calls %d: expected renewals and confirmations", r, c)
	} else {
		t.Logf("%d requests: %d Reserve calls, %d Confirm calls", workers*calls, r, c)
	}
}

// BenchmarkSequencerNext measures the hot path with a log that answers at
// once: assignment, batching and one confirmation per batch.
func BenchmarkSequencerNext(b *testing.B) {
	l := layout.MustPreset("default")
	log := newSeqFakeLog(1)
	s := New(l, testReserveWindow, time.Now, log, hclog.NewNullLogger(), Lease{})
	defer s.Close()
	ctx := context.Background()
	if err := s.Lead(ctx, 0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Next(ctx, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	_, c := log.calls()
	b.ReportMetric(float64(b.N)/float64(max(c, 1)), "req/confirm")
}

// An idle leader renews when the clock eats into its reservation, so the
// next request does not wait for a commit.
func TestSequencerRenewIfLow(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.s.RenewIfLow() // not serving: nothing to renew
	if res, _ := h.log.calls(); res != 0 {
		t.Fatalf("%d Reserve calls before Lead, want 0", res)
	}
	h.lead(0)
	h.s.RenewIfLow() // a full window ahead: nothing to do
	if res, _ := h.log.calls(); res != 1 {
		t.Fatalf("%d Reserve calls with a full window, want 1", res)
	}
	limit := h.limit()
	h.clock.Add(800 * time.Millisecond) // less than half the window left
	h.s.RenewIfLow()
	h.waitRenewal()
	if res, _ := h.log.calls(); res != 2 {
		t.Fatalf("%d Reserve calls after the clock ate the window, want 2", res)
	}
	if h.limit() <= limit {
		t.Fatalf("limit %d did not move past %d", h.limit(), limit)
	}
}

// TestSequencerBoundsTheLead: asking for more than the layout holds moves
// the time field ahead of a clock that stands still, up to maxLead; past
// it, requests are refused with ErrAhead (nothing is handed out) until the
// clock catches up. A clock stepping back is no reason to refuse.
func TestSequencerBoundsTheLead(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	perSecond := h.l.TicksIn(time.Second)
	lead := h.s.maxLead
	if lead != h.l.TicksIn(minMaxLead) {
		t.Fatalf("maxLead %d ticks, want %s", lead, minMaxLead)
	}
	// Fill up to the bound, a second of capacity per call.
	var err error
	for asked := uint64(0); asked <= lead+perSecond; asked += perSecond {
		if _, err = h.s.Next(seqCtx(t), perSecond); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrAhead) {
		t.Fatalf("after %s of IDs asked in no time: %v, want ErrAhead", minMaxLead, err)
	}
	// The request refused began within the bound and ended past it: a
	// request is refused whole, by its last tick. What is left fits.
	last := h.now() + lead
	if h.nextTick()-1 > last {
		t.Fatalf("tick %d handed out, %d past the bound %d", h.nextTick()-1, h.nextTick()-1-last, last)
	}
	if h.nextTick() <= last {
		h.next(last - h.nextTick() + 1)
	}
	before := h.assigned()
	if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrAhead) {
		t.Fatalf("Next(1) past the bound: %v, want ErrAhead", err)
	}
	if h.assigned() != before {
		t.Fatal("a refused request used up ticks")
	}
	h.clock.Add(-time.Hour) // stepping back does not lift or tighten it
	if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrAhead) {
		t.Fatalf("after the clock stepped back: %v, want ErrAhead still", err)
	}
	h.clock.Add(time.Hour + 2*time.Second) // the clock catches up
	h.next(1)
}

// newLeader replaces the harness's sequencer with a fresh one, as on
// another node, that leads in term over the same log: it knows only what
// the log tells it.
func (h *seqHarness) newLeader(term uint64) {
	h.t.Helper()
	h.s.StepDown()
	h.s = newSequencer(h.l, h.window, h.clock.Now, h.log, hclog.NewNullLogger(), 1, Lease{})
	h.t.Cleanup(h.s.Close)
	h.log.set(func(f *seqFakeLog) { f.term = term })
	h.lead(h.log.highWater())
}

// Leaders elected faster than one per window, each answering a request,
// push the time field ahead by at most the slack each (the old rule,
// reserving a window past the inherited mark, pushed it a window each).
func TestSequencerLeaderChangesKeepTheLead(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	h.next(1)
	const elections, step = 30, 10 * time.Millisecond
	for term := uint64(2); term < 2+elections; term++ {
		h.clock.Add(step)
		h.newLeader(term)
		b := h.next(1)
		k := term - 1
		bound := h.w + k*(h.slack()-min(h.slack(), h.l.TicksIn(step)))
		if lead := b.First - h.now(); lead > bound {
			t.Fatalf("leader %d: tick %s ahead of the clock, want at most %s", k, h.s.span(lead), h.s.span(bound))
		}
	}
	if lead := h.s.TimestampLead(); lead > 3*time.Second {
		t.Errorf("after %d leaders in %s the time field leads by %s", elections, elections*step, lead)
	}
}

// However fast leaders change, no leader hands out a tick more than the
// lead bound ahead of the highest clock reading any leader recorded: each
// new leader measures from the log's reading, not from the mark it
// inherits. With the clock standing still, leader after leader pushes the
// mark a slack further until the bound refuses.
func TestSequencerLeaderChangesCannotPassTheLeadBound(t *testing.T) {
	h := newDefaultHarness(t, time.Second)
	h.lead(0)
	start := h.now()
	var refused bool
	for term := uint64(2); term < 2+2*h.s.maxLead/h.slack() && !refused; term++ {
		h.newLeader(term)
		b, err := h.s.Next(seqCtx(t), 1)
		switch {
		case errors.Is(err, ErrAhead):
			refused = true
		case err != nil:
			t.Fatalf("term %d: %v", term, err)
		case b.First > start+h.s.maxLead:
			t.Fatalf("term %d: tick %s ahead of every clock reading, past the bound %s", term, h.s.span(b.First-start), h.s.span(h.s.maxLead))
		}
	}
	if !refused {
		t.Fatal("the lead bound never refused, though leaders pushed the mark ahead of a clock that stood still")
	}
}

// A mark written by a version that recorded no clock readings (a log or
// snapshot from before them) counts, as it did there, as a reading a
// window behind it: after an upgrade a new leader serves at once, even when
// that mark is far ahead of its clock (a restore, a clock that ran ahead).
func TestSequencerMarkWithoutReading(t *testing.T) {
	for _, ahead := range []time.Duration{11 * time.Second, 73 * time.Second} {
		h := newDefaultHarness(t, 3*time.Second)
		mark := h.now() + h.l.TicksIn(ahead)
		h.log.set(func(f *seqFakeLog) { f.hw = mark })
		h.lead(mark)
		if b, err := h.s.Next(seqCtx(t), 1); err != nil || b.First < mark {
			t.Errorf("mark %s ahead with no reading: %+v, %v; want the mark served", ahead, b, err)
		}
	}
	// With a reading that old, the same mark is refused: the bound holds.
	h := newDefaultHarness(t, 3*time.Second)
	mark := h.now() + h.l.TicksIn(73*time.Second)
	h.log.set(func(f *seqFakeLog) { f.hw, f.markClock, f.clockHigh = mark, h.now(), h.now() })
	h.lead(mark)
	if _, err := h.s.Next(seqCtx(t), 1); !errors.Is(err, ErrAhead) {
		t.Errorf("mark 73s ahead of the recorded reading: %v, want ErrAhead", err)
	}
}
