package settle

// Named layout sequences served from memory.
//
// A layout sequence owes no density, so the leader serves it as it serves
// the default sequence: from a window, a limit committed through the log
// (an Alloc that raised the sequence's mark to it), with a cursor below
// it. A call takes ticks from max(cursor, clock) below the limit, then
// waits for the confirmation round (or the lease) that every call of
// every sequence shares. Why that keeps the promise:
//   - Unique: everything handed out is below the mark the log holds. A
//     window's cursor starts at or above the first tick its own Alloc got,
//     and that Alloc started at or above the mark, so above everything
//     any leader handed out before it. A refill that starts where the
//     window ends extends it (the ticks left below are still its own);
//     one that starts above lifts the cursor to its first.
//   - Ordered within a leader: the cursor only rises, and a committed
//     Alloc of the sequence (a keyed call, which the log decides) lifts
//     it past its IDs before that call is answered.
//   - Ordered across leaders: a window serves only in the term it was
//     committed in (the map of windows is new in every term), and each
//     answer waits for a round sent after its ticks were assigned. A call
//     that began after a newer leader answered finds this leader's round
//     refused; a newer leader hands out only from windows it committed
//     itself, after this one's limits.
//
// A window is asked for when a call finds none that serves it, and again
// ahead of need (when the clock is less than half a window from its
// limit) while calls come, so
// a sequence nobody calls commits nothing, and a window reaches at most
// Config.Window ahead of the clock beyond its mark, within the FSM's lead
// bound.

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// window is one named layout sequence's reservation on this leader.
type window struct {
	// next is the cursor: every tick below it may have been handed out.
	// limit bounds what may be: the sequence's mark was committed at or
	// above it.
	next, limit uint64
	// refill is the Alloc in flight that raises limit; nil, or finished,
	// when none is.
	refill *request
	// soon: the window is in Settler.soon.
	soon bool
}

// soonWindow is a window that calls use and that will soon need a
// refill, with its sequence as its last call read it.
type soonWindow struct {
	name string
	w    *window
	seq  fsm.Sequence
}

// Ask is one call for IDs of a named sequence, or a keyed call of the
// default sequence (Name empty).
type Ask struct {
	Name string
	// Seq is the sequence's definition as the caller read it, live (a
	// stream message's calls point into one read of the state).
	Seq   *fsm.Sequence
	Count uint64
	Key   fsm.Keyed
}

// Grant is what an Ask got: IDs of its sequence from the first, once Done
// is closed and Result's error is nil.
type Grant struct {
	// From a window: the first tick, the term the window served, and
	// the round it waits for.
	first, term uint64
	ticket      sequencer.Ticket
	// Committed: the call the log decides.
	req *request
	// err: refused before it began.
	err error
}

// Decided is a grant whose result is known: first, or err.
func Decided(first uint64, err error) Grant {
	return Grant{first: first, err: err}
}

// Done is closed once Result is known.
func (g Grant) Done() <-chan struct{} {
	if g.req != nil && g.err == nil {
		return g.req.done
	}
	return g.ticket.Done()
}

// Result is the first ID (a value or a tick) of the grant, or why it must
// not be handed out. Only once Done is closed.
func (g Grant) Result() (uint64, error) {
	switch {
	case g.err != nil:
		return 0, g.err
	case g.req == nil:
		return g.first, g.ticket.Err()
	case g.req.err != nil:
		return 0, g.req.err
	}
	return g.req.allocated.First, g.req.allocated.Err
}

