// Package verify proves Ordo's order under faults: it runs a real
// multi-process cluster (the ordo binary, real TCP, real data dirs), drives
// it through crashes, pauses, partitions and clock jumps while clients
// record a history, and checks that history with package history.
//
// Each node binds its own loopback IP (127.0.0.11, .12, ...) and Raft dials
// peers from it, so a fault-injecting proxy in front of each node's Raft
// port can tell which peer a connection comes from and cut single links.
package verify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/faultproxy"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/layout"
)

// Errors of this package.
var (
	// ErrNoLeader means no node led within the time allowed.
	ErrNoLeader = errors.New("no leader")
	// ErrBadConfig means a Config field is out of range.
	ErrBadConfig = errors.New("invalid verify configuration")
)

// ClusterConfig describes the cluster to start.
type ClusterConfig struct {
	// Binary is the ordo binary.
	Binary string
	// Dir holds each node's data dir, log and clock-offset file.
	Dir string
	// Nodes is the number of voters, 3 or 5.
	Nodes int
	// ServeArgs are added to every node's `ordo serve` command line (Raft
	// timers, or a test-only switch).
	ServeArgs []string
	// Layout is the layout spec the nodes serve (--layout); "" is ordo
	// serve's default. The cluster's own calls for IDs follow its width.
	Layout string
	// TLS, if set, runs every node with mutual TLS (TLS.Node, and admin
	// rights for TLS.Admin's subject), and the cluster's own calls
	// (finding the leader, admin calls) present TLS.Admin.
	TLS *TLS
	// JoinTimeout, if set, gives every start of every node, the first
	// included, the one command line a StatefulSet gives all of them (the
	// Kubernetes example): --bootstrap with every node, --join with every
	// node's gRPC address, and this --join-timeout. Unset, only the first
	// start carries --bootstrap.
	JoinTimeout time.Duration
	// CrashBeforeKeyedAnswer starts every node with ordo serve
	// --test-crash-before-keyed-answer on a file of its own
	// (Node.CrashFile), which kill-leader-before-answer arms.
	CrashBeforeKeyedAnswer bool
	// NodeArgs are more serve flags for one node, by name, on every start
	// (after ServeArgs and TLS's flags, so they win: a node's own
	// certificate files, say).
	NodeArgs map[string][]string
	// Logf reports what the cluster does; nil discards.
	Logf func(format string, args ...any)
}

// Node is one ordo process and the proxy in front of its Raft port.
type Node struct {
	Name      string
	IP        string
	RaftAddr  string // the node's own Raft listener
	Advertise string // the proxy in front of it, which peers dial
	GRPCAddr  string
	DataDir   string
	ClockFile string
	// CrashFile is the file of its --test-crash-before-keyed-answer,
	// with ClusterConfig.CrashBeforeKeyedAnswer.
	CrashFile string
	LogFile   string
	// Args are serve flags given on every start of this node, after the
	// cluster's and before a start's own extra flags (a later flag
	// wins). Change them only while the node is stopped.
	Args []string

	proxy    *faultproxy.Proxy
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd exits
	logStart int64         // size of LogFile when cmd started
}

// Cluster is a running set of ordo processes.
type Cluster struct {
	cfg   ClusterConfig
	Nodes []*Node
	Net   *faultproxy.Net
	// extra are nodes a fault added for a while (grow-shrink); they are
	// not among Nodes, so no other fault picks them.
	extra []*Node
	// bootstrap is the --bootstrap list the nodes were created with.
	bootstrap string

	// tlsArgs are the serve flags of TLS; adminTLS is how the cluster's
	// own calls dial. Both nil for plaintext.
	tlsArgs  []string
	adminTLS *tls.Config
	// wide is set when the nodes serve a 128-bit layout: the cluster's
	// own calls for IDs then ask for ticks (api.TicksKey).
	wide bool
	// workload, set while Run's nemesis runs, records the IDs a fault
	// asks for itself (lose-data-restart's passMark), so the checker sees
	// them and a bad answer counts as the clients' do.
	workload *Workload
}

