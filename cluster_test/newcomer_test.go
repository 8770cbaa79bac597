//go:build unix

package cluster_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/verify"
)

// newcomerWait bounds every wait of TestNewcomerPath for something the
// cluster does by itself (an election, a node that serves, a process
// that exits): far above what it takes, so that a loaded machine does not
// fail the test.
const newcomerWait = 60 * time.Second

// newcomer is an operator who follows README.md, then
// docs/operations.md, on a cluster of scripts/cluster.sh.
type newcomer struct {
	t     *testing.T
	s     *clusterScript
	env   []string // the CLI's environment: ORDO_ADDRS as `up` says
	http  []string // n1..n3's HTTP addresses
	hc    *http.Client
	last  uint64 // the largest ID seen so far
	begin time.Time
}

// ordo runs an ordo client command the way the operator types it, in an
// environment with the ORDO_ADDRS that `scripts/cluster.sh up` printed.
func (o *newcomer) ordo(args ...string) cliResult {
	o.t.Helper()
	return runCommand(o.t, cliTimeout+10*time.Second, o.env, ordoBin, args...)
}

// mustOrdo runs ordo and fails the test unless it exits 0.
func (o *newcomer) mustOrdo(args ...string) cliResult {
	o.t.Helper()
	res := o.ordo(args...)
	if res.Code != 0 {
		o.t.Fatalf("ordo %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	}
	return res
}

// see checks that ids increase and lie above every ID seen before (each
// call was sent after the one before it completed), and notes them.
func (o *newcomer) see(what string, ids []uint64) {
	o.t.Helper()
	for _, id := range ids {
		if id <= o.last {
			o.t.Fatalf("%s: ID %d is not above %d, the largest ID seen before (all: %d)", what, id, o.last, ids)
		}
		o.last = id
	}
}

// lines parses stdout of IDs, one per line, as decimal 64-bit IDs.
func (o *newcomer) lines(what, stdout string, want int) []uint64 {
	o.t.Helper()
	ls := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(ls) != want {
		o.t.Fatalf("%s: %d lines, want %d IDs one per line:\n%s", what, len(ls), want, stdout)
	}
	ids := make([]uint64, len(ls))
	for i, l := range ls {
		id, err := strconv.ParseUint(l, 10, 64)
		if err != nil {
			o.t.Fatalf("%s: line %q is not an ID: %v", what, l, err)
		}
		ids[i] = id
	}
	return ids
}

// jsonIDs parses {"ids": [...]} whose IDs must be JSON strings, with the
// other keys in also (each key once), and returns the IDs and the object.
func (o *newcomer) jsonIDs(what, body string, want int, also ...string) []uint64 {
	o.t.Helper()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		o.t.Fatalf("%s: %v:\n%s", what, err, body)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	wantKeys := append([]string{"ids"}, also...)
	slices.Sort(wantKeys)
	if !slices.Equal(keys, wantKeys) {
		o.t.Fatalf("%s: keys %q, want %q:\n%s", what, keys, wantKeys, body)
	}
	var strs []string // a JSON number here fails: IDs are strings
	if err := json.Unmarshal(obj["ids"], &strs); err != nil || len(strs) != want {
		o.t.Fatalf("%s: ids %s: want %d IDs as JSON strings (%v)", what, obj["ids"], want, err)
	}
	ids := make([]uint64, len(strs))
	for i, s := range strs {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			o.t.Fatalf("%s: ID %q: %v", what, s, err)
		}
		ids[i] = id
	}
	return ids
}

// get sends GET url; code 0 means no answer (the body is the error).
func (o *newcomer) get(url string) (int, string) {
	resp, err := o.hc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitHTTP waits until GET url answers want.
func (o *newcomer) waitHTTP(url string, want int) string {
	o.t.Helper()
	var code int
	var body string
	o.wait("GET "+url+" answering "+strconv.Itoa(want), func() (bool, string) {
		code, body = o.get(url)
		return code == want, fmt.Sprintf("%d %s", code, body)
	})
	return body
}

// wait polls cond until it holds, up to newcomerWait; cond returns what
// it saw, for the failure message.
func (o *newcomer) wait(what string, cond func() (bool, string)) {
	o.t.Helper()
	start := time.Now()
	var last string
	for deadline := start.Add(newcomerWait); ; time.Sleep(200 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			if d := time.Since(start); d > 5*time.Second {
				o.t.Logf("waited %v for %s", d.Round(time.Millisecond), what)
			}
			return
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("waited %v for %s; last: %s", newcomerWait, what, last)
		}
	}
}

// textStatus is what `ordo status` prints.
type textStatus struct {
	leader, layout, group, cluster string
	header                         []string
	roles                          map[string]string // by node id
	rows                           map[string]string // whole lines
	out                            string
}

var statusHead = regexp.MustCompile(`^leader (\S*) \((.*)\)  layout (\S+)  group (\d+)  cluster (\S*)$`)

// status runs `ordo status` (extra flags after it) and parses its text;
// ok is false if it failed or printed something else.
func (o *newcomer) status(extra ...string) (textStatus, bool) {
	o.t.Helper()
	res := o.ordo(append([]string{"status"}, extra...)...)
	st := textStatus{roles: map[string]string{}, rows: map[string]string{}, out: res.Stdout + res.Stderr}
	if res.Code != 0 {
		return st, false
	}
	ls := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
	if len(ls) < 2 {
		return st, false
	}
	m := statusHead.FindStringSubmatch(ls[0])
	if m == nil {
		return st, false
	}
	st.leader, st.layout, st.group, st.cluster = m[1], m[3], m[4], m[5]
	st.header = strings.Fields(ls[1])
	for _, l := range ls[2:] {
		f := strings.Fields(l)
		if len(f) < 2 {
			return st, false
		}
		st.roles[f[0]], st.rows[f[0]] = f[1], l
	}
	return st, true
}

// waitStatus waits until `ordo status` (extra flags after it) prints a
// status ok accepts, and returns it.
func (o *newcomer) waitStatus(what string, ok func(textStatus) bool, extra ...string) textStatus {
	o.t.Helper()
	var st textStatus
	o.wait("ordo status showing "+what, func() (bool, string) {
		var parsed bool
		st, parsed = o.status(extra...)
		return parsed && ok(st), st.out
	})
	return st
}

// allServing says whether st shows nodes ids, one leading and the others
// following.
func allServing(st textStatus, ids ...string) bool {
	if len(st.roles) != len(ids) || st.roles[st.leader] != "leader" {
		return false
	}
	for _, id := range ids {
		if r := st.roles[id]; r != "leader" && r != "follower" || r == "leader" && id != st.leader {
			return false
		}
	}
	return true
}

// pidOf is the process of node n by the script's pid file.
func (o *newcomer) pidOf(n string) int {
	o.t.Helper()
	b, err := os.ReadFile(filepath.Join(o.s.dir, n+".pid"))
	if err != nil {
		o.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		o.t.Fatalf("%s.pid: %v", n, err)
	}
	return pid
}

// up runs `scripts/cluster.sh up` and checks what it promises: the
// cluster is up, with the layout, and it says how to reach it.
func (o *newcomer) up() cliResult {
	o.t.Helper()
	res := o.s.run("up")
	if res.Code != 0 || !strings.Contains(res.Stdout, "Ordo is up: three nodes, layout default, gRPC on "+o.s.addrs+"; data and logs in "+o.s.dir) {
		o.t.Fatalf("cluster.sh up: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	return res
}

// manualNode is a node the operator starts by hand (the restored cluster's).
type manualNode struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startManual starts cmd with its output in log; cleanup kills it if it
// still runs.
func (o *newcomer) startManual(cmd *exec.Cmd, log string) *manualNode {
	o.t.Helper()
	f, err := os.Create(log)
	if err != nil {
		o.t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		o.t.Fatal(err)
	}
	d := &manualNode{cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(d.done) }()
	o.t.Cleanup(func() {
		select {
		case <-d.done:
			return
		default:
		}
		_ = cmd.Process.Kill()
		select {
		case <-d.done:
		case <-time.After(killTimeout):
			o.t.Errorf("%s did not exit within %v of SIGKILL", cmd.Args, killTimeout)
		}
	})
	return d
}

// stop sends SIGTERM and waits until d exits.
func (o *newcomer) stop(d *manualNode) {
	o.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(newcomerWait):
		o.t.Fatalf("%s did not exit within %v of SIGTERM", d.cmd.Args, newcomerWait)
	}
}

// logTail returns the last lines of file, for a failure's report.
func logTail(file string, n int) string {
	f, err := os.Open(file)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var ls []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if ls = append(ls, sc.Text()); len(ls) > n {
			ls = ls[1:]
		}
	}
	return strings.Join(ls, "\n")
}

// TestNewcomerPath is the path of a new operator, on real processes: the
// Quick start of README.md, then what docs/operations.md has them do,
// each command as the docs give it and each outcome they promise checked.
//
//   - README: `scripts/cluster.sh up` says the cluster is up; /readyz and
//     /healthz answer on every node; `ordo next --count 5` prints five
//     increasing IDs one per line; `--count 3 --json` prints {"ids":
//     [...]} of strings; `ordo status` shows three nodes, one leader, with
//     the columns the README names; `ordo decode $(ordo next)` prints the
//     ID's time (about now), group and sequence; `curl
//     '...:8003/v1/ids?count=3'` answers {"ids":[...],"count":3}; `down`
//     stops the nodes, a call then exits 1, `up` restarts them on the same
//     data (the same cluster id) and IDs continue above.
//   - operations.md: `ordo status --json` prints GET /v1/status's schema;
//     /metrics counts one leader over the cluster; `ordo transfer-leader
//     --id` moves leadership, and naming the leader says it already leads;
//     a bad count exits 2 naming its range; the leader crashes (SIGKILL):
//     `ordo next` goes on above, status names a new leader and lists the
//     dead node unreachable with why; `up` brings it back; `ordo backup
//     --out` writes a 0600 file; `ordo restore` is refused while the old
//     cluster answers; after `down` and `clean` (the data dir is gone), it
//     builds a new cluster's first node, the serve line it prints starts
//     it, a second node joins it with --join, and the new cluster (a new
//     cluster id) hands out IDs above every ID of the old one.
//
// Every ID of the test is checked to be above every ID before it: each
// call is sent after the one before it completed.
//
// The script runs on free ports and a temp dir, with the test's binary
// (ORDO_CLUSTER_GRPC_PORTS, ..._RAFT_PORTS, ..._HTTP_PORTS,
// ORDO_CLUSTER_DIR, ORDO_CLUSTER_BIN), not on the README's 7001-7003,
// 7101-7103 and 8001-8003: so the CLI is given the `export ORDO_ADDRS=...`
// that `up` prints for ports other than the defaults, where the README's
// bare `bin/ordo next` relies on the defaults, and the HTTP probes go to
// the HTTP ports given, where the README says 8001-8003.
func TestNewcomerPath(t *testing.T) {
	s := newClusterScript(t)
	var httpPorts string
	for _, kv := range s.env {
		if v, ok := strings.CutPrefix(kv, "ORDO_CLUSTER_HTTP_PORTS="); ok {
			httpPorts = v
		}
	}
	o := &newcomer{t: t, s: s, hc: &http.Client{Timeout: httpTimeout}, begin: time.Now()}
	for _, p := range strings.Split(httpPorts, ",") {
		o.http = append(o.http, "http://127.0.0.1:"+p)
	}
	if len(o.http) != 3 {
		t.Fatalf("ORDO_CLUSTER_HTTP_PORTS=%q: want three ports", httpPorts)
	}
	var manual []*manualNode
	t.Cleanup(func() { // the logs, if the test failed (before `down`: registered after it)
		if !t.Failed() {
			return
		}
		for _, n := range []string{"n1", "n2", "n3"} {
			t.Logf("---- %s.log ----\n%s", n, logTail(filepath.Join(s.dir, n+".log"), 40))
		}
		for _, d := range manual {
			t.Logf("---- %s ----\n%s", d.log, logTail(d.log, 40))
		}
	})

	// README, Quick start: scripts/cluster.sh up.
	res := o.up()
	m := regexp.MustCompile(`(?m)^  export ORDO_ADDRS=(\S+)$`).FindStringSubmatch(res.Stdout)
	if m == nil || m[1] != s.addrs {
		t.Fatalf("cluster.sh up on other ports than the defaults: no 'export ORDO_ADDRS=%s' line:\n%s", s.addrs, res.Stdout)
	}
	// Every later client command reads ORDO_ADDRS, as `up` says to
	// export; none passes --addrs unless it talks to another cluster.
	o.env = append(verify.NodeEnv(), "ORDO_ADDRS="+m[1])

	// `curl -s 127.0.0.1:8001/readyz` (on each node's HTTP port).
	for _, h := range o.http {
		if body := o.waitHTTP(h+"/readyz", http.StatusOK); !strings.Contains(body, `"ready"`) {
			t.Errorf("GET %s/readyz: %s, want status ready", h, body)
		}
		if code, body := o.get(h + "/healthz"); code != http.StatusOK {
			t.Errorf("GET %s/healthz: %d %s", h, code, body)
		}
	}

	// bin/ordo next --count 5            # five IDs, one per line
	res = o.mustOrdo("next", "--count", "5")
	o.see("ordo next --count 5", o.lines("ordo next --count 5", res.Stdout, 5))

	// bin/ordo next --count 3 --json     # {"ids": ["...", ...]}: strings
	res = o.mustOrdo("next", "--count", "3", "--json")
	o.see("ordo next --count 3 --json", o.jsonIDs("ordo next --count 3 --json", res.Stdout, 3))

	// bin/ordo status                    # every node: role, term, last
	// contact, applied index, high-water mark
	st, ok := o.status()
	if !ok || !allServing(st, "n1", "n2", "n3") || st.layout != "default" || st.cluster == "" {
		t.Fatalf("ordo status: want three nodes n1..n3, one leader, layout default, a cluster id:\n%s", st.out)
	}
	head := strings.Join(st.header, " ")
	for _, col := range []string{"ROLE", "TERM", "LAST CONTACT", "APPLIED", "HIGH-WATER"} {
		if !strings.Contains(head, col) {
			t.Errorf("ordo status: no column %s:\n%s", col, st.out)
		}
	}
	clusterID, group := st.cluster, st.group
	t.Logf("ordo status:\n%s", st.out)

	// scripts/cluster.sh status (the script's header): the same, on its
	// own ports.
	if res := s.run("status"); res.Code != 0 || !strings.HasPrefix(res.Stdout, "leader "+st.leader+" (") {
		t.Errorf("cluster.sh status: exit %d, want the status of leader %s\nstdout: %s\nstderr: %s", res.Code, st.leader, res.Stdout, res.Stderr)
	}

	// bin/ordo decode $(bin/ordo next)   # time, group and sequence of an ID
	res = o.mustOrdo("next")
	id := strings.TrimSpace(res.Stdout) // what $(...) makes of it
	o.see("ordo next", o.lines("ordo next", res.Stdout, 1))
	before := time.Now()
	res = o.mustOrdo("decode", id)
	dl := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(dl) != 2 || strings.Join(strings.Fields(dl[0]), " ") != "ID TIME GROUP SEQ" {
		t.Fatalf("ordo decode %s: want a header ID TIME GROUP SEQ and one row:\n%s", id, res.Stdout)
	}
	t.Logf("ordo decode $(ordo next):\n%s", res.Stdout)
	f := strings.Fields(dl[1])
	if len(f) != 4 || f[0] != id || f[2] != group {
		t.Fatalf("ordo decode %s: row %q, want the ID, its time, group %s (as status says) and sequence", id, dl[1], group)
	}
	when, err := time.Parse(time.RFC3339Nano, f[1])
	// IDs follow the wall clock, leading it by at most a few seconds
	// (README, Guarantees): a minute either way is far from both.
	if err != nil || when.Before(o.begin.Add(-time.Minute)) || when.After(before.Add(time.Minute)) {
		t.Errorf("ordo decode %s: time %q (%v), want about now (%v)", id, f[1], err, before)
	}
	if _, err := strconv.ParseUint(f[3], 10, 64); err != nil {
		t.Errorf("ordo decode %s: sequence %q: %v", id, f[3], err)
	}

	// curl -s '127.0.0.1:8003/v1/ids?count=3'   # {"ids":["...",...],"count":3}
	code, body := o.get(o.http[2] + "/v1/ids?count=3")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/ids?count=3: %d %s", code, body)
	}
	o.see("GET /v1/ids?count=3", o.jsonIDs("GET /v1/ids?count=3", body, 3, "count"))
	if !strings.Contains(body, `"count":3`) {
		t.Errorf(`GET /v1/ids?count=3: %s, want "count":3`, body)
	}

	// scripts/cluster.sh down            # stop; `up` restarts with the
	// same data
	mustDown := func() {
		t.Helper()
		if res := s.run("down"); res.Code != 0 || strings.TrimSpace(res.Stdout) != "stopped" {
			t.Fatalf("cluster.sh down: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
		}
		if pids := s.pids(); len(pids) > 0 {
			t.Fatalf("cluster.sh down left nodes running: %v", pids)
		}
	}
	mustDown()
	// Exit codes (operations.md): 1 failure, here no node to ask.
	if res := o.ordo("next", "--timeout", "2s"); res.Code != 1 {
		t.Errorf("ordo next with the cluster down: exit %d, want 1\nstderr: %s", res.Code, res.Stderr)
	}
	o.up()
	res = o.mustOrdo("next", "--count", "5")
	o.see("ordo next --count 5 after down and up", o.lines("ordo next --count 5", res.Stdout, 5))
	st = o.waitStatus("three nodes, one leader", func(st textStatus) bool { return allServing(st, "n1", "n2", "n3") })
	if st.cluster != clusterID {
		t.Fatalf("after down and up: cluster %s, want %s (the same data)", st.cluster, clusterID)
	}

	// operations.md, Inspect: `ordo status --json` prints the same schema
	// as GET /v1/status.
	res = o.mustOrdo("status", "--json")
	code, body = o.get(o.http[0] + "/v1/status")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/status: %d %s", code, body)
	}
	cliKeys, cliNodes := statusJSONShape(t, "ordo status --json", res.Stdout)
	httpKeys, httpNodes := statusJSONShape(t, "GET /v1/status", body)
	if !slices.Equal(cliKeys, httpKeys) || !slices.Equal(cliNodes, httpNodes) {
		t.Errorf("ordo status --json has keys %q, nodes %q; GET /v1/status %q, nodes %q", cliKeys, cliNodes, httpKeys, httpNodes)
	}

	// Monitoring: ordo_raft_role{role="leader"} summed over the cluster
	// is 1.
	o.wait(`one ordo_raft_role{role="leader"} over the cluster`, func() (bool, string) {
		leaders, seen := 0.0, ""
		for _, h := range o.http {
			code, body := o.get(h + "/metrics")
			v, found := promSample(body, `ordo_raft_role{role="leader"}`)
			if code != http.StatusOK || !found {
				return false, fmt.Sprintf("%s/metrics: %d, %d bytes, leader role found %v", h, code, len(body), found)
			}
			leaders += v
			seen += fmt.Sprintf(" %s:%g", h, v)
		}
		return leaders == 1, seen
	})

	// Exit codes: 2 for a bad command line, naming the range.
	if res := o.ordo("next", "--count", "0"); res.Code != 2 || !strings.Contains(res.Stderr, "1 to 4294967295") {
		t.Errorf("ordo next --count 0: exit %d, stderr %q; want 2 and the range 1 to 4294967295", res.Code, res.Stderr)
	}

	// Move leadership: ordo transfer-leader --id n2 (a follower here).
	st = o.waitStatus("three nodes, one leader", func(st textStatus) bool { return allServing(st, "n1", "n2", "n3") })
	var to string
	for _, n := range []string{"n1", "n2", "n3"} {
		if st.roles[n] == "follower" && to == "" {
			to = n
		}
	}
	if res := o.mustOrdo("transfer-leader", "--id", to); strings.TrimSpace(res.Stdout) != "leadership transferred" {
		t.Errorf("ordo transfer-leader --id %s: %q, want 'leadership transferred'", to, res.Stdout)
	}
	o.waitStatus(to+" leading", func(st textStatus) bool { return st.leader == to && allServing(st, "n1", "n2", "n3") })
	if res := o.mustOrdo("transfer-leader", "--id", to); strings.TrimSpace(res.Stdout) != to+" already leads" {
		t.Errorf("ordo transfer-leader --id %s naming the leader: %q, want '%s already leads'", to, res.Stdout, to)
	}
	res = o.mustOrdo("next", "--count", "5")
	o.see("ordo next after transfer-leader", o.lines("ordo next --count 5", res.Stdout, 5))

	// The leader crashes (README, Guarantees 4: clients find the new
	// leader by themselves).
	st = o.waitStatus("three nodes, one leader", func(st textStatus) bool { return allServing(st, "n1", "n2", "n3") })
	dead := st.leader
	pid := o.pidOf(dead)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s): %v", pid, dead, err)
	}
	// Wait until it is gone (reaped), so that `up` below restarts it
	// rather than finding it "already running".
	o.wait(dead+" (pid "+strconv.Itoa(pid)+") gone", func() (bool, string) {
		err := syscall.Kill(pid, 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprint(err)
	})
	// One `ordo next` (its default --timeout) may or may not outlast the
	// election on a loaded machine; the operator tries again.
	o.wait("ordo next after "+dead+" crashed", func() (bool, string) {
		res := o.ordo("next", "--count", "5")
		if res.Code != 0 {
			return false, res.Stderr
		}
		o.see("ordo next after the leader crashed", o.lines("ordo next --count 5", res.Stdout, 5))
		return true, ""
	})
	var alive []string
	for _, n := range []string{"n1", "n2", "n3"} {
		if n != dead {
			alive = append(alive, n)
		}
	}
	st = o.waitStatus("a new leader and "+dead+" unreachable", func(st textStatus) bool {
		if st.leader == "" || st.leader == dead || st.roles[st.leader] != "leader" || st.roles[dead] != "unreachable" {
			return false
		}
		row := st.rows[dead]
		return strings.Contains(row, "cannot be reached (") || strings.Contains(row, "no answer within")
	})
	t.Logf("%s crashed; ordo status:\n%s", dead, st.out)
	for i, n := range []string{"n1", "n2", "n3"} {
		if n != dead {
			o.waitHTTP(o.http[i]+"/readyz", http.StatusOK)
		}
	}
	// `up` restarts the node that is down and leaves the others be.
	res = o.up()
	for _, n := range alive {
		if !strings.Contains(res.Stdout, n+" already running") {
			t.Errorf("cluster.sh up with %s down: no '%s already running':\n%s", dead, n, res.Stdout)
		}
	}
	o.waitStatus(dead+" back", func(st textStatus) bool { return allServing(st, "n1", "n2", "n3") })
	res = o.mustOrdo("next", "--count", "5")
	o.see("ordo next after "+dead+" came back", o.lines("ordo next --count 5", res.Stdout, 5))

	// Backup and restore: ordo backup --out FILE.
	backup := filepath.Join(t.TempDir(), "ordo.backup")
	res = o.mustOrdo("backup", "--out", backup)
	if !strings.Contains(res.Stdout, "backup of cluster "+clusterID+" written to "+backup) || !strings.Contains(res.Stdout, "3 members") {
		t.Errorf("ordo backup --out %s: %q, want cluster %s, 3 members", backup, res.Stdout, clusterID)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, mode %v; want mode 0600", err, fi.Mode())
	}
	// The old cluster goes on handing out IDs after the backup.
	res = o.mustOrdo("next", "--count", "5")
	o.see("ordo next after the backup", o.lines("ordo next --count 5", res.Stdout, 5))

	addrs := freeaddr.Loopback(t, 5)
	r1Raft, r1GRPC, r1HTTP, r2Raft, r2GRPC := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4]
	data := t.TempDir()
	r1Dir, r2Dir := filepath.Join(data, "r1"), filepath.Join(data, "r2")
	restore := []string{"restore", "--backup", backup, "--data-dir", r1Dir, "--id", "r1", "--raft-addr", r1Raft, "--grpc-addr", r1GRPC}
	// Refused while a member the backup names answers for the old cluster.
	if res := o.ordo(restore...); res.Code != 1 || !strings.Contains(res.Stderr, "stop every node of cluster "+clusterID+" first") {
		t.Fatalf("ordo restore while the old cluster runs: exit %d, want 1 and 'stop every node of cluster %s first'\nstdout: %s\nstderr: %s", res.Code, clusterID, res.Stdout, res.Stderr)
	}

	// Stop every old node for good: README's last step, `clean`.
	mustDown()
	if res := s.run("clean"); res.Code != 0 || !strings.Contains(res.Stdout, "deleted "+s.dir) {
		t.Fatalf("cluster.sh clean: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after cluster.sh clean, %s: %v; want it deleted", s.dir, err)
	}

	res = o.mustOrdo(restore...)
	m = regexp.MustCompile(`restored a NEW cluster (\S+) from backup of cluster (\S+) `).FindStringSubmatch(res.Stdout)
	if m == nil || m[2] != clusterID || m[1] == clusterID {
		t.Fatalf("ordo restore: want 'restored a NEW cluster ... from backup of cluster %s':\n%s", clusterID, res.Stdout)
	}
	newID := m[1]
	m = regexp.MustCompile(`(?m)^start the node:\n  (ordo serve .*)$`).FindStringSubmatch(res.Stdout)
	if m == nil || !strings.Contains(m[1], "--layout 'default' --group "+group) {
		t.Fatalf("ordo restore: want the serve line with the backup's --layout and --group:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "start the others with --join "+r1GRPC) {
		t.Errorf("ordo restore: want 'start the others with --join %s':\n%s", r1GRPC, res.Stdout)
	}
	// The line as printed, by a shell that finds ordo on its PATH, with
	// an HTTP address for the probes.
	r1 := exec.Command("bash", "-c", "exec "+m[1]+" --http-addr "+r1HTTP)
	r1.Env = append(verify.NodeEnv(), "PATH="+filepath.Dir(ordoBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	manual = append(manual, o.startManual(r1, filepath.Join(data, "r1.log")))
	o.waitHTTP("http://"+r1HTTP+"/readyz", http.StatusOK)
	// The new cluster is another cluster: the CLI is given its address.
	res = o.mustOrdo("next", "--count", "5", "--addrs", r1GRPC)
	o.see("ordo next from the restored cluster", o.lines("ordo next --count 5", res.Stdout, 5))

	// The others join it with --join, the same --layout and --group.
	r2 := exec.Command(ordoBin, "serve", "--id", "r2", "--data-dir", r2Dir, "--raft-addr", r2Raft, "--grpc-addr", r2GRPC,
		"--layout", "default", "--group", group, "--join", r1GRPC)
	r2.Env = verify.NodeEnv()
	manual = append(manual, o.startManual(r2, filepath.Join(data, "r2.log")))
	both := r1GRPC + "," + r2GRPC
	st = o.waitStatus("r1 and r2, one leader", func(st textStatus) bool { return allServing(st, "r1", "r2") }, "--addrs", both)
	if st.cluster != newID {
		t.Errorf("restored cluster's status: cluster %s, want %s", st.cluster, newID)
	}
	res = o.mustOrdo("next", "--count", "5", "--addrs", r2GRPC)
	o.see("ordo next from the node that joined the restored cluster", o.lines("ordo next --count 5", res.Stdout, 5))
	for _, d := range manual {
		o.stop(d)
	}
}

// statusJSONShape returns the keys of a status JSON object and of its first
// node.
func statusJSONShape(t *testing.T, what, body string) (keys, nodeKeys []string) {
	t.Helper()
	var obj map[string]json.RawMessage
	var nodes []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &obj); err != nil {
		t.Fatalf("%s: %v:\n%s", what, err, body)
	}
	if err := json.Unmarshal(obj["nodes"], &nodes); err != nil || len(nodes) != 3 {
		t.Fatalf("%s: nodes %s: want three (%v)", what, obj["nodes"], err)
	}
	for k := range obj {
		keys = append(keys, k)
	}
	for k := range nodes[0] {
		nodeKeys = append(nodeKeys, k)
	}
	slices.Sort(keys)
	slices.Sort(nodeKeys)
	return keys, nodeKeys
}

// promSample returns the value of the sample named series (name and labels,
// as exposed) in a Prometheus text exposition.
func promSample(body, series string) (float64, bool) {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
