package settle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// waitLimit bounds every wait of these tests: nothing here should take
// more than a few milliseconds, so reaching it means something hangs.
const waitLimit = 5 * time.Second

// firstTick is where the fake sequencer starts handing out ticks.
const firstTick = 1000

// errInjected is what the fake log answers for an entry it fails.
var errInjected = errors.New("injected: entry not committed")

// within waits for a value from ch, failing the test after waitLimit.
func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("%s: nothing after %s", what, waitLimit)
	}
	panic("unreachable")
}

// eventually polls cond until it holds, failing the test after waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(waitLimit)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("%s: not after %s", what, waitLimit)
		case <-time.After(time.Millisecond):
		}
	}
}

// fakeClock is the Settler's clock: it moves only when a test says.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeIDs is the leader's sequencer: consecutive ticks from a counter.
type fakeIDs struct {
	mu         sync.Mutex
	next, term uint64
	confirms   int
	enrolls    int
	confirmErr error
	// onConfirm, if set, runs inside Confirm (without the lock).
	onConfirm func()
}

func (f *fakeIDs) AssignTracked(_ context.Context, n uint64) (sequencer.Block, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.term == 0 {
		return sequencer.Block{}, 0, sequencer.ErrNotLeader
	}
	if n == 0 {
		return sequencer.Block{}, 0, sequencer.ErrBadCount
	}
	b := sequencer.Block{First: f.next, Count: n}
	f.next += n
	return b, f.term, nil
}

// Vouch asks for nothing: the fake runs without the lease.
func (f *fakeIDs) Vouch() sequencer.Ticket { return sequencer.Ticket{} }

// Enroll asks for nothing either; it counts the calls.
func (f *fakeIDs) Enroll() (sequencer.Ticket, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enrolls++
	return sequencer.Ticket{}, f.term
}

func (f *fakeIDs) Frontier() (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next, f.term
}

func (f *fakeIDs) Confirm(context.Context) error {
	f.mu.Lock()
	f.confirms++
	hook, term, err := f.onConfirm, f.term, f.confirmErr
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	if term == 0 {
		return sequencer.ErrNotLeader
	}
	return err
}

// Next hands out n untracked ticks, as plain Next traffic does.
func (f *fakeIDs) Next(n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next += n
}

func (f *fakeIDs) setTerm(term uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.term = term
}

func (f *fakeIDs) Confirms() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirms
}

// fakeLog applies each settle entry to a real FSM, in the order Settle is
// called. Held, it queues entries (unapplied, unanswered) until released;
// fail, if set, makes an entry fail without applying.
type fakeLog struct {
	f *fsm.FSM

	mu    sync.Mutex
	term  uint64 // the term the next entries commit in
	index uint64
	held  bool
	queue []*fakePending
	fail  func(fsm.Command) bool
	// proposed is every command Settle was given; applied what each
	// applied entry did, in log order.
	proposed []fsm.Command
	applied  []appliedEntry
}

type appliedEntry struct {
	c   fsm.Command
	res fsm.Result
}

type fakePending struct {
	c    fsm.Command
	term uint64
	fail bool
	done chan struct{}
	res  fsm.Result
	err  error
}

func (p *fakePending) Result() (fsm.Result, error) {
	<-p.done
	return p.res, p.err
}

func (l *fakeLog) Settle(c fsm.Command) Pending {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &fakePending{c: c, term: l.term, done: make(chan struct{})}
	p.fail = l.fail != nil && l.fail(c)
	l.proposed = append(l.proposed, c)
	l.queue = append(l.queue, p)
	if !l.held {
		l.drainLocked()
	}
	return p
}

func (l *fakeLog) drainLocked() {
	for _, p := range l.queue {
		if p.fail {
			p.err = errInjected
			close(p.done)
			continue
		}
		e, err := fsm.Entry(p.c)
		if err != nil {
			p.err = err
			close(p.done)
			continue
		}
		l.index++
		e.Index, e.Term = l.index, p.term
		p.res = l.f.Apply(&e).(fsm.Result)
		l.applied = append(l.applied, appliedEntry{c: p.c, res: p.res})
		close(p.done)
	}
	l.queue = nil
}

func (l *fakeLog) Hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = true
}

// Release applies and answers every held entry, in order, and stops
// holding.
func (l *fakeLog) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = false
	l.drainLocked()
}

func (l *fakeLog) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

func (l *fakeLog) Proposed() []fsm.Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.proposed)
}

func (l *fakeLog) Applied() []appliedEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.applied)
}

func (l *fakeLog) setTerm(term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term = term
}

func (l *fakeLog) setFail(fail func(fsm.Command) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail = fail
}

// failOnce fails the first entry that holds a Track matching match.
func failOnce(match func(fsm.Track) bool) func(fsm.Command) bool {
	done := false // read and written under the log's lock
	return func(c fsm.Command) bool {
		if done {
			return false
		}
		done = slices.ContainsFunc(c.Tracks, match)
		return done
	}
}

func isDo(do fsm.Do, first uint64) func(fsm.Track) bool {
	return func(tr fsm.Track) bool { return tr.Do == do && tr.First == first }
}

// rig is a Settler over the fakes and a real FSM.
type rig struct {
	t     *testing.T
	s     *Settler
	ids   *fakeIDs
	log   *fakeLog
	fsm   *fsm.FSM
	clock *fakeClock
	once  sync.Once
}

