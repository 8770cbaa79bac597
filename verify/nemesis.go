package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/startup"
)

// A fault breaks something and returns how to mend it.
type fault struct {
	// needs is the least number of nodes the fault makes sense with.
	needs int
	// keyed says the fault needs keyed clients (Config.Keyed) and nodes
	// started with ClusterConfig.CrashBeforeKeyedAnswer.
	keyed bool
	// start breaks something; the returned heal mends it. target names
	// what was hit, for the report.
	start func(ctx context.Context, c *Cluster, rng *rand.Rand) (target string, heal func(context.Context) error, err error)
}

// faults are the nemesis's kinds, by name.
var faults = map[string]fault{
	"kill-leader":      {needs: 1, start: withLeader(killLeader)},
	"kill-follower":    {needs: 2, start: withLeader(killFollower)},
	"restart-follower": {needs: 3, start: withLeader(restartFollower)},
	"kill-majority":    {needs: 3, start: withLeader(killMajority)},
	"pause-leader":     {needs: 2, start: withLeader(pauseLeader)},
	"isolate-leader":   {needs: 3, start: withLeader(isolateLeader)},
	"partition":        {needs: 3, start: withLeader(partition)},
	"bridge":           {needs: 3, start: withLeader(bridge)},
	"one-way":          {needs: 3, start: withLeader(oneWay)},
	"stall-leader":     {needs: 3, start: withLeader(stallLeader)},
	"delay":            {needs: 2, start: delay},
	"clock-back":       {needs: 1, start: clockShift(-time.Hour)},
	"clock-forward":    {needs: 1, start: clockShift(time.Hour)},
	"transfer-leader":  {needs: 2, start: transferLeader},
	"remove-readd":     {needs: 3, start: withLeader(removeReadd)},
	"restart-all":      {needs: 1, start: restartAll},
	"rolling-restart":  {needs: 1, start: rollingRestart},
	"grow-shrink":      {needs: 1, start: growShrink},
	// A lost disk in a whole-cluster restart (issue 12).
	"lose-data-restart": {needs: 3, start: withLeader(loseDataRestart)},
	// A founder with a one-entry --bootstrap list loses its disk (issue 22).
	"lose-data-founder": {needs: 3, start: withLeader(loseDataFounder)},
	// A leader ends between a keyed call's commit and its answer (issue
	// 25): the retry must get the committed answer.
	"kill-leader-before-answer": {needs: 1, keyed: true, start: killBeforeAnswer},
}

// FaultNames lists every fault kind, sorted.
func FaultNames() []string {
	var names []string
	for n := range faults {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NeedsKeyed reports whether fault kind needs keyed clients
// (Config.Keyed).
func NeedsKeyed(kind string) bool { return faults[kind].keyed }

func leaderAndFollowers(ctx context.Context, c *Cluster) (*Node, []*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		return nil, nil, err
	}
	var fs []*Node
	for _, n := range c.Nodes {
		if n != l {
			fs = append(fs, n)
		}
	}
	return l, fs, nil
}

// withLeader makes a fault's start of hit, which breaks something around
// the leader l and its followers fs, found first.
func withLeader(hit func(ctx context.Context, c *Cluster, l *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error)) func(context.Context, *Cluster, *rand.Rand) (string, func(context.Context) error, error) {
	return func(ctx context.Context, c *Cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
		l, fs, err := leaderAndFollowers(ctx, c)
		if err != nil {
			return "", nil, err
		}
		return hit(ctx, c, l, fs, rng)
	}
}

func names(ns []*Node) []string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return s
}

func startAll(c *Cluster, ns []*Node) func(context.Context) error {
	return func(context.Context) error {
		for _, n := range ns {
			if err := c.Start(n); err != nil {
				return err
			}
		}
		return nil
	}
}

