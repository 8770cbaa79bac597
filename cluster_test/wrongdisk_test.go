//go:build unix

package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/verify"
)

// Issue 22's holes, on real processes driven through the CLI's command
// lines: a node started on the wrong disk (an empty one, or another
// cluster's) must not serve, and a stale address must not keep members
// from restarting.

// founderJoinTimeout is the --join-timeout of the founding tests' nodes:
// long enough for n2 and n3 to wait for n1's first election, short
// enough that a founder that cannot tell is refused within the test.
const founderJoinTimeout = 5 * time.Second

// mustFoundByOne starts the cluster issue 22 describes: n1 founds it
// with a one-entry --bootstrap list (itself), and n2 and n3 join it with
// --join of the three nodes' gRPC addresses. Creating a cluster from a
// list of one is the one-shot --force-bootstrap, so n1 runs alone with
// it first; then it restarts on its data with its usual line (the list
// and --join with the three addresses), which every later start carries
// too, as a service manager's would, and n2 and n3 start with --join.
func mustFoundByOne(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*leaderTimeout)
	defer cancel()
	vc, err := verify.StartCluster(ctx, verify.ClusterConfig{
		Binary: ordoBin, Dir: t.TempDir(), Nodes: 1,
		ServeArgs: slices.Clone(fastTimers),
		NodeArgs:  map[string][]string{"n1": {"--force-bootstrap"}},
		Logf:      t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{Cluster: vc, t: t}
	t.Cleanup(c.dumpLogsIfFailed)
	t.Cleanup(vc.Stop)
	n1 := c.node("n1")
	c.mustKill(n1)
	c.newNode("n2")
	c.newNode("n3")
	// n2 and n3 may wait for n1's restart and election: a longer
	// --join-timeout, which only this start uses (they hold state after).
	n1.Args = []string{"--bootstrap", vc.Bootstrap(), "--join", c.addrList(), "--join-timeout", founderJoinTimeout.String()}
	for _, n := range c.Nodes {
		if n != n1 {
			n.Args = []string{"--join", c.addrList(), "--join-timeout", leaderTimeout.String()}
		}
		c.mustStart(n)
	}
	if c.admin, err = client.New(c.addrs(), client.WithAttemptTimeout(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.admin.Close() })
	c.waitStatus(2*leaderTimeout, "n1, n2 and n3 in one cluster", func(r *api.StatusResponse) bool {
		if len(r.Nodes) != 3 || r.LeaderId == "" {
			return false
		}
		for _, n := range r.Nodes {
			if !n.Voter || n.Role != "leader" && n.Role != "follower" {
				return false
			}
		}
		return true
	})
	c.mustServe()
	t.Logf("n1 founded the cluster with %s; n2 and n3 joined", strings.Join(n1.Args, " "))
	return c
}

// nodeStatus asks the node at addr itself for its status, within 1 s.
func nodeStatus(admin api.AdminClient) (*api.NodeInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return admin.NodeStatus(ctx, &api.NodeStatusRequest{})
}

// mustClusterID returns the cluster id that the leader reports.
func mustClusterID(t *testing.T, c *cluster) string {
	t.Helper()
	var id string
	c.waitStatus(leaderTimeout, "the leader to report a cluster id", func(r *api.StatusResponse) bool {
		for _, n := range r.Nodes {
			if n.Id == r.LeaderId {
				id = n.ClusterId
			}
		}
		return id != ""
	})
	return id
}

// statusWatch asks each watched node itself for its status every
// watchEvery, for as long as the test runs, and keeps what a test checks
// afterwards: every cluster id each node reported, whether it reported
// itself leader, and any step back of its high-water mark.
type statusWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	ids       map[string]map[string]bool // node name -> cluster ids it reported
	leader    map[string]bool            // node name -> reported itself leader
	highWater map[string]uint64          // node name -> highest mark reported
	drops     []string                   // high-water marks that went down
}

const watchEvery = 50 * time.Millisecond