func testConfig() Config {
	return Config{DefaultTTL: 10 * time.Second, MaxTTL: time.Hour, MaxOpen: 1000, Window: DefaultWindow}
}

// start builds a Settler on an FSM of the cluster version given, without
// leading.
func start(t *testing.T, cfg Config, version int) *rig {
	t.Helper()
	f := fsm.New(nil, nil)
	boot := []fsm.Command{{Op: fsm.OpReserve, UpTo: 1 << 40}}
	if version > 1 {
		boot = append(boot, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: version})
	}
	for i, c := range boot {
		e, err := fsm.Entry(c)
		if err != nil {
			t.Fatal(err)
		}
		e.Index, e.Term = uint64(i+1), 1
		if res := f.Apply(&e).(fsm.Result); res.Err != nil {
			t.Fatalf("boot %s: %v", c.Op, res.Err)
		}
	}
	r := &rig{
		t:   t,
		ids: &fakeIDs{next: firstTick, term: 1},
		log: &fakeLog{f: f, term: 1, index: uint64(len(boot))},
		fsm: f,
		// After the default layout's epoch (2024-01-01): before it every
		// tick reads 0, and no test of windows sees its clock move.
		clock: &fakeClock{now: time.Unix(1_750_000_000, 0)},
	}
	s, err := New(cfg, r.ids, r.log, f, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	// Before any call: the loops read the clock only after a call or a
	// wake, which the channel operations order after this write.
	s.clock = r.clock.Now
	r.s = s
	t.Cleanup(func() {
		r.log.Release()
		r.close()
	})
	return r
}

// newRig is a leading Settler at cluster version 2.
func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	r := start(t, cfg, 2)
	r.s.Lead()
	return r
}

// close closes the Settler (once), failing the test if it hangs.
func (r *rig) close() {
	r.t.Helper()
	r.once.Do(func() {
		done := make(chan struct{})
		go func() {
			r.s.Close()
			close(done)
		}()
		within(r.t, "Close", done)
	})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return c
}

func (r *rig) reserve(count uint64, ttl time.Duration) Reservation {
	r.t.Helper()
	res, err := r.s.Reserve(ctx(r.t), count, ttl)
	if err != nil {
		r.t.Fatalf("Reserve(%d, %s): %v", count, ttl, err)
	}
	if res.Count != count {
		r.t.Fatalf("Reserve(%d) gave %d ticks", count, res.Count)
	}
	return res
}

func (r *rig) decide(do fsm.Do, res Reservation, ttl time.Duration) (fsm.Fate, uint64, error) {
	return r.s.Decide(ctx(r.t), do, res.First, res.Count, ttl)
}

// decideOK makes a decision that must give fate want without error, and
// returns W after it.
func (r *rig) decideOK(do fsm.Do, res Reservation, ttl time.Duration, want fsm.Fate) uint64 {
	r.t.Helper()
	f, w, err := r.decide(do, res, ttl)
	if err != nil || f != want {
		r.t.Fatalf("%s of %d+%d: fate %s, error %v; want %s, no error", do, res.First, res.Count, f, err, want)
	}
	return w
}

// decideErr makes a decision that must fail with want.
func (r *rig) decideErr(do fsm.Do, res Reservation, want error) {
	r.t.Helper()
	f, _, err := r.decide(do, res, 0)
	if !errors.Is(err, want) {
		r.t.Fatalf("%s of %d+%d: fate %s, error %v; want %v", do, res.First, res.Count, f, err, want)
	}
}

func (r *rig) watermark() uint64 {
	r.t.Helper()
	w, err := r.s.Watermark(ctx(r.t))
	if err != nil {
		r.t.Fatalf("Watermark: %v", err)
	}
	return w
}

// advance moves the clock and wakes the loop, as its timer would.
func (r *rig) advance(d time.Duration) {
	r.clock.Advance(d)
	r.s.wakeUp()
}

// barrier returns once the loop has judged expiry at the clock's current
// reading and every entry proposed before has been answered: it commits a
// decision that changes nothing (of ticks never handed out), whose entry
// carries the expiries due and is answered after every earlier one.
func (r *rig) barrier() {
	r.t.Helper()
	if _, _, err := r.s.Decide(ctx(r.t), fsm.DoComplete, 1<<40-1, 1, 0); !errors.Is(err, ErrUnknown) {
		r.t.Fatalf("barrier: %v, want ErrUnknown", err)
	}
}

// loopBarrier returns once the loop finished every flush it began before
// the call, and holds no wake: it takes a wake only between flushes, and
// takes two here (the flush of the second may still run).
func (r *rig) loopBarrier() {
	r.t.Helper()
	for range 2 {
		r.s.wakeUp()
		eventually(r.t, "the loop took a wake", func() bool { return len(r.s.wake) == 0 })
	}
}

// fate is the FSM's fate of a reservation.
func (r *rig) fate(res Reservation) fsm.Fate {
	tk := r.fsm.Tracked()
	if o, ok := tk.Open[res.First]; ok && o.Count == res.Count {
		return fsm.FateOpen
	}
	for _, s := range tk.Dead {
		if s.First <= res.First && res.First+res.Count <= s.End {
			return s.Fate
		}
	}
	if res.First+res.Count <= tk.Frontier {
		return fsm.FateCompleted
	}
	return fsm.FateUnknown
}

func (r *rig) wantFate(res Reservation, want fsm.Fate) {
	r.t.Helper()
	if got := r.fate(res); got != want {
		r.t.Fatalf("reservation %d+%d: fate %s in the FSM, want %s", res.First, res.Count, got, want)
	}
}

