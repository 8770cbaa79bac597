//go:build unix

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/startup"
)

// Settings of the lost-disk scenario.
const (
	// lostJoinTimeout is every node's --join-timeout: how long a node
	// with an empty data dir may ask before it gives up. Short, so that
	// the refusal comes within the test's bounds.
	lostJoinTimeout = 5 * time.Second
	// pushCount is what each request of the pushers asks for: a quarter
	// of a second of the default layout's ticks, so a few dozen requests
	// carry the time field to the lead bound (10 s ahead of the clock).
	pushCount = 1_000_000
	// pushTimeout bounds the wait for the lead bound.
	pushTimeout = time.Minute
	// laggardWinTimeout bounds how long the laggard, restarted beside the
	// node that lost its data, gets to be elected before the old leader
	// comes back.
	laggardWinTimeout = 20 * time.Second
)

// TestLostDataDirInWholeClusterRestart is issue 12's scenario on real
// processes. Every node runs one command line, --bootstrap with the three
// nodes and --join with their addresses, as the Kubernetes example does.
// Follower A is killed and falls behind; leader L and follower B hand out
// IDs under more demand than the layout holds, so the time field runs
// ahead of the clock up to the lead bound; the whole cluster is killed
// and B loses its data dir. B restarts first with its usual line, then A
// (in one variant with its clock a minute behind), then L.
//
// B cannot tell whether its cluster exists while its peers are down, and
// must not bootstrap; once A answers that it holds state, B is a member
// that lost its data and must be refused. If B bootstraps instead, it
// votes with an empty log, A wins without L's reservations, and A hands
// out IDs that L already handed out. So, in this order: the history
// across the restart holds no duplicate and no ID out of order; B exits
// non-zero without ever holding Raft state; its message says why.
func TestLostDataDirInWholeClusterRestart(t *testing.T) {
	for _, v := range []struct{ name, laggardClock string }{
		{"laggard-clock-behind", "-1m"},
		{"no-clock-offset", ""},
	} {
		t.Run(v.name, func(t *testing.T) { testLostDataDirInWholeClusterRestart(t, v.laggardClock) })
	}
}

