package fsm

// Tracked reservations of named sequences, and each one's settled mark.
//
// A named sequence that was ever reserved has a Tracking of its own (open
// and dead reservations, frontier, W, Forgotten) in State.SeqTracking,
// made by its first Reserve. Its reservations are decided as the default
// sequence's are (the same Tracks, the same table), with one difference:
// a named sequence's Open carries no IDs. Apply assigns them from the
// sequence's mark, as it does an Alloc's (dense: from Next; layout: from
// max(Next, the entry's clock) within the lead bound), and opens them in
// the same step. So the sequence's frontier is its mark: every tracked
// reservation below the mark was opened by this entry or an earlier one,
// since nothing but Apply hands out its IDs below the mark (a layout
// sequence's window serves below a mark the log raised first, and is
// lifted past a reservation before it is answered); no leader's reading
// is needed, and none could be wrong.
//
// W of a named sequence = max(W, min(its mark, the first ID of its
// oldest open reservation)), raised after every entry that touches the
// sequence (one of its Tracks, or an Alloc of a sequence with tracking).
// A sequence never reserved has no Tracking, and its W is its mark: all
// it handed out was untracked, settled when handed out. Sequences are
// independent: a reservation of one never holds another's W back.

import "fmt"

// trackNamed applies one Track of a named sequence; nowMs is the entry's
// clock (NowMs), which a layout sequence's Open follows.
func (s *State) trackNamed(tr Track, nowMs int64) Outcome {
	if tr.Do == DoOpen {
		return s.openNamed(tr, nowMs)
	}
	seq, ok := s.Sequences[tr.Seq]
	if !ok {
		return Outcome{Err: fmt.Errorf("%w: %q", ErrNoSequence, tr.Seq)}
	}
	// A dropped sequence's reservations are still decided: their writers
	// settle them, and they expire, as if it were live.
	t := s.SeqTracking[tr.Seq]
	if t == nil {
		// Never reserved: no reservation is open or dead, and whatever it
		// handed out below its mark was untracked.
		untracked := Tracking{Frontier: seq.Next}
		return Outcome{Fate: untracked.fate(tr.First, tr.Count)}
	}
	t.Frontier = max(t.Frontier, seq.Next)
	dead := len(t.Dead)
	o := t.track(tr, t.Frontier, nil, 0)
	s.namedDead += len(t.Dead) - dead
	// The dead spans of every named sequence together are bounded as the
	// default sequence's are: past the bound, the sequence that buried
	// one forgets its lowest.
	for s.namedDead > maxDeadSpans && len(t.Dead) > 0 {
		t.Forgotten = max(t.Forgotten, t.Dead[0].End)
		t.Dead = t.Dead[1:]
		s.namedDead--
	}
	return o
}

// openNamed applies a named sequence's Open: when keyed and its key holds
// a reservation, that one (keptOpen); else the IDs the sequence's mark
// gives, opened, and kept under the key if any.
func (s *State) openNamed(tr Track, nowMs int64) Outcome {
	if tr.Key != "" {
		if r, ok := s.Keys.lookup(tr.id()); ok {
			return keptOpen(r, tr, s.SeqTracking[r.Seq])
		}
	}
	seq, ok := s.Sequences[tr.Seq]
	if !ok || seq.Dropped {
		return Outcome{Err: fmt.Errorf("%w: %q", ErrNoSequence, tr.Seq)}
	}
	mark := seq.Next
	a := s.alloc(Alloc{Seq: tr.Seq, Count: tr.Count}, nowMs)
	if a.Err != nil {
		return Outcome{Err: a.Err}
	}
	t := s.SeqTracking[tr.Seq]
	if t == nil {
		// W starts where the sequence's W stood without tracking: its mark.
		t = &Tracking{Settled: mark, Frontier: mark, Open: map[uint64]Open{}}
		if s.SeqTracking == nil {
			s.SeqTracking = map[string]*Tracking{}
		}
		s.SeqTracking[tr.Seq] = t
	}
	t.Frontier = max(t.Frontier, mark)
	opened := tr
	opened.First = a.First
	o := t.open(opened, seq.Next)
	if o.Err == nil && tr.Key != "" {
		s.Keys.keep(KeyRecord{Kind: KeyReserve, Seq: tr.Seq, Count: tr.Count, First: a.First, TTLMs: tr.TTLMs, ID: tr.id()})
	}
	return o
}

