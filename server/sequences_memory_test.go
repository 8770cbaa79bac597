package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/eventually"
)

// TestManySequencesCostLittle: 10,000 named sequences, half dense and
// half of a layout, each of which has handed out IDs, cost the leader
// under 100 MB of heap in use and a snapshot under 10 MB (issue 25). The
// bounds are sizes, not times: a slow machine takes longer, not more.
func TestManySequencesCostLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 sequences")
	}
	const count = 10_000
	n, conn := mustSingleNode(t, nil)
	seq := api.NewSequencerClient(conn)
	eventually.True(t, seqTestWait, "the cluster version that reads sequences", func() bool { return n.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := heapNow()
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 64 { // enough at once that each commit carries many
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < count; i = next.Add(1) - 1 {
				name, kind := fmt.Sprintf("s-%d", i), "dense"
				if i%2 == 1 {
					kind = "default"
				}
				if err := n.CreateSequence(ctx, &api.CreateSequenceRequest{Name: name, Kind: kind}); err != nil {
					failed.Store(fmt.Errorf("create %s: %w", name, err))
					return
				}
				if _, err := seq.Next(ctx, &api.NextRequest{Count: 10, Sequence: name}); err != nil {
					failed.Store(fmt.Errorf("next of %s: %w", name, err))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	after := heapNow()
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d sequences: heap in use %+.1f MB (live objects %+.1f MB)", count,
		float64(grown)/1e6, (float64(after.HeapAlloc)-float64(before.HeapAlloc))/1e6)
	if grown > 100e6 {
		t.Fatalf("%d sequences grew the heap in use by %.1f MB, over 100 MB", count, float64(grown)/1e6)
	}
	snap := snapshotSize(t, n)
	t.Logf("snapshot of %d sequences: %.2f MB", count, float64(snap)/1e6)
	if snap > 10e6 {
		t.Fatalf("snapshot of %d sequences is %.1f MB, over 10 MB", count, float64(snap)/1e6)
	}
}