// Grants starts the asks and returns at once with what each waits for; it
// waits itself only for a window to commit, as the default sequence
// waits for a reservation. A dense sequence's call, and a keyed call, is
// decided in the log; an unkeyed call of a layout sequence is served from
// its window, and every such call of the asks waits for one round.
func (s *Settler) Grants(ctx context.Context, asks []Ask) []Grant {
	grants := make([]Grant, len(asks))
	if err := s.keysVersion(); err != nil {
		for i := range grants {
			grants[i].err = err
		}
		return grants
	}
	windowed := false // whether any ask is served from a window, unkeyed
	var claimed []int // the keyed ones
	var claims []*request
	for i := range asks {
		a := &asks[i]
		switch {
		case a.Name == "":
			// A keyed call of the default sequence: Claim's.
			r := &request{count: a.Count, claim: &a.Key}
			grants[i] = Grant{req: r, err: s.enqueue(ctx, r)}
			continue
		case a.Seq.Layout == nil:
			r := &request{alloc: &fsm.Alloc{Seq: a.Name, Count: a.Count, Keyed: a.Key}}
			grants[i] = Grant{req: r, err: s.enqueue(ctx, r)}
			continue
		}
	}
	// Every window's call under one lock and one clock reading. The calls
	// whose windows must commit first wait for all those refills at once,
	// which share an entry (a burst on many cold sequences costs one
	// commit, not one each), and take again.
	var waiting []int
	for i := range asks {
		if asks[i].Name != "" && asks[i].Seq.Layout != nil {
			waiting = append(waiting, i)
		}
	}
	for len(waiting) > 0 {
		wall := s.wall()
		again, refills := waiting[:0], []*request(nil)
		s.wmu.Lock()
		for _, i := range waiting {
			a := &asks[i]
			first, term, wait := s.takeLocked(a, wall)
			switch {
			case wait != nil:
				again, refills = append(again, i), append(refills, wait)
			case first == 0:
				grants[i].err = sequencer.ErrNotLeader
			case a.Key.Key != "":
				// Keyed: its window's ticks are claimed under the key in
				// the log, as the default sequence's are, and answered
				// once that commits in the window's term (no round: the
				// commit proves this leader; under the lease, the vouch).
				claimed = append(claimed, i)
				claims = append(claims, &request{claim: &a.Key, seq: a.Name, count: a.Count, block: sequencer.Block{First: first, Count: a.Count}, term: term})
			default:
				grants[i].first, grants[i].term = first, term
				windowed = true
			}
		}
		s.wmu.Unlock()
		waiting = again[:0]
		for k, i := range again {
			if err := s.waitRefill(ctx, refills[k]); err != nil {
				grants[i].err = err
				continue
			}
			waiting = append(waiting, i)
		}
	}
	for k, i := range claimed {
		grants[i] = Grant{req: claims[k], err: s.enqueue(ctx, claims[k])}
	}
	if !windowed {
		return grants
	}
	// After every assignment: the round, or the lease check, proves this
	// node led in the term it confirms after the ticks were assigned.
	t, now := s.ids.Enroll()
	for i := range grants {
		if grants[i].term == 0 {
			continue // not from a window, or failed
		}
		grants[i].ticket = t
		if grants[i].term != now {
			// A window of another term: nothing proves no newer leader
			// answered from above it meanwhile. Its ticks are a gap.
			grants[i].err = fmt.Errorf("%w: the window of %q serves term %d, this node serves term %d", sequencer.ErrNotLeader, asks[i].Name, grants[i].term, now)
		}
	}
	return grants
}

// takeLocked assigns a's ticks from its sequence's window, read at wall,
// and returns the first and the term the window serves; or, when the
// window cannot serve them, the refill to wait for (nil: this node does
// not lead).
func (s *Settler) takeLocked(a *Ask, wall time.Time) (first, term uint64, wait *request) {
	l := a.Seq.Layout
	span := l.TicksIn(s.cfg.Window)
	w := s.windows[a.Name]
	if w == nil {
		w = &window{}
		s.windows[a.Name] = w
	}
	now := l.TickAt(wall)
	first = max(w.next, now, 1)
	end := first + a.Count
	if end > first && end <= w.limit {
		w.next = end
		switch {
		case w.limit < now+span/2:
			// Less than half a window of clock is left: ask for the next
			// ahead. On the clock, not on the ticks left: a mark that
			// leads the clock (a leader whose clock is behind) is used
			// up by calls only, and asking ahead at every call would
			// carry it away to the lead bound. Every window that will
			// soon need one gets it in the same entry.
			s.refillLocked(a.Name, w, reach(0, max(a.Seq.Next, w.limit), now, a.Seq.ClockHigh, span))
			s.refillSoonLocked(wall)
		case w.limit < now+3*span/4 && !w.soon && !refilling(w):
			w.soon = true
			s.soon = append(s.soon, soonWindow{name: a.Name, w: w, seq: *a.Seq})
		}
		return first, s.windowTerm, nil
	}
	return 0, 0, s.refillLocked(a.Name, w, reach(a.Count, max(a.Seq.Next, w.limit), now, a.Seq.ClockHigh, span))
}

