package client

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// TestSequenceNameTravels: a handle's calls carry its name in
// NextRequest.sequence, and the client's own calls, and the default
// handle's, carry none.
func TestSequenceNameTravels(t *testing.T) {
	f := &fakeSequences{next: map[string]nextFunc{"invoices": counter(), "": counter()}}
	// The client's default options: its own calls go on the stream, which
	// the fake does not serve, so they fall back to unary Next.
	c := mustClient(t, []string{mustServeSequences(t, mustListen(t), f)})
	ctx := testCtx(t, 5*time.Second)
	if ids, err := c.Sequence("invoices").NextN(ctx, 3); err != nil || !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("invoices NextN(3) = %v, %v; want [1 2 3]", ids, err)
	}
	if _, err := c.Next(ctx); err != nil {
		t.Fatalf("Next: %v", err)
	}
	if _, err := c.Sequence("").Next(ctx); err != nil {
		t.Fatalf("default handle's Next: %v", err)
	}
	if id, err := c.Sequence("invoices").Next(ctx); err != nil || id != 4 {
		t.Fatalf("invoices Next = %d, %v; want 4", id, err)
	}
	if got, want := f.askedFor(), []string{"invoices", "", "", "invoices"}; !slices.Equal(got, want) {
		t.Fatalf("the Next calls named sequences %q, want %q", got, want)
	}
	if name := c.Sequence("invoices").Name(); name != "invoices" {
		t.Errorf("Name() = %q", name)
	}
}

// TestSequenceFloorIsPerName: a sequence's answer that is not above an
// ID that sequence already returned is withheld (ErrBadResponse), on any
// handle of the name; IDs of another sequence, and of the default one,
// below it are accepted: each has its own floor.
func TestSequenceFloorIsPerName(t *testing.T) {
	f := &fakeSequences{next: map[string]nextFunc{
		"a": serve(&api.IDRun{First: 10, Count: 3, Step: 1}), // the same answer again and again
		"b": counter(),
		"":  counter(),
	}}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	ctx := testCtx(t, 5*time.Second)
	a, b := c.Sequence("a"), c.Sequence("b")
	if ids, err := a.NextN(ctx, 3); err != nil || !slices.Equal(ids, []uint64{10, 11, 12}) {
		t.Fatalf("a's first NextN = %v, %v", ids, err)
	}
	if ids, err := b.NextN(ctx, 3); err != nil || !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("b's IDs below a's = %v, %v; want [1 2 3]: another sequence's floor", ids, err)
	}
	if ids, err := c.NextN(ctx, 2); err != nil || !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("the default sequence's IDs below a's = %v, %v; want [1 2]", ids, err)
	}
	if ids, err := a.NextN(ctx, 3); !errors.Is(err, ErrBadResponse) || ids != nil {
		t.Fatalf("a's answer replayed = %v, %v; want ErrBadResponse and no IDs", ids, err)
	}
	if _, err := c.Sequence("a").Next(ctx); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("a's answer replayed on a new handle = %v, want ErrBadResponse", err)
	}
	// b's floor is 3, not a's 12: its next answer, 4, is taken.
	if id, err := b.Next(ctx); err != nil || id != 4 {
		t.Fatalf("b's Next = %d, %v; want 4", id, err)
	}
}

// TestSequenceFollowsLeaderHint: a named sequence's call refused
// Unavailable with a leader hint goes to the hinted node (not among the
// addresses), carrying the name, and the next call goes there directly.
func TestSequenceFollowsLeaderHint(t *testing.T) {
	leader := &fakeSequences{next: map[string]nextFunc{"orders": counter()}}
	leaderAddr := mustServeSequences(t, mustListen(t), leader)
	follower := &fakeSequences{next: map[string]nextFunc{"orders": fail(codes.Unavailable, leaderAddr)}}
	other := &fakeSequences{next: map[string]nextFunc{"orders": fail(codes.Unavailable, "")}}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), follower), mustServeSequences(t, mustListen(t), other)})
	ctx := testCtx(t, 5*time.Second)
	s := c.Sequence("orders")
	if ids, err := s.NextN(ctx, 2); err != nil || !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("first NextN = %v, %v; want [1 2]", ids, err)
	}
	if id, err := s.Next(ctx); err != nil || id != 3 {
		t.Fatalf("second Next = %d, %v; want 3", id, err)
	}
	if f, l, o := follower.nextCalls.Load(), leader.nextCalls.Load(), other.nextCalls.Load(); f != 1 || l != 2 || o != 0 {
		t.Errorf("calls follower=%d leader=%d other=%d, want 1, 2, 0", f, l, o)
	}
	if got := leader.askedFor(); !slices.Equal(got, []string{"orders", "orders"}) {
		t.Errorf("the leader was asked for %q", got)
	}
}

