package client

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/sendq"
)

// The package's fakes and test helpers live here, so that each test file
// imports only what its own tests use.

// nextFunc answers a unary Next: a fake's handler.
type nextFunc = func(context.Context, *api.NextRequest) (*api.NextResponse, error)

// nextStream is a fake's side of one NextStream.
type nextStream = grpc.BidiStreamingServer[api.NextStreamRequest, api.NextStreamResponse]

// fakeSeq is a fake Sequencer server. next and layout answer the calls;
// a nil handler answers Unimplemented. The counters count every call.
type fakeSeq struct {
	api.UnimplementedSequencerServer
	next   nextFunc
	layout func(ctx context.Context) (*api.LayoutResponse, error)

	nextCalls   atomic.Int64
	layoutCalls atomic.Int64
}

func (f *fakeSeq) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	f.nextCalls.Add(1)
	if f.next == nil {
		return nil, status.Error(codes.Unimplemented, "fake: no Next handler")
	}
	return f.next(ctx, req)
}

func (f *fakeSeq) Layout(ctx context.Context, _ *api.LayoutRequest) (*api.LayoutResponse, error) {
	f.layoutCalls.Add(1)
	if f.layout == nil {
		return nil, status.Error(codes.Unimplemented, "fake: no Layout handler")
	}
	return f.layout(ctx)
}

// fakeAdmin is a fake Admin server that answers NodeStatus and Remove.
type fakeAdmin struct {
	api.UnimplementedAdminServer
	nodeStatus func(ctx context.Context) (*api.NodeInfo, error)
	remove     func(ctx context.Context, id string) error
	calls      atomic.Int64
}

func (f *fakeAdmin) Remove(ctx context.Context, req *api.RemoveRequest) (*api.RemoveResponse, error) {
	f.calls.Add(1)
	return &api.RemoveResponse{}, f.remove(ctx, req.Id)
}

func (f *fakeAdmin) NodeStatus(ctx context.Context, _ *api.NodeStatusRequest) (*api.NodeInfo, error) {
	f.calls.Add(1)
	return f.nodeStatus(ctx)
}

// mustListen listens on 127.0.0.1:0. Tests that must know a server's
// address before they build its handlers listen first and serve later.
func mustListen(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	return lis
}

// mustAdmin serves f on 127.0.0.1:0, stops it when the test ends and
// returns its address.
func mustAdmin(t *testing.T, f api.AdminServer) string {
	t.Helper()
	return mustServeOn(t, mustListen(t), func(s *grpc.Server) { api.RegisterAdminServer(s, f) })
}