// StartCluster starts cfg.Nodes nodes that bootstrap together and waits
// until one of them serves IDs.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Nodes < 1 || cfg.Nodes > 9 {
		return nil, fmt.Errorf("%w: %d nodes, want 1 to 9", ErrBadConfig, cfg.Nodes)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	c := &Cluster{cfg: cfg, Net: faultproxy.NewNet()}
	if cfg.Layout != "" {
		l, err := layout.Parse(cfg.Layout)
		if err != nil {
			return nil, fmt.Errorf("%w: layout: %w", ErrBadConfig, err)
		}
		c.wide = l.Wide()
	}
	if cfg.TLS != nil {
		var ips []string
		for i := range cfg.Nodes {
			ips = append(ips, nodeIP(i))
		}
		ct, err := loadClusterTLS(cfg.TLS, ips)
		if err != nil {
			return nil, err
		}
		c.tlsArgs, c.adminTLS = ct.serveArgs, ct.admin
	}
	var peers []string
	for i := range cfg.Nodes {
		n, err := c.newNode(i, fmt.Sprintf("n%d", i+1))
		if err != nil {
			c.Stop()
			return nil, err
		}
		n.Args = cfg.NodeArgs[n.Name]
		c.Nodes = append(c.Nodes, n)
		c.Net.Add(n.Name, n.IP, n.proxy)
		peers = append(peers, fmt.Sprintf("%s=%s@%s", n.Name, n.Advertise, n.GRPCAddr))
	}
	c.bootstrap = strings.Join(peers, ",")
	for _, n := range c.Nodes {
		first := []string{"--bootstrap", c.bootstrap}
		if cfg.JoinTimeout > 0 {
			n.Args = append(c.everyStartArgs(cfg.JoinTimeout), n.Args...)
			first = nil
		}
		if len(c.Nodes) == 1 {
			// A list of one has no one to ask whether its cluster
			// exists: creating it is the one-shot --force-bootstrap,
			// on the first start only.
			first = append(first, "--force-bootstrap")
		}
		if err := c.start(n, first...); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitServing(ctx); err != nil {
		// What each node last logged says why, once the data dir is gone.
		var last []string
		for _, n := range c.Nodes {
			last = append(last, n.Name+": "+lastLine(n.LogFile))
		}
		c.Stop()
		return nil, fmt.Errorf("%w; last log lines: %s", err, strings.Join(last, " | "))
	}
	return c, nil
}

// newNode prepares node name on the i'th loopback IP (from 0).
func (c *Cluster) newNode(i int, name string) (*Node, error) {
	n := &Node{Name: name, IP: nodeIP(i)}
	n.DataDir = filepath.Join(c.cfg.Dir, n.Name)
	n.ClockFile = filepath.Join(c.cfg.Dir, n.Name+".clock")
	n.LogFile = filepath.Join(c.cfg.Dir, n.Name+".log")
	if err := os.MkdirAll(c.cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("create %s: %w", c.cfg.Dir, err)
	}
	if err := os.WriteFile(n.ClockFile, nil, 0o640); err != nil {
		return nil, fmt.Errorf("create clock file: %w", err)
	}
	if c.cfg.CrashBeforeKeyedAnswer {
		n.CrashFile = filepath.Join(c.cfg.Dir, n.Name+".crash")
		if err := os.WriteFile(n.CrashFile, nil, 0o640); err != nil {
			return nil, fmt.Errorf("create crash file: %w", err)
		}
	}
	// The proxy binds port 0 after freeaddr released the node's ports,
	// so the kernel may hand it one of them: the node could then not
	// listen, and its peers' connections to the proxy would loop back
	// into it until the run ran out of files. Pick again when it does.
	for range 10 {
		addrs, err := freeaddr.Addrs(n.IP, 2)
		if err != nil {
			return nil, err
		}
		n.RaftAddr, n.GRPCAddr = addrs[0], addrs[1]
		n.proxy, err = faultproxy.New(n.IP+":0", n.RaftAddr, nil)
		if err != nil {
			return nil, fmt.Errorf("start proxy for %s: %w", n.Name, err)
		}
		n.Advertise = n.proxy.Addr()
		if !slices.Contains(addrs, n.Advertise) {
			return n, nil
		}
		n.proxy.Close()
	}
	return nil, fmt.Errorf("start proxy for %s: its port kept coinciding with the node's", n.Name)
}

