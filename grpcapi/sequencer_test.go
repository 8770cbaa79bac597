package grpcapi

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// fakeSequencer is a leader whose tickets are confirmed at once: a Ticket
// with nothing to wait for is done. It hands out ticks from 0 in order.
type fakeSequencer struct {
	fakeNode
	stop chan struct{}

	mu   sync.Mutex
	next uint64
}

func (f *fakeSequencer) Forward(context.Context) (*grpc.ClientConn, bool, error) {
	return nil, false, nil
}
func (f *fakeSequencer) ForwardContext(ctx context.Context) context.Context { return ctx }
func (f *fakeSequencer) CheckWidth(context.Context) error                   { return nil }
func (f *fakeSequencer) Next(context.Context, *api.NextRequest) (*api.NextResponse, error) {
	return nil, errors.New("not used")
}
func (f *fakeSequencer) MaxCount() uint64 { return 10 }
func (f *fakeSequencer) Assign(_ context.Context, count uint64) (sequencer.Ticket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := sequencer.Ticket{Block: sequencer.Block{First: f.next, Count: count}}
	f.next += count
	return t, nil
}
func (f *fakeSequencer) Issue(b sequencer.Block) []*api.IDRun {
	return []*api.IDRun{{First: b.First, Count: uint32(b.Count), Step: 1}}
}
func (f *fakeSequencer) ClusterLayout() (*layout.Layout, uint64) { return nil, 0 }
func (f *fakeSequencer) Stop() <-chan struct{}                   { return f.stop }

func serveSequencer(t *testing.T, n SequencerNode) api.SequencerClient {
	return api.NewSequencerClient(mustServe(t, func(s *grpc.Server) { api.RegisterSequencerServer(s, NewSequencer(n)) }))
}

// TestNextStreamAssignsInOrder: the calls of a message get consecutive
// ticks in the order sent; a call out of range is answered as invalid
// without failing the others; joint calls get one answer naming them all.
func TestNextStreamAssignsInOrder(t *testing.T) {
	c := serveSequencer(t, &fakeSequencer{stop: make(chan struct{})})
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
// fails with ErrNotReady through Node.ToStatus, with the leader hint.
func TestLayoutNotReady(t *testing.T) {
	s := NewSequencer(&fakeSequencer{stop: make(chan struct{})})
	_, err := s.Layout(context.Background(), &api.LayoutRequest{})
	var m *mapped
	if !errors.Is(err, ErrNotReady) || !errors.As(err, &m) || m.leaderAddr != "10.0.0.1:7000" {
		t.Fatalf("Layout: %v, want ErrNotReady with the leader hint", err)
	}
}

// relayNode is a follower that relays every stream to up.
type relayNode struct {
	*fakeSequencer
	up *grpc.ClientConn
}

func (r relayNode) Forward(context.Context) (*grpc.ClientConn, bool, error) { return r.up, true, nil }

// TestRelayEndsWhenTheNodeCloses: a follower's relayed stream carries
// answers from the leader, and ends with ErrNotLeader's text as soon as
// the follower closes, while the leader's stream is still open: the
// client moves on instead of waiting for the graceful stop to cut it off.
func TestRelayEndsWhenTheNodeCloses(t *testing.T) {
	leaderStop := make(chan struct{})
	up := mustServe(t, func(s *grpc.Server) {
		api.RegisterSequencerServer(s, NewSequencer(&fakeSequencer{stop: leaderStop}))
	})
	stop := make(chan struct{})
	c := serveSequencer(t, relayNode{fakeSequencer: &fakeSequencer{stop: stop}, up: up})
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