func (r *rig) expired() uint64 { return r.s.Stats().Expired }

// waitExpired waits until the Settler counted n expiries.
func (r *rig) waitExpired(n uint64) {
	r.t.Helper()
	eventually(r.t, fmt.Sprintf("%d expiries", n), func() bool { return r.expired() >= n })
	if got := r.expired(); got != n {
		r.t.Fatalf("%d expiries, want %d", got, n)
	}
}

// async runs fn in a goroutine and hands back its error.
func async(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// The basic cycle: reservations open, W stops at the oldest open one
// (never past it, whatever else is handed out around them), and moves to
// the frontier once nothing is open.
func TestReserveThenComplete(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(3, 0)
	if a.First != firstTick || a.TTL != testConfig().DefaultTTL {
		t.Fatalf("first reservation %+v, want ticks from %d with the default TTL", a, firstTick)
	}
	r.ids.Next(5) // untracked
	b := r.reserve(2, time.Minute)
	r.ids.Next(1)
	c := r.reserve(4, time.Minute)
	for _, res := range []Reservation{a, b, c} {
		r.wantFate(res, fsm.FateOpen)
	}
	if b.First != a.First+3+5 || c.First != b.First+2+1 {
		t.Fatalf("reservations %+v %+v %+v not in tick order around the untracked ticks", a, b, c)
	}
	if w := r.watermark(); w != a.First {
		t.Fatalf("W %d with a open from %d: want W at a", w, a.First)
	}

	w0, changed := r.s.Watch()
	if w := r.decideOK(fsm.DoComplete, b, 0, fsm.FateCompleted); w != a.First {
		t.Fatalf("W %d after completing b, a still open from %d", w, a.First)
	}
	select {
	case <-changed:
		t.Fatalf("Watch: W rose from %d though a is open", w0)
	default:
	}
	if w := r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted); w != c.First {
		t.Fatalf("W %d after completing a and b, c open from %d: want W at c", w, c.First)
	}
	within(t, "Watch after W rose", changed)
	if w, _ := r.s.Watch(); w != c.First {
		t.Fatalf("Watch says W %d, want %d", w, c.First)
	}
	r.ids.Next(7)
	frontier, _ := r.ids.Frontier()
	if w := r.decideOK(fsm.DoComplete, c, 0, fsm.FateCompleted); w != frontier {
		t.Fatalf("W %d with nothing open, want the frontier %d", w, frontier)
	}
	if w := r.watermark(); w != frontier {
		t.Fatalf("Watermark %d, want %d", w, frontier)
	}
	st := r.s.Stats()
	if st.Open != 0 || st.Reserved != 3 || st.Completed != 3 || st.Expired != 0 || st.Abandoned != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The safety rule under concurrent callers: once any caller has
// seen W above a reservation's first tick, that reservation can no longer
// be completed; and no caller sees W go down.
func TestWNeverPassesAReservationThatCanStillComplete(t *testing.T) {
	r := newRig(t, testConfig())
	var seen atomic.Uint64 // the highest W any call answered
	see := func(w uint64) {
		for {
			old := seen.Load()
			if w <= old || seen.CompareAndSwap(old, w) {
				return
			}
		}
	}
	const workers, rounds = 8, 25
	errs := make(chan error, workers)
	for i := range workers {
		go func() {
			errs <- func() error {
				rng := rand.New(rand.NewPCG(uint64(i), 24))
				last := uint64(0) // W must not go down for this caller
				saw := func(w uint64) error {
					if w < last {
						return fmt.Errorf("W went down from %d to %d", last, w)
					}
					last = w
					see(w)
					return nil
				}
				for range rounds {
					res, err := r.s.Reserve(ctx(t), 1+rng.Uint64N(4), time.Hour)
					if err != nil {
						return fmt.Errorf("reserve: %w", err)
					}
					if rng.IntN(2) == 0 {
						r.ids.Next(1 + rng.Uint64N(3))
					}
					if rng.IntN(2) == 0 {
						w, err := r.s.Watermark(ctx(t))
						if err != nil {
							return fmt.Errorf("watermark: %w", err)
						}
						if err := saw(w); err != nil {
							return err
						}
					}
					do, want := fsm.DoComplete, fsm.FateCompleted
					if rng.IntN(4) == 0 {
						do, want = fsm.DoAbandon, fsm.FateAbandoned
					}
					before := seen.Load()
					f, w, err := r.s.Decide(ctx(t), do, res.First, res.Count, 0)
					if err != nil || f != want {
						return fmt.Errorf("%s of %d+%d: %s, %v", do, res.First, res.Count, f, err)
					}
					if do == fsm.DoComplete && before > res.First {
						return fmt.Errorf("completed %d+%d after a caller saw W %d above it", res.First, res.Count, before)
					}
					if err := saw(w); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := within(t, "worker", errs); err != nil {
			t.Fatal(err)
		}
	}
	frontier, _ := r.ids.Frontier()
	if w := r.watermark(); w != frontier {
		t.Fatalf("W %d with everything decided, want the frontier %d", w, frontier)
	}
	if tk := r.fsm.Tracked(); len(tk.Open) != 0 {
		t.Fatalf("%d reservations still open", len(tk.Open))
	}
	if st := r.s.Stats(); st.Open != 0 || st.Reserved != workers*rounds || st.Completed+st.Abandoned != workers*rounds {
		t.Fatalf("stats %+v", st)
	}
}

// Decisions are idempotent, and a closed reservation's fate answers every
// later decision.
func TestDecisionsAreIdempotentAndFinal(t *testing.T) {
	r := newRig(t, testConfig())
	a, b, c, d := r.reserve(1, 0), r.reserve(3, 0), r.reserve(2, 0), r.reserve(2, 0)

	r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted)
	r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted) // a retry

	r.decideOK(fsm.DoAbandon, b, 0, fsm.FateAbandoned)
	r.decideOK(fsm.DoAbandon, b, 0, fsm.FateAbandoned)
	r.decideErr(fsm.DoComplete, b, ErrAbandoned)
	r.decideErr(fsm.DoExtend, b, ErrAbandoned)

	r.decideOK(fsm.DoComplete, c, 0, fsm.FateCompleted)
	r.decideErr(fsm.DoAbandon, c, ErrCompleted)
	r.decideErr(fsm.DoExtend, c, ErrCompleted)
	r.wantFate(c, fsm.FateCompleted)

	// A handle that names no reservation: ticks never handed out, and an
	// open reservation's first tick with another count.
	r.decideErr(fsm.DoComplete, Reservation{Block: sequencer.Block{First: 1 << 30, Count: 1}}, ErrUnknown)
	r.decideErr(fsm.DoAbandon, Reservation{Block: sequencer.Block{First: 1 << 30, Count: 1}}, ErrUnknown)
	r.decideErr(fsm.DoComplete, Reservation{Block: sequencer.Block{First: d.First, Count: d.Count + 1}}, ErrUnknown)
	r.wantFate(d, fsm.FateOpen)
	if w := r.watermark(); w != d.First {
		t.Fatalf("W %d, want %d (d open)", w, d.First)
	}
	st := r.s.Stats()
	if st.Completed != 2 || st.Abandoned != 1 || st.Open != 1 {
		t.Fatalf("stats %+v: want 2 completed, 1 abandoned (retries not counted again), 1 open", st)
	}
}

// A reservation not decided within its TTL expires; then it answers
// ErrExpired to Complete and Extend for good, Abandon accepts it, and W
// passes it.
func TestExpiry(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(2, 100*time.Millisecond)
	b := r.reserve(1, time.Hour)
	r.advance(99 * time.Millisecond)
	r.barrier()
	r.wantFate(a, fsm.FateOpen)
	if r.expired() != 0 {
		t.Fatal("expired before its TTL")
	}
	r.advance(2 * time.Millisecond)
	r.waitExpired(1)
	r.wantFate(a, fsm.FateExpired)
	r.wantFate(b, fsm.FateOpen)
	if w := r.watermark(); w != b.First {
		t.Fatalf("W %d after a expired, want %d (b open)", w, b.First)
	}

	r.decideErr(fsm.DoComplete, a, ErrExpired)
	r.decideErr(fsm.DoExtend, a, ErrExpired)
	r.decideOK(fsm.DoAbandon, a, 0, fsm.FateExpired)
	r.decideErr(fsm.DoComplete, a, ErrExpired) // still, for good
	r.wantFate(a, fsm.FateExpired)
	if st := r.s.Stats(); st.Expired != 1 || st.Abandoned != 0 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
	r.decideOK(fsm.DoComplete, b, 0, fsm.FateCompleted)
	if w, fr := r.watermark(), r.fsm.Tracked().Frontier; w != fr || w <= a.First+a.Count-1 {
		t.Fatalf("W %d: want it past the expired reservation, at the frontier %d", w, fr)
	}
}

// An Extend before the deadline moves it: past the old deadline the
// reservation is open, past the new one it expires.
func TestExtendDefersExpiry(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 100*time.Millisecond)
	r.advance(50 * time.Millisecond)
	r.decideOK(fsm.DoExtend, a, 200*time.Millisecond, fsm.FateOpen) // due at 250ms
	r.advance(100 * time.Millisecond)                               // 150ms
	r.barrier()
	r.wantFate(a, fsm.FateOpen)
	r.advance(90 * time.Millisecond) // 240ms
	r.barrier()
	r.wantFate(a, fsm.FateOpen)
	if r.expired() != 0 {
		t.Fatal("expired before its extended deadline")
	}
	r.advance(20 * time.Millisecond) // 260ms
	r.waitExpired(1)
	r.wantFate(a, fsm.FateExpired)
}

// staleExpire sets up an Expire judged before an Extend that commits
// first: the Extend's entry is held, the clock passes the old deadline,
// the loop proposes the Expire (with the extension count it knew) behind
// it. It returns the Extend's answer channel; the log is still held.
func staleExpire(t *testing.T, r *rig, a Reservation) <-chan error {
	t.Helper()
	r.log.Hold()
	ext := async(func() error {
		_, _, err := r.s.Decide(ctx(t), fsm.DoExtend, a.First, a.Count, time.Second)
		return err
	})
	eventually(t, "the Extend proposed", func() bool { return r.log.Held() == 1 })
	r.advance(150 * time.Millisecond)
	eventually(t, "the Expire proposed", func() bool { return r.log.Held() == 2 })
	p := r.log.Proposed()
	want := fsm.Track{Do: fsm.DoExpire, First: a.First, Count: a.Count, Ext: 0}
	if last := p[len(p)-1]; !slices.Contains(last.Tracks, want) {
		t.Fatalf("second held entry %+v, want an Expire %+v", last.Tracks, want)
	}
	return ext
}

// An Expire judged before an Extend, that the log holds after the
// Extend, is a no-op; the extended deadline stands and is kept.
func TestExpireJudgedBeforeACommittedExtendIsANoOp(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 100*time.Millisecond) // due at 100ms
	ext := staleExpire(t, r, a)
	r.log.Release()
	if err := within(t, "Extend", ext); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	applied := r.log.Applied()
	last := applied[len(applied)-1]
	if i := slices.IndexFunc(last.c.Tracks, isDo(fsm.DoExpire, a.First)); i < 0 || last.res.Outcomes[i].Fate != fsm.FateOpen || last.res.Outcomes[i].Ext != 1 {
		t.Fatalf("the stale Expire's entry %+v did %+v, want the reservation left open at extension 1", last.c.Tracks, last.res.Outcomes)
	}
	r.wantFate(a, fsm.FateOpen)
	if o := r.fsm.Tracked().Open[a.First]; o.Ext != 1 || o.TTLMs != 1000 {
		t.Fatalf("open reservation %+v, want the Extend's TTL at extension 1", o)
	}
	// The Extend applied at 150ms: due at 1150ms.
	r.advance(990 * time.Millisecond) // 1140ms
	r.barrier()
	r.wantFate(a, fsm.FateOpen)
	if r.expired() != 0 || r.s.Stats().Open != 1 {
		t.Fatalf("stats %+v, want 1 open and nothing expired", r.s.Stats())
	}
	r.advance(20 * time.Millisecond) // 1160ms
	r.waitExpired(1)
	r.wantFate(a, fsm.FateExpired)
}

