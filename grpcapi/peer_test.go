package grpcapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// fakeVoter answers terms until its stream's context ends, as a voter
// does while a leader holds the stream open.
type fakeVoter struct{}

func (f fakeVoter) AnswerTerms(stream grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]) error {
	<-stream.Context().Done()
	return stream.Context().Err()
}

// termStream is a Term stream with nothing but a context.
type termStream struct {
	grpc.BidiStreamingServer[api.TermRequest, api.TermResponse]
	ctx context.Context
}

func (s termStream) Context() context.Context { return s.ctx }

// TestTermEndsOnClose: an open Term stream ends when the node closes, as
// Unavailable with ErrNotLeader's text, instead of holding up the stop.
func TestTermEndsOnClose(t *testing.T) {
	stop := make(chan struct{})
	p := &Peer{srv: NewServer(Config{}, Parts{Voter: fakeVoter{}, Stop: stop})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- p.Term(termStream{ctx: ctx}) }()
	close(stop)
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), sequencer.ErrNotLeader.Error()) {
			t.Fatalf("Term on close: %v, want Unavailable, ErrNotLeader", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Term still runs after the node closed")
	}
}
