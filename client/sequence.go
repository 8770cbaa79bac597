package client

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// DenseKind is the kind of a dense sequence (CreateSequence): consecutive
// integers from its start value. Any other kind is a layout spec.
const DenseKind = "dense"

// Sequence is a handle on one named sequence of the cluster, made by
// Client.Sequence. It is safe for concurrent use, and cheap: handles on
// the same name share their state.
//
// Its calls keep the order promise of the client's own (see NextN) within
// the sequence: a call returns only IDs above every ID of that sequence
// returned by calls that completed before it started. Two sequences owe
// each other no order, and may hand out equal values. Unkeyed calls of
// 64-bit IDs share a stream of their own (unary under WithUnary or
// WithCoalescing, or against a node without NextStream); keyed and
// 128-bit calls are unary; all with the client's failover and retries.
type Sequence struct {
	c    *Client
	name string
	st   *sequenceState // nil for the default sequence
}

// sequenceState is what a client knows of one named sequence.
type sequenceState struct {
	// returned is the highest ID (or tick, for a 128-bit layout) of this
	// sequence returned so far: the floor of its calls.
	returned atomic.Uint64
	// mark is the highest settled mark of this sequence reported so far
	// (sequence_settle.go).
	mark atomic.Pointer[Mark]
	// kind is the sequence's kind once DescribeSequence told it, nil
	// before. A sequence's kind never changes (a dropped name comes back
	// only with the same kind); a NotFound forgets it all the same, so a
	// group that changed is asked for again.
	kind atomic.Pointer[sequenceKind]
}

// sequenceKind is a named sequence's kind as DescribeSequence reports it.
type sequenceKind struct {
	dense  bool
	layout layout.Layout // for a layout sequence
	group  uint64
}

// String is the kind as the cluster names it.
func (k *sequenceKind) String() string {
	if k.dense {
		return DenseKind
	}
	return k.layout.String()
}

// Sequence returns a handle on the named sequence name. It asks nothing
// of the cluster: a sequence that does not exist makes its calls fail
// with the cluster's NotFound, and a malformed name (see
// api.CheckSequenceName) with its InvalidArgument. The empty name is the
// cluster's default sequence: the handle's calls are the client's own
// (Next, NextN, NextUUIDs, NextULIDs), with the client's floor.
func (c *Client) Sequence(name string) *Sequence {
	if name == "" {
		return &Sequence{c: c}
	}
	st, _ := c.sequences.LoadOrStore(name, &sequenceState{})
	return &Sequence{c: c, name: name, st: st.(*sequenceState)}
}

// Name is the sequence's name; "" for the default sequence.
func (s *Sequence) Name() string { return s.name }

// Next returns one ID of the sequence.
func (s *Sequence) Next(ctx context.Context) (uint64, error) { return one(s.NextN(ctx, 1)) }

// NextN returns n IDs of the sequence, strictly increasing: consecutive
// integers for a dense sequence, IDs of its layout and group for a layout
// sequence of 64 bits. A sequence of a 128-bit layout refuses it (the
// cluster's FailedPrecondition; once the handle knows the kind,
// layout.ErrWrongWidth without asking): call NextUUIDs or NextULIDs.
func (s *Sequence) NextN(ctx context.Context, n int) ([]uint64, error) {
	if s.st == nil {
		return s.c.NextN(ctx, n)
	}
	if err := checkCount(n); err != nil {
		return nil, err
	}
	if k := s.st.kind.Load(); k != nil && !k.dense && k.layout.Wide() {
		return nil, fmt.Errorf("sequence %q of layout %s makes 128-bit IDs: call NextUUIDs or NextULIDs: %w", s.name, k.layout, layout.ErrWrongWidth)
	}
	return s.next(ctx, n, false)
}

// next asks for n IDs (ticks when ticks is set) of the sequence and
// checks them against the sequence's floor, taken before the call.
func (s *Sequence) next(ctx context.Context, n int, ticks bool) ([]uint64, error) {
	ctx, k, err := s.c.keyed(ctx)
	if err != nil {
		return nil, err
	}
	floor := s.st.returned.Load()
	var ids []uint64
	if k.key == "" && !ticks && s.c.coalescer == nil && !s.c.unary.Load() {
		ids, err = s.c.seqStream.nextIn(ctx, s.name, n)
		if status.Code(err) == codes.Unimplemented {
			// A server or proxy without NextStream: unary from now on.
			s.c.unary.Store(true)
			ids, err = s.c.fetchFrom(ctx, s.name, n, ticks)
		}
	} else {
		ids, err = s.c.fetchFrom(ctx, s.name, n, ticks)
	}
	if err != nil {
		if status.Code(err) == codes.NotFound {
			s.st.kind.Store(nil) // dropped: a new one may have another group
		}
		return nil, err
	}
	if k.key != "" {
		return acceptKeyed(&s.st.returned, ids, floor, k)
	}
	return acceptAbove(&s.st.returned, ids, floor)
}

