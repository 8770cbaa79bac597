package client

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// googleUUID stands for github.com/google/uuid's UUID, which is declared
// the same way: the client's IDs convert to it, and back, directly.
type googleUUID [16]byte

// TestNextUUIDs checks that the 128-bit calls render the ticks a node
// sends with its group, in order, in each mode a client calls in; that a
// 64-bit call is refused before and after the client knows the layout;
// and that asking for the other format is refused.
func TestNextUUIDs(t *testing.T) {
	const group = 9
	ms := uint64(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	for _, opt := range []Option{WithUnary(), WithCoalescing(1)} {
		next := counter()
		f := wideSeq("uuidv7", group, func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
			resp, err := next(ctx, req)
			resp.Runs[0].First += ms << 15
			return resp, err
		})
		c := mustNew(t, []string{mustSequencer(t, f)}, opt)
		ctx := testCtx(t, 5*time.Second)
		if _, err := c.NextN(ctx, 1); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("NextN before the layout is known = %v, want the node's FailedPrecondition", err)
		}
		ids, err := c.NextUUIDs(ctx, 3)
		if err != nil {
			t.Fatalf("NextUUIDs: %v", err)
		}
		one, err := c.NextUUID(ctx)
		if err != nil {
			t.Fatalf("NextUUID: %v", err)
		}
		ids = append(ids, one)
		l, _ := layout.Preset("uuidv7")
		for i, id := range ids {
			p, err := l.DecodeWide(id)
			if err != nil || p.Group != group || p.Time.UnixMilli() != int64(ms) {
				t.Fatalf("ID %s decodes to %+v, %v", id, p, err)
			}
			if i > 0 && (bytes.Compare(ids[i-1][:], id[:]) >= 0 || ids[i-1].String() >= id.String()) {
				t.Fatalf("%s does not sort above %s", id, ids[i-1])
			}
		}
		g := googleUUID(ids[0])
		if layout.UUID(g) != ids[0] || [16]byte(ids[0]) != [16]byte(g) {
			t.Fatal("conversion through a [16]byte UUID type changed the ID")
		}
		if _, err := c.NextN(ctx, 1); !errors.Is(err, layout.ErrWrongWidth) {
			t.Errorf("NextN on a uuidv7 cluster = %v, want ErrWrongWidth", err)
		}
		if _, err := c.NextULIDs(ctx, 1); !errors.Is(err, layout.ErrWrongWidth) {
			t.Errorf("NextULIDs on a uuidv7 cluster = %v, want ErrWrongWidth", err)
		}
		if f.layoutCalls.Load() != 1 {
			t.Errorf("the client asked for the layout %d times, want once", f.layoutCalls.Load())
		}
	}
}

// TestNextULIDsChecksTicks: ticks that do not increase are withheld as
// ErrBadResponse, as 64-bit IDs are; and a 64-bit cluster's layout makes
// a 128-bit call ErrWrongWidth without asking for IDs.
func TestNextULIDsChecksTicks(t *testing.T) {
	f := wideSeq("ulid", 1, serve(&api.IDRun{First: 1 << 40, Count: 2, Step: 1}))
	c := mustNew(t, []string{mustSequencer(t, f)})
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.NextULIDs(ctx, 2); err != nil {
		t.Fatalf("first NextULIDs: %v", err)
	}
	if _, err := c.NextULIDs(ctx, 2); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("the same ticks again = %v, want ErrBadResponse", err)
	}

	narrow := &fakeSeq{next: counter(), layout: func(context.Context) (*api.LayoutResponse, error) {
		return &api.LayoutResponse{Layout: "default"}, nil
	}}
	c = mustNew(t, []string{mustSequencer(t, narrow)})
	if _, err := c.NextUUID(ctx); !errors.Is(err, layout.ErrWrongWidth) || narrow.nextCalls.Load() != 0 {
		t.Fatalf("NextUUID on a default cluster = %v after %d Next calls, want ErrWrongWidth and none", err, narrow.nextCalls.Load())
	}
	if _, err := c.NextN(ctx, 1); err != nil {
		t.Fatalf("NextN on a default cluster: %v", err)
	}
}

// TestNextUUIDsRefusesTicksPastTheLast: a tick above the layout's last
// would render with its time field wrapped to 0, an ID that sorts below
// the ones before it. A node that sends one gets ErrBadResponse and no
// IDs at all, on every path a client calls on.
func TestNextUUIDsRefusesTicksPastTheLast(t *testing.T) {
	l, _ := layout.Preset("uuidv7")
	past := &api.IDRun{First: l.MaxTick(), Count: 2, Step: 1}
	for name, opts := range map[string][]Option{
		"unary":      {WithUnary()},
		"coalescing": {WithCoalescing(1)},
		"stream":     nil,
	} {
		t.Run(name, func(t *testing.T) {
			f := wideStreamSeq{fakeSeq: wideSeq("uuidv7", 1, serve(past)), runs: []*api.IDRun{past}}
			c := mustClient(t, []string{mustSequencer(t, f)}, append([]Option{WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)...)
			ids, err := c.NextUUIDs(testCtx(t, 5*time.Second), 2)
			if !errors.Is(err, ErrBadResponse) || !errors.Is(err, layout.ErrTickRange) || ids != nil {
				t.Fatalf("NextUUIDs of ticks %d and %d = %v, %v; want ErrBadResponse and no IDs", past.First, past.First+1, ids, err)
			}
			if streamed := f.nextCalls.Load() == 0; streamed != (name == "stream") {
				t.Errorf("%d unary calls: the %s path was not the one taken", f.nextCalls.Load(), name)
			}
		})
	}
}
