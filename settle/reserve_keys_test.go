package settle

import (
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/fsm"
)

// keyedRig is a leading Settler at the cluster version that reads keys.
func keyedRig(t *testing.T) *rig {
	t.Helper()
	r := start(t, testConfig(), fsm.SequencesVersion)
	r.s.Lead()
	return r
}

func (r *rig) reserveKeyed(key fsm.Keyed, count uint64, ttl time.Duration) Reservation {
	r.t.Helper()
	res, err := r.s.ReserveKeyed(ctx(r.t), key, count, ttl)
	if err != nil {
		r.t.Fatalf("ReserveKeyed(%q, %d, %s): %v", key.Key, count, ttl, err)
	}
	return res
}

// A keyed Reserve's retry answers the first reservation, as granted, with
// its fate now, and opens nothing: it holds W only where the first one
// does, keeps the first one's deadline, and counts once.
func TestKeyedReserveRetry(t *testing.T) {
	r := keyedRig(t)
	key := fsm.Keyed{Caller: "CN=writer", Key: "batch-9"}
	first := r.reserveKeyed(key, 3, time.Minute)
	if first.First != firstTick || first.Count != 3 || first.TTL != time.Minute || first.Fate != fsm.FateOpen {
		t.Fatalf("first: %+v, want 3 ticks from %d for 1m, open", first, firstTick)
	}
	for _, ttl := range []time.Duration{time.Minute, 0} { // the same TTL, or none named
		again := r.reserveKeyed(key, 3, ttl)
		if again != first {
			t.Fatalf("retry (ttl %s): %+v, want the first reservation %+v", ttl, again, first)
		}
	}
	if n := len(r.fsm.Tracked().Open); n != 1 {
		t.Fatalf("%d reservations open after two retries, want 1", n)
	}
	if w := r.watermark(); w != first.First {
		t.Fatalf("W %d, want the first reservation's %d", w, first.First)
	}
	if st := r.s.Stats(); st.Reserved != 1 || st.Open != 1 {
		t.Fatalf("stats %+v: want one reservation opened and open", st)
	}
	for _, c := range []struct {
		count uint64
		ttl   time.Duration
	}{{4, time.Minute}, {3, 2 * time.Minute}} {
		if res, err := r.s.ReserveKeyed(ctx(t), key, c.count, c.ttl); !errors.Is(err, fsm.ErrKeyReused) {
			t.Fatalf("same key, %d ticks for %s: %+v, %v; want fsm.ErrKeyReused", c.count, c.ttl, res, err)
		}
	}
	// The retries did not restart its deadline.
	r.advance(time.Minute + time.Millisecond)
	r.waitExpired(1)
	if again := r.reserveKeyed(key, 3, time.Minute); again.Block != first.Block || again.Fate != fsm.FateExpired {
		t.Fatalf("retry after it expired: %+v, want the first reservation, expired", again)
	}

	// Completed, then retried: the handle, completed; Complete again says
	// so (a writer back from a crash completes what it wrote).
	k2 := fsm.Keyed{Caller: "CN=writer", Key: "batch-10"}
	b := r.reserveKeyed(k2, 2, 0)
	r.decideOK(fsm.DoComplete, b, 0, fsm.FateCompleted)
	if again := r.reserveKeyed(k2, 2, 0); again.Block != b.Block || again.Fate != fsm.FateCompleted || again.TTL != testConfig().DefaultTTL {
		t.Fatalf("retry after Complete: %+v, want %+v completed", again, b)
	}
	r.decideOK(fsm.DoComplete, b, 0, fsm.FateCompleted)
}

// A keyed Reserve's retry on the next leader (a new term) answers the
// reservation the first leader opened.
func TestKeyedReserveAcrossLeaderChange(t *testing.T) {
	r := keyedRig(t)
	key := fsm.Keyed{Key: "k"}
	first := r.reserveKeyed(key, 2, time.Minute)
	r.s.StepDown()
	r.ids.setTerm(2)
	r.log.setTerm(2)
	r.s.Lead()
	if again := r.reserveKeyed(key, 2, time.Minute); again != first {
		t.Fatalf("retry on the next leader: %+v, want %+v", again, first)
	}
	if st := r.s.Stats(); st.Open != 1 {
		t.Fatalf("stats %+v: want the one reservation open, with its deadline", st)
	}
}

// A keyed Reserve committed in another term than its ticks were assigned
// in is refused (fsm.ErrClaimTerm, which clients retry) and opens
// nothing; its retry gets a reservation of its own, never those ticks.
func TestKeyedReserveFromAnotherTerm(t *testing.T) {
	r := keyedRig(t)
	key := fsm.Keyed{Key: "k"}
	r.log.setTerm(2)
	if res, err := r.s.ReserveKeyed(ctx(t), key, 2, time.Hour); !errors.Is(err, fsm.ErrClaimTerm) {
		t.Fatalf("keyed reserve committed in term 2, assigned in term 1: %+v, %v; want fsm.ErrClaimTerm", res, err)
	}
	if open := r.fsm.Tracked().Open; len(open) != 0 {
		t.Fatalf("open reservations %+v after a refused keyed open, want none", open)
	}
	r.log.setTerm(1)
	again := r.reserveKeyed(key, 2, time.Hour)
	if again.First == firstTick || again.Fate != fsm.FateOpen {
		t.Fatalf("retry: %+v, want a new open reservation, not the refused ticks at %d", again, firstTick)
	}
	if st := r.s.Stats(); st.Open != 1 || st.Reserved != 1 {
		t.Fatalf("stats %+v, want one opened", st)
	}
}

// Keys need the cluster version that reads them: before it, a keyed
// Reserve is refused and proposes nothing; an unkeyed one is served.
func TestKeyedReserveNeedsVersion(t *testing.T) {
	r := newRig(t, testConfig()) // version 2
	if _, err := r.s.ReserveKeyed(ctx(t), fsm.Keyed{Key: "k"}, 1, 0); !errors.Is(err, ErrClusterVersion) {
		t.Fatalf("keyed reserve at version 2: %v, want ErrClusterVersion", err)
	}
	if n := len(r.log.Proposed()); n != 0 {
		t.Fatalf("%d entries proposed for a refused keyed reserve", n)
	}
	if res := r.reserve(1, 0); res.Fate != fsm.FateOpen {
		t.Fatalf("unkeyed reserve: %+v, want open", res)
	}
}