// mustServeOn serves on lis the services that register adds, stops the
// server when the test ends and returns its address.
func mustServeOn(t testing.TB, lis net.Listener, register func(s *grpc.Server)) string {
	t.Helper()
	s := grpc.NewServer()
	register(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

// mustSequencer serves f, any of the fakes, and returns its address. f's
// handlers must be set before: the server reads them from its own
// goroutines.
func mustSequencer(t testing.TB, f api.SequencerServer) string {
	t.Helper()
	return mustSequencerOn(t, mustListen(t), f)
}

// mustSequencerOn serves f on lis and returns its address.
func mustSequencerOn(t testing.TB, lis net.Listener, f api.SequencerServer) string {
	t.Helper()
	return mustServeOn(t, lis, func(s *grpc.Server) { api.RegisterSequencerServer(s, f) })
}

// mustDeadAddr returns a local address on which nothing listens, so that
// connecting to it is refused.
func mustDeadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	return addr
}

// mustNew returns a unary client (the fakes serve unary Next) with fast
// backoff that is closed when the test ends. opts come after the defaults
// and may override them.
func mustNew(t *testing.T, addrs []string, opts ...Option) *Client {
	t.Helper()
	return mustClient(t, addrs, append([]Option{WithUnary(), WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)...)
}

// mustClient returns a client made with opts alone, closed when the test
// ends: for the tests of the default paths, which mustNew would not take.
func mustClient(t testing.TB, addrs []string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addrs, opts...)
	if err != nil {
		t.Fatalf("New(%v): %v", addrs, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testCtx returns a context that ends after d, so that no wait in a test is
// unbounded.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustNextN calls NextN and fails the test on error.
func mustNextN(ctx context.Context, t *testing.T, c *Client, n int) []uint64 {
	t.Helper()
	ids, err := c.NextN(ctx, n)
	if err != nil {
		t.Fatalf("NextN(%d): %v", n, err)
	}
	return ids
}

// serve answers every Next with runs.
func serve(runs ...*api.IDRun) nextFunc {
	return func(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		return &api.NextResponse{Runs: runs, Keyed: req.IdempotencyKey != ""}, nil
	}
}

// counter answers each Next with the next count IDs of a step-1 sequence
// starting at 1, like a well-behaved leader.
func counter() nextFunc {
	var mu sync.Mutex
	last := uint64(0)
	return func(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		r := &api.IDRun{First: last + 1, Count: req.Count, Step: 1}
		last += uint64(req.Count)
		return &api.NextResponse{Runs: []*api.IDRun{r}}, nil
	}
}

// fail answers every call with code, naming hint (if any) as the leader in
// the trailer the way server/errors.go does.
func fail(code codes.Code, hint string) nextFunc {
	return func(ctx context.Context, _ *api.NextRequest) (*api.NextResponse, error) {
		return nil, refuse(ctx, code, hint)
	}
}

// refuse is a fake's answer to a unary call it will not serve: code, and
// hint (if any) named as the leader in the trailer.
func refuse(ctx context.Context, code codes.Code, hint string) error {
	if hint != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(api.LeaderAddrKey, hint))
	}
	return status.Error(code, "fake failure")
}

// failOnce answers the first call with code and the rest with then.
func failOnce(code codes.Code, then nextFunc) nextFunc {
	var failed atomic.Bool
	return func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		if failed.CompareAndSwap(false, true) {
			return nil, status.Error(code, "fake failure once")
		}
		return then(ctx, req)
	}
}

// fakeStreamServer serves NextStream with serve, which gets each stream.
type fakeStreamServer struct {
	api.UnimplementedSequencerServer
	serve   func(nextStream) error
	streams atomic.Int64
}

func (f *fakeStreamServer) NextStream(st nextStream) error {
	f.streams.Add(1)
	return f.serve(st)
}

// answerInBatches reads k calls, however they come in messages (or what
// the most messages a stream has out carry), then answers them in
// reverse order, all in one message, with IDs from a shared counter,
// again and again.
func answerInBatches(k int) func(nextStream) error {
	var mu sync.Mutex
	last := uint64(0)
	return func(st nextStream) error {
		for {
			var calls []*api.StreamCall
			// A stream has at most sendq.MaxInFlight messages out: a node
			// that waited for more calls than those carry would wait for
			// good.
			for msgs := 0; len(calls) < k && msgs < sendq.MaxInFlight; msgs++ {
				r, err := st.Recv()
				if err != nil {
					return nil
				}
				calls = append(calls, r.Calls...)
			}
			resp := &api.NextStreamResponse{}
			for i := len(calls) - 1; i >= 0; i-- {
				mu.Lock()
				run := &api.IDRun{First: last + 1, Count: calls[i].Count, Step: 1}
				last += uint64(calls[i].Count)
				mu.Unlock()
				resp.Answers = append(resp.Answers, &api.StreamAnswer{Id: calls[i].Id, Runs: []*api.IDRun{run}})
			}
			if err := st.Send(resp); err != nil {
				return err
			}
		}
	}
}

// answerEach answers every call alone with answer.
func answerEach(st nextStream, answer func(*api.StreamCall) *api.StreamAnswer) error {
	for {
		r, err := st.Recv()
		if err != nil {
			return nil
		}
		for _, call := range r.Calls {
			if err := st.Send(&api.NextStreamResponse{Answers: []*api.StreamAnswer{answer(call)}}); err != nil {
				return err
			}
		}
	}
}

// inCluster answers like next, naming cluster id in the header as a node
// does; it records the cluster each call asked for.
func inCluster(id string, asked *[]string, next nextFunc) nextFunc {
	return func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		*asked = append(*asked, md.Get(api.ClusterIDKey)...)
		_ = grpc.SetHeader(ctx, metadata.Pairs(api.ClusterIDKey, id))
		return next(ctx, req)
	}
}

