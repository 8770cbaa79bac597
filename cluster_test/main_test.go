//go:build unix

// Package cluster_test tests Ordo as it runs in production: the built ordo
// binary, three (sometimes four) real processes talking Raft and gRPC over
// TCP on 127.0.0.1, with BoltDB files in each test's temp dir. Faults are
// real signals (SIGKILL, SIGSTOP/SIGCONT) and a real clock shift through
// --test-clock-offset-file. Every scenario runs a concurrent workload whose
// history is checked by package history.
package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
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
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ordoBin, args...)
	cmd.Env = verify.NodeEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("ordo %s: did not finish within %v; stderr: %s", strings.Join(args, " "), timeout, res.Stderr)
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
	default:
		t.Fatalf("ordo %s: %v", strings.Join(args, " "), err)
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

// node is one ordo serve process, across restarts.
type node struct {
	id       string
	raftAddr string
	grpcAddr string
	dataDir  string
	logPath  string
	// args are the serve flags given on every start, after the address
	// flags and before a start's extra flags (a later flag wins).
	args []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has been reaped
	logStart int64         // size of the log file when the current process started
	started  []*exec.Cmd   // every process ever started, for cleanup
}

// running reports whether the node's current process has not exited.
func (n *node) running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// cluster is a set of ordo processes started by one test.
type cluster struct {
	t     *testing.T
	dir   string
	nodes []*node
	admin *client.Client // talks to the three founding nodes
}

// clusterOpts changes how newCluster starts the nodes.
type clusterOpts struct {
	// clockFiles gives every node --test-clock-offset-file <dir>/<id>.clock,
	// created empty (no offset).
	clockFiles bool
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
func (n *node) setTLS(files secure.Files) {
	n.args = setFlag(n.args, "--tls-cert", files.Cert)
	n.args = setFlag(n.args, "--tls-key", files.Key)
	n.args = setFlag(n.args, "--tls-ca", files.CA)
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

// mustNewCluster starts n1..n3 with --bootstrap and fast Raft timers and
// waits until the cluster serves IDs. Cleanup kills every process the
// cluster started and, if the test failed, prints the tail of every
// node's log.
func mustNewCluster(t *testing.T, opts clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	addrs := freeaddr.Loopback(t, 6)
	var peers []string
	for i := range 3 {
		n := &node{
			id:       fmt.Sprintf("n%d", i+1),
			raftAddr: addrs[2*i],
			grpcAddr: addrs[2*i+1],
		}
		n.dataDir = filepath.Join(c.dir, n.id)
		n.logPath = filepath.Join(c.dir, n.id+".log")
		peers = append(peers, fmt.Sprintf("%s=%s@%s", n.id, n.raftAddr, n.grpcAddr))
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		n.args = append([]string{"--bootstrap", strings.Join(peers, ",")}, fastTimers...)
		if opts.joinTimeout > 0 {
			n.args = append(n.args, "--join", c.addrList(), "--join-timeout", opts.joinTimeout.String())
		}
		n.args = append(n.args, opts.args...)
		if opts.tls != nil {
			files, ok := opts.nodeTLS[n.id]
			if !ok {
				files = opts.tls.Node
			}
			n.args = append(n.args, tlsArgs(files)...)
			n.args = append(n.args, "--admin-subject", securetest.AdminSubject)
		}
		if opts.clockFiles {
			f := c.clockFile(n.id)
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			n.args = append(n.args, "--test-clock-offset-file", f)
		}
	}
	// Cleanups run last-in first-out: kill first, then dump the logs.
	t.Cleanup(c.dumpLogsIfFailed)
	t.Cleanup(c.killAll)
	var err error
	// Status waits up to 1 s for each unreachable peer (a paused one
	// hangs), so an attempt must be allowed longer than that.
	if opts.tls != nil {
		c.admin = tlsClient(t, c.addrs(), opts.tls.Admin, client.WithAttemptTimeout(3*time.Second))
	} else if c.admin, err = client.New(c.addrs(), client.WithAttemptTimeout(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.admin.Close() })
	for _, n := range c.nodes {
		c.mustStart(n)
	}
	c.mustLeader()
	c.mustServe()
	return c
}

// clockFile is the clock offset file of node id.
func (c *cluster) clockFile(id string) string { return filepath.Join(c.dir, id+".clock") }

// addrs returns the gRPC addresses of n1..n3.
func (c *cluster) addrs() []string {
	var a []string
	for _, n := range c.nodes[:3] {
		a = append(a, n.grpcAddr)
	}
	return a
}

// addrList returns the gRPC addresses of n1..n3 as one --addrs value.
func (c *cluster) addrList() string { return strings.Join(c.addrs(), ",") }

// node returns the node with the given id.
func (c *cluster) node(id string) *node {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %q", id)
	return nil
}

// newNode adds a node that is not started yet and is not in --bootstrap;
// args are its serve flags besides the address flags.
func (c *cluster) newNode(id string, args ...string) *node {
	addrs := freeaddr.Loopback(c.t, 2)
	n := &node{
		id: id, raftAddr: addrs[0], grpcAddr: addrs[1],
		dataDir: filepath.Join(c.dir, id), logPath: filepath.Join(c.dir, id+".log"),
		args: args,
	}
	c.nodes = append(c.nodes, n)
	return n
}

// mustStart starts n with its flags followed by extra. The process's
// stdout and stderr are appended to n.logPath.
func (c *cluster) mustStart(n *node, extra ...string) {
	c.t.Helper()
	if n.running() {
		c.t.Fatalf("start %s: already running", n.id)
	}
	args := []string{"serve", "--id", n.id, "--data-dir", n.dataDir, "--raft-addr", n.raftAddr, "--grpc-addr", n.grpcAddr}
	args = append(args, n.args...)
	args = append(args, extra...)
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close() // the child holds its own copy of the descriptor
	fmt.Fprintf(f, "=== %s test starts: ordo %s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "))
	st, err := f.Stat()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(ordoBin, args...)
	cmd.Env = verify.NodeEnv()
	cmd.Stdout, cmd.Stderr = f, f
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", n.id, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done, n.logStart = cmd, done, st.Size()
	n.started = append(n.started, cmd)
	n.mu.Unlock()
}

// signal sends sig to n's current process.
func (c *cluster) signal(n *node, sig syscall.Signal) {
	c.t.Helper()
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("signal %s: never started", n.id)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, n.id, err)
	}
}

