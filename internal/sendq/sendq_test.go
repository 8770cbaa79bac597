package sendq

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"google.golang.org/protobuf/proto"
)

// TestCallsQueuedDuringASendGoTogether: the calls added while a message
// is being sent go in the next message, all of them, in the order added;
// Run returns nil when dead closes.
func TestCallsQueuedDuringASendGoTogether(t *testing.T) {
	q := New()
	dead := make(chan struct{})
	sent := make(chan *api.NextStreamRequest)
	release := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- q.Run(dead, func(req *api.NextStreamRequest) error {
			sent <- req
			<-release // the send is under way until released
			return nil
		})
	}()
	q.Add(&api.StreamCall{Id: 0})
	first := <-sent
	for i := range 10 {
		q.Add(&api.StreamCall{Id: uint64(1 + i)})
	}
	release <- struct{}{}
	second := <-sent
	release <- struct{}{}
	if len(first.Calls) != 1 || first.Calls[0].Id != 0 {
		t.Fatalf("first message %v, want call 0 alone", first.Calls)
	}
	if len(second.Calls) != 10 {
		t.Fatalf("second message has %d calls, want the 10 queued during the first send", len(second.Calls))
	}
	for i, c := range second.Calls {
		if c.Id != uint64(1+i) {
			t.Fatalf("second message's calls %v, not in the order added", second.Calls)
		}
	}
	close(dead)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run after dead closed: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still runs after dead closed")
	}
}

// TestRunReturnsTheSendError: a send that fails ends Run with its error.
func TestRunReturnsTheSendError(t *testing.T) {
	q := New()
	broken := errors.New("broken")
	q.Add(&api.StreamCall{Id: 7})
	err := q.Run(make(chan struct{}), func(*api.NextStreamRequest) error { return broken })
	if !errors.Is(err, broken) {
		t.Fatalf("Run = %v, want the send's error", err)
	}
}

// TestAtMostMaxInFlightMessagesAreOut: with MaxInFlight messages out, the
// next waits, gathering every call made meanwhile, until an answer
// covers every call of the oldest message (a joint answer covers several).
func TestAtMostMaxInFlightMessagesAreOut(t *testing.T) {
	q, sent := running(t)
	next := func(what string) *api.NextStreamRequest {
		t.Helper()
		return mustSend(t, sent, what)
	}
	none := func(what string) {
		t.Helper()
		select {
		case req := <-sent:
			t.Fatalf("%s: sent %v", what, req.Calls)
		case <-time.After(100 * time.Millisecond):
		}
	}
	id := uint64(0)
	add := func(n int) {
		for range n {
			q.Add(&api.StreamCall{Id: id, Count: 1})
			id++
		}
	}
	// Two messages out, one call each.
	add(1)
	next("the first message")
	add(1)
	next("the second message")
	add(3)
	none("with MaxInFlight messages out")
	// An answer to one call covers the first message: the three calls
	// made meanwhile go in one message.
	q.AnsweredBy(&api.NextStreamResponse{Answers: []*api.StreamAnswer{{Id: 0}}})
	if got := next("once the first message is answered"); len(got.Calls) != 3 {
		t.Fatalf("the next message has %d calls, want the 3 made while it waited", len(got.Calls))
	}
	add(1)
	none("with the second and third out")
	// A joint answer for calls 1 and 2 covers the second message, not
	// the third (calls 2 to 4).
	q.AnsweredBy(&api.NextStreamResponse{Answers: []*api.StreamAnswer{{Id: 1, Also: []uint64{2}}}})
	if got := next("once a joint answer covers the second message"); len(got.Calls) != 1 {
		t.Fatalf("sent %v, want the one call waiting", got.Calls)
	}
	add(1)
	none("with the third and fourth out")
	q.AnsweredBy(&api.NextStreamResponse{Answers: []*api.StreamAnswer{{Id: 3, Also: []uint64{4}}}})
	next("once the third message is answered")
}

// TestAMessageCarriesAtMostMaxCalls: calls that gathered while messages
// were out go MaxCalls to a message, the longest sequence name's well under
// a node's message limit (review: 15,000 callers of one named sequence
// made one message of 1.08 MB, which the node refuses, again and again).
func TestAMessageCarriesAtMostMaxCalls(t *testing.T) {
	q, sent := running(t)
	next := func() *api.NextStreamRequest {
		t.Helper()
		return mustSend(t, sent, "a message")
	}
	name := strings.Repeat("s", api.MaxSequenceName)
	id := uint64(0)
	add := func(n int) {
		for range n {
			q.Add(&api.StreamCall{Id: id, Count: 1, Sequence: name})
			id++
		}
	}
	add(1)
	next()
	add(1)
	next() // MaxInFlight out
	const waiting = 2*MaxCalls + 10
	add(waiting)
	got := 0
	for got < waiting {
		// Each answer covers the oldest message out, so the next goes.
		q.AnsweredBy(&api.NextStreamResponse{Answers: []*api.StreamAnswer{{Id: 0, Also: make([]uint64, MaxCalls)}}})
		req := next()
		if len(req.Calls) > MaxCalls {
			t.Fatalf("a message of %d calls, want at most %d", len(req.Calls), MaxCalls)
		}
		if n := proto.Size(req); n > 128<<10 {
			t.Fatalf("a message of %d bytes, want well under the node's 1 MiB", n)
		}
		got += len(req.Calls)
	}
}

// running is a queue whose Run sends into sent, until the test ends.
func running(t *testing.T) (*Queue, chan *api.NextStreamRequest) {
	q := New()
	dead := make(chan struct{})
	t.Cleanup(func() { close(dead) })
	sent := make(chan *api.NextStreamRequest, 64)
	go func() {
		_ = q.Run(dead, func(req *api.NextStreamRequest) error { sent <- req; return nil })
	}()
	return q, sent
}

// mustSend is the next message sent, within 10 s.
func mustSend(t *testing.T, sent chan *api.NextStreamRequest, what string) *api.NextStreamRequest {
	t.Helper()
	select {
	case req := <-sent:
		return req
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing sent in 10 s", what)
		return nil
	}
}