// TestSequenceNotFound: the cluster's NotFound for an unknown sequence
// comes back as it is, code and message, after one attempt: no retry
// mends it. Describe and drop of an unknown name likewise.
func TestSequenceNotFound(t *testing.T) {
	f := &fakeSequences{next: map[string]nextFunc{}, describe: describes(), drop: func(_ context.Context, name string) (*api.SequenceInfo, error) {
		return nil, noSequence(name)
	}}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	ctx := testCtx(t, 5*time.Second)
	want := noSequence("ghost")
	if _, err := c.Sequence("ghost").NextN(ctx, 2); status.Code(err) != codes.NotFound || status.Convert(err).Message() != status.Convert(want).Message() {
		t.Fatalf("NextN of an unknown sequence = %v, want %v", err, want)
	}
	if n := f.nextCalls.Load(); n != 1 {
		t.Errorf("%d Next calls, want 1", n)
	}
	if _, err := c.Sequence("ghost").NextUUIDs(ctx, 1); status.Code(err) != codes.NotFound || f.nextCalls.Load() != 1 {
		t.Errorf("NextUUIDs of an unknown sequence = %v after %d Next calls, want NotFound from describing it, and no Next", err, f.nextCalls.Load())
	}
	if _, err := c.DescribeSequence(ctx, "ghost"); status.Code(err) != codes.NotFound {
		t.Errorf("DescribeSequence = %v, want NotFound", err)
	}
	if _, err := c.DropSequence(ctx, "ghost"); status.Code(err) != codes.NotFound || f.dropCalls.Load() != 1 {
		t.Errorf("DropSequence = %v after %d calls, want NotFound at once", err, f.dropCalls.Load())
	}
}

// TestSequenceUUIDs: a uuidv7 sequence's ticks are asked for with the
// name and TicksKey, and rendered with the sequence's own group from
// DescribeSequence (asked once), not the cluster's layout or group; the
// 64-bit and ULID calls on it, and the UUID call on a dense or 64-bit
// sequence, are ErrWrongWidth without asking for IDs.
func TestSequenceUUIDs(t *testing.T) {
	const group = 7
	ms := uint64(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	ticks := counter()
	f := &fakeSequences{
		next: map[string]nextFunc{"events": func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
			resp, err := ticks(ctx, req)
			resp.Runs[0].First += ms << 15
			return resp, err
		}},
		describe: describes(
			&api.SequenceInfo{Name: "events", Kind: "uuidv7", Group: group},
			&api.SequenceInfo{Name: "books", Kind: "dense", Start: 1, Next: 1},
			&api.SequenceInfo{Name: "flakes", Kind: "twitter", Group: 3},
		),
	}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	ctx := testCtx(t, 5*time.Second)
	s := c.Sequence("events")
	ids, err := s.NextUUIDs(ctx, 3)
	if err != nil {
		t.Fatalf("NextUUIDs: %v", err)
	}
	one, err := s.NextUUID(ctx)
	if err != nil {
		t.Fatalf("NextUUID: %v", err)
	}
	ids = append(ids, one)
	l := layout.MustPreset("uuidv7")
	for i, id := range ids {
		p, err := l.DecodeWide(id)
		if err != nil || p.Group != group || p.Time.UnixMilli() != int64(ms) || p.Seq != uint64(i+1) {
			t.Fatalf("ID %s decodes to %+v, %v; want group %d, seq %d", id, p, err, group, i+1)
		}
		if i > 0 && bytes.Compare(ids[i-1][:], id[:]) >= 0 {
			t.Fatalf("%s does not sort above %s", id, ids[i-1])
		}
	}
	if got := f.askedFor(); !slices.Equal(got, []string{"events+ticks", "events+ticks"}) {
		t.Errorf("Next calls asked for %q, want the sequence's ticks twice", got)
	}
	if _, err := s.NextN(ctx, 1); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("NextN on a uuidv7 sequence = %v, want ErrWrongWidth", err)
	}
	if _, err := s.NextULIDs(ctx, 1); !errors.Is(err, layout.ErrWrongWidth) {
		t.Errorf("NextULIDs on a uuidv7 sequence = %v, want ErrWrongWidth", err)
	}
	for _, name := range []string{"books", "flakes"} {
		if _, err := c.Sequence(name).NextUUID(ctx); !errors.Is(err, layout.ErrWrongWidth) {
			t.Errorf("NextUUID on sequence %s = %v, want ErrWrongWidth", name, err)
		}
	}
	if n := f.nextCalls.Load(); n != 2 {
		t.Errorf("%d Next calls, want 2: a call of the wrong width asks for none", n)
	}
	if d, l := f.describeCalls.Load(), f.layoutCalls.Load(); d != 3 || l != 0 {
		t.Errorf("DescribeSequence asked %d times, Layout %d; want 3 (once a name) and 0", d, l)
	}
}

