//go:build unix

package cluster_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
)

// Bounds of the Docker test's steps.
const (
	dockerInfoTimeout  = 20 * time.Second
	dockerBuildTimeout = 5 * time.Minute // a cold Go build cache is most of it
	dockerCmdTimeout   = 30 * time.Second
	dockerServeTimeout = 30 * time.Second // containers started → IDs served
	dockerHealTimeout  = 20 * time.Second // a fault → the cluster serves or rejoins
)

// dockerNode is one container of the Docker test.
type dockerNode struct {
	id        string // node id, network alias and advertised host name
	container string // unique container name
	hostAddr  string // 127.0.0.1:port published to the container's gRPC port
}

// dockerStatus is what `ordo status --json` prints, as far as the test
// needs it (64-bit numbers as strings, as in HTTP's /v1/status).
type dockerStatus struct {
	LeaderID string `json:"leader_id"`
	Nodes    []struct {
		ID            string `json:"id"`
		Role          string `json:"role"`
		Voter         bool   `json:"voter"`
		Term          uint64 `json:"term,string"`
		LastContactMs int64  `json:"last_contact_ms,string"`
		AppliedIndex  uint64 `json:"applied_index,string"`
		Error         string `json:"error"`
	} `json:"nodes"`
}

// TestDockerCluster runs the image that scripts/docker-build.sh builds: three
// containers FROM scratch on a private Docker network, configured only by
// ORDO_* environment variables as deploy/docker-compose.yml does, bound to
// 0.0.0.0 and advertising their network aliases. The host binary asks for
// IDs through ports published on 127.0.0.1. It stops a container (the
// leader), starts it again with its data, and cuts a container off the
// network and reconnects it; IDs must keep increasing throughout, both from
// the CLI and from a concurrent workload whose history is checked.
//
// It needs only the Docker engine (no compose, no registry: the image is
// FROM scratch) and is skipped when `docker info` fails or under -short.
func TestDockerCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the Docker test")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker not found")
	}
	if out, err := dockerRun(dockerInfoTimeout, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("docker engine not usable: %v: %s", err, strings.TrimSpace(out))
	}
	begin := time.Now()
	var suffix [4]byte
	rand.Read(suffix[:])
	name := "ordo-test-" + hex.EncodeToString(suffix[:])
	image := name + ":test"
	network := name

	// Cleanup is registered before anything is made, so a failure at any
	// step still removes what was made. t.Cleanup runs in reverse order:
	// containers go first, then the network, then the image.
	t.Cleanup(func() {
		if out, err := dockerRun(dockerCmdTimeout, "image", "rm", "-f", image); err != nil && !strings.Contains(out, "No such image") {
			t.Logf("cleanup: docker image rm %s: %v: %s", image, err, out)
		}
	})
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), dockerBuildTimeout)
	build := exec.CommandContext(ctx, filepath.Join(root, "scripts", "docker-build.sh"), image)
	build.Dir = root
	out, err := build.CombinedOutput()
	cancel()
	if err != nil {
		t.Fatalf("scripts/docker-build.sh %s: %v\n%s", image, err, out)
	}
	t.Logf("built image %s in %v", image, time.Since(t0).Round(time.Millisecond))

	t.Cleanup(func() {
		if out, err := dockerRun(dockerCmdTimeout, "network", "rm", network); err != nil && !strings.Contains(out, "not found") {
			t.Logf("cleanup: docker network rm %s: %v: %s", network, err, out)
		}
	})
	mustDocker(t, "network", "create", "--label", "ordo-test="+name, network)

	ports := freeaddr.Loopback(t, 3)
	nodes := make([]*dockerNode, 3)
	var peers, addrs []string
	for i := range nodes {
		n := &dockerNode{id: fmt.Sprintf("n%d", i+1), container: fmt.Sprintf("%s-n%d", name, i+1), hostAddr: ports[i]}
		nodes[i] = n
		peers = append(peers, fmt.Sprintf("%s=%s:7101@%s:7001", n.id, n.id, n.id))
		addrs = append(addrs, n.hostAddr)
	}
	addrList := strings.Join(addrs, ",")
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				out, _ := dockerRun(dockerCmdTimeout, "logs", "--tail", "60", n.container)
				t.Logf("---- last 60 lines of %s (%s) ----\n%s", n.container, n.id, out)
			}
		}
		for _, n := range nodes {
			// -v: the anonymous volume of the image's VOLUME /data too.
			if out, err := dockerRun(dockerCmdTimeout, "rm", "-f", "-v", n.container); err != nil && !strings.Contains(out, "No such container") {
				t.Logf("cleanup: docker rm %s: %v: %s", n.container, err, out)
			}
		}
	})
	// The containers are created first and then started together, as
	// `docker compose up` does: every node is given the same --bootstrap
	// list, and a node that first starts after the others already serve
	// IDs is refused (its empty data dir looks like one that lost its data).
	// The default Raft timers leave a second or more for that.
	for _, n := range nodes {
		mustDocker(t, "create", "--name", n.container, "--label", "ordo-test="+name,
			"--network", network, "--network-alias", n.id, "--hostname", n.id,
			"-p", n.hostAddr+":7001",
			"-e", "ORDO_ID="+n.id,
			"-e", "ORDO_RAFT_ADDR=0.0.0.0:7101", "-e", "ORDO_RAFT_ADVERTISE="+n.id+":7101",
			"-e", "ORDO_GRPC_ADDR=0.0.0.0:7001", "-e", "ORDO_GRPC_ADVERTISE="+n.id+":7001",
			"-e", "ORDO_BOOTSTRAP="+strings.Join(peers, ","),
			"-e", "ORDO_INSECURE=true",
			image)
	}
	errs := make(chan error, len(nodes))
	for _, n := range nodes {
		go func() {
			out, err := dockerRun(dockerCmdTimeout, "start", n.container)
			if err != nil {
				err = fmt.Errorf("docker start %s: %v: %s", n.container, err, out)
			}
			errs <- err
		}()
	}
	for range nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var started []string
	for _, n := range nodes {
		started = append(started, strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.State.StartedAt}}", n.container)))
	}
	t.Logf("containers started at %s", strings.Join(started, ", "))

	// last is the largest ID seen so far: every `ordo next` runs after the
	// previous one returned, so each must hand out larger IDs.
	var last uint64
	next := func(addrs string, what string) {
		t.Helper()
		res := mustRunOrdo(t, "next", "--addrs", addrs, "--count", "5", "--timeout", "10s")
		for _, f := range strings.Fields(res.Stdout) {
			id, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("%s: ordo next printed %q", what, res.Stdout)
			}
			if id <= last {
				t.Fatalf("%s: ID %d is not above the last ID %d", what, id, last)
			}
			last = id
		}
	}
	status := func() (*dockerStatus, error) {
		res := runOrdo(t, "status", "--addrs", addrList, "--json", "--timeout", "3s")
		if res.Code != 0 {
			return nil, fmt.Errorf("ordo status: exit %d: %s", res.Code, strings.TrimSpace(res.Stderr))
		}
		var st dockerStatus
		if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
			return nil, fmt.Errorf("ordo status --json: %v: %s", err, res.Stdout)
		}
		return &st, nil
	}
	waitStatus := func(what string, ok func(*dockerStatus) bool) *dockerStatus {
		t.Helper()
		start := time.Now()
		var lastSt *dockerStatus
		var lastErr error
		for time.Since(start) < dockerHealTimeout {
			st, err := status()
			if err == nil && ok(st) {
				t.Logf("%v: %s", time.Since(start).Round(time.Millisecond), what)
				return st
			}
			if err != nil {
				lastErr = err
			} else {
				lastSt = st
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("waited %v for %s; last status %+v; last error %v", dockerHealTimeout, what, lastSt, lastErr)
		return nil
	}
	node := func(id string) *dockerNode {
		t.Helper()
		for _, n := range nodes {
			if n.id == id {
				return n
			}
		}
		t.Fatalf("no node %q", id)
		return nil
	}
	// following reports whether st shows id following the current leader
	// in its term and hearing from it within the last second.
	following := func(st *dockerStatus, id string) bool {
		var term uint64
		for _, n := range st.Nodes {
			if n.ID == st.LeaderID && n.Role == "leader" {
				term = n.Term
			}
		}
		for _, n := range st.Nodes {
			if n.ID == id {
				return term > 0 && n.Role == "follower" && n.Voter && n.Error == "" && n.Term == term &&
					n.LastContactMs >= 0 && n.LastContactMs < 1000
			}
		}
		return false
	}
	allFollowing := func(st *dockerStatus) bool {
		f := 0
		for _, n := range nodes {
			if following(st, n.id) {
				f++
			}
		}
		return f == len(nodes)-1
	}

	// 1. The containers bootstrap the cluster and serve IDs.
	t0 = time.Now()
	for {
		res := runOrdo(t, "next", "--addrs", addrList, "--timeout", "1s")
		if res.Code == 0 {
			break
		}
		if time.Since(t0) > dockerServeTimeout {
			t.Fatalf("the containers serve no IDs within %v: %s", dockerServeTimeout, res.Stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("containers serve IDs %v after start", time.Since(t0).Round(time.Millisecond))
	st := waitStatus("a leader and two followers", allFollowing)
	for i := 0; i < 5; i++ {
		for _, n := range nodes {
			next(n.hostAddr, "through "+n.id) // a follower forwards to the leader
		}
	}

	// A concurrent workload runs through every fault below; its history is
	// checked at the end. Its clients are told leader addresses (n1:7001)
	// that do not resolve outside the Docker network, so they also find
	// their way through the published ports after a failed attempt.
	w := startWorkload(t, addrs, history.NewRecorder(), 0)
	w.mustAcks(20, dockerHealTimeout, "workload before the faults")

	// 2. Stop the leader (SIGTERM: it hands leadership over first). The
	// other two keep issuing IDs in order.
	stopped := node(st.LeaderID)
	t0 = time.Now()
	mustDocker(t, "stop", "-t", "10", stopped.container)
	t.Logf("stopped %s (the leader) in %v", stopped.id, time.Since(t0).Round(time.Millisecond))
	var others []string
	for _, n := range nodes {
		if n != stopped {
			others = append(others, n.hostAddr)
		}
	}
	for i := 0; i < 10; i++ {
		next(strings.Join(others, ","), "with "+stopped.id+" stopped")
	}
	w.mustAcks(20, dockerHealTimeout, "workload with "+stopped.id+" stopped")

	// 3. Start it again: its data dir holds state, so --bootstrap is
	// ignored and it rejoins as the member it was.
	mustDocker(t, "start", stopped.container)
	waitStatus(stopped.id+" following again after a restart", func(st *dockerStatus) bool { return allFollowing(st) && following(st, stopped.id) })
	next(stopped.hostAddr, "through the restarted "+stopped.id)

	// 4. Cut the current leader off the network: no Raft, no gRPC, no
	// published port. The other two elect a leader and keep issuing IDs.
	st = waitStatus("a leader and two followers", allFollowing)
	cut := node(st.LeaderID)
	mustDocker(t, "network", "disconnect", network, cut.container)
	t.Logf("disconnected %s (the leader) from the network", cut.id)
	waitStatus("a new leader without "+cut.id, func(st *dockerStatus) bool {
		return st.LeaderID != "" && st.LeaderID != cut.id
	})
	for i := 0; i < 10; i++ {
		next(addrList, "with "+cut.id+" disconnected")
	}
	w.mustAcks(20, dockerHealTimeout, "workload with "+cut.id+" disconnected")

	// 5. Reconnect it under the same alias: it follows the new leader and
	// hears from it, and IDs asked through it keep increasing.
	mustDocker(t, "network", "connect", "--alias", cut.id, network, cut.container)
	t.Logf("reconnected %s", cut.id)
	waitStatus(cut.id+" following with a recent last contact", func(st *dockerStatus) bool {
		return allFollowing(st) && following(st, cut.id)
	})
	for i := 0; i < 5; i++ {
		next(cut.hostAddr, "through the reconnected "+cut.id)
		next(addrList, "after "+cut.id+" rejoined")
	}
	w.mustAcks(20, dockerHealTimeout, "workload after "+cut.id+" rejoined")

	rep := mustCheck(t, w.stop())
	t.Logf("workload: %d acknowledged operations; the Docker test took %v", rep.Acknowledged, time.Since(begin).Round(time.Millisecond))
}

// dockerRun runs docker with args, bounded by timeout, and returns its
// combined output.
func dockerRun(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("did not finish within %v", timeout)
	}
	return string(out), err
}

// mustDocker runs docker with args and fails the test unless it succeeds.
func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerRun(dockerCmdTimeout, args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
