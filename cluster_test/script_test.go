//go:build unix

package cluster_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/verify"
)

// scriptTimeout bounds one run of scripts/cluster.sh: an `up` that
// waits its longest (30 s) and stops what it started.
const scriptTimeout = 90 * time.Second

// clusterScript runs scripts/cluster.sh on free ports, with its data in a
// temp dir and the test's ordo binary.
type clusterScript struct {
	t     *testing.T
	dir   string
	env   []string
	addrs string
	grpc  []string // n1..n3's gRPC addresses
}

func newClusterScript(t *testing.T) *clusterScript {
	t.Helper()
	addrs := freeaddr.Loopback(t, 9)
	ports := make([]string, len(addrs))
	for i, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	s := &clusterScript{t: t, dir: t.TempDir(), grpc: addrs[:3], addrs: strings.Join(addrs[:3], ",")}
	s.env = append(verify.NodeEnv(),
		"ORDO_CLUSTER_DIR="+s.dir,
		"ORDO_CLUSTER_BIN="+ordoBin,
		"ORDO_CLUSTER_GRPC_PORTS="+strings.Join(ports[0:3], ","),
		"ORDO_CLUSTER_RAFT_PORTS="+strings.Join(ports[3:6], ","),
		"ORDO_CLUSTER_HTTP_PORTS="+strings.Join(ports[6:9], ","),
	)
	t.Cleanup(s.cleanup)
	return s
}

// run runs the script with args and returns its output and exit code.
func (s *clusterScript) run(args ...string) cliResult {
	s.t.Helper()
	return runCommand(s.t, scriptTimeout, s.env, "bash", append([]string{filepath.Join("..", "scripts", "cluster.sh")}, args...)...)
}

// mustUp runs `up` with args and fails the test unless the script says
// the cluster is up with layout.
func (s *clusterScript) mustUp(layout string, args ...string) {
	s.t.Helper()
	res := s.run(append([]string{"up"}, args...)...)
	if res.Code != 0 || !strings.Contains(res.Stdout, "Ordo is up: three nodes, layout "+layout+",") {
		s.t.Fatalf("cluster.sh up %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	}
}

// mustFailUp runs `up` with args and fails the test unless it fails
// within within, says nothing of a cluster that is up, leaves no node it
// started running, and its stderr holds every one of wantIn.
func (s *clusterScript) mustFailUp(within time.Duration, wantIn []string, args ...string) {
	s.t.Helper()
	start := time.Now()
	res := s.run(append([]string{"up"}, args...)...)
	took := time.Since(start)
	if res.Code == 0 || strings.Contains(res.Stdout, "Ordo is up") {
		s.t.Fatalf("cluster.sh up %s: exit %d, want a failure\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range wantIn {
		if !strings.Contains(res.Stderr, want) {
			s.t.Errorf("cluster.sh up %s: stderr lacks %q:\n%s", strings.Join(args, " "), want, res.Stderr)
		}
	}
	if took > within {
		s.t.Errorf("cluster.sh up %s: failed after %v, want within %v", strings.Join(args, " "), took.Round(time.Millisecond), within)
	}
	if pids := s.pids(); len(pids) > 0 {
		s.t.Errorf("cluster.sh up %s failed and left nodes running: pids %v", strings.Join(args, " "), pids)
	}
}

// pids are the nodes' processes that are alive, by the script's pid
// files.
func (s *clusterScript) pids() []int {
	var pids []int
	for _, n := range []string{"n1", "n2", "n3"} {
		b, err := os.ReadFile(filepath.Join(s.dir, n+".pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && syscall.Kill(pid, 0) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cleanup stops the nodes with `down`, and kills any it left.
func (s *clusterScript) cleanup() {
	if res := s.run("down"); res.Code != 0 {
		s.t.Errorf("cluster.sh down: exit %d: %s", res.Code, res.Stderr)
	}
	for _, pid := range s.pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestClusterScript runs scripts/cluster.sh up and down on real
// processes: `up --layout` creates the cluster with that layout and later
// `up`s reuse it; another --layout is refused at once; a node that exits
// while the cluster starts (a layout the data dir does not hold, a port
// in use) fails `up` at once with the node's own error, stopping the
// nodes it started, and `up` never says the cluster is up then.
func TestClusterScript(t *testing.T) {
	s := newClusterScript(t)

	s.mustUp("ulid", "--layout", "ulid")
	res := mustRunOrdo(t, "next", "--addrs", s.addrs)
	if id := strings.TrimSpace(res.Stdout); len(id) != 26 {
		t.Fatalf("ordo next on the cluster of up --layout ulid: %q, want a ULID", id)
	}
	if res := s.run("down"); res.Code != 0 {
		t.Fatalf("cluster.sh down: exit %d: %s", res.Code, res.Stderr)
	}
	s.mustUp("ulid") // the recorded layout, not the default
	s.run("down")

	s.mustFailUp(5*time.Second, []string{"has layout ulid, not default", "clean"}, "--layout", "default")

	// A cluster dir from before the layout was recorded: the nodes start
	// with the default layout and exit, naming the mismatch.
	if err := os.Remove(filepath.Join(s.dir, "layout")); err != nil {
		t.Fatal(err)
	}
	s.mustFailUp(20*time.Second, []string{"exited while the cluster started", "layout mismatch", "up --layout L"})
	s.mustUp("ulid", "--layout", "ulid")
	s.run("down")

	// n3 cannot listen: n1 and n2 would serve IDs, but the cluster is not
	// three nodes up.
	l, err := net.Listen("tcp", s.grpc[2])
	if err != nil {
		t.Fatal(err)
	}
	s.mustFailUp(20*time.Second, []string{"n3 exited while the cluster started", "address already in use"})
	l.Close()
	s.mustUp("ulid")

	if res := s.run("up", "--layout"); res.Code != 2 || !strings.Contains(res.Stderr, "usage:") {
		t.Errorf("cluster.sh up --layout (no value): exit %d, stderr %q; want the usage, exit 2", res.Code, res.Stderr)
	}
}
