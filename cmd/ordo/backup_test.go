package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/seed-e8569b35/ordo/backup"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/server"
)

func testNode(t *testing.T, id, dir, raftAddr string) *server.Node {
	t.Helper()
	l := layout.MustPreset("default")
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	n, err := server.Open(server.Config{
		ID: id, DataDir: dir, RaftAddr: raftAddr, GRPCAddr: "127.0.0.1:0", Layout: l, Raft: rc,
		Logger: hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: os.Stderr}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func nextIDs(t *testing.T, addr string, count int) []uint64 {
	t.Helper()
	c, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids, err := c.NextN(ctx, count)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestBackupRestoreCommands runs ordo backup and ordo restore against a
// one-node cluster, and a node started on the restored data dir.
func TestBackupRestoreCommands(t *testing.T) {
	oldDir := t.TempDir()
	old := testNode(t, "n1", oldDir, "127.0.0.1:0")
	if err := old.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	ids := nextIDs(t, old.GRPCAddr(), 100)
	file := filepath.Join(t.TempDir(), "backup.json")
	if err := runBackup([]string{"--addrs", old.GRPCAddr(), "--out", file}); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, nextIDs(t, old.GRPCAddr(), 100)...)
	last := ids[len(ids)-1]

	raftAddr := freeaddr.Loopback(t, 1)[0]
	newDir := filepath.Join(t.TempDir(), "r1")
	restore := func(extra ...string) error {
		return runRestore(append([]string{"--backup", file, "--data-dir", newDir, "--id", "r1",
			"--raft-addr", raftAddr, "--grpc-addr", "127.0.0.1:7999", "--timeout", "3s"}, extra...))
	}
	if err := restore(); !errors.Is(err, backup.ErrClusterAlive) {
		t.Fatalf("restore with the old cluster alive: %v, want ErrClusterAlive", err)
	}
	// --force restores anyway (here into a data dir that is then unused).
	if err := runRestore([]string{"--backup", file, "--data-dir", filepath.Join(t.TempDir(), "forced"), "--id", "r1",
		"--raft-addr", raftAddr, "--grpc-addr", "127.0.0.1:7999", "--timeout", "3s", "--force"}); err != nil {
		t.Fatalf("restore --force with the old cluster alive: %v", err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := runRestore([]string{"--backup", file, "--data-dir", oldDir, "--id", "r1", "--raft-addr", raftAddr, "--grpc-addr", "127.0.0.1:7999"}); !errors.Is(err, backup.ErrHasState) {
		t.Fatalf("restore over the old data dir: %v, want ErrHasState", err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(damaged, []byte(strings.Replace(string(data), `"high_water": "`, `"high_water": "1`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runRestore([]string{"--backup", damaged, "--data-dir", newDir, "--id", "r1", "--raft-addr", raftAddr, "--grpc-addr", "127.0.0.1:7999"}); !errors.Is(err, backup.ErrBadBackup) {
		t.Fatalf("restore from a damaged file: %v, want ErrBadBackup", err)
	}
	if err := restore("--jump", "10m"); err != nil {
		t.Fatal(err)
	}

	r1 := testNode(t, "r1", newDir, raftAddr)
	first := nextIDs(t, r1.GRPCAddr(), 1)[0]
	if first <= last {
		t.Fatalf("the restored cluster's first ID %d is not above the old cluster's last %d", first, last)
	}
}