// A new Lead (after a StepDown) gives every open reservation its full TTL
// from the Lead, however long ago it opened.
func TestLeadGivesOpenReservationsTheirFullTTL(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 100*time.Millisecond)
	b := r.reserve(1, 300*time.Millisecond)
	r.s.StepDown()
	if st := r.s.Stats(); st.Open != 0 {
		t.Fatalf("stats %+v after StepDown: want no deadlines kept", st)
	}
	r.clock.Advance(500 * time.Millisecond) // both past their deadline
	r.s.Lead()
	if st := r.s.Stats(); st.Open != 2 {
		t.Fatalf("stats %+v after Lead: want both open", st)
	}
	r.barrier()
	r.advance(90 * time.Millisecond)
	r.barrier()
	r.wantFate(a, fsm.FateOpen)
	r.wantFate(b, fsm.FateOpen)
	r.advance(20 * time.Millisecond) // 110ms after Lead
	r.waitExpired(1)
	r.wantFate(a, fsm.FateExpired)
	r.wantFate(b, fsm.FateOpen)
	r.advance(200 * time.Millisecond) // 310ms after Lead
	r.waitExpired(2)
	r.wantFate(b, fsm.FateExpired)
}

// The bounds: open reservations (those proposed count too) and TTLs.
func TestLimits(t *testing.T) {
	cfg := Config{DefaultTTL: 500 * time.Millisecond, MaxTTL: time.Second, MaxOpen: 2, Window: DefaultWindow}
	r := newRig(t, cfg)
	a := r.reserve(1, 0)
	if a.TTL != cfg.DefaultTTL {
		t.Fatalf("TTL %s, want the default %s", a.TTL, cfg.DefaultTTL)
	}
	b := r.reserve(1, cfg.MaxTTL)
	if _, err := r.s.Reserve(ctx(t), 1, 0); !errors.Is(err, ErrTooManyOpen) {
		t.Fatalf("third reservation with MaxOpen 2: %v, want ErrTooManyOpen", err)
	}
	r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted)
	c := r.reserve(1, 0)

	// Opens proposed but not applied count.
	r.decideOK(fsm.DoAbandon, b, 0, fsm.FateAbandoned)
	r.log.Hold()
	held := async(func() error { _, err := r.s.Reserve(ctx(t), 1, 0); return err })
	eventually(t, "the reserve proposed", func() bool { return r.log.Held() >= 1 })
	if _, err := r.s.Reserve(ctx(t), 1, 0); !errors.Is(err, ErrTooManyOpen) {
		t.Fatalf("reservation with one open and one proposed, MaxOpen 2: %v, want ErrTooManyOpen", err)
	}
	r.log.Release()
	if err := within(t, "held reserve", held); err != nil {
		t.Fatal(err)
	}

	for _, ttl := range []time.Duration{cfg.MaxTTL + time.Millisecond, time.Millisecond / 2, -time.Second} {
		if _, err := r.s.Reserve(ctx(t), 1, ttl); !errors.Is(err, ErrTTL) {
			t.Errorf("Reserve with TTL %s: %v, want ErrTTL", ttl, err)
		}
		if _, _, err := r.decide(fsm.DoExtend, c, ttl); !errors.Is(err, ErrTTL) {
			t.Errorf("Extend with TTL %s: %v, want ErrTTL", ttl, err)
		}
	}
	r.decideOK(fsm.DoExtend, c, cfg.MaxTTL, fsm.FateOpen)
	if o := r.fsm.Tracked().Open[c.First]; o.TTLMs != cfg.MaxTTL.Milliseconds() {
		t.Fatalf("extended reservation %+v, want TTL %s", o, cfg.MaxTTL)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{DefaultTTL: DefaultTTL, MaxTTL: DefaultMaxTTL, MaxOpen: DefaultMaxOpen, Window: DefaultWindow}, ""},
		{Config{DefaultTTL: time.Millisecond, MaxTTL: time.Millisecond, MaxOpen: 1, Window: time.Millisecond}, ""},
		{Config{DefaultTTL: time.Hour, MaxTTL: 24 * time.Hour, MaxOpen: 10_000_000, Window: maxWindow}, ""},
		{Config{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxOpen: 1}, "named sequence window"},
		{Config{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxOpen: 1, Window: maxWindow + 1}, "named sequence window"},
		{Config{DefaultTTL: time.Millisecond - 1, MaxTTL: time.Hour, MaxOpen: 1}, "default reservation TTL"},
		{Config{DefaultTTL: 0, MaxTTL: time.Hour, MaxOpen: 1}, "default reservation TTL"},
		{Config{DefaultTTL: 2 * time.Hour, MaxTTL: time.Hour, MaxOpen: 1}, "default reservation TTL"},
		{Config{DefaultTTL: time.Second, MaxTTL: 24*time.Hour + 1, MaxOpen: 1}, "maximum reservation TTL"},
		{Config{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxOpen: 0}, "maximum open reservations"},
		{Config{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxOpen: -1}, "maximum open reservations"},
		{Config{DefaultTTL: time.Second, MaxTTL: time.Hour, MaxOpen: 10_000_001}, "maximum open reservations"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error about %q", tc.cfg, err, tc.want)
		}
		s, err2 := New(tc.cfg, &fakeIDs{}, &fakeLog{}, fsm.New(nil, nil), hclog.NewNullLogger())
		if (err2 == nil) != (err == nil) {
			t.Errorf("%+v: New says %v, Validate %v", tc.cfg, err2, err)
		}
		if err2 == nil {
			s.Close()
		}
	}
}

