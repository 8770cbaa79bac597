package main

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
)

// TestSequenceCommandsRefuseBadInput: each bad command line is a usage
// error naming the fix, found before any node is asked (nothing listens
// at --addrs).
func TestSequenceCommandsRefuseBadInput(t *testing.T) {
	addrs := []string{"--addrs", "127.0.0.1:1", "--timeout", "1s"}
	tests := []struct {
		args   []string
		wantIn string
	}{
		{nil, "give a subcommand: ordo sequence create|list|describe|drop"},
		{[]string{"make"}, `unknown subcommand "make": want create, list, describe or drop`},
		{[]string{"create", "--kind", "dense"}, "give the sequence's name: ordo sequence create NAME"},
		{[]string{"create", "a", "b", "--kind", "dense"}, "one name only"},
		{[]string{"create", "Books", "--kind", "dense"}, "want 1 to 63 characters of a-z"},
		{[]string{"create", "-", "--kind", "dense"}, "bad sequence name"},
		{[]string{"create", "books"}, "--kind is required: dense"},
		{[]string{"create", "books", "--kind", "snowflakes"}, `--kind "snowflakes"`},
		{[]string{"create", "books", "--kind", "dense", "--group", "3"}, "a dense sequence has no group"},
		{[]string{"create", "events", "--kind", "uuidv7", "--start", "5"}, "--start is for dense sequences"},
		{[]string{"create", "flakes", "--kind", "sonyflake", "--group", "70000"}, "--group: group 70000 does not fit"},
		{[]string{"create", "books", "--kind", "dense", "--start", "-1"}, `--start "-1": want a whole number, 0 or more`},
		{[]string{"create", "books", "--kind", "dense", "--distinct-group"}, "--distinct-group: a dense sequence has no group"},
		{[]string{"create", "books", "--kind", "twitter", "--distinct-group=maybe"}, `--distinct-group "maybe": want true or false`},
		{[]string{"list", "books"}, "ordo sequence describe NAME shows one"},
		{[]string{"describe"}, "ordo sequence describe NAME"},
		{[]string{"describe", "a/b"}, "bad sequence name"},
		{[]string{"drop"}, "ordo sequence drop NAME"},
		{[]string{"drop", ""}, "bad sequence name"},
	}
	for _, tt := range tests {
		args := tt.args
		if len(args) > 0 {
			args = append(append([]string{args[0]}, addrs...), args[1:]...)
		}
		err := runSequence(args)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("ordo sequence %q: %v, want a usage error containing %q", tt.args, err, tt.wantIn)
		}
	}
	for _, tt := range []struct {
		args   []string
		wantIn string
	}{
		{[]string{"--sequence", "Books"}, "--sequence: bad sequence name"},
		{[]string{"--sequence", "books", "--count", "0"}, "--count 0: want 1 to 4294967295"},
		{[]string{"books", "--count", "3"}, "give the count with --count and the sequence with --sequence"},
	} {
		err := runNext(append(append([]string(nil), addrs...), tt.args...))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("ordo next %q: %v, want a usage error containing %q", tt.args, err, tt.wantIn)
		}
	}
}

// sequenceNode is a leader with named sequences: books (dense, from
// 100), events (uuidv7, group 7) and flakes (twitter, group 3). Next
// answers a named sequence only (the default one is not served), and
// records each call's sequence, with "+ticks" when it asked for ticks.
type sequenceNode struct {
	api.UnimplementedSequencerServer
	api.UnimplementedAdminServer
	mu      sync.Mutex
	next    map[string]uint64
	asked   []string
	keyed   []string // "caller/key" of each Next
	created *api.CreateSequenceRequest
	// distinct records each create's DistinctGroup.
	distinct map[string]bool
}

// eventsTick is the first tick of events: 2026-03-01T00:00:00Z, counter 1.
var eventsTick = uint64(1772323200000)<<15 | 1

func newSequenceNode() *sequenceNode {
	return &sequenceNode{next: map[string]uint64{"books": 100, "events": eventsTick, "flakes": 1 << 40}}
}

var sequenceInfos = map[string]*api.SequenceInfo{
	"books":  {Name: "books", Kind: "dense", Start: 100, Next: 100},
	"events": {Name: "events", Kind: "uuidv7", Group: 7, Next: eventsTick},
	"flakes": {Name: "flakes", Kind: "twitter", Group: 3, Next: 1 << 40},
}

