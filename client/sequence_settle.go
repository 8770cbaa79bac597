package client

// A named sequence's tracked reservations and settled mark: each named
// sequence has its own W, in its own IDs (a dense sequence's values, a
// layout sequence's IDs of its group), which only its own reservations
// hold back. The handle's calls keep floors of their own, per sequence:
// of its IDs (shared with Next) and of its W.

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// target is the handle's sequence with its floors.
func (s *Sequence) target() target {
	return target{seq: s.name, returned: &s.st.returned, mark: &s.st.mark}
}

// Reserve returns count IDs of the sequence as a tracked reservation: its
// settled mark (Watermark) does not pass them until Complete or Abandon
// names the handle, or until ttl passes (0: the cluster's default). The
// IDs are the sequence's, as NextN returns them, above every ID of the
// sequence returned before the call began; the handle names the
// sequence. Keyed (WithIdempotencyKey, WithIdempotentRetries), a retry
// answers the first call's reservation with its Fate now, as
// Client.Reserve does; a key is one call across sequences. A sequence of
// a 128-bit layout refuses it: call ReserveUUIDs or ReserveULIDs. The
// default sequence's handle is the client's own Reserve.
func (s *Sequence) Reserve(ctx context.Context, count int, ttl time.Duration) (Reservation, error) {
	if s.st == nil {
		return s.c.Reserve(ctx, count, ttl)
	}
	if err := checkCount(count); err != nil {
		return Reservation{}, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return Reservation{}, err
	}
	if k := s.st.kind.Load(); k != nil && !k.dense && k.layout.Wide() {
		return Reservation{}, fmt.Errorf("sequence %q of layout %s makes 128-bit IDs: call ReserveUUIDs or ReserveULIDs: %w", s.name, k.layout, layout.ErrWrongWidth)
	}
	return s.c.reserve(ctx, s.target(), count, ms, false)
}

// ReserveUUIDs is Reserve for a sequence of the uuidv7 layout, rendered
// with its own group, as NextUUIDs renders its IDs.
func (s *Sequence) ReserveUUIDs(ctx context.Context, count int, ttl time.Duration) (handle string, ids []layout.UUID, err error) {
	if s.st == nil {
		return s.c.ReserveUUIDs(ctx, count, ttl)
	}
	return sequenceReserveWide[layout.UUID](ctx, s, layout.FormatUUIDv7, count, ttl)
}

// ReserveULIDs is ReserveUUIDs for a sequence of the ulid layout.
func (s *Sequence) ReserveULIDs(ctx context.Context, count int, ttl time.Duration) (handle string, ids []layout.ULID, err error) {
	if s.st == nil {
		return s.c.ReserveULIDs(ctx, count, ttl)
	}
	return sequenceReserveWide[layout.ULID](ctx, s, layout.FormatULID, count, ttl)
}

// sequenceReserveWide reserves count ticks of a 128-bit sequence and
// renders them in format with the sequence's layout and group.
func sequenceReserveWide[T ~[16]byte](ctx context.Context, s *Sequence, format layout.Format, count int, ttl time.Duration) (string, []T, error) {
	if err := checkCount(count); err != nil {
		return "", nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return "", nil, err
	}
	k, err := s.kind(ctx)
	if err != nil {
		return "", nil, err
	}
	if k.dense || !k.layout.Wide() || k.layout.Format != format {
		return "", nil, fmt.Errorf("sequence %q is %s, not of %s IDs: %w", s.name, k, format, layout.ErrWrongWidth)
	}
	r, err := s.c.reserve(ctx, s.target(), count, ms, true)
	if err != nil {
		return "", nil, err
	}
	ids, err := render[T](wideLayout{layout: k.layout, group: k.group}, r.IDs)
	if err != nil {
		return "", nil, err
	}
	return r.Handle, ids, nil
}

// Complete settles the sequence's reservation handle names once its IDs
// are published, as Client.Complete does. A handle of another sequence
// is the cluster's InvalidArgument.
func (s *Sequence) Complete(ctx context.Context, handle string) error {
	return s.c.complete(ctx, s.name, handle)
}

// Abandon settles the sequence's reservation handle names without
// publishing its IDs, as Client.Abandon does.
func (s *Sequence) Abandon(ctx context.Context, handle string) (api.Fate, error) {
	return s.c.abandon(ctx, s.name, handle)
}

// Extend gives the sequence's open reservation handle names ttl more, as
// Client.Extend does.
func (s *Sequence) Extend(ctx context.Context, handle string, ttl time.Duration) error {
	return s.c.extend(ctx, s.name, handle, ttl)
}

// Watermark returns the sequence's settled mark, read by the leader after
// every call that completed before this one began; never one below a
// mark of this sequence this client reported before. Mark.ID is an ID of
// the sequence (a dense sequence's value; 0 for a 128-bit layout, whose
// Mark.Tick is to be compared). A dropped sequence keeps its mark.
func (s *Sequence) Watermark(ctx context.Context) (Mark, error) {
	if s.st == nil {
		return s.c.Watermark(ctx)
	}
	return s.c.watermark(ctx, s.target())
}

// WatchWatermark calls fn with the sequence's settled mark each time the
// cluster sends it, as Client.WatchWatermark does for the default
// sequence's.
func (s *Sequence) WatchWatermark(ctx context.Context, fn func(Mark) error) error {
	if s.st == nil {
		return s.c.WatchWatermark(ctx, fn)
	}
	return s.c.watchWatermark(ctx, s.target(), fn)
}

// WaitSettled returns once the sequence's settled mark is above id, an ID
// of the sequence (a dense sequence's value): every ID of it up to id was
// completed, abandoned, expired, or handed out untracked. As
// Client.WaitSettled, for the sequence; a 128-bit sequence's marks carry
// only ticks: watch those with WatchWatermark.
func (s *Sequence) WaitSettled(ctx context.Context, id uint64) (Mark, error) {
	if s.st == nil {
		return s.c.WaitSettled(ctx, id)
	}
	if k := s.st.kind.Load(); k != nil && !k.dense && k.layout.Wide() {
		return Mark{}, fmt.Errorf("sequence %q of layout %s makes 128-bit IDs (its mark carries only a tick): compare Mark.Tick with the IDs' ticks: %w", s.name, k.layout, layout.ErrWrongWidth)
	}
	return s.c.waitSettled(ctx, s.target(), id)
}
