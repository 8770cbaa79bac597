package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// keyedOpen is a keyed Open of count ticks from first, assigned in term 1.
func keyedOpen(k Keyed, first, count uint64, ttlMs int64) Track {
	return Track{Do: DoOpen, First: first, Count: count, TTLMs: ttlMs, Keyed: k, Term: 1}
}

// A keyed Open's retry answers the first reservation (its ticks, count
// and TTL as first granted) with where it stands now, and opens nothing;
// another count or TTL, or a key first used for IDs, is ErrKeyReused.
// Each case runs on a fresh FSM: first the steps before (frontier 150),
// then the retry (frontier 300).
func TestKeyedOpenTable(t *testing.T) {
	k := Keyed{Caller: "CN=writer", Key: "order-17"}
	first := keyedOpen(k, 100, 3, 5000) // the first call: ticks 100..102
	retry := keyedOpen(k, 200, 3, 5000) // its retry, given new ticks 200..202
	anyTTL := retry
	anyTTL.TTLMs, anyTTL.AnyTTL = 9000, true // named no TTL; this leader's default is 9 s
	other := func(f func(*Track)) Track { tr := retry; f(&tr); return tr }
	for _, c := range []struct {
		name   string
		before []Track
		// claim, when set, is a keyed call for IDs before the steps.
		claim     bool
		retry     Track
		fate      Fate
		err       error
		wantFirst uint64
	}{
		{name: "first call", retry: first, fate: FateOpen, wantFirst: 100},
		{name: "retry, same arguments", before: []Track{first}, retry: retry, fate: FateOpen, wantFirst: 100},
		{name: "retry naming no TTL", before: []Track{first}, retry: anyTTL, fate: FateOpen, wantFirst: 100},
		{name: "retry, other count", before: []Track{first}, retry: other(func(tr *Track) { tr.Count = 4 }), err: ErrKeyReused},
		{name: "retry, other TTL", before: []Track{first}, retry: other(func(tr *Track) { tr.TTLMs = 6000 }), err: ErrKeyReused},
		{name: "retry after complete", before: []Track{first, {Do: DoComplete, First: 100, Count: 3}}, retry: retry, fate: FateCompleted, wantFirst: 100},
		{name: "retry after abandon", before: []Track{first, {Do: DoAbandon, First: 100, Count: 3}}, retry: retry, fate: FateAbandoned, wantFirst: 100},
		{name: "retry after expire", before: []Track{first, {Do: DoExpire, First: 100, Count: 3}}, retry: retry, fate: FateExpired, wantFirst: 100},
		{name: "retry after extend", before: []Track{first, {Do: DoExtend, First: 100, Count: 3, TTLMs: 60000}}, retry: retry, fate: FateOpen, wantFirst: 100},
		{name: "another caller's same key", before: []Track{first}, retry: keyedOpen(Keyed{Caller: "CN=other", Key: k.Key}, 200, 3, 5000), fate: FateOpen, wantFirst: 200},
		{name: "the key of a call for IDs", claim: true, retry: first, err: ErrKeyReused},
		{name: "committed in another term", retry: other(func(tr *Track) { tr.Term = 5 }), err: ErrClaimTerm},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := sequencedFSM(t)
			if c.claim {
				if got := claims(t, f, 0, Claim{Keyed: k, Count: 3, First: 50, Term: 1})[0]; got.Err != nil {
					t.Fatalf("claim: %v", got.Err)
				}
			}
			for _, tr := range c.before {
				if o := settleOK(t, f, 150, tr).Outcomes[0]; o.Err != nil {
					t.Fatalf("%+v: %v", tr, o.Err)
				}
			}
			before := f.Tracked()
			o := settleOK(t, f, 300, c.retry).Outcomes[0]
			if !errors.Is(o.Err, c.err) || c.err == nil && o.Err != nil {
				t.Fatalf("outcome %+v, want error %v", o, c.err)
			}
			if c.err != nil {
				if got := f.Tracked(); len(got.Open) != len(before.Open) {
					t.Fatalf("a refused keyed open changed the open reservations: %v, then %v", before.Open, got.Open)
				}
				return
			}
			if o.Fate != c.fate || o.First != c.wantFirst || o.Count != 3 {
				t.Fatalf("outcome %+v, want fate %v, ticks %d+3", o, c.fate, c.wantFirst)
			}
			wantTTL := int64(5000)
			if o.TTLMs != wantTTL {
				t.Fatalf("outcome TTL %d ms, want %d as first granted", o.TTLMs, wantTTL)
			}
			if replay := len(c.before) > 0 && c.wantFirst == 100; replay {
				if o.Changed {
					t.Fatalf("a replay changed the state: %+v", o)
				}
				if _, opened := f.Tracked().Open[c.retry.First]; opened {
					t.Fatalf("a replay opened its own new ticks %d", c.retry.First)
				}
			}
		})
	}
}