// A reservation whose opening commits in another term than its ticks
// were assigned in is not answered (a newer leader may have handed the
// same ticks out meanwhile); it stays open and expires. A read of W
// committed in another term fails likewise.
func TestReserveCommittedInAnotherTermFails(t *testing.T) {
	r := newRig(t, testConfig())
	r.log.setTerm(2)
	if res, err := r.s.Reserve(ctx(t), 2, time.Hour); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("reserve committed in term 2, assigned in term 1: %+v, %v; want ErrNotLeader", res, err)
	}
	tk := r.fsm.Tracked()
	if o, ok := tk.Open[firstTick]; !ok || o.Count != 2 {
		t.Fatalf("open reservations %+v: want the unanswered one open", tk.Open)
	}
	// Let the wake of the deadline just set pass, and a read end the flush
	// it began, so that no flush but the next read's sees the next tick.
	r.loopBarrier()
	r.watermark()
	r.ids.Next(1) // so that the read commits an entry
	if w, err := r.s.Watermark(ctx(t)); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("W committed in term 2, asked in term 1: %d, %v; want ErrNotLeader", w, err)
	}
	r.log.setTerm(1)
	r.advance(time.Hour + time.Millisecond)
	r.waitExpired(1)
	r.wantFate(Reservation{Block: sequencer.Block{First: firstTick, Count: 2}}, fsm.FateExpired)
	r.reserve(1, 0)
}

