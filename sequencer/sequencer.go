package sequencer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/layout"
)

// Errors the Sequencer returns. Package server maps them, with its own,
// to gRPC codes in one place, naming them by this package.
var (
	// ErrNotLeader means the sequencer does not serve now: it was never
	// told to Lead, it stepped down, or a confirmation round failed.
	ErrNotLeader = errors.New("not the leader")
	// ErrBadCount means a request asked for 0 IDs or more than the lead
	// bound holds.
	ErrBadCount = errors.New("bad count")
	// ErrTimeExhausted means the layout's time field is full: no more IDs
	// can be made with this layout.
	ErrTimeExhausted = errors.New("time field exhausted")
	// ErrAhead means demand exceeds what the layout holds: the time field
	// of new IDs would run further ahead of the clock than the sequencer
	// allows (two reserve windows, at least 10 s). Clients back off and
	// retry.
	ErrAhead = errors.New("IDs would run too far ahead of the clock")
)

// Log is what the Sequencer needs from Raft. Reserve commits a reservation
// and returns what it found and set; Confirm proves leadership with a
// round of messages sent after it is called, and with askLease also asks
// the voters for a lease. Both end by themselves: the server's Raft
// implementation fails when leadership is lost and bounds the wait by its
// apply timeout; ctx may end it sooner.
type Log interface {
	// Reserve raises the replicated high-water mark to at least upTo and
	// records clock, the proposer's clock reading in ticks.
	Reserve(ctx context.Context, upTo, clock uint64) (Reservation, error)
	Confirm(ctx context.Context, askLease bool) (Confirmation, error)
}

// CeilingLog is a Log that says whether the cluster's reservations
// record lead ceilings (leadCeiling). A Log that does not say records
// them.
type CeilingLog interface {
	Log
	// RecordsCeilings reports whether every voter reads a reservation's
	// reading as its leader's ceiling less minMaxLead (the server's
	// cluster version says so). Until then a version before the ceiling
	// may lead, which reads a reading as a clock reading and adds its own
	// lead bound to it: a reservation records the clock reading, as that
	// version does, and the readings count as clock readings.
	RecordsCeilings() bool
}

// Reservation is what a committed reservation found and set: the fields
// of the FSM's result the sequencer reads.
type Reservation struct {
	// Prev is the high-water mark before this reservation, computed after
	// every earlier entry applied: a new leader starts there.
	Prev uint64
	// HighWater is the mark after it: ticks below it may be handed out.
	HighWater uint64
	// ClockHigh is the highest clock reading, in ticks, that any
	// reservation up to this one carried.
	ClockHigh uint64
	// PrevClock is the reading the reservation that set Prev carried; 0
	// when it carried none (it was made by a version that recorded none).
	PrevClock uint64
	// Term is the Raft term of the log entry. A match with the leader's
	// own term proves the entry was appended by that leader and committed
	// by a majority in that term.
	Term uint64
}

// Confirmation is what a round proved.
type Confirmation struct {
	// Term is the term in which a majority confirmed this node leads.
	Term uint64
	// Lease is how long a majority, this node counted, promised to
	// confirm no other leader, counted from before the round was sent;
	// 0 when fewer promised.
	Lease time.Duration
}

// Block is a run of consecutive ticks handed to one request.
type Block struct {
	First uint64
	Count uint64
}

