// Package client is Ordo's Go client. It finds the leader by itself,
// follows the leader hint that every node sends, retries with capped
// backoff until the caller's context ends, and checks what it returns: a
// call never returns an ID that is not above every ID returned by calls
// that completed before it started.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/grpcerr"
	"github.com/seed-e8569b35/ordo/layout"
)

// Errors returned by the client.
var (
	// ErrNoAddrs means New was given no addresses.
	ErrNoAddrs = errors.New("no server addresses")
	// ErrBadCount means a call was asked for a count no request can
	// carry: fewer than one ID, or more than 32 bits hold.
	ErrBadCount = errors.New("count out of range")
	// ErrBadResponse means a server answered with IDs that break the
	// guarantee (wrong count, not increasing, not above IDs already
	// returned). The IDs are withheld; this is a server bug.
	ErrBadResponse = errors.New("bad response from server")
	// ErrClosed means the client was closed.
	ErrClosed = errors.New("client closed")
	// ErrBadOption means an option's value is out of range.
	ErrBadOption = errors.New("bad client option")
	// ErrOtherCluster means a node answered for another cluster than the
	// one the client is pinned to (WithClusterID, or the first answer's):
	// its answer is dropped and the client moves on.
	ErrOtherCluster = errors.New("answer from another cluster")
	// ErrBadTTL means a reservation's TTL is negative or does not fit the
	// request (32-bit milliseconds).
	ErrBadTTL = errors.New("bad reservation TTL")
	// ErrExpired means a reservation expired before Complete or Extend:
	// the settled mark has passed its IDs, so they must not be published.
	// It wraps the server's FailedPrecondition.
	ErrExpired = errors.New("reservation expired: do not publish its IDs")
	// ErrAbandoned means a reservation was abandoned before Complete or
	// Extend: its IDs must not be published. It wraps the server's
	// FailedPrecondition.
	ErrAbandoned = errors.New("reservation abandoned: do not publish its IDs")
)

// Defaults for the options.
const (
	DefaultAttemptTimeout = 2 * time.Second
	DefaultMinBackoff     = 10 * time.Millisecond
	DefaultMaxBackoff     = 500 * time.Millisecond
)

// Option configures a Client.
type Option func(*Client)

// WithRetryNotify has the client tell notify of every failed attempt it
// is about to retry (after a backoff): the node's address ("" when no
// node was reached) and why, so that a caller that waits long, as a
// command line tool does, can say so: no leader, a node that does not
// answer. notify must not block.
func WithRetryNotify(notify func(addr string, err error)) Option {
	return func(c *Client) { c.retrying = notify }
}

// GaveUp is a call that was still failing when its context ended: it
// says first why its last attempt failed, and where, then that the time
// ran out. errors.Is finds both the context's error and the last
// attempt's (whose gRPC code status.Code reports).
type GaveUp struct {
	// Addr is the node the last attempt asked ("" when none was reached).
	Addr string
	// Last is why the last attempt failed; End, the context's error.
	Last, End error
}

func (e *GaveUp) Error() string {
	why := grpcerr.Describe(e.Last)
	if e.Addr != "" {
		why = e.Addr + ": " + why
	}
	return fmt.Sprintf("%s; still failing when the call's time ran out (%v)", why, e.End)
}

func (e *GaveUp) Unwrap() []error { return []error{e.End, e.Last} }

// retried tells WithRetryNotify's function of a failed attempt retried.
func (c *Client) retried(addr string, err error) {
	if c.retrying != nil {
		c.retrying(addr, err)
	}
}

// WithAttemptTimeout bounds one RPC attempt, so that a call to a node that
// hangs (paused, partitioned) moves on to another node.
func WithAttemptTimeout(d time.Duration) Option { return func(c *Client) { c.attemptTimeout = d } }

// WithBackoff sets the first and the largest pause between attempts.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) { c.minBackoff, c.maxBackoff = min, max }
}

