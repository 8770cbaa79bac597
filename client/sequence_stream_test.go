package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// Named sequences' calls on the client's stream of their own
// (Sequence.next, Stream.nextIn, Stream.answer) and the unary echo.

// streamClient is a client with its default paths (streams), fast
// backoff, closed when the test ends.
func streamClient(t *testing.T, addr string) *Client {
	t.Helper()
	return mustClient(t, []string{addr}, WithBackoff(time.Millisecond, 10*time.Millisecond))
}

// namedStreamServer answers each stream call alone: a named call from
// its sequence's counter (named, as a node that serves named sequences
// on streams marks it), a default call from the default sequence's;
// answer, if set, makes the answer instead. It records the sequence each
// call named.
type namedStreamServer struct {
	answer func(c *api.StreamCall, next func(seq string, n uint32) *api.IDRun) *api.StreamAnswer

	mu    sync.Mutex
	last  map[string]uint64
	asked []string
}

func (f *namedStreamServer) next(seq string, n uint32) *api.IDRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]uint64{}
	}
	r := &api.IDRun{First: f.last[seq] + 1, Count: n, Step: 1}
	f.last[seq] += uint64(n)
	f.asked = append(f.asked, seq)
	return r
}

func (f *namedStreamServer) serve(st nextStream) error {
	return answerEach(st, func(c *api.StreamCall) *api.StreamAnswer {
		if f.answer != nil {
			return f.answer(c, f.next)
		}
		return &api.StreamAnswer{Id: c.Id, Named: c.Sequence != "", Runs: []*api.IDRun{f.next(c.Sequence, c.Count)}}
	})
}

func (f *namedStreamServer) askedFor() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// A named sequence's unkeyed call goes on the client's stream, naming
// its sequence, and gets that sequence's IDs; the client's own calls
// carry no name.
func TestSequenceCallsGoOnTheStream(t *testing.T) {
	f := &namedStreamServer{}
	srv := &fakeStreamServer{serve: f.serve}
	c := streamClient(t, mustSequencer(t, srv))
	ctx := testCtx(t, 10*time.Second)
	if ids, err := c.Sequence("a").NextN(ctx, 3); err != nil || !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("a NextN(3) = %v, %v; want [1 2 3]", ids, err)
	}
	if ids, err := c.Sequence("b").NextN(ctx, 2); err != nil || !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("b NextN(2) = %v, %v; want [1 2]", ids, err)
	}
	if id, err := c.Sequence("a").Next(ctx); err != nil || id != 4 {
		t.Fatalf("a Next = %d, %v; want 4", id, err)
	}
	if got, want := f.askedFor(), []string{"a", "b", "a"}; !slices.Equal(got, want) {
		t.Fatalf("stream calls named %q, want %q", got, want)
	}
}

// A server that serves no named sequences on streams (an older version)
// ignores StreamCall.sequence and answers from the default sequence,
// unmarked: the client refuses it (ErrBadResponse) rather than hand out
// the default sequence's IDs as the named one's. An answer marked named
// for a call of the default sequence is refused too.
func TestSequenceStreamRefusesAnOldServersAnswer(t *testing.T) {
	f := &namedStreamServer{answer: func(c *api.StreamCall, next func(string, uint32) *api.IDRun) *api.StreamAnswer {
		return &api.StreamAnswer{Id: c.Id, Runs: []*api.IDRun{next("", c.Count)}} // as a node that knows no sequence field
	}}
	c := streamClient(t, mustSequencer(t, &fakeStreamServer{serve: f.serve}))
	ctx := testCtx(t, 10*time.Second)
	if ids, err := c.Sequence("a").NextN(ctx, 2); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("a NextN(2) answered unmarked: %v, %v; want ErrBadResponse", ids, err)
	}

	f = &namedStreamServer{answer: func(c *api.StreamCall, next func(string, uint32) *api.IDRun) *api.StreamAnswer {
		return &api.StreamAnswer{Id: c.Id, Named: true, Runs: []*api.IDRun{next(c.Sequence, c.Count)}}
	}}
	c = streamClient(t, mustSequencer(t, &fakeStreamServer{serve: f.serve}))
	if ids, err := c.NextN(ctx, 2); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("default NextN(2) answered as named: %v, %v; want ErrBadResponse", ids, err)
	}
	if ids, err := c.Sequence("a").NextN(ctx, 2); err != nil || !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("a NextN(2) answered as named: %v, %v; want [1 2]", ids, err)
	}
}

