package grpcapi

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// Named sequences' calls on NextStream (sequencer.go: startNamed,
// answerNamed), over a fake Settle whose grants are known at once.

// countingSettle grants each named sequence's calls in turn from 1 (a
// dense sequence's values, a layout sequence's ticks), as a leader
// would; it refuses "full" (fsm.ErrSequenceFull) and "gone"
// (sequencer.ErrNotLeader, as a leader that lost its term). It records
// the asks of each Grants.
type countingSettle struct {
	Settle
	mu    sync.Mutex
	next  map[string]uint64
	calls [][]string
}

func (s *countingSettle) Grants(_ context.Context, asks []settle.Ask) []settle.Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == nil {
		s.next = map[string]uint64{}
	}
	grants := make([]settle.Grant, len(asks))
	var names []string
	for i, a := range asks {
		names = append(names, a.Name)
		switch a.Name {
		case "full":
			grants[i] = settle.Decided(0, fsm.ErrSequenceFull)
		case "gone":
			grants[i] = settle.Decided(0, sequencer.ErrNotLeader)
		default:
			first := max(s.next[a.Name], a.Seq.Start, 1)
			s.next[a.Name] = first + a.Count
			grants[i] = settle.Decided(first, nil)
		}
	}
	s.calls = append(s.calls, names)
	return grants
}

func (s *countingSettle) grantsCalls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// namedState is sequencesState (a, c dense; b, e twitter; d dropped)
// with the dense "full" and "gone" and the 128-bit "u" (uuidv7).
func namedState(t *testing.T) *fsm.FSM {
	f := sequencesState(t)
	for _, c := range []fsm.Command{
		{Sequence: "full", Kind: fsm.KindDense}, {Sequence: "gone", Kind: fsm.KindDense}, {Sequence: "u", Kind: "uuidv7", Group: 3},
	} {
		c.Op = fsm.OpCreateSequence
		mustApply(t, f, c)
	}
	return f
}