// clusterNode is a node of cluster id on both of the client's paths, unary
// Next and NextStream: it names id in every answer's header and hands out
// IDs counting up from first. With refuse it refuses, as a node does, a
// call that names another cluster; without, it answers anyway, as an older
// version would.
type clusterNode struct {
	api.UnimplementedSequencerServer
	id      string
	refuse  bool
	first   uint64
	calls   atomic.Int64 // Next calls and streams opened
	refused atomic.Int64 // of them, refused for naming another cluster
	mu      sync.Mutex
	next    uint64
}

func (f *clusterNode) check(ctx context.Context) error {
	f.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	for _, want := range md.Get(api.ClusterIDKey) {
		if f.refuse && want != f.id {
			f.refused.Add(1)
			return status.Errorf(codes.Unavailable, "this node belongs to another cluster than %s", want)
		}
	}
	return nil
}

func (f *clusterNode) run(n uint32) *api.IDRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == 0 {
		f.next = f.first
	}
	r := &api.IDRun{First: f.next, Count: n, Step: 1}
	f.next += uint64(n)
	return r
}

func (f *clusterNode) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(api.ClusterIDKey, f.id))
	return &api.NextResponse{Runs: []*api.IDRun{f.run(req.Count)}}, nil
}

func (f *clusterNode) NextStream(st nextStream) error {
	if err := f.check(st.Context()); err != nil {
		return err
	}
	if err := st.SetHeader(metadata.Pairs(api.ClusterIDKey, f.id)); err != nil {
		return err
	}
	return answerEach(st, func(call *api.StreamCall) *api.StreamAnswer {
		return &api.StreamAnswer{Id: call.Id, Runs: []*api.IDRun{f.run(call.Count)}}
	})
}

// wideSeq answers Layout with spec and group, and Next like next, but only
// to calls that ask for ticks, as a node of a 128-bit layout does.
func wideSeq(spec string, group uint64, next nextFunc) *fakeSeq {
	return &fakeSeq{
		layout: func(context.Context) (*api.LayoutResponse, error) {
			return &api.LayoutResponse{Layout: spec, Group: group}, nil
		},
		next: func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
			if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(api.TicksKey)) == 0 {
				return nil, status.Error(codes.FailedPrecondition, "fake: a 128-bit layout answers only calls for ticks")
			}
			return next(ctx, req)
		},
	}
}

// wideStreamSeq is wideSeq that also serves NextStream, answering every
// call with runs: the default client's path.
type wideStreamSeq struct {
	*fakeSeq
	runs []*api.IDRun
}

func (f wideStreamSeq) NextStream(st nextStream) error {
	return answerEach(st, func(c *api.StreamCall) *api.StreamAnswer { return &api.StreamAnswer{Id: c.Id, Runs: f.runs} })
}

// watchStream is a fake's side of one WatchWatermark.
type watchStream = grpc.ServerStreamingServer[api.WatermarkResponse]

// fakeSettle is a fake Sequencer server for the settled-order calls; its
// fakeSeq answers Layout and Next. A nil handler answers Unimplemented;
// calls counts every call and stream.
type fakeSettle struct {
	*fakeSeq
	reserve func(context.Context, *api.ReserveRequest) (*api.ReserveResponse, error)
	// settle answers Complete, Abandon and Extend; call names which.
	settle    func(ctx context.Context, call, handle string, ttlMs uint32) (*api.SettleResponse, error)
	watermark func(context.Context) (*api.WatermarkResponse, error)
	watch     func(*api.WatchRequest, watchStream) error
	calls     atomic.Int64
}

var errNoHandler = status.Error(codes.Unimplemented, "fake: no handler")

func (f *fakeSettle) Reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	f.calls.Add(1)
	if f.reserve == nil {
		return nil, errNoHandler
	}
	return f.reserve(ctx, req)
}

func (f *fakeSettle) Complete(ctx context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return f.settleCall(ctx, "Complete", req.Handle, 0)
}

func (f *fakeSettle) Abandon(ctx context.Context, req *api.HandleRequest) (*api.SettleResponse, error) {
	return f.settleCall(ctx, "Abandon", req.Handle, 0)
}

func (f *fakeSettle) Extend(ctx context.Context, req *api.ExtendRequest) (*api.SettleResponse, error) {
	return f.settleCall(ctx, "Extend", req.Handle, req.TtlMs)
}

func (f *fakeSettle) settleCall(ctx context.Context, call, handle string, ttlMs uint32) (*api.SettleResponse, error) {
	f.calls.Add(1)
	if f.settle == nil {
		return nil, errNoHandler
	}
	return f.settle(ctx, call, handle, ttlMs)
}