// AddNode prepares a node that is neither started nor in the bootstrap
// list, on the next loopback IP, with args as its Args (--join, say). It
// is one of Nodes from then on, so faults may pick it and Stop kills it.
func (c *Cluster) AddNode(name string, args ...string) (*Node, error) {
	n, err := c.newNode(c.unusedIP(0, true), name)
	if err != nil {
		return nil, err
	}
	n.Args = args
	c.Nodes = append(c.Nodes, n)
	c.Net.Add(n.Name, n.IP, n.proxy)
	return n, nil
}

// Bootstrap is the --bootstrap list the cluster was started with.
func (c *Cluster) Bootstrap() string { return c.bootstrap }

// unusedIP returns the index (for nodeIP) of the k'th IP, from 0, that no
// node of Nodes binds, nor, with avoidExtra, a node a fault added: the
// nodes a fault adds and the nodes a test adds must never share an IP,
// or a partition of one would cut off the other. Without nodes added by a
// test, the nodes a fault adds take the IPs right after the members',
// which a TLS node certificate names.
func (c *Cluster) unusedIP(k int, avoidExtra bool) int {
	used := map[string]bool{}
	for _, n := range c.Nodes {
		used[n.IP] = true
	}
	if avoidExtra {
		for _, n := range c.extra {
			used[n.IP] = true
		}
	}
	for i := 0; ; i++ {
		if used[nodeIP(i)] {
			continue
		}
		if k == 0 {
			return i
		}
		k--
	}
}

// nodeIP is the loopback IP the i'th node (from 0) binds.
func nodeIP(i int) string { return fmt.Sprintf("127.0.0.%d", 11+i) }

// start runs `ordo serve` for n with extra arguments.
func (c *Cluster) start(n *Node, extra ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done: // it ended by itself; start it again
		default:
			return fmt.Errorf("%s is already running", n.Name)
		}
	}
	args := append([]string{"serve",
		"--id", n.Name, "--data-dir", n.DataDir,
		"--raft-addr", n.RaftAddr, "--raft-advertise", n.Advertise, "--grpc-addr", n.GRPCAddr,
		"--test-clock-offset-file", n.ClockFile,
	}, c.tlsArgs...)
	if n.CrashFile != "" {
		args = append(args, "--test-crash-before-keyed-answer", n.CrashFile)
	}
	args = append(args, c.cfg.ServeArgs...)
	if c.cfg.Layout != "" {
		args = append(args, "--layout", c.cfg.Layout)
	}
	args = append(args, n.Args...)
	args = append(args, extra...)
	logFile, err := os.OpenFile(n.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	fmt.Fprintf(logFile, "=== %s start: ordo %s\n", time.Now().Format("15:04:05.000"), strings.Join(args, " "))
	st, err := logFile.Stat()
	if err != nil {
		logFile.Close()
		return fmt.Errorf("stat log: %w", err)
	}
	cmd := exec.Command(c.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = NodeEnv()
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logFile.Close(); close(done) }()
	n.cmd, n.done, n.logStart = cmd, done, st.Size()
	c.cfg.Logf("started %s (pid %d)", n.Name, cmd.Process.Pid)
	return nil
}

// NodeEnv is the environment for ordo processes started by a test or a
// verification: this process's, minus ORDO_ variables, which would
// silently change every node's flags.
func NodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ORDO_") {
			env = append(env, kv)
		}
	}
	return env
}

// Start restarts a stopped node with its data dir.
func (c *Cluster) Start(n *Node) error { return c.start(n) }