// The key is also the call's for IDs: a key first used to reserve is
// ErrKeyReused for a claim of the default sequence and for a named one.
func TestReserveKeyRefusedForIDs(t *testing.T) {
	f := sequencedFSM(t)
	applyOK(t, f, Command{Op: OpCreateSequence, Sequence: "ledger", Kind: KindDense}, 1)
	k := Keyed{Key: "k"}
	settleOK(t, f, 300, keyedOpen(k, 100, 3, 5000))
	if got := claims(t, f, 0, Claim{Keyed: k, Count: 3, First: 400, Term: 1})[0]; !errors.Is(got.Err, ErrKeyReused) {
		t.Fatalf("claim with a reservation's key: %+v, want ErrKeyReused", got)
	}
	if got := allocs(t, f, 0, Alloc{Seq: "ledger", Count: 3, Keyed: k})[0]; !errors.Is(got.Err, ErrKeyReused) {
		t.Fatalf("named alloc with a reservation's key: %+v, want ErrKeyReused", got)
	}
}

// Two keyed Opens with one key in one entry (two attempts the leader
// gathered together): the second answers the first's reservation.
func TestKeyedOpenTwiceInOneEntry(t *testing.T) {
	f := sequencedFSM(t)
	k := Keyed{Key: "k"}
	out := settleOK(t, f, 300, keyedOpen(k, 100, 2, 5000), keyedOpen(k, 102, 2, 5000)).Outcomes
	if out[0].First != 100 || !out[0].Changed || out[1].First != 100 || out[1].Changed || out[1].Fate != FateOpen {
		t.Fatalf("outcomes %+v, want the second to answer the first's reservation at 100", out)
	}
	if n := len(f.Tracked().Open); n != 1 {
		t.Fatalf("%d reservations open, want 1", n)
	}
	// W passes the second attempt's ticks, which nobody holds, only up to
	// the open reservation.
	if w := f.Settled(); w != 100 {
		t.Fatalf("W %d, want 100", w)
	}
}

// A keyed Open refused for its term opens nothing (W is not held back by
// ticks nobody was given), keeps no key, and its retry opens its own.
func TestKeyedOpenFromAnotherTermIsNotKept(t *testing.T) {
	f := sequencedFSM(t)
	k := Keyed{Key: "k"}
	stale := keyedOpen(k, 100, 2, 5000)
	stale.Term = 5
	if o := settleOK(t, f, 300, stale).Outcomes[0]; !errors.Is(o.Err, ErrClaimTerm) {
		t.Fatalf("keyed open assigned in term 5, committed in term 1: %+v, want ErrClaimTerm", o)
	}
	if w := f.Settled(); w != 300 {
		t.Fatalf("W %d, want the frontier 300: the refused open holds nothing", w)
	}
	if o := settleOK(t, f, 400, keyedOpen(k, 300, 2, 5000)).Outcomes[0]; o.Err != nil || o.First != 300 || !o.Changed {
		t.Fatalf("its retry: %+v, want its own new reservation at 300", o)
	}
}