func testLostDataDirInWholeClusterRestart(t *testing.T, laggardClock string) {
	c := mustNewCluster(t, clusterOpts{
		joinTimeout: lostJoinTimeout,
		args:        []string{"--max-count", fmt.Sprint(pushCount)},
	})
	rec := history.NewRecorder()
	w := startWorkload(t, c.addrs(), rec, 0)
	w.mustAcks(phaseAcks, phaseTimeout, "before the fault")

	leader := c.mustLeader()
	fs := c.mustFollowers()
	laggard, lost := fs[0], fs[1]
	c.mustKill(laggard)
	if err := os.WriteFile(laggard.ClockFile, []byte(laggardClock), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustAcks(phaseAcks, phaseTimeout, "with the laggard "+laggard.Name+" down")
	p := startPushers(t, []string{leader.GRPCAddr, lost.GRPCAddr}, rec, 1000)
	p.mustReachLeadBound(pushTimeout)
	t.Logf("%s (leader) and %s handed out IDs up to the lead bound while %s was down", leader.Name, lost.Name, laggard.Name)

	// The whole cluster goes down with the lead at its bound; the
	// operations in flight end unknown.
	c.mustKill(leader)
	c.mustKill(lost)
	w.stop()
	p.stop()
	before := rec.Ops()
	_, hiBefore, ok := idRange(before)
	if !ok {
		t.Fatal("no ID was handed out before the restart")
	}
	if err := os.RemoveAll(lost.DataDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s lost its data dir", lost.Name)

	// Clients of the nodes that kept their data: the lost node's own
	// answers, whatever they are, are not the cluster's.
	after := startWorkload(t, []string{laggard.GRPCAddr, leader.GRPCAddr}, rec, 100)
	c.mustRestart(lost)
	waitListensOrExits(c, lost, 3*time.Second)
	c.mustRestart(laggard)
	// Give the laggard the time it needs to win with the lost node's vote,
	// as it does when the lost node runs Raft with an empty log. Without
	// that vote nothing serves until the leader is back.
	deadline := time.Now().Add(laggardWinTimeout)
	for after.acked() == 0 && lost.Running() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("before %s is back: %d operations acknowledged, %s running: %v", leader.Name, after.acked(), lost.Name, lost.Running())
	c.mustRestart(leader)
	after.mustAcks(phaseAcks, 3*phaseTimeout, "after the whole-cluster restart")
	all := after.stop()

	// Safety first: one history across the restart.
	if rep := history.Check(all); rep.OK() {
		t.Log(rep.String())
	} else {
		t.Errorf("history across the restart is not clean:\n%s", rep)
	}
	if below := idsAtOrBelow(all[len(before):], hiBefore); below > 0 {
		t.Errorf("%d IDs handed out after the restart are at or below %d, the largest handed out before it (a new leader without the old leader's reservations)", below, hiBefore)
	}

	// The node that lost its data never ran Raft, and stopped by itself.
	code, exited := lost.WaitExit(lostJoinTimeout + exitTimeout)
	if !exited {
		t.Errorf("%s, restarted with an empty data dir, still runs %v later; want it refused (exit non-zero)", lost.Name, lostJoinTimeout+exitTimeout)
		c.mustKill(lost)
	} else if code == 0 {
		t.Errorf("%s, restarted with an empty data dir, exited 0; want a refusal (exit non-zero)", lost.Name)
	}
	if has, err := startup.HasState(lost.DataDir); err != nil || has {
		t.Errorf("%s's data dir holds Raft state (%v, %v): it ran Raft as a member with an empty log", lost.Name, has, err)
	}
	if out := c.output(lost); exited && !mentionsLostData(out) {
		t.Errorf("%s's refusal does not say why (want it to mention the data dir, --force-bootstrap, or removing the node):\n%s", lost.Name, out)
	} else if exited {
		t.Logf("%s refused (exit %d): %s", lost.Name, code, lastLines(out, 1))
	}
}

// mentionsLostData reports whether a refusal's text points the operator
// at the cause or the remedy. The exact wording is the server's; any of
// these will do.
func mentionsLostData(out string) bool {
	out = strings.ToLower(out)
	for _, s := range []string{"data dir", "force-bootstrap", "remove it", "ordo remove"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// idsAtOrBelow counts the acknowledged IDs in ops that are at most hi.
func idsAtOrBelow(ops []history.Op, hi uint64) int {
	n := 0
	for _, op := range ops {
		if op.Outcome != history.OK {
			continue
		}
		for _, id := range op.IDs {
			if id <= hi {
				n++
			}
		}
	}
	return n
}

// waitListensOrExits waits, up to d, until n accepts connections on its
// gRPC address or its process has exited. Either way it returns: the
// caller only wants n's start to have gone some way.
func waitListensOrExits(c *cluster, n *node, d time.Duration) {
	deadline := time.Now().Add(d)
	for n.Running() && time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", n.GRPCAddr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pushers ask for the most IDs a request may carry, in a loop, to run the
// time field ahead of the clock. Each asks one node, and the next one of
// its list after an error other than the lead bound. Each acknowledged request is
// recorded with its first and last ID only: the IDs between belong to it
// alone, so any other response's ID between them breaks contiguity, and
// the checker still sees every duplicate.
type pushers struct {
	t      *testing.T
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}

	// tally counts acknowledged pushes as OK, refusals at the lead bound
	// as Failed (judgePush), and bad answers as Bad.
	tally history.Tally
}

const numPushers = 4

// startPushers starts numPushers pushers of addrs, recording into rec as
// clients base, base+1, ...
func startPushers(t *testing.T, addrs []string, rec *history.Recorder, base int) *pushers {
	t.Helper()
	var seqs []api.SequencerClient
	for _, addr := range addrs {
		seqs = append(seqs, api.NewSequencerClient(grpctest.Dial(t, addr)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pushers{t: t, cancel: cancel, done: make(chan struct{})}
	for i := range numPushers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.run(ctx, seqs, rec, base+i)
		}()
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

// errBadRuns means an answer's runs did not hold the IDs asked for.
var errBadRuns = errors.New("bad runs")

// judgePush tells a push refused at the lead bound, which handed out
// nothing, from one that may have handed out IDs, and a bad answer.
func judgePush(err error) history.Ending {
	switch {
	case errors.Is(err, errBadRuns):
		return history.BadAnswer
	case status.Code(err) == codes.ResourceExhausted:
		return history.Refused
	}
	return history.Uncertain
}

func (p *pushers) run(ctx context.Context, seqs []api.SequencerClient, rec *history.Recorder, id int) {
	caller := history.Caller{Rec: rec, Tally: &p.tally, Client: id, Judge: judgePush}
	for i := 0; ctx.Err() == nil; {
		end, err := caller.Call(func() ([]uint64, []string, error) {
			octx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			resp, err := seqs[i].Next(octx, &api.NextRequest{Count: pushCount})
			if err != nil {
				return nil, nil, err
			}
			first, last, ok := endpoints(resp.Runs, pushCount)
			if !ok {
				return nil, nil, fmt.Errorf("%w: %v", errBadRuns, resp.Runs)
			}
			return []uint64{first, last}, nil, nil
		})
		if err == nil {
			continue
		}
		if end != history.Refused {
			i = (i + 1) % len(seqs)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// endpoints returns the first and last ID of runs, which must hold n
// increasing IDs.
func endpoints(runs []*api.IDRun, n uint64) (first, last uint64, ok bool) {
	var total uint64
	for i, r := range runs {
		if r.Count == 0 || (r.Count > 1 && r.Step == 0) {
			return 0, 0, false
		}
		end := r.First + uint64(r.Count-1)*r.Step
		if i > 0 && r.First <= last {
			return 0, 0, false
		}
		if i == 0 {
			first = r.First
		}
		last = end
		total += uint64(r.Count)
	}
	return first, last, total == n && n > 1
}

// mustReachLeadBound waits, up to d, until the node refuses a request
// because the time field is as far ahead of its clock as it allows.
func (p *pushers) mustReachLeadBound(d time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for p.tally.Counts().Failed == 0 {
		if time.Now().After(deadline) {
			c := p.tally.Counts()
			p.t.Fatalf("the time field did not reach the lead bound within %v (%d requests of %d acknowledged; last error: %s)", d, c.OK, pushCount, c.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the pushers; an answer the pushers could not read fails the
// test.
func (p *pushers) stop() {
	p.t.Helper()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(2 * opTimeout):
		p.t.Fatalf("pushers did not stop within %v", 2*opTimeout)
	}
	if c := p.tally.Counts(); c.Bad > 0 {
		p.t.Errorf("%d malformed answers to the pushers; the last error: %s", c.Bad, c.LastError)
	}
}

// TestRestoreBesideLeaderlessOldMember: `ordo restore` must refuse while a
// member of the backed-up cluster runs, even one that has no leader (the
// rest of its cluster is down) and so has not applied its log yet. Such a
// member reports no cluster id from its state machine, but it holds the
// cluster's Raft state on disk, and once the other members come back, the
// old cluster and the restored one would hand out the same IDs.
func TestRestoreBesideLeaderlessOldMember(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	mustCLIIDs(t, c.addrList(), 50)
	backup := filepath.Join(t.TempDir(), "ordo.backup")
	if res := runOrdo(t, "backup", "--out", backup, "--addrs", c.addrList(), "--timeout", "30s"); res.Code != 0 {
		t.Fatalf("ordo backup: exit %d: %s", res.Code, res.Stderr)
	}
	mustCLIIDs(t, c.addrList(), 50)

	c.mustKillAll()
	old := c.node("n1")
	c.mustRestart(old)
	info := mustNodeStatus(t, old, leaderTimeout)
	t.Logf("%s runs alone: role %s, term %d, cluster id %q", old.Name, info.Role, info.Term, info.ClusterId)

	r1 := c.newNode("r1")
	restore := []string{"restore", "--backup", backup, "--data-dir", r1.DataDir, "--id", r1.Name, "--raft-addr", r1.Advertise, "--grpc-addr", r1.GRPCAddr}
	res := runOrdo(t, restore...)
	if res.Code == 0 {
		t.Errorf("ordo restore while old member %s runs (leaderless) succeeded; want a refusal\nstdout: %s", old.Name, res.Stdout)
	}
	if has, err := startup.HasState(r1.DataDir); err != nil || has {
		t.Errorf("ordo restore beside old member %s wrote Raft state into %s (%v, %v)", old.Name, r1.DataDir, has, err)
	}
	if !old.Running() {
		t.Fatalf("old member %s stopped during the test:\n%s", old.Name, c.output(old))
	}
	t.Logf("ordo restore beside leaderless %s: exit %d: %s", old.Name, res.Code, strings.TrimSpace(res.Stderr))

	// The override exists: the refusal above was the liveness check, not
	// a bad argument.
	if res.Code != 0 {
		if res := runOrdo(t, append(restore, "--force")...); res.Code != 0 {
			t.Errorf("ordo restore --force: exit %d: %s", res.Code, res.Stderr)
		}
	}
}

// mustNodeStatus asks n itself for its status until it answers, up to d.
func mustNodeStatus(t *testing.T, n *node, d time.Duration) *api.NodeInfo {
	t.Helper()
	admin := api.NewAdminClient(grpctest.Dial(t, n.GRPCAddr))
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := admin.NodeStatus(ctx, &api.NodeStatusRequest{})
		cancel()
		if err == nil {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer NodeStatus within %v: %v", n.Name, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPusherRecording: a pusher keeps only the first and last ID of an
// answer, so the checks must still hold with that: a malformed answer is
// not recorded, and an ID of a later answer between the two is caught.
func TestPusherRecording(t *testing.T) {
	for name, runs := range map[string][]*api.IDRun{
		"overlapping runs": {{First: 10, Count: 3, Step: 1}, {First: 11, Count: 2, Step: 1}},
		"zero step":        {{First: 10, Count: 5, Step: 0}},
		"too few IDs":      {{First: 10, Count: 4, Step: 1}},
		"empty run":        {{First: 10, Count: 5, Step: 1}, {First: 20, Count: 0, Step: 1}},
	} {
		if first, last, ok := endpoints(runs, 5); ok {
			t.Errorf("%s: endpoints(%v) = %d, %d, accepted", name, runs, first, last)
		}
	}
	first, last, ok := endpoints([]*api.IDRun{{First: 10, Count: 3, Step: 1}, {First: 20, Count: 2, Step: 1}}, 5)
	if !ok || first != 10 || last != 21 {
		t.Fatalf("endpoints of 10-12, 20-21 = %d, %d, %v; want 10, 21, true", first, last, ok)
	}
	rec := history.NewRecorder()
	rec.Begin(1).OK([]uint64{first, last})
	rec.Begin(2).OK([]uint64{15}) // inside the pusher's answer, and after it
	if rep := history.Check(rec.Ops()); rep.OK() {
		t.Fatalf("an ID inside a pusher's recorded answer passed the check: %s", rep)
	}
}