// NextUUID returns one UUIDv7 of a sequence of the uuidv7 layout.
func (s *Sequence) NextUUID(ctx context.Context) (layout.UUID, error) {
	return oneWide(s.NextUUIDs(ctx, 1))
}

// NextUUIDs returns n UUIDv7s of a sequence of the uuidv7 layout, as
// Client.NextUUIDs does for the default sequence: the cluster sends
// ticks, which the client renders with the sequence's own group. The
// first call on a name asks the cluster for the sequence's kind
// (DescribeSequence); a sequence of another kind gets
// layout.ErrWrongWidth.
func (s *Sequence) NextUUIDs(ctx context.Context, n int) ([]layout.UUID, error) {
	if s.st == nil {
		return s.c.NextUUIDs(ctx, n)
	}
	return sequenceWide[layout.UUID](ctx, s, layout.FormatUUIDv7, n)
}

// NextULID returns one ULID of a sequence of the ulid layout.
func (s *Sequence) NextULID(ctx context.Context) (layout.ULID, error) {
	return oneWide(s.NextULIDs(ctx, 1))
}

// NextULIDs is NextUUIDs for a sequence of the ulid layout.
func (s *Sequence) NextULIDs(ctx context.Context, n int) ([]layout.ULID, error) {
	if s.st == nil {
		return s.c.NextULIDs(ctx, n)
	}
	return sequenceWide[layout.ULID](ctx, s, layout.FormatULID, n)
}

// sequenceWide is nextWide for a named sequence: ticks of the sequence,
// checked against its floor, rendered with its layout and group.
func sequenceWide[T ~[16]byte](ctx context.Context, s *Sequence, format layout.Format, n int) ([]T, error) {
	if err := checkCount(n); err != nil {
		return nil, err
	}
	k, err := s.kind(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case k.dense:
		return nil, fmt.Errorf("sequence %q is dense, of 64-bit integers, not %s: call Next or NextN: %w", s.name, format, layout.ErrWrongWidth)
	case !k.layout.Wide():
		return nil, fmt.Errorf("sequence %q of layout %s makes 64-bit IDs, not %s: call Next or NextN: %w", s.name, k.layout, format, layout.ErrWrongWidth)
	case k.layout.Format != format:
		return nil, fmt.Errorf("sequence %q of layout %s makes %s IDs, not %s: %w", s.name, k.layout, k.layout.Format, format, layout.ErrWrongWidth)
	}
	ticks, err := s.next(ctx, n, true)
	if err != nil {
		return nil, err
	}
	return render[T](wideLayout{layout: k.layout, group: k.group}, ticks)
}

// kind returns the sequence's kind, asking the cluster the first time.
func (s *Sequence) kind(ctx context.Context) (*sequenceKind, error) {
	if k := s.st.kind.Load(); k != nil {
		return k, nil
	}
	info, err := s.c.DescribeSequence(ctx, s.name)
	if err != nil {
		return nil, fmt.Errorf("ask the cluster for sequence %q's kind: %w", s.name, err)
	}
	if info.Dropped {
		// As Next on it would answer; the kind is not kept, since a
		// sequence created again under the name may have another group.
		return nil, status.Errorf(codes.NotFound, "no sequence %q: it was dropped; create it again with ordo sequence create", s.name)
	}
	k, err := parseKind(info)
	if err != nil {
		return nil, err
	}
	s.st.kind.CompareAndSwap(nil, k)
	return k, nil
}

// parseKind reads the kind and group a SequenceInfo names. A kind the
// client cannot read, or a group that does not fit its layout, is the
// server's bug: ErrBadResponse.
func parseKind(info *api.SequenceInfo) (*sequenceKind, error) {
	if info.Kind == DenseKind {
		return &sequenceKind{dense: true}, nil
	}
	l, err := layout.Parse(info.Kind)
	if err != nil {
		return nil, fmt.Errorf("%w: sequence %q of kind %q: %w", ErrBadResponse, info.Name, info.Kind, err)
	}
	if err := l.CheckGroup(info.Group); err != nil {
		return nil, fmt.Errorf("%w: sequence %q: %w", ErrBadResponse, info.Name, err)
	}
	return &sequenceKind{layout: l, group: info.Group}, nil
}

