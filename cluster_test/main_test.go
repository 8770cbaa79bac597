//go:build unix

// Package cluster_test tests Ordo as it runs in production: the built ordo
// binary, three (sometimes four) real processes talking Raft and gRPC over
// TCP on loopback, with BoltDB files in each test's temp dir. Processes
// are run by verify.Cluster, the harness of `ordo verify`, and load by
// verify's recording workload, whose history package history checks.
//
// Faults that `ordo verify`'s fault table injects (kill-leader,
// kill-follower, pause-leader, restart-all, rolling-restart, ...) are
// tested there, through TestVerifyEveryFault, TestVerifyLease and
// TestVerifyFiveNodes; the tests here check what the table cannot
// express: CLI output, HTTP, TLS rotation, PostgreSQL, Docker, membership
// commands, shutdown bounds, bad input, and the exact refusals of a node
// that lost its data.
package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/verify"
)

// ordoBin is the binary built once by TestMain.
var ordoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ordo-cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	ordoBin = filepath.Join(dir, "ordo")
	build := exec.Command("go", "build", "-o", ordoBin, "github.com/seed-e8569b35/ordo/cmd/ordo")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build ordo:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Fast Raft timers for tests. They pass raft.ValidateConfig: the lease is
// at most the heartbeat timeout, the election timeout at least it.
var fastTimers = []string{
	"--heartbeat-timeout", "300ms",
	"--election-timeout", "300ms",
	"--leader-lease-timeout", "150ms",
}

// Deadlines shared by the helpers.
const (
	leaderTimeout = 15 * time.Second // a leader is elected and known
	exitTimeout   = 15 * time.Second // a process that should exit does
	killTimeout   = 10 * time.Second // a killed process is reaped
	cliTimeout    = 15 * time.Second // one run of an ordo client command
)

// cliResult is the outcome of one run of an ordo client command.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

// runOrdo runs the ordo binary with args, bounded by cliTimeout, and
// returns its output and exit code. It fails the test only when the
// process cannot be run or is killed by the deadline.
func runOrdo(t testing.TB, args ...string) cliResult {
	t.Helper()
	return runOrdoFor(t, cliTimeout, args...)
}

// runOrdoFor is runOrdo with another deadline.
func runOrdoFor(t testing.TB, timeout time.Duration, args ...string) cliResult {
	t.Helper()
	return runCommand(t, timeout, verify.NodeEnv(), ordoBin, args...)
}

// runCommand runs name with args in env and returns its output and exit
// code. It fails the test only when the process cannot be run or is
// killed by the deadline.
func runCommand(t testing.TB, timeout time.Duration, env []string, name string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second // a child that keeps the pipes open
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("%s %s: did not finish within %v; stderr: %s", filepath.Base(name), strings.Join(args, " "), timeout, res.Stderr)
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	default:
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
	return res
}

// mustRunOrdo runs the ordo binary and fails the test unless it exits 0.
func mustRunOrdo(t testing.TB, args ...string) cliResult {
	t.Helper()
	res := runOrdo(t, args...)
	if res.Code != 0 {
		t.Fatalf("ordo %s: exit code %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), res.Code, res.Stdout, res.Stderr)
	}
	return res
}

// node is one ordo serve process, across restarts: verify's.
type node = verify.Node

// cluster is verify's process harness as a test drives it: its failures
// fail the test, and it comes with an admin client for the status.
type cluster struct {
	*verify.Cluster
	t     *testing.T
	admin *client.Client // talks to the three founding nodes
}

// clusterOpts changes how newCluster starts the nodes.
type clusterOpts struct {
	// tls, if set, starts every node with mutual TLS: the set's node
	// certificate and admin rights for its admin certificate's subject;
	// the cluster's admin client presents the admin certificate.
	tls *securetest.Set
	// nodeTLS gives a node other files than tls.Node (its own copy, to
	// be replaced on disk by a test of rotation).
	nodeTLS map[string]secure.Files
	// joinTimeout, if set, gives every node --join with the three gRPC
	// addresses and this --join-timeout besides --bootstrap: one command
	// line for every start of every node, as the Kubernetes example runs.
	joinTimeout time.Duration
	// layout is every node's --layout ("" for the default); the
	// harness's own calls for IDs follow its width.
	layout string
	// args are more serve flags for every node.
	args []string
}

// tlsArgs are the serve or client flags naming files.
func tlsArgs(f secure.Files) []string {
	return []string{"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA}
}

// setFlag sets flag name to value in args: the value after its first
// occurrence is replaced, or the flag is appended.
func setFlag(args []string, name, value string) []string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			args[i+1] = value
			return args
		}
	}
	return append(args, name, value)
}