// Kept reservation keys survive a snapshot and restore, and are forgotten
// past the cap as every key is, oldest first: the retry of a forgotten
// key opens a new reservation.
func TestReserveKeysRestoredAndCapped(t *testing.T) {
	f := sequencedFSM(t)
	k := Keyed{Caller: "c", Key: "k"}
	settleOK(t, f, 300, keyedOpen(k, 100, 2, 5000))
	f = restored(t, f)
	if o := settleOK(t, f, 400, keyedOpen(k, 300, 2, 5000)).Outcomes[0]; o.First != 100 || o.Fate != FateOpen || o.Changed {
		t.Fatalf("retry after a restore: %+v, want the reservation at 100, open", o)
	}
	batch := make([]Claim, MaxKeys)
	for i := range batch {
		batch[i] = Claim{Keyed: Keyed{Key: "n" + itoa(i)}, Count: 1, First: uint64(1000 + i), Term: 1}
	}
	claims(t, f, 0, batch...)
	front := uint64(1000 + MaxKeys + 10)
	if o := settleOK(t, f, front, keyedOpen(k, front-5, 2, 5000)).Outcomes[0]; o.Err != nil || o.First != front-5 || !o.Changed {
		t.Fatalf("retry after %d newer keys: %+v, want a new reservation (the key was forgotten)", MaxKeys, o)
	}
}

// Keyed Opens need cluster version 3, as every keyed call does; and
// Decode refuses a key where only a keyed Open may carry one.
func TestKeyedOpenVersionAndDecode(t *testing.T) {
	f := trackedFSM(t, 1<<40)
	r := applyCmd(t, f, Command{Op: OpSettle, Frontier: 300, Tracks: []Track{keyedOpen(Keyed{Key: "k"}, 100, 1, 1000)}}, 1)
	if !errors.Is(r.Err, ErrClusterVersion) || len(f.Tracked().Open) != 0 {
		t.Fatalf("keyed open at cluster version 2: %v; want ErrClusterVersion and nothing opened", r.Err)
	}
	for _, tr := range []string{
		`{"do":"complete","first":1,"count":1,"key":"k","term":1}`,
		`{"do":"open","first":1,"count":1,"ttl_ms":1,"key":"k"}`,
		`{"do":"open","first":1,"count":1,"ttl_ms":1,"term":1}`,
		`{"do":"open","first":1,"count":1,"ttl_ms":1,"any_ttl":true}`,
		`{"do":"open","first":1,"count":1,"ttl_ms":1,"caller":"c","term":1}`,
		fmt.Sprintf(`{"do":"open","first":1,"count":1,"ttl_ms":1,"key":%q,"term":1}`, strings.Repeat("k", MaxKeyLen+1)),
	} {
		if _, err := Decode([]byte(`{"v":1,"op":"settle","frontier":5,"tracks":[` + tr + `]}`)); !errors.Is(err, ErrInvalid) {
			t.Errorf("track %s: %v, want ErrInvalid", tr, err)
		}
	}
	// What versions before keys wrote still applies.
	old := `{"v":1,"op":"settle","tracks":[{"do":"open","first":10,"count":2,"ttl_ms":1000}],"frontier":20}`
	if r := apply(t, f, []byte(old), 1); r.Err != nil || r.Outcomes[0].Err != nil || r.Outcomes[0].First != 10 {
		t.Fatalf("an unkeyed open as written before keys: %+v", r)
	}
	e := keyedOpen(Keyed{Caller: "c", Key: "k"}, 30, 1, 1000)
	e.AnyTTL = true
	c := Command{Op: OpSettle, Frontier: 40, Tracks: []Track{e}}
	got, err := Decode(mustEncode(t, c))
	if err != nil || got.Tracks[0] != e {
		t.Fatalf("a keyed open round trip: %+v, %v; want %+v", got.Tracks, err, e)
	}
}
