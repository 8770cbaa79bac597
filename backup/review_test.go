package backup

// Review findings (issue 24): each test states what the design claims and
// fails while the code does not keep it.

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/startup"
)

// A restore keeps only W: the restored state has no dead spans and its
// frontier at the restored mark, so every tick below the mark reads as
// "completed". A handle carries no cluster id (r1.<first>.<count>), so a
// writer that held a reservation across the restore, one that had
// already EXPIRED in the old cluster (readers passed it there), completes
// it on the restored cluster with success, and `ordo complete` exits 0:
// "once expired, a reservation stays expired ... forever, from every
// node" does not survive a restore, and client.Complete's contract
// (publish only after success) then publishes below a position readers
// already passed. A handle of the old cluster should answer expired (or
// not found) here, never completed.
func TestReviewRestoredClusterDoesNotCompleteAnExpiredHandle(t *testing.T) {
	taken := time.Now()
	l := layout.MustPreset("default")
	hw := l.TickAt(taken)
	// In the old cluster, reservation [hw-10, hw-8) expired and W passed
	// it: the backup says W = hw-5.
	expired := api.Handle{First: hw - 10, Count: 2}
	b, err := NewFile(&api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: hw, Members: map[string]string{"n1": "127.0.0.1:1"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: taken.UnixMilli(),
		ReserveWindowMs: 3000, LeadBoundTicks: 40960000, MaxCount: 100_000, WatermarkTick: hw - 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseFile(mustMarshal(t, b))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := Restore(RestoreOptions{Backup: parsed, DataDir: dir, ID: "r1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", Jump: time.Minute, Now: func() time.Time { return taken }}); err != nil {
		t.Fatal(err)
	}
	st, err := startup.StoredState(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil, nil)
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	// The writer's Complete, as the restored cluster's leader commits it.
	e, err := fsm.Entry(fsm.Command{Op: fsm.OpSettle, Frontier: st.Tracking.Frontier,
		Tracks: []fsm.Track{{Do: fsm.DoComplete, First: expired.First, Count: expired.Count}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Index, e.Term = 2, 2
	res := f.Apply(&e).(fsm.Result)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if o := res.Outcomes[0]; o.Err == nil && o.Fate == fsm.FateCompleted {
		t.Fatalf("Complete of %s, expired in the backed-up cluster, on the restored one: %s; want expired or not found", expired, o.Fate)
	}
}