func (f *fakeSettle) Watermark(ctx context.Context, _ *api.WatermarkRequest) (*api.WatermarkResponse, error) {
	f.calls.Add(1)
	if f.watermark == nil {
		return nil, errNoHandler
	}
	return f.watermark(ctx)
}

func (f *fakeSettle) WatchWatermark(req *api.WatchRequest, st watchStream) error {
	f.calls.Add(1)
	if f.watch == nil {
		return errNoHandler
	}
	return f.watch(req, st)
}

// settleNode is a fakeSettle with a fakeSeq that answers nothing.
func settleNode() *fakeSettle { return &fakeSettle{fakeSeq: &fakeSeq{}} }

// mark is a watermark answer of id and tick.
func mark(id, tick uint64) *api.WatermarkResponse {
	return &api.WatermarkResponse{Watermark: id, WatermarkTick: tick}
}

// sendMarks sends each of marks on st, then holds the stream open until
// the client ends it.
func sendMarks(st watchStream, marks ...*api.WatermarkResponse) error {
	for _, m := range marks {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return nil
}

// refuseStream ends a stream as a node that does not lead does: code, and
// hint (if any) named as the leader in the trailer.
func refuseStream(st watchStream, code codes.Code, hint string) error {
	if hint != "" {
		st.SetTrailer(metadata.Pairs(api.LeaderAddrKey, hint))
	}
	return status.Error(code, "fake stream failure")
}

// fakeSequences is a node with named sequences, on the Sequencer and
// Admin services: Next answers by the request's sequence from next (one
// not there is NotFound, as a node answers for an unknown sequence), and
// the Admin calls with the handlers (nil: Unimplemented). It records the
// sequence and whether ticks were asked for of every Next, and counts
// every call.
type fakeSequences struct {
	api.UnimplementedSequencerServer
	api.UnimplementedAdminServer
	next     map[string]nextFunc
	describe func(ctx context.Context, name string) (*api.SequenceInfo, error)
	create   func(ctx context.Context, req *api.CreateSequenceRequest) (*api.SequenceInfo, error)
	drop     func(ctx context.Context, name string) (*api.SequenceInfo, error)
	list     func(ctx context.Context) (*api.ListSequencesResponse, error)

	mu    sync.Mutex
	asked []string // "name" of each Next, "name+ticks" when it asked for ticks

	nextCalls, describeCalls, createCalls, dropCalls, layoutCalls atomic.Int64
}

// noSequence is the NotFound a node answers for an unknown sequence.
func noSequence(name string) error {
	return status.Errorf(codes.NotFound, "no sequence %q: create it with ordo sequence create", name)
}

func (f *fakeSequences) Next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	f.nextCalls.Add(1)
	asked := req.Sequence
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(api.TicksKey)) > 0 {
		asked += "+ticks"
	}
	f.mu.Lock()
	f.asked = append(f.asked, asked)
	f.mu.Unlock()
	next, ok := f.next[req.Sequence]
	if !ok {
		return nil, noSequence(req.Sequence)
	}
	resp, err := next(ctx, req)
	if resp != nil && resp.Sequence == "" {
		resp.Sequence = req.Sequence // as a node that serves named sequences does
	}
	return resp, err
}

// askedFor returns what every Next asked for so far.
func (f *fakeSequences) askedFor() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func (f *fakeSequences) Layout(context.Context, *api.LayoutRequest) (*api.LayoutResponse, error) {
	f.layoutCalls.Add(1)
	return &api.LayoutResponse{Layout: "default", Group: 1}, nil
}

func (f *fakeSequences) DescribeSequence(ctx context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	f.describeCalls.Add(1)
	if f.describe == nil {
		return nil, errNoHandler
	}
	return f.describe(ctx, req.Name)
}

func (f *fakeSequences) CreateSequence(ctx context.Context, req *api.CreateSequenceRequest) (*api.SequenceInfo, error) {
	f.createCalls.Add(1)
	if f.create == nil {
		return nil, errNoHandler
	}
	return f.create(ctx, req)
}

func (f *fakeSequences) DropSequence(ctx context.Context, req *api.SequenceRequest) (*api.SequenceInfo, error) {
	f.dropCalls.Add(1)
	if f.drop == nil {
		return nil, errNoHandler
	}
	return f.drop(ctx, req.Name)
}

