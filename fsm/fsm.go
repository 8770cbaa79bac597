// Package fsm is Ordo's replicated state machine: the high-water mark of
// reserved ticks, the cluster's ID layout and group, and each node's
// client-facing address.
//
// It is small and deterministic on purpose. Apply decodes a versioned
// command, validates it, applies it and returns a typed Result; a command
// it does not understand is rejected, never half-applied, and reported
// (Unreadable), since the node must not serve without it. The high-water
// mark only moves up: Reserve sets it to max(old, proposed), so a stale or
// repeated reservation can never lower it.
package fsm

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/internal/strictjson"
	"github.com/seed-e8569b35/ordo/layout"
)

// Errors returned in Result.Err and by Decode.
var (
	// ErrMalformed means the command bytes could not be decoded.
	ErrMalformed = errors.New("malformed command")
	// ErrUnknownVersion means the command was written by a newer Ordo.
	ErrUnknownVersion = errors.New("unknown command version")
	// ErrUnknownOp means the command names an operation this FSM lacks.
	ErrUnknownOp = errors.New("unknown command op")
	// ErrInvalid means a known command carries a bad field.
	ErrInvalid = errors.New("invalid command")
	// ErrLayoutMismatch means an init names a layout or group other than
	// the one the cluster was created with.
	ErrLayoutMismatch = errors.New("layout mismatch")
	// ErrClusterVersion means a command needs a higher cluster version
	// than the cluster has: some voter may run an Ordo that cannot read
	// it.
	ErrClusterVersion = errors.New("cluster version too low")
	// ErrUnreadable means a committed log entry could not be read (see
	// FSM.Unreadable); it wraps the Decode error.
	ErrUnreadable = errors.New("a committed log entry this node cannot read (written by a newer Ordo, or damaged); upgrade this node or restore it")
)

// endOfTime is later than any epoch.
var endOfTime = time.UnixMilli(math.MaxInt64)

// Version is the command format this FSM writes and reads.
const Version = 1

// Reads is the highest cluster version this FSM reads. A cluster's
// version (State.ClusterVersion) says which ops its log may hold: a
// leader raises it only once every voter reports it reads the new one,
// since a node that meets an op it does not know stops (Unreadable).
// Version 2 adds OpSettle; version 3 named sequences (OpCreateSequence,
// OpDropSequence, and Allocs in OpSettle), their tracked reservations
// (Tracks that name a sequence) and idempotency keys (Claims, and keyed
// Opens, in OpSettle); version 4 reads a reservation's reading (Clock)
// as its leader's lead ceiling less 10 s (CeilingVersion).
const Reads = 4

// CeilingVersion is the cluster version from which a reservation's
// reading is its leader's lead ceiling less the least lead bound
// (sequencer.leadCeiling), not its clock reading. A version before it
// reads the reading as a clock reading and adds its own lead bound to
// it, so a ceiling recorded while such a version may lead would let it
// run ahead of the clock by two lead bounds less 10 s.
const CeilingVersion = 4

// SettleVersion is the cluster version from which OpSettle is accepted.
const SettleVersion = 2

// Op names a command.
type Op string

// The commands. Each is an append-only fact about the cluster.
const (
	// OpInit fixes the layout and group; accepted once, then only repeated
	// with the same values.
	OpInit Op = "init"
	// OpReserve raises the high-water mark to UpTo.
	OpReserve Op = "reserve"
	// OpSetNode records a node's client-facing (gRPC) address.
	OpSetNode Op = "set_node"
	// OpDeleteNode forgets a node's address after it is removed.
	OpDeleteNode Op = "delete_node"
	// opConfirm changes nothing. Versions before the term round committed
	// one for every confirmed read; it is still read, as a no-op, so that
	// their logs replay (an op this FSM does not know stops the node).
	opConfirm Op = "confirm"
	// OpSettle applies Tracks (tracked reservations opened, completed,
	// abandoned, extended, expired) and raises the tracked frontier
	// (cluster version 2).
	OpSettle Op = "settle"
	// OpClusterVersion raises the cluster version to ClusterVersion.
	OpClusterVersion Op = "cluster_version"
	// OpCreateSequence creates named sequence Sequence of Kind, Group and
	// Start; OpDropSequence drops it (cluster version 3).
	OpCreateSequence Op = "create_sequence"
	OpDropSequence   Op = "drop_sequence"
)

