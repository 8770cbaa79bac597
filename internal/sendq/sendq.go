// Package sendq is the sending side of a NextStream, a batcher rather than
// a pipe: calls made while messages are out queue, and go together in the
// next message once an earlier one is answered. At most MaxInFlight
// messages are out at a time, so a busy stream sends one message per
// batch rather than one per wake-up of its sender: fewer messages, system
// calls and wake-ups on both ends for the same calls, and the calls that
// wait meanwhile would have waited for the leader's next round anyway.
// The Go client's stream (package client) and the benchmark's stream floor
// (package bench) both send through it, so the floor batches calls exactly
// as the client does.
//
// A message is answered when as many calls as it carried have been
// answered: a node answers a stream's calls in the order it received
// them (grpcapi's NextStream), so counting suffices.
package sendq

import (
	"runtime"
	"sync"

	"github.com/seed-e8569b35/ordo/api"
)

// MaxInFlight is how many messages a stream has out at most. Measured on
// a 2-core VM against 1 and unbounded (docs/performance.md): 1 holds the
// next batch back for a whole round trip, which the term round makes
// long; unbounded sends 2-3 times the messages for the same calls, and
// costs the leader about a fifth more CPU per ID.
const MaxInFlight = 2

// MaxCalls is the most calls one message carries, as a node answers at
// most so many in a message: 1024 calls of the longest sequence name are
// about 72 KB, well under a node's 1 MiB message limit. The rest wait for
// the next message.
const MaxCalls = 1024

// Queue holds calls not yet sent. Add and AnsweredBy are safe for
// concurrent use; one goroutine runs Run.
type Queue struct {
	mu    sync.Mutex
	calls []*api.StreamCall
	wake  chan struct{}
	// sent counts the calls sent, answered those answered; ends holds,
	// for each message out, sent as it was after the message.
	sent, answered uint64
	ends           []uint64
}

// New returns an empty queue.
func New() *Queue { return &Queue{wake: make(chan struct{}, 1)} }

// Add queues a call for Run.
func (q *Queue) Add(call *api.StreamCall) {
	q.mu.Lock()
	q.calls = append(q.calls, call)
	q.mu.Unlock()
	q.signal()
}

// AnsweredBy counts the calls resp answers (a joint answer answers
// several), in the order sent; a message whose calls are all answered is
// no longer out.
func (q *Queue) AnsweredBy(resp *api.NextStreamResponse) {
	n := 0
	for _, a := range resp.Answers {
		n += 1 + len(a.Also)
	}
	q.mu.Lock()
	q.answered += uint64(n)
	freed := false
	for len(q.ends) > 0 && q.ends[0] <= q.answered {
		q.ends = q.ends[1:]
		freed = true
	}
	more := freed && len(q.calls) > 0
	q.mu.Unlock()
	if more {
		q.signal()
	}
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run sends the queued calls, all that queued meanwhile in one message
// (MaxCalls at most), whenever fewer than MaxInFlight messages are out,
// until dead is closed (nil) or a send fails (its error).
func (q *Queue) Run(dead <-chan struct{}, send func(*api.NextStreamRequest) error) error {
	for {
		select {
		case <-q.wake:
		case <-dead:
			return nil
		}
		// Answers come in bursts, and wake many callers at once. Yield
		// once so that those already runnable queue their next calls
		// and go in this message; alone, this costs no wait.
		runtime.Gosched()
		q.mu.Lock()
		if len(q.ends) >= MaxInFlight {
			q.mu.Unlock()
			continue // AnsweredBy wakes this loop again
		}
		calls := q.calls
		q.calls = nil
		if len(calls) > MaxCalls {
			calls, q.calls = calls[:MaxCalls:MaxCalls], calls[MaxCalls:]
			q.signal() // the rest go as soon as a message may
		}
		if len(calls) > 0 {
			q.sent += uint64(len(calls))
			q.ends = append(q.ends, q.sent)
		}
		q.mu.Unlock()
		if len(calls) == 0 {
			continue
		}
		// Both senders take joint answers (api.StreamAnswer.also).
		if err := send(&api.NextStreamRequest{Calls: calls, Joint: true}); err != nil {
			return err
		}
	}
}