// refillSoonLocked refills, ahead of need, every window that calls found
// within three quarters of a window of the clock since its last refill:
// busy sequences, whose windows would each be due at another moment,
// share one entry every fraction of a window instead of one entry each
// (at a thousand busy sequences, hundreds a second). A window nobody
// calls is never among them.
func (s *Settler) refillSoonLocked(wall time.Time) {
	for _, sw := range s.soon {
		sw.w.soon = false
		l := sw.seq.Layout
		now, span := l.TickAt(wall), l.TicksIn(s.cfg.Window)
		if sw.w.limit >= now+3*span/4 {
			// Refilled since (a call that did not fit): no call found
			// it close to its end since its last refill.
			continue
		}
		s.refillLocked(sw.name, sw.w, reach(0, max(sw.seq.Next, sw.w.limit), now, sw.seq.ClockHigh, span))
	}
	clear(s.soon)
	s.soon = s.soon[:0]
}

// refilling reports whether w's refill is in flight.
func refilling(w *window) bool { return w.refill != nil && !isDone(w.refill.done) }

// waitRefill waits for a window's Alloc to apply: nil when it raised the
// window, else why not.
func (s *Settler) waitRefill(ctx context.Context, r *request) error {
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return sequencer.ErrNotLeader
	}
	if r.err != nil {
		return r.err
	}
	return r.allocated.Err
}

// reach is how many ticks a window's Alloc asks for: up to span past the
// clock (now), from mark, the sequence's mark as this leader last saw it,
// where the Alloc will start unless the clock is past it; at least need.
// When the mark already leads the clock by a span or more (after leader
// changes, each of whose first window starts at the mark; or reservations
// and keyed allocs decided at the mark between the window's calls), a
// sixteenth of a span, so its windows still serve many calls, but never
// past two spans ahead of the clock: there, need alone, so nothing but
// calls moves the mark and it stays far inside the FSM's lead bound.
// The clock of that cap is the later of now and seen, the highest
// reading the sequence has seen (Sequence.ClockHigh), from which the FSM
// counts its bound: a leader whose clock is behind an earlier leader's
// (or stepped back) still gets windows that serve many calls, where
// windows of one call's need would make every call wait for a commit of
// its own until its clock caught up.
func reach(need, mark, now, seen, span uint64) uint64 {
	from := max(mark, now)
	want := span / 16
	if now+span > from {
		want = max(want, now+span-from)
	}
	if capAt := max(now, seen) + 2*span; from+want > capAt {
		want = 0
		if capAt > from {
			want = capAt - from
		}
	}
	return max(need, want, 1)
}

// refillLocked starts an Alloc of n ticks that raises w's limit, unless
// one is in flight, and returns the one in flight; nil when this node
// does not lead. A refill is queued with the calls, so it shares their
// entry; it holds no caller's context, which a window would keep.
func (s *Settler) refillLocked(name string, w *window, n uint64) *request {
	if refilling(w) {
		return w.refill
	}
	if s.windowTerm == 0 {
		return nil
	}
	r := &request{alloc: &fsm.Alloc{Seq: name, Count: n}, window: w, ctx: context.Background(), done: make(chan struct{})}
	select {
	case s.queue <- r:
	default:
		// The queue is full: this call waits for room like any other,
		// without holding the windows' lock.
		go func() {
			select {
			case s.queue <- r:
			case <-s.stop:
				r.finish(sequencer.ErrNotLeader)
			}
		}()
	}
	w.refill = r
	return r
}

// installWindow raises a window's limit (and its cursor to the first tick
// of its Alloc) once the Alloc applied in the windows' term.
func (s *Settler) installWindow(r *request, term uint64) {
	a := r.allocated
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if a.Err != nil || term != s.windowTerm || s.windows[r.alloc.Seq] != r.window {
		return
	}
	w := r.window
	if a.First != w.limit {
		// Not where the window ends: the ticks between are not the
		// window's (the first window, or the mark moved past its limit
		// meanwhile). Else the Alloc extends the window, and what is
		// left below the limit is still the window's.
		w.next = max(w.next, a.First)
	}
	w.limit = max(w.limit, a.First+r.alloc.Count)
	w.refill = nil // done: an idle window holds nothing but its marks
}

// passWindow lifts a window's cursor past IDs the log gave a call of its
// sequence (a keyed one), before that call is answered.
func (s *Settler) passWindow(seq string, a fsm.Allocation, count uint64) {
	if a.Err != nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if w := s.windows[seq]; w != nil {
		w.next = max(w.next, a.First+count)
	}
}

// resetWindows forgets every window unless term is the one they serve.
func (s *Settler) resetWindows(term uint64) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if term == s.windowTerm && term != 0 {
		return
	}
	s.windows, s.windowTerm, s.soon = map[string]*window{}, term, nil
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// DefaultWindow is how far ahead of the clock a named layout sequence's
// window reaches.
const DefaultWindow = 2 * time.Second
