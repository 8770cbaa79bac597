package leadership

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestRoundCountsItselfOnlyOnceItsOwnPromiseRanOut: n1 leads, but as a
// voter it promised n9 (or restarted within its recorded lease). n2
// answers in term, n3 is unreachable: n1's round must not count n1 and
// so must not reach a majority. Once the promise is gone, the same round
// does: it failed for the promise, not for anything else.
//
// Without the wait, a leader B serving from a lease that counted A's
// promise could be outrun: A restarts, is elected, and confirms itself
// with one other voter while B still answers from memory.
func TestRoundCountsItselfOnlyOnceItsOwnPromiseRanOut(t *testing.T) {
	t.Run("promise to another leader", func(t *testing.T) {
		leader, node := mustLeader(t)
		v, _, _ := mustConfirmer(t, "n2", 0)
		node.pointAt("n2", mustServeVoter(t, v))
		node.pointAt("n3", "127.0.0.1:1")
		leader.promises.mu.Lock()
		leader.promises.to, leader.promises.until = "n9", leader.promises.clock()+time.Hour
		leader.promises.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if c, err := leader.Confirm(ctx, false); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("confirmed %v, err %v, counting itself while it had promised n9", c, err)
		}
		leader.promises.mu.Lock()
		leader.promises.to, leader.promises.until = "", 0
		leader.promises.mu.Unlock()
		mustConfirmNow(t, leader)
	})
	t.Run("restart hold from the stable store", func(t *testing.T) {
		store := raft.NewInmemStore()
		if err := store.SetUint64(leaseRecordKey, uint64(time.Hour)); err != nil {
			t.Fatal(err)
		}
		r := &fakeRaft{term: testTerm, leads: true, leader: "n1", voters: testVoters}
		node := newFakeNode(t, "self-of-n1")
		leader, err := Open(Config{ID: "n1", Timeout: testWait, Raft: r, Node: node, Store: store, Logger: hclog.NewNullLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(leader.Close)
		v, _, _ := mustConfirmer(t, "n2", 0)
		node.pointAt("n2", mustServeVoter(t, v))
		node.pointAt("n3", "127.0.0.1:1")
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if c, err := leader.Confirm(ctx, false); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("confirmed %v, err %v, counting itself during its restart hold", c, err)
		}
		endRestartHold(leader)
		mustConfirmNow(t, leader)
	})
}

// mustConfirmNow confirms c's leadership with a round, within testWait.
func mustConfirmNow(t *testing.T, c *Confirmer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	if _, err := c.Confirm(ctx, false); err != nil {
		t.Fatalf("a round once no promise holds: %v, want it confirmed", err)
	}
}
