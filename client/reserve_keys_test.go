package client

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seed-e8569b35/ordo/api"
)

// keyedReserves is a leader's Reserve that keeps keyed reservations as
// the cluster does: per caller, a key's first reservation answers every
// call with it (with fates[its first ID], open by default), and another
// count or TTL is refused. With loseFirst it commits each key's first
// attempt and answers Unavailable. It records what each attempt carried.
type keyedReserves struct {
	loseFirst bool

	mu       sync.Mutex
	last     uint64
	kept     map[string]*api.ReserveResponse
	fates    map[uint64]api.Fate
	attempts []keyedAttempt
}

func (k *keyedReserves) reserve(ctx context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
	caller := ""
	if v := metadata.ValueFromIncomingContext(ctx, api.CallerKey); len(v) > 0 {
		caller = v[0]
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kept == nil {
		k.kept, k.fates = map[string]*api.ReserveResponse{}, map[uint64]api.Fate{}
	}
	k.attempts = append(k.attempts, keyedAttempt{key: req.IdempotencyKey, caller: caller})
	scoped := caller + "\x00" + req.IdempotencyKey
	if r, ok := k.kept[scoped]; ok && req.IdempotencyKey != "" {
		if r.Runs[0].Count != req.Count || req.TtlMs != 0 && req.TtlMs != r.TtlMs {
			return nil, status.Errorf(codes.FailedPrecondition, "idempotency key reused with other arguments: key %q", req.IdempotencyKey)
		}
		out := proto.Clone(r).(*api.ReserveResponse)
		if f, ok := k.fates[r.Runs[0].First]; ok {
			out.Fate = f
		}
		return out, nil
	}
	first := k.last + 1
	k.last += uint64(req.Count)
	ttl := req.TtlMs
	if ttl == 0 {
		ttl = 30_000
	}
	r := &api.ReserveResponse{Handle: (api.Handle{First: first, Count: uint64(req.Count)}).String(),
		Runs: []*api.IDRun{{First: first, Count: req.Count, Step: 1}}, TtlMs: ttl, Fate: api.Fate_FATE_OPEN}
	if req.IdempotencyKey == "" {
		return r, nil
	}
	k.kept[scoped] = r
	if k.loseFirst {
		return nil, status.Error(codes.Unavailable, "fake: committed, then lost the answer")
	}
	return r, nil
}

func (k *keyedReserves) seen() []keyedAttempt {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.attempts)
}

func (k *keyedReserves) setFate(first uint64, f api.Fate) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fates[first] = f
}

func keyedReserveNode(k *keyedReserves) *fakeSettle {
	f := settleNode()
	f.reserve = k.reserve
	return f
}

// A keyed Reserve sends its key (and the caller's name) on every attempt,
// and the retry after a lost answer returns the reservation the first
// attempt opened; the same key with another count or TTL is
// ErrKeyReused.
func TestKeyedReserveRetriesGetTheFirst(t *testing.T) {
	k := &keyedReserves{loseFirst: true}
	c := mustNew(t, []string{mustSequencer(t, keyedReserveNode(k))}, WithCaller("billing"))
	ctx := WithIdempotencyKey(testCtx(t, 5*time.Second), "batch-9")
	r, err := c.Reserve(ctx, 3, time.Minute)
	if err != nil {
		t.Fatalf("keyed Reserve: %v", err)
	}
	if !slices.Equal(r.IDs, []uint64{1, 2, 3}) || r.TTL != time.Minute || r.Fate != api.Fate_FATE_OPEN {
		t.Fatalf("keyed Reserve = %+v, want the first attempt's IDs 1-3 for 1m, open", r)
	}
	seen := k.seen()
	if len(seen) != 2 {
		t.Fatalf("%d attempts, want 2 (one lost, one retry): %+v", len(seen), seen)
	}
	for i, a := range seen {
		if a.key != "batch-9" || a.caller != "billing" {
			t.Errorf("attempt %d carried key %q of caller %q, want batch-9 of billing", i, a.key, a.caller)
		}
	}
	for _, c2 := range []struct {
		count int
		ttl   time.Duration
	}{{4, time.Minute}, {3, 2 * time.Minute}} {
		if _, err := c.Reserve(ctx, c2.count, c2.ttl); !errors.Is(err, ErrKeyReused) || status.Code(err) != codes.FailedPrecondition {
			t.Errorf("same key, %d IDs for %s: %v; want ErrKeyReused wrapping FailedPrecondition", c2.count, c2.ttl, err)
		}
	}
}

