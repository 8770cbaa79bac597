package client

import (
	"context"
	"fmt"

	"github.com/seed-e8569b35/ordo/layout"
)

// wideLayout is a 128-bit layout and the group its IDs carry, as the
// cluster named them: what rendering a tick needs.
type wideLayout struct {
	layout layout.Layout
	group  uint64
}

// NextUUID returns one UUIDv7 from a cluster of the uuidv7 layout.
func (c *Client) NextUUID(ctx context.Context) (layout.UUID, error) {
	return oneWide(c.NextUUIDs(ctx, 1))
}

// NextUUIDs returns n UUIDv7s from a cluster of the uuidv7 layout, in the
// cluster's one strict order as NextN returns 64-bit IDs: they sort in
// issue order as 16 bytes, as text and in PostgreSQL's uuid type. The
// cluster sends ticks; the client renders them with the cluster's group
// and random bits from crypto/rand. The first call asks the cluster for
// its layout; a cluster of another layout gets layout.ErrWrongWidth.
func (c *Client) NextUUIDs(ctx context.Context, n int) ([]layout.UUID, error) {
	return nextWide[layout.UUID](ctx, c, layout.FormatUUIDv7, n)
}

// NextULID returns one ULID from a cluster of the ulid layout.
func (c *Client) NextULID(ctx context.Context) (layout.ULID, error) {
	return oneWide(c.NextULIDs(ctx, 1))
}

// NextULIDs is NextUUIDs for a cluster of the ulid layout: n ULIDs, which
// sort in issue order as 16 bytes and as their 26-character text.
func (c *Client) NextULIDs(ctx context.Context, n int) ([]layout.ULID, error) {
	return nextWide[layout.ULID](ctx, c, layout.FormatULID, n)
}

// oneWide returns the ID of a one-ID call.
func oneWide[T ~[16]byte](ids []T, err error) (T, error) {
	if err != nil {
		return T{}, err
	}
	return ids[0], nil
}

// nextWide asks for n ticks on the tick lane and renders them in format.
// Ticks are checked as IDs are (increasing, above every tick returned),
// and against the layout's last tick (RenderAll), and rendering keeps
// their order, so the IDs keep every guarantee.
func nextWide[T ~[16]byte](ctx context.Context, c *Client, format layout.Format, n int) ([]T, error) {
	if err := checkCount(n); err != nil {
		return nil, err
	}
	w, err := c.wideLayout(ctx, format)
	if err != nil {
		return nil, err
	}
	ticks, err := c.nextN(ctx, n, c.tickStream, c.tickCoalescer)
	if err != nil {
		return nil, err
	}
	return render[T](w, ticks)
}

// render turns checked ticks into IDs of w's layout. A tick the layout
// cannot render is the server's bug: ErrBadResponse, and no IDs.
func render[T ~[16]byte](w wideLayout, ticks []uint64) ([]T, error) {
	ids, err := layout.RenderAll[T](w.layout, ticks, w.group)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	return ids, nil
}

// wideLayout returns the cluster's 128-bit layout and group, asking the
// cluster the first time (a cluster's layout never changes, and the
// client is pinned to one cluster), and checks that it renders format.
func (c *Client) wideLayout(ctx context.Context, format layout.Format) (wideLayout, error) {
	w := c.wide.Load()
	if w == nil {
		l, group, err := c.Layout(ctx)
		if err != nil {
			return wideLayout{}, fmt.Errorf("ask the cluster for its layout: %w", err)
		}
		if !l.Wide() {
			return wideLayout{}, fmt.Errorf("the cluster's layout %s makes 64-bit IDs, not %s: call Next or NextN: %w", l, format, layout.ErrWrongWidth)
		}
		if err := l.CheckGroup(group); err != nil {
			return wideLayout{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
		}
		c.wide.CompareAndSwap(nil, &wideLayout{layout: l, group: group})
		w = c.wide.Load()
	}
	if w.layout.Format != format {
		return wideLayout{}, fmt.Errorf("the cluster's layout %s makes %s IDs, not %s: %w", w.layout, w.layout.Format, format, layout.ErrWrongWidth)
	}
	return *w, nil
}

// checkNarrow refuses a 64-bit call once the client knows the cluster
// makes 128-bit IDs. Before that, the cluster refuses it.
func (c *Client) checkNarrow() error {
	if w := c.wide.Load(); w != nil {
		return fmt.Errorf("the cluster's layout %s makes 128-bit IDs: call NextUUIDs or NextULIDs (ReserveUUIDs or ReserveULIDs): %w", w.layout, layout.ErrWrongWidth)
	}
	return nil
}
