package server

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/settle"
)

// TestManyOpenReservationsCostLittle: the default maximum of open
// reservations, 100,000, costs the leader under 50 MB of heap and a
// snapshot under 10 MB (issue 24); a backup carries W, not the open
// reservations, so it does not grow with them. Each reservation holds
// one ID and lives an hour, so none expires during the test however
// slow the machine, and the bounds are far from what it measures.
func TestManyOpenReservationsCostLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 100,000 reservations")
	}
	n, conn := mustSingleNode(t, nil)
	reserveVia(t, api.NewSequencerClient(conn), 1, 3_600_000) // once the cluster version allows it
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	backupBefore := backupSize(ctx, t, n)
	before := heapNow()
	openReservations(ctx, t, n, settle.DefaultMaxOpen-1)
	after := heapNow()
	if open := n.settler.Stats().Open; open != settle.DefaultMaxOpen {
		t.Fatalf("%d reservations open, want %d", open, settle.DefaultMaxOpen)
	}
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("%d open reservations: heap in use %+.1f MB (live objects %+.1f MB)", settle.DefaultMaxOpen,
		float64(grown)/1e6, (float64(after.HeapAlloc)-float64(before.HeapAlloc))/1e6)
	if grown > 50e6 {
		t.Fatalf("%d open reservations grew the heap in use by %.1f MB, over 50 MB", settle.DefaultMaxOpen, float64(grown)/1e6)
	}
	snap := snapshotSize(t, n)
	backupAfter := backupSize(ctx, t, n)
	t.Logf("snapshot %.2f MB; backup %d bytes (%d before the reservations)", float64(snap)/1e6, backupAfter, backupBefore)
	if snap > 10e6 {
		t.Fatalf("snapshot of %d open reservations is %.1f MB, over 10 MB", settle.DefaultMaxOpen, float64(snap)/1e6)
	}
	if backupAfter > backupBefore+64 {
		t.Fatalf("the backup grew from %d to %d bytes with the open reservations, which it does not carry", backupBefore, backupAfter)
	}
}

// openReservations opens count reservations of one ID on n's settler,
// from enough callers at once that each entry carries many.
func openReservations(ctx context.Context, t *testing.T, n *Node, count int64) {
	t.Helper()
	var left atomic.Int64
	left.Store(count)
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 1024 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if _, err := n.settler.Reserve(ctx, 1, time.Hour); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("reserve: %v", err)
	}
}

// heapNow is the heap after a full collection.
func heapNow() runtime.MemStats {
	runtime.GC()
	runtime.GC() // the first may leave finalised objects for the second
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// snapshotSize takes a snapshot of n and returns its size on disk.
func snapshotSize(t *testing.T, n *Node) int64 {
	t.Helper()
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	list, err := n.snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("list snapshots: %d, %v", len(list), err)
	}
	return list[0].Size
}

// backupSize is the size of a backup file of n.
func backupSize(ctx context.Context, t *testing.T, n *Node) int {
	t.Helper()
	resp, err := n.Backup(ctx)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	f, err := backup.NewFile(resp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}