// WithUnary makes every Next and NextN call one unary request, as a client
// without this package calls Ordo: for a proxy that does not carry gRPC
// streams, and for measuring. By default calls share one pipelined stream
// to the leader (see Stream), which is several times faster under
// concurrency.
func WithUnary() Option { return func(c *Client) { c.unary.Store(true) } }

// WithCoalescing makes concurrent Next and NextN calls share requests, as
// PD's TSO client does: calls that arrive while inFlight requests are out
// wait and then go together in one request, and each gets its own
// contiguous part of the reply. It trades a little latency for far fewer
// requests when many goroutines ask for few IDs each.
func WithCoalescing(inFlight int) Option {
	return func(c *Client) {
		c.coalesceInFlight = inFlight
		if inFlight == 0 {
			c.coalesceInFlight = -1 // refused by New: 0 would mean off
		}
	}
}

// WithDialOptions adds gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *Client) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithTLS makes the client speak TLS with cfg: the cluster CA in RootCAs,
// and a client certificate, which every node of a TLS cluster requires
// (see secure.TLS.ClientConfig).
func WithTLS(cfg *tls.Config) Option {
	return WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
}

// WithClusterID pins the client to the cluster with this id (the id the
// nodes log and `ordo status` shows): an answer from a node of another
// cluster, reached through a stale address or leader hint, is never
// returned. Without it, the client pins the cluster of the first answer.
func WithClusterID(id string) Option { return func(c *Client) { c.cluster = id } }

// WithAdminToken sends token with every call, as "authorization: Bearer
// <token>": a node grants admin calls (join, remove, transfer-leader) to
// whoever presents its admin token. Over plaintext the token can be read
// on the wire; use it so only on loopback.
func WithAdminToken(token string) Option {
	return WithDialOptions(grpc.WithPerRPCCredentials(bearer(token)))
}

// bearer is a token sent as per-call credentials.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false so that the token also works on a
// plaintext development cluster on loopback.
func (bearer) RequireTransportSecurity() bool { return false }

// Client hands out IDs from an Ordo cluster. It is safe for concurrent use.
type Client struct {
	addrs          []string
	attemptTimeout time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	// retrying is told of every failed attempt the client retries
	// (WithRetryNotify); nil: nobody.
	retrying func(addr string, err error)
	dialOpts []grpc.DialOption
	// coalesceInFlight > 0 turns coalescing on (WithCoalescing).
	coalesceInFlight int
	// idempotent keys every call for IDs (WithIdempotentRetries).
	idempotent bool
	// caller is the name WithCaller gave, if callerSet.
	caller    string
	callerSet bool

	coalescer *coalescer // nil unless WithCoalescing
	// stream carries Next and NextN unless unary is set: by WithUnary, or
	// on finding a server (or proxy) that does not serve NextStream.
	stream *Stream
	unary  atomic.Bool
	// tickStream and tickCoalescer are stream and coalescer for the calls
	// of a 128-bit layout (wide.go), which ask for ticks (api.TicksKey):
	// a call's width is fixed by the stream or request it goes on, never
	// by state another call may change under it.
	tickStream    *Stream
	tickCoalescer *coalescer
	// seqStream carries named sequences' unkeyed calls of 64-bit IDs: on
	// a stream of their own, a dense sequence's commit never holds up
	// the default sequence's answers.
	seqStream *Stream
	// wide is the cluster's 128-bit layout and group once a 128-bit call
	// learned them; nil before, and for good on a 64-bit cluster.
	wide atomic.Pointer[wideLayout]

	// returned is the highest ID returned so far; every call reads it
	// and most raise it, so it is an atomic, not under mu.
	returned atomic.Uint64
	// mark is the highest settled mark reported so far (settle.go): no
	// call reports a lower one.
	mark atomic.Pointer[Mark]
	// sequences holds a *sequenceState for each named sequence a handle
	// was made for (sequence.go): its floor, and its kind once known.
	sequences sync.Map

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	leader string // best guess; "" when unknown
	// cluster is the id of the cluster this client is pinned to; "" until
	// the first answer that names one (see WithClusterID).
	cluster string
	next    int // round-robin position when no leader is known
	closed  bool
}