// Sequencer hands out ticks on the leader, in the order the package
// comment argues.
type Sequencer struct {
	layout layout.Layout
	window uint64 // ticks a reservation reaches ahead of now
	slack  uint64 // the least stretch: see the package comment
	clock  func() time.Time
	log    Log
	logger hclog.Logger
	// lease is how long the lease is (0: off), counted on leaseClock.
	lease      time.Duration
	leaseClock func() time.Duration

	mu sync.Mutex
	// term is the Raft term this sequencer serves in; 0 when not serving.
	term uint64
	// period counts the calls to Lead. A node may lose a round, step down
	// and lead again in the same term, so what a round or a renewal
	// started in an earlier serving period finds out must not end the
	// current one: they compare periods, not terms.
	period uint64
	// next is the next tick to hand out; limit is the exclusive end of the
	// committed reservation.
	next, limit uint64
	// clockHigh is the highest clock reading seen, in ticks. Under more
	// demand than the layout holds, next = max(last+1, now) runs ahead of
	// the clock; a request whose last tick would be more than maxLead
	// ahead of clockHigh is refused (ErrAhead) and its client backs off,
	// so IDs keep meaning their time. maxLead is two reserve windows (a
	// new leader starts up to one ahead, and nodes' clocks differ), at
	// least minMaxLead. Measuring from the highest reading, not the
	// current one, keeps a clock that steps back from refusing anything.
	clockHigh, maxLead uint64
	// inherited is the ceiling earlier leaders recorded (see
	// leadCeiling): a leader of a longer window, or whose clock ran
	// ahead, may have handed out up to it, so this one may too.
	inherited uint64
	// ceilingRecorded is whether a reservation of this serving period
	// recorded the ceiling (RecordsCeilings held when it was proposed):
	// until one did, RenewIfLow proposes one, so a leader that was
	// serving when the cluster version was raised records its ceiling
	// within a moment, not a renewal half a window away.
	ceilingRecorded bool
	// stretch is how far past what it had to cover the last reservation
	// reached; handed counts the ticks handed out since it was asked for.
	stretch, handed uint64
	// renewDone is non-nil while a reservation is being committed, and is
	// closed when that attempt ends.
	renewDone chan struct{}
	// serving is closed when the sequencer stops serving its term, to wake
	// requests that wait for a reservation.
	serving chan struct{}
	// batch collects requests that wait for the next confirmation; at
	// most rounds confirmations are in flight.
	batch  *confirmBatch
	rounds int
	// leaseUntil is when the lease ends, on leaseClock; 0: no lease.
	// leaseEpoch counts the times a lease was dropped (a new period, a
	// membership change, EndLease): a round's promises extend the lease
	// only in the epoch the round was asked in. leaseEnded stops rounds
	// from asking for one until the next Lead.
	leaseUntil time.Duration
	leaseEpoch uint64
	leaseEnded bool
	// leaseRounds counts the rounds in flight that ask for a lease, and
	// leaseRoundsIdle, when EndLease waits for them, is closed once none
	// is left.
	leaseRounds     int
	leaseRoundsIdle chan struct{}
	kick            chan struct{}
	stop            chan struct{}
	wg              sync.WaitGroup
}

type confirmBatch struct {
	term, period uint64
	// askLease: the round asks for a lease, to extend it in leaseEpoch.
	askLease   bool
	leaseEpoch uint64
	done       chan struct{}
	err        error
}

// minMaxLead is the least Sequencer.maxLead may be.
const minMaxLead = 10 * time.Second

// MaxLeadTicks is the lead bound, in ticks, of a sequencer with layout l
// and reserve window: a restore's margin and allowance, and the largest
// request, are measured with it too.
func MaxLeadTicks(l layout.Layout, window time.Duration) uint64 {
	return max(2*l.TicksIn(window), l.TicksIn(minMaxLead))
}

// leadCeiling is the last tick a leader may hand out: its own bound,
// maxLead past the highest clock reading it has seen (clockHigh), or the
// ceiling earlier leaders recorded (inherited), whichever is later.
//
// Each reservation records its leader's ceiling in the log, as a clock
// reading minLead below it (the log keeps the highest; minLead is the
// least bound any leader has), and a new leader inherits the highest. So
// a leader restarted with a shorter --reserve-window, whose own bound
// would be below a mark an earlier leader reserved under a longer one,
// serves at once, up to the ceiling that leader could reach anyway.
// Recording does not ratchet: a leader records max(own, inherited), and
// its own grows only with its clock, so the ceiling after any run of
// elections is at most the highest clockHigh+maxLead any leader had.
// Readings recorded by versions before the ceiling count alike (reading
// + minLead), as a leader of the default window counted them.
func leadCeiling(clockHigh, maxLead, inherited uint64) uint64 {
	return max(clockHigh+maxLead, inherited)
}