// mustKill SIGKILLs n and waits until the process is reaped.
func (c *cluster) mustKill(n *node) {
	c.t.Helper()
	if !n.running() {
		c.t.Fatalf("kill %s: not running", n.id)
	}
	c.signal(n, syscall.SIGKILL)
	if _, ok := c.waitExit(n, killTimeout); !ok {
		c.t.Fatalf("kill %s: process not reaped within %v", n.id, killTimeout)
	}
	c.t.Logf("%s: killed %s", time.Now().Format("15:04:05.000"), n.id)
}

// pause sends SIGSTOP to n; resume sends SIGCONT.
func (c *cluster) pause(n *node)  { c.t.Helper(); c.signal(n, syscall.SIGSTOP) }
func (c *cluster) resume(n *node) { c.t.Helper(); c.signal(n, syscall.SIGCONT) }

// mustRestart starts n again with the same data dir and flags, plus extra.
func (c *cluster) mustRestart(n *node, extra ...string) {
	c.t.Helper()
	c.mustStart(n, extra...)
	c.t.Logf("%s: restarted %s", time.Now().Format("15:04:05.000"), n.id)
}

// waitExit waits up to d for n's current process to exit and returns its
// exit code (-1 when killed by a signal).
func (c *cluster) waitExit(n *node, d time.Duration) (int, bool) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if done == nil {
		return 0, false
	}
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		return 0, false
	}
}

// output returns what n's current process has written so far.
func (c *cluster) output(n *node) string {
	c.t.Helper()
	n.mu.Lock()
	start := n.logStart
	n.mu.Unlock()
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b[min(int(start), len(b)):])
}

// killAll SIGKILLs every process the cluster ever started that still runs
// (paused ones too) and reaps them.
func (c *cluster) killAll() {
	for _, n := range c.nodes {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-done:
			continue
		default:
		}
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(killTimeout):
			c.t.Errorf("cleanup: %s (pid %d) not reaped within %v", n.id, cmd.Process.Pid, killTimeout)
		}
	}
}