// New returns a client for the cluster whose nodes' gRPC addresses are
// addrs. It connects lazily.
func New(addrs []string, opts ...Option) (*Client, error) {
	if len(addrs) == 0 {
		return nil, ErrNoAddrs
	}
	c := &Client{
		addrs:          append([]string(nil), addrs...),
		attemptTimeout: DefaultAttemptTimeout,
		minBackoff:     DefaultMinBackoff,
		maxBackoff:     DefaultMaxBackoff,
		dialOpts:       append(api.DialWindows(), grpc.WithTransportCredentials(insecure.NewCredentials())),
		conns:          map[string]*grpc.ClientConn{},
	}
	for _, o := range opts {
		o(c)
	}
	if c.callerSet {
		if err := CheckCaller(c.caller); err != nil {
			return nil, err
		}
		c.dialOpts = append(c.dialOpts, callerOption(c.caller))
	}
	if c.coalesceInFlight > 0 {
		c.coalescer = &coalescer{c: c, maxInFlight: c.coalesceInFlight}
		c.tickCoalescer = &coalescer{c: c, maxInFlight: c.coalesceInFlight, ticks: true}
	}
	c.stream = c.OpenStream()
	c.tickStream = c.OpenStream()
	c.tickStream.ticks = true
	c.seqStream = c.OpenStream()
	switch {
	case c.coalesceInFlight < 0:
		return nil, fmt.Errorf("%w: %d requests in flight, want at least 1", ErrBadOption, c.coalesceInFlight)
	case c.attemptTimeout <= 0:
		return nil, fmt.Errorf("%w: attempt timeout %s, want > 0", ErrBadOption, c.attemptTimeout)
	case c.minBackoff <= 0 || c.maxBackoff < c.minBackoff:
		return nil, fmt.Errorf("%w: backoff %s to %s, want 0 < min <= max", ErrBadOption, c.minBackoff, c.maxBackoff)
	}
	return c, nil
}

// Close closes every connection.
func (c *Client) Close() error {
	c.stream.Close()
	c.tickStream.Close()
	c.seqStream.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for _, conn := range c.conns {
		errs = append(errs, conn.Close())
	}
	c.conns = nil
	return errors.Join(errs...)
}

// Next returns one ID.
func (c *Client) Next(ctx context.Context) (uint64, error) { return one(c.NextN(ctx, 1)) }

