package sendq

import (
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
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