// namedServer is a leader whose default layout is l, with namedState,
// fakeIDs (ticks from 0), MaxCount 10 and a countingSettle.
func namedServer(t *testing.T, l layout.Layout) (*Server, *countingSettle) {
	st := &countingSettle{}
	return NewServer(Config{ID: "n2", Layout: l, MaxCount: 10},
		Parts{Node: fakeNode{leader: true}, IDs: &fakeIDs{}, State: namedState(t), Meter: nopMeter{}, Stop: make(chan struct{}), Settle: st,
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")}), st
}

// streamRig is one NextStream of a test.
type streamRig struct {
	t  *testing.T
	st api.Sequencer_NextStreamClient
}

func openStream(t *testing.T, c api.SequencerClient) *streamRig {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := c.NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &streamRig{t: t, st: st}
}

// send sends req and returns the answers that cover its calls, by the
// id of each call they answer (a joint answer under each of its ids).
func (s *streamRig) send(req *api.NextStreamRequest) map[uint64]*api.StreamAnswer {
	s.t.Helper()
	if err := s.st.Send(req); err != nil {
		s.t.Fatal(err)
	}
	got := map[uint64]*api.StreamAnswer{}
	for len(got) < len(req.Calls) {
		resp, err := s.st.Recv()
		if err != nil {
			s.t.Fatalf("after %d answers of %d: %v", len(got), len(req.Calls), err)
		}
		for _, a := range resp.Answers {
			for _, id := range append([]uint64{a.Id}, a.Also...) {
				if got[id] != nil {
					s.t.Fatalf("call %d answered twice: %v and %v", id, got[id], a)
				}
				got[id] = a
			}
		}
	}
	return got
}

// ended waits for the stream to end and returns its status.
func (s *streamRig) ended() error {
	s.t.Helper()
	for {
		_, err := s.st.Recv()
		if err != nil {
			return err
		}
	}
}

// ids reads n IDs of one call from a's runs, alone.
func ids(t *testing.T, a *api.StreamAnswer, n uint64) []uint64 {
	t.Helper()
	got, err := api.ExpandRuns(a.Runs, n)
	if err != nil {
		t.Fatalf("answer %v: %v", a, err)
	}
	return got
}

func twitterIDs(group uint64, first, count uint64) []uint64 {
	l := layout.MustPreset("twitter")
	var out []uint64
	for t := first; t < first+count; t++ {
		out = append(out, l.ID(t, group))
	}
	return out
}

func seq(from, n uint64) []uint64 {
	var out []uint64
	for v := from; v < from+n; v++ {
		out = append(out, v)
	}
	return out
}

// A message that mixes default and named calls: each call gets its own
// answer, the default ones ticks of the default sequence in the order
// sent (named=false), the named ones their sequence's IDs (named=true);
// a run of named calls from the front is started with one Grants.
func TestNextStreamMixedDefaultAndNamedCalls(t *testing.T) {
	srv, st := namedServer(t, layout.MustPreset("default"))
	s := openStream(t, serveSequencer(t, srv))
	got := s.send(&api.NextStreamRequest{Calls: []*api.StreamCall{
		{Id: 1, Count: 2}, {Id: 2, Count: 3, Sequence: "a"}, {Id: 3, Count: 2, Sequence: "b"},
		{Id: 4, Count: 1}, {Id: 5, Count: 2, Sequence: "a"},
	}})
	for id, a := range got {
		if a.Code != 0 || a.Invalid != "" || len(a.Also) != 0 || a.Named != (id == 2 || id == 3 || id == 5) {
			t.Fatalf("call %d: answer %v, want one of its own, named only for a named call", id, a)
		}
	}
	if d1, d4 := ids(t, got[1], 2), ids(t, got[4], 1); !slices.Equal(d1, []uint64{0, 1}) || !slices.Equal(d4, []uint64{2}) {
		t.Fatalf("default calls 1 and 4: %v and %v, want ticks 0-1 and 2", d1, d4)
	}
	if a2, a5 := ids(t, got[2], 3), ids(t, got[5], 2); !slices.Equal(a2, seq(1, 3)) || !slices.Equal(a5, seq(4, 2)) {
		t.Fatalf("a's calls 2 and 5: %v and %v, want 1-3 and 4-5", a2, a5)
	}
	if b3 := ids(t, got[3], 2); !slices.Equal(b3, twitterIDs(1, 1, 2)) {
		t.Fatalf("b's call 3: %v, want ticks 1-2 of twitter group 1 %v", b3, twitterIDs(1, 1, 2))
	}
	if calls := st.grantsCalls(); !slices.EqualFunc(calls, [][]string{{"a", "b"}, {"a"}}, slices.Equal) {
		t.Fatalf("Grants calls %q, want [a b] then [a]", calls)
	}
}

// A joint message's named calls whose grants end together are answered
// jointly: one answer, named, with each call's id and count, each call's
// runs its own sequence's in turn (beginning a run of their own); the
// default calls around them keep answers of their own.
func TestNextStreamJointNamedAnswer(t *testing.T) {
	srv, _ := namedServer(t, layout.MustPreset("default"))
	s := openStream(t, serveSequencer(t, srv))
	got := s.send(&api.NextStreamRequest{Joint: true, Calls: []*api.StreamCall{
		{Id: 1, Count: 1}, {Id: 2, Count: 2, Sequence: "a"}, {Id: 3, Count: 3, Sequence: "b"}, {Id: 4, Count: 1, Sequence: "c"}, {Id: 5, Count: 2},
	}})
	j := got[2]
	if j != got[3] || j != got[4] || j.Id != 2 || !slices.Equal(j.Also, []uint64{3, 4}) || !slices.Equal(j.Counts, []uint32{2, 3, 1}) || !j.Named {
		t.Fatalf("named calls 2-4: %v, %v, %v; want one joint named answer for 2, also 3 and 4, counts 2, 3, 1", got[2], got[3], got[4])
	}
	r := api.NewRunReader(j.Runs)
	var each [][]uint64
	for i, n := range j.Counts {
		if i > 0 {
			if err := r.Apart(); err != nil {
				t.Fatalf("call %d's IDs: %v", i, err)
			}
		}
		v, err := r.Take(uint64(n), nil)
		if err != nil {
			t.Fatalf("call %d's IDs: %v", i, err)
		}
		each = append(each, v)
	}
	if !r.Done() {
		t.Fatalf("runs %v hold more than the counts", j.Runs)
	}
	if want := [][]uint64{seq(1, 2), twitterIDs(1, 1, 3), {50}}; !slices.EqualFunc(each, want, slices.Equal) {
		t.Fatalf("joint answer's IDs %v, want %v", each, want)
	}
	for _, id := range []uint64{1, 5} {
		if a := got[id]; a == j || a.Named || len(a.Also) != 0 {
			t.Fatalf("default call %d: %v, want an answer of its own", id, a)
		}
	}
	// Not joint: each named call alone.
	got = s.send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 6, Count: 1, Sequence: "a"}, {Id: 7, Count: 1, Sequence: "c"}}})
	if got[6] == got[7] || !got[6].Named || !got[7].Named || len(got[6].Also)+len(got[7].Also) != 0 {
		t.Fatalf("named calls of a message that is not joint: %v, %v; want an answer each", got[6], got[7])
	}
}