// one returns the ID of a one-ID call.
func one(ids []uint64, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// checkCount refuses a count no request can carry.
func checkCount(n int) error {
	if n < 1 || uint64(n) > math.MaxUint32 {
		return fmt.Errorf("%w: %d, want 1 to %d", ErrBadCount, n, uint32(math.MaxUint32))
	}
	return nil
}

// floor is the highest ID returned so far: a call that starts now must
// return only IDs above it.
func (c *Client) floor() uint64 { return c.returned.Load() }

// NextN returns n IDs, strictly increasing and contiguous in the cluster's
// order. It retries on other nodes until ctx ends; an error that retrying
// cannot mend (a bad count, for example) returns at once.
//
// By default concurrent calls share one pipelined stream to the leader
// (see Stream); with WithCoalescing they share unary requests, and with
// WithUnary each is a request of its own. Each call still gets its own
// contiguous IDs, checked against its own floor. A keyed call
// (WithIdempotencyKey, WithIdempotentRetries) is always one unary request.
//
// A cluster of a 128-bit layout refuses these calls (FailedPrecondition);
// once NextUUIDs or NextULIDs has learned the layout, they return
// layout.ErrWrongWidth without asking.
func (c *Client) NextN(ctx context.Context, n int) ([]uint64, error) {
	if err := c.checkNarrow(); err != nil {
		return nil, err
	}
	return c.nextN(ctx, n, c.stream, c.coalescer)
}

// nextN is NextN on stream, or coalescer when set (WithCoalescing), or
// unary: of 64-bit IDs, or of ticks when they are the tick lane.
func (c *Client) nextN(ctx context.Context, n int, stream *Stream, coalescer *coalescer) ([]uint64, error) {
	if err := checkCount(n); err != nil {
		return nil, err
	}
	ctx, k, err := c.keyed(ctx)
	if err != nil {
		return nil, err
	}
	if k.key != "" {
		// Keyed: unary, on the retry path, checked against the floor
		// of its first attempt.
		floor := c.floor()
		ids, err := c.fetch(ctx, n, stream.ticks)
		if err != nil {
			return nil, err
		}
		return acceptKeyed(&c.returned, ids, floor, k)
	}
	if coalescer == nil && !c.unary.Load() {
		ids, err := stream.nextN(ctx, n)
		if status.Code(err) != codes.Unimplemented {
			return ids, err
		}
		// A server or proxy without NextStream: unary from now on.
		c.unary.Store(true)
	}
	floor := c.floor()
	if coalescer != nil {
		return coalescer.nextN(ctx, n, floor)
	}
	ids, err := c.fetch(ctx, n, stream.ticks)
	if err != nil {
		return nil, err
	}
	return c.accept(ids, floor)
}

// accept checks that ids are above floor, the highest ID returned when
// the call started, and records them as returned.
func (c *Client) accept(ids []uint64, floor uint64) ([]uint64, error) {
	return acceptAbove(&c.returned, ids, floor)
}

// acceptAbove checks that ids are above floor, which the call read from
// returned when it started, and raises returned to the last of them: the
// check of accept, for the default sequence's floor or a named one's.
func acceptAbove(returned *atomic.Uint64, ids []uint64, floor uint64) ([]uint64, error) {
	if ids[0] <= floor {
		return nil, fmt.Errorf("%w: first ID %d is not above %d, already returned", ErrBadResponse, ids[0], floor)
	}
	last := ids[len(ids)-1]
	for old := returned.Load(); old < last && !returned.CompareAndSwap(old, last); old = returned.Load() {
	}
	return ids, nil
}

// fetch asks the cluster for n IDs, or n ticks of a 128-bit layout when
// ticks is set, with failover and retries, and checks the response's
// shape.
func (c *Client) fetch(ctx context.Context, n int, ticks bool) ([]uint64, error) {
	return c.fetchFrom(ctx, "", n, ticks)
}

// fetchFrom is fetch from the named sequence, or the default one when
// sequence is "".
func (c *Client) fetchFrom(ctx context.Context, sequence string, n int, ticks bool) ([]uint64, error) {
	var resp *api.NextResponse
	req := &api.NextRequest{Count: uint32(n), Sequence: sequence, IdempotencyKey: keyOf(ctx)}
	err := c.retry(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = api.NewSequencerClient(conn).Next(api.WithTicks(ctx, ticks), req, opts...)
		return err
	})
	if err != nil {
		return nil, keyErr(err)
	}
	if req.IdempotencyKey != "" && !resp.Keyed {
		return nil, fmt.Errorf("%w: the answer to a keyed call is not marked keyed: the node does not read idempotency keys, and a retry would take new IDs (upgrade every node)", ErrBadResponse)
	}
	if resp.Sequence != sequence {
		return nil, fmt.Errorf("%w: an answer to a call of sequence %q names sequence %q: the node serves no named sequences (upgrade every node)", ErrBadResponse, sequence, resp.Sequence)
	}
	ids, err := expand(resp.Runs, n)
	if err != nil {
		return nil, err
	}
	c.noteLeader(resp.LeaderAddr)
	return ids, nil
}