// Command is one log entry's payload.
type Command struct {
	Version int            `json:"v"`
	Op      Op             `json:"op"`
	Layout  *layout.Layout `json:"layout,omitempty"`
	Group   uint64         `json:"group,omitempty"`
	// ClusterID names the cluster (init only): random, chosen by the
	// first leader, so that nodes can tell their peers from strangers.
	ClusterID string `json:"cluster_id,omitempty"`
	UpTo      uint64 `json:"up_to,omitempty"`
	NodeID    string `json:"node_id,omitempty"`
	GRPCAddr  string `json:"grpc_addr,omitempty"`
	// Tracks and Frontier are a settle's (see Tracking).
	Tracks   []Track `json:"tracks,omitempty"`
	Frontier uint64  `json:"frontier,omitempty"`
	// ClusterVersion is what OpClusterVersion raises the version to.
	ClusterVersion int `json:"cluster_version,omitempty"`
	// Sequence, Kind and Start name and define a named sequence (Group
	// is its group); Allocs ask for IDs of named sequences in a settle,
	// at the proposer's clock NowMs.
	Sequence string  `json:"sequence,omitempty"`
	Kind     string  `json:"kind,omitempty"`
	Start    uint64  `json:"start,omitempty"`
	Allocs   []Alloc `json:"allocs,omitempty"`
	NowMs    int64   `json:"now_ms,omitempty"`
	// DistinctGroup makes an OpCreateSequence of a layout sequence refuse
	// a group another live named sequence of the same layout, or the
	// default sequence if the cluster's layout is the same, already has
	// (ErrGroupInUse). It came with the named sequences themselves
	// (cluster version 3), so every node that reads OpCreateSequence
	// knows it; omitted when false, so an entry written without it
	// decodes as it always did.
	DistinctGroup bool `json:"distinct_group,omitempty"`
	// Claims are keyed calls of the default sequence (see Keys).
	Claims []Claim `json:"claims,omitempty"`
	// Clock is the proposer's clock reading in ticks (reserve only; 0 for
	// none). It travels in the log entry's Extensions, not in its Data:
	// nodes built before it existed decode Data strictly and would reject
	// the whole reservation, leaving their high-water mark behind the
	// others'; they ignore Extensions, so a rolling upgrade stays safe.
	Clock uint64 `json:"-"`
}

// extensions is the JSON in a log entry's Extensions. Unknown fields are
// ignored there, so that later versions can add to it.
type extensions struct {
	Clock uint64 `json:"clock,omitempty"`
}

// Result is what Apply returns for every command.
type Result struct {
	// Err is set when the command was rejected; nothing was changed.
	Err error
	// Prev is the high-water mark before this command.
	Prev uint64
	// HighWater is the high-water mark after it.
	HighWater uint64
	// ClockHigh is the highest clock reading, in ticks, that any
	// reservation up to this one carried (State.ClockHigh after it).
	ClockHigh uint64
	// PrevClock is the reading the reservation that set Prev carried
	// (State.MarkClock before this command); 0 when it carried none.
	PrevClock uint64
	// Term is the Raft term of the log entry. A leader compares it with
	// its own term: a match proves the entry was appended by that leader
	// and committed by a majority in that term.
	Term uint64
	// Outcomes holds what each of a settle's Tracks did, in order.
	Outcomes []Outcome
	// Settled is W after the command, in ticks.
	Settled uint64
	// SeqSettled is, for each named sequence a settle touched (one of
	// its Tracks, or an Alloc of a sequence with tracked reservations),
	// its W after the command.
	SeqSettled map[string]uint64
	// Allocations holds what each of a settle's Allocs got, in order,
	// and Claimed what each of its Claims did.
	Allocations []Allocation
	Claimed     []Allocation
}