// renewRetryDelay spaces out reservation attempts that fail while this
// node still believes it leads, so a struggling log is not hammered.
const renewRetryDelay = 20 * time.Millisecond

// Lease is how long the lease is (0: off) and the clock it is counted on.
// The clock must be the one the voters count their promises on, so that
// both count the same time passing.
type Lease struct {
	Duration time.Duration
	Clock    func() time.Duration
}

// New returns a sequencer that reserves window ahead of clock and does
// not serve until Lead.
func New(l layout.Layout, window time.Duration, clock func() time.Time, log Log, logger hclog.Logger, lease Lease) *Sequencer {
	return newSequencer(l, window, clock, log, logger, defaultRounds, lease)
}

func newSequencer(l layout.Layout, window time.Duration, clock func() time.Time, log Log, logger hclog.Logger, rounds int, lease Lease) *Sequencer {
	s := &Sequencer{
		lease:      lease.Duration,
		leaseClock: lease.Clock,
		rounds:     rounds,
		maxLead:    MaxLeadTicks(l, window),
		layout:     l,
		window:     l.TicksIn(window),
		slack:      max(l.TicksIn(window)/64, 1),
		clock:      clock,
		log:        log,
		logger:     logger,
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		serving:    make(chan struct{}),
	}
	s.wg.Add(1)
	go s.confirmLoop()
	return s
}

// Close stops the sequencer; pending requests fail with ErrNotLeader.
func (s *Sequencer) Close() {
	s.StepDown()
	close(s.stop)
	s.wg.Wait()
}

// Lead makes the sequencer serve: it commits a fresh reservation above
// highWater (the replicated mark read after a Barrier) and starts handing
// out ticks from what that reservation found below it.
func (s *Sequencer) Lead(ctx context.Context, highWater uint64) error {
	now := s.layout.TickAt(s.clock())
	ceilings := s.recordsCeilings()
	s.mu.Lock()
	reading := s.recordedLocked(now, ceilings)
	s.mu.Unlock()
	res, err := s.log.Reserve(ctx, s.reach(highWater, now, s.slack), reading)
	if err != nil {
		return fmt.Errorf("commit first reservation: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopServingLocked()
	s.serving = make(chan struct{})
	s.period++
	// Tick 0 is never handed out, so 0 can mean "no ID" to clients.
	s.term, s.next, s.limit = res.Term, max(res.Prev, 1), res.HighWater
	s.stretch, s.handed = s.slack, 0
	s.leaseEnded = false
	// Earlier leaders' ceilings hold, so a clock behind theirs (skew, a
	// step back across a restart) or a shorter window does not make this
	// one refuse.
	s.clockHigh = max(s.clockHigh, now)
	s.ceilingRecorded = ceilings
	switch {
	case !s.recordsCeilings():
		// Readings are clock readings (a version before the ceiling may
		// lead): count them as seen, as that version does.
		s.clockHigh = max(s.clockHigh, res.ClockHigh)
	case res.ClockHigh > 0:
		s.inherited = max(s.inherited, res.ClockHigh+s.minLead())
	}
	if res.PrevClock == 0 {
		// The mark was set by a version that recorded no reading: count
		// it, as that version did, as a reading a window old.
		s.clockHigh = max(s.clockHigh, res.Prev-min(res.Prev, s.window))
	}
	s.logger.Info("serving", "term", res.Term, "from_tick", res.Prev, "reserved_to", res.HighWater, "clock_high", s.clockHigh)
	s.warnAheadLocked(now)
	return nil
}

// minLead is minMaxLead in ticks: the least bound any leader has.
func (s *Sequencer) minLead() uint64 { return s.layout.TicksIn(minMaxLead) }

// recordedLocked is the reading a reservation made now records: this
// leader's ceiling, minLead below it (leadCeiling), when the cluster
// records ceilings; else the clock reading, as versions before the
// ceiling record (see CeilingLog).
func (s *Sequencer) recordedLocked(now uint64, ceilings bool) uint64 {
	if !ceilings {
		return now
	}
	return leadCeiling(max(s.clockHigh, now), s.maxLead, s.inherited) - s.minLead()
}

// recordsCeilings reports whether the cluster records lead ceilings
// (CeilingLog); a Log that does not say records them.
func (s *Sequencer) recordsCeilings() bool {
	if c, ok := s.log.(CeilingLog); ok {
		return c.RecordsCeilings()
	}
	return true
}

// warnAheadLocked says, when a new leader inherits a mark past its own
// lead bound, what it does about it: serve up to the ceiling an earlier
// leader recorded, or wait for the clock. Never a silent outage.
func (s *Sequencer) warnAheadLocked(now uint64) {
	own := s.clockHigh + s.maxLead
	if s.next <= own {
		return
	}
	ceiling := leadCeiling(s.clockHigh, s.maxLead, s.inherited)
	ahead, bound := s.span(s.next-min(s.next, now)), s.span(s.maxLead)
	if s.next <= ceiling {
		s.logger.Warn("the cluster's mark leads this node's clock by more than its lead bound (a longer --reserve-window, or a leader whose clock ran ahead, reserved it): serving up to the ceiling the cluster recorded until the clock catches up",
			"mark_ahead", ahead, "lead_bound", bound, "ceiling_ahead", s.span(ceiling-min(ceiling, now)))
		return
	}
	s.logger.Error("the cluster's mark leads this node's clock past every lead bound the cluster recorded: calls are refused (ResourceExhausted) until the clock reaches it; restart the nodes with a longer --reserve-window to serve now",
		"mark_ahead", ahead, "lead_bound", bound)
}

// StepDown stops serving at once.
func (s *Sequencer) StepDown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopServingLocked()
}

// Serving reports whether the sequencer hands out ticks.
func (s *Sequencer) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.term != 0
}