func (f *fakeSequences) ListSequences(ctx context.Context, _ *api.ListSequencesRequest) (*api.ListSequencesResponse, error) {
	if f.list == nil {
		return nil, errNoHandler
	}
	return f.list(ctx)
}

// mustServeSequences serves f's Sequencer and Admin on lis and returns
// its address.
func mustServeSequences(t *testing.T, lis net.Listener, f *fakeSequences) string {
	t.Helper()
	return mustServeOn(t, lis, func(s *grpc.Server) {
		api.RegisterSequencerServer(s, f)
		api.RegisterAdminServer(s, f)
	})
}

// describes answers DescribeSequence from infos, and NotFound for a name
// not there.
func describes(infos ...*api.SequenceInfo) func(context.Context, string) (*api.SequenceInfo, error) {
	return func(_ context.Context, name string) (*api.SequenceInfo, error) {
		for _, info := range infos {
			if info.Name == name {
				return info, nil
			}
		}
		return nil, noSequence(name)
	}
}

// keyedLog is a fake leader that keeps idempotency keys as the cluster
// does: per caller, the first answer to a key is the answer to every call
// with it, and the key with another count or sequence is refused. It
// records what each attempt carried.
type keyedLog struct {
	// loseFirst makes it commit the first attempt of each key and then
	// answer Unavailable, as a leader that died before answering.
	loseFirst bool

	mu       sync.Mutex
	last     map[string]uint64 // per sequence
	answers  map[string]keyedAnswer
	attempts []keyedAttempt
}

type keyedAnswer struct {
	seq   string
	count uint32
	first uint64
}

// keyedAttempt is what one attempt carried.
type keyedAttempt struct{ key, caller, seq string }

func (l *keyedLog) next(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	caller := ""
	if v := md.Get(api.CallerKey); len(v) > 0 {
		caller = v[0]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.answers = map[string]uint64{}, map[string]keyedAnswer{}
	}
	l.attempts = append(l.attempts, keyedAttempt{req.IdempotencyKey, caller, req.Sequence})
	run := func(first uint64) *api.NextResponse {
		return &api.NextResponse{Runs: []*api.IDRun{{First: first, Count: req.Count, Step: 1}}, Sequence: req.Sequence, Keyed: req.IdempotencyKey != ""}
	}
	if req.IdempotencyKey == "" {
		first := l.last[req.Sequence] + 1
		l.last[req.Sequence] += uint64(req.Count)
		return run(first), nil
	}
	scoped := caller + "\x00" + req.IdempotencyKey
	if a, ok := l.answers[scoped]; ok {
		if a.seq != req.Sequence || a.count != req.Count {
			return nil, status.Errorf(codes.FailedPrecondition, "idempotency key reused with other arguments: key %q first asked for %d IDs of sequence %q", req.IdempotencyKey, a.count, a.seq)
		}
		return run(a.first), nil
	}
	first := l.last[req.Sequence] + 1
	l.last[req.Sequence] += uint64(req.Count)
	l.answers[scoped] = keyedAnswer{req.Sequence, req.Count, first}
	if l.loseFirst {
		return nil, status.Error(codes.Unavailable, "fake: committed, then lost the answer")
	}
	return run(first), nil
}

// seen returns every attempt so far.
func (l *keyedLog) seen() []keyedAttempt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]keyedAttempt(nil), l.attempts...)
}

// keyedNode serves a keyedLog on unary Next, and NextStream with a
// counter of its own, counting the streams opened.
type keyedNode struct {
	*fakeSeq
	log     *keyedLog
	streams atomic.Int64
}

func newKeyedNode(loseFirst bool) *keyedNode {
	l := &keyedLog{loseFirst: loseFirst}
	return &keyedNode{fakeSeq: &fakeSeq{next: l.next}, log: l}
}

func (f *keyedNode) NextStream(st nextStream) error {
	f.streams.Add(1)
	var last uint64
	return answerEach(st, func(c *api.StreamCall) *api.StreamAnswer {
		last += uint64(c.Count)
		return &api.StreamAnswer{Id: c.Id, Runs: []*api.IDRun{{First: 1_000_000 + last - uint64(c.Count) + 1, Count: c.Count, Step: 1}}}
	})
}