// Encode serialises a command, stamping the current version.
func Encode(c Command) ([]byte, error) {
	c.Version = Version
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command: %w", err)
	}
	return b, nil
}

// Entry encodes a command as the raft.Log that Raft appends: the command
// in Data, its clock reading in Extensions.
func Entry(c Command) (raft.Log, error) {
	data, err := Encode(c)
	if err != nil {
		return raft.Log{}, err
	}
	l := raft.Log{Type: raft.LogCommand, Data: data}
	if c.Clock != 0 {
		if l.Extensions, err = json.Marshal(extensions{Clock: c.Clock}); err != nil {
			return raft.Log{}, fmt.Errorf("encode extensions: %w", err)
		}
	}
	return l, nil
}

// Decode parses and validates a command.
func Decode(b []byte) (Command, error) {
	var c Command
	if err := strictjson.Decode(bytes.NewReader(b), &c); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if c.Version != Version {
		return Command{}, fmt.Errorf("%w: %d (this node reads %d)", ErrUnknownVersion, c.Version, Version)
	}
	switch c.Op {
	case OpInit:
		if c.Layout == nil {
			return Command{}, fmt.Errorf("%w: init without layout", ErrInvalid)
		}
		// The epoch was checked against the proposer's clock; replaying
		// the log must not depend on the replaying node's clock, so the
		// "epoch not in the future" check is judged at the end of time.
		if err := c.Layout.Validate(endOfTime); err != nil {
			return Command{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if err := c.Layout.CheckGroup(c.Group); err != nil {
			return Command{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	case OpReserve:
		if c.UpTo == 0 {
			return Command{}, fmt.Errorf("%w: reserve up to 0", ErrInvalid)
		}
	case OpSetNode:
		if c.NodeID == "" || c.GRPCAddr == "" {
			return Command{}, fmt.Errorf("%w: set_node needs node_id and grpc_addr", ErrInvalid)
		}
	case OpDeleteNode:
		if c.NodeID == "" {
			return Command{}, fmt.Errorf("%w: delete_node needs node_id", ErrInvalid)
		}
	case OpSettle:
		for _, t := range c.Tracks {
			if err := checkTrack(t); err != nil {
				return Command{}, err
			}
		}
		for _, a := range c.Allocs {
			if err := CheckSequenceName(a.Seq); err != nil {
				return Command{}, err
			}
			if a.Count == 0 {
				return Command{}, fmt.Errorf("%w: alloc of 0 IDs of %q", ErrInvalid, a.Seq)
			}
			if err := a.Keyed.check(); err != nil {
				return Command{}, err
			}
		}
		for _, cl := range c.Claims {
			if err := cl.Keyed.check(); err != nil {
				return Command{}, err
			}
			if cl.Key == "" || cl.Count == 0 || cl.First == 0 || cl.Term == 0 {
				return Command{}, fmt.Errorf("%w: claim of %d ticks from %d with key %q", ErrInvalid, cl.Count, cl.First, cl.Key)
			}
			if cl.Seq != "" {
				if err := CheckSequenceName(cl.Seq); err != nil {
					return Command{}, err
				}
			}
		}
	case OpCreateSequence:
		if err := CheckSequenceName(c.Sequence); err != nil {
			return Command{}, err
		}
		if _, err := NewSequence(c.Kind, c.Group, c.Start); err != nil {
			return Command{}, err
		}
		if c.DistinctGroup && c.Kind == KindDense {
			return Command{}, fmt.Errorf("%w: a dense sequence has no group to keep distinct", ErrInvalid)
		}
	case OpDropSequence:
		if err := CheckSequenceName(c.Sequence); err != nil {
			return Command{}, err
		}
	case OpClusterVersion:
		if c.ClusterVersion < 1 || c.ClusterVersion > Reads {
			return Command{}, fmt.Errorf("%w: cluster version %d (this node reads up to %d)", ErrUnknownVersion, c.ClusterVersion, Reads)
		}
	case opConfirm:
	default:
		return Command{}, fmt.Errorf("%w: %q", ErrUnknownOp, c.Op)
	}
	return c, nil
}

// State is the replicated state; also the snapshot format.
type State struct {
	// HighWater is the exclusive upper bound of every tick ever reserved:
	// no ID at or above it has been handed out.
	HighWater uint64 `json:"high_water"`
	// Layout is nil until the first leader commits OpInit.
	Layout *layout.Layout `json:"layout,omitempty"`
	// Group is the group field of every ID.
	Group uint64 `json:"group"`
	// ClusterID is set with the layout; empty in clusters created before
	// it existed.
	ClusterID string `json:"cluster_id,omitempty"`
	// Nodes maps a node ID to its gRPC address.
	Nodes map[string]string `json:"nodes"`
	// ClockHigh is the highest reading, in ticks, any reservation
	// carried: from cluster version 4 (CeilingVersion), its leader's lead
	// ceiling less the least lead bound (sequencer.leadCeiling), which a
	// new leader may reach whatever its own clock and window say; before,
	// the leader's clock reading, as versions before the ceiling record.
	ClockHigh uint64 `json:"clock_high,omitempty"`
	// MarkClock is the reading the reservation that last raised HighWater
	// carried; 0 when it carried none (written by an older version), and
	// then a new leader cannot tell how far the mark is ahead of a clock.
	MarkClock uint64 `json:"mark_clock,omitempty"`
	// ClusterVersion is the cluster version (see Reads); 0 means 1.
	ClusterVersion int `json:"cluster_version,omitempty"`
	// Tracking holds the tracked reservations and W. State() leaves its
	// open and dead sets out (see State).
	Tracking Tracking `json:"tracking,omitzero"`
	// Sequences holds the named sequences (State() leaves them out:
	// Sequences and Sequence have them).
	Sequences map[string]*Sequence `json:"sequences,omitempty"`
	// Keys holds the answers kept for idempotency keys (State() leaves
	// them out).
	Keys Keys `json:"keys,omitzero"`
	// SeqTracking holds each named sequence's tracked reservations and
	// W, from its first Reserve on (see seqtracking.go; State() leaves it
	// out). A dropped sequence keeps its own.
	SeqTracking map[string]*Tracking `json:"sequence_tracking,omitempty"`
	// namedDead counts the dead spans of SeqTracking, which are bounded
	// together.
	namedDead int
}

// FSM implements raft.FSM.
type FSM struct {
	mu    sync.RWMutex
	state State
	// unreadable is the first entry Apply could not read since the state
	// was last restored, nil if none (see Unreadable).
	unreadable error
	// onInit, if set, is called with the layout whenever it becomes known
	// (applied or restored), so a node can refuse to serve a cluster whose
	// layout differs from its own configuration.
	onInit func(layout.Layout, uint64)
	// onUnreadable, if set, is called when Apply meets the first entry it
	// cannot read, so a node can refuse to serve at once.
	onUnreadable func(error)
}

// New returns an empty FSM. onInit and onUnreadable may be nil.
func New(onInit func(layout.Layout, uint64), onUnreadable func(error)) *FSM {
	return &FSM{state: State{Nodes: map[string]string{}}, onInit: onInit, onUnreadable: onUnreadable}
}

// Unreadable returns the first committed entry Apply could not read since
// the state was last restored, as an ErrUnreadable error naming its index,
// or nil. Unreadable means malformed (it does not decode strictly: damage,
// or a field a newer Ordo added), of another Version, or of an op this
// FSM does not know. Apply skips it, as Raft needs it to, but the state
// then lacks what the entry did, perhaps a reservation: a node that led
// from that state could hand out IDs below the cluster's high-water mark.
// So a node that holds such an entry must not serve, and Snapshot
// refuses, so that no snapshot leaves the entry behind: a node that is
// upgraded replays it. A known command with a bad field (ErrInvalid) is
// not unreadable: every version that knows the op rejects it alike, as
// the one that wrote it did, and skipping it is what every node does.
func (f *FSM) Unreadable() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.unreadable
}

// unreadable reports whether a Decode error makes an entry unreadable
// (see Unreadable).
func unreadable(err error) bool {
	return errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownVersion) || errors.Is(err, ErrUnknownOp)
}

// State returns a copy of the current state, without the tracked
// reservations' open and dead sets, which can be large: Tracked has them.
func (f *FSM) State() State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.state
	s.Tracking = Tracking{Settled: s.Tracking.Settled, Frontier: s.Tracking.Frontier, Forgotten: s.Tracking.Forgotten}
	s.Sequences, s.Keys, s.SeqTracking = nil, Keys{}, nil
	s.Nodes = maps.Clone(f.state.Nodes)
	if f.state.Layout != nil {
		l := *f.state.Layout
		s.Layout = &l
	}
	return s
}

// Sequences returns a copy of the named sequences, dropped ones included.
func (f *FSM) Sequences() map[string]*Sequence {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return cloneSequences(f.state.Sequences)
}

// Sequence returns a copy of named sequence name, if it exists (dropped
// or not).
func (f *FSM) Sequence(name string) (Sequence, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, ok := f.state.Sequences[name]
	if !ok {
		return Sequence{}, false
	}
	return s.clone(), true
}

// SequencesOf returns a copy of each sequence names name, in order, read
// at one instant (one lock for a stream message's calls, not one a call);
// a name the state does not hold gets the zero Sequence, whose Kind is
// empty.
func (f *FSM) SequencesOf(names []string) []Sequence {
	out := make([]Sequence, len(names))
	f.mu.RLock()
	defer f.mu.RUnlock()
	for i, name := range names {
		if s, ok := f.state.Sequences[name]; ok {
			out[i] = s.clone()
		}
	}
	return out
}

// JumpSequences moves the named sequences' marks past what a lost or
// backed-up cluster may have handed out (State.JumpSequences). Only for
// a recovery's scratch FSM, never one that serves: it changes the state
// outside the log.
func (f *FSM) JumpSequences(now time.Time, jump time.Duration, denseSkip uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.JumpSequences(now, jump, denseSkip)
}

// Tracked returns a copy of the tracked reservations and W.
func (f *FSM) Tracked() Tracking {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Tracking.clone()
}

// Settled returns W, in ticks.
func (f *FSM) Settled() uint64 {
	w, _ := f.Marks()
	return w
}

// Marks returns W and the tracked frontier, in ticks.
func (f *FSM) Marks() (settled, frontier uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Tracking.Settled, f.state.Tracking.Frontier
}

// ClusterVersion returns the cluster version (see Reads).
func (f *FSM) ClusterVersion() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return max(f.state.ClusterVersion, 1)
}