// A named call that fails alone gets its own code and message, and the
// stream goes on: an unknown or dropped sequence is NotFound, a bad name
// or count InvalidArgument, a 128-bit sequence (the stream does not read
// ticks) FailedPrecondition, a sequence full OutOfRange; the calls
// around it, of the same message, are answered.
func TestNextStreamNamedCallFailsAlone(t *testing.T) {
	srv, _ := namedServer(t, layout.MustPreset("default"))
	s := openStream(t, serveSequencer(t, srv))
	for _, joint := range []bool{false, true} {
		got := s.send(&api.NextStreamRequest{Joint: joint, Calls: []*api.StreamCall{
			{Id: 1, Count: 1, Sequence: "a"}, {Id: 2, Count: 1, Sequence: "zz"}, {Id: 3, Count: 1, Sequence: "d"},
			{Id: 4, Count: 1, Sequence: "Bad Name"}, {Id: 5, Count: 0, Sequence: "a"}, {Id: 6, Count: 11, Sequence: "a"},
			{Id: 7, Count: 1, Sequence: "u"}, {Id: 8, Count: 1, Sequence: "full"}, {Id: 9, Count: 1, Sequence: "c"}, {Id: 10, Count: 1},
		}})
		for id, want := range map[uint64]codes.Code{2: codes.NotFound, 3: codes.NotFound, 4: codes.InvalidArgument, 5: codes.InvalidArgument,
			6: codes.InvalidArgument, 7: codes.FailedPrecondition, 8: codes.OutOfRange} {
			a := got[id]
			if codes.Code(a.Code) != want || a.Message == "" || len(a.Runs) != 0 || len(a.Also) != 0 {
				t.Fatalf("joint %t, call %d: %v, want code %s alone, with a message and no IDs", joint, id, a, want)
			}
		}
		if !strings.Contains(got[7].Message, api.TicksKey) {
			t.Fatalf("128-bit sequence's refusal %q does not say to ask for ticks (%s)", got[7].Message, api.TicksKey)
		}
		for _, id := range []uint64{1, 9, 10} {
			if a := got[id]; a.Code != 0 || len(a.Runs) == 0 {
				t.Fatalf("joint %t, call %d beside the failures: %v, want its IDs", joint, id, a)
			}
		}
	}
}

// A grant that fails as Unavailable (the node no longer leads) ends the
// stream with that status: the client resends its calls elsewhere.
func TestNextStreamUnavailableGrantEndsTheStream(t *testing.T) {
	srv, _ := namedServer(t, layout.MustPreset("default"))
	s := openStream(t, serveSequencer(t, srv))
	s.send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 1, Sequence: "a"}}})
	if err := s.st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 2, Count: 1, Sequence: "a"}, {Id: 3, Count: 1, Sequence: "gone"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ended(); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), sequencer.ErrNotLeader.Error()) {
		t.Fatalf("stream after a grant failed with ErrNotLeader: %v, want it ended Unavailable", err)
	}
}

