package backup

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/startup"
)

// A backup carries each named sequence's W; one above its sequence's
// mark is damage; a copy written without it (before named reservations)
// still reads. A restore starts every named sequence's W, frontier and
// forgotten mark at its restored mark: its W never goes down, and a
// handle of the old cluster is "no longer known", not "completed".
func TestBackupCarriesEachSequencesW(t *testing.T) {
	taken := time.Now()
	l := layout.MustPreset("default")
	resp := &api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: l.TickAt(taken), Members: map[string]string{"n1": "127.0.0.1:1"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: taken.UnixMilli(),
		ReserveWindowMs: 3000, LeadBoundTicks: 40960000, MaxCount: 100_000,
		Sequences:          []*api.SequenceInfo{{Name: "orders", Kind: "dense", Start: 1, Next: 500}, {Name: "t1", Kind: "default", Group: 4, Next: 10}},
		SequenceWatermarks: map[string]uint64{"orders": 480, "t1": 10},
	}
	b, err := NewFile(resp)
	if err != nil {
		t.Fatal(err)
	}
	if b.Sequences[0].Watermark != "480" || b.Sequences[1].Watermark != "10" {
		t.Fatalf("copies %+v, want each sequence's W", b.Sequences)
	}
	resp.SequenceWatermarks["orders"] = 501
	if _, err := NewFile(resp); !errors.Is(err, ErrBadBackup) || !strings.Contains(err.Error(), "watermark") {
		t.Fatalf("a W above its sequence's mark: %v, want ErrBadBackup", err)
	}
	resp.SequenceWatermarks = nil
	old, err := NewFile(resp)
	if err != nil || old.Sequences[0].Watermark != "" {
		t.Fatalf("a copy without the sequences' W: %+v, %v", old, err)
	}
	if _, err := parseFile(mustMarshal(t, old)); err != nil {
		t.Fatalf("a copy without the sequences' W does not read: %v", err)
	}
	parsed, err := parseFile(mustMarshal(t, b))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := Restore(RestoreOptions{Backup: parsed, DataDir: dir, ID: "r1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2",
		Jump: time.Minute, DenseSkip: 1000, Now: func() time.Time { return taken }}); err != nil {
		t.Fatal(err)
	}
	f := restoredFSM(t, dir)
	for name, seq := range f.Sequences() {
		w, _ := f.SequenceSettled(name)
		tk, ok := f.TrackedSequence(name)
		if !ok || w != seq.Next || tk.Frontier != seq.Next || tk.Forgotten != seq.Next {
			t.Fatalf("%s restored with W %d, tracking %+v; want W, frontier and forgotten at its mark %d", name, w, tk, seq.Next)
		}
	}
	e, err := fsm.Entry(fsm.Command{Op: fsm.OpSettle, Tracks: []fsm.Track{{Do: fsm.DoComplete, Seq: "orders", First: 470, Count: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	e.Index, e.Term = 10, 2
	if res := f.Apply(&e).(fsm.Result); res.Err != nil || !errors.Is(res.Outcomes[0].Err, fsm.ErrForgotten) {
		t.Fatalf("complete of an old cluster's reservation after a restore: %+v, want fsm.ErrForgotten", res)
	}
}

// restoredFSM is the FSM of the snapshot a restore wrote.
func restoredFSM(t *testing.T, dir string) *fsm.FSM {
	t.Helper()
	store, snaps, err := startup.OpenStores(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("snapshots: %v, %v", metas, err)
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil, nil)
	if err := f.Restore(rc); err != nil {
		t.Fatal(err)
	}
	return f
}
