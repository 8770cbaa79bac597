//go:build unix

package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExited reports a node whose process ended by itself, and not one
// the cluster killed.
func TestExited(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-ordo")
	// $3 is the node id (serve --id <id> ...).
	script := "#!/bin/sh\ncase \"$3\" in\nn1) echo 'ordo serve: join: permission denied' >&2; exit 1;;\n*) exec sleep 30;;\nesac\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{cfg: ClusterConfig{Binary: bin, Dir: dir, Logf: t.Logf}}
	for _, name := range []string{"n1", "n2", "n3"} {
		n := &Node{Name: name, LogFile: filepath.Join(dir, name+".log")}
		c.Nodes = append(c.Nodes, n)
		if err := c.start(n); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			c.Kill(n)
		}
	})
	if err := c.Kill(c.Nodes[1]); err != nil { // n2: killed on purpose
		t.Fatal(err)
	}
	select {
	case <-c.Nodes[0].done:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake n1 did not exit")
	}
	got := c.Exited()
	if len(got) != 1 || !strings.HasPrefix(got[0], "n1: exit status 1") || !strings.Contains(got[0], "permission denied") {
		t.Fatalf("Exited() = %q, want n1 alone, with its status and last log line", got)
	}
}