// A failed entry fails the calls it carried (they may be retried), does
// not leak their room under MaxOpen, and an expiry it carried is proposed
// again.
func TestFailedEntry(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 2
	r := newRig(t, cfg)
	a := r.reserve(1, time.Hour)

	r.log.setFail(failOnce(isDo(fsm.DoComplete, a.First)))
	if _, _, err := r.decide(fsm.DoComplete, a, 0); !errors.Is(err, errInjected) {
		t.Fatalf("Complete in a failed entry: %v, want the log's error", err)
	}
	r.wantFate(a, fsm.FateOpen)
	r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted) // the retry

	r.log.setFail(failOnce(func(tr fsm.Track) bool { return tr.Do == fsm.DoOpen }))
	if _, err := r.s.Reserve(ctx(t), 1, time.Hour); !errors.Is(err, errInjected) {
		t.Fatalf("Reserve in a failed entry: %v, want the log's error", err)
	}
	b := r.reserve(1, 100*time.Millisecond)
	r.reserve(1, time.Hour) // MaxOpen 2: the failed one holds no room

	r.log.setFail(failOnce(isDo(fsm.DoExpire, b.First)))
	r.advance(150 * time.Millisecond)
	proposedExpires := func() int {
		n := 0
		for _, c := range r.log.Proposed() {
			if slices.ContainsFunc(c.Tracks, isDo(fsm.DoExpire, b.First)) {
				n++
			}
		}
		return n
	}
	eventually(t, "the expiry to be proposed and fail", func() bool { return proposedExpires() == 1 })
	r.barrier()
	if proposedExpires() != 1 {
		t.Fatal("a failed expiry was proposed again at once: a leader that cannot commit would spin")
	}
	r.advance(retryDelay)
	r.waitExpired(1)
	r.wantFate(b, fsm.FateExpired)
	expires := 0
	for _, c := range r.log.Proposed() {
		if slices.ContainsFunc(c.Tracks, isDo(fsm.DoExpire, b.First)) {
			expires++
		}
	}
	if expires != 2 {
		t.Fatalf("the expiry was proposed %d times, want 2 (failed, then again)", expires)
	}
}