// TestSequenceUUIDsWithheld: a uuidv7 sequence's ticks are checked
// against that sequence's floor: a replayed answer is ErrBadResponse.
func TestSequenceUUIDsWithheld(t *testing.T) {
	f := &fakeSequences{
		next:     map[string]nextFunc{"events": serve(&api.IDRun{First: 1 << 40, Count: 2, Step: 1})},
		describe: describes(&api.SequenceInfo{Name: "events", Kind: "ulid", Group: 2}),
	}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.Sequence("events").NextULIDs(ctx, 2); err != nil {
		t.Fatalf("first NextULIDs: %v", err)
	}
	if _, err := c.Sequence("events").NextULIDs(ctx, 2); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("the same ticks again = %v, want ErrBadResponse", err)
	}
}

// TestSequenceDroppedIsNotFound: a sequence described as dropped makes
// the UUID calls NotFound without asking for IDs.
func TestSequenceDroppedIsNotFound(t *testing.T) {
	f := &fakeSequences{describe: describes(&api.SequenceInfo{Name: "old", Kind: "uuidv7", Dropped: true})}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	if _, err := c.Sequence("old").NextUUIDs(testCtx(t, 5*time.Second), 1); status.Code(err) != codes.NotFound || f.nextCalls.Load() != 0 {
		t.Fatalf("NextUUIDs of a dropped sequence = %v after %d Next calls, want NotFound and none", err, f.nextCalls.Load())
	}
}