func kill(c *Cluster, ns []*Node) (string, func(context.Context) error, error) {
	for _, n := range ns {
		if err := c.Kill(n); err != nil {
			return "", nil, err
		}
	}
	return fmt.Sprint(names(ns)), startAll(c, ns), nil
}

func killLeader(_ context.Context, c *Cluster, l *Node, _ []*Node, _ *rand.Rand) (string, func(context.Context) error, error) {
	return kill(c, []*Node{l})
}

func killFollower(_ context.Context, c *Cluster, _ *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	return kill(c, []*Node{fs[rng.IntN(len(fs))]})
}

// restartFollower cuts the leader off from every follower but one, then
// kills that one and starts it again at once: it comes back within any
// lease it promised the leader, while the cut-off followers may elect a
// new leader through it. Having forgotten its promise, it must still
// confirm no leader until the promise may have run out.
func restartFollower(_ context.Context, c *Cluster, l *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	mid, rest := fs[0], names(fs[1:])
	c.Net.Bridge([]string{l.Name}, []string{mid.Name}, rest)
	if err := c.Kill(mid); err != nil {
		c.Net.Heal()
		return "", nil, err
	}
	if err := c.Start(mid); err != nil {
		c.Net.Heal()
		return "", nil, err
	}
	return fmt.Sprintf("%s restarted between %s and %v", mid.Name, l.Name, rest), heal(c), nil
}

// killMajority kills the leader and enough followers to leave a minority:
// the cluster must stop answering, then recover.
func killMajority(_ context.Context, c *Cluster, l *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	return kill(c, append([]*Node{l}, fs[:len(c.Nodes)/2]...))
}

// pauseLeader stops the leader's process until a new leader is elected;
// when it resumes, it still believes it leads and holds a reservation.
func pauseLeader(_ context.Context, c *Cluster, l *Node, _ []*Node, _ *rand.Rand) (string, func(context.Context) error, error) {
	if err := c.Pause(l); err != nil {
		return "", nil, err
	}
	return l.Name, func(context.Context) error { return c.Resume(l) }, nil
}

func heal(c *Cluster) func(context.Context) error {
	return func(context.Context) error { c.Net.Heal(); return nil }
}

func isolateLeader(_ context.Context, c *Cluster, l *Node, _ []*Node, _ *rand.Rand) (string, func(context.Context) error, error) {
	c.Net.Isolate(l.Name)
	return l.Name, heal(c), nil
}

// partition cuts the cluster in two random halves, the smaller one
// holding the leader half of the time.
func partition(_ context.Context, c *Cluster, l *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	m := (len(c.Nodes) - 1) / 2 // the minority's size
	var small, big []string
	if rng.IntN(2) == 0 {
		small, big = append([]string{l.Name}, names(fs[:m-1])...), names(fs[m-1:])
	} else {
		small, big = names(fs[:m]), append([]string{l.Name}, names(fs[m:])...)
	}
	c.Net.Partition(small, big)
	return fmt.Sprintf("%v | %v", small, big), heal(c), nil
}

// bridge leaves one node connected to both halves, which cannot reach
// each other (Jepsen's bridge). The leader is on one side.
func bridge(_ context.Context, c *Cluster, l *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	mid := fs[0]
	rest := names(fs[1:])
	half := len(rest) / 2
	a := append([]string{l.Name}, rest[:half]...)
	b := rest[half:]
	c.Net.Bridge(a, []string{mid.Name}, b)
	return fmt.Sprintf("%v - %s - %v", a, mid.Name, b), heal(c), nil
}

// oneWay cuts the connections the leader opens to its followers, while
// the followers can still reach it.
func oneWay(_ context.Context, c *Cluster, l *Node, fs []*Node, _ *rand.Rand) (string, func(context.Context) error, error) {
	for _, f := range fs {
		c.Net.OneWay(l.Name, f.Name)
	}
	return l.Name + " -> " + fmt.Sprint(names(fs)), heal(c), nil
}

