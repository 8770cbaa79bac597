package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/seed-e8569b35/ordo/startup"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/bbolt"
)

// logBuffer collects a node's log lines for a test to search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// openAndClose opens a node on dir, with its warnings copied into logs,
// and closes it again.
func openAndClose(t *testing.T, dir string, logs io.Writer) {
	t.Helper()
	cfg := testConfig(t, "n1", dir)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Warn, Output: io.MultiWriter(logs, testWriter{t})})
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

func dirMode(t *testing.T, dir string) os.FileMode {
	t.Helper()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// TestDataDirMode: Open creates a missing data dir (and its missing
// parents) with mode 0700, takes group and other permissions away from an
// existing one with a warning that names it, and leaves a private one, and
// the modes of parents that already exist, alone.
func TestDataDirMode(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permission bits")
	}
	const warning = "data dir was open to group or others"
	t.Run("created", func(t *testing.T) {
		parent := t.TempDir()
		if err := os.Chmod(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "new", "data")
		logs := &logBuffer{}
		openAndClose(t, dir, logs)
		for _, d := range []string{filepath.Dir(dir), dir} {
			if m := dirMode(t, d); m != 0o700 {
				t.Errorf("Open created %s with mode %04o, want 0700", d, m)
			}
		}
		if m := dirMode(t, parent); m != 0o755 {
			t.Errorf("Open changed the existing parent %s to mode %04o", parent, m)
		}
		if strings.Contains(logs.String(), warning) {
			t.Errorf("a new data dir was reported as open to others:\n%s", logs)
		}
	})
	for _, mode := range []os.FileMode{0o750, 0o755, 0o777, 0o701, 0o710} {
		t.Run(fmt.Sprintf("existing %04o", mode), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			logs := &logBuffer{}
			openAndClose(t, dir, logs)
			if m := dirMode(t, dir); m != 0o700 {
				t.Errorf("data dir of mode %04o is %04o after Open, want 0700", mode, m)
			}
			if got := logs.String(); !strings.Contains(got, warning) || !strings.Contains(got, dir) {
				t.Errorf("no warning naming %s after tightening it:\n%s", dir, got)
			}
			// Once private, a restart has nothing to report.
			again := &logBuffer{}
			openAndClose(t, dir, again)
			if strings.Contains(again.String(), warning) {
				t.Errorf("warned again about a private data dir:\n%s", again)
			}
		})
	}
	t.Run("owner only", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		logs := &logBuffer{}
		openAndClose(t, dir, logs)
		if m := dirMode(t, dir); m != 0o700 {
			t.Errorf("private data dir is %04o after Open, want 0700", m)
		}
		if strings.Contains(logs.String(), warning) {
			t.Errorf("warned about a private data dir:\n%s", logs)
		}
	})
}

// TestCorruptLogStoreRefused damages the Raft log file of a data dir that
// a node ran on (garbage, truncation, damaged pages, a lost file next to
// snapshots) and checks that Open and startup.HasState refuse it with startup.ErrCorrupt
// and an error naming the file, twice in a row (so no failed attempt
// "repairs" the file into something that opens), and do not panic. An
// intact copy of the same data dir opens and serves IDs above the ones
// handed out before, so the copies are sound and the damage is what the
// refusals are about.
func TestCorruptLogStoreRefused(t *testing.T) {
	good := t.TempDir()
	cfg := testConfig(t, "n1", good)
	n := mustBootstrap(t, cfg)
	last := mustIncrease(t, 0, mustNext(t, n.GRPCAddr(), 100))
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	last = mustIncrease(t, last, mustNext(t, n.GRPCAddr(), 100))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	goodDB := filepath.Join(good, startup.LogStoreFile)
	pageSize, need := boltSize(t, goodDB)
	info, err := os.Stat(goodDB)
	if err != nil {
		t.Fatal(err)
	}
	size := info.Size()
	t.Logf("raft.db: %d bytes, pages of %d bytes reach to byte %d", size, pageSize, need)

	// garbage returns n bytes that no database starts with.
	garbage := func(n int64) []byte {
		r := rand.New(rand.NewPCG(1, 2))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	// overwrite replaces the bytes from off on with b(len).
	overwrite := func(off int64, b func(int64) []byte) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(b(size-off), off); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncate := func(to int64) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.Truncate(path, to); err != nil {
				t.Fatal(err)
			}
		}
	}
	ones := func(n int64) []byte { return bytes.Repeat([]byte{0xff}, int(n)) }
	zeros := func(n int64) []byte { return make([]byte, n) }
	metas := 2 * pageSize // BoltDB's two meta pages, then the data

	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string // in the error, besides the file and startup.ErrCorrupt
	}{
		{"garbage", overwrite(0, garbage), ""},
		{"text", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("this is not a database\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"meta pages zeroed", overwrite(0, func(int64) []byte { return zeros(metas) }), ""},
		{"truncated to one page", truncate(pageSize), ""},
		{"truncated to the meta pages", truncate(metas), "truncated"},
		{"truncated by one page", truncate(need - pageSize), "truncated"},
		{"truncated by one byte", truncate(need - 1), "truncated"},
		{"data pages garbage", overwrite(metas, garbage), ""},
		{"data pages 0xff", overwrite(metas, ones), ""},
		{"data pages zeroed", overwrite(metas, zeros), ""},
		{"emptied next to snapshots", truncate(0), "snapshot"},
		{"deleted next to snapshots", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, "snapshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.CopyFS(dir, os.DirFS(good)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, startup.LogStoreFile)
			tt.damage(t, path)
			for attempt := 1; attempt <= 2; attempt++ {
				n, err := Open(testConfig(t, "n1", dir))
				if err == nil {
					n.Close()
					t.Fatalf("attempt %d: Open of a data dir whose raft.db is damaged (%s) succeeded", attempt, tt.name)
				}
				checkCorrupt(t, err, path, tt.want)
				has, err := startup.HasState(dir)
				if err == nil {
					t.Fatalf("attempt %d: startup.HasState = %t, nil on a damaged raft.db (%s)", attempt, has, tt.name)
				}
				checkCorrupt(t, err, path, tt.want)
			}
		})
	}

	t.Run("intact copy", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.CopyFS(dir, os.DirFS(good)); err != nil {
			t.Fatal(err)
		}
		if has, err := startup.HasState(dir); err != nil || !has {
			t.Fatalf("startup.HasState of an intact copy = %t, %v; want true", has, err)
		}
		n := mustOpen(t, testConfig(t, "n1", dir))
		mustIncrease(t, last, mustNext(t, n.GRPCAddr(), 1))
	})
}

// checkCorrupt fails t unless err is startup.ErrCorrupt, names path, says the
// data dir is corrupt, and contains want.
func checkCorrupt(t *testing.T, err error, path, want string) {
	t.Helper()
	msg := err.Error()
	if !errors.Is(err, startup.ErrCorrupt) || !strings.Contains(msg, path) || !strings.Contains(msg, "data dir is corrupt") || !strings.Contains(msg, want) {
		t.Fatalf("error %q: want startup.ErrCorrupt naming %s and saying %q", msg, path, want)
	}
}

// boltSize returns the page size of the BoltDB file at path and the size
// its pages need, as its header records them.
func boltSize(t *testing.T, path string) (pageSize, need int64) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		pageSize, need = int64(db.Info().PageSize), tx.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pageSize, need
}