// TestSequenceAdminCalls: the four admin calls send what they are given
// and answer what the node answers.
func TestSequenceAdminCalls(t *testing.T) {
	var got *api.CreateSequenceRequest
	books := &api.SequenceInfo{Name: "books", Kind: "dense", Start: 100, Next: 100}
	f := &fakeSequences{
		create: func(_ context.Context, req *api.CreateSequenceRequest) (*api.SequenceInfo, error) {
			got = req
			return books, nil
		},
		describe: describes(books),
		drop: func(_ context.Context, name string) (*api.SequenceInfo, error) {
			return &api.SequenceInfo{Name: name, Kind: "dense", Dropped: true}, nil
		},
		list: func(context.Context) (*api.ListSequencesResponse, error) {
			return &api.ListSequencesResponse{Sequences: []*api.SequenceInfo{books}}, nil
		},
	}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	ctx := testCtx(t, 5*time.Second)
	info, err := c.CreateSequence(ctx, "books", "dense", 0, 100)
	if err != nil || info.Name != "books" || got.Name != "books" || got.Kind != "dense" || got.Start != 100 || got.Group != 0 {
		t.Fatalf("CreateSequence = %v, %v; the node got %v", info, err, got)
	}
	if _, err := c.CreateSequence(ctx, "flakes", "twitter", 5, 0); err != nil || got.Kind != "twitter" || got.Group != 5 || got.DistinctGroup {
		t.Fatalf("CreateSequence of a layout = %v; the node got %v", err, got)
	}
	if _, err := c.CreateSequence(ctx, "flakes2", "twitter", 6, 0, DistinctGroup()); err != nil || got.Name != "flakes2" || !got.DistinctGroup {
		t.Fatalf("CreateSequence with DistinctGroup = %v; the node got %v", err, got)
	}
	list, err := c.ListSequences(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "books" {
		t.Fatalf("ListSequences = %v, %v", list, err)
	}
	if info, err := c.DescribeSequence(ctx, "books"); err != nil || info.Next != 100 {
		t.Fatalf("DescribeSequence = %v, %v", info, err)
	}
	if info, err := c.DropSequence(ctx, "books"); err != nil || !info.Dropped || f.dropCalls.Load() != 1 {
		t.Fatalf("DropSequence = %v, %v after %d calls", info, err, f.dropCalls.Load())
	}
}

// TestCreateSequenceLostAnswer: an attempt that created the sequence but
// whose answer was lost leaves the retry AlreadyExists; the client takes
// the sequence it finds when it is what was asked for, and reports
// AlreadyExists when it is not, or on the first attempt.
func TestCreateSequenceLostAnswer(t *testing.T) {
	for _, tt := range []struct {
		name       string
		lost       bool // the first attempt's answer is lost
		kind, have string
		start      uint64
		group      uint64
		wantErr    bool
	}{
		{"dense, lost", true, "dense", "dense", 0, 0, false},
		{"layout, lost", true, "twitter", "twitter", 0, 4, false},
		{"another kind there", true, "dense", "twitter", 0, 0, true},
		{"another start there", true, "dense", "dense", 50, 0, true},
		{"in use from the first attempt", false, "dense", "dense", 0, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			existing := &api.SequenceInfo{Name: "books", Kind: tt.have, Start: 1, Group: tt.group}
			if tt.have == "dense" {
				existing.Group = 0
			}
			attempts := 0
			f := &fakeSequences{
				create: func(context.Context, *api.CreateSequenceRequest) (*api.SequenceInfo, error) {
					attempts++
					if tt.lost && attempts == 1 {
						return nil, status.Error(codes.Unavailable, "leader lost after commit")
					}
					return nil, status.Error(codes.AlreadyExists, `sequence "books" exists`)
				},
				describe: describes(existing),
			}
			c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
			group := uint64(0)
			if tt.kind != "dense" {
				group = tt.group
			}
			info, err := c.CreateSequence(testCtx(t, 5*time.Second), "books", tt.kind, group, tt.start)
			if tt.wantErr {
				if status.Code(err) != codes.AlreadyExists || info != nil {
					t.Fatalf("CreateSequence = %v, %v; want AlreadyExists", info, err)
				}
				return
			}
			if err != nil || info.Name != "books" || info.Kind != tt.have {
				t.Fatalf("CreateSequence = %v, %v; want the sequence the lost attempt made", info, err)
			}
		})
	}
}

// TestDropSequenceLostAnswer: a retry that finds the name gone, after an
// attempt whose answer was lost, has dropped it.
func TestDropSequenceLostAnswer(t *testing.T) {
	attempts := 0
	f := &fakeSequences{
		drop: func(_ context.Context, name string) (*api.SequenceInfo, error) {
			attempts++
			if attempts == 1 {
				return nil, status.Error(codes.Unavailable, "leader lost after commit")
			}
			return nil, noSequence(name)
		},
		describe: describes(&api.SequenceInfo{Name: "books", Kind: "dense", Next: 9, Dropped: true}),
	}
	c := mustNew(t, []string{mustServeSequences(t, mustListen(t), f)})
	info, err := c.DropSequence(testCtx(t, 5*time.Second), "books")
	if err != nil || !info.Dropped || info.Next != 9 {
		t.Fatalf("DropSequence = %v, %v; want the dropped sequence", info, err)
	}
}