// On a cluster whose default layout makes 128-bit IDs, a stream that
// does not ask for ticks still takes a 64-bit named sequence's IDs; its
// first call of the default sequence ends it (FailedPrecondition), not
// before.
func TestNextStreamNamedCallsOnANarrowStreamOfAWideCluster(t *testing.T) {
	srv, _ := namedServer(t, layout.MustPreset("uuidv7"))
	c := serveSequencer(t, srv)
	s := openStream(t, c)
	for i := range uint64(3) {
		got := s.send(&api.NextStreamRequest{Joint: true, Calls: []*api.StreamCall{{Id: 2 * i, Count: 2, Sequence: "a"}, {Id: 2*i + 1, Count: 1, Sequence: "b"}}})
		if a := got[2*i]; a.Code != 0 || !a.Named || len(a.Runs) == 0 {
			t.Fatalf("named calls on the narrow stream: %v, want their IDs", a)
		}
	}
	if err := s.st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 9, Count: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ended(); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "128-bit") {
		t.Fatalf("a default call on a narrow stream of a 128-bit cluster: %v, want the stream ended FailedPrecondition", err)
	}
	// And a stream that asks for ticks takes the default sequence's.
	ctx, cancel := context.WithTimeout(api.WithTicks(context.Background(), true), 10*time.Second)
	defer cancel()
	st, err := c.NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wide := &streamRig{t: t, st: st}
	if a := wide.send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 2}}})[1]; a.Code != 0 || a.Named || len(a.Runs) == 0 {
		t.Fatalf("a default call on a tick stream: %v, want its ticks", a)
	}
	if err := wide.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := wide.ended(); !errors.Is(err, io.EOF) {
		t.Fatalf("tick stream after CloseSend: %v, want a clean end", err)
	}
}

// Unary Next of a named sequence echoes its name (a node that serves no
// named sequences answers without it); a follower forwards it only once
// its state says the cluster reads named sequences (version 3).
func TestNextNamedEchoAndForwardNeedsVersion(t *testing.T) {
	leader, _ := namedServer(t, layout.MustPreset("default"))
	up := mustServe(t, leader.Register)
	resp, err := api.NewSequencerClient(up).Next(t.Context(), &api.NextRequest{Count: 2, Sequence: "a"})
	if err != nil || resp.Sequence != "a" || !slices.Equal(ids(t, &api.StreamAnswer{Runs: resp.Runs}, 2), seq(1, 2)) {
		t.Fatalf("Next of a: %v, %v; want IDs 1-2 naming a", resp, err)
	}
	if resp, err = api.NewSequencerClient(up).Next(t.Context(), &api.NextRequest{Count: 1}); err != nil || resp.Sequence != "" {
		t.Fatalf("Next of the default sequence: %v, %v; want no sequence named", resp, err)
	}
	follower := func(state *fsm.FSM) api.SequencerClient {
		srv := NewServer(Config{ID: "n3", Layout: layout.MustPreset("default"), MaxCount: 10},
			Parts{Node: fakeNode{addr: up.Target()}, IDs: &fakeIDs{}, State: state, Meter: nopMeter{}, Stop: make(chan struct{}),
				Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
		return serveSequencer(t, srv)
	}
	resp, err = follower(namedState(t)).Next(t.Context(), &api.NextRequest{Count: 1, Sequence: "a"})
	if err != nil || resp.Sequence != "a" || !slices.Equal(ids(t, &api.StreamAnswer{Runs: resp.Runs}, 1), []uint64{3}) {
		t.Fatalf("Next of a through a follower: %v, %v; want the leader's 3, naming a", resp, err)
	}
	old := fsm.New(nil, nil)
	l := layout.MustPreset("default")
	mustApply(t, old, fsm.Command{Op: fsm.OpInit, Layout: &l, ClusterID: "c1"})
	mustApply(t, old, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.SequencesVersion - 1})
	if resp, err := follower(old).Next(t.Context(), &api.NextRequest{Count: 1, Sequence: "a"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Next of a through a follower at cluster version %d: %v, %v; want Unavailable, not forwarded", fsm.SequencesVersion-1, resp, err)
	}
}

// A call whose answer is ready is delivered even when a later call of
// the same gathering ends the stream: a dense sequence's values, once
// committed, are otherwise a gap the cluster made on a node still up
// (the client resends the call and gets the next values).
func TestNextStreamDeliversReadyAnswersBeforeEnding(t *testing.T) {
	srv, _ := namedServer(t, layout.MustPreset("default"))
	s := openStream(t, serveSequencer(t, srv))
	if err := s.st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 2, Sequence: "a"}, {Id: 2, Count: 1, Sequence: "gone"}}}); err != nil {
		t.Fatal(err)
	}
	var got []*api.StreamAnswer
	for {
		resp, err := s.st.Recv()
		if err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want Unavailable", err)
			}
			break
		}
		got = append(got, resp.Answers...)
	}
	if len(got) != 1 || got[0].Id != 1 || !slices.Equal(ids(t, got[0], 2), []uint64{1, 2}) {
		t.Fatalf("answers before the stream ended: %v, want call 1's values 1-2 of dense a", got)
	}
}
