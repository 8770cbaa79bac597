package grpcapi

import (
	"context"
	"errors"
	"io"
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
)

// fakeIDs is a leader's sequencer whose tickets are confirmed at once: a
// Ticket with nothing to wait for is done. It hands out ticks from 0 in
// order.
type fakeIDs struct {
	mu   sync.Mutex
	next uint64
}

func (f *fakeIDs) Next(ctx context.Context, count uint64) (sequencer.Block, error) {
	t, err := f.Assign(ctx, count)
	return t.Block, err
}

func (f *fakeIDs) Assign(_ context.Context, count uint64) (sequencer.Ticket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := sequencer.Ticket{Block: sequencer.Block{First: f.next, Count: count}}
	f.next += count
	return t, nil
}

type nopMeter struct{}

func (nopMeter) Served(string, string, time.Duration)  {}
func (nopMeter) Issued(uint64)                         {}
func (nopMeter) IssuedIn([]string, []uint64)           {}
func (nopMeter) SequenceRate(string) (uint64, float64) { return 0, 0 }
func (nopMeter) RateWindow() time.Duration             { return 10 * time.Second }
func (nopMeter) StreamRead(int)                        {}
func (nopMeter) StreamSent(int)                        {}
func (nopMeter) Usage() *api.NodeUsage                 { return nil }

// newTestServer is the Server of node n with fakeIDs, the default layout
// (a tick below a time unit's size is its ID) and MaxCount 10; stop ends
// its streams.
func newTestServer(n Node, stop <-chan struct{}) *Server {
	return NewServer(Config{ID: "n2", Layout: layout.MustPreset("default"), MaxCount: 10},
		Parts{Node: n, IDs: &fakeIDs{}, State: fsm.New(nil, nil), Meter: nopMeter{}, Stop: stop,
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
}

func serveSequencer(t *testing.T, s *Server) api.SequencerClient {
	return api.NewSequencerClient(mustServe(t, s.Register))
}

// TestNextStreamAssignsInOrder: the calls of a message get consecutive
// ticks in the order sent; a call out of range is answered as invalid
// without failing the others; joint calls get one answer naming them all.
func TestNextStreamAssignsInOrder(t *testing.T) {
	c := serveSequencer(t, newTestServer(fakeNode{leader: true}, make(chan struct{})))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(req *api.NextStreamRequest) []*api.StreamAnswer {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		var got []*api.StreamAnswer
		for covered := 0; covered < len(req.Calls); {
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range resp.Answers {
				covered += 1 + len(a.Also)
			}
			got = append(got, resp.Answers...)
		}
		return got
	}
	got := send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 2}, {Id: 2, Count: 0}, {Id: 3, Count: 3}}})
	if len(got) != 3 ||
		got[0].Id != 1 || len(got[0].Runs) != 1 || got[0].Runs[0].First != 0 || got[0].Runs[0].Count != 2 ||
		got[1].Id != 2 || got[1].Invalid == "" || len(got[1].Runs) != 0 ||
		got[2].Id != 3 || len(got[2].Runs) != 1 || got[2].Runs[0].First != 2 || got[2].Runs[0].Count != 3 {
		t.Fatalf("answers %v, want call 1 ticks 0-1, call 2 invalid, call 3 ticks 2-4", got)
	}
	got = send(&api.NextStreamRequest{Joint: true, Calls: []*api.StreamCall{{Id: 4, Count: 1}, {Id: 5, Count: 2}}})
	if len(got) != 1 || got[0].Id != 4 || len(got[0].Also) != 1 || got[0].Also[0] != 5 ||
		len(got[0].Counts) != 2 || got[0].Runs[0].First != 5 || got[0].Runs[0].Count != 3 {
		t.Fatalf("joint answer %v, want one for calls 4 and 5, ticks 5-7", got)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client closed its side: %v, want a clean end", err)
	}
}

// TestLayoutNotReady: before the node knows the cluster's layout, Layout
// fails as Unavailable, ErrNotReady, with the leader hint.
func TestLayoutNotReady(t *testing.T) {
	c := serveSequencer(t, newTestServer(fakeNode{leader: true}, make(chan struct{})))
	_, err := c.Layout(t.Context(), &api.LayoutRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), ErrNotReady.Error()) || !strings.Contains(err.Error(), "leader is at 10.0.0.1:7000") {
		t.Fatalf("Layout: %v, want Unavailable, ErrNotReady with the leader hint", err)
	}
}

// TestRelayEndsWhenTheNodeCloses: a follower's relayed stream carries
// answers from the leader, and ends with ErrNotLeader's text as soon as
// the follower closes, while the leader's stream is still open: the
// client moves on instead of waiting for the graceful stop to cut it off.
func TestRelayEndsWhenTheNodeCloses(t *testing.T) {
	leaderStop := make(chan struct{})
	up := mustServe(t, newTestServer(fakeNode{leader: true}, leaderStop).Register)
	stop := make(chan struct{})
	c := serveSequencer(t, newTestServer(fakeNode{addr: up.Target()}, stop))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.NextStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&api.NextStreamRequest{Calls: []*api.StreamCall{{Id: 1, Count: 2}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil || len(resp.Answers) != 1 || resp.Answers[0].Id != 1 || resp.Answers[0].Runs[0].Count != 2 {
		t.Fatalf("relayed answer %v, %v: want call 1's two IDs from the leader", resp, err)
	}
	close(stop)
	ended := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		ended <- err
	}()
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), sequencer.ErrNotLeader.Error()) {
			t.Fatalf("relayed stream after the follower closed: %v, want it ended with %v", err, sequencer.ErrNotLeader)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the relayed stream is still open 5 s after the follower closed")
	}
}
