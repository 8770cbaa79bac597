package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/seed-e8569b35/ordo/api"
)

// inCluster answers like next, naming cluster id in the header as a node
// does; it records the cluster each call asked for.
func inCluster(id string, asked *[]string, next func(context.Context, *api.NextRequest) (*api.NextResponse, error)) func(context.Context, *api.NextRequest) (*api.NextResponse, error) {
	return func(ctx context.Context, req *api.NextRequest) (*api.NextResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		*asked = append(*asked, md.Get(api.ClusterIDKey)...)
		_ = grpc.SetHeader(ctx, metadata.Pairs(api.ClusterIDKey, id))
		return next(ctx, req)
	}
}

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
