package fsm

// Named sequences: many sequences in one cluster, each with its own kind
// (a layout and group, or dense integers) and mark.
//
// A named sequence keeps no reservation in a leader's memory: every call
// for its IDs is an Alloc in a committed settle entry, and Apply decides
// its IDs from the sequence's mark, in log order. So a call that
// completed before another began has its IDs below the other's (its
// entry is earlier in the log), a leader change or a whole-cluster
// restart loses nothing but answers committed and never delivered, and a
// dense sequence makes no other gap. The mark only moves up; a dropped
// sequence keeps it, so a name created again starts above it.

import (
	"errors"
	"fmt"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// KindDense is the kind of a sequence of consecutive integers.
const KindDense = "dense"

// MaxSequences bounds the named sequences, dropped ones included.
const MaxSequences = 100_000

// SequencesVersion is the cluster version from which named sequences
// (OpCreateSequence, OpDropSequence, Allocs) and idempotency keys
// (Claims, keyed Opens) are accepted.
const SequencesVersion = 3

// Errors of named sequences, in a Result or an Allocation.
var (
	// ErrNoSequence means no sequence has the name, or it was dropped.
	ErrNoSequence = errors.New("no such sequence")
	// ErrSequenceExists means a sequence of the name exists.
	ErrSequenceExists = errors.New("sequence exists")
	// ErrSequenceKind means a dropped name was created again with another
	// kind: its old IDs and new ones would not compare.
	ErrSequenceKind = errors.New("a dropped sequence comes back only with its kind")
	// ErrSequenceFull means a sequence's IDs would run past what its kind
	// holds: the dense range's end, the layout's last tick, or further
	// ahead of the clock than the lead bound.
	ErrSequenceFull = errors.New("sequence cannot hand out that many IDs")
	// ErrTooManySequences means MaxSequences are defined.
	ErrTooManySequences = errors.New("too many sequences")
	// ErrGroupInUse means a create that asked for a distinct group
	// (Command.DistinctGroup) named a group another live named sequence
	// of the same layout, or the default sequence, already has: the two
	// would hand out equal IDs.
	ErrGroupInUse = errors.New("group in use")
)

// CheckSequenceName is api.CheckSequenceName, the one rule of names, as
// an invalid command.
func CheckSequenceName(name string) error {
	if err := api.CheckSequenceName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Sequence is a named sequence as the state holds it.
type Sequence struct {
	// Kind is KindDense or the canonical layout spec.
	Kind   string         `json:"kind"`
	Layout *layout.Layout `json:"layout,omitempty"`
	Group  uint64         `json:"group,omitempty"`
	Start  uint64         `json:"start,omitempty"`
	// Next is the next value (dense) or tick (layout) at the earliest:
	// everything handed out is below it.
	Next    uint64 `json:"next"`
	Dropped bool   `json:"dropped,omitempty"`
	// ClockHigh is the highest clock reading, in the layout's ticks, any
	// of its allocations carried: its lead is measured from there, so a
	// leader whose clock is behind an earlier one's is not refused.
	ClockHigh uint64 `json:"clock_high,omitempty"`
}

// Alloc asks for Count IDs of sequence Seq.
type Alloc struct {
	Seq   string `json:"seq"`
	Count uint64 `json:"count"`
	Keyed
}

// Allocation is what an Alloc got: Count IDs (values or ticks) from First,
// or why not.
type Allocation struct {
	First uint64
	Err   error
}

// sequenceLead is how far ahead of the proposer's clock a layout
// sequence's last tick may run: as far as the default sequence's least
// lead bound.
const sequenceLead = 10 * time.Second

// NewSequence checks a sequence's definition and returns it, not yet
// handing anything out.
func NewSequence(kind string, group, start uint64) (Sequence, error) {
	if kind == KindDense {
		if group != 0 {
			return Sequence{}, fmt.Errorf("%w: a dense sequence has no group", ErrInvalid)
		}
		return Sequence{Kind: KindDense, Start: max(start, 1), Next: max(start, 1)}, nil
	}
	l, err := layout.Parse(kind)
	if err != nil {
		return Sequence{}, fmt.Errorf("%w: kind %q: want %q or a layout: %v", ErrInvalid, kind, KindDense, err)
	}
	if err := l.Validate(endOfTime); err != nil {
		return Sequence{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := l.CheckGroup(group); err != nil {
		return Sequence{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if start != 0 {
		return Sequence{}, fmt.Errorf("%w: a layout sequence starts at its clock, not at a value", ErrInvalid)
	}
	return Sequence{Kind: l.String(), Layout: &l, Group: group, Next: 1}, nil
}

// defineSequence applies an OpCreateSequence or OpDropSequence.
func (s *State) defineSequence(c Command) error {
	if v := max(s.ClusterVersion, 1); v < SequencesVersion {
		return fmt.Errorf("%w: named sequences need cluster version %d, the cluster has %d", ErrClusterVersion, SequencesVersion, v)
	}
	if c.Op == OpDropSequence {
		return s.dropSequence(c.Sequence)
	}
	return s.createSequence(c.Sequence, c.Kind, c.Group, c.Start, c.DistinctGroup)
}

// createSequence applies an OpCreateSequence; distinct asks for a group
// no other sequence of the layout has (checkDistinctGroup).
func (s *State) createSequence(name, kind string, group, start uint64, distinct bool) error {
	def, err := NewSequence(kind, group, start)
	if err != nil {
		return err
	}
	old, ok := s.Sequences[name]
	switch {
	case ok && !old.Dropped:
		return fmt.Errorf("%w: %q", ErrSequenceExists, name)
	case ok && (old.Kind != def.Kind || old.Group != def.Group):
		return fmt.Errorf("%w: %q was %s group %d", ErrSequenceKind, name, old.Kind, old.Group)
	}
	if distinct {
		if err := s.checkDistinctGroup(def); err != nil {
			return err
		}
	}
	switch {
	case ok:
		old.Dropped, old.Next = false, max(old.Next, def.Next)
		return nil
	case len(s.Sequences) >= MaxSequences:
		return fmt.Errorf("%w: %d", ErrTooManySequences, MaxSequences)
	}
	if s.Sequences == nil {
		s.Sequences = map[string]*Sequence{}
	}
	s.Sequences[name] = &def
	return nil
}

// checkDistinctGroup refuses def, about to be created, when its group is
// already another's under the same layout: a live named sequence's (a
// dropped one hands out nothing more, and the name being created is live
// only when the create is refused anyway), or the cluster's default
// sequence's.
// Layouts are the same when they make the same IDs, whatever they are
// called (a custom spec with a preset's fields is that preset). Of
// several, the first name in order is named, so every node says alike.
func (s *State) checkDistinctGroup(def Sequence) error {
	if def.Layout == nil {
		return fmt.Errorf("%w: a dense sequence has no group to keep distinct", ErrInvalid)
	}
	const fix = "choose another group (--group), or share this one by leaving out --distinct-group (the sequences then hand out equal IDs)"
	if s.Layout != nil && sameIDs(*s.Layout, *def.Layout) && s.Group == def.Group {
		return fmt.Errorf("%w: group %d of layout %s is the cluster's default sequence's: %s", ErrGroupInUse, def.Group, def.Kind, fix)
	}
	user := ""
	for other, seq := range s.Sequences {
		if seq.Dropped || seq.Layout == nil || seq.Group != def.Group || !sameIDs(*seq.Layout, *def.Layout) {
			continue
		}
		if user == "" || other < user {
			user = other
		}
	}
	if user != "" {
		return fmt.Errorf("%w: group %d of layout %s is sequence %q's: %s", ErrGroupInUse, def.Group, def.Kind, user, fix)
	}
	return nil
}

// sameIDs reports whether layouts a and b make the same IDs: every field
// but the name alike.
func sameIDs(a, b layout.Layout) bool {
	a.Name, b.Name = "", ""
	return a == b
}

// dropSequence applies an OpDropSequence.
func (s *State) dropSequence(name string) error {
	seq, ok := s.Sequences[name]
	if !ok || seq.Dropped {
		return fmt.Errorf("%w: %q", ErrNoSequence, name)
	}
	seq.Dropped = true
	return nil
}

// alloc hands out a.Count IDs of a sequence; nowMs is the proposer's
// clock, which a layout sequence follows.
func (s *State) alloc(a Alloc, nowMs int64) Allocation {
	seq, ok := s.Sequences[a.Seq]
	if !ok || seq.Dropped {
		return Allocation{Err: fmt.Errorf("%w: %q", ErrNoSequence, a.Seq)}
	}
	first := seq.Next
	last, end := first+a.Count-1, first+a.Count
	if seq.Layout != nil {
		now := seq.Layout.TickAt(time.UnixMilli(nowMs))
		first = max(first, now, 1)
		last, end = first+a.Count-1, first+a.Count
		seen := max(now, seq.ClockHigh)
		if last > seq.Layout.MaxTick() || last > seen+seq.Layout.TicksIn(sequenceLead) || end < first {
			return Allocation{Err: fmt.Errorf("%w: %d IDs of %q from tick %d: past its layout's last tick or more than %s ahead of the clock",
				ErrSequenceFull, a.Count, a.Seq, first, sequenceLead)}
		}
	} else if end < first || end == 0 {
		return Allocation{Err: fmt.Errorf("%w: %d IDs of dense %q from %d: past 2^64", ErrSequenceFull, a.Count, a.Seq, first)}
	}
	seq.Next = end
	if seq.Layout != nil {
		seq.ClockHigh = max(seq.ClockHigh, seq.Layout.TickAt(time.UnixMilli(nowMs)))
	}
	return Allocation{First: first}
}

// cloneSequences is a deep copy.
func cloneSequences(m map[string]*Sequence) map[string]*Sequence {
	if m == nil {
		return nil
	}
	c := make(map[string]*Sequence, len(m))
	for k, v := range m {
		s := v.clone()
		c[k] = &s
	}
	return c
}

// clone is a copy that shares the layout: a sequence's layout is set
// when it is created and never changed in place (a sequence created again
// keeps its kind), so a copy may point at it.
func (s *Sequence) clone() Sequence {
	return *s
}

// ErrDenseSkip means a restore or recovery met dense sequences and was
// given no skip: a dense sequence has no clock to jump by, and the old
// cluster may have handed out values past what the copy holds.
var ErrDenseSkip = errors.New("dense sequences need a skip")

// JumpSequences moves every named sequence's mark past what the cluster
// it was copied from may have handed out after the copy: a layout
// sequence's to the tick of now+jump plus the lead bound (that cluster's
// clocks are assumed within jump of now, and none of its sequences ran
// further ahead of its clocks than the bound); a dense sequence's by
// denseSkip values, which must be given when there is one. A restore
// and a recovery both call it.
func (s *State) JumpSequences(now time.Time, jump time.Duration, denseSkip uint64) error {
	for name, seq := range s.Sequences {
		if seq.Layout == nil {
			if denseSkip == 0 {
				return fmt.Errorf("%w: %q is dense and its old cluster may have handed out values after the copy: give the most it could have (--dense-skip N), and those values become a gap", ErrDenseSkip, name)
			}
			if seq.Next+denseSkip < seq.Next {
				return fmt.Errorf("%w: a skip of %d moves %q's mark %d past 2^64: give the most the old cluster could have handed out, not more",
					ErrDenseSkip, denseSkip, name, seq.Next)
			}
			seq.Next += denseSkip
			continue
		}
		seq.Next = max(seq.Next, seq.Layout.TickAt(now.Add(jump))+seq.Layout.TicksIn(sequenceLead))
		seq.ClockHigh = max(seq.ClockHigh, seq.Layout.TickAt(now.Add(jump)))
	}
	return nil
}
