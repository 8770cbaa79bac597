package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/sendq"
)

// Stream pipelines requests on one gRPC stream to the leader: many calls
// can be in flight at once, each answered by id. When the stream breaks
// (the leader changed, a node went away), the next call opens a new one to
// the leader and every call that had no answer is sent again; IDs the old
// leader assigned to them, if any, are a gap. It is safe for concurrent
// use, and keeps every guarantee of Client.NextN.
type Stream struct {
	c *Client
	// ticks makes the stream ask for ticks of a 128-bit layout
	// (api.TicksKey): Client's own stream for NextUUIDs and NextULIDs.
	ticks bool

	mu   sync.Mutex
	conn *streamConn // nil when none is open
	// leaving are relayed streams whose calls moved to the leader, kept
	// until their last answers came, so Close can end them too.
	leaving map[*streamConn]bool
	pending map[uint64]*streamCall
	nextID  uint64
	closed  bool
}

type streamConn struct {
	target string
	st     grpc.BidiStreamingClient[api.NextStreamRequest, api.NextStreamResponse]
	cancel context.CancelFunc
	dead   chan struct{} // closed when the stream broke
	err    error         // why, set before dead closes

	// queue holds calls not yet sent; sendLoop sends them together.
	queue *sendq.Queue

	failOnce sync.Once
	failErr  error // set by fail: why this side gave the stream up
}

type streamCall struct {
	n int
	// seq is the named sequence asked of; "" for the default sequence,
	// whose IDs are checked here against floor. A named call's are
	// checked by its handle, against the sequence's own floor.
	seq   string
	floor uint64
	// on is the stream the call was last sent on, and sent when (Unix
	// ns): the stream's watchdog gives the stream up when a call waits
	// longer than the attempt timeout.
	on       atomic.Pointer[streamConn]
	sent     atomic.Int64
	done     chan struct{}
	answered bool // under Stream.mu: done is closed
	ids      []uint64
	err      error
}

// OpenStream returns a Stream that uses c's addresses, options and
// leader guess. It connects on the first call.
func (c *Client) OpenStream() *Stream {
	return &Stream{c: c, pending: map[uint64]*streamCall{}, leaving: map[*streamConn]bool{}}
}

// Close ends the stream; calls in flight fail with ErrClosed.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := []*streamConn{s.conn}
	s.conn = nil
	for c := range s.leaving {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.cancel()
		}
	}
	return nil
}

// Next returns one ID.
func (s *Stream) Next(ctx context.Context) (uint64, error) { return one(s.NextN(ctx, 1)) }

// NextN returns n IDs, strictly increasing and contiguous in the cluster's
// order, retrying on a new stream until ctx ends. Like Client.NextN, it
// serves 64-bit layouts only. A keyed call (WithIdempotencyKey, or every
// call under WithIdempotentRetries) goes unary, as Client.NextN's does.
func (s *Stream) NextN(ctx context.Context, n int) ([]uint64, error) {
	if err := s.c.checkNarrow(); err != nil {
		return nil, err
	}
	if keyOf(ctx) != "" || s.c.idempotent {
		return s.c.nextN(ctx, n, s, nil)
	}
	return s.nextN(ctx, n)
}

// nextN is NextN of IDs, or of ticks on a tick stream.
func (s *Stream) nextN(ctx context.Context, n int) ([]uint64, error) {
	if err := checkCount(n); err != nil {
		return nil, err
	}
	return s.call(ctx, &streamCall{n: n, floor: s.c.floor(), done: make(chan struct{})})
}

// nextIn asks for n IDs of named sequence seq, and returns them unchecked:
// the caller (Sequence.next) checks them against the sequence's floor.
func (s *Stream) nextIn(ctx context.Context, seq string, n int) ([]uint64, error) {
	return s.call(ctx, &streamCall{n: n, seq: seq, done: make(chan struct{})})
}