// W reads: with nothing to commit, a confirmation round and the FSM's W;
// after untracked traffic moved the frontier, an entry that raises W.
func TestWatermark(t *testing.T) {
	r := newRig(t, testConfig())
	entries := func() int { return len(r.log.Proposed()) }

	if w := r.watermark(); w != firstTick { // commits the first frontier
		t.Fatalf("first W %d, want %d", w, firstTick)
	}
	n, confirms := entries(), r.ids.Confirms()
	for range 3 {
		if w := r.watermark(); w != firstTick {
			t.Fatalf("W %d, want %d", w, firstTick)
		}
	}
	if entries() != n || r.ids.Confirms() != confirms+3 {
		t.Fatalf("idle reads: %d entries and %d rounds, want none and 3", entries()-n, r.ids.Confirms()-confirms)
	}
	if w, _ := r.fsm.Marks(); w != firstTick {
		t.Fatalf("the FSM's W %d", w)
	}

	r.ids.Next(10) // untracked Next traffic
	if w := r.watermark(); w != firstTick+10 {
		t.Fatalf("W %d after ten untracked ticks, want %d", w, firstTick+10)
	}
	if entries() != n+1 || r.ids.Confirms() != confirms+3 {
		t.Fatalf("read after the frontier moved: %d entries and %d rounds, want 1 entry and no round", entries()-n, r.ids.Confirms()-confirms-3)
	}
	if c := r.log.Proposed()[n]; len(c.Tracks) != 0 || c.Frontier != firstTick+10 {
		t.Fatalf("entry %+v, want the new frontier and no tracks", c)
	}

	// A round that fails, and one during which the term changed.
	r.ids.mu.Lock()
	r.ids.confirmErr = errInjected
	r.ids.mu.Unlock()
	if _, err := r.s.Watermark(ctx(t)); !errors.Is(err, errInjected) {
		t.Fatalf("W after a failed round: %v", err)
	}
	r.ids.mu.Lock()
	r.ids.confirmErr = nil
	r.ids.onConfirm = func() { r.ids.setTerm(2) }
	r.ids.mu.Unlock()
	if _, err := r.s.Watermark(ctx(t)); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("W read across a term change: %v, want ErrNotLeader", err)
	}
}

// Calls fail with ErrNotLeader when the Settler does not lead, and with
// ErrClusterVersion before the cluster reads settle entries.
func TestNotLeadingAndClusterVersion(t *testing.T) {
	calls := func(r *rig) map[string]error {
		_, rerr := r.s.Reserve(ctx(t), 1, 0)
		_, _, derr := r.s.Decide(ctx(t), fsm.DoComplete, firstTick, 1, 0)
		_, werr := r.s.Watermark(ctx(t))
		return map[string]error{"Reserve": rerr, "Decide": derr, "Watermark": werr}
	}
	check := func(when string, r *rig, want error) {
		t.Helper()
		for name, err := range calls(r) {
			if !errors.Is(err, want) {
				t.Errorf("%s %s: %v, want %v", name, when, err, want)
			}
		}
	}

	r := start(t, testConfig(), 2)
	check("before Lead", r, sequencer.ErrNotLeader)
	r.s.Lead()
	a := r.reserve(1, 0)
	r.s.StepDown()
	check("after StepDown", r, sequencer.ErrNotLeader)
	r.wantFate(a, fsm.FateOpen)
	r.s.Lead()
	r.decideOK(fsm.DoComplete, a, 0, fsm.FateCompleted)
	r.ids.setTerm(0) // the sequencer stopped serving before the Settler heard
	check("with the sequencer not serving", r, sequencer.ErrNotLeader)

	// Below version 2 no settle entry is proposed, not even when leading
	// would commit a frontier: an older node that meets one stops.
	v1 := start(t, testConfig(), 1)
	v1.s.Lead()
	v1.loopBarrier()
	check("at cluster version 1", v1, ErrClusterVersion)
	v1.loopBarrier()
	if n := len(v1.log.Proposed()); n != 0 {
		t.Fatalf("%d entries proposed at cluster version 1", n)
	}
}

// The loop's timer, not only a wake, expires a reservation: with no
// other traffic after it opened, a lone reservation still expires once its
// TTL passed; and so does one whose deadline falls before the one the
// timer was set for.
func TestLoneReservationExpiresOnItsTimer(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 50*time.Millisecond)
	r.clock.Advance(time.Second) // no wake: only the timer can notice
	r.waitExpired(1)
	r.wantFate(a, fsm.FateExpired)

	long := r.reserve(1, time.Hour)
	r.loopBarrier() // the timer is set for long's deadline
	b := r.reserve(1, 50*time.Millisecond)
	r.clock.Advance(time.Second)
	r.waitExpired(2)
	r.wantFate(b, fsm.FateExpired)
	r.wantFate(long, fsm.FateOpen)
}

// The same interleaving, with the stale Expire's entry failing: the
// retried Expire must not replace the deadline the Extend set, or the
// reservation never expires on this leader.
func TestFailedStaleExpireKeepsTheExtendedDeadline(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 100*time.Millisecond)
	r.log.setFail(failOnce(isDo(fsm.DoExpire, a.First)))
	ext := staleExpire(t, r, a)
	r.log.Release()
	if err := within(t, "Extend", ext); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	r.barrier()
	r.wantFate(a, fsm.FateOpen)
	if st := r.s.Stats(); st.Open != 1 {
		t.Fatalf("stats %+v: the Settler lost the reservation's deadline", st)
	}
	r.advance(time.Second + 20*time.Millisecond) // past 1150ms
	r.waitExpired(1)
	r.wantFate(a, fsm.FateExpired)
}