// HighWater returns the replicated high-water mark.
func (f *FSM) HighWater() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.HighWater
}

// ClusterID returns the cluster's id, "" until the first leader sets it.
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.ClusterID
}

// NewClusterID returns a random id for a new cluster: the one its first
// leader records with OpInit, or a restore writes into State. It lives
// beside the state that holds the id because both the node and package
// backup make one; Apply never calls it, so the FSM stays deterministic.
func NewClusterID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a cluster id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// NodeAddr returns a node's gRPC address, if known.
func (f *FSM) NodeAddr(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.state.Nodes[id]
	return a, ok
}

// Apply implements raft.FSM. It always returns a Result.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := Decode(l.Data)
	if err != nil {
		stop := unreadable(err)
		if stop {
			err = fmt.Errorf("%w: entry %d of term %d: %w", ErrUnreadable, l.Index, l.Term, err)
		}
		// Nothing changes, but the Result still reports the mark, as it
		// does for every other command: a zero here would read as a mark
		// that went down to 0.
		f.mu.Lock()
		first := stop && f.unreadable == nil
		if first {
			f.unreadable = err
		}
		hw := f.state.HighWater
		r := Result{Err: err, Prev: hw, HighWater: hw, ClockHigh: f.state.ClockHigh, PrevClock: f.state.MarkClock, Term: l.Term}
		onUnreadable := f.onUnreadable
		f.mu.Unlock()
		if first && onUnreadable != nil {
			onUnreadable(err)
		}
		return r
	}
	c.Clock = clockOf(l.Extensions)
	return f.apply(c, l.Term)
}