// stallLeader black-holes the leader's links: connections stay open but
// carry nothing, as when packets are silently lost.
func stallLeader(_ context.Context, c *Cluster, l *Node, _ []*Node, _ *rand.Rand) (string, func(context.Context) error, error) {
	c.Net.Stall(l.Name)
	return l.Name, heal(c), nil
}

func delay(_ context.Context, c *Cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	const d = 30 * time.Millisecond
	c.Net.Delay(d)
	return d.String() + " on every raft link", heal(c), nil
}

func clockShift(d time.Duration) func(context.Context, *Cluster, *rand.Rand) (string, func(context.Context) error, error) {
	return withLeader(func(_ context.Context, c *Cluster, l *Node, _ []*Node, _ *rand.Rand) (string, func(context.Context) error, error) {
		if err := c.SetClockOffset(l, d); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("%s by %s", l.Name, d), func(context.Context) error { return c.SetClockOffset(l, 0) }, nil
	})
}

// transferLeader moves leadership around every few hundred milliseconds
// until healed. A transfer may fail under load (the target is behind, an
// election is on), which is part of the fault; one refused for who asked
// (a certificate or an admin right the nodes do not accept) means the
// nemesis is not doing what it says, and fails the fault at heal.
func transferLeader(ctx context.Context, c *Cluster, rng *rand.Rand) (string, func(context.Context) error, error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	seed := rng.Uint64()
	var refusedErr error
	go func() {
		defer close(done)
		r := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			to := c.Nodes[r.IntN(len(c.Nodes))]
			actx, acancel := context.WithTimeout(ctx, 3*time.Second)
			err := c.Admin(actx, func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
				_, err := a.TransferLeader(ctx, &api.TransferLeaderRequest{Id: to.Name}, opts...)
				return err
			})
			acancel()
			if refused(err) && refusedErr == nil {
				refusedErr = fmt.Errorf("transfer-leader to %s refused: %w", to.Name, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return "every 300ms", func(context.Context) error { cancel(); <-done; return refusedErr }, nil
}

// refused reports whether err is the cluster refusing the caller: an
// authorization denial or a failed TLS handshake, which no retry mends.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return err != nil && strings.Contains(err.Error(), "authentication handshake failed")
}

// removeReadd removes a follower from the cluster, wipes its data and
// brings it back with --join: a new member under the old name.
func removeReadd(ctx context.Context, c *Cluster, _ *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	f := fs[rng.IntN(len(fs))]
	if err := removeMember(ctx, c, f); err != nil {
		return "", nil, fmt.Errorf("remove %s: %w", f.Name, err)
	}
	if err := c.Kill(f); err != nil {
		return "", nil, err
	}
	if err := os.RemoveAll(f.DataDir); err != nil {
		return "", nil, fmt.Errorf("wipe %s: %w", f.Name, err)
	}
	others := slices.DeleteFunc(slices.Clone(c.Nodes), func(n *Node) bool { return n == f })
	return f.Name, func(context.Context) error {
		var addrs []string
		for _, n := range others {
			addrs = append(addrs, n.GRPCAddr)
		}
		return c.start(f, "--join", strings.Join(addrs, ","))
	}, nil
}

func restartAll(_ context.Context, c *Cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	return kill(c, c.Nodes)
}

// rollingRestart stops every node in turn with SIGTERM and starts it
// again, each waiting until the restarted node follows a leader, as an
// upgrade or a certificate rotation does. It is over when it returns.
func rollingRestart(ctx context.Context, c *Cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	for _, n := range c.Nodes {
		if err := c.Terminate(n); err != nil {
			return "", nil, err
		}
		if err := c.start(n); err != nil {
			return "", nil, err
		}
		if err := waitInCluster(ctx, c, n, 30*time.Second); err != nil {
			return "", nil, err
		}
	}
	return strings.Join(names(c.Nodes), " "), func(context.Context) error { return nil }, nil
}

// waitInCluster waits until n answers as the leader, or as a follower in
// recent contact with one.
func waitInCluster(ctx context.Context, c *Cluster, n *Node, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		var info *api.NodeInfo
		err := c.nodeAdmin(ctx, n, func(ctx context.Context, a api.AdminClient) error {
			var err error
			info, err = a.NodeStatus(ctx, &api.NodeStatusRequest{})
			return err
		})
		if err == nil && (info.Role == "leader" || info.Role == "follower" && info.LastContactMs >= 0 && info.LastContactMs < 1000) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not back in the cluster within %s (last: %v, %v)", n.Name, limit, info, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// growShrink adds two voters while the fault holds, then removes them
// again: membership changes under load. The added nodes stop by
// themselves once removed.
func growShrink(ctx context.Context, c *Cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	var members []string
	for _, n := range c.Nodes {
		members = append(members, n.GRPCAddr)
	}
	var added []*Node
	for i := range 2 {
		// The IPs after the members' (with TLS the node certificate
		// must name them); each pair of added nodes gets new names,
		// ports and data dirs.
		n, err := c.newNode(c.unusedIP(i, false), fmt.Sprintf("g%d", len(c.extra)+i+1))
		if err != nil {
			return "", nil, err
		}
		c.Net.Add(n.Name, n.IP, n.proxy)
		added = append(added, n)
	}
	c.extra = append(c.extra, added...)
	for _, n := range added {
		if err := c.start(n, "--join", strings.Join(members, ",")); err != nil {
			return "", nil, err
		}
		if err := waitInCluster(ctx, c, n, 30*time.Second); err != nil {
			return "", nil, err
		}
	}
	return strings.Join(names(added), " "), func(ctx context.Context) error {
		for _, n := range added {
			if err := removeMember(ctx, c, n); err != nil {
				return fmt.Errorf("remove %s: %w", n.Name, err)
			}
			// A removed node stops by itself; wait for it, then make sure.
			n.mu.Lock()
			done := n.done
			n.mu.Unlock()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
			if err := c.Kill(n); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// Timings of lose-data-restart.
const (
	// lostJoinTimeout is the --join-timeout of the restart's command
	// line: how long the wiped node may ask before it gives up.
	lostJoinTimeout = 10 * time.Second
	// laggardChance is how long the laggards, restarted beside the wiped
	// node, may take to elect one of them before the others come back.
	laggardChance = 3 * time.Second
	// markTimeout bounds passMark; markCount is how many IDs it asks
	// for at a time.
	markTimeout = 5 * time.Second
	markCount   = 10_000
)

// loseDataRestart is a lost disk in a whole-cluster restart (issue 12).
// Followers are killed (the laggards, a minority; their clocks set a
// minute back, as after a host's clock reset) and the others hand out IDs
// past what the laggards saw. Then the whole cluster goes down, one more
// follower loses its data dir, and every node starts again with the one
// command line a StatefulSet gives all of them (--bootstrap and --join):
// the wiped node first, then the laggards, then the rest. The wiped node
// is picked among the nodes that hold the latest IDs, not among the
// laggards, because that is the dangerous loss: if it came back as the
// voter it was, with an empty log, it would vote a laggard in, and the
// laggard would hand out IDs the others handed out before.
//
// The wiped node must refuse to start (exit non-zero by itself), and the
// others must serve without it. Then the operator's remedy: remove it
// through the cluster and start it again, data dir empty, same command
// line: it joins as a new member, and the fault is over when it is back
// in the cluster.
func loseDataRestart(ctx context.Context, c *Cluster, l *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	w := c.workload
	if w == nil {
		return "", nil, errors.New("lose-data-restart asks for IDs through the run's workload, and there is none")
	}
	rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	m := (len(c.Nodes) - 1) / 2
	laggards, wiped := fs[:m], fs[m]
	rest := append([]*Node{l}, fs[m+1:]...)
	for _, n := range laggards {
		if err := c.SetClockOffset(n, -time.Minute); err != nil {
			return "", nil, err
		}
		if err := c.Kill(n); err != nil {
			return "", nil, err
		}
	}
	// The leader's mark, read after the laggards went down, is at least
	// what they saw.
	var mark uint64
	err := c.nodeAdmin(ctx, l, func(ctx context.Context, a api.AdminClient) error {
		info, err := a.NodeStatus(ctx, &api.NodeStatusRequest{})
		if err == nil {
			mark = info.HighWater
		}
		return err
	})
	if err != nil {
		// Leave the cluster as the fault found it.
		for _, n := range laggards {
			c.SetClockOffset(n, 0)
			c.Start(n)
		}
		return "", nil, fmt.Errorf("ask leader %s for its mark: %w", l.Name, err)
	}
	target := fmt.Sprintf("%v behind, %s wiped", names(laggards), wiped.Name)
	return target, func(ctx context.Context) error {
		passMark(ctx, c, w, l, mark)
		for _, n := range append(rest, wiped) {
			if err := c.Kill(n); err != nil {
				return err
			}
		}
		if err := os.RemoveAll(wiped.DataDir); err != nil {
			return fmt.Errorf("wipe %s: %w", wiped.Name, err)
		}
		line := c.everyStartArgs(lostJoinTimeout)
		if err := c.start(wiped, line...); err != nil {
			return err
		}
		waitListening(ctx, wiped, 2*time.Second)
		for _, n := range laggards {
			if err := c.start(n, line...); err != nil {
				return err
			}
		}
		giveLaggardsAChance(ctx, c, wiped)
		for _, n := range rest {
			if err := c.start(n, line...); err != nil {
				return err
			}
		}
		refusal := c.awaitRefusal(wiped, "started with an empty data dir")
		for _, n := range laggards {
			if err := c.SetClockOffset(n, 0); err != nil {
				return err
			}
		}
		if err := removeMember(ctx, c, wiped); err != nil {
			return errors.Join(refusal, err)
		}
		if err := c.Kill(wiped); err != nil { // reaps the refused process
			return errors.Join(refusal, err)
		}
		if err := os.RemoveAll(wiped.DataDir); err != nil {
			return errors.Join(refusal, fmt.Errorf("wipe %s: %w", wiped.Name, err))
		}
		if err := c.start(wiped, line...); err != nil {
			return errors.Join(refusal, err)
		}
		return errors.Join(refusal, waitInCluster(ctx, c, wiped, 20*time.Second))
	}, nil
}

// passMark asks leader l for IDs until it hands out one past mark, the
// laggards' high-water mark, so that what the laggards missed includes
// IDs handed out; up to markTimeout. The mark may be a reserve window
// ahead of the clock, or more after a clock jump, so the nemesis asks for
// many IDs at a time rather than wait for the clock. Failing that, the
// fault goes on: it is then only less likely to catch a bug. Its requests
// are recorded and counted with w's: the IDs it is handed are the ones
// the laggards must not hand out again, and an answer it refuses fails
// the run as a client's would.
func passMark(ctx context.Context, c *Cluster, w *Workload, l *Node, mark uint64) {
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	count := markCount
	caller := w.nemesisCaller()
	var err error
	for {
		var last uint64
		err = c.onNode(ctx, l, func(ctx context.Context, conn *grpc.ClientConn) error {
			next := nodeNext(api.NewSequencerClient(conn), w.lay, w.group)
			_, err := w.call(caller, func() ([]uint64, []string, error) {
				ids, rendered, err := next(ctx, count)
				if len(ids) > 0 {
					last = ids[len(ids)-1]
				}
				return ids, rendered, err
			})
			return err
		})
		if !w.lay.Wide() {
			last = w.lay.Tick(last) // a 128-bit layout's IDs are recorded as ticks already
		}
		switch {
		case err == nil && last > mark:
			return
		case status.Code(err) == codes.InvalidArgument && count > 1:
			count = 1 // a --max-count below markCount
			continue
		}
		if !sleep(ctx, 10*time.Millisecond) {
			c.cfg.Logf("%s did not hand out IDs past the laggards' mark within %s (last error: %v)", l.Name, markTimeout, err)
			return
		}
	}
}

// waitListening waits, up to d, until n accepts connections on its gRPC
// address, or its process has ended.
func waitListening(ctx context.Context, n *Node, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var dialer net.Dialer
	for n.Running() {
		conn, err := dialer.DialContext(ctx, "tcp", n.GRPCAddr)
		if err == nil {
			conn.Close()
			return
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// giveLaggardsAChance waits until some running node hands out IDs, the
// wiped node has stopped, or laggardChance has passed. Only the wiped
// node's vote can elect a laggard: a cluster that keeps it out serves
// nothing until the others are back.
func giveLaggardsAChance(ctx context.Context, c *Cluster, wiped *Node) {
	ctx, cancel := context.WithTimeout(ctx, laggardChance)
	defer cancel()
	for wiped.Running() && ctx.Err() == nil {
		for _, n := range c.Nodes {
			if n.Running() && c.askLeader(ctx, n) != nil {
				return
			}
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// removeMember removes n from the cluster, retrying while the cluster
// elects a leader, up to 10 s.
func removeMember(ctx context.Context, c *Cluster, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.Remove(ctx, n)
}

// loseDataFounder is issue 22's first hole as a fault: a node that founded
// the cluster alone, with a one-entry --bootstrap list (itself) and --join
// with every node's address, loses its data dir and starts again with that
// line while the others serve. A follower is picked, killed, wiped, and
// started with that founder's line, while the clients keep calling. Its
// list names no peer to ask, but its --join addresses are members that
// hold the cluster's state and list it: it must not bootstrap a cluster of
// its own, which would hand out IDs from its clock beside the cluster's,
// but refuse, exiting non-zero by itself. The heal is the operator's
// remedy, as in lose-data-restart: remove it through the cluster, then
// start it with an empty data dir and --join; the fault is over when it is
// back in the cluster.
func loseDataFounder(_ context.Context, c *Cluster, _ *Node, fs []*Node, rng *rand.Rand) (string, func(context.Context) error, error) {
	f := fs[rng.IntN(len(fs))]
	if err := c.Kill(f); err != nil {
		return "", nil, err
	}
	if err := os.RemoveAll(f.DataDir); err != nil {
		return "", nil, fmt.Errorf("wipe %s: %w", f.Name, err)
	}
	self := fmt.Sprintf("%s=%s@%s", f.Name, f.Advertise, f.GRPCAddr)
	line := []string{"--bootstrap", self, "--join", strings.Join(c.Addrs(), ","), "--join-timeout", lostJoinTimeout.String()}
	if err := c.start(f, line...); err != nil {
		return "", nil, err
	}
	var others []string
	for _, n := range c.Nodes {
		if n != f {
			others = append(others, n.GRPCAddr)
		}
	}
	return f.Name + " wiped, started as a founder", func(ctx context.Context) error {
		refusal := c.awaitRefusal(f, "started with an empty data dir and a one-entry --bootstrap list")
		if err := removeMember(ctx, c, f); err != nil {
			return errors.Join(refusal, err)
		}
		if err := c.Kill(f); err != nil { // reaps the refused process
			return errors.Join(refusal, err)
		}
		if has, err := startup.HasState(f.DataDir); err != nil || has {
			refusal = errors.Join(refusal, fmt.Errorf("%s ran Raft with an empty data dir: its data dir holds Raft state (%v, %v)", f.Name, has, err))
		}
		if err := os.RemoveAll(f.DataDir); err != nil {
			return errors.Join(refusal, fmt.Errorf("wipe %s: %w", f.Name, err))
		}
		if err := c.start(f, "--join", strings.Join(others, ",")); err != nil {
			return errors.Join(refusal, err)
		}
		return errors.Join(refusal, waitInCluster(ctx, c, f, 20*time.Second))
	}, nil
}

// awaitRefusal waits for n, started as how says, to be refused: to exit
// non-zero by itself within its --join-timeout and a margin. It returns
// why not; a refusal is logged.
func (c *Cluster) awaitRefusal(n *Node, how string) error {
	switch code, exited := n.WaitExit(lostJoinTimeout + 5*time.Second); {
	case !exited:
		return fmt.Errorf("%s, %s, was not refused: it still runs", n.Name, how)
	case code == 0:
		return fmt.Errorf("%s, %s, exited 0; want a refusal (non-zero)", n.Name, how)
	}
	c.cfg.Logf("%s refused to start with an empty data dir: %s", n.Name, lastLine(n.LogFile))
	return nil
}

// Timings of kill-leader-before-answer.
const (
	// crashWait is how long the armed leader has to commit a keyed call
	// and end; crashTries how many leaders are armed in turn before the
	// fault gives up (leadership may move while one is armed).
	crashWait  = 3 * time.Second
	crashTries = 3
)

// killBeforeAnswer ends the leader between a keyed call's commit and its
// answer, the crash idempotency keys exist for: it arms the leader's
// crash file (ordo serve --test-crash-before-keyed-answer), and the next
// keyed call the leader commits ends the process before the answer
// leaves, leaving what was committed in the file. The keyed clients'
// attempts in flight fail, and they retry with the same keys on the other
// nodes; the run then requires that the committed call's key was answered
// with exactly the committed IDs (checkCrash). The heal starts the node
// again, as kill-leader's does.
func killBeforeAnswer(ctx context.Context, c *Cluster, _ *rand.Rand) (string, func(context.Context) error, error) {
	if c.workload == nil || !c.workload.keyed {
		return "", nil, errors.New("kill-leader-before-answer needs keyed clients to make the calls it ends the leader between")
	}
	var lastErr error
	for range crashTries {
		l, _, err := leaderAndFollowers(ctx, c)
		if err != nil {
			return "", nil, err
		}
		if l.CrashFile == "" {
			return "", nil, fmt.Errorf("%s was started without a crash file (ClusterConfig.CrashBeforeKeyedAnswer)", l.Name)
		}
		if err := os.WriteFile(l.CrashFile, []byte(CrashArm), 0o640); err != nil {
			return "", nil, fmt.Errorf("arm %s: %w", l.Name, err)
		}
		code, exited := l.WaitExit(crashWait)
		if !exited {
			// Disarm, then give a call that found it armed the time to
			// end it.
			if err := os.WriteFile(l.CrashFile, nil, 0o640); err != nil {
				return "", nil, fmt.Errorf("disarm %s: %w", l.Name, err)
			}
			code, exited = l.WaitExit(time.Second)
		}
		if !exited {
			lastErr = fmt.Errorf("%s committed no keyed call within %s of being armed", l.Name, crashWait)
			continue
		}
		rec, err := readCrash(l)
		if code != CrashExitCode && err == nil {
			err = fmt.Errorf("%s exited with code %d, not the test crash's %d", l.Name, code, CrashExitCode)
		}
		// The next start must not end again.
		if werr := os.WriteFile(l.CrashFile, nil, 0o640); werr != nil && err == nil {
			err = fmt.Errorf("disarm %s: %w", l.Name, werr)
		}
		if err != nil {
			return "", nil, errors.Join(err, c.Start(l))
		}
		c.cfg.Logf("%s ended between the commit of keyed call %s (ticks %d..%d) and its answer", l.Name, rec.Key, rec.First, rec.First+rec.Count-1)
		c.workload.keyedCounts.addCrash(l.Name, rec)
		return fmt.Sprintf("%s after committing key %s", l.Name, rec.Key), startAll(c, []*Node{l}), nil
	}
	return "", nil, lastErr
}
