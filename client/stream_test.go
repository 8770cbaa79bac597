package client

import (
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/sendq"
)

// TestStreamPipelines sends 8 calls that the server answers only once all
// 8 are in, in reverse order: they must all be in flight on one stream,
// and each gets its own IDs.
func TestStreamPipelines(t *testing.T) {
	f := &fakeStreamServer{serve: answerInBatches(8)}
	c := mustNew(t, []string{mustSequencer(t, f)})
	s := c.OpenStream()
	defer s.Close()
	ctx := testCtx(t, 10*time.Second)
	var wg sync.WaitGroup
	got := make(chan []uint64, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids, err := s.NextN(ctx, 1+i%2)
			if err != nil {
				t.Errorf("NextN: %v", err)
				return
			}
			got <- ids
		}()
	}
	wg.Wait()
	close(got)
	seen := map[uint64]bool{}
	for ids := range got {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d given twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 12 || f.streams.Load() != 1 {
		t.Fatalf("%d IDs on %d streams, want 12 on 1", len(seen), f.streams.Load())
	}
}

// TestStreamFollowsLeaderHint: a node that is not the leader ends the
// stream with Unavailable and the leader's address; the call is sent again
// there.
func TestStreamFollowsLeaderHint(t *testing.T) {
	leader := mustSequencer(t, &fakeStreamServer{serve: answerInBatches(1)})
	follower := &fakeStreamServer{serve: func(st nextStream) error {
		st.SetTrailer(metadata.Pairs(api.LeaderAddrKey, leader))
		return status.Error(codes.Unavailable, "not the leader")
	}}
	c := mustNew(t, []string{mustSequencer(t, follower)})
	s := c.OpenStream()
	defer s.Close()
	ctx := testCtx(t, 10*time.Second)
	for want := uint64(1); want <= 3; want++ {
		id, err := s.Next(ctx)
		if err != nil || id != want {
			t.Fatalf("Next = %d, %v; want %d", id, err, want)
		}
	}
	if n := follower.streams.Load(); n != 1 {
		t.Fatalf("the follower saw %d streams, want 1 (then the hint is followed)", n)
	}
}

// TestStreamRefusesBadAnswers: IDs not above what was already returned are
// withheld, as with unary calls.
func TestStreamRefusesBadAnswers(t *testing.T) {
	f := &fakeStreamServer{serve: func(st nextStream) error {
		return answerEach(st, func(call *api.StreamCall) *api.StreamAnswer {
			// Always the same IDs.
			return &api.StreamAnswer{Id: call.Id, Runs: []*api.IDRun{{First: 10, Count: call.Count, Step: 1}}}
		})
	}}
	c := mustNew(t, []string{mustSequencer(t, f)})
	s := c.OpenStream()
	defer s.Close()
	ctx := testCtx(t, 5*time.Second)
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.NextN(ctx, 1); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("a repeated ID: %v, %v; want ErrBadResponse", ids, err)
	}
	if _, err := s.NextN(ctx, 0); !errors.Is(err, ErrBadCount) {
		t.Fatalf("NextN(0): %v, want ErrBadCount", err)
	}
	s.Close()
	if _, err := s.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
}

// TestStreamLeavesAStalledNode: a node that takes the stream but never
// answers (a paused leader keeps its connection) is given up after the
// attempt timeout, and the call is answered by the next node.
func TestStreamLeavesAStalledNode(t *testing.T) {
	stalled := &fakeStreamServer{serve: func(st nextStream) error {
		<-st.Context().Done()
		return st.Context().Err()
	}}
	good := &fakeStreamServer{serve: answerInBatches(1)}
	c := mustNew(t, []string{mustSequencer(t, stalled), mustSequencer(t, good)}, WithAttemptTimeout(200*time.Millisecond))
	s := c.OpenStream()
	defer s.Close()
	ctx := testCtx(t, 10*time.Second)
	if id, err := s.Next(ctx); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v; want 1 from the node that answers", id, err)
	}
	if stalled.streams.Load() == 0 || good.streams.Load() == 0 {
		t.Fatalf("streams: stalled %d, good %d; want both tried", stalled.streams.Load(), good.streams.Load())
	}
}