// Close fails the calls in flight and returns, even while the log holds
// their entries.
func TestCloseFailsCallsInFlight(t *testing.T) {
	r := newRig(t, testConfig())
	a := r.reserve(1, 0)
	r.loopBarrier() // no flush of the loop's own between the calls'
	r.watermark()
	r.log.Hold()
	var calls []<-chan error
	calls = append(calls, async(func() error { _, err := r.s.Reserve(ctx(t), 1, 0); return err }))
	eventually(t, "the reserve proposed", func() bool { return r.log.Held() == 1 })
	calls = append(calls, async(func() error { _, _, err := r.decide(fsm.DoComplete, a, 0); return err }))
	eventually(t, "the complete proposed", func() bool { return r.log.Held() == 2 })
	r.ids.Next(1)
	calls = append(calls, async(func() error { _, err := r.s.Watermark(ctx(t)); return err }))
	eventually(t, "the read proposed", func() bool { return r.log.Held() == 3 })
	r.close()
	for i, ch := range calls {
		if err := within(t, "a call in flight", ch); !errors.Is(err, sequencer.ErrNotLeader) {
			t.Errorf("call %d in flight at Close: %v, want ErrNotLeader", i, err)
		}
	}
	if _, err := r.s.Reserve(ctx(t), 1, 0); !errors.Is(err, sequencer.ErrNotLeader) {
		t.Fatalf("Reserve after Close: %v, want ErrNotLeader", err)
	}
}

// A read of W given up (its context ended) while its entry is in flight
// returns at once, and the entry's answer, which comes later, does not
// race with it (go test -race).
func TestReadGivenUpWhileItsEntryIsInFlight(t *testing.T) {
	r := newRig(t, testConfig())
	r.loopBarrier() // Lead's wake: no flush of the loop's own after this read
	r.watermark()
	r.ids.Next(1) // so that the read commits an entry
	r.log.Hold()
	c, cancel := context.WithCancel(context.Background())
	read := make(chan error, 1)
	go func() {
		_, err := r.s.Watermark(c)
		read <- err
	}()
	eventually(t, "the read proposed", func() bool { return r.log.Held() == 1 })
	cancel()
	// The answer is written with nothing ordering it after the read's
	// return: only then can the race detector see the two meet.
	r.log.Release()
	r.barrier()
	if err := within(t, "the read", read); !errors.Is(err, context.Canceled) {
		t.Fatalf("read given up: %v, want context.Canceled", err)
	}
}

// A call with a malformed handle or count is refused on its own: it
// neither becomes another call (a reserve of 0 is not a read of W) nor
// fails the entry, and so the other calls, that it would share.
func TestMalformedCallsAreRefusedAlone(t *testing.T) {
	r := newRig(t, testConfig())
	if res, err := r.s.Reserve(ctx(t), 0, 0); !errors.Is(err, sequencer.ErrBadCount) {
		t.Errorf("Reserve of 0 ticks: %+v, %v; want ErrBadCount", res, err)
	}
	a := r.reserve(1, time.Hour)
	b := r.reserve(1, time.Hour)

	// Only Complete, Abandon and Extend are a caller's to decide.
	for _, do := range []fsm.Do{fsm.DoExpire, fsm.DoOpen, "bogus"} {
		if f, _, err := r.decide(do, a, time.Second); err == nil {
			t.Errorf("Decide(%s): fate %s, no error", do, f)
		}
	}
	if err := r.fsm.Unreadable(); err != nil {
		t.Fatalf("a decision the caller named wrote an entry no node reads: %v", err)
	}
	r.wantFate(a, fsm.FateOpen)

	// Fill the pipeline (one entry answering, two queued, one waiting to
	// queue) so that the next calls gather into one entry.
	r.loopBarrier()
	r.watermark()
	r.log.Hold()
	var fill []<-chan error
	for i := range 2 + inFlight {
		fill = append(fill, async(func() error {
			_, _, err := r.decide(fsm.DoExtend, a, time.Hour)
			return err
		}))
		eventually(t, "an Extend proposed", func() bool { return r.log.Held() == i+1 })
	}
	good := async(func() error { _, _, err := r.decide(fsm.DoComplete, b, 0); return err })
	var bad []<-chan error
	var refused atomic.Int32
	handles := []sequencer.Block{{First: 0, Count: 1}, {First: b.First, Count: 0}, {First: ^uint64(0), Count: 2}}
	for _, h := range handles {
		bad = append(bad, async(func() error {
			_, _, err := r.s.Decide(ctx(t), fsm.DoComplete, h.First, h.Count, 0)
			refused.Add(1)
			return err
		}))
	}
	// Each call is queued for the one entry, or refused before.
	eventually(t, "the calls queued", func() bool { return len(r.s.queue)+int(refused.Load()) == 1+len(handles) })
	r.log.Release()
	for _, ch := range fill {
		if err := within(t, "Extend", ch); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range bad {
		if err := within(t, "Complete of a malformed handle", ch); !errors.Is(err, ErrUnknown) {
			t.Errorf("Complete of a malformed handle: %v, want ErrUnknown", err)
		}
	}
	if err := within(t, "Complete", good); err != nil {
		t.Fatalf("Complete batched with malformed handles: %v", err)
	}
	r.wantFate(b, fsm.FateCompleted)
}