// A joint answer to named calls: each call's IDs are its own sequence's,
// so they may be below the previous call's, but they must begin a run of
// their own; a call whose IDs begin inside the previous call's run is a
// server's bug, refused (ErrBadResponse) for every call of the answer.
func TestSequenceStreamJointNamedAnswer(t *testing.T) {
	for _, tt := range []struct {
		name string
		runs func(first, second uint32) []*api.IDRun
		ok   bool
	}{
		{"each call its runs", func(first, second uint32) []*api.IDRun {
			return []*api.IDRun{{First: 100, Count: first, Step: 1}, {First: 5, Count: second, Step: 1}}
		}, true},
		{"the second call's IDs inside the first's run", func(first, second uint32) []*api.IDRun {
			return []*api.IDRun{{First: 100, Count: first + second, Step: 1}}
		}, false},
		{"not marked named", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			firsts := make(chan map[string]uint64, 1) // each sequence's first ID, as answered
			serve := func(st nextStream) error {
				var calls []*api.StreamCall
				for len(calls) < 2 {
					r, err := st.Recv()
					if err != nil {
						return nil
					}
					calls = append(calls, r.Calls...)
				}
				a := &api.StreamAnswer{Id: calls[0].Id, Also: []uint64{calls[1].Id}, Counts: []uint32{calls[0].Count, calls[1].Count}, Named: tt.runs != nil}
				if tt.runs != nil {
					a.Runs = tt.runs(calls[0].Count, calls[1].Count)
				} else {
					a.Runs = []*api.IDRun{{First: 100, Count: calls[0].Count, Step: 1}, {First: 200, Count: calls[1].Count, Step: 1}}
				}
				firsts <- map[string]uint64{calls[0].Sequence: a.Runs[0].First, calls[1].Sequence: a.Runs[len(a.Runs)-1].First}
				if err := st.Send(&api.NextStreamResponse{Answers: []*api.StreamAnswer{a}}); err != nil {
					return err
				}
				<-st.Context().Done()
				return nil
			}
			c := streamClient(t, mustSequencer(t, &fakeStreamServer{serve: serve}))
			ctx := testCtx(t, 10*time.Second)
			type result struct {
				seq string
				ids []uint64
				err error
			}
			results := make(chan result, 2)
			for _, call := range []struct {
				seq string
				n   int
			}{{"a", 2}, {"b", 3}} {
				go func() {
					ids, err := c.Sequence(call.seq).NextN(ctx, call.n)
					results <- result{call.seq, ids, err}
				}()
			}
			var first map[string]uint64
			for range 2 {
				var r result
				select {
				case r = <-results:
				case <-ctx.Done():
					t.Fatal("no answer")
				}
				if first == nil {
					first = <-firsts // sent before the answer
				}
				switch {
				case !tt.ok && !errors.Is(r.err, ErrBadResponse):
					t.Fatalf("%s: %v, %v; want ErrBadResponse", r.seq, r.ids, r.err)
				case tt.ok && (r.err != nil || len(r.ids) == 0 || r.ids[0] != first[r.seq] || r.ids[len(r.ids)-1] != r.ids[0]+uint64(len(r.ids)-1)):
					t.Fatalf("%s: %v, %v; want its own consecutive IDs from %d", r.seq, r.ids, r.err, first[r.seq])
				}
			}
		})
	}
}

// A named call that fails alone (StreamAnswer.code) returns that status
// with the server's message, and the stream goes on for the others.
func TestSequenceStreamCallFailsAlone(t *testing.T) {
	f := &namedStreamServer{answer: func(c *api.StreamCall, next func(string, uint32) *api.IDRun) *api.StreamAnswer {
		switch c.Sequence {
		case "gone":
			return &api.StreamAnswer{Id: c.Id, Named: true, Code: uint32(codes.NotFound), Message: `no sequence "gone"`}
		case "wide":
			return &api.StreamAnswer{Id: c.Id, Named: true, Code: uint32(codes.FailedPrecondition), Message: "128-bit"}
		}
		return &api.StreamAnswer{Id: c.Id, Named: true, Runs: []*api.IDRun{next(c.Sequence, c.Count)}}
	}}
	srv := &fakeStreamServer{serve: f.serve}
	c := streamClient(t, mustSequencer(t, srv))
	ctx := testCtx(t, 10*time.Second)
	for seq, want := range map[string]codes.Code{"gone": codes.NotFound, "wide": codes.FailedPrecondition} {
		_, err := c.Sequence(seq).Next(ctx)
		if st, _ := status.FromError(err); st.Code() != want || st.Message() == "" {
			t.Fatalf("%s: %v, want %s with the server's message", seq, err, want)
		}
	}
	if id, err := c.Sequence("a").Next(ctx); err != nil || id != 1 {
		t.Fatalf("a after two calls failed alone: %d, %v; want 1", id, err)
	}
	if n := srv.streams.Load(); n != 1 {
		t.Fatalf("%d streams, want the one to go on", n)
	}
}