// StartWith starts a stopped node (or one that ended by itself) with its
// data dir, its Args and then extra, which win over earlier flags.
func (c *Cluster) StartWith(n *Node, extra ...string) error { return c.start(n, extra...) }

// Output is what n's current (or last) process has written to its log
// since it started.
func (n *Node) Output() (string, error) {
	n.mu.Lock()
	start := n.logStart
	n.mu.Unlock()
	b, err := os.ReadFile(n.LogFile)
	if err != nil {
		return "", err
	}
	return string(b[min(int(start), len(b)):]), nil
}

// everyStartArgs are the flags a StatefulSet gives every start of every
// node (the Kubernetes example): the bootstrap list and the members to
// join through, with joinTimeout. A node whose data dir holds state
// ignores them.
func (c *Cluster) everyStartArgs(joinTimeout time.Duration) []string {
	return []string{"--bootstrap", c.bootstrap, "--join", strings.Join(c.Addrs(), ","), "--join-timeout", joinTimeout.String()}
}

// WaitExit waits up to d for n's process to end by itself (or after
// Signal) and returns its exit code, -1 if a signal ended it; exited is
// false if it still runs, or was never started or was killed by Kill.
func (n *Node) WaitExit(d time.Duration) (code int, exited bool) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return 0, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode(), true
	case <-t.C:
		return 0, false
	}
}

// Kill sends SIGKILL and waits for the process to go.
func (c *Cluster) Kill(n *Node) error {
	cmd, err := n.end(os.Kill, "kill", 10*time.Second)
	if cmd != nil && err == nil {
		c.cfg.Logf("killed %s", n.Name)
	}
	return err
}

// end takes n's process from n (n runs nothing after it), sends it sig
// and waits up to within for it to exit; a process still running then is
// killed, and the error says so. cmd is the process, nil when n ran none.
// verb names the stop in errors. A signal to a process that has already
// exited is no error.
func (n *Node) end(sig os.Signal, verb string, within time.Duration) (cmd *exec.Cmd, err error) {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return nil, nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return cmd, fmt.Errorf("%s %s: %w", verb, n.Name, err)
	}
	select {
	case <-done:
		return cmd, nil
	case <-time.After(within):
		cmd.Process.Kill()
		return cmd, fmt.Errorf("%s %s: still running %v after the signal", verb, n.Name, within)
	}
}

// Pause stops n's process with SIGSTOP: it keeps its state and sockets
// but runs nothing, like a long GC pause or a frozen VM.
func (c *Cluster) Pause(n *Node) error { return c.signal(n, syscall.SIGSTOP) }

// Resume lets a paused process run again with SIGCONT.
func (c *Cluster) Resume(n *Node) error { return c.signal(n, syscall.SIGCONT) }

// Signal sends sig to n's process and does not wait (SIGTERM, to watch
// how it stops with WaitExit and Output).
func (c *Cluster) Signal(n *Node, sig syscall.Signal) error { return c.signal(n, sig) }

func (c *Cluster) signal(n *Node, sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s is not running", n.Name)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", n.Name, err)
	}
	c.cfg.Logf("sent %s to %s", sig, n.Name)
	return nil
}

// Running reports whether n's process is up.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Exited describes every node whose process ended by itself (not killed
// by the cluster): its name, exit status and last line of log.
func (c *Cluster) Exited() []string {
	var out []string
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-done:
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s: %v; last log line: %s", n.Name, cmd.ProcessState, lastLine(n.LogFile)))
	}
	return out
}

// lastLine is the last non-empty line of file, at most 300 bytes of it.
func lastLine(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return truncate(lines[len(lines)-1], 300)
}

// SetClockOffset shifts n's wall clock (test-only flag of ordo serve).
func (c *Cluster) SetClockOffset(n *Node, d time.Duration) error {
	s := ""
	if d != 0 {
		s = d.String()
	}
	if err := os.WriteFile(n.ClockFile, []byte(s), 0o640); err != nil {
		return fmt.Errorf("set clock offset of %s: %w", n.Name, err)
	}
	c.cfg.Logf("clock of %s shifted by %s", n.Name, d)
	return nil
}

