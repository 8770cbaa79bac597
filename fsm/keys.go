package fsm

// Idempotency keys: a call for IDs that carries a key is decided in the
// log with it, and the first decision is kept, so a retry with the key,
// on any node, after any leader change or restart, gets the first
// answer's IDs. Keys are scoped to a caller, and at most MaxKeys are
// kept, the oldest forgotten first, decided by Apply from the entries
// alone. No clock decides it: a window counted on the proposers' clocks
// would forget every key at once when one leader's clock ran ahead, and
// a retry would then take new IDs (a ledger's double entry).

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Key bounds.
const (
	// MaxKeys bounds the keys kept cluster-wide.
	MaxKeys = 100_000
	// MaxKeyLen bounds a key, and a caller's name.
	MaxKeyLen = 128
)

// ErrKeyReused means a key was used again with another count or
// sequence: a retry must ask for what the first call asked.
var ErrKeyReused = errors.New("idempotency key reused with other arguments")

// Keyed names a keyed call: the caller and its key, empty when unkeyed.
type Keyed struct {
	Caller string `json:"caller,omitempty"`
	Key    string `json:"key,omitempty"`
}

// id names a key with its caller in the state: 128 bits of a SHA-256 of
// both, so a kept key costs the same whatever their lengths.
func (k Keyed) id() string {
	sum := sha256.Sum256([]byte(k.Caller + "\x00" + k.Key))
	return hex.EncodeToString(sum[:16])
}

// check validates a key as Decode does.
func (k Keyed) check() error {
	if len(k.Key) > MaxKeyLen || len(k.Caller) > MaxKeyLen || (k.Key == "" && k.Caller != "") {
		return fmt.Errorf("%w: idempotency key of %d bytes, caller of %d: want 1 to %d bytes each", ErrInvalid, len(k.Key), len(k.Caller), MaxKeyLen)
	}
	return nil
}

// Claim records that a keyed call of the default sequence got Count ticks
// from First (assigned by the leader's sequencer), unless its key already
// holds an answer.
type Claim struct {
	Keyed
	// Seq is the named layout sequence whose window the ticks came from;
	// empty: the default sequence.
	Seq   string `json:"seq,omitempty"`
	Count uint64 `json:"count"`
	First uint64 `json:"first"`
	// Term is the term the ticks were assigned in: a claim committed in
	// another one is refused and not kept (nothing proves no newer leader
	// answered in between), so no retry is ever given ticks its first
	// attempt was refused.
	Term uint64 `json:"term"`
}

// ErrClaimTerm means a claim was committed in another term than its
// ticks were assigned in.
var ErrClaimTerm = errors.New("keyed call committed in another term than its IDs were assigned in")

// KeyReserve is KeyRecord.Kind of a key a tracked reservation was opened
// with.
const KeyReserve = "reserve"

// KeyRecord is a kept answer.
type KeyRecord struct {
	// Kind is what the key was first used for: "" a call for IDs, or
	// KeyReserve a tracked reservation. One key of a caller is one call:
	// used for the other kind, it is ErrKeyReused.
	Kind string `json:"kind,omitempty"`
	// Seq is the sequence ("" for the default one), Count and First what
	// the first call got, and TTLMs the TTL a reservation was opened with.
	Seq   string `json:"seq,omitempty"`
	Count uint64 `json:"count"`
	First uint64 `json:"first"`
	TTLMs int64  `json:"ttl_ms,omitempty"`
	ID    string `json:"id"`
}

// Keys are the kept answers, oldest first.
type Keys struct {
	Records []KeyRecord    `json:"records,omitempty"`
	byID    map[string]int // index into Records, offset by dropped
	dropped int
}

// IsZero reports whether no key was ever kept (see Tracking.IsZero).
func (k Keys) IsZero() bool { return len(k.Records) == 0 }

// restore rebuilds the index.
func (k *Keys) restore() {
	k.byID, k.dropped = make(map[string]int, len(k.Records)), 0
	for i, r := range k.Records {
		k.byID[r.ID] = i
	}
}

// lookup is the answer kept for id, if any.
func (k *Keys) lookup(id string) (KeyRecord, bool) {
	i, ok := k.byID[id]
	if !ok {
		return KeyRecord{}, false
	}
	return k.Records[i-k.dropped], true
}

// keep records an answer, then forgets the oldest keys past the cap.
func (k *Keys) keep(r KeyRecord) {
	if k.byID == nil {
		k.restore()
	}
	k.byID[r.ID] = len(k.Records) + k.dropped
	k.Records = append(k.Records, r)
	for len(k.Records) > MaxKeys {
		if k.byID[k.Records[0].ID] == k.dropped {
			delete(k.byID, k.Records[0].ID)
		}
		k.Records, k.dropped = k.Records[1:], k.dropped+1
	}
}

// replay answers a keyed call from its kept answer: the first IDs, or
// ErrKeyReused when it asks for something else. ok is false when the
// key holds no answer.
func (k *Keys) replay(key Keyed, seq string, count uint64) (first uint64, ok bool, err error) {
	if key.Key == "" {
		return 0, false, nil
	}
	r, ok := k.lookup(key.id())
	if !ok {
		return 0, false, nil
	}
	if r.Kind == KeyReserve {
		return 0, true, fmt.Errorf("%w: key %q first opened a reservation of %d IDs of %s, now asks for %d IDs of %s", ErrKeyReused, key.Key, r.Count, seqName(r.Seq), count, seqName(seq))
	}
	if r.Seq != seq || r.Count != count {
		return 0, true, fmt.Errorf("%w: key %q first asked for %d IDs of %s, now %d of %s", ErrKeyReused, key.Key, r.Count, seqName(r.Seq), count, seqName(seq))
	}
	return r.First, true, nil
}