// setTLS makes n serve files from its next start on.
func setTLS(n *node, files secure.Files) {
	n.Args = setFlag(n.Args, "--tls-cert", files.Cert)
	n.Args = setFlag(n.Args, "--tls-key", files.Key)
	n.Args = setFlag(n.Args, "--tls-ca", files.CA)
}

// tlsClient returns a client of addrs that presents files.
func tlsClient(t testing.TB, addrs []string, files secure.Files, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append(opts, client.WithTLS(securetest.MustLoad(t, files).ClientConfig()))
	c, err := client.New(addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mustNewCluster starts n1..n3 with verify.StartCluster, --bootstrap and
// fast Raft timers, and waits until the cluster serves IDs. Every later
// start of a node carries --bootstrap too (or the Kubernetes line, with
// joinTimeout), as a service manager's would. Cleanup kills every process
// the cluster started and, if the test failed, prints the tail of every
// node's log.
func mustNewCluster(t *testing.T, opts clusterOpts) *cluster {
	t.Helper()
	cfg := verify.ClusterConfig{
		Binary: ordoBin, Dir: t.TempDir(), Nodes: 3,
		ServeArgs:   append(append([]string{}, fastTimers...), opts.args...),
		Layout:      opts.layout,
		JoinTimeout: opts.joinTimeout,
		Logf:        t.Logf,
	}
	if opts.tls != nil {
		cfg.TLS = &verify.TLS{Node: opts.tls.Node, Client: opts.tls.Client, Admin: opts.tls.Admin}
		cfg.NodeArgs = map[string][]string{}
		for id, f := range opts.nodeTLS {
			cfg.NodeArgs[id] = tlsArgs(f)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*leaderTimeout)
	defer cancel()
	vc, err := verify.StartCluster(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{Cluster: vc, t: t}
	// Cleanups run last-in first-out: kill first, then dump the logs.
	t.Cleanup(c.dumpLogsIfFailed)
	t.Cleanup(vc.Stop)
	if opts.joinTimeout == 0 {
		for _, n := range c.Nodes {
			n.Args = append([]string{"--bootstrap", vc.Bootstrap()}, n.Args...)
		}
	}
	// Status waits up to 1 s for each unreachable peer (a paused one
	// hangs), so an attempt must be allowed longer than that.
	if opts.tls != nil {
		c.admin = tlsClient(t, c.addrs(), opts.tls.Admin, client.WithAttemptTimeout(3*time.Second))
	} else if c.admin, err = client.New(c.addrs(), client.WithAttemptTimeout(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.admin.Close() })
	c.mustLeader()
	c.mustServe()
	return c
}

// addrs returns the gRPC addresses of n1..n3.
func (c *cluster) addrs() []string { return c.Cluster.Addrs()[:3] }

// addrList returns the gRPC addresses of n1..n3 as one --addrs value.
func (c *cluster) addrList() string { return strings.Join(c.addrs(), ",") }

// node returns the node with the given id.
func (c *cluster) node(id string) *node {
	c.t.Helper()
	n := c.Node(id)
	if n == nil {
		c.t.Fatalf("no node %q", id)
	}
	return n
}

// newNode adds a node that is not started yet and is not in --bootstrap;
// args are its serve flags besides the address flags.
func (c *cluster) newNode(id string, args ...string) *node {
	c.t.Helper()
	n, err := c.AddNode(id, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// mustStart starts n with its flags followed by extra.
func (c *cluster) mustStart(n *node, extra ...string) {
	c.t.Helper()
	if n.Running() {
		c.t.Fatalf("start %s: already running", n.Name)
	}
	if err := c.StartWith(n, extra...); err != nil {
		c.t.Fatal(err)
	}
}

// mustRestart starts n again with the same data dir and flags, plus extra.
func (c *cluster) mustRestart(n *node, extra ...string) { c.t.Helper(); c.mustStart(n, extra...) }

// signal sends sig to n's current process.
func (c *cluster) signal(n *node, sig syscall.Signal) {
	c.t.Helper()
	if err := c.Signal(n, sig); err != nil {
		c.t.Fatal(err)
	}
}

// mustKill SIGKILLs n and waits until the process is reaped.
func (c *cluster) mustKill(n *node) {
	c.t.Helper()
	if !n.Running() {
		c.t.Fatalf("kill %s: not running", n.Name)
	}
	if err := c.Kill(n); err != nil {
		c.t.Fatal(err)
	}
}

// pause sends SIGSTOP to n; resume sends SIGCONT.
func (c *cluster) pause(n *node)  { c.t.Helper(); c.signal(n, syscall.SIGSTOP) }
func (c *cluster) resume(n *node) { c.t.Helper(); c.signal(n, syscall.SIGCONT) }

// output returns what n's current process has written so far.
func (c *cluster) output(n *node) string {
	c.t.Helper()
	out, err := n.Output()
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// mustKillAll SIGKILLs every running node.
func (c *cluster) mustKillAll() {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.Running() {
			c.mustKill(n)
		}
	}
}

// dumpLogsIfFailed prints the last lines of every node's log when the test
// failed.
func (c *cluster) dumpLogsIfFailed() {
	if !c.t.Failed() {
		return
	}
	const lines = 60
	for _, n := range c.Nodes {
		f, err := os.Open(n.LogFile)
		if err != nil {
			continue
		}
		var tail []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			tail = append(tail, sc.Text())
			if len(tail) > lines {
				tail = tail[1:]
			}
		}
		f.Close()
		c.t.Logf("---- last %d lines of %s ----\n%s", lines, n.LogFile, strings.Join(tail, "\n"))
	}
}

// status asks the cluster for its status through the admin client.
func (c *cluster) status(d time.Duration) (*api.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var resp *api.StatusResponse
	err := c.admin.Admin(ctx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) (err error) {
		resp, err = a.Status(ctx, &api.StatusRequest{}, opts...)
		return err
	})
	return resp, err
}

// roleOf returns the role that a status response gives node id, or "".
func roleOf(resp *api.StatusResponse, id string) string {
	for _, n := range resp.Nodes {
		if n.Id == id {
			return n.Role
		}
	}
	return ""
}

// waitStatus polls the status until ok accepts it, up to d, and returns
// the accepted response; on timeout it fails the test with what.
func (c *cluster) waitStatus(d time.Duration, what string, ok func(*api.StatusResponse) bool) *api.StatusResponse {
	c.t.Helper()
	begin := time.Now()
	resp, lastErr, done := c.pollStatus(d, ok)
	if !done {
		c.t.Fatalf("waited %v for %s; last status: %v; last error: %v", d, what, resp, lastErr)
	}
	if e := time.Since(begin); e > 2*time.Second {
		c.t.Logf("waited %v for %s", e.Round(time.Millisecond), what)
	}
	return resp
}

// pollStatus asks for the status until ok holds or d passes. It returns
// the last status read, the last error, and whether ok held.
func (c *cluster) pollStatus(d time.Duration, ok func(*api.StatusResponse) bool) (*api.StatusResponse, error, bool) {
	var last *api.StatusResponse
	var lastErr error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := c.status(4 * time.Second)
		if err != nil {
			lastErr = err
			continue
		}
		last = resp
		if ok(resp) {
			return resp, nil, true
		}
	}
	return last, lastErr, false
}

// mustLeader waits until the status names a leader that is not one of
// exclude and that reports itself as leader, and returns it.
func (c *cluster) mustLeader(exclude ...*node) *node {
	c.t.Helper()
	resp := c.waitStatus(leaderTimeout, "a leader", func(r *api.StatusResponse) bool {
		if r.LeaderId == "" || roleOf(r, r.LeaderId) != "leader" {
			return false
		}
		for _, n := range exclude {
			if n.Name == r.LeaderId {
				return false
			}
		}
		return true
	})
	return c.node(resp.LeaderId)
}

// mustRole waits until the status reports node id in role.
func (c *cluster) mustRole(id, role string, d time.Duration) {
	c.t.Helper()
	c.waitStatus(d, id+" as "+role, func(r *api.StatusResponse) bool { return roleOf(r, id) == role })
}

// mustFollowers returns the nodes the current status reports as
// followers.
func (c *cluster) mustFollowers() []*node {
	c.t.Helper()
	resp := c.waitStatus(leaderTimeout, "a leader and two followers", func(r *api.StatusResponse) bool {
		f := 0
		for _, n := range r.Nodes {
			if n.Role == "follower" {
				f++
			}
		}
		return r.LeaderId != "" && f >= 2
	})
	var out []*node
	for _, n := range resp.Nodes {
		if n.Role == "follower" {
			out = append(out, c.node(n.Id))
		}
	}
	return out
}

// mustServe waits until the cluster hands out an ID.
func (c *cluster) mustServe() {
	c.t.Helper()
	deadline := time.Now().Add(leaderTimeout)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = c.admin.Next(ctx)
		if status.Code(err) == codes.FailedPrecondition || errors.Is(err, layout.ErrWrongWidth) {
			err = nextWide(ctx, c.admin) // a 128-bit layout refuses 64-bit calls
		}
		cancel()
		if err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("cluster does not serve IDs after %v: %v", leaderTimeout, err)
}

// workload is verify's recording workload as a test drives it: it waits
// for progress, and fails the test on an operation that failed for
// certain.
type workload struct {
	t   *testing.T
	w   *verify.Workload
	rec *history.Recorder
}

const (
	workloadClients = 8 // half unary failover clients, half on one stream
	maxBatch        = 8
	// attemptTimeout and opTimeout bound one attempt and one call of the
	// tests' own clients (pushers, PostgreSQL's), which verify's workload
	// cannot stand in for.
	attemptTimeout = time.Second
	opTimeout      = 3 * time.Second
)

// mustLoadedCluster starts a cluster with the default options and a
// recorded workload on it, and lets the load run one phase (what names
// it), so that the test's faults land on a serving cluster with requests
// in flight.
func mustLoadedCluster(t *testing.T, what string) (*cluster, *workload) {
	t.Helper()
	c := mustNewCluster(t, clusterOpts{})
	w := startWorkload(t, c.addrs(), history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, what)
	return c, w
}

// startWorkload starts verify's workload against addrs, recording into
// rec until stop. Client numbers start at base, so that two workloads
// sharing one recorder can be told apart.
func startWorkload(t *testing.T, addrs []string, rec *history.Recorder, base int) *workload {
	t.Helper()
	w, err := verify.StartWorkload(verify.WorkloadConfig{
		Addrs: addrs, Clients: workloadClients / 2, Streams: workloadClients / 2,
		MaxCount: maxBatch, FirstClient: base,
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &workload{t: t, w: w, rec: rec}
}

// acked is the number of acknowledged operations so far.
func (w *workload) acked() int64 { ok, _, _, _ := w.w.Counts(); return ok }

// minPhase is the least time one load phase lasts, so that every fault
// lands on a workload with requests in flight.
const minPhase = 500 * time.Millisecond

// mustAcks lets the load run for at least minPhase and until n more
// operations are acknowledged, failing the test if that takes over d.
func (w *workload) mustAcks(n int64, d time.Duration, what string) {
	w.t.Helper()
	start := w.acked()
	begin := time.Now()
	deadline := begin.Add(d)
	for time.Now().Before(deadline) {
		if w.acked() >= start+n && time.Since(begin) >= minPhase {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("%s: only %d of %d acknowledged operations within %v (last error: %s)", what, w.acked()-start, n, d, w.w.LastError())
}

// stopTimeout bounds how long the workload's clients take to stop: every
// request has a deadline of its own, well under it.
const stopTimeout = 10 * time.Second

// stop ends the workload, waits for every client, and returns the whole
// history recorded so far. Operations that fail for certain, and answers
// the client rejected as bad, fail the test.
func (w *workload) stop() []history.Op {
	w.t.Helper()
	done := make(chan struct{})
	go func() { w.w.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		w.t.Fatalf("workload clients did not stop within %v", stopTimeout)
	}
	_, failed, _, _ := w.w.Counts()
	bad := w.w.BadResponses()
	if bad > 0 {
		w.t.Errorf("%d answers rejected by the client as bad (server bug); last error: %s", bad, w.w.LastError())
	}
	if n := failed; n > 0 { // bad answers are counted apart
		w.t.Errorf("%d operations failed for certain under a healthy workload; last error: %s", n, w.w.LastError())
	}
	return w.rec.Ops()
}

// mustCheck checks a history and fails the test unless it is clean and
// has acknowledged operations.
func mustCheck(t *testing.T, ops []history.Op) history.Report {
	t.Helper()
	rep := history.Check(ops)
	t.Log(rep.String())
	if !rep.OK() {
		t.Fatalf("history check failed:\n%s", rep)
	}
	if rep.Acknowledged == 0 {
		t.Fatal("no operation was acknowledged")
	}
	return rep
}

// idRange returns the smallest and largest acknowledged ID in ops.
func idRange(ops []history.Op) (lo, hi uint64, ok bool) {
	for _, op := range ops {
		if op.Outcome != history.OK {
			continue
		}
		for _, id := range op.IDs {
			if !ok {
				lo, hi, ok = id, id, true
			}
			lo, hi = min(lo, id), max(hi, id)
		}
	}
	return lo, hi, ok
}
