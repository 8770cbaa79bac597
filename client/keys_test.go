package client

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// A key travels on every attempt, the same after Unavailable, and the
// retry gets the first answer's IDs, which the cluster committed.
func TestKeyTravelsOnEveryAttempt(t *testing.T) {
	node := newKeyedNode(true)
	c := mustNew(t, []string{mustSequencer(t, node)})
	ctx := testCtx(t, 5*time.Second)
	ids, err := c.NextN(WithIdempotencyKey(ctx, "order-17"), 3)
	if err != nil {
		t.Fatalf("keyed NextN: %v", err)
	}
	if !slices.Equal(ids, []uint64{1, 2, 3}) {
		t.Fatalf("keyed NextN = %v, want the first answer [1 2 3]", ids)
	}
	seen := node.log.seen()
	if len(seen) != 2 {
		t.Fatalf("%d attempts, want 2 (one lost, one retry): %+v", len(seen), seen)
	}
	for i, a := range seen {
		if a.key != "order-17" {
			t.Errorf("attempt %d carried key %q, want order-17", i, a.key)
		}
	}
	// A named sequence's keyed call carries its key and sequence too.
	seqIDs, err := c.Sequence("orders").NextN(WithIdempotencyKey(ctx, "order-18"), 2)
	if err != nil || !slices.Equal(seqIDs, []uint64{1, 2}) {
		t.Fatalf("keyed Sequence.NextN = %v, %v; want [1 2]", seqIDs, err)
	}
	for i, a := range node.log.seen()[2:] {
		if a.key != "order-18" || a.seq != "orders" {
			t.Errorf("sequence attempt %d carried key %q of %q, want order-18 of orders", i, a.key, a.seq)
		}
	}
}

// WithIdempotentRetries keys each call with a fresh key, the same on all
// of its attempts and different across calls, so retries burn no IDs.
func TestIdempotentRetriesKeyEachCall(t *testing.T) {
	node := newKeyedNode(true)
	c := mustNew(t, []string{mustSequencer(t, node)}, WithIdempotentRetries())
	ctx := testCtx(t, 5*time.Second)
	for want := uint64(1); want <= 3; want++ {
		id, err := c.Next(ctx)
		if err != nil || id != want {
			t.Fatalf("call %d: Next = %d, %v; want %d (no ID burned by the retry)", want, id, err, want)
		}
	}
	seen := node.log.seen()
	if len(seen) != 6 {
		t.Fatalf("%d attempts, want 6 (each call lost once): %+v", len(seen), seen)
	}
	keys := map[string]bool{}
	for i := 0; i < len(seen); i += 2 {
		a, b := seen[i], seen[i+1]
		if a.key != b.key {
			t.Errorf("call %d: attempts carried keys %q and %q, want one", i/2, a.key, b.key)
		}
		if raw, err := hex.DecodeString(a.key); err != nil || len(raw) != 16 {
			t.Errorf("call %d: key %q is not 16 bytes in hex", i/2, a.key)
		}
		keys[a.key] = true
	}
	if len(keys) != 3 {
		t.Errorf("3 calls used %d distinct keys, want 3: %+v", len(keys), seen)
	}
	// A key the caller gives wins over a made one.
	if _, err := c.Next(WithIdempotencyKey(ctx, "mine")); err != nil {
		t.Fatalf("keyed Next: %v", err)
	}
	if got := node.log.seen()[6].key; got != "mine" {
		t.Errorf("with a key of its own the call carried %q, want mine", got)
	}
}

// Keyed calls go unary, never on the shared stream; plain ones take it.
func TestKeyedCallsSkipTheStream(t *testing.T) {
	node := newKeyedNode(false)
	c := mustClient(t, []string{mustSequencer(t, node)}, WithBackoff(time.Millisecond, 10*time.Millisecond))
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.NextN(WithIdempotencyKey(ctx, "k"), 2); err != nil {
		t.Fatalf("keyed NextN: %v", err)
	}
	if n := node.streams.Load(); n != 0 {
		t.Fatalf("a keyed call opened %d streams, want 0", n)
	}
	if seen := node.log.seen(); len(seen) != 1 || seen[0].key != "k" {
		t.Fatalf("unary attempts %+v, want one with key k", seen)
	}
	// A Stream of its own sends a keyed call unary too.
	st := c.OpenStream()
	defer st.Close()
	if _, err := st.Next(WithIdempotencyKey(ctx, "k2")); err != nil {
		t.Fatalf("keyed Stream.Next: %v", err)
	}
	if seen := node.log.seen(); node.streams.Load() != 0 || len(seen) != 2 || seen[1].key != "k2" {
		t.Fatalf("keyed Stream.Next: %d streams, unary attempts %+v; want no stream and a unary call with k2", node.streams.Load(), seen)
	}
	if id, err := c.Next(ctx); err != nil || id <= 1_000_000 {
		t.Fatalf("plain Next = %d, %v; want an ID from the stream", id, err)
	}
	if node.streams.Load() != 1 || len(node.log.seen()) != 2 {
		t.Fatalf("plain call: %d streams, %d unary calls; want 1 and still 2", node.streams.Load(), len(node.log.seen()))
	}
}