// stepDownFrom stops serving if still in serving period; a newer Lead is
// kept, even in the same term.
func (s *Sequencer) stepDownFrom(period uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != 0 && s.period == period {
		s.stopServingLocked()
	}
}

// stopServingLocked ends the current term: waiting requests fail.
func (s *Sequencer) stopServingLocked() {
	s.term = 0
	s.dropLeaseLocked()
	select {
	case <-s.serving:
	default:
		close(s.serving)
	}
	if s.batch != nil {
		s.batch.err = ErrNotLeader
		close(s.batch.done)
		s.batch = nil
	}
}

// Ticket is a block of ticks assigned to one request, and the
// confirmation round it waits for. The ticks may be handed out only after
// Done is closed and Err is nil.
type Ticket struct {
	Block
	batch *confirmBatch // nil: nothing to wait for
}

// Part is a ticket for b, a part of t's ticks, that waits for t's round:
// a caller that serves several requests from one assignment hands each
// its part.
func (t Ticket) Part(b Block) Ticket {
	return Ticket{Block: b, batch: t.batch}
}

// closedChan is what Done returns for a ticket with nothing to wait for.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed when the ticket's confirmation round has ended.
func (t Ticket) Done() <-chan struct{} {
	if t.batch == nil {
		return closedChan
	}
	return t.batch.done
}

// Err is why the ticks must not be handed out, once Done is closed; nil
// means they are confirmed.
func (t Ticket) Err() error {
	if t.batch == nil {
		return nil
	}
	return t.batch.err
}

// Next hands out n consecutive ticks, confirmed by a quorum round that
// started after they were assigned.
func (s *Sequencer) Next(ctx context.Context, n uint64) (Block, error) {
	t, err := s.Assign(ctx, n)
	if err != nil {
		return Block{}, err
	}
	select {
	case <-t.Done():
	case <-ctx.Done():
		return Block{}, ctx.Err()
	}
	if err := t.Err(); err != nil {
		return Block{}, err
	}
	return t.Block, nil
}

// Assign assigns n consecutive ticks and enrolls them in the next
// confirmation round, without waiting for it: callers that pipeline (a
// stream) wait for many tickets at once. It waits only when the
// reservation is used up, for the next one to commit.
func (s *Sequencer) Assign(ctx context.Context, n uint64) (Ticket, error) {
	t, _, err := s.assign(ctx, n, true)
	return t, err
}

