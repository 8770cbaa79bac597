package fsm

// Tracked reservations and the settled mark W.
//
// A tracked reservation is a block of ticks a writer promised to complete
// or abandon; until then, or until it expires, W does not pass it. Every
// decision about one (opened, completed, abandoned, extended, expired) is
// a Track in a committed OpSettle entry, so every node, every later
// leader, and every retry sees the same fate. Apply decides each Track
// from the state alone, in log order, which is why an expiry can never
// race a completion: whichever the log holds first wins, and the other
// reads the fate it left.
//
// W is min(Frontier, the first tick of the oldest open reservation), and
// is kept as a maximum so it only moves up. Frontier is a tick below
// which every tracked reservation the leader assigned is in this entry or
// an earlier one (the leader assigns tracked ticks only in the loop that
// writes these entries, and reads its next tick after them), so no
// reservation can later open below W: Apply refuses an Open below the
// frontier, which only a broken leader could send.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Fate is where a tracked reservation stands.
type Fate uint8

// The fates. Completed covers every tick below the frontier that is not
// open or dead: untracked ticks count as completed when handed out.
const (
	FateUnknown Fate = iota
	FateOpen
	FateCompleted
	FateAbandoned
	FateExpired
)

func (f Fate) String() string {
	switch f {
	case FateOpen:
		return "open"
	case FateCompleted:
		return "completed"
	case FateAbandoned:
		return "abandoned"
	case FateExpired:
		return "expired"
	}
	return "unknown"
}

// Do names what a Track does.
type Do string

// The Track operations.
const (
	DoOpen     Do = "open"
	DoComplete Do = "complete"
	DoAbandon  Do = "abandon"
	DoExtend   Do = "extend"
	DoExpire   Do = "expire"
)

// Track is one decision about the reservation whose first tick is First.
type Track struct {
	Do Do `json:"do"`
	// Seq names the named sequence the reservation is of (cluster version
	// 3); empty for the default sequence, as every Track written before
	// it. A named sequence's Open leaves First 0: Apply assigns its IDs
	// from the sequence's mark (see seqtracking.go).
	Seq   string `json:"seq,omitempty"`
	First uint64 `json:"first"`
	// Count is the reservation's size: Open sets it, the others name it,
	// so a handle for a part of a reservation is not taken for the whole.
	Count uint64 `json:"count"`
	// TTLMs is how long the reservation lives (Open, Extend): a leader
	// counts it from when it applies the entry, or from when it starts to
	// lead, whichever is later.
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// Ext is the reservation's extension count that an Expire judged: an
	// Extend applied between the leader's judgement and the Expire makes
	// the Expire a no-op.
	Ext uint64 `json:"ext,omitempty"`
	// Keyed is an Open's idempotency key (cluster version 3): the first
	// Open with it opens and is kept under it; a later one answers that
	// reservation and opens nothing (see keyedOpen). Term is the term a
	// keyed Open's ticks were assigned in (as Claim.Term), and AnyTTL
	// says the call named no TTL, so a retry takes the TTL its key's
	// reservation got, whatever this leader's default.
	Keyed
	Term   uint64 `json:"term,omitempty"`
	AnyTTL bool   `json:"any_ttl,omitempty"`
}

// Errors of tracking, in a Track's Outcome.
var (
	// ErrUnknownReservation means no reservation starts at the tick named,
	// or it holds another count.
	ErrUnknownReservation = errors.New("no such reservation")
	// ErrBelowFrontier means an Open names ticks below the frontier: a
	// leader that sent it broke the order, so it is refused.
	ErrBelowFrontier = errors.New("reservation below the tracked frontier")
	// ErrForgotten means the ticks are below Tracking.Forgotten: this
	// cluster no longer knows (or never knew) their reservation's fate.
	ErrForgotten = errors.New("the fate of this reservation is no longer known")
)

// maxDeadSpans bounds the dead spans kept: past it the lowest is dropped
// and Forgotten rises above it. A var so that tests can lower it.
var maxDeadSpans = 1 << 20

// Open is an open reservation as the state holds it.
type Open struct {
	Count uint64 `json:"count"`
	TTLMs int64  `json:"ttl_ms"`
	Ext   uint64 `json:"ext,omitempty"`
}

// Span is a run of dead ticks [First, End): every reservation in it was
// abandoned or expired, as Fate says.
type Span struct {
	First uint64 `json:"first"`
	End   uint64 `json:"end"`
	Fate  Fate   `json:"fate"`
}