// startWatch watches nodes until the test ends (or stop).
func startWatch(t *testing.T, nodes ...*node) *statusWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &statusWatch{cancel: cancel, ids: map[string]map[string]bool{}, leader: map[string]bool{}, highWater: map[string]uint64{}}
	// Every node's entry first: a watcher reads the map while the loop
	// below would still be writing it.
	for _, n := range nodes {
		w.ids[n.Name] = map[string]bool{}
	}
	for _, n := range nodes {
		admin := api.NewAdminClient(grpctest.Dial(t, n.GRPCAddr))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for ctx.Err() == nil {
				if info, err := nodeStatus(admin); err == nil {
					w.note(n.Name, info)
				}
				select {
				case <-ctx.Done():
				case <-time.After(watchEvery):
				}
			}
		}()
	}
	t.Cleanup(w.stop)
	return w
}

func (w *statusWatch) note(name string, info *api.NodeInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if info.ClusterId != "" {
		w.ids[name][info.ClusterId] = true
	}
	if info.Role == "leader" {
		w.leader[name] = true
	}
	if hw := w.highWater[name]; info.HighWater < hw {
		w.drops = append(w.drops, fmt.Sprintf("%s: %d after %d", name, info.HighWater, hw))
	} else {
		w.highWater[name] = info.HighWater
	}
}

// stop ends the watch; it may be called more than once.
func (w *statusWatch) stop() { w.cancel(); w.wg.Wait() }