// AssignTracked assigns n consecutive ticks for a tracked reservation and
// returns the term they were assigned in. It starts no confirmation
// round: the settle entry that opens the reservation, proposed after the
// assignment and committed in that term, proves this node still led
// after it, as a round would (a majority accepted the entry in the term,
// so no newer leader had been elected before they did).
func (s *Sequencer) AssignTracked(ctx context.Context, n uint64) (Block, uint64, error) {
	t, term, err := s.assign(ctx, n, false)
	return t.Block, term, err
}

// Frontier is the next tick to hand out and the term served in (0 when
// not serving): every tick below it has been assigned.
func (s *Sequencer) Frontier() (next, term uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next, s.term
}

// Confirm returns once this node has proved it leads after the call, by a
// round (or the lease), as Next does for its ticks.
func (s *Sequencer) Confirm(ctx context.Context) error {
	s.mu.Lock()
	if s.term == 0 {
		s.mu.Unlock()
		return ErrNotLeader
	}
	t := Ticket{}
	if !s.leaseHoldsLocked() {
		t.batch = s.joinBatchLocked()
	}
	s.mu.Unlock()
	select {
	case <-t.Done():
		return t.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Vouch is what an entry this leader commits needs, besides its commit,
// before what it decided may be answered: nothing without the lease (a
// commit in this term proves that no newer leader had been elected; see
// AssignTracked), and with the lease a round, unless the lease holds;
// with the lease and not serving, a refusal.
// Under the lease, voters promise to answer no other leader's rounds, not
// to refuse its entries: a newer leader can commit while an older one
// still answers from its lease, so its commits prove nothing until its
// own round or lease does.
func (s *Sequencer) Vouch() Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lease == 0 || s.leaseHoldsLocked():
		return Ticket{}
	case s.term == 0:
		// Stepped down (a round failed): no round of this node can vouch
		// for anything until it leads again.
		return Ticket{batch: &confirmBatch{done: closedChan, err: ErrNotLeader}}
	}
	return Ticket{batch: s.joinBatchLocked()}
}

// Enroll enrolls ticks assigned from another reservation (a named
// sequence's window, package settle) in the next confirmation round, as
// Assign enrolls its own, and returns the term it confirms (0: not
// serving). Call it after assigning them: the round, or the lease check,
// must come after the assignment for the answer to be safe.
func (s *Sequencer) Enroll() (Ticket, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == 0 {
		return Ticket{}, 0
	}
	if s.leaseHoldsLocked() {
		return Ticket{}, s.term
	}
	return Ticket{batch: s.joinBatchLocked()}, s.term
}

func (s *Sequencer) assign(ctx context.Context, n uint64, confirm bool) (Ticket, uint64, error) {
	if n == 0 {
		return Ticket{}, 0, fmt.Errorf("%w: count 0", ErrBadCount)
	}

	s.mu.Lock()
	for {
		if s.term == 0 {
			s.mu.Unlock()
			return Ticket{}, 0, ErrNotLeader
		}
		now := s.layout.TickAt(s.clock())
		start := max(s.next, now)
		end := start + n
		if end-1 > s.layout.MaxTick() || end < start {
			s.mu.Unlock()
			return Ticket{}, 0, fmt.Errorf("%w: tick %d is past the layout's last tick %d", ErrTimeExhausted, end-1, s.layout.MaxTick())
		}
		if n-1 > s.maxLead {
			s.mu.Unlock()
			return Ticket{}, 0, fmt.Errorf("%w: count %d is more IDs than the lead bound holds (%d)", ErrBadCount, n, s.maxLead+1)
		}
		s.clockHigh = max(s.clockHigh, now)
		// The request's last tick, not its first, is bounded: so no
		// request, however large, carries the time field past the bound
		// that a restore's margin counts on.
		if ceiling := leadCeiling(s.clockHigh, s.maxLead, s.inherited); end-1 > ceiling {
			err := s.aheadErrLocked(start, end, ceiling)
			s.mu.Unlock()
			return Ticket{}, 0, err
		}
		if end <= s.limit {
			s.next = end
			s.handed += n
			if s.renewDone == nil && s.lowLocked(end, now) {
				s.renewLocked(end)
			}
			t := Ticket{Block: Block{First: start, Count: n}}
			// The lease is checked after the ticks were assigned: so
			// while it holds, no newer leader has answered anyone.
			if confirm && !s.leaseHoldsLocked() {
				t.batch = s.joinBatchLocked()
			}
			term := s.term
			s.mu.Unlock()
			return t, term, nil
		}
		done := s.renewDone
		if done == nil {
			done = s.renewLocked(end)
		}
		serving := s.serving
		s.mu.Unlock()
		select {
		case <-done:
		case <-serving:
		case <-ctx.Done():
			return Ticket{}, 0, ctx.Err()
		}
		s.mu.Lock()
	}
}