// TestStreamInvalidRequestAlone: a request the server refuses fails alone,
// with InvalidArgument, and the stream goes on.
func TestStreamInvalidRequestAlone(t *testing.T) {
	var mu sync.Mutex
	last := uint64(0)
	f := &fakeStreamServer{serve: func(st nextStream) error {
		return answerEach(st, func(call *api.StreamCall) *api.StreamAnswer {
			a := &api.StreamAnswer{Id: call.Id}
			if call.Count > 5 {
				a.Invalid = "count too large"
				return a
			}
			mu.Lock()
			defer mu.Unlock()
			a.Runs = []*api.IDRun{{First: last + 1, Count: call.Count, Step: 1}}
			last += uint64(call.Count)
			return a
		})
	}}
	c := mustNew(t, []string{mustSequencer(t, f)})
	s := c.OpenStream()
	defer s.Close()
	ctx := testCtx(t, 5*time.Second)
	if _, err := s.NextN(ctx, 6); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NextN(6): %v, want InvalidArgument", err)
	}
	if id, err := s.Next(ctx); err != nil || id != 1 {
		t.Fatalf("Next after a refused request = %d, %v; want 1", id, err)
	}
	if n := f.streams.Load(); n != 1 {
		t.Fatalf("%d streams, want the one stream to go on", n)
	}
}

// TestDefaultClientStreams: a client made with no options sends Next and
// NextN on one stream; against a server without NextStream (an older
// version, a proxy that does not carry streams) it goes on unary.
func TestDefaultClientStreams(t *testing.T) {
	t.Run("stream", func(t *testing.T) {
		f := &fakeStreamServer{serve: answerInBatches(1)}
		c := mustClient(t, []string{mustSequencer(t, f)})
		ctx := testCtx(t, 5*time.Second)
		var last uint64
		for range 5 {
			ids := mustNextN(ctx, t, c, 3)
			if ids[0] <= last {
				t.Fatalf("NextN = %v after %d", ids, last)
			}
			last = ids[2]
		}
		if got := f.streams.Load(); got != 1 {
			t.Fatalf("%d streams opened for 5 calls, want 1", got)
		}
	})
	t.Run("unary fallback", func(t *testing.T) {
		f := &fakeSeq{next: counter()}
		c := mustClient(t, []string{mustSequencer(t, f)}, WithBackoff(time.Millisecond, 10*time.Millisecond))
		ctx := testCtx(t, 5*time.Second)
		if got := mustNextN(ctx, t, c, 2); !slices.Equal(got, []uint64{1, 2}) {
			t.Fatalf("NextN = %v, want [1 2]", got)
		}
		if got := mustNextN(ctx, t, c, 1); !slices.Equal(got, []uint64{3}) {
			t.Fatalf("NextN = %v, want [3]", got)
		}
		if got := f.nextCalls.Load(); got != 2 {
			t.Fatalf("%d unary calls, want 2", got)
		}
	})
}

// relayServer answers every call from ids, after sending a header that
// names leader (none when empty), as a relaying follower and a leader do;
// answered counts its answers.
func relayServer(t *testing.T, ids *atomic.Uint64, leader string) (addr string, answered *atomic.Int64, streams *atomic.Int64) {
	answered = &atomic.Int64{}
	f := &fakeStreamServer{}
	f.serve = func(st nextStream) error {
		if leader != "" {
			st.SetHeader(metadata.Pairs(api.LeaderAddrKey, leader))
		}
		if err := st.SendHeader(nil); err != nil {
			return err
		}
		return answerEach(st, func(call *api.StreamCall) *api.StreamAnswer {
			answered.Add(1)
			first := ids.Add(uint64(call.Count)) - uint64(call.Count) + 1
			return &api.StreamAnswer{Id: call.Id, Runs: []*api.IDRun{{First: first, Count: call.Count, Step: 1}}}
		})
	}
	return mustSequencer(t, f), answered, &f.streams
}