// noteLeader takes the leader an answer named, if any, as the leader
// guess, so the next call goes there directly.
func (c *Client) noteLeader(addr string) {
	if addr == "" {
		return
	}
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

// expand turns the runs that answer one call of n IDs into the IDs,
// checked as every answer is (api.ExpandRuns); a failed check is the
// server's bug, so it is ErrBadResponse.
func expand(runs []*api.IDRun, n int) ([]uint64, error) {
	ids, err := api.ExpandRuns(runs, uint64(n))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	return ids, nil
}

// Layout asks the cluster for its layout and group.
func (c *Client) Layout(ctx context.Context) (layout.Layout, uint64, error) {
	var resp *api.LayoutResponse
	err := c.retry(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = api.NewSequencerClient(conn).Layout(ctx, &api.LayoutRequest{}, opts...)
		return err
	})
	if err != nil {
		return layout.Layout{}, 0, err
	}
	l, err := layout.Parse(resp.Layout)
	if err != nil {
		return layout.Layout{}, 0, fmt.Errorf("%w: %v", ErrBadResponse, err)
	}
	return l, resp.Group, nil
}

// Admin runs an admin call with the same failover and retries as NextN.
// fn must pass opts to the call; they carry the leader hint back. Admin
// calls are forwarded to the leader by whichever node gets them.
func (c *Client) Admin(ctx context.Context, fn func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error) error {
	return c.retry(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		return fn(ctx, api.NewAdminClient(conn), opts...)
	})
}

// Remove removes member id from the cluster, with Admin's retries. An
// attempt whose answer is lost (a timeout, a leader change) may have
// removed id, so a later attempt that finds id is no member (NotFound)
// has done what was asked; on the first attempt NotFound is the error: id
// was no member.
func (c *Client) Remove(ctx context.Context, id string) error {
	attempts := 0
	return c.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
		attempts++
		_, err := a.Remove(ctx, &api.RemoveRequest{Id: id}, opts...)
		if attempts > 1 && status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	})
}

// Decode splits an ID made with layout spec (a preset name or a custom
// spec, see layout.Parse) into its time, group and sequence. It needs no
// server. A 128-bit layout's IDs do not fit a uint64: for those it returns
// layout.ErrWrongWidth (DecodeWide reads them).
func Decode(spec string, id uint64) (layout.Parts, error) {
	l, err := layout.Parse(spec)
	if err != nil {
		return layout.Parts{}, err
	}
	if l.Wide() {
		return layout.Parts{}, fmt.Errorf("layout %s makes 128-bit IDs, not a uint64: call DecodeWide: %w", l, layout.ErrWrongWidth)
	}
	return l.Decode(id), nil
}

// DecodeWide is Decode for the canonical text of a UUIDv7 or ULID, under
// layout spec uuidv7 or ulid; as layout.ParseWide, it takes either case,
// and a UUID also without hyphens. Any UUIDv7 or ULID decodes, but only
// in Ordo's are the group and counter what they say (see
// layout.DecodeWide). A 64-bit layout gives layout.ErrWrongWidth.
func DecodeWide(spec, text string) (layout.Parts, error) {
	l, err := layout.Parse(spec)
	if err != nil {
		return layout.Parts{}, err
	}
	if !l.Wide() {
		return layout.Parts{}, fmt.Errorf("layout %s makes 64-bit IDs: call Decode: %w", l, layout.ErrWrongWidth)
	}
	id, err := l.ParseWide(text)
	if err != nil {
		return layout.Parts{}, err
	}
	return l.DecodeWide(id)
}

type call func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error

// retry runs fn against the leader guess until it succeeds, fails in a way
// retrying cannot mend, or ctx ends. Each attempt is bounded by the
// attempt timeout, so a node that hangs is left behind.
func (c *Client) retry(ctx context.Context, fn call) error {
	return c.follow(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn, md *sent) error {
		ctx, cancel := context.WithTimeout(ctx, c.attemptTimeout)
		defer cancel()
		return fn(ctx, conn, grpc.Header(&md.header), grpc.Trailer(&md.trailer))
	})
}

// sent is the metadata a node sent with its answer: the header names its
// cluster, and the trailer of a refusal may name the leader.
type sent struct{ header, trailer metadata.MD }

// attemptFunc makes one attempt at the node at addr, on conn, bounding it
// itself, and records in md what the node sent.
type attemptFunc func(ctx context.Context, addr string, conn *grpc.ClientConn, md *sent) error

