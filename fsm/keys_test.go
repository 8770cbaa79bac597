package fsm

import (
	"errors"
	"testing"
)

func claims(t testing.TB, f *FSM, nowMs int64, cs ...Claim) []Allocation {
	t.Helper()
	return applyOK(t, f, Command{Op: OpSettle, Claims: cs, NowMs: nowMs}, 1).Claimed
}

// A keyed call's retry gets the first answer, for the default sequence
// (a Claim of newly assigned ticks) and a named one (a keyed Alloc), also
// after a snapshot and restore; another caller's same key is its own; the
// same key with other arguments is refused and changes nothing.
func TestKeyedCallsReplayTheFirstAnswer(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "ledger", Kind: KindDense}, 1)
	a := Keyed{Caller: "CN=writer-1", Key: "k1"}
	if got := claims(t, f, 1000, Claim{Keyed: a, Count: 3, First: 500, Term: 1})[0]; got.First != 500 || got.Err != nil {
		t.Fatalf("first claim: %+v", got)
	}
	if got := claims(t, f, 2000, Claim{Keyed: a, Count: 3, First: 900, Term: 1})[0]; got.First != 500 {
		t.Fatalf("retried claim: %+v, want the first answer, 500", got)
	}
	other := Keyed{Caller: "CN=writer-2", Key: "k1"}
	if got := claims(t, f, 2000, Claim{Keyed: other, Count: 3, First: 910, Term: 1})[0]; got.First != 910 {
		t.Fatalf("another caller's same key: %+v, want its own ticks", got)
	}
	if got := claims(t, f, 2000, Claim{Keyed: a, Count: 4, First: 920, Term: 1})[0]; !errors.Is(got.Err, ErrKeyReused) {
		t.Fatalf("same key, other count: %+v, want ErrKeyReused", got)
	}
	k := Keyed{Caller: "CN=writer-1", Key: "k2"}
	first := allocs(t, f, 3000, Alloc{Seq: "ledger", Count: 2, Keyed: k})[0]
	f = restored(t, f)
	again := allocs(t, f, 4000, Alloc{Seq: "ledger", Count: 2, Keyed: k})[0]
	next := allocs(t, f, 4000, Alloc{Seq: "ledger", Count: 1})[0]
	if first.First != 1 || again.First != 1 || next.First != 3 {
		t.Fatalf("keyed dense alloc %+v, its retry after a restore %+v, the next call %+v; want 1, 1, 3 (a retry takes no new IDs)", first, again, next)
	}
	if got := allocs(t, f, 4000, Alloc{Seq: "ledger", Count: 1, Keyed: k})[0]; !errors.Is(got.Err, ErrKeyReused) {
		t.Fatalf("same key, other count on a named sequence: %+v", got)
	}
	if got := claims(t, f, 4000, Claim{Keyed: a, Count: 3, First: 990, Term: 1})[0]; got.First != 500 {
		t.Fatalf("claim after a restore: %+v, want 500", got)
	}
}

// Keys are forgotten past the cap, oldest first, and no clock decides
// it; a forgotten key is a new call.
func TestKeysForgottenPastTheCap(t *testing.T) {
	g := sequencedFSM(t)
	batch := make([]Claim, MaxKeys+1)
	for i := range batch {
		batch[i] = Claim{Keyed: Keyed{Key: "k" + itoa(i)}, Count: 1, First: uint64(100 + i), Term: 1}
	}
	claims(t, g, 1, batch...)
	if n := len(g.state.Keys.Records); n != MaxKeys {
		t.Fatalf("%d keys kept, want the cap %d", n, MaxKeys)
	}
	if got := claims(t, g, 1, Claim{Keyed: Keyed{Key: "k0"}, Count: 1, First: 5, Term: 1})[0]; got.First != 5 {
		t.Fatalf("the oldest key past the cap: %+v, want forgotten", got)
	}
	if got := claims(t, g, 1, Claim{Keyed: Keyed{Key: "k5"}, Count: 1, First: 6, Term: 1})[0]; got.First != 105 {
		t.Fatalf("a kept key: %+v, want 105", got)
	}
	snap := len(snapshotBytes(t, g))
	t.Logf("snapshot with %d keys: %d bytes (%d a key)", MaxKeys, snap, snap/MaxKeys)
}