func (f *sequenceNode) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	asked := req.Sequence
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(api.TicksKey)) > 0 {
		asked += "+ticks"
	}
	f.asked = append(f.asked, asked)
	caller := ""
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(api.CallerKey)) > 0 {
		caller = md.Get(api.CallerKey)[0]
	}
	f.keyed = append(f.keyed, caller+"/"+req.IdempotencyKey)
	first, ok := f.next[req.Sequence]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no sequence %q: create it with ordo sequence create", req.Sequence)
	}
	f.next[req.Sequence] += uint64(req.Count)
	return &api.NextResponse{Runs: []*api.IDRun{{First: first, Count: req.Count, Step: 1}}, Sequence: req.Sequence, Keyed: req.IdempotencyKey != ""}, nil
}

func (f *sequenceNode) CreateSequence(_ context.Context, req *api.CreateSequenceRequest) (*api.SequenceInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = req
	if f.distinct == nil {
		f.distinct = map[string]bool{}
	}
	f.distinct[req.Name] = req.DistinctGroup
	return &api.SequenceInfo{Name: req.Name, Kind: req.Kind, Group: req.Group, Start: req.Start, Next: max(req.Start, 1)}, nil
}

func (f *sequenceNode) ListSequences(context.Context, *api.ListSequencesRequest) (*api.ListSequencesResponse, error) {
	// Out of order: the command sorts by name.
	return &api.ListSequencesResponse{Sequences: []*api.SequenceInfo{sequenceInfos["flakes"], sequenceInfos["books"], sequenceInfos["events"]}}, nil
}

func (f *sequenceNode) DescribeSequence(_ context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	if info, ok := sequenceInfos[req.Name]; ok {
		return info, nil
	}
	return nil, status.Errorf(codes.NotFound, "no sequence %q: create it with ordo sequence create", req.Name)
}

func (f *sequenceNode) DropSequence(_ context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	info, err := f.DescribeSequence(context.Background(), req)
	if err != nil {
		return nil, err
	}
	return &api.SequenceInfo{Name: info.Name, Kind: info.Kind, Dropped: true}, nil
}

// serve serves f's Sequencer and Admin on 127.0.0.1:0 until the test
// ends and returns its address.
func (f *sequenceNode) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterSequencerServer(s, f)
	api.RegisterAdminServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestSequenceCommands checks what each command prints against a fake
// leader, and what it asked.
func TestSequenceCommands(t *testing.T) {
	f := newSequenceNode()
	addr := f.serve(t)
	tests := []struct {
		run  func([]string) error
		args []string
		want string
	}{
		{runSequence, []string{"create", "tickets", "--kind", "dense", "--start", "100"}, "created sequence tickets: dense from 100\n"},
		{runSequence, []string{"create", "--kind", "twitter", "--group", "4", "--distinct-group", "flakes3"}, "created sequence flakes3: twitter group 4\n"},
		{runSequence, []string{"create", "--kind", "twitter", "--group", "3", "--json", "flakes2"}, `{"result":"created sequence flakes2: twitter group 3"}`},
		{runSequence, []string{"list"}, "NAME    KIND     GROUP  START  NEXT\n" +
			"books   dense    0      100    100\n" +
			"events  uuidv7   7      0      58075486617600001\n" +
			"flakes  twitter  3      0      1099511627776\n"},
		{runSequence, []string{"list", "--json"}, `{"sequences":[` +
			`{"dropped":false,"group":"0","kind":"dense","name":"books","next":"100","start":"100"},` +
			`{"dropped":false,"group":"7","kind":"uuidv7","name":"events","next":"58075486617600001","start":"0"},` +
			`{"dropped":false,"group":"3","kind":"twitter","name":"flakes","next":"1099511627776","start":"0"}]}`},
		{runSequence, []string{"describe", "books"}, "name   books\nkind   dense\ngroup  0\nstart  100\nnext   100\n"},
		{runSequence, []string{"describe", "--json", "events"}, `{"dropped":false,"group":"7","kind":"uuidv7","name":"events","next":"58075486617600001","start":"0"}`},
		{runSequence, []string{"drop", "books"}, "dropped sequence books\n"},
		{runNext, []string{"--sequence", "books", "--count", "3"}, "100\n101\n102\n"},
		{runNext, []string{"--sequence", "books", "--count", "2", "--json"}, `{"ids":["103","104"]}`},
		{runNext, []string{"--sequence", "flakes", "--count", "2"}, "1099511627776\n1099511627777\n"},
	}
	for _, tt := range tests {
		args := append([]string{"--addrs", addr}, tt.args...)
		if _, sub := sequenceCommands[tt.args[0]]; sub {
			// ordo sequence SUBCOMMAND --addrs ADDR ...
			args = append([]string{tt.args[0], "--addrs", addr}, tt.args[1:]...)
		}
		out, err := output(t, tt.run, args...)
		if err != nil {
			t.Errorf("%q: %v", tt.args, err)
			continue
		}
		if got := compactJSON(out); got != tt.want {
			t.Errorf("%q printed %q, want %q", tt.args, got, tt.want)
		}
	}
	if c := f.created; c == nil || c.Name != "flakes2" || c.Kind != "twitter" || c.Group != 3 || c.Start != 0 || c.DistinctGroup {
		t.Errorf("the last create asked for %v", c)
	}
	if !f.distinct["flakes3"] || f.distinct["flakes2"] || f.distinct["tickets"] {
		t.Errorf("creates asked for a distinct group: %v, want only flakes3's", f.distinct)
	}
	if want := []string{"books", "books", "flakes"}; !slices.Equal(f.asked, want) {
		t.Errorf("next asked for sequences %q, want %q", f.asked, want)
	}
}