// foreignIDs lists, as "node: id", every cluster id other than want that
// a watched node reported.
func (w *statusWatch) foreignIDs(want string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, ids := range w.ids {
		for id := range ids {
			if id != want {
				out = append(out, name+": "+id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ledSince reports whether node name reported itself leader since the
// last call for it.
func (w *statusWatch) ledSince(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	led := w.leader[name]
	w.leader[name] = false
	return led
}

// highWaterDrops lists the high-water marks that went down on the
// watched nodes named (all of them when none is named).
func (w *statusWatch) highWaterDrops(names ...string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, d := range w.drops {
		if len(names) == 0 || slices.Contains(names, strings.SplitN(d, ":", 2)[0]) {
			out = append(out, d)
		}
	}
	return out
}

// pinnedCaller asks one node, and only it, for IDs in a loop, as a
// client that never fails over: whatever that node's process hands out
// reaches the history, and the tally counts it.
type pinnedCaller struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan struct{}
	tally  history.Tally
}

// startPinned starts a pinned caller of n recording into rec as client.
func startPinned(t *testing.T, n *node, rec *history.Recorder, clientID int) *pinnedCaller {
	t.Helper()
	seq := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr))
	ctx, cancel := context.WithCancel(context.Background())
	p := &pinnedCaller{t: t, cancel: cancel, done: make(chan struct{})}
	judge := func(err error) history.Ending {
		switch {
		case ctx.Err() != nil:
			return history.CutOff
		case errors.Is(err, client.ErrBadResponse):
			return history.BadAnswer
		}
		return history.Uncertain
	}
	caller := history.Caller{Rec: rec, Tally: &p.tally, Client: clientID, Judge: judge}
	const count = 3
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			_, err := caller.Call(func() ([]uint64, []string, error) {
				octx, ocancel := context.WithTimeout(ctx, attemptTimeout)
				defer ocancel()
				resp, err := seq.Next(octx, &api.NextRequest{Count: count})
				if err != nil {
					return nil, nil, err
				}
				ids, err := api.ExpandRuns(resp.Runs, count)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: %w", client.ErrBadResponse, err)
				}
				return ids, nil, nil
			})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

// served is how many calls the node has answered with IDs so far.
func (p *pinnedCaller) served() int64 { return p.tally.Counts().OK }

// servedSettled is served once some call has ended after it was asked,
// the node being down: the caller makes one call at a time, so a call
// answered before the node was killed and not yet counted when asked is
// counted then, and cannot be taken for an answer of what comes after.
func (p *pinnedCaller) servedSettled() int64 {
	p.t.Helper()
	ended := func(c history.Counts) int64 { return c.OK + c.Failed + c.Unknown + c.Bad }
	before := ended(p.tally.Counts())
	deadline := time.Now().Add(phaseTimeout)
	for time.Now().Before(deadline) {
		if c := p.tally.Counts(); ended(c) > before {
			return c.OK
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.t.Fatalf("the pinned caller ended no call within %v", phaseTimeout)
	return 0
}

// stop ends the calls; a malformed answer fails the test.
func (p *pinnedCaller) stop() {
	p.t.Helper()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.t.Fatalf("pinned caller did not stop within %v", stopTimeout)
	}
	if c := p.tally.Counts(); c.Bad > 0 {
		p.t.Errorf("%d malformed answers to the pinned caller; the last error: %s", c.Bad, c.LastError)
	}
}

// mustWipe removes n's data dir.
func mustWipe(t *testing.T, n *node) {
	t.Helper()
	if err := os.RemoveAll(n.DataDir); err != nil {
		t.Fatal(err)
	}
}

// rejoinAndCheck mends n as an operator would (removeAndRejoin), lets
// the workload run one more phase, stops every caller, and checks the
// whole history and that no node ever reported a cluster id but mainID.
func rejoinAndCheck(t *testing.T, c *cluster, n *node, w *workload, pinned *pinnedCaller, watch *statusWatch, mainID string) {
	t.Helper()
	removeAndRejoin(t, c, n)
	w.mustAcks(phaseAcks, phaseTimeout, "after "+n.Name+" joined again")
	pinned.stop()
	ops := w.stop()
	watch.stop()
	if ids := watch.foreignIDs(mainID); len(ids) > 0 {
		t.Errorf("after the rejoin, a node reported a cluster id other than %s: %v", mainID, ids)
	}
	mustCheck(t, ops)
}

// removeAndRejoin is the operator's remedy for a node refused with an
// empty data dir: `ordo remove`, then a start with an empty data dir and
// the node's usual command line, which must make it a voting follower
// within leaderTimeout. Failing that, the test fails but goes on, so that
// the history recorded meanwhile is checked too.
func removeAndRejoin(t *testing.T, c *cluster, n *node) {
	t.Helper()
	if n.Running() {
		c.mustKill(n)
	}
	res := mustRunOrdo(t, "remove", "--id", n.Name, "--addrs", c.addrList(), "--timeout", "10s")
	t.Logf("ordo remove --id %s: %s", n.Name, strings.TrimSpace(res.Stdout))
	mustWipe(t, n)
	c.mustRestart(n)
	deadline := time.Now().Add(leaderTimeout)
	var last *api.StatusResponse
	for time.Now().Before(deadline) {
		if resp, err := c.status(4 * time.Second); err == nil {
			last = resp
			for _, m := range resp.Nodes {
				if m.Id == n.Name && m.Voter && m.Role == "follower" {
					t.Logf("%s joined again as a new member", n.Name)
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s, removed and started again with an empty data dir and its usual line, is not a voting follower within %v (last status %v); its log says: %s",
		n.Name, leaderTimeout, last, grepLines(c.output(n), "serving: start="))
}

// checkCreatedNothing checks that n1, started as how says, created no
// cluster: it answered no call (served), never reported itself leader
// (led), no node reported a cluster id other than mainID, its log (out)
// does not say it bootstrapped, and the history so far is clean.
func checkCreatedNothing(t *testing.T, how string, served int64, led bool, watch *statusWatch, mainID, out string, rec *history.Recorder) {
	t.Helper()
	if served > 0 {
		t.Errorf("n1, %s, answered %d calls with IDs; want none", how, served)
	}
	if led {
		t.Errorf("n1, %s, reported itself leader", how)
	}
	if ids := watch.foreignIDs(mainID); len(ids) > 0 {
		t.Errorf("a node reported a cluster id other than the cluster's %s: %v (n1 bootstrapped a new cluster)", mainID, ids)
	}
	if strings.Contains(out, "start=bootstrap") {
		t.Errorf("n1's log says it bootstrapped:\n%s", grepLines(out, "start=bootstrap"))
	}
	checkSoFar(t, rec, "up to the refusal")
}

// checkSoFar checks the history recorded so far, and fails the test (and
// goes on) unless it is clean.
func checkSoFar(t *testing.T, rec *history.Recorder, what string) {
	t.Helper()
	if rep := history.Check(rec.Ops()); !rep.OK() {
		t.Errorf("history %s is not clean:\n%s", what, rep)
	}
}

// TestFounderWithOneEntryListLostDataDirIsRefused is issue 22's first
// hole with the other nodes up. n1 founded the cluster with a one-entry
// --bootstrap list and --join with every node; it loses its data dir and
// restarts with that same line. Its list names no peer to ask, but its
// --join addresses are peers that hold the cluster's state: it must not
// bootstrap a new cluster (which would hand out IDs from the clock, under
// another cluster id, until the old leader reached it), but take the join
// path and be refused as a member that lost its data. Clients, one of
// them pinned to n1, call throughout; the history must stay clean. Then
// the remedy: `ordo remove --id n1` and the same line again make it a new
// member.
func TestFounderWithOneEntryListLostDataDirIsRefused(t *testing.T) {
	c := mustFoundByOne(t)
	n1 := c.node("n1")
	mainID := mustClusterID(t, c)
	rec := history.NewRecorder()
	w := startWorkload(t, c.addrs(), rec, 0)
	pinned := startPinned(t, n1, rec, 100)
	watch := startWatch(t, c.Nodes[:3]...)
	w.mustAcks(phaseAcks, phaseTimeout, "before n1 loses its data dir")
	if c.mustLeader() == n1 {
		// The hole is a follower's: the old leader goes on, and reaches
		// the new cluster's node only after a while.
		mustTransferLeader(t, c, c.node("n2"))
	}

	c.mustKill(n1)
	mustWipe(t, n1)
	watch.ledSince(n1.Name)
	servedBefore := pinned.servedSettled()
	start := time.Now()
	c.mustRestart(n1) // its usual line: --bootstrap n1=... --join n1,n2,n3
	code, exited := n1.WaitExit(founderJoinTimeout + exitTimeout)
	took := time.Since(start)
	w.mustAcks(phaseAcks, phaseTimeout, "after n1 restarted with an empty data dir")
	served := pinned.served() - servedBefore
	led := watch.ledSince(n1.Name)
	out := c.output(n1)

	switch {
	case !exited:
		t.Errorf("n1, restarted with an empty data dir and its one-entry --bootstrap list, still runs %v later; want it refused (exit non-zero)", took.Round(time.Millisecond))
	case code == 0:
		t.Errorf("n1, restarted with an empty data dir, exited 0 after %v; want a refusal (non-zero)", took.Round(time.Millisecond))
	case !strings.Contains(out, "already a member"):
		t.Errorf("n1 exited %d after %v, but its refusal does not say it is already a member:\n%s", code, took.Round(time.Millisecond), lastLines(out, 5))
	default:
		t.Logf("n1 refused after %v (exit %d): %s", took.Round(time.Millisecond), code, lastLines(out, 1))
	}
	checkCreatedNothing(t, "restarted with an empty data dir", served, led, watch, mainID, out, rec)

	rejoinAndCheck(t, c, n1, w, pinned, watch, mainID)
}

// TestFounderLostDataDirInWholeClusterCrashIsRefused is issue 22's first
// hole in a whole-cluster crash: n1, the founder with a one-entry
// --bootstrap list, lost its data dir and boots first, while n2 and n3
// are still down. It cannot ask any peer, so it must not bootstrap (a new
// cluster, with IDs from the clock, for as long as they are down): it
// must never answer a call with IDs, and must exit non-zero, at its
// --join-timeout or once n2 and n3 are back and the leader lists it. n2
// and n3 then serve without it; no node ever reports a second cluster
// id; the history of every call is clean. The remedy makes n1 a member
// again.
func TestFounderLostDataDirInWholeClusterCrashIsRefused(t *testing.T) {
	c := mustFoundByOne(t)
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	mainID := mustClusterID(t, c)
	rec := history.NewRecorder()
	w := startWorkload(t, c.addrs(), rec, 0)
	pinned := startPinned(t, n1, rec, 100)
	watch := startWatch(t, n1, n2, n3)
	w.mustAcks(phaseAcks, phaseTimeout, "before the crash")

	c.mustKillAll()
	mustWipe(t, n1)
	watch.ledSince(n1.Name)
	servedBefore := pinned.servedSettled()
	start := time.Now()
	c.mustRestart(n1)
	// n2 and n3 stay down until n1 has given up, or a while longer than
	// its --join-timeout.
	code, exited := n1.WaitExit(founderJoinTimeout + 2*time.Second)
	alone := time.Since(start)
	servedAlone := pinned.served() - servedBefore
	ledAlone := watch.ledSince(n1.Name)
	t.Logf("n1 alone for %v: exited %v, %d calls answered with IDs", alone.Round(time.Millisecond), exited, servedAlone)
	if servedAlone > 0 {
		t.Errorf("n1, started with an empty data dir while n2 and n3 were down, answered %d calls with IDs within %v; want none", servedAlone, alone.Round(time.Millisecond))
	}
	if ledAlone {
		t.Errorf("n1, started with an empty data dir while n2 and n3 were down, reported itself leader (a new cluster)")
	}
	if ids := watch.foreignIDs(mainID); len(ids) > 0 {
		t.Errorf("while n2 and n3 were down, a node reported a cluster id other than the cluster's %s: %v (n1 bootstrapped a new cluster)", mainID, ids)
	}
	checkSoFar(t, rec, "while n2 and n3 were down")

	c.mustRestart(n2)
	c.mustRestart(n3)
	if !exited {
		code, exited = n1.WaitExit(exitTimeout)
	}
	mustInCluster(t, c, n2, leaderTimeout)
	mustInCluster(t, c, n3, leaderTimeout)
	w.mustAcks(phaseAcks, phaseTimeout, "after n2 and n3 came back")
	took := time.Since(start)
	out := c.output(n1)

	switch {
	case !exited:
		t.Errorf("n1, started with an empty data dir, still runs %v after its start, n2 and n3 back; want it refused (exit non-zero)", took.Round(time.Millisecond))
	case code == 0:
		t.Errorf("n1, started with an empty data dir, exited 0; want a refusal (non-zero)")
	case !strings.Contains(out, "cannot tell") && !strings.Contains(out, "already a member"):
		t.Errorf("n1 exited %d, but its refusal says neither that it cannot tell whether the cluster exists nor that it is already a member:\n%s", code, lastLines(out, 5))
	default:
		t.Logf("n1 refused %v after its start (exit %d): %s", took.Round(time.Millisecond), code, lastLines(out, 1))
	}
	served := pinned.served() - servedBefore - servedAlone
	checkCreatedNothing(t, "started with an empty data dir, after n2 and n3 came back,", served, watch.ledSince(n1.Name), watch, mainID, out, rec)

	rejoinAndCheck(t, c, n1, w, pinned, watch, mainID)
	mustStatusJSONCluster(t, c, mainID)
}

// mustStatusJSONCluster checks that `ordo status --json` names one
// cluster id, want, for every node.
func mustStatusJSONCluster(t *testing.T, c *cluster, want string) {
	t.Helper()
	res := mustRunOrdo(t, "status", "--json", "--addrs", c.addrList(), "--timeout", "10s")
	var st struct {
		Nodes []struct {
			ID        string `json:"id"`
			ClusterID string `json:"cluster_id"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
		t.Fatalf("ordo status --json: %v: %q", err, res.Stdout)
	}
	for _, n := range st.Nodes {
		if n.ClusterID != want {
			t.Errorf("ordo status --json: node %s reports cluster %q, want %q", n.ID, n.ClusterID, want)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// mustInCluster waits, up to d, until n answers as the leader or as a
// follower in recent contact with one; if n's process exits first, the
// test fails with its exit code and last lines.
func mustInCluster(t *testing.T, c *cluster, n *node, d time.Duration) {
	t.Helper()
	admin := api.NewAdminClient(grpctest.Dial(t, n.GRPCAddr))
	deadline := time.Now().Add(d)
	var last *api.NodeInfo
	var lastErr error
	for time.Now().Before(deadline) {
		if code, exited := n.WaitExit(0); exited {
			t.Fatalf("%s, restarted with its data dir, exited with code %d:\n%s", n.Name, code, lastLines(c.output(n), 3))
		}
		last, lastErr = nodeStatus(admin)
		if lastErr == nil && (last.Role == "leader" || last.Role == "follower" && last.LastContactMs >= 0 && last.LastContactMs < 1000) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s is not back in the cluster within %v (last status %v, error %v)", n.Name, d, last, lastErr)
}

// TestStaleAddressOfRemovedLeaderDoesNotBlockRestarts is issue 22's
// second hole. The leader removes itself (`ordo remove` of the leader);
// its gRPC address stays in the replicated map of members' addresses.
// Later a node of another Ordo cluster listens at that address. Every
// restart of a remaining member asks its recorded members which cluster
// they belong to: the stranger's answer is not a member's, and must not
// make the member refuse its own data dir (it may warn). So each
// remaining member restarts and serves, in turn and both at once, under
// a checked workload.
func TestStaleAddressOfRemovedLeaderDoesNotBlockRestarts(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	old := c.mustLeader()
	mainID := mustClusterID(t, c)
	var rest []*node
	var restAddrs []string
	for _, n := range c.Nodes {
		if n != old {
			rest = append(rest, n)
			restAddrs = append(restAddrs, n.GRPCAddr)
		}
	}
	// Clients of the remaining members only: the stranger's answers are
	// not this cluster's.
	w := startWorkload(t, restAddrs, history.NewRecorder(), 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the leader removes itself")

	res := mustRunOrdo(t, "remove", "--id", old.Name, "--addrs", c.addrList(), "--timeout", "10s")
	t.Logf("ordo remove --id %s (the leader): %s", old.Name, strings.TrimSpace(res.Stdout))
	if code, exited := old.WaitExit(leaderTimeout); !exited || code != 0 {
		t.Fatalf("removed leader %s: exited %v with code %d, want 0 by itself", old.Name, exited, code)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "after the leader removed itself")

	// A one-node cluster of its own, x1, at the removed leader's
	// addresses (the removed node's data dir wiped).
	mustWipe(t, old)
	c.mustStart(old, "--id", "x1", "--bootstrap", "x1="+old.Advertise+"@"+old.GRPCAddr, "--force-bootstrap")
	stranger := api.NewAdminClient(grpctest.Dial(t, old.GRPCAddr))
	var foreignID string
	deadline := time.Now().Add(leaderTimeout)
	for foreignID == "" {
		if info, err := nodeStatus(stranger); err == nil && info.Id == "x1" {
			foreignID = info.ClusterId
		}
		if time.Now().After(deadline) {
			t.Fatalf("x1 at %s reports no cluster id within %v:\n%s", old.GRPCAddr, leaderTimeout, lastLines(c.output(old), 5))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if foreignID == mainID {
		t.Fatalf("x1 reports the cluster's id %s: it is not another cluster", mainID)
	}
	t.Logf("x1, of cluster %s, listens at %s, the removed leader %s's gRPC address (cluster %s)", foreignID, old.GRPCAddr, old.Name, mainID)

	for _, n := range rest {
		c.mustKill(n)
		c.mustRestart(n) // its usual line
		mustInCluster(t, c, n, leaderTimeout)
		w.mustAcks(phaseAcks, phaseTimeout, n.Name+" restarted")
		t.Logf("%s restarted and is back in the cluster", n.Name)
	}
	for _, n := range rest {
		c.mustKill(n)
	}
	for _, n := range rest {
		c.mustRestart(n)
	}
	for _, n := range rest {
		mustInCluster(t, c, n, leaderTimeout)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "both remaining members restarted at once")
	for _, n := range rest {
		if out := c.output(n); strings.Contains(out, foreignID) {
			t.Logf("%s on the stranger: %s", n.Name, grepLines(out, foreignID))
		}
	}
	if !old.Running() {
		t.Errorf("x1, the stranger at %s, stopped:\n%s", old.GRPCAddr, lastLines(c.output(old), 5))
	}
	mustCheck(t, w.stop())
}

// TestForeignDataDirWithHigherTermIsRefused is issue 22's third hole. A
// one-node cluster x, whose node is also called n3, is restarted until
// its Raft term is past the main cluster's. Then the main cluster's n3
// restarts, with its own id, addresses and command line, on x's data dir.
// That data dir records another cluster: n3 must refuse it, naming both
// cluster ids, and never take part as what x's log says it is. With x's
// log and a higher term, n3 that runs Raft wins an election (its
// configuration has it as the only voter) and hands out IDs from x's
// high-water mark, beside the main cluster's. So: n3 never reports
// itself leader and never answers a call with IDs; the main cluster's
// members never see their committed high-water mark go down; the history
// of every call is clean.
func TestForeignDataDirWithHigherTermIsRefused(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	mainID := mustClusterID(t, c)
	if c.mustLeader() == n3 {
		mustTransferLeader(t, c, n1)
	}

	// Cluster x: one node, called n3 too, at addresses of its own.
	x := c.newNode("x", "--id", "n3")
	c.mustStart(x, "--bootstrap", "n3="+x.Advertise+"@"+x.GRPCAddr, "--force-bootstrap")
	xAdmin := api.NewAdminClient(grpctest.Dial(t, x.GRPCAddr))
	xLeads := func() *api.NodeInfo {
		t.Helper()
		deadline := time.Now().Add(leaderTimeout)
		for {
			info, err := nodeStatus(xAdmin)
			if err == nil && info.Role == "leader" && info.ClusterId != "" {
				return info
			}
			if time.Now().After(deadline) {
				t.Fatalf("x does not lead with a cluster id within %v (last %v, %v):\n%s", leaderTimeout, info, err, lastLines(c.output(x), 5))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	xInfo := xLeads()
	mainTerm := func() uint64 {
		var term uint64
		for _, n := range []*node{n1, n2, n3} {
			term = max(term, mustNodeStatus(t, n, leaderTimeout).Term)
		}
		return term
	}
	for i := 0; xInfo.Term <= mainTerm()+1; i++ {
		if i == 20 {
			t.Fatalf("x's term is %d after %d restarts, the main cluster's %d", xInfo.Term, i, mainTerm())
		}
		c.mustKill(x)
		c.mustRestart(x)
		xInfo = xLeads()
	}
	xID := xInfo.ClusterId
	if xID == mainID {
		t.Fatalf("x reports the main cluster's id %s", mainID)
	}
	t.Logf("cluster x (%s) at term %d; the main cluster (%s) at term %d", xID, xInfo.Term, mainID, mainTerm())

	rec := history.NewRecorder()
	w := startWorkload(t, c.addrs(), rec, 0)
	pinned := startPinned(t, n3, rec, 100)
	watch := startWatch(t, n1, n2, n3)
	w.mustAcks(phaseAcks, phaseTimeout, "before n3 gets x's data dir")

	c.mustKill(x)
	c.mustKill(n3)
	mustWipe(t, n3)
	if err := os.Rename(x.DataDir, n3.DataDir); err != nil {
		t.Fatal(err)
	}
	watch.ledSince(n3.Name)
	servedBefore := pinned.servedSettled()
	start := time.Now()
	c.mustRestart(n3) // its usual line, on x's data dir

	// n3 must refuse: exit, or say so naming both clusters.
	names := func(out string) bool { return strings.Contains(out, mainID) && strings.Contains(out, xID) }
	refused, exited, code := false, false, 0
	for deadline := start.Add(exitTimeout); !refused && time.Now().Before(deadline); {
		if code, exited = n3.WaitExit(100 * time.Millisecond); exited {
			break
		}
		refused = names(c.output(n3))
	}
	took := time.Since(start)
	// Whatever n3 did, the cluster goes on; let it run with n3 in that
	// state for one more phase.
	w.mustAcks(phaseAcks, phaseTimeout, "with n3 on x's data dir")
	out := c.output(n3)
	served := pinned.served() - servedBefore
	led := watch.ledSince(n3.Name)

	switch {
	case exited && code == 0:
		t.Errorf("n3 on x's data dir exited 0 after %v; want a refusal (non-zero)", took.Round(time.Millisecond))
	case exited && !names(out):
		t.Errorf("n3 on x's data dir exited %d after %v, but its refusal does not name both cluster ids (%s, %s):\n%s", code, took.Round(time.Millisecond), mainID, xID, lastLines(out, 5))
	case exited:
		t.Logf("n3 on x's data dir refused after %v (exit %d): %s", took.Round(time.Millisecond), code, lastLines(out, 1))
	case !refused:
		t.Errorf("n3 on x's data dir still runs %v after its start and did not refuse naming both cluster ids (%s, %s); its log says: %s",
			took.Round(time.Millisecond), mainID, xID, grepLines(out, "start="))
	default:
		t.Logf("n3 on x's data dir runs and reports a refusal after %v: %s", took.Round(time.Millisecond), grepLines(out, xID))
	}
	if led {
		t.Errorf("n3 on x's data dir reported itself leader")
	}
	if strings.Contains(out, "entering leader state") {
		t.Errorf("n3 on x's data dir won an election:\n%s", grepLines(out, "entering leader state"))
	}
	if served > 0 {
		t.Errorf("n3 on x's data dir answered %d calls with IDs; want none", served)
	}
	if drops := watch.highWaterDrops(n1.Name, n2.Name); len(drops) > 0 {
		t.Errorf("the main cluster's high-water mark went down: %v", drops)
	}

	if n3.Running() {
		c.mustKill(n3)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "after n3 stopped")
	pinned.stop()
	ops := w.stop()
	watch.stop()
	if drops := watch.highWaterDrops(n1.Name, n2.Name); len(drops) > 0 {
		t.Errorf("the main cluster's high-water mark went down: %v", drops)
	}
	mustCheck(t, ops)
}