// aheadErrLocked is why a request for ticks [start, end) is refused past
// ceiling: the mark it starts from is already past it (inherited from a
// leader of a longer window, or one whose clock ran ahead), or the calls
// ask for more IDs than the layout hands out in time.
func (s *Sequencer) aheadErrLocked(start, end, ceiling uint64) error {
	if start > ceiling {
		return fmt.Errorf("%w: the cluster's mark is %s ahead of this leader's clock, past its lead bound of %s: it was reserved under a longer --reserve-window, or by a leader whose clock ran ahead; IDs resume when the clock catches up, or at once after a restart with a longer --reserve-window",
			ErrAhead, s.span(start-min(start, s.clockHigh)), s.span(ceiling-min(ceiling, s.clockHigh)))
	}
	return fmt.Errorf("%w: the last ID asked for is %s ahead of this leader's clock, the most allowed is %s; more IDs are asked for than the layout's %d per second",
		ErrAhead, s.span(end-1-s.clockHigh), s.span(ceiling-min(ceiling, s.clockHigh)), s.layout.TicksIn(time.Second))
}

// TimestampLead is how far the time field of the last tick handed out is
// ahead of the clock now (negative when behind, as after an idle spell);
// 0 when not serving. Under more demand than the layout holds it grows,
// up to maxLead.
func (s *Sequencer) TimestampLead() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == 0 || s.next <= 1 {
		return 0
	}
	last, now := s.next-1, s.layout.TickAt(s.clock())
	if last >= now {
		return s.span(last - now)
	}
	return -s.span(now - last)
}

// LeaseLeft is how long the lease still holds; 0 when there is none.
func (s *Sequencer) LeaseLeft() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leaseHoldsLocked() {
		return 0
	}
	return s.leaseUntil - s.leaseClock()
}

// State is a snapshot of where the sequencer stands: a backup records its
// lead bound, and tests drive a node up to it.
type State struct {
	// Next is the next tick to hand out, before the clock is counted.
	Next uint64
	// ClockHigh is the highest clock reading seen, in ticks, and MaxLead
	// the lead bound: no tick past ClockHigh+MaxLead is handed out.
	ClockHigh, MaxLead uint64
}

// State returns where the sequencer stands now.
func (s *Sequencer) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{Next: s.next, ClockHigh: s.clockHigh, MaxLead: leadCeiling(s.clockHigh, s.maxLead, s.inherited) - s.clockHigh}
}

// span is the time ticks cover, to the layout's time unit.
func (s *Sequencer) span(ticks uint64) time.Duration {
	return time.Duration(ticks>>s.layout.SeqBits) * time.Duration(s.layout.UnitMs) * time.Millisecond
}

// RenewIfLow starts a background renewal when the reservation runs low
// (see lowLocked), so that a leader that was idle still answers its next
// request without waiting for a commit.
func (s *Sequencer) RenewIfLow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == 0 || s.renewDone != nil {
		return
	}
	now := s.layout.TickAt(s.clock())
	if from := max(s.next, now); s.lowLocked(from, now) || !s.ceilingRecorded && s.recordsCeilings() {
		s.renewLocked(from)
	}
}

