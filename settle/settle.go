// Package settle runs the leader's side of tracked reservations and the
// settled mark W (docs/design.md, "Settled order").
//
// Every decision about a reservation is committed before it is answered:
// the Settler gathers the calls that arrive together (Reserve, Complete,
// Abandon, Extend, and the expiries that fall due) into one OpSettle
// entry, and the FSM decides each from the replicated state, in log
// order (package fsm, tracking.go). So a retry, on this leader or the
// next, reads the same fate; an expiry and a completion of one
// reservation are ordered by the log, and the second reads the first's
// result; and W, which the FSM computes, is the same on every node.
//
// Only this loop assigns tracked ticks, and it reads the sequencer's next
// tick (the entry's frontier) after assigning them: every tracked
// reservation below the frontier is opened by this entry or an earlier
// one, so W, which never passes the frontier, never passes a reservation
// that could still open.
//
// A named sequence's reservations go through this loop too, and their
// IDs are assigned by the FSM from the sequence's mark in the entry that
// opens them (fsm/seqtracking.go): each named sequence has its own W,
// which a reservation of another sequence never holds back. Deadlines
// are kept per (sequence, first ID), and MaxOpen bounds the open
// reservations of every sequence together.
//
// Expiry is judged here, on the leader's monotonic clock, and only
// proposed: a reservation expires when the log says so. A leader counts
// each open reservation's TTL from when it applied the opening or the
// last extension, or from when it began to lead, whichever is later; so a
// new leader gives every open reservation its full TTL again, and clocks
// of different nodes are never compared. That costs at most one TTL of W
// after a leader change, and never expires a reservation early.
package settle

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// Errors of the Settler. Package grpcapi maps them to gRPC codes.
var (
	// ErrTooManyOpen means the open reservations reached Config.MaxOpen.
	ErrTooManyOpen = errors.New("too many open reservations")
	// ErrTTL means a TTL above Config.MaxTTL.
	ErrTTL = errors.New("reservation TTL too long")
	// ErrExpired means the reservation expired: its IDs must not be
	// published.
	ErrExpired = errors.New("reservation expired: do not publish these IDs")
	// ErrAbandoned means the reservation was abandoned: its IDs must not
	// be published.
	ErrAbandoned = errors.New("reservation abandoned: do not publish these IDs")
	// ErrCompleted means a completed reservation was abandoned or
	// extended.
	ErrCompleted = errors.New("reservation already completed")
	// ErrUnknown means no reservation has the handle's ticks.
	ErrUnknown = errors.New("no such reservation")
	// ErrClusterVersion means the cluster's version does not allow
	// tracked reservations yet (fsm.SettleVersion).
	ErrClusterVersion = errors.New("the cluster's version does not allow tracked reservations yet")
)

// IDs is the leader's sequencer (*sequencer.Sequencer).
type IDs interface {
	AssignTracked(ctx context.Context, n uint64) (sequencer.Block, uint64, error)
	Frontier() (next, term uint64)
	Confirm(ctx context.Context) error
	// Vouch is what an entry's answers wait for besides its commit (a
	// round under the lease; see sequencer.Sequencer.Vouch).
	Vouch() sequencer.Ticket
	// Enroll is the round a window's ticks wait for, and its term.
	Enroll() (sequencer.Ticket, uint64)
}

// Log commits settle entries. Entries enter the log in the order Settle
// is called; the Pending's Result waits for the entry to apply.
type Log interface {
	Settle(c fsm.Command) Pending
}

// Pending is a proposed entry.
type Pending interface {
	Result() (fsm.Result, error)
}

// State is the replicated state (*fsm.FSM).
type State interface {
	Tracked() fsm.Tracking
	// Marks is W and the tracked frontier, in ticks.
	Marks() (settled, frontier uint64)
	ClusterVersion() int
	// Sequence is a named sequence as the state holds it.
	Sequence(name string) (fsm.Sequence, bool)
	// SequenceSettled is a named sequence's W; ok is false when no
	// sequence has the name.
	SequenceSettled(name string) (w uint64, ok bool)
	// TrackedSequences is every named sequence's tracked reservations.
	TrackedSequences() map[string]fsm.Tracking
}

// Config bounds the Settler.
type Config struct {
	// DefaultTTL is a reservation's TTL when the call names none.
	DefaultTTL time.Duration
	// MaxTTL bounds every TTL; MaxOpen the open reservations.
	MaxTTL  time.Duration
	MaxOpen int
	// Wall is the wall clock whose reading a layout sequence's
	// allocation carries (the node's, with its test offset); nil means
	// time.Now. TTLs are counted on the monotonic clock, not on it.
	Wall func() time.Time
	// Window is how far ahead of the clock a named layout sequence's
	// window reaches (windows.go).
	Window time.Duration
}