// TestNextSequenceWide: ordo next --sequence on a uuidv7 sequence asks
// for its ticks and prints UUIDv7s with the sequence's group; an unknown
// sequence is the cluster's NotFound.
func TestNextSequenceWide(t *testing.T) {
	f := newSequenceNode()
	addr := f.serve(t)
	out, err := output(t, runNext, "--addrs", addr, "--sequence", "events", "--count", "2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(out)
	l := layout.MustPreset("uuidv7")
	for i, s := range lines {
		id, err := l.ParseWide(s)
		if err != nil || l.FormatWide(id) != s {
			t.Fatalf("line %q is not a canonical UUIDv7: %v", s, err)
		}
		p, err := l.DecodeWide(id)
		if err != nil || p.Group != 7 || p.Tick != eventsTick+uint64(i) {
			t.Fatalf("%s decodes to %+v, %v; want group 7, tick %d", s, p, err, eventsTick+uint64(i))
		}
	}
	if len(lines) != 2 || !slices.Equal(f.asked, []string{"events+ticks"}) {
		t.Fatalf("printed %q after asking %q; want two UUIDs from one call for ticks of events", out, f.asked)
	}
	if _, err := output(t, runNext, "--addrs", addr, "--sequence", "ghost"); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "create it with ordo sequence create") {
		t.Fatalf("an unknown sequence: %v, want the cluster's NotFound", err)
	}
}

// TestNextKeyAndCaller: ordo next --idempotency-key sends the key, and
// --caller (or ORDO_CALLER) names the caller, with the call; bad values
// are usage errors found before any node is asked.
func TestNextKeyAndCaller(t *testing.T) {
	f := newSequenceNode()
	addr := f.serve(t)
	if _, err := output(t, runNext, "--addrs", addr, "--sequence", "books", "--count", "2", "--idempotency-key", "order-17", "--caller", "billing"); err != nil {
		t.Fatal(err)
	}
	if _, err := output(t, runNext, "--addrs", addr, "--sequence", "books"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ORDO_CALLER", "from-env")
	if _, err := output(t, runNext, "--addrs", addr, "--sequence", "books", "--idempotency-key", "k2"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"billing/order-17", "/", "from-env/k2"}; !slices.Equal(f.keyed, want) {
		t.Errorf("calls carried caller/key %q, want %q", f.keyed, want)
	}
	t.Setenv("ORDO_CALLER", "")
	addrs := []string{"--addrs", "127.0.0.1:1", "--timeout", "1s"}
	for _, tt := range []struct {
		args   []string
		wantIn string
	}{
		{[]string{"--idempotency-key", strings.Repeat("k", 129)}, "--idempotency-key of 129 bytes: want at most 128"},
		{[]string{"--caller", strings.Repeat("c", 129)}, "--caller: bad client option: caller name of 129 bytes"},
		{[]string{"--caller", "a\nb"}, "--caller: bad client option"},
	} {
		err := runNext(append(append([]string(nil), addrs...), tt.args...))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("ordo next %q: %v, want a usage error containing %q", tt.args, err, tt.wantIn)
		}
	}
}