// WithCaller's name goes with every call, keyed or not; New refuses a
// name no node takes.
func TestCallerIsSent(t *testing.T) {
	node := newKeyedNode(false)
	c := mustNew(t, []string{mustSequencer(t, node)}, WithCaller("billing-1"))
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(WithIdempotencyKey(ctx, "k")); err != nil {
		t.Fatal(err)
	}
	for i, a := range node.log.seen() {
		if a.caller != "billing-1" {
			t.Errorf("call %d named caller %q, want billing-1", i, a.caller)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 129), "a\nb", "é"} {
		if _, err := New([]string{"127.0.0.1:1"}, WithCaller(bad)); !errors.Is(err, ErrBadOption) {
			t.Errorf("New(WithCaller(%q)) = %v, want ErrBadOption", bad, err)
		}
	}
	c2, err := New([]string{"127.0.0.1:1"}, WithCaller(strings.Repeat("x", 128)))
	if err != nil {
		t.Fatalf("New(WithCaller of 128 bytes): %v", err)
	}
	_ = c2.Close()
}

// A replayed answer that is not above the floor the call took at its
// start is an error, not IDs: for the default sequence and a named one.
func TestReplayBelowFloorIsAnError(t *testing.T) {
	node := newKeyedNode(false)
	c := mustNew(t, []string{mustSequencer(t, node)})
	ctx := testCtx(t, 5*time.Second)
	for _, s := range []*Sequence{c.Sequence(""), c.Sequence("orders")} {
		kctx := WithIdempotencyKey(ctx, "k-"+s.Name())
		first, err := s.Next(kctx)
		if err != nil {
			t.Fatalf("%q: keyed Next: %v", s.Name(), err)
		}
		if _, err := s.Next(ctx); err != nil { // the floor moves past first
			t.Fatalf("%q: Next: %v", s.Name(), err)
		}
		id, err := s.Next(kctx)
		if !errors.Is(err, ErrReplayBelowFloor) {
			t.Fatalf("%q: replay of %d after a later ID = %d, %v; want ErrReplayBelowFloor", s.Name(), first, id, err)
		}
	}
	// A replay above the floor is the answer.
	c2 := mustNew(t, []string{mustSequencer(t, node)})
	if id, err := c2.Next(WithIdempotencyKey(ctx, "k-")); err != nil || id != 1 {
		t.Fatalf("a fresh client's replay = %d, %v; want 1", id, err)
	}
}

// A made key's answer below the floor is the server's bug.
func TestOwnKeyBelowFloorIsBadResponse(t *testing.T) {
	c := mustNew(t, []string{mustSequencer(t, &fakeSeq{next: serve(&api.IDRun{First: 5, Count: 1, Step: 1})})}, WithIdempotentRetries())
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(ctx); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("second answer of 5 = %v, want ErrBadResponse", err)
	}
}

// The cluster's refusal of a reused key is ErrKeyReused, still a
// FailedPrecondition; another FailedPrecondition is not.
func TestKeyReusedMapsToErrKeyReused(t *testing.T) {
	node := newKeyedNode(false)
	c := mustNew(t, []string{mustSequencer(t, node)})
	ctx := WithIdempotencyKey(testCtx(t, 5*time.Second), "k")
	if _, err := c.NextN(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"another count":    func() error { _, err := c.NextN(ctx, 3); return err },
		"another sequence": func() error { _, err := c.Sequence("orders").NextN(ctx, 2); return err },
	} {
		err := call()
		if !errors.Is(err, ErrKeyReused) || status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s: %v (code %s), want ErrKeyReused wrapping FailedPrecondition", name, err, status.Code(err))
		}
	}
	wide := mustNew(t, []string{mustSequencer(t, &fakeSeq{next: fail(codes.FailedPrecondition, "")})})
	if _, err := wide.Next(ctx); errors.Is(err, ErrKeyReused) || status.Code(err) != codes.FailedPrecondition {
		t.Errorf("another FailedPrecondition = %v, want it as it is", err)
	}
}

// The 128-bit calls carry the key too.
func TestKeyedUUIDs(t *testing.T) {
	log := &keyedLog{loseFirst: true}
	c := mustNew(t, []string{mustSequencer(t, wideSeq("uuidv7", 3, log.next))})
	ctx := testCtx(t, 5*time.Second)
	if _, err := c.NextUUIDs(WithIdempotencyKey(ctx, "u"), 2); err != nil {
		t.Fatalf("keyed NextUUIDs: %v", err)
	}
	if seen := log.seen(); len(seen) != 2 || seen[0].key != "u" || seen[1].key != "u" {
		t.Fatalf("attempts %+v, want two with key u", seen)
	}
}

// A node too old to read keys answers a keyed call unkeyed, and a retry
// would take new IDs: the client refuses an answer not marked keyed.
func TestUnkeyedAnswerToKeyedCallIsRefused(t *testing.T) {
	old := func(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		return &api.NextResponse{Runs: []*api.IDRun{{First: 7, Count: req.Count, Step: 1}}}, nil
	}
	c := mustNew(t, []string{mustSequencer(t, &fakeSeq{next: old})})
	ctx := testCtx(t, 5*time.Second)
	if id, err := c.Next(WithIdempotencyKey(ctx, "k")); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("keyed Next answered unkeyed = %d, %v; want ErrBadResponse", id, err)
	}
	if id, err := c.Next(ctx); err != nil || id != 7 {
		t.Fatalf("unkeyed Next = %d, %v; want 7", id, err)
	}
}