// Defaults.
const (
	DefaultTTL     = 30 * time.Second
	DefaultMaxTTL  = time.Hour
	DefaultMaxOpen = 100_000
	// MinTTL and TTLLimit bound DefaultTTL and MaxTTL: a writer that
	// vanished holds the settled mark back for its TTL.
	MinTTL   = time.Millisecond
	TTLLimit = 24 * time.Hour
	// OpenLimit bounds MaxOpen.
	OpenLimit = 10_000_000
	// inFlight bounds the settle entries proposed and not yet applied:
	// while one commits, the next gathers the calls that arrive.
	inFlight = 2
	// retryDelay spaces out the expiries of an entry that failed.
	retryDelay = 20 * time.Millisecond
	// maxBatch bounds the calls one entry carries.
	maxBatch = 4096
	// maxWindow bounds Config.Window.
	maxWindow = 4 * time.Second
)

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.DefaultTTL == 0 {
		c.DefaultTTL = DefaultTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.MaxOpen == 0 {
		c.MaxOpen = DefaultMaxOpen
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	return c
}

// wall is the clock layout sequences follow.
func (s *Settler) wall() time.Time {
	if s.cfg.Wall != nil {
		return s.cfg.Wall()
	}
	return s.clock()
}

// Validate checks the bounds of a Config with its defaults filled.
func (c Config) Validate() error {
	switch {
	case c.MaxTTL < MinTTL || c.MaxTTL > TTLLimit:
		return fmt.Errorf("maximum reservation TTL %s: want %s to %s (an abandoned writer holds the settled mark back that long)", c.MaxTTL, MinTTL, TTLLimit)
	case c.DefaultTTL < MinTTL || c.DefaultTTL > c.MaxTTL:
		return fmt.Errorf("default reservation TTL %s: want %s to the maximum TTL %s", c.DefaultTTL, MinTTL, c.MaxTTL)
	case c.MaxOpen < 1 || c.MaxOpen > OpenLimit:
		return fmt.Errorf("maximum open reservations %d: want 1 to %d", c.MaxOpen, OpenLimit)
	case c.Window < time.Millisecond || c.Window > maxWindow:
		// A window reaches from the mark, which may itself lead the
		// clock by one window: two stay within the FSM's lead bound.
		return fmt.Errorf("named sequence window %s: want 1ms to %s", c.Window, maxWindow)
	}
	return nil
}

// Settler is the leader's side of tracked reservations.
type Settler struct {
	cfg    Config
	ids    IDs
	log    Log
	state  State
	logger hclog.Logger
	clock  func() time.Time

	queue   chan *request
	flights chan flight
	wake    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	leading bool
	// term is the Raft term the Settler began to lead in.
	term uint64
	// clocks holds each open reservation's deadline, as this leader
	// counts it, by sequence and first ID; due is the same as a heap,
	// with stale entries skipped.
	clocks map[resKey]deadline
	due    deadlines
	// armed is the deadline the loop's timer was last set for (zero: none
	// known, the timer sleeps an hour).
	armed   time.Time
	opening int // Opens proposed and not yet applied
	// w is the highest W this node has seen applied, seqW each named
	// sequence's that an entry touched; changed is closed and replaced
	// when one rises.
	w       uint64
	seqW    map[string]uint64
	changed chan struct{}
	stats   Stats

	// current is the term Lead last ran in (0: stepped down): every entry
	// committed before it was applied then.
	current atomic.Uint64

	// wmu guards the named sequences' windows, which serve windowTerm
	// (0: none, not leading).
	wmu        sync.Mutex
	windows    map[string]*window
	windowTerm uint64
	// soon holds the windows calls found within three quarters of a
	// window of the clock since their last refill (windows.go).
	soon []soonWindow
}

// Stats counts what the Settler decided while leading.
type Stats struct {
	Open                int
	Expired, Abandoned  uint64
	Completed, Reserved uint64
}

type deadline struct {
	at    time.Time
	seq   string // "" for the default sequence
	first uint64
	count uint64
	ext   uint64
}

// resKey names a reservation: its sequence and first ID (the first ID
// alone is not enough: two sequences may hand out equal values).
type resKey struct {
	seq   string
	first uint64
}

func (d deadline) key() resKey { return resKey{d.seq, d.first} }

// New returns a Settler; it serves once Lead is called.
func New(cfg Config, ids IDs, log Log, state State, logger hclog.Logger) (*Settler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Settler{
		cfg: cfg, ids: ids, log: log, state: state, logger: logger, clock: time.Now,
		queue:   make(chan *request, maxBatch),
		flights: make(chan flight, inFlight),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		clocks:  map[resKey]deadline{},
		seqW:    map[string]uint64{},
		changed: make(chan struct{}),
		windows: map[string]*window{},
	}
	s.wg.Add(2)
	go s.run()
	go s.results()
	return s, nil
}

// Close stops the Settler; waiting calls fail.
func (s *Settler) Close() {
	s.StepDown()
	close(s.stop)
	s.wg.Wait()
}

// Lead starts serving, after the sequencer leads and every earlier entry
// is applied: every open reservation gets its full TTL from now.
func (s *Settler) Lead() {
	tk := s.state.Tracked()
	named := s.state.TrackedSequences()
	now := s.clock()
	_, term := s.ids.Frontier()
	s.resetWindows(term)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leading && term == s.term {
		// The sequencer led again in the same term (after a failed
		// round): the deadlines stand, or a flapping round would give
		// every open reservation its full TTL again and again.
		s.publishLocked(tk.Settled, nil)
		return
	}
	s.leading, s.term = true, term
	s.current.Store(term)
	s.clocks, s.due = map[resKey]deadline{}, nil
	for first, o := range tk.Open {
		s.setDeadlineLocked(deadline{at: now.Add(ms(o.TTLMs)), first: first, count: o.Count, ext: o.Ext})
	}
	for seq, t := range named {
		for first, o := range t.Open {
			s.setDeadlineLocked(deadline{at: now.Add(ms(o.TTLMs)), seq: seq, first: first, count: o.Count, ext: o.Ext})
		}
	}
	s.publishLocked(tk.Settled, nil)
	s.wakeUp()
}

// Current reports whether this node's state answers for the cluster: it
// leads, and Lead ran in the sequencer's term, so every entry committed
// before the term is applied (and every one since, by this leader, before
// it was answered). A new leader's state may lack what earlier terms did
// until then: what it does not find there, it cannot tell is not so.
func (s *Settler) Current() bool {
	_, term := s.ids.Frontier()
	return term != 0 && s.current.Load() == term
}

// StepDown stops serving: queued calls fail, and the deadlines are
// forgotten (the next leader counts its own).
func (s *Settler) StepDown() {
	s.current.Store(0)
	s.resetWindows(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = false
	s.clocks, s.due = map[resKey]deadline{}, nil
}

// Watch returns W as this node last saw it applied, and a channel closed
// when it rises.
func (s *Settler) Watch() (uint64, <-chan struct{}) {
	return s.WatchOf("")
}

// WatchOf is Watch for sequence seq ("" the default): its W as this
// node last saw an entry it committed raise it (0 when none did), and a
// channel closed when any sequence's W rises.
func (s *Settler) WatchOf(seq string) (uint64, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq == "" {
		return s.w, s.changed
	}
	return s.seqW[seq], s.changed
}

// Stats returns the counts.
func (s *Settler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Open = len(s.clocks)
	return st
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// setDeadlineLocked sets a reservation's deadline, and wakes the loop if
// it falls before the loop's timer: the loop set its timer before the
// entry that sets this deadline applied, and would sleep past it (up to
// an hour) unless another call came.
func (s *Settler) setDeadlineLocked(d deadline) {
	s.clocks[d.key()] = d
	heap.Push(&s.due, d)
	if len(s.due) > 2*len(s.clocks)+1024 {
		// Closed and extended ones leave stale entries that only the
		// head drops: behind one long reservation they would pile up.
		s.due = s.due[:0]
		for _, d := range s.clocks {
			s.due = append(s.due, d)
		}
		heap.Init(&s.due)
	}
	if s.armed.IsZero() || d.at.Before(s.armed) {
		s.wakeUp()
	}
}

// publishLocked raises the default sequence's W to w and each named
// one's to named's, and tells the watchers when one rose.
func (s *Settler) publishLocked(w uint64, named map[string]uint64) {
	rose := w > s.w
	s.w = max(s.w, w)
	for seq, v := range named {
		if v > s.seqW[seq] {
			s.seqW[seq], rose = v, true
		}
	}
	if rose {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *Settler) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// deadlines is a min-heap of deadlines by time.
type deadlines []deadline

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlines) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlines) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlines) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

// dueLocked pops the reservations whose deadline passed by now, as
// Expires, and the time the next one falls due (zero if none).
func (s *Settler) dueLocked(now time.Time) ([]fsm.Track, time.Time) {
	var out []fsm.Track
	for s.due.Len() > 0 {
		d := s.due[0]
		if cur, ok := s.clocks[d.key()]; !ok || cur != d {
			heap.Pop(&s.due) // closed, or extended since pushed
			continue
		}
		if d.at.After(now) {
			s.armed = d.at
			return out, d.at
		}
		heap.Pop(&s.due)
		delete(s.clocks, d.key())
		out = append(out, fsm.Track{Do: fsm.DoExpire, Seq: d.seq, First: d.first, Count: d.count, Ext: d.ext})
	}
	s.armed = time.Time{}
	return out, time.Time{}
}