// WithIdempotentRetries keys each Reserve with a fresh key, the same on
// its attempts and different across calls: a lost answer leaves no
// reservation to expire.
func TestIdempotentRetriesKeyEachReserve(t *testing.T) {
	k := &keyedReserves{loseFirst: true}
	c := mustNew(t, []string{mustSequencer(t, keyedReserveNode(k))}, WithIdempotentRetries())
	ctx := testCtx(t, 5*time.Second)
	for want := uint64(1); want <= 5; want += 2 {
		r, err := c.Reserve(ctx, 2, 0)
		if err != nil || r.IDs[0] != want {
			t.Fatalf("Reserve = %+v, %v; want IDs from %d (nothing opened by the lost attempt but the answer)", r, err, want)
		}
	}
	seen := k.seen()
	keys := map[string]bool{}
	for i := 0; i < len(seen); i += 2 {
		if seen[i].key != seen[i+1].key {
			t.Errorf("call %d: attempts carried keys %q and %q, want one", i/2, seen[i].key, seen[i+1].key)
		}
		if raw, err := hex.DecodeString(seen[i].key); err != nil || len(raw) != 16 {
			t.Errorf("call %d: key %q is not 16 bytes in hex", i/2, seen[i].key)
		}
		keys[seen[i].key] = true
	}
	if len(seen) != 6 || len(keys) != 3 {
		t.Fatalf("attempts %+v, want 3 calls of 2 attempts with 3 distinct keys", seen)
	}
}

// The floor rules of a keyed NextN: a replay not above the floor the call
// took at its start is ErrReplayBelowFloor, not a reservation; a new
// client (a writer back from a crash) gets it, with the fate it has now.
func TestKeyedReserveReplayAndFloor(t *testing.T) {
	k := &keyedReserves{}
	addr := mustSequencer(t, keyedReserveNode(k))
	c := mustNew(t, []string{addr})
	ctx := testCtx(t, 5*time.Second)
	kctx := WithIdempotencyKey(ctx, "batch-9")
	first, err := c.Reserve(kctx, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(ctx, 1, 0); err != nil { // the floor moves past it
		t.Fatal(err)
	}
	if r, err := c.Reserve(kctx, 2, 0); !errors.Is(err, ErrReplayBelowFloor) {
		t.Fatalf("replay below the floor = %+v, %v; want ErrReplayBelowFloor", r, err)
	}
	k.setFate(first.IDs[0], api.Fate_FATE_EXPIRED)
	again, err := mustNew(t, []string{addr}).Reserve(kctx, 2, 0)
	if err != nil || again.Handle != first.Handle || !slices.Equal(again.IDs, first.IDs) || again.Fate != api.Fate_FATE_EXPIRED {
		t.Fatalf("a new client's replay = %+v, %v; want %+v, expired", again, err, first)
	}
}

// An unkeyed Reserve answered by a server that names no fate (an Ordo
// before keys) is open.
func TestReserveWithoutFateIsOpen(t *testing.T) {
	node := settleNode()
	node.reserve = func(_ context.Context, req *api.ReserveRequest) (*api.ReserveResponse, error) {
		return &api.ReserveResponse{Handle: "r1.1.1", Runs: []*api.IDRun{{First: 1, Count: 1, Step: 1}}, TtlMs: 1000}, nil
	}
	r, err := mustNew(t, []string{mustSequencer(t, node)}).Reserve(testCtx(t, 5*time.Second), 1, 0)
	if err != nil || r.Fate != api.Fate_FATE_OPEN {
		t.Fatalf("Reserve = %+v, %v; want open", r, err)
	}
}
