package grpcapi

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/settle"
)

// fakeSettle answers Reserve with answer (or err), and records what each
// call asked for.
type fakeSettle struct {
	Settle
	mu     sync.Mutex
	asked  []fsm.Keyed
	seqs   []string
	answer settle.Reservation
	err    error
}

func (f *fakeSettle) ReserveIn(_ context.Context, seq string, key fsm.Keyed, count uint64, ttl time.Duration) (settle.Reservation, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, key)
	f.seqs = append(f.seqs, seq)
	return f.answer, f.err
}

func (f *fakeSettle) keys() []fsm.Keyed {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fsm.Keyed(nil), f.asked...)
}

// settleServer is node id's Server with st as its settler, its state at
// cluster version 3; a follower forwards to the leader fakeNode names
// (n1).
func settleServer(t *testing.T, id string, n Node, st Settle) *Server {
	return settleServerAt(t, id, n, st, fsm.SequencesVersion)
}

func settleServerAt(t *testing.T, id string, n Node, st Settle, version int) *Server {
	state := fsm.New(nil, nil)
	e, err := fsm.Entry(fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	e.Index, e.Term = 1, 1
	if res := state.Apply(&e).(fsm.Result); res.Err != nil {
		t.Fatal(res.Err)
	}
	return NewServer(Config{ID: id, Layout: layout.MustPreset("default"), MaxCount: 10},
		Parts{Node: n, IDs: &fakeIDs{}, State: state, Settle: st, Meter: nopMeter{}, Stop: make(chan struct{}),
			Peers: NewPeers(insecure.NewCredentials(), func() string { return "" }, "")})
}

// A keyed Reserve reaches the settler with its key and caller (the
// ordo-caller metadata in plaintext), directly or forwarded by a
// follower, which names the caller it saw; the answer carries the
// reservation's fate (a retry's may be completed). An unkeyed one has no
// key, and a key over 128 bytes is InvalidArgument before anything is
// asked.
func TestReserveKeyReachesTheSettler(t *testing.T) {
	st := &fakeSettle{answer: settle.Reservation{Block: sequencer.Block{First: 40, Count: 2}, TTL: time.Minute, Fate: fsm.FateCompleted}}
	leaderAddr := grpctest.Serve(t, settleServer(t, "n1", fakeNode{leader: true}, st).Register)
	follower := settleServer(t, "n2", fakeNode{addr: leaderAddr}, &fakeSettle{err: sequencer.ErrNotLeader})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, api.CallerKey, "billing")
	for _, node := range []struct {
		name string
		c    api.SequencerClient
	}{
		{"leader", api.NewSequencerClient(grpctest.Dial(t, leaderAddr))},
		{"follower", serveSequencer(t, follower)},
	} {
		before := len(st.keys())
		resp, err := node.c.Reserve(ctx, &api.ReserveRequest{Count: 2, TtlMs: 60000, IdempotencyKey: "batch-9"})
		if err != nil {
			t.Fatalf("%s: keyed Reserve: %v", node.name, err)
		}
		if resp.Fate != api.Fate_FATE_COMPLETED || resp.Handle != (api.Handle{First: 40, Count: 2}).String() || resp.TtlMs != 60000 {
			t.Fatalf("%s: answer %+v, want the settler's reservation, completed", node.name, resp)
		}
		if got := st.keys(); len(got) != before+1 || got[before] != (fsm.Keyed{Caller: "billing", Key: "batch-9"}) {
			t.Fatalf("%s: the settler was asked with %+v, want key batch-9 of caller billing", node.name, got[before:])
		}
		if _, err := node.c.Reserve(ctx, &api.ReserveRequest{Count: 2}); err != nil {
			t.Fatalf("%s: unkeyed Reserve: %v", node.name, err)
		}
		if got := st.keys(); got[len(got)-1] != (fsm.Keyed{}) {
			t.Fatalf("%s: an unkeyed Reserve reached the settler with key %+v", node.name, got[len(got)-1])
		}
		n := len(st.keys())
		_, err = node.c.Reserve(ctx, &api.ReserveRequest{Count: 2, IdempotencyKey: strings.Repeat("k", fsm.MaxKeyLen+1)})
		if status.Code(err) != codes.InvalidArgument || len(st.keys()) != n {
			t.Fatalf("%s: a key over %d bytes: %v; want InvalidArgument and no call", node.name, fsm.MaxKeyLen, err)
		}
	}
}

// A key reused with other arguments is FailedPrecondition with the
// message clients recognise; a keyed open refused for its term is
// Unavailable, which clients retry.
func TestReserveKeyErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		code codes.Code
	}{
		{fsm.ErrKeyReused, codes.FailedPrecondition},
		{fsm.ErrClaimTerm, codes.Unavailable},
	} {
		c1 := serveSequencer(t, settleServer(t, "n1", fakeNode{leader: true}, &fakeSettle{err: c.err}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c1.Reserve(ctx, &api.ReserveRequest{Count: 1, IdempotencyKey: "k"})
		cancel()
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.err.Error()) {
			t.Errorf("%v: %v, want %s naming it", c.err, err, c.code)
		}
	}
}

// A follower whose state is below the cluster version that reads keys
// does not forward a keyed call (the leader may be of an Ordo that would
// ignore the key and open an unkeyed reservation): Unavailable, which
// clients retry. Unkeyed calls are forwarded as ever.
func TestKeyedCallNotForwardedBeforeKeysVersion(t *testing.T) {
	st := &fakeSettle{answer: settle.Reservation{Block: sequencer.Block{First: 40, Count: 1}, TTL: time.Minute, Fate: fsm.FateOpen}}
	leaderAddr := grpctest.Serve(t, settleServer(t, "n1", fakeNode{leader: true}, st).Register)
	c := serveSequencer(t, settleServerAt(t, "n2", fakeNode{addr: leaderAddr}, &fakeSettle{}, fsm.SettleVersion))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Reserve(ctx, &api.ReserveRequest{Count: 1, IdempotencyKey: "k"}); status.Code(err) != codes.Unavailable || len(st.keys()) != 0 {
		t.Fatalf("keyed Reserve through a follower at version 2: %v; want Unavailable, nothing forwarded", err)
	}
	if _, err := c.Next(ctx, &api.NextRequest{Count: 1, IdempotencyKey: "k"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("keyed Next through a follower at version 2: %v; want Unavailable", err)
	}
	if _, err := c.Reserve(ctx, &api.ReserveRequest{Count: 1}); err != nil || len(st.keys()) != 1 {
		t.Fatalf("unkeyed Reserve through a follower at version 2: %v; want it forwarded", err)
	}
}