// TestStreamLeavesARelay: a stream that reached a follower relaying it to
// the leader moves to a direct stream to the leader, one hop less; when
// the leader cannot be reached, or relays too, the relayed stream stays.
func TestStreamLeavesARelay(t *testing.T) {
	var ids atomic.Uint64
	leader, leaderAnswered, _ := relayServer(t, &ids, "")
	for _, tt := range []struct {
		name      string
		leader    string
		wantLeave bool
	}{
		{"leader reachable", leader, true},
		{"leader unreachable", mustDeadAddr(t), false},
		{"leader relays too", func() string { a, _, _ := relayServer(t, &ids, leader); return a }(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			relay, relayAnswered, relayStreams := relayServer(t, &ids, tt.leader)
			s := mustNew(t, []string{relay}, WithAttemptTimeout(500*time.Millisecond)).OpenStream()
			defer s.Close()
			ctx := testCtx(t, 20*time.Second)
			before := leaderAnswered.Load()
			deadline := time.Now().Add(10 * time.Second)
			calls := 0
			for ; calls < 50 || (tt.wantLeave && leaderAnswered.Load() == before && time.Now().Before(deadline)); calls++ {
				if _, err := s.Next(ctx); err != nil {
					t.Fatalf("call %d: %v", calls, err)
				}
			}
			left := leaderAnswered.Load() > before
			if left != tt.wantLeave {
				t.Fatalf("after %d calls: the leader answered %d, the relay %d; want leaving the relay %v", calls, leaderAnswered.Load()-before, relayAnswered.Load(), tt.wantLeave)
			}
			if n := relayStreams.Load(); n != 1 {
				t.Fatalf("the relay saw %d streams, want 1", n)
			}
		})
	}
}

// answerJointly answers every k or more calls (or what the most messages
// a stream has out carry) with one joint answer, its runs from next,
// which may bend what it sends.
func answerJointly(k int, next *atomic.Uint64, bend func(a *api.StreamAnswer)) func(nextStream) error {
	return func(st nextStream) error {
		var calls []*api.StreamCall
		msgs := 0
		for {
			r, err := st.Recv()
			if err != nil {
				return nil
			}
			if !r.Joint {
				return status.Error(codes.InvalidArgument, "the client did not ask for joint answers")
			}
			calls = append(calls, r.Calls...)
			// A stream has at most sendq.MaxInFlight messages out.
			if msgs++; len(calls) < k && msgs < sendq.MaxInFlight {
				continue
			}
			msgs = 0
			a := &api.StreamAnswer{Id: calls[0].Id}
			total := uint32(0)
			for i, c := range calls {
				if i > 0 {
					a.Also = append(a.Also, c.Id)
				}
				a.Counts = append(a.Counts, c.Count)
				total += c.Count
			}
			first := next.Add(uint64(total)) - uint64(total) + 1
			a.Runs = []*api.IDRun{{First: first, Count: total, Step: 1}}
			if bend != nil {
				bend(a)
			}
			calls = nil
			if err := st.Send(&api.NextStreamResponse{Answers: []*api.StreamAnswer{a}}); err != nil {
				return err
			}
		}
	}
}

// TestStreamSplitsJointAnswers: one answer for several calls is split in
// the order of its counts, each call getting its own consecutive IDs; an
// answer whose counts are not the calls' own is refused.
func TestStreamSplitsJointAnswers(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	for _, tt := range []struct {
		name string
		bend func(a *api.StreamAnswer)
		ok   bool
	}{
		{"as sent", nil, true},
		{"a count changed", func(a *api.StreamAnswer) { a.Counts[0]++; a.Runs[0].Count++ }, false},
		{"a count missing", func(a *api.StreamAnswer) { a.Counts = a.Counts[1:] }, false},
		{"too few IDs", func(a *api.StreamAnswer) { a.Runs[0].Count-- }, false},
		{"too many IDs", func(a *api.StreamAnswer) { a.Runs[0].Count++ }, false},
		{"IDs going back", func(a *api.StreamAnswer) {
			a.Runs = []*api.IDRun{{First: a.Runs[0].First + 5, Count: 5, Step: 1}, {First: a.Runs[0].First, Count: 5, Step: 1}}
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var next atomic.Uint64
			s := mustNew(t, []string{mustSequencer(t, &fakeStreamServer{serve: answerJointly(4, &next, tt.bend)})}).OpenStream()
			defer s.Close()
			type result struct {
				n   int
				ids []uint64
				err error
			}
			results := make(chan result, 4)
			for i := range 4 {
				go func() {
					ids, err := s.NextN(ctx, i+1)
					results <- result{i + 1, ids, err}
				}()
			}
			seen := map[uint64]bool{}
			for range 4 {
				r := <-results
				if !tt.ok {
					if !errors.Is(r.err, ErrBadResponse) {
						t.Fatalf("NextN(%d) = %v, %v; want ErrBadResponse", r.n, r.ids, r.err)
					}
					continue
				}
				if r.err != nil || len(r.ids) != r.n {
					t.Fatalf("NextN(%d) = %v, %v", r.n, r.ids, r.err)
				}
				for i, id := range r.ids {
					if seen[id] || (i > 0 && id != r.ids[i-1]+1) {
						t.Fatalf("NextN(%d) = %v: not its own consecutive IDs", r.n, r.ids)
					}
					seen[id] = true
				}
			}
			if tt.ok && len(seen) != 10 {
				t.Fatalf("%d IDs handed out, want 10", len(seen))
			}
		})
	}
}