// advanceNamed raises a named sequence's frontier to its mark, and its W
// with it, after an entry that touched it, and returns W; ok is false
// when no sequence has the name.
func (s *State) advanceNamed(name string) (w uint64, ok bool) {
	seq, ok := s.Sequences[name]
	if !ok {
		return 0, false
	}
	t := s.SeqTracking[name]
	if t == nil {
		return seq.Next, true
	}
	t.advance(seq.Next)
	return t.Settled, true
}

// sequenceSettled is a named sequence's W (see advanceNamed); ok is false
// when no sequence has the name.
func (s *State) sequenceSettled(name string) (uint64, bool) {
	seq, ok := s.Sequences[name]
	if !ok {
		return 0, false
	}
	if t := s.SeqTracking[name]; t != nil {
		return t.Settled, true
	}
	return seq.Next, true
}

// StartTrackingAtMarks gives every named sequence a tracking whose W,
// frontier and forgotten mark are its mark, with nothing open or dead: a
// restore from a backup (which carries no reservations) starts each
// sequence's W there, above every ID the old cluster handed out, as it
// starts the default sequence's at the restored high-water mark. Only
// for a state that does not serve yet: it changes the state outside the
// log.
func (s *State) StartTrackingAtMarks() {
	if len(s.Sequences) == 0 {
		return
	}
	s.SeqTracking = make(map[string]*Tracking, len(s.Sequences))
	for name, seq := range s.Sequences {
		s.SeqTracking[name] = &Tracking{Settled: seq.Next, Frontier: seq.Next, Forgotten: seq.Next, Open: map[uint64]Open{}}
	}
	s.restoreNamed()
}

// restoreNamed rebuilds what a snapshot does not carry of the named
// sequences' tracking.
func (s *State) restoreNamed() {
	s.namedDead = 0
	for _, t := range s.SeqTracking {
		t.restore()
		s.namedDead += len(t.Dead)
	}
}

// cloneSeqTracking is a deep copy.
func cloneSeqTracking(m map[string]*Tracking) map[string]*Tracking {
	if m == nil {
		return nil
	}
	c := make(map[string]*Tracking, len(m))
	for name, t := range m {
		tc := t.clone()
		c[name] = &tc
	}
	return c
}

// namedTracks reports whether any of tracks names a sequence.
func namedTracks(tracks []Track) bool {
	for _, tr := range tracks {
		if tr.Seq != "" {
			return true
		}
	}
	return false
}

// SequenceSettled returns named sequence name's W, in its own values
// (dense) or ticks (layout); ok is false when no sequence has the name.
// A dropped sequence keeps its W.
func (f *FSM) SequenceSettled(name string) (w uint64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.sequenceSettled(name)
}

// SequencesSettled returns a copy of the named sequences (dropped ones
// included) and each one's W, read together, so that no W is above its
// sequence's mark.
func (f *FSM) SequencesSettled() (map[string]*Sequence, map[string]uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	w := make(map[string]uint64, len(f.state.Sequences))
	for name := range f.state.Sequences {
		w[name], _ = f.state.sequenceSettled(name)
	}
	return cloneSequences(f.state.Sequences), w
}

// TrackedSequence returns a copy of named sequence name's tracked
// reservations and W; ok is false when it was never reserved.
func (f *FSM) TrackedSequence(name string) (Tracking, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.state.SeqTracking[name]
	if !ok {
		return Tracking{}, false
	}
	return t.clone(), true
}

// TrackedSequences returns a copy of every named sequence's tracked
// reservations, by name: what a new leader counts deadlines from.
func (f *FSM) TrackedSequences() map[string]Tracking {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]Tracking, len(f.state.SeqTracking))
	for name, t := range f.state.SeqTracking {
		out[name] = t.clone()
	}
	return out
}