// SequenceOption is an option of CreateSequence.
type SequenceOption func(*api.CreateSequenceRequest)

// DistinctGroup makes CreateSequence of a layout sequence refuse a group
// that another live named sequence of the same layout, or the cluster's
// default sequence if its layout is the same, already has: the cluster's
// FailedPrecondition, naming the sequence that has it. It is checked
// when the sequence is created, against those that exist then. A dense
// sequence has no group: with it, the cluster's InvalidArgument.
func DistinctGroup() SequenceOption {
	return func(r *api.CreateSequenceRequest) { r.DistinctGroup = true }
}

// CreateSequence creates the named sequence name (admin access) of kind
// DenseKind, counting from start (0 means 1; group must be 0), or of a
// layout as --layout takes it (default, twitter, ..., uuidv7, ulid,
// custom:...) with group in its group field (start must be 0). Two
// sequences may share a group and then hand out equal values, unless the
// create asks for DistinctGroup.
//
// A name in use is the cluster's AlreadyExists. A dropped name comes back
// as a sequence of the same kind that starts above everything the old
// one handed out; another kind is FailedPrecondition. It has Admin's
// retries: an attempt whose answer was lost may have created the
// sequence, so when a later attempt finds the name in use by a sequence of
// just the kind, group and start asked for, that sequence is the answer
// (a caller that must tell its own creation from another's gives each
// creation a name of its own).
func (c *Client) CreateSequence(ctx context.Context, name, kind string, group, start uint64, opts ...SequenceOption) (*api.SequenceInfo, error) {
	req := &api.CreateSequenceRequest{Name: name, Kind: kind, Group: group, Start: start}
	for _, o := range opts {
		o(req)
	}
	var info *api.SequenceInfo
	attempts := 0
	err := c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
		attempts++
		var err error
		info, err = a.CreateSequence(ctx, req, opts...)
		return err
	})
	if status.Code(err) != codes.AlreadyExists || attempts == 1 {
		return info, err
	}
	got, derr := c.DescribeSequence(ctx, name)
	if derr != nil || !createdAsAsked(req, got) {
		return nil, err
	}
	return got, nil
}

// createdAsAsked reports whether info is a live sequence of the kind,
// group and start req asked for.
func createdAsAsked(req *api.CreateSequenceRequest, info *api.SequenceInfo) bool {
	if info.Dropped || info.Name != req.Name || info.Group != req.Group {
		return false
	}
	if req.Kind == DenseKind {
		return info.Kind == DenseKind && info.Start == max(req.Start, 1)
	}
	l, err := layout.Parse(req.Kind)
	return err == nil && l.String() == info.Kind
}

// ListSequences lists the cluster's named sequences, dropped ones left
// out. Any caller may.
func (c *Client) ListSequences(ctx context.Context) ([]*api.SequenceInfo, error) {
	var resp *api.ListSequencesResponse
	err := c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = a.ListSequences(ctx, &api.ListSequencesRequest{}, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.Sequences, nil
}

// DescribeSequence reports the named sequence name: its kind, group,
// start and the next value (dense) or tick (layout) it hands out at the
// earliest. None is the cluster's NotFound. Any caller may.
func (c *Client) DescribeSequence(ctx context.Context, name string) (*api.SequenceInfo, error) {
	var info *api.SequenceInfo
	err := c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
		var err error
		info, err = a.DescribeSequence(ctx, &api.SequenceRequest{Name: name}, opts...)
		return err
	})
	return info, err
}

// DropSequence drops the named sequence name (admin access): calls that
// name it fail NotFound from then on, and its mark is kept (see
// CreateSequence). None is the cluster's NotFound on the first attempt;
// as with Remove, a later attempt that finds none has done what was
// asked, since an earlier one whose answer was lost dropped it, and
// answers what DescribeSequence tells of the dropped name (just its name
// and Dropped if it tells nothing).
func (c *Client) DropSequence(ctx context.Context, name string) (*api.SequenceInfo, error) {
	var info *api.SequenceInfo
	attempts := 0
	err := c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
		attempts++
		var err error
		info, err = a.DropSequence(ctx, &api.SequenceRequest{Name: name}, opts...)
		return err
	})
	if st, ok := c.sequences.Load(name); ok && (err == nil || status.Code(err) == codes.NotFound) {
		st.(*sequenceState).kind.Store(nil)
	}
	if status.Code(err) != codes.NotFound || attempts == 1 {
		return info, err
	}
	if got, derr := c.DescribeSequence(ctx, name); derr == nil && got.Dropped {
		return got, nil
	}
	return &api.SequenceInfo{Name: name, Dropped: true}, nil
}