// TestStreamJointAnswerClaimsCostNoMemory: a joint answer whose other
// calls are unknown to the client (gave up, or never sent) may claim
// billions of IDs in a few bytes; the client passes over them without
// holding them, and refuses counts its runs do not hold.
func TestStreamJointAnswerClaimsCostNoMemory(t *testing.T) {
	for _, tt := range []struct {
		name     string
		withRuns bool // the runs hold what the counts claim
	}{{"counts and runs agree", true}, {"counts without runs", false}} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeStreamServer{serve: func(st nextStream) error {
				return answerEach(st, func(call *api.StreamCall) *api.StreamAnswer {
					a := &api.StreamAnswer{Id: call.Id, Counts: []uint32{call.Count}, Runs: []*api.IDRun{{First: 1, Count: call.Count, Step: 1}}}
					next := 1 + uint64(call.Count)
					for i := range 10000 {
						a.Also = append(a.Also, 1<<60+uint64(i))
						a.Counts = append(a.Counts, math.MaxUint32)
						if tt.withRuns {
							a.Runs = append(a.Runs, &api.IDRun{First: next, Count: math.MaxUint32, Step: 1})
							next += math.MaxUint32
						}
					}
					return a
				})
			}}
			s := mustNew(t, []string{mustSequencer(t, f)}).OpenStream()
			defer s.Close()
			ids, err := s.NextN(testCtx(t, 10*time.Second), 1)
			if tt.withRuns && (err != nil || !slices.Equal(ids, []uint64{1})) {
				t.Fatalf("NextN = %v, %v; want [1], the other calls' IDs passed over", ids, err)
			}
			if !tt.withRuns && !errors.Is(err, ErrBadResponse) {
				t.Fatalf("NextN = %v, %v; want ErrBadResponse", ids, err)
			}
		})
	}
}

// TestStreamCloseEndsTheRelayLeft: after moving to the leader, Close ends
// the relayed stream too, not only when its last answers are due.
func TestStreamCloseEndsTheRelayLeft(t *testing.T) {
	var ids atomic.Uint64
	leader, leaderAnswered, _ := relayServer(t, &ids, "")
	ended := make(chan struct{})
	relay := &fakeStreamServer{}
	relay.serve = func(st nextStream) error {
		defer close(ended)
		st.SetHeader(metadata.Pairs(api.LeaderAddrKey, leader))
		if err := st.SendHeader(nil); err != nil {
			return err
		}
		return answerEach(st, func(call *api.StreamCall) *api.StreamAnswer {
			first := ids.Add(uint64(call.Count)) - uint64(call.Count) + 1
			return &api.StreamAnswer{Id: call.Id, Runs: []*api.IDRun{{First: first, Count: call.Count, Step: 1}}}
		})
	}
	s := mustNew(t, []string{mustSequencer(t, relay)}, WithAttemptTimeout(time.Minute)).OpenStream()
	ctx := testCtx(t, 20*time.Second)
	for leaderAnswered.Load() == 0 {
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the relayed stream still runs 10 s after Close (it would end only after the one-minute attempt timeout)")
	}
}