// Tracking is the tracked reservations and W of one sequence.
type Tracking struct {
	// Settled is W, in ticks: every tick below it is settled.
	Settled uint64 `json:"settled,omitempty"`
	// Frontier: every tracked reservation below it has been opened.
	Frontier uint64 `json:"frontier,omitempty"`
	// Open holds the open reservations by first tick.
	Open map[uint64]Open `json:"open,omitempty"`
	// Dead holds the abandoned and expired reservations, sorted and
	// merged, so that they answer their fate for good.
	Dead []Span `json:"dead,omitempty"`
	// Forgotten: below it, a tick that is neither open nor dead has an
	// unknown fate, never "completed": a restore starts here (the old
	// cluster's reservations are not known), and dead spans dropped
	// past maxDeadSpans raise it.
	Forgotten uint64 `json:"forgotten,omitempty"`
	// order is Open's keys ascending, with closed ones not yet dropped
	// from its head: reservations open in tick order, so the head is the
	// oldest open one, found in amortised constant time.
	order []uint64
}

// Outcome is what one Track did.
type Outcome struct {
	Fate Fate
	// Ext is the reservation's extension count after the Track (Open,
	// Extend), which a later Expire must name.
	Ext uint64
	// Changed reports whether the Track changed the reservation (opened,
	// closed or extended it); false when it found the fate it answers
	// already set, as a retry does, or was an Expire judged before an
	// Extend. Counts of decisions count only these.
	Changed bool
	// Err is set when the Track was refused; nothing changed.
	Err error
	// First, Count and TTLMs are, for an Open, the reservation it
	// answers: its own, or for a keyed Open whose key already holds one
	// (Changed false, Fate where that one stands now), the first one.
	First, Count uint64
	TTLMs        int64
}

// IsZero reports whether nothing was ever tracked, so a snapshot of a
// cluster that never tracked omits the field, and an older node (which
// decodes snapshots strictly) still reads it.
func (t Tracking) IsZero() bool {
	return t.Settled == 0 && t.Frontier == 0 && len(t.Open) == 0 && len(t.Dead) == 0 && t.Forgotten == 0
}

// restore rebuilds what the snapshot does not carry.
func (t *Tracking) restore() {
	if t.Open == nil {
		t.Open = map[uint64]Open{}
	}
	t.order = t.order[:0]
	for first := range t.Open {
		t.order = append(t.order, first)
	}
	slices.Sort(t.order)
}

// settle applies one OpSettle entry's Tracks and frontier. highWater
// bounds the frontier: no tick at or above it was ever reserved. A keyed
// Open is decided with keys, in the entry's term.
func (t *Tracking) settle(tracks []Track, frontier, highWater uint64, keys *Keys, term uint64) ([]Outcome, error) {
	if frontier > highWater {
		return nil, fmt.Errorf("%w: frontier %d is above the high-water mark %d", ErrInvalid, frontier, highWater)
	}
	t.init()
	out := make([]Outcome, len(tracks))
	for i, tr := range tracks {
		out[i] = t.track(tr, max(frontier, t.Frontier), keys, term)
	}
	t.advance(frontier)
	return out, nil
}

// init makes the open set ready for Tracks.
func (t *Tracking) init() {
	if t.Open == nil {
		t.Open = map[uint64]Open{}
	}
}

// advance raises the frontier to frontier after an entry's Tracks, and W
// with it: W = max(W, min(frontier, the oldest open reservation)).
func (t *Tracking) advance(frontier uint64) {
	t.Frontier = max(t.Frontier, frontier)
	t.Settled = max(t.Settled, min(t.Frontier, t.oldestOpen()))
	t.compactOrder()
}

// compactOrder drops closed reservations from order once they outnumber
// the open ones: one reservation kept open would otherwise keep every
// reservation opened behind it.
func (t *Tracking) compactOrder() {
	if len(t.order) <= 2*len(t.Open)+1024 {
		return
	}
	t.order = slices.DeleteFunc(t.order, func(first uint64) bool {
		_, ok := t.Open[first]
		return !ok
	})
}

// track applies one Track; reach is the frontier after the entry.
func (t *Tracking) track(tr Track, reach uint64, keys *Keys, term uint64) Outcome {
	if tr.Do == DoOpen && tr.Key != "" {
		return t.keyedOpen(tr, reach, keys, term)
	}
	if tr.Do == DoOpen {
		return t.open(tr, reach)
	}
	o, isOpen := t.Open[tr.First]
	if isOpen && o.Count != tr.Count {
		return Outcome{Err: fmt.Errorf("%w: reservation at tick %d holds %d ticks, not %d", ErrUnknownReservation, tr.First, o.Count, tr.Count)}
	}
	if !isOpen {
		f := t.fate(tr.First, tr.Count)
		if f == FateCompleted && tr.First < t.Forgotten {
			return Outcome{Err: fmt.Errorf("%w: ticks %d to %d are below %d (a restore, or more than %d reservations abandoned or expired since); the database's fence decides",
				ErrForgotten, tr.First, tr.First+tr.Count-1, t.Forgotten, maxDeadSpans)}
		}
		return Outcome{Fate: f}
	}
	switch tr.Do {
	case DoComplete:
		delete(t.Open, tr.First)
		return Outcome{Fate: FateCompleted, Changed: true}
	case DoAbandon:
		t.bury(tr, FateAbandoned)
		return Outcome{Fate: FateAbandoned, Changed: true}
	case DoExtend:
		o.TTLMs, o.Ext = tr.TTLMs, o.Ext+1
		t.Open[tr.First] = o
		return Outcome{Fate: FateOpen, Ext: o.Ext, Changed: true}
	case DoExpire:
		if tr.Ext != o.Ext {
			return Outcome{Fate: FateOpen, Ext: o.Ext} // extended since judged
		}
		t.bury(tr, FateExpired)
		return Outcome{Fate: FateExpired, Changed: true}
	}
	return Outcome{Err: fmt.Errorf("%w: track %q", ErrInvalid, tr.Do)}
}