// The sequence's floor holds for stream answers too: an answer not above
// an ID the sequence already returned is withheld (ErrBadResponse); the
// same IDs of another sequence are not.
func TestSequenceStreamAnswerBelowTheFloor(t *testing.T) {
	f := &namedStreamServer{answer: func(c *api.StreamCall, _ func(string, uint32) *api.IDRun) *api.StreamAnswer {
		return &api.StreamAnswer{Id: c.Id, Named: true, Runs: []*api.IDRun{{First: 10, Count: c.Count, Step: 1}}} // the same again and again
	}}
	c := streamClient(t, mustSequencer(t, &fakeStreamServer{serve: f.serve}))
	ctx := testCtx(t, 10*time.Second)
	if ids, err := c.Sequence("a").NextN(ctx, 3); err != nil || !slices.Equal(ids, []uint64{10, 11, 12}) {
		t.Fatalf("a NextN(3) = %v, %v; want [10 11 12]", ids, err)
	}
	if ids, err := c.Sequence("a").NextN(ctx, 1); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("a NextN(1) answered 10 again: %v, %v; want ErrBadResponse", ids, err)
	}
	if ids, err := c.Sequence("b").NextN(ctx, 1); err != nil || !slices.Equal(ids, []uint64{10}) {
		t.Fatalf("b NextN(1) = %v, %v; want [10]: its own floor", ids, err)
	}
}

// A server without NextStream (an older version, a proxy that does not
// carry streams): the first named call falls back to unary Next, and the
// client stays unary.
func TestSequenceFallsBackToUnary(t *testing.T) {
	var streams atomic.Int64
	f := &fakeSequences{next: map[string]nextFunc{"a": counter()}}
	srv := &unimplementedStream{fakeSequences: f, streams: &streams}
	c := streamClient(t, mustServeOn(t, mustListen(t), func(s *grpc.Server) {
		api.RegisterSequencerServer(s, srv)
		api.RegisterAdminServer(s, f)
	}))
	ctx := testCtx(t, 10*time.Second)
	for want := uint64(1); want <= 5; want += 2 {
		if ids, err := c.Sequence("a").NextN(ctx, 2); err != nil || !slices.Equal(ids, []uint64{want, want + 1}) {
			t.Fatalf("a NextN(2) = %v, %v; want [%d %d]", ids, err, want, want+1)
		}
	}
	if n, u := streams.Load(), f.nextCalls.Load(); n != 1 || u != 3 {
		t.Fatalf("%d streams and %d unary calls, want 1 stream tried and 3 unary calls", n, u)
	}
}

// unimplementedStream is fakeSequences whose NextStream counts the
// streams and answers Unimplemented, as gRPC does for an unknown method.
type unimplementedStream struct {
	*fakeSequences
	streams *atomic.Int64
}

func (f *unimplementedStream) NextStream(nextStream) error {
	f.streams.Add(1)
	return status.Error(codes.Unimplemented, "fake: no NextStream")
}

// A unary answer must echo the sequence the call named: an answer
// without it (a node that serves no named sequences answers from the
// default sequence) or naming another is refused (ErrBadResponse); the
// default sequence's answer names none.
func TestSequenceUnaryAnswerMustEchoTheSequence(t *testing.T) {
	for _, tt := range []struct {
		asked, echo string
		ok          bool
	}{{"a", "a", true}, {"a", "", false}, {"a", "b", false}, {"", "", true}, {"", "a", false}} {
		f := &fakeSeq{next: func(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
			return &api.NextResponse{Runs: []*api.IDRun{{First: 1, Count: req.Count, Step: 1}}, Sequence: tt.echo}, nil
		}}
		c := mustNew(t, []string{mustSequencer(t, f)}) // unary
		ids, err := c.Sequence(tt.asked).NextN(testCtx(t, 5*time.Second), 1)
		if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("a call of %q answered naming %q: %v, %v; want ok %t, else ErrBadResponse", tt.asked, tt.echo, ids, err, tt.ok)
		}
	}
}
