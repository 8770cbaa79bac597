package leadership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/sequencer"
)

// termStreams keeps one Term stream open from this node to each voter it
// asks, so that a round costs one small message each way instead of a new
// RPC; the round is on the path of every request.
type termStreams struct {
	mu     sync.Mutex
	slots  map[string]*termSlot // by node id
	closed bool
	// voters holds, by node id, how each voter answered lately, for
	// choosing whom a round asks; hedgeMin and hedgeMax bound how long a
	// round waits for them (minHedge and maxHedge).
	voters             map[string]voterRecord
	hedgeMin, hedgeMax time.Duration
}

// termSlot holds the stream to one voter; its lock is held while the
// stream is opened, so rounds that need it at once share one.
type termSlot struct {
	mu sync.Mutex
	ts *termStream
}

// termStream is one open Term stream. Answers are matched to the round
// that asked by the echoed round number; an answer that comes after its
// round ended is dropped.
type termStream struct {
	addr   string
	st     grpc.BidiStreamingClient[api.TermRequest, api.TermResponse]
	cancel context.CancelFunc
	dead   chan struct{} // closed once the stream is given up
	once   sync.Once

	mu sync.Mutex
	// cluster is the cluster id the voter's side named in the header of a
	// stream that ended, "" if none: a voter of another cluster refuses
	// the stream at once, naming its own (grpcapi.Auth), and that is how
	// a round tells such a refusal from a voter that is down.
	cluster string
	// waiting holds, by round, where the answer to each request sent and
	// not yet answered goes. A healthy voter answers every request, in
	// order, so it holds at most the rounds in flight; a voter that stops
	// answering is given up at maxUnanswered.
	waiting map[uint64]termWaiter
	killed  bool
	// queue holds requests not yet sent. Whichever asker finds no send in
	// progress sends them all, so rounds in flight at once never wait
	// for each other's sends.
	queue   []*api.TermRequest
	sending bool
}

// termWaiter is the round that asked voter id, by its answer channel.
type termWaiter struct {
	id      string
	answers chan<- termAnswer
}

// maxQueuedTerms bounds the requests waiting to be sent on one Term
// stream. Sends pile up only when one is held by flow control: the peer
// stopped reading (paused, cut off). Past the bound the stream is dropped,
// which also frees the held send.
const maxQueuedTerms = 64

// maxUnanswered bounds the requests sent on one Term stream and not yet
// answered. A voter that reads but does not answer (paused after its
// socket buffers took the requests) is given up past it, so its rounds
// fail at once and their entries do not pile up.
const maxUnanswered = 256

func newTermStreams() *termStreams {
	return &termStreams{slots: map[string]*termSlot{}, voters: map[string]voterRecord{}, hedgeMin: minHedge, hedgeMax: maxHedge}
}

// get returns the live stream to voter id at addr, opening one if needed.
// Opening waits at most until ctx ends; the stream itself lives on.
func (t *termStreams) get(ctx context.Context, id, addr string, node Node) (*termStream, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, sequencer.ErrNotLeader
	}
	slot := t.slots[id]
	if slot == nil {
		slot = &termSlot{}
		t.slots[id] = slot
	}
	t.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.ts != nil && slot.ts.addr == addr && !slot.ts.isDead() {
		return slot.ts, nil
	}
	if slot.ts != nil {
		slot.ts.kill() // dead, or the voter's address changed
		slot.ts = nil
	}
	conn, err := node.Conn(addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	stopWatch := context.AfterFunc(ctx, cancel) // a connecting peer holds no round past its end
	st, err := api.NewPeerClient(conn).Term(sctx)
	if !stopWatch() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open term stream to %s: %w", addr, err)
	}
	ts := &termStream{addr: addr, st: st, cancel: cancel, dead: make(chan struct{}), waiting: map[uint64]termWaiter{}}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		ts.kill()
		return nil, sequencer.ErrNotLeader
	}
	slot.ts = ts
	go ts.receive()
	return ts, nil
}

// close ends every stream.
func (t *termStreams) close() {
	t.mu.Lock()
	t.closed = true
	slots := t.slots
	t.slots = map[string]*termSlot{}
	t.mu.Unlock()
	for _, slot := range slots {
		slot.mu.Lock()
		if slot.ts != nil {
			slot.ts.kill()
		}
		slot.mu.Unlock()
	}
}

// ask sends req; exactly one answer to it reaches answers: the voter's,
// or a nil one if the stream breaks or is given up first. A round that
// ended before its answer came leaves it in the channel's buffer.
func (ts *termStream) ask(req *api.TermRequest, answers chan<- termAnswer) {
	ts.mu.Lock()
	if ts.killed || len(ts.queue) >= maxQueuedTerms || len(ts.waiting) >= maxUnanswered {
		cluster := ts.cluster
		ts.mu.Unlock()
		ts.kill()
		answers <- termAnswer{id: req.NodeId, cluster: cluster}
		return
	}
	ts.waiting[req.Round] = termWaiter{id: req.NodeId, answers: answers}
	ts.queue = append(ts.queue, req)
	if ts.sending {
		ts.mu.Unlock()
		return
	}
	ts.sending = true
	for len(ts.queue) > 0 {
		reqs := ts.queue
		ts.queue = nil
		ts.mu.Unlock()
		var err error
		for _, r := range reqs {
			if err = ts.st.Send(r); err != nil {
				break
			}
		}
		ts.mu.Lock()
		if errors.Is(err, io.EOF) {
			// The voter ended the stream: receive is about to read why,
			// and the cluster the voter named, and then answers every
			// round still waiting. Killing it here first would lose the
			// cluster.
			ts.queue = nil
			break
		}
		if err != nil {
			ts.mu.Unlock()
			ts.kill() // answers every round still waiting
			ts.mu.Lock()
		}
	}
	ts.sending = false
	ts.mu.Unlock()
}

// deliver hands resp (nil: no answer) to the round that asked in round,
// once: the entry goes with the first delivery.
func (ts *termStream) deliver(round uint64, resp *api.TermResponse) {
	ts.mu.Lock()
	w, ok := ts.waiting[round]
	delete(ts.waiting, round)
	ts.mu.Unlock()
	if ok {
		w.answers <- termAnswer{id: w.id, resp: resp}
	}
}

// receive hands each answer to the round that asked, until the stream
// breaks; then it keeps the cluster the voter's side named, for the
// rounds the stream fails.
func (ts *termStream) receive() {
	defer ts.kill()
	for {
		resp, err := ts.st.Recv()
		if err != nil {
			// The stream has ended, so Header does not wait.
			if md, err := ts.st.Header(); err == nil {
				if v := md.Get(api.ClusterIDKey); len(v) > 0 {
					ts.mu.Lock()
					ts.cluster = v[0]
					ts.mu.Unlock()
				}
			}
			return
		}
		ts.deliver(resp.Round, resp) // a second answer to a round finds no entry
	}
}

// kill gives the stream up: it ends the call, and every round still
// waiting on it gets a nil answer, with the cluster the voter named.
func (ts *termStream) kill() {
	ts.once.Do(func() {
		ts.cancel()
		close(ts.dead)
		ts.mu.Lock()
		ts.killed = true
		waiting, cluster := ts.waiting, ts.cluster
		ts.waiting = map[uint64]termWaiter{}
		ts.mu.Unlock()
		for _, w := range waiting {
			w.answers <- termAnswer{id: w.id, cluster: cluster}
		}
	})
}

func (ts *termStream) isDead() bool {
	select {
	case <-ts.dead:
		return true
	default:
		return false
	}
}