// follow runs try against the leader guess until it succeeds, fails in a
// way retrying cannot mend, or ctx ends: it follows the leader hint a
// refusal names, moves on to the next address without one, and backs off
// between attempts. Unary calls (retry) and the watermark stream share it.
func (c *Client) follow(ctx context.Context, try attemptFunc) error {
	backoff := c.minBackoff
	for attempt := 0; ; attempt++ {
		addr := c.target()
		conn, err := c.conn(addr)
		if err != nil {
			return err
		}
		var md sent
		err = try(c.clusterCtx(ctx), addr, conn, &md)
		if err == nil {
			if err = c.pin(addr, md.header); err == nil {
				return nil
			}
			// The answer is dropped: retried elsewhere, below.
		}
		if ctx.Err() != nil {
			return &GaveUp{Addr: addr, Last: err, End: ctx.Err()}
		}
		if !retryable(err) {
			return err
		}
		if c.leave(addr, md.trailer) && attempt == 0 {
			continue // a fresh hint: go there at once
		}
		c.retried(addr, err)
		if pause(ctx, backoff) != nil {
			return &GaveUp{Addr: addr, Last: err, End: ctx.Err()}
		}
		backoff = min(2*backoff, c.maxBackoff)
	}
}

// leave drops addr as the leader guess after an attempt there failed,
// taking the leader hint its trailer names, if any; it reports whether
// there was one.
func (c *Client) leave(addr string, trailer metadata.MD) bool {
	hint := ""
	if v := trailer.Get(api.LeaderAddrKey); len(v) > 0 && v[0] != addr {
		hint = v[0]
	}
	c.moveOn(addr, hint)
	return hint != ""
}

// pause waits a random time up to backoff, or until ctx ends (its error).
// Full jitter keeps many clients from retrying in step.
func pause(ctx context.Context, backoff time.Duration) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryable reports whether another attempt, perhaps at another node, may
// succeed. A certificate refused, by this side (x509) or by the node (a
// TLS alert), is reported as Unavailable, but no retry mends it, so it
// fails at once; a handshake cut short by a node going down is retried.
func retryable(err error) bool {
	if st, ok := status.FromError(err); ok {
		// This side's verdict, or the node's (a TLS alert).
		if msg := st.Message(); strings.Contains(msg, "x509: ") || strings.Contains(msg, "remote error: tls:") {
			return false
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled, codes.ResourceExhausted:
		return true
	}
	return false
}

// clusterCtx names the cluster the client is pinned to, if any, so that a
// node of another cluster refuses the call.
func (c *Client) clusterCtx(ctx context.Context) context.Context {
	c.mu.Lock()
	id := c.cluster
	c.mu.Unlock()
	if id == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, api.ClusterIDKey, id)
}

// pin checks the cluster a node at addr named in its answer's header:
// the first one named pins the client, and another is ErrOtherCluster. A
// node that names none (an older version) is taken at its word.
func (c *Client) pin(addr string, header metadata.MD) error {
	v := header.Get(api.ClusterIDKey)
	if len(v) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cluster == "" {
		c.cluster = v[0]
	}
	if v[0] != c.cluster {
		return fmt.Errorf("%w: %s answered for cluster %s, the client's is %s", ErrOtherCluster, addr, v[0], c.cluster)
	}
	return nil
}

// ClusterID returns the id of the cluster the client is pinned to; "" until
// the first answer unless WithClusterID gave one.
func (c *Client) ClusterID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cluster
}

func (c *Client) target() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leader != "" {
		return c.leader
	}
	a := c.addrs[c.next%len(c.addrs)]
	return a
}

// moveOn drops a leader guess that failed and takes the hint if any,
// else the next address in turn.
func (c *Client) moveOn(failed, hint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hint != "" {
		c.leader = hint
		return
	}
	if c.leader == failed || c.leader == "" {
		c.leader = ""
		c.next++
	}
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if conn, ok := c.conns[addr]; ok {
		return conn, nil
	}
	conn, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c.conns[addr] = conn
	return conn, nil
}