// call sends call, and again on a new stream when one breaks, until it is
// answered or ctx ends.
func (s *Stream) call(ctx context.Context, call *streamCall) ([]uint64, error) {
	s.mu.Lock()
	id := s.nextID
	s.nextID++
	s.pending[id] = call
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()

	backoff := s.c.minBackoff
	var lastErr error
	for {
		conn, addr, err := s.open()
		if err == nil {
			err = s.attempt(ctx, conn, call, id)
			if err == nil || ctx.Err() != nil {
				if err == nil {
					return call.ids, call.err
				}
				return nil, ctx.Err()
			}
		}
		if errors.Is(err, ErrClosed) || (err != nil && !retryable(err)) {
			return nil, err
		}
		lastErr = err
		s.c.retried(addr, err)
		if pause(ctx, backoff) != nil {
			return nil, &GaveUp{Addr: addr, Last: lastErr, End: ctx.Err()}
		}
		backoff = min(2*backoff, s.c.maxBackoff)
	}
}

// attempt sends the call on conn and waits for its answer. A stream that
// breaks, or that does not answer within the attempt timeout (see watch),
// is given up: every call on it is sent again elsewhere. It returns nil
// when call is answered.
func (s *Stream) attempt(ctx context.Context, conn *streamConn, call *streamCall, id uint64) error {
	call.sent.Store(monoNow())
	call.on.Store(conn)
	conn.send(&api.StreamCall{Id: id, Count: uint32(call.n), Sequence: call.seq})
	select {
	case <-call.done:
		return nil
	case <-conn.dead:
		// The answer may have come just before the stream broke.
		select {
		case <-call.done:
			return nil
		default:
		}
		return conn.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send queues a call for sendLoop.
func (c *streamConn) send(call *api.StreamCall) { c.queue.Add(call) }

// sendLoop sends the queued calls, those that queued while the previous
// message was being sent in one message, until the stream breaks. A send
// that fails, or that flow control holds (a paused server), ends the
// stream; the attempt timeout frees it.
func (c *streamConn) sendLoop() {
	err := c.queue.Run(c.dead, c.st.Send)
	if err != nil && !errors.Is(err, io.EOF) {
		c.fail(err)
	}
	// io.EOF: the server ended the stream, and its status (which may
	// say why: Unimplemented, a leader elsewhere) is the receiver's to
	// read; failing with EOF would hide it.
}

// errStalled marks a stream given up for not answering in time; another
// node may answer.
var errStalled = status.Error(codes.Unavailable, "stream stalled")

// fail ends the stream; the receiver records why and closes dead.
func (c *streamConn) fail(err error) {
	c.failOnce.Do(func() { c.failErr = err; c.cancel() })
}

// open returns the live stream and its node, opening one to the leader
// guess if needed (the node it tried, when that fails).
// Opening is bounded by the attempt timeout, so a node that accepts
// connections but never answers holds callers no longer than that.
func (s *Stream) open() (*streamConn, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, "", ErrClosed
	}
	if s.conn != nil {
		select {
		case <-s.conn.dead:
			s.conn = nil
		default:
			return s.conn, s.conn.target, nil
		}
	}
	target := s.c.target()
	conn, err := s.openTo(target)
	if err != nil {
		s.c.moveOn(target, "")
		return nil, target, err
	}
	s.useLocked(conn)
	go s.leaveRelay(conn)
	return conn, target, nil
}

// openTo opens a stream to target; nothing reads or sends on it yet.
func (s *Stream) openTo(target string) (*streamConn, error) {
	cc, err := s.c.conn(target)
	if err != nil {
		return nil, err
	}
	// The stream outlives the call that opens it.
	sctx, cancel := context.WithCancel(api.WithTicks(s.c.clusterCtx(context.Background()), s.ticks))
	watchdog := time.AfterFunc(s.c.attemptTimeout, cancel)
	st, err := api.NewSequencerClient(cc).NextStream(sctx)
	if !watchdog.Stop() && err == nil {
		err = fmt.Errorf("%w: opening took longer than %s", errStalled, s.c.attemptTimeout)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &streamConn{target: target, st: st, cancel: cancel, dead: make(chan struct{}), queue: sendq.New()}, nil
}

// useLocked makes conn the stream new calls go on.
func (s *Stream) useLocked(conn *streamConn) {
	s.conn = conn
	go s.receive(conn)
	go conn.sendLoop()
	go s.watch(conn)
}

// watch gives conn up once a call sent on it has waited longer than the
// attempt timeout for its answer: a paused or cut-off leader keeps its
// connection open. One watchdog a stream, not a timer a call: calls are
// many and short.
func (s *Stream) watch(conn *streamConn) {
	t := time.NewTicker(max(s.c.attemptTimeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-conn.dead:
			return
		case <-t.C:
		}
		late := monoNow() - int64(s.c.attemptTimeout)
		stalled := false
		s.mu.Lock()
		for _, call := range s.pending {
			if !call.answered && call.on.Load() == conn && call.sent.Load() < late {
				stalled = true
				break
			}
		}
		s.mu.Unlock()
		if stalled {
			conn.fail(fmt.Errorf("%w: no answer within %s", errStalled, s.c.attemptTimeout))
			return
		}
	}
}

// leaveRelay moves new calls to a direct stream to the leader when conn
// reached a follower that relays it (its header names the leader): one
// hop less. If the leader cannot be reached from here (a leader hint
// that resolves only inside a container network), or answers for another
// cluster, the relayed stream stays. Calls already sent on conn are
// answered there; it is closed once their attempts are over.
func (s *Stream) leaveRelay(conn *streamConn) {
	hdr, err := conn.st.Header()
	if err != nil {
		return
	}
	v := hdr.Get(api.LeaderAddrKey)
	if len(v) == 0 || v[0] == conn.target || s.c.pin(conn.target, hdr) != nil {
		return // not relayed, or by a node of another cluster: no hint to follow
	}
	leader := v[0]
	direct, err := s.openTo(leader)
	if err != nil {
		return
	}
	// A node that serves the stream itself sends its header at once.
	headers := make(chan metadata.MD, 1)
	go func() {
		h, err := direct.st.Header()
		if err != nil {
			h = nil
		}
		headers <- h
	}()
	t := time.NewTimer(s.c.attemptTimeout)
	defer t.Stop()
	select {
	case h := <-headers:
		if h == nil || len(h.Get(api.LeaderAddrKey)) > 0 || s.c.pin(leader, h) != nil {
			direct.cancel()
			return
		}
	case <-t.C:
		direct.cancel()
		return
	}
	s.mu.Lock()
	if s.closed || s.conn != conn {
		s.mu.Unlock()
		direct.cancel()
		return
	}
	s.useLocked(direct)
	s.leaving[conn] = true
	s.mu.Unlock()
	s.c.moveOn(conn.target, leader)
	time.AfterFunc(s.c.attemptTimeout, func() {
		conn.fail(errLeftRelay)
		s.mu.Lock()
		delete(s.leaving, conn)
		s.mu.Unlock()
	})
}

// monoNow is the time since monoBase on the monotonic clock, which a step
// of the wall clock does not move: a step back must not hold a call on a
// stalled stream, nor a step forward fail a healthy one.
func monoNow() int64 { return int64(time.Since(monoBase)) }

var monoBase = time.Now()

// errLeftRelay ends a relayed stream once calls moved to the leader.
var errLeftRelay = status.Error(codes.Unavailable, "moved to a direct stream to the leader")

// receive hands answers to their calls until the stream breaks, then
// follows the leader hint the server sent.
func (s *Stream) receive(conn *streamConn) {
	pinned := false
	for {
		resp, err := conn.st.Recv()
		foreign := false
		if err == nil && !pinned {
			// The header came before the first answer: the answers are
			// used only if it names the client's cluster.
			hdr, herr := conn.st.Header()
			if herr == nil {
				err = s.c.pin(conn.target, hdr)
			}
			pinned, foreign = err == nil, err != nil
		}
		if err != nil {
			conn.failOnce.Do(func() {}) // no fail after this point
			if conn.failErr != nil {
				err = conn.failErr
			}
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if !closed {
				var trailer metadata.MD
				if !foreign { // a foreign node's trailer names its own leader
					trailer = conn.st.Trailer()
				}
				s.c.leave(conn.target, trailer)
			}
			conn.err = err
			close(conn.dead)
			conn.cancel()
			return
		}
		conn.queue.AnsweredBy(resp)
		// calls[i] are the calls answer i answers: its id's, then its
		// also's; nil where the caller gave up, or was answered: a gap.
		s.mu.Lock()
		calls := make([][]*streamCall, len(resp.Answers))
		for i, a := range resp.Answers {
			calls[i] = make([]*streamCall, 1+len(a.Also))
			for j := range calls[i] {
				id := a.Id
				if j > 0 {
					id = a.Also[j-1]
				}
				if call := s.pending[id]; call != nil && !call.answered {
					call.answered = true
					calls[i][j] = call
				}
			}
		}
		s.mu.Unlock()
		for i, a := range resp.Answers {
			s.answer(a, calls[i])
		}
	}
}

// answer checks one answer, and hands each call it answers its IDs or
// why it has none, then wakes it. A joint answer's runs are split among
// its calls by its counts, which must be the calls' own.
func (s *Stream) answer(a *api.StreamAnswer, calls []*streamCall) {
	defer func() {
		for _, call := range calls {
			if call != nil {
				close(call.done)
			}
		}
	}()
	fail := func(err error) {
		for _, call := range calls {
			if call != nil {
				call.ids, call.err = nil, err
			}
		}
	}
	if a.Invalid != "" {
		fail(status.Error(codes.InvalidArgument, a.Invalid))
		return
	}
	if a.Code != 0 {
		fail(status.Error(codes.Code(a.Code), a.Message))
		return
	}
	for _, call := range calls {
		if call != nil && (call.seq != "") != a.Named {
			fail(fmt.Errorf("%w: an answer to a call of sequence %q is marked named=%t: a node that serves no named sequences on streams answers them from the default sequence (upgrade every node)",
				ErrBadResponse, call.seq, a.Named))
			return
		}
	}
	counts := a.Counts
	if len(calls) == 1 && len(counts) == 0 && calls[0] != nil {
		counts = []uint32{uint32(calls[0].n)} // answered alone
	}
	if len(counts) != len(calls) {
		fail(fmt.Errorf("%w: an answer for %d calls with %d counts", ErrBadResponse, len(calls), len(counts)))
		return
	}
	for i, n := range counts {
		if calls[i] != nil && int(n) != calls[i].n {
			fail(fmt.Errorf("%w: %d IDs for a call that asked for %d", ErrBadResponse, n, calls[i].n))
			return
		}
	}
	// One walk over the runs: a waiting call's IDs are taken (as many as
	// it asked for), a gap's are passed over by arithmetic, so what a
	// server claims costs time in its runs, never memory in its counts.
	runs := api.NewRunReader(a.Runs)
	for i, call := range calls {
		var err error
		if a.Named && i > 0 {
			// Each call's IDs are its own sequence's, in runs of their own.
			err = runs.Apart()
		}
		switch {
		case err != nil:
		case call != nil:
			call.ids, err = runs.Take(uint64(counts[i]), make([]uint64, 0, call.n))
		default:
			err = runs.Skip(uint64(counts[i]))
		}
		if err != nil {
			fail(fmt.Errorf("%w: %w", ErrBadResponse, err))
			return
		}
	}
	if !runs.Done() {
		fail(fmt.Errorf("%w: the runs hold more IDs than the counts", ErrBadResponse))
		return
	}
	for _, call := range calls {
		if call != nil && call.seq == "" {
			call.ids, call.err = s.c.accept(call.ids, call.floor)
		}
	}
}