// clockOf reads the clock reading from a log entry's Extensions. Anything
// unreadable counts as no reading, as it does on nodes that predate it:
// the reading only bounds how far ahead IDs run, never their order.
func clockOf(b []byte) uint64 {
	var e extensions
	if len(b) == 0 || json.Unmarshal(b, &e) != nil {
		return 0
	}
	return e.Clock
}

func (f *FSM) apply(c Command, term uint64) Result {
	f.mu.Lock()
	r := Result{Prev: f.state.HighWater, PrevClock: f.state.MarkClock, Term: term}
	var notify *layout.Layout
	switch c.Op {
	case OpInit:
		switch {
		case f.state.Layout == nil:
			l := *c.Layout
			f.state.Layout, f.state.Group, f.state.ClusterID = &l, c.Group, c.ClusterID
			notify = &l
		case *f.state.Layout != *c.Layout || f.state.Group != c.Group:
			r.Err = fmt.Errorf("%w: cluster has layout %s group %d, command has layout %s group %d",
				ErrLayoutMismatch, f.state.Layout, f.state.Group, c.Layout, c.Group)
		}
	case OpReserve:
		if c.UpTo > f.state.HighWater {
			f.state.HighWater, f.state.MarkClock = c.UpTo, c.Clock
		}
		f.state.ClockHigh = max(f.state.ClockHigh, c.Clock)
	case OpSetNode:
		f.state.Nodes[c.NodeID] = c.GRPCAddr
	case OpDeleteNode:
		delete(f.state.Nodes, c.NodeID)
	case OpSettle:
		if v := max(f.state.ClusterVersion, 1); v < SettleVersion {
			r.Err = fmt.Errorf("%w: tracked reservations need cluster version %d, the cluster has %d", ErrClusterVersion, SettleVersion, v)
			break
		}
		if (len(c.Allocs)+len(c.Claims) > 0 || keyedTracks(c.Tracks) || namedTracks(c.Tracks)) && max(f.state.ClusterVersion, 1) < SequencesVersion {
			r.Err = fmt.Errorf("%w: named sequences and idempotency keys need cluster version %d", ErrClusterVersion, SequencesVersion)
			break
		}
		r.Err = f.state.settle(c, term, &r)
	case OpCreateSequence, OpDropSequence:
		r.Err = f.state.defineSequence(c)
	case OpClusterVersion:
		f.state.ClusterVersion = max(f.state.ClusterVersion, c.ClusterVersion)
	}
	r.HighWater, r.ClockHigh, r.Settled = f.state.HighWater, f.state.ClockHigh, f.state.Tracking.Settled
	group, onInit := f.state.Group, f.onInit
	f.mu.Unlock()
	if notify != nil && onInit != nil {
		onInit(*notify, group)
	}
	return r
}