// claim applies a Claim: the kept answer when the key holds one, else
// the claim's own ticks, kept. A named sequence's claim must name a live
// layout sequence, and ticks below its mark (from a window the log
// committed).
func (s *State) claim(c Claim, term uint64) Allocation {
	first, ok, err := s.Keys.replay(c.Keyed, c.Seq, c.Count)
	if ok {
		return Allocation{First: first, Err: err}
	}
	if c.Term != term {
		return Allocation{Err: fmt.Errorf("%w: committed in term %d, assigned in term %d", ErrClaimTerm, term, c.Term)}
	}
	if c.Seq != "" {
		seq, ok := s.Sequences[c.Seq]
		switch {
		case !ok || seq.Dropped:
			return Allocation{Err: fmt.Errorf("%w: %q", ErrNoSequence, c.Seq)}
		case seq.Layout == nil:
			return Allocation{Err: fmt.Errorf("%w: a claim of dense sequence %q: its keyed calls are allocs", ErrInvalid, c.Seq)}
		case c.First+c.Count < c.First || c.First+c.Count > seq.Next:
			return Allocation{Err: fmt.Errorf("%w: a claim of ticks %d to %d of %q, above its mark %d", ErrInvalid, c.First, c.First+c.Count-1, c.Seq, seq.Next)}
		}
	}
	s.Keys.keep(KeyRecord{Seq: c.Seq, Count: c.Count, First: c.First, ID: c.id()})
	return Allocation{First: c.First}
}

// keyedAlloc applies an Alloc that may carry a key.
func (s *State) keyedAlloc(a Alloc, nowMs int64) Allocation {
	first, ok, err := s.Keys.replay(a.Keyed, a.Seq, a.Count)
	if ok {
		return Allocation{First: first, Err: err}
	}
	got := s.alloc(a, nowMs)
	if got.Err == nil && a.Key != "" {
		s.Keys.keep(KeyRecord{Seq: a.Seq, Count: a.Count, First: got.First, ID: a.id()})
	}
	return got
}

// keyedOpen applies a keyed Open. When its key holds a reservation, it
// answers that one (the first call's ticks, count and TTL, and where it
// stands now: open, completed, abandoned, expired, or unknown once
// forgotten) and opens nothing: a retry, or a writer back from a crash,
// learns its reservation and can complete it. Asked with another count
// or TTL, or when the key was first used for IDs, it is ErrKeyReused.
// Otherwise it opens the reservation and keeps it under the key, but
// only when committed in the term its ticks were assigned in (else
// ErrClaimTerm, nothing opened: a reservation's ticks, like a claim's,
// had no round, so no retry may be given ticks refused to its first
// attempt).
func (t *Tracking) keyedOpen(tr Track, reach uint64, keys *Keys, term uint64) Outcome {
	if r, ok := keys.lookup(tr.id()); ok {
		return keptOpen(r, tr, t)
	}
	if tr.Term != term {
		return Outcome{Err: fmt.Errorf("%w: reservation committed in term %d, assigned in term %d", ErrClaimTerm, term, tr.Term)}
	}
	o := t.open(tr, reach)
	if o.Err == nil {
		keys.keep(KeyRecord{Kind: KeyReserve, Count: tr.Count, First: tr.First, TTLMs: tr.TTLMs, ID: tr.id()})
	}
	return o
}

// keptOpen answers a keyed Open (of tr.Seq) from r, the record its key
// holds: the reservation r kept, as first granted, with its fate now in
// t, the tracking of r's sequence (nil: none, so unknown); or
// ErrKeyReused when the key was first used for IDs, or for a reservation
// of another sequence, count, or TTL (when tr names one).
func keptOpen(r KeyRecord, tr Track, t *Tracking) Outcome {
	switch {
	case r.Kind != KeyReserve:
		return Outcome{Err: fmt.Errorf("%w: key %q first asked for %d IDs of %s, now opens a reservation of %d", ErrKeyReused, tr.Key, r.Count, seqName(r.Seq), tr.Count)}
	case r.Seq != tr.Seq:
		return Outcome{Err: fmt.Errorf("%w: key %q first opened a reservation of %s, now of %s", ErrKeyReused, tr.Key, seqName(r.Seq), seqName(tr.Seq))}
	case r.Count != tr.Count || !tr.AnyTTL && r.TTLMs != tr.TTLMs:
		return Outcome{Err: fmt.Errorf("%w: key %q first opened a reservation of %d IDs for %d ms, now asks for %d for %d ms", ErrKeyReused, tr.Key, r.Count, r.TTLMs, tr.Count, tr.TTLMs)}
	}
	o := Outcome{First: r.First, Count: r.Count, TTLMs: r.TTLMs}
	if t == nil {
		return o
	}
	if open, ok := t.Open[r.First]; ok && open.Count == r.Count {
		o.Fate, o.Ext = FateOpen, open.Ext
	} else if f := t.fate(r.First, r.Count); f != FateCompleted || r.First >= t.Forgotten {
		o.Fate = f
	}
	return o
}

// seqName names a sequence in an error: "" is the default one.
func seqName(seq string) string {
	if seq == "" {
		return "the default sequence"
	}
	return fmt.Sprintf("sequence %q", seq)
}

// keyedTracks reports whether any of tracks carries a key.
func keyedTracks(tracks []Track) bool {
	for _, tr := range tracks {
		if tr.Key != "" {
			return true
		}
	}
	return false
}
