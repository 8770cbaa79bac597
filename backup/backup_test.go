package backup

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/grpcapi"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/sequencer"
	"github.com/seed-e8569b35/ordo/startup"
)

// TestFileRefusesDamage: a file whose content does not match its
// checksum, of another version, or not a backup at all, is refused.
func TestFileRefusesDamage(t *testing.T) {
	b, err := NewFile(&api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: 123456789, Members: map[string]string{"n1": "127.0.0.1:7001"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: time.Now().UnixMilli(),
		ReserveWindowMs: 3000, LeadBoundTicks: 40960000, MaxCount: 100_000, WatermarkTick: 1000,
		Sequences: []*api.SequenceInfo{{Name: "orders", Kind: "dense", Start: 1, Next: 77}},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseFile(data); err != nil {
		t.Fatalf("an intact backup: %v", err)
	}
	good := string(data)
	for name, bad := range map[string]string{
		"high-water changed": strings.Replace(good, `"123456789"`, `"123456788"`, 1),
		"member changed":     strings.Replace(good, "7001", "7002", 1),
		"checksum removed":   strings.Replace(good, `"checksum"`, `"checksum_"`, 1),
		"other version":      strings.Replace(good, `"version": 4`, `"version": 5`, 1),
		"no version":         strings.Replace(good, `"version": 4,`, ``, 1),
		"watermark changed":  strings.Replace(good, `"watermark": "1000"`, `"watermark": "1001"`, 1),
		"watermark in v2":    strings.Replace(good, `"version": 4`, `"version": 2`, 1),
		"sequences in v3":    strings.Replace(good, `"version": 4`, `"version": 3`, 1),
		"sequence changed":   strings.Replace(good, `"next": "77"`, `"next": "78"`, 1),
		"window changed":     strings.Replace(good, `"reserve_window_ms": 3000`, `"reserve_window_ms": 300`, 1),
		"truncated":          good[:len(good)/2],
		"trailing data":      good + "{}",
		"empty":              "",
	} {
		if bad == good {
			t.Fatalf("%s: the test did not change the file", name)
		}
		if _, err := parseFile([]byte(bad)); !errors.Is(err, ErrBadBackup) {
			t.Errorf("%s: %v, want ErrBadBackup", name, err)
		}
	}
	if _, err := parseFile([]byte(strings.Replace(good, `"version": 4`, `"version": 5`, 1))); err == nil || !strings.Contains(err.Error(), "version 5") {
		t.Errorf("another version: %v, want it named", err)
	}

	// Restore refuses a damaged file too.
	path := filepath.Join(t.TempDir(), "b.json")
	if err := os.WriteFile(path, []byte(strings.Replace(good, "c0ffee", "c0ffef", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); !errors.Is(err, ErrBadBackup) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a corrupted file: %v, want a checksum mismatch", err)
	}
}

// TestRestoreRefusesWhatTheAdminServiceRefuses: a node is not restored
// under an id or at an address the Admin service would refuse (it could
// never serve or be joined), and the data dir stays empty.
func TestRestoreRefusesWhatTheAdminServiceRefuses(t *testing.T) {
	b, err := NewFile(&api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: 1, Members: map[string]string{"n1": "127.0.0.1:1"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: time.Now().UnixMilli(),
		ReserveWindowMs: 3000, LeadBoundTicks: 1, MaxCount: 100_000,
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]RestoreOptions{
		"id with a slash":    {ID: "r/1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2"},
		"wildcard raft addr": {ID: "r1", RaftAddr: "0.0.0.0:1", GRPCAddr: "127.0.0.1:2"},
		"gRPC addr, no port": {ID: "r1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1"},
	} {
		o.Backup, o.DataDir, o.Jump = b, t.TempDir(), time.Minute
		if _, err := Restore(o); !errors.Is(err, startup.ErrBadConfig) || !errors.Is(err, grpcapi.ErrBadRequest) {
			t.Errorf("%s: %v, want startup.ErrBadConfig and grpcapi.ErrBadRequest", name, err)
		}
		if has, err := startup.HasState(o.DataDir); err != nil || has {
			t.Errorf("%s: the data dir holds state (%v)", name, err)
		}
	}
}

// TestRestoreTakesTheBackupsBounds: a restore's margin counts the old
// leader's reserve window and lead bound as the backup recorded them when
// they are larger than the restore's own; a version 1 backup, which has
// none, restores with the restore's window, as before.
func TestRestoreTakesTheBackupsBounds(t *testing.T) {
	l := layout.MustPreset("default")
	taken := time.Now()
	wide := time.Minute // the old cluster's window, wider than the default
	resp := &api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: l.TickAt(taken), Members: map[string]string{"n1": "127.0.0.1:1"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: taken.UnixMilli(),
		ReserveWindowMs: wide.Milliseconds(), LeadBoundTicks: sequencer.MaxLeadTicks(l, wide), MaxCount: 100_000,
	}
	v2, err := NewFile(resp)
	if err != nil {
		t.Fatal(err)
	}
	v1 := *v2
	v1.Version, v1.ReserveWindowMs, v1.LeadBound, v1.MaxCount, v1.Watermark = 1, 0, "", 0, ""
	if v1.Checksum, err = v1.sum(); err != nil {
		t.Fatal(err)
	}
	data, err := v1.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "reserve_window") {
		t.Fatalf("a version 1 file names version 2 fields:\n%s", data)
	}
	now := func() time.Time { return taken }
	restore := func(b *File) uint64 {
		t.Helper()
		parsed, err := parseFile(mustMarshal(t, b))
		if err != nil {
			t.Fatalf("version %d: %v", b.Version, err)
		}
		res, err := Restore(RestoreOptions{Backup: parsed, DataDir: t.TempDir(), ID: "r1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", Jump: time.Minute, Now: now})
		if err != nil {
			t.Fatalf("restore version %d: %v", b.Version, err)
		}
		return res.HighWater
	}
	if got, want := restore(v2), l.TickAt(taken)+l.TicksIn(wide)+sequencer.MaxLeadTicks(l, wide)+l.TicksIn(time.Minute); got != want {
		t.Errorf("version 2 with a %s window: restored at %d, want %d (the recorded window and lead bound)", wide, got, want)
	}
	if got, want := restore(&v1), l.TickAt(taken)+l.TicksIn(DefaultReserveWindow)+sequencer.MaxLeadTicks(l, DefaultReserveWindow)+l.TicksIn(time.Minute); got != want {
		t.Errorf("version 1: restored at %d, want %d (the restore's own window)", got, want)
	}
}

func mustMarshal(t *testing.T, b *File) []byte {
	t.Helper()
	data, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRestoreHighWater(t *testing.T) {
	l := layout.MustPreset("default")
	now := time.Now()
	window := 3 * time.Second
	ahead := l.TicksIn(window + 10*time.Second) // window + max(2 window, 10 s)
	for _, tt := range []struct {
		name     string
		backup   uint64
		taken    time.Time
		jump     time.Duration
		wantBase uint64
	}{
		{"clock ahead of the backup", l.TickAt(now.Add(-time.Hour)), now.Add(-time.Hour), time.Hour, l.TickAt(now)},
		{"backup ahead of the clock", l.TickAt(now.Add(2 * time.Hour)), now, time.Hour, l.TickAt(now.Add(2 * time.Hour))},
		{"backup's leader clock ahead of this host", 1, now.Add(time.Minute), 0, l.TickAt(now.Add(time.Minute))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RestoreHighWater(l, tt.backup, tt.taken, now, tt.jump, window, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := tt.wantBase + ahead + l.TicksIn(tt.jump); got != want {
				t.Fatalf("got %d, want %d", got, want)
			}
		})
	}
	if _, err := RestoreHighWater(l, l.MaxTick()-10, now, now, time.Hour, window, 0); !errors.Is(err, sequencer.ErrTimeExhausted) {
		t.Fatalf("past the layout's end: %v", err)
	}
	if _, err := RestoreHighWater(l, 1, now, now, -time.Second, window, 0); err == nil {
		t.Fatal("a negative jump was accepted")
	}
}

// A restored cluster starts with W at its restored high-water mark: above
// the backup's W and every ID the old cluster handed out, so W never
// goes down across a restore. A W above the mark is a damaged backup.
func TestRestoreStartsWAtTheRestoredMark(t *testing.T) {
	taken := time.Now()
	l := layout.MustPreset("default")
	b, err := NewFile(&api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: l.TickAt(taken), Members: map[string]string{"n1": "127.0.0.1:1"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: taken.UnixMilli(),
		ReserveWindowMs: 3000, LeadBoundTicks: 40960000, MaxCount: 100_000, WatermarkTick: l.TickAt(taken) - 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseFile(mustMarshal(t, b))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := Restore(RestoreOptions{Backup: parsed, DataDir: dir, ID: "r1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", Jump: time.Minute, Now: func() time.Time { return taken }})
	if err != nil {
		t.Fatal(err)
	}
	st, err := startup.StoredState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Tracking.Settled != res.HighWater || st.Tracking.Frontier != res.HighWater || st.ClusterVersion != fsm.Reads {
		t.Fatalf("restored W %d, frontier %d, cluster version %d; want W and frontier at the mark %d, version %d",
			st.Tracking.Settled, st.Tracking.Frontier, st.ClusterVersion, res.HighWater, fsm.Reads)
	}
	b.Watermark = strconv.FormatUint(l.TickAt(taken)+1, 10)
	if b.Checksum, err = b.sum(); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFile(mustMarshal(t, b)); !errors.Is(err, ErrBadBackup) {
		t.Fatalf("a backup whose W is above its mark: %v, want ErrBadBackup", err)
	}
}

// A restore moves every named sequence past what the old cluster may have
// handed out after the backup: a layout one by the clock and the jump, a
// dense one by the operator's skip, without which it refuses and writes
// nothing.
func TestRestoreMovesNamedSequences(t *testing.T) {
	taken := time.Now()
	l := layout.MustPreset("default")
	b, err := NewFile(&api.BackupResponse{
		ClusterId: "c0ffee", Layout: "default", HighWater: l.TickAt(taken), Members: map[string]string{"n1": "127.0.0.1:1"},
		LeaderId: "n1", Term: 3, AppliedIndex: 42, TakenUnixMs: taken.UnixMilli(),
		ReserveWindowMs: 3000, LeadBoundTicks: 40960000, MaxCount: 100_000,
		Sequences: []*api.SequenceInfo{{Name: "orders", Kind: "dense", Start: 1, Next: 500}, {Name: "t1", Kind: "default", Group: 4, Next: 10}},
	})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseFile(mustMarshal(t, b))
	if err != nil {
		t.Fatal(err)
	}
	opts := RestoreOptions{Backup: parsed, DataDir: t.TempDir(), ID: "r1", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", Jump: time.Minute, Now: func() time.Time { return taken }}
	if _, err := Restore(opts); !errors.Is(err, fsm.ErrDenseSkip) {
		t.Fatalf("restore of a dense sequence without a skip: %v, want fsm.ErrDenseSkip", err)
	}
	if has, _ := startup.HasState(opts.DataDir); has {
		t.Fatal("a refused restore wrote the data dir")
	}
	opts.DenseSkip = 1000
	if _, err := Restore(opts); err != nil {
		t.Fatal(err)
	}
	seqs := restoredSequences(t, opts.DataDir)
	if d := seqs["orders"]; d == nil || d.Next != 1500 {
		t.Fatalf("dense sequence restored as %+v, want next 1500", d)
	}
	if s := seqs["t1"]; s == nil || s.Next < l.TickAt(taken.Add(time.Minute)) || s.Group != 4 {
		t.Fatalf("layout sequence restored as %+v, want group 4 and next past the clock plus the jump", s)
	}
}

// restoredSequences reads the named sequences from the snapshot a restore
// wrote.
func restoredSequences(t *testing.T, dir string) map[string]*fsm.Sequence {
	t.Helper()
	return restoredFSM(t, dir).Sequences()
}