// settle applies an OpSettle entry: its Tracks in order (the default
// sequence's against the entry's frontier, a named sequence's against its
// own mark), then its Allocs and Claims, and last each named sequence's
// W it touched. highWater bounds the default sequence's frontier: no
// tick at or above it was ever reserved. It fails, changing nothing,
// only for a frontier above the high-water mark.
func (s *State) settle(c Command, term uint64, r *Result) error {
	if c.Frontier > s.HighWater {
		return fmt.Errorf("%w: frontier %d is above the high-water mark %d", ErrInvalid, c.Frontier, s.HighWater)
	}
	t := &s.Tracking
	t.init()
	reach := max(c.Frontier, t.Frontier)
	r.Outcomes = make([]Outcome, len(c.Tracks))
	var touched []string
	for i, tr := range c.Tracks {
		if tr.Seq == "" {
			r.Outcomes[i] = t.track(tr, reach, &s.Keys, term)
			continue
		}
		r.Outcomes[i] = s.trackNamed(tr, c.NowMs)
		touched = append(touched, tr.Seq)
	}
	t.advance(c.Frontier)
	for _, a := range c.Allocs {
		r.Allocations = append(r.Allocations, s.keyedAlloc(a, c.NowMs))
		if s.SeqTracking[a.Seq] != nil {
			touched = append(touched, a.Seq)
		}
	}
	for _, cl := range c.Claims {
		r.Claimed = append(r.Claimed, s.claim(cl, term))
	}
	for _, name := range touched {
		if _, done := r.SeqSettled[name]; done {
			continue
		}
		if w, ok := s.advanceNamed(name); ok {
			if r.SeqSettled == nil {
				r.SeqSettled = map[string]uint64{}
			}
			r.SeqSettled[name] = w
		}
	}
	return nil
}

