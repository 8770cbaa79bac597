package client

// Idempotency keys (NextRequest.idempotency_key, ReserveRequest's): a
// keyed call for IDs or reservation is decided in the cluster's log with
// its key, scoped to the caller (the certificate's subject with TLS, else
// the name WithCaller gives, else one namespace), and any retry with the
// same key, from any node, after any leader change, gets exactly the IDs
// (the reservation) of the first answer.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
)

// Errors of keyed calls.
var (
	// ErrKeyReused means an idempotency key was used again with another
	// count or sequence (or TTL, or kind of call: Next or Reserve) than
	// its first call's: the cluster's FailedPrecondition, which it wraps.
	// Nothing was handed out.
	ErrKeyReused = errors.New("idempotency key reused with other arguments")
	// ErrReplayBelowFloor means a call made with WithIdempotencyKey got
	// IDs that are not above every ID the client had returned when the
	// call started: the key's first answer, replayed, is older than IDs
	// this client returned since. The IDs are withheld, since returning
	// them would break the client's order promise for the calls in
	// between; the caller that must have them knows it used the key
	// before (another process, or an earlier call).
	ErrReplayBelowFloor = errors.New("replayed answer of an idempotency key is below IDs already returned")
)

// MaxKeyLen bounds an idempotency key and a caller's name (WithCaller),
// as the cluster does.
const MaxKeyLen = 128

// keyReusedText is the cluster's message for a reused key (fsm.ErrKeyReused).
const keyReusedText = "idempotency key reused with other arguments"

// keyCtx is the context key of WithIdempotencyKey.
type keyCtx struct{}

// idemKey is an idempotency key and where it came from.
type idemKey struct {
	key string
	// own is set for a key the client made for this one call
	// (WithIdempotentRetries): no answer to it can predate the call.
	own bool
}

// WithIdempotencyKey returns ctx carrying key: a call for IDs made with it
// (Client.Next, NextN, NextUUID(s), NextULID(s), and the same of a
// Sequence) sends key on every attempt, and the cluster answers every
// call with the key (same caller, count and sequence), from any node,
// while it keeps the key (the newest 100,000 keys cluster-wide), with
// exactly the IDs of the first answer. The same key with another count or
// sequence is ErrKeyReused. Reserve (and ReserveUUIDs, ReserveULIDs)
// takes it too, and answers the first call's reservation (see Reserve);
// a key is one call, so a key used for Next is ErrKeyReused for Reserve
// and the other way round. Complete, Abandon and Extend ignore it: they
// name their reservation by its handle, and a retry of one reads the
// same fate.
//
// A keyed call always goes as a unary request, never on the shared stream
// or a coalesced request, and costs a Raft commit (key and IDs) before its
// answer (a Reserve costs one anyway: the key rides in it). It lasts from its first attempt to the answer that reaches the
// caller: its IDs are checked against the client's floor taken when the
// call started (its first attempt), as any call's are. An answer not above
// that floor is a replay of a call that started earlier (in another
// process, or an earlier call with the key): the client reports
// ErrReplayBelowFloor rather than return it. A call that a concurrent call
// overtook is not refused: they owe each other no order.
//
// An empty key is no key. A key longer than MaxKeyLen bytes is refused
// by the cluster (InvalidArgument).
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, idemKey{key: key})
}

// WithIdempotentRetries makes every call for IDs or reservation that
// carries no key of its own (WithIdempotencyKey) a keyed call with a
// fresh random key (16 bytes of crypto/rand, in hex), sent on all of its
// attempts: a retry after an answer was lost (a timeout, a leader change)
// gets the IDs (the reservation) that answer held instead of new ones, so
// the client's own retries never burn IDs nor leave a reservation to
// expire. Every call for IDs then goes unary and costs a Raft commit: see
// WithIdempotencyKey.
func WithIdempotentRetries() Option { return func(c *Client) { c.idempotent = true } }

// WithCaller sends name as the caller's identity (the api.CallerKey
// metadata, ordo-caller) with every call: a plaintext cluster scopes
// idempotency keys to it, so a process that retries a key after a
// restart must name itself the same. Without it, every plaintext caller
// shares one namespace. A node under TLS ignores it and takes the
// certificate's subject. New refuses a name that is not 1 to MaxKeyLen
// bytes of printable ASCII.
func WithCaller(name string) Option {
	return func(c *Client) { c.caller, c.callerSet = name, true }
}

// CheckCaller refuses a caller name that WithCaller must not take: New
// would refuse it (ErrBadOption).
func CheckCaller(name string) error {
	if len(name) < 1 || len(name) > MaxKeyLen {
		return fmt.Errorf("%w: caller name of %d bytes, want 1 to %d", ErrBadOption, len(name), MaxKeyLen)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return fmt.Errorf("%w: caller name %q: want printable ASCII", ErrBadOption, name)
		}
	}
	return nil
}

// callerCreds sends the caller's name with every call.
type callerCreds string

func (n callerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{api.CallerKey: string(n)}, nil
}

// RequireTransportSecurity is false: the name is for plaintext clusters.
func (callerCreds) RequireTransportSecurity() bool { return false }

// callerOption is the dial option that sends name.
func callerOption(name string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(callerCreds(name))
}

// keyed returns the key a call for IDs made with ctx carries: the one
// WithIdempotencyKey put there, else a fresh one under
// WithIdempotentRetries (put into the returned context, so every attempt
// sends it), else none.
func (c *Client) keyed(ctx context.Context) (context.Context, idemKey, error) {
	if k, ok := ctx.Value(keyCtx{}).(idemKey); ok && k.key != "" {
		return ctx, k, nil
	}
	if !c.idempotent {
		return ctx, idemKey{}, nil
	}
	key, err := newKey()
	if err != nil {
		return nil, idemKey{}, err
	}
	k := idemKey{key: key, own: true}
	return context.WithValue(ctx, keyCtx{}, k), k, nil
}

// keyOf is the key ctx carries, "" for none.
func keyOf(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(idemKey)
	return k.key
}

// newKey is a fresh random key: 16 bytes of crypto/rand in hex.
func newKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make an idempotency key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// keyErr maps the cluster's refusal of a reused key to ErrKeyReused.
func keyErr(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), keyReusedText) {
		return fmt.Errorf("%w: %w", ErrKeyReused, err)
	}
	return err
}

// acceptKeyed is acceptAbove for a keyed call: an answer not above the
// floor its call took at its first attempt is ErrReplayBelowFloor for a
// key the caller gave (it may have been used before the call started),
// ErrBadResponse for the client's own (no answer to it predates the
// call).
func acceptKeyed(returned *atomic.Uint64, ids []uint64, floor uint64, k idemKey) ([]uint64, error) {
	if !k.own && ids[0] <= floor {
		return nil, fmt.Errorf("%w: key %q answered IDs from %d, not above %d, already returned when the call started", ErrReplayBelowFloor, k.key, ids[0], floor)
	}
	return acceptAbove(returned, ids, floor)
}