// lowLocked reports whether the reservation should be renewed, with from
// the first tick not yet handed out: when less than half a window of it
// is left past the clock, or less than half the stretch past from.
// Renewing at half of what reach reserves leaves the other half to serve
// from while the commit is under way.
func (s *Sequencer) lowLocked(from, now uint64) bool {
	return s.limit < now+s.window/2 || s.limit < from+s.stretch/2
}

// reach is how far a reservation that must cover the ticks below need
// reaches: a window past the clock, or stretch past need.
func (s *Sequencer) reach(need, now, stretch uint64) uint64 {
	return max(now+s.window, need+stretch)
}

// renewLocked commits, in the background, a reservation that covers at
// least the ticks below need (see reach).
func (s *Sequencer) renewLocked(need uint64) chan struct{} {
	done := make(chan struct{})
	s.renewDone = done
	term, period := s.term, s.period
	now := s.layout.TickAt(s.clock())
	// Renewals start at half the stretch, so demand that keeps up hands
	// out about half of it in between: four times that doubles it.
	s.stretch = min(max(s.slack, 4*s.handed), s.window)
	s.handed = 0
	upTo := s.reach(max(need, s.next), now, s.stretch)
	ceilings := s.recordsCeilings()
	reading := s.recordedLocked(now, ceilings)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		res, err := s.log.Reserve(context.Background(), upTo, reading)
		if err != nil {
			s.logger.Warn("reservation failed", "up_to", upTo, "error", err)
			time.Sleep(renewRetryDelay)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		switch {
		case err != nil:
		case s.term == 0 || s.period != period:
			// Leadership changed meanwhile; Lead set new bounds.
		case res.Term != term:
			// Appended in another term: this node lost leadership and
			// may have won it again. It must not trust its old state.
			s.logger.Warn("reservation committed in another term; stepping down", "want", term, "got", res.Term)
			s.stopServingLocked()
		default:
			s.limit = max(s.limit, res.HighWater)
			s.ceilingRecorded = s.ceilingRecorded || ceilings
		}
		s.renewDone = nil
		close(done)
	}()
	return done
}

// leaseMargin is what a leader takes off a promise of d for clock drift
// and for the time between reading its clock and sending the round: the
// lease's argument (package leadership) assumes no node's clock runs more
// than a tenth slower than another's over one lease.
func leaseMargin(d time.Duration) time.Duration { return d / 10 }

// leaseHoldsLocked reports whether this leader may answer from memory.
func (s *Sequencer) leaseHoldsLocked() bool {
	return s.leaseUntil != 0 && s.leaseClock() < s.leaseUntil
}

// dropLeaseLocked ends the lease; rounds asked before it cannot bring it
// back.
func (s *Sequencer) dropLeaseLocked() {
	s.leaseUntil = 0
	s.leaseEpoch++
}

// DropLease ends the lease until the next round: the leader calls it
// before it changes the membership, so the lease is always counted in the
// newest configuration or the one before it.
func (s *Sequencer) DropLease() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLeaseLocked()
}

// EndLease ends the lease and asks for none until the next Lead: the
// leader calls it before it hands leadership over, and then releases the
// voters' promises. It keeps serving, with a round per request.
//
// It returns only once every round that asks for a lease has ended. A
// round decides to ask before Log.Confirm numbers it, so without the wait
// one could be numbered after the caller's release, and the voters, who
// refuse only rounds numbered before a release, would promise it: the
// next leader would wait those promises out. The wait is as long as a
// round, which ends by itself (see Log). It is safe: the lease ends
// before it, so nothing is served from memory meanwhile, and a round
// that ends after it cannot bring the lease back (extendLease).
func (s *Sequencer) EndLease() {
	s.mu.Lock()
	s.dropLeaseLocked()
	s.leaseEnded = true
	var idle chan struct{}
	if s.leaseRounds > 0 {
		if s.leaseRoundsIdle == nil {
			s.leaseRoundsIdle = make(chan struct{})
		}
		idle = s.leaseRoundsIdle
	}
	s.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-time.After(time.Second):
		s.logger.Info("ending the lease: waiting for the rounds that asked for one to end before the promises are released")
		<-idle
	}
}

// ResumeLease undoes EndLease when the hand-over failed and this node
// still leads: rounds ask for a lease again.
func (s *Sequencer) ResumeLease() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseEnded = false
}