// Snapshot implements raft.FSM. It refuses while an entry is unreadable
// (see Unreadable).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.Unreadable(); err != nil {
		return nil, fmt.Errorf("no snapshot may leave behind an entry not applied: %w", err)
	}
	f.mu.RLock()
	s := f.state
	s.Nodes = maps.Clone(f.state.Nodes)
	s.Tracking = f.state.Tracking.clone()
	s.Sequences = cloneSequences(f.state.Sequences)
	s.Keys = Keys{Records: slices.Clone(f.state.Keys.Records)}
	s.SeqTracking = cloneSeqTracking(f.state.SeqTracking)
	f.mu.RUnlock()
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM. A snapshot that does not decode is an
// error, not an empty state: an empty state would lower the high-water
// mark. A restored state came from a node that read every entry it covers,
// so it clears Unreadable.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var sp *State // a pointer, so that a null snapshot is caught
	if err := strictjson.Decode(rc, &sp); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	if sp == nil {
		return fmt.Errorf("decode snapshot: null")
	}
	s := *sp
	if s.Nodes == nil {
		s.Nodes = map[string]string{}
	}
	s.Tracking.restore()
	s.Keys.restore()
	s.restoreNamed()
	f.mu.Lock()
	f.state, f.unreadable = s, nil
	onInit := f.onInit
	f.mu.Unlock()
	if s.Layout != nil && onInit != nil {
		onInit(*s.Layout, s.Group)
	}
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// checkTrack validates a Track as Decode does: what every version that
// knows OpSettle refuses alike.
func checkTrack(t Track) error {
	switch t.Do {
	case DoOpen, DoComplete, DoAbandon, DoExtend, DoExpire:
	default:
		return fmt.Errorf("%w: %q", ErrUnknownOp, "settle/"+t.Do)
	}
	named := t.Seq != ""
	if named {
		if err := CheckSequenceName(t.Seq); err != nil {
			return err
		}
	}
	switch {
	case named && t.Do == DoOpen:
		// Apply assigns its IDs from the sequence's mark, in log order:
		// no first tick, and no term its IDs were assigned in.
		if t.First != 0 || t.Count == 0 || t.Term != 0 {
			return fmt.Errorf("%w: open of %d IDs of %q from %d in term %d: a named sequence's open names only its count", ErrInvalid, t.Count, t.Seq, t.First, t.Term)
		}
	case t.First == 0 || t.Count == 0 || t.First+t.Count < t.First:
		return fmt.Errorf("%w: %s of ticks %d+%d", ErrInvalid, t.Do, t.First, t.Count)
	}
	if (t.Do == DoOpen || t.Do == DoExtend) && t.TTLMs <= 0 {
		return fmt.Errorf("%w: %s with ttl %d ms", ErrInvalid, t.Do, t.TTLMs)
	}
	if err := t.Keyed.check(); err != nil {
		return err
	}
	if t.Key != "" && (t.Do != DoOpen || t.Term == 0 && !named) || t.Key == "" && (t.Term != 0 || t.AnyTTL) {
		return fmt.Errorf("%w: %s with key %q, term %d, any_ttl %t: only an open is keyed, and a keyed one of the default sequence names its term", ErrInvalid, t.Do, t.Key, t.Term, t.AnyTTL)
	}
	return nil
}