// Addrs returns every node's gRPC address.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.GRPCAddr)
	}
	return a
}

// Node returns the node with the given name or gRPC address.
func (c *Cluster) Node(nameOrAddr string) *Node {
	for _, n := range c.Nodes {
		if n.Name == nameOrAddr || n.GRPCAddr == nameOrAddr {
			return n
		}
	}
	return nil
}

// Leader asks the running nodes who leads, and returns that node once it
// hands out IDs.
func (c *Cluster) Leader(ctx context.Context) (*Node, error) {
	for {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			if l := c.askLeader(ctx, n); l != nil && l.Running() {
				return l, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrNoLeader, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// onNode calls fn with a connection to node n itself (no failover, no
// forwarding), bounded by 500 ms.
func (c *Cluster) onNode(ctx context.Context, n *Node, fn func(context.Context, *grpc.ClientConn) error) error {
	conn, err := dial(n.GRPCAddr, c.adminTLS)
	if err != nil {
		return err
	}
	defer conn.Close()
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	return fn(actx, conn)
}

// nodeAdmin calls fn with an admin client of node n itself.
func (c *Cluster) nodeAdmin(ctx context.Context, n *Node, fn func(context.Context, api.AdminClient) error) error {
	return c.onNode(ctx, n, func(ctx context.Context, conn *grpc.ClientConn) error {
		return fn(ctx, api.NewAdminClient(conn))
	})
}

// askLeader asks n for a single ID straight from n (no failover); a reply
// names the leader that issued it.
func (c *Cluster) askLeader(ctx context.Context, n *Node) *Node {
	var leader *Node
	_ = c.onNode(ctx, n, func(ctx context.Context, conn *grpc.ClientConn) error {
		resp, err := api.NewSequencerClient(conn).Next(api.WithTicks(ctx, c.wide), &api.NextRequest{Count: 1})
		if err == nil {
			leader = c.Node(resp.LeaderId)
		}
		return err
	})
	return leader
}

// WaitServing waits until some node hands out IDs.
func (c *Cluster) WaitServing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := c.Leader(ctx)
	return err
}

// Admin runs an admin call through a failover client.
func (c *Cluster) Admin(ctx context.Context, fn func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error) error {
	cl, err := c.adminClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Admin(ctx, fn)
}

// adminClient is a client of the cluster with the operator's rights.
func (c *Cluster) adminClient() (*client.Client, error) {
	opts := []client.Option{client.WithAttemptTimeout(time.Second)}
	if c.adminTLS != nil {
		opts = append(opts, client.WithTLS(c.adminTLS))
	}
	return client.New(c.Addrs(), opts...)
}

// Remove removes n from the cluster (client.Remove: a retry that finds
// it gone after an attempt whose answer was lost is done).
func (c *Cluster) Remove(ctx context.Context, n *Node) error {
	cl, err := c.adminClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.Remove(ctx, n.Name)
}

// Terminate stops n gracefully, with SIGTERM, as an operator would (a
// leader hands leadership over first), and waits until it has exited.
func (c *Cluster) Terminate(n *Node) error {
	cmd, err := n.end(syscall.SIGTERM, "terminate", 20*time.Second)
	if cmd == nil || err != nil {
		return err
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("terminate %s: exit code %d after SIGTERM, want 0", n.Name, code)
	}
	c.cfg.Logf("terminated %s", n.Name)
	return nil
}

// Stop kills every node and closes the proxies.
func (c *Cluster) Stop() {
	for _, n := range c.extra {
		if err := c.Kill(n); err != nil {
			c.cfg.Logf("%v", err)
		}
	}
	for _, n := range c.Nodes {
		if err := c.Kill(n); err != nil {
			c.cfg.Logf("%v", err)
		}
	}
	c.Net.Close()
}
