// Package sendq is the sending side of a pipelined NextStream: calls made
// while a message is being sent queue, and go together in the next one.
// The Go client's stream (package client) and the benchmark's stream floor
// (package bench) both send through it, so the floor batches calls exactly
// as the client does.
package sendq

import (
	"runtime"
	"sync"

	"github.com/seed-e8569b35/ordo/api"
)

// Queue holds calls not yet sent. Add is safe for concurrent use; one
// goroutine runs Run.
type Queue struct {
	mu    sync.Mutex
	calls []*api.StreamCall
	wake  chan struct{}
}

// New returns an empty queue.
func New() *Queue { return &Queue{wake: make(chan struct{}, 1)} }

// Add queues a call for Run.
func (q *Queue) Add(call *api.StreamCall) {
	q.mu.Lock()
	q.calls = append(q.calls, call)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run sends the queued calls, every call queued since the last message in
// one message, until dead closes (it returns nil) or a send fails (it
// returns the send's error).
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
		calls := q.calls
		q.calls = nil
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