// open records a new reservation. It must lie at or above the frontier
// before this entry, above every reservation opened before it, and below
// reach, the entry's own frontier.
func (t *Tracking) open(tr Track, reach uint64) Outcome {
	last := uint64(0)
	if n := len(t.order); n > 0 {
		last = t.order[n-1]
	}
	end := tr.First + tr.Count
	if tr.First < t.Frontier || (len(t.order) > 0 && tr.First <= last) || end > reach || end < tr.First {
		return Outcome{Err: fmt.Errorf("%w: ticks %d+%d, frontier %d, entry's frontier %d", ErrBelowFrontier, tr.First, tr.Count, t.Frontier, reach)}
	}
	t.Open[tr.First] = Open{Count: tr.Count, TTLMs: tr.TTLMs}
	t.order = append(t.order, tr.First)
	return Outcome{Fate: FateOpen, Changed: true, First: tr.First, Count: tr.Count, TTLMs: tr.TTLMs}
}

// fate is where a reservation that is not open stands.
func (t *Tracking) fate(first, count uint64) Fate {
	i, found := slices.BinarySearchFunc(t.Dead, first, func(s Span, first uint64) int {
		return cmp.Compare(s.First, first)
	})
	if !found {
		i-- // the span that starts before first, if any
	}
	if i >= 0 && first < t.Dead[i].End {
		if first+count > t.Dead[i].End {
			return FateUnknown // not a reservation this cluster made
		}
		return t.Dead[i].Fate
	}
	// A range that runs into a dead span or an open reservation is no
	// reservation this cluster made either.
	if i+1 < len(t.Dead) && t.Dead[i+1].First < first+count || t.overlapsOpen(first, count) {
		return FateUnknown
	}
	if first+count <= t.Frontier {
		return FateCompleted
	}
	return FateUnknown
}

// overlapsOpen reports whether ticks [first, first+count) overlap an open
// reservation: the open one nearest below their end is the only one that
// can, since open reservations do not overlap.
func (t *Tracking) overlapsOpen(first, count uint64) bool {
	end := first + count
	i, _ := slices.BinarySearch(t.order, end)
	for j := i - 1; j >= 0; j-- {
		if o, ok := t.Open[t.order[j]]; ok {
			return t.order[j]+o.Count > first
		}
	}
	return false
}

// bury closes an open reservation as dead, merging its span with a
// neighbour of the same fate.
func (t *Tracking) bury(tr Track, f Fate) {
	delete(t.Open, tr.First)
	s := Span{First: tr.First, End: tr.First + tr.Count, Fate: f}
	i, _ := slices.BinarySearchFunc(t.Dead, s.First, func(d Span, first uint64) int { return cmp.Compare(d.First, first) })
	if i > 0 && t.Dead[i-1].End == s.First && t.Dead[i-1].Fate == f {
		i--
		s.First = t.Dead[i].First
		t.Dead = slices.Delete(t.Dead, i, i+1)
	}
	if i < len(t.Dead) && t.Dead[i].First == s.End && t.Dead[i].Fate == f {
		s.End = t.Dead[i].End
		t.Dead = slices.Delete(t.Dead, i, i+1)
	}
	t.Dead = slices.Insert(t.Dead, i, s)
	if len(t.Dead) > maxDeadSpans {
		t.Forgotten = max(t.Forgotten, t.Dead[0].End)
		t.Dead = t.Dead[1:]
	}
}

// oldestOpen is the first tick of the oldest open reservation, or the
// largest tick when none is open. It drops closed ones from order's head.
func (t *Tracking) oldestOpen() uint64 {
	for len(t.order) > 0 {
		if _, ok := t.Open[t.order[0]]; ok {
			return t.order[0]
		}
		t.order = t.order[1:]
	}
	return ^uint64(0)
}

// clone is a deep copy, for a snapshot taken under the FSM's lock.
func (t *Tracking) clone() Tracking {
	c := *t
	c.Open = make(map[uint64]Open, len(t.Open))
	for k, v := range t.Open {
		c.Open[k] = v
	}
	c.Dead = slices.Clone(t.Dead)
	c.order = nil
	return c
}