// A claim committed in another term than its ticks were assigned in is
// refused and not kept: its retry must not be given ticks that no round
// or commit in their term vouched for.
func TestClaimFromAnotherTermIsNotKept(t *testing.T) {
	f := sequencedFSM(t)
	k := Keyed{Caller: "c", Key: "k"}
	if got := claims(t, f, 0, Claim{Keyed: k, Count: 2, First: 700, Term: 5})[0]; !errors.Is(got.Err, ErrClaimTerm) {
		t.Fatalf("claim assigned in term 5, committed in term 1: %+v, want ErrClaimTerm", got)
	}
	if got := claims(t, f, 0, Claim{Keyed: k, Count: 2, First: 800, Term: 1})[0]; got.First != 800 || got.Err != nil {
		t.Fatalf("its retry: %+v, want its own new ticks, 800", got)
	}
}

// A named layout sequence's keyed call claims ticks of a window the log
// committed: every case of the rule, each from a fresh state.
func TestNamedClaimEveryCase(t *testing.T) {
	key := Keyed{Caller: "CN=w", Key: "k"}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, f *FSM)
		claim Claim
		want  error // nil: kept, answered its own First
	}{
		{"kept", nil, Claim{Keyed: key, Seq: "lay", Count: 2, First: 0, Term: 1}, nil},
		{"unknown sequence", nil, Claim{Keyed: key, Seq: "none", Count: 2, First: 0, Term: 1}, ErrNoSequence},
		{"dropped sequence", func(t *testing.T, f *FSM) {
			applyOK(t, f, Command{Op: OpDropSequence, Sequence: "lay"}, 1)
		}, Claim{Keyed: key, Seq: "lay", Count: 2, First: 0, Term: 1}, ErrNoSequence},
		{"dense sequence", nil, Claim{Keyed: key, Seq: "dense", Count: 2, First: 1, Term: 1}, ErrInvalid},
		{"above the mark", nil, Claim{Keyed: key, Seq: "lay", Count: 2, First: 1 << 62, Term: 1}, ErrInvalid},
		{"another term", nil, Claim{Keyed: key, Seq: "lay", Count: 2, First: 0, Term: 7}, ErrClaimTerm},
		{"key used for another sequence", func(t *testing.T, f *FSM) {
			claims(t, f, 1000, Claim{Keyed: key, Count: 2, First: 50, Term: 1})
		}, Claim{Keyed: key, Seq: "lay", Count: 2, First: 0, Term: 1}, ErrKeyReused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := sequencedFSM(t)
			applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "lay", Kind: "default"}, 1)
			applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "dense", Kind: KindDense}, 1)
			window := allocs(t, f, 1_700_000_000_000, Alloc{Seq: "lay", Count: 1000})[0]
			if tc.setup != nil {
				tc.setup(t, f)
			}
			c := tc.claim
			if c.First == 0 {
				c.First = window.First + 10
			}
			got := claims(t, f, 1_700_000_000_000, c)[0]
			if tc.want != nil {
				if !errors.Is(got.Err, tc.want) {
					t.Fatalf("claim %+v = %+v, want %v", c, got, tc.want)
				}
				return
			}
			if got.Err != nil || got.First != c.First {
				t.Fatalf("claim %+v = %+v, want its own first %d", c, got, c.First)
			}
			again := claims(t, f, 1_700_000_000_000, Claim{Keyed: key, Seq: "lay", Count: 2, First: window.First + 500, Term: 1})[0]
			if again.Err != nil || again.First != c.First {
				t.Fatalf("retry = %+v, want the first answer %d", again, c.First)
			}
			if other := claims(t, f, 1_700_000_000_000, Claim{Keyed: key, Seq: "lay", Count: 3, First: window.First + 600, Term: 1})[0]; !errors.Is(other.Err, ErrKeyReused) {
				t.Fatalf("same key, other count = %+v, want ErrKeyReused", other)
			}
		})
	}
}
