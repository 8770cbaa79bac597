package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
)

// TestNeverReturnsAnotherClustersIDs: a node of another cluster that
// answers (an older version that does not check the id the call names) is
// passed over, its IDs dropped, whether the client was pinned with
// WithClusterID or by its first answer.
func TestNeverReturnsAnotherClustersIDs(t *testing.T) {
	var ownAsked, otherAsked []string
	foreign := &fakeSeq{next: inCluster("other", &otherAsked, serve(&api.IDRun{First: 1 << 40, Count: 1, Step: 1}))}
	own := &fakeSeq{next: inCluster("ours", &ownAsked, counter())}
	foreignAddr, ownAddr := mustSequencer(t, foreign), mustSequencer(t, own)

	t.Run("pinned by option", func(t *testing.T) {
		c := mustNew(t, []string{foreignAddr, ownAddr}, WithClusterID("ours"))
		ctx := testCtx(t, 5*time.Second)
		if got := mustNextN(ctx, t, c, 1); got[0] >= 1<<40 {
			t.Fatalf("NextN = %v: an ID of the other cluster", got)
		}
		if foreign.nextCalls.Load() == 0 {
			t.Fatal("the test never reached the foreign node")
		}
		if !slices.Contains(otherAsked, "ours") {
			t.Errorf("the calls named clusters %v, want the pinned one", otherAsked)
		}
	})
	t.Run("pinned by the first answer", func(t *testing.T) {
		c := mustNew(t, []string{ownAddr, foreignAddr})
		ctx := testCtx(t, 5*time.Second)
		mustNextN(ctx, t, c, 1)
		if c.ClusterID() != "ours" {
			t.Fatalf("pinned to %q after the first answer, want ours", c.ClusterID())
		}
		c.moveOn(ownAddr, foreignAddr) // a stale hint to the other cluster
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		for {
			ids, err := c.NextN(short, 1)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrOtherCluster) {
					t.Fatalf("NextN: %v", err)
				}
				break
			}
			if ids[0] >= 1<<40 {
				t.Fatalf("NextN = %v: an ID of the other cluster", ids)
			}
			if short.Err() != nil {
				break
			}
		}
	})
}

// TestClientStaysWithItsCluster: a client pinned to cluster "ours" and
// given the address of a node of another cluster first never returns that
// cluster's IDs, on the default stream as on unary calls, whether that
// node refuses its calls or answers them anyway.
func TestClientStaysWithItsCluster(t *testing.T) {
	const foreignIDs = 1 << 40
	for _, refuse := range []bool{true, false} {
		for _, unary := range []bool{false, true} {
			name := fmt.Sprintf("refuses=%t/unary=%t", refuse, unary)
			t.Run(name, func(t *testing.T) {
				foreign := &clusterNode{id: "other", refuse: refuse, first: foreignIDs}
				own := &clusterNode{id: "ours", refuse: true, first: 1}
				foreignAddr, ownAddr := mustSequencer(t, foreign), mustSequencer(t, own)
				opts := []Option{WithClusterID("ours"), WithBackoff(time.Millisecond, 10*time.Millisecond)}
				if unary {
					opts = append(opts, WithUnary())
				}
				c := mustClient(t, []string{foreignAddr, ownAddr}, opts...)
				ctx := testCtx(t, 5*time.Second)
				var last uint64
				for range 10 {
					ids := mustNextN(ctx, t, c, 3)
					if ids[0] >= foreignIDs || ids[0] <= last {
						t.Fatalf("NextN = %v after %d: not this cluster's next IDs", ids, last)
					}
					last = ids[2]
				}
				if foreign.calls.Load() == 0 {
					t.Fatal("the client never reached the other cluster's node")
				}
				if refuse && foreign.refused.Load() == 0 {
					t.Error("the other cluster's node never refused a call: the calls did not name the client's cluster")
				}
				if c.ClusterID() != "ours" {
					t.Errorf("client pinned to %q, want ours", c.ClusterID())
				}
			})
		}
	}
}