func (s *Sequencer) joinBatchLocked() *confirmBatch {
	if s.batch == nil {
		s.batch = &confirmBatch{term: s.term, period: s.period, done: make(chan struct{}),
			askLease: s.lease > 0 && !s.leaseEnded, leaseEpoch: s.leaseEpoch}
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return s.batch
}

// defaultRounds bounds the confirmation rounds in flight at once. With one
// round at a time, requests that arrive during a round wait for it to end
// and then for a round of their own; a second round lets them start at
// once. More add CPU per request and little else: the rounds are short.
// Each round is sent after every request it confirms was assigned, so
// rounds need no order among themselves.
const defaultRounds = 2

// confirmLoop starts a round for the requests that wait for one, up to
// s.rounds at a time; requests that arrive while no round can start
// share the next one. Every request in a batch was assigned before the
// batch was taken, so before its round was sent.
func (s *Sequencer) confirmLoop() {
	defer s.wg.Done()
	slots := make(chan struct{}, s.rounds)
	var rounds sync.WaitGroup
	defer rounds.Wait()
	var renew <-chan time.Time
	if s.lease > 0 {
		t := time.NewTicker(s.lease / 4)
		defer t.Stop()
		renew = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-renew:
			s.renewLease()
			continue
		case <-s.kick:
		}
		select {
		case slots <- struct{}{}:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		b := s.batch
		s.batch = nil
		s.mu.Unlock()
		if b == nil {
			<-slots
			continue
		}
		rounds.Add(1)
		go func() {
			defer rounds.Done()
			s.confirm(b)
			<-slots
			// Requests may have queued while every slot was taken.
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}()
	}
}

// confirm runs b's round and ends the batch.
func (s *Sequencer) confirm(b *confirmBatch) {
	var sent time.Duration
	if b.askLease {
		sent = s.leaseClock() // before any promise was made
		// A lease ended since the batch was taken is not asked for
		// again: its promises would hold the next leader back. A round
		// that asks is counted until it ends, for EndLease.
		s.mu.Lock()
		b.askLease = !s.leaseEnded && s.leaseEpoch == b.leaseEpoch
		if b.askLease {
			s.leaseRounds++
		}
		s.mu.Unlock()
	}
	c, err := s.log.Confirm(context.Background(), b.askLease)
	if b.askLease {
		s.mu.Lock()
		s.leaseRounds--
		if s.leaseRounds == 0 && s.leaseRoundsIdle != nil {
			close(s.leaseRoundsIdle)
			s.leaseRoundsIdle = nil
		}
		s.mu.Unlock()
	}
	switch {
	case err != nil:
		b.err = fmt.Errorf("%w: confirm leadership: %w", ErrNotLeader, err)
	case c.Term != b.term:
		b.err = fmt.Errorf("%w: confirmed in term %d, IDs assigned in term %d", ErrNotLeader, c.Term, b.term)
	}
	if b.err != nil {
		s.logger.Warn("leadership not confirmed; stepping down", "term", b.term, "error", b.err)
		s.stepDownFrom(b.period)
	} else if b.askLease && c.Lease > 0 {
		s.extendLease(b, sent+c.Lease-leaseMargin(c.Lease))
	}
	close(b.done)
}

// extendLease makes the lease last until `until`, if b was asked in the
// current serving period and lease epoch.
func (s *Sequencer) extendLease(b *confirmBatch, until time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != 0 && s.period == b.period && s.leaseEpoch == b.leaseEpoch && !s.leaseEnded {
		s.leaseUntil = max(s.leaseUntil, until)
	}
}

// renewLease starts a round when the lease is on and less than half of it
// is left, so that a leader under steady load never falls back to a round
// per request. Idle leaders renew too: the first request after a quiet
// spell is then answered at once.
func (s *Sequencer) renewLease() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term == 0 || s.lease == 0 || s.leaseEnded {
		return
	}
	if s.leaseUntil == 0 || s.leaseUntil-s.leaseClock() < s.lease/2 {
		s.joinBatchLocked()
	}
}