// mustKillAll SIGKILLs every running node.
func (c *cluster) mustKillAll() {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.running() {
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
	for _, n := range c.nodes {
		f, err := os.Open(n.logPath)
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
		c.t.Logf("---- last %d lines of %s ----\n%s", lines, n.logPath, strings.Join(tail, "\n"))
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
	deadline := begin.Add(d)
	var last *api.StatusResponse
	var lastErr error
	for time.Now().Before(deadline) {
		resp, err := c.status(4 * time.Second)
		if err == nil {
			last = resp
			if ok(resp) {
				if e := time.Since(begin); e > 2*time.Second {
					c.t.Logf("waited %v for %s", e.Round(time.Millisecond), what)
				}
				return resp
			}
		} else {
			lastErr = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("waited %v for %s; last status: %v; last error: %v", d, what, last, lastErr)
	return nil
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
			if n.id == r.LeaderId {
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

// workload runs concurrent clients that ask for IDs and records every
// operation in a history.
type workload struct {
	t      *testing.T
	rec    *history.Recorder
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}

	acked  atomic.Int64
	failed atomic.Int64
	bad    atomic.Int64

	mu      sync.Mutex
	samples []string // a few unexpected errors, for the report
}

const (
	workloadClients = 8
	attemptTimeout  = time.Second
	opTimeout       = 3 * time.Second
	maxBatch        = 8
)

// startWorkload starts workloadClients goroutines, each with its own
// client of addrs, that call NextN with a random count in a loop until
// stop, recording into rec. Client numbers start at base, so that two
// workloads sharing one recorder can be told apart.
func startWorkload(t *testing.T, addrs []string, rec *history.Recorder, base int) *workload {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{t: t, rec: rec, cancel: cancel, done: make(chan struct{})}
	for i := range workloadClients {
		c, err := client.New(addrs, client.WithAttemptTimeout(attemptTimeout))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer c.Close()
			w.run(ctx, c, base+i)
		}()
	}
	go func() { w.wg.Wait(); close(w.done) }()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

func (w *workload) run(ctx context.Context, c *client.Client, id int) {
	for ctx.Err() == nil {
		n := 1 + rand.IntN(maxBatch)
		p := w.rec.Begin(id)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		ids, err := c.NextN(octx, n)
		cancel()
		switch {
		case err == nil:
			p.OK(ids)
			w.acked.Add(1)
		case errors.Is(err, client.ErrBadResponse):
			// The client withheld IDs that broke its own check: a
			// server bug the history cannot see, so count it apart.
			p.Unknown(err)
			w.bad.Add(1)
			w.sample(err)
		case definite(err):
			p.Fail(err)
			w.failed.Add(1)
			w.sample(err)
			time.Sleep(10 * time.Millisecond)
		default:
			p.Unknown(err)
		}
	}
}

// definite reports whether err says for certain that no IDs were handed
// out: a refusal that retrying cannot mend.
func definite(err error) bool {
	if errors.Is(err, client.ErrBadCount) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound, codes.AlreadyExists,
		codes.OutOfRange, codes.PermissionDenied, codes.Unimplemented, codes.Unauthenticated:
		return true
	}
	return false
}

func (w *workload) sample(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) < 5 {
		w.samples = append(w.samples, err.Error())
	}
}

// minPhase is the least time one load phase lasts, so that every fault
// lands on a workload with requests in flight.
const minPhase = 500 * time.Millisecond

// mustAcks lets the load run for at least minPhase and until n more
// operations are acknowledged, failing the test if that takes over d.
func (w *workload) mustAcks(n int64, d time.Duration, what string) {
	w.t.Helper()
	start := w.acked.Load()
	begin := time.Now()
	deadline := begin.Add(d)
	for time.Now().Before(deadline) {
		if w.acked.Load() >= start+n && time.Since(begin) >= minPhase {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.t.Fatalf("%s: only %d of %d acknowledged operations within %v", what, w.acked.Load()-start, n, d)
}

// stop ends the workload, waits for every client, and returns the whole
// history recorded so far. Operations that fail for certain, and answers
// the client rejected as bad, fail the test.
func (w *workload) stop() []history.Op {
	w.t.Helper()
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(2 * opTimeout):
		w.t.Fatalf("workload clients did not stop within %v", 2*opTimeout)
	}
	if n := w.bad.Load(); n > 0 {
		w.t.Errorf("%d answers rejected by the client as bad (server bug): %q", n, w.samples)
	}
	if n := w.failed.Load(); n > 0 {
		w.t.Errorf("%d operations failed for certain under a healthy workload: %q", n, w.samples)
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
