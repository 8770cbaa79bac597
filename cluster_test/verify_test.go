//go:build unix

package cluster_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/verify"
)

// TestVerifyEveryFault runs the nemesis through every fault kind once,
// with clients running throughout, tracked and keyed ones among them,
// and requires a clean history, the settled order's included, and
// recovery after each fault. kill-leader-before-answer ends the leader
// between a keyed call's commit and its answer: the key's retry must get
// exactly the committed IDs.
func TestVerifyEveryFault(t *testing.T) {
	kinds := verify.FaultNames()
	const interval, hold = 2500 * time.Millisecond, 1200 * time.Millisecond
	cfg := verify.Config{
		Binary: ordoBin, Dir: t.TempDir(), Nodes: 3,
		Duration: 5 * time.Minute, Rounds: 1, // ends after each fault ran once
		Clients: 8, Streams: 4, Pinned: true, MaxCount: 8, Tracked: 4, Sequences: 3, Keyed: 3,
		Faults: kinds, Interval: interval, Hold: hold, Seed: 1,
		ServeArgs: append([]string{"--log-level", "warn"}, fastTimers...),
		Progress:  testWriter{t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+2*time.Minute)
	defer cancel()
	var res verify.Result
	defer explainVerifyFailure(t, &res, cfg.Dir)
	res, err := verify.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if !res.OK() {
		t.Fatal("verification failed; see the report above")
	}
	seen := map[string]bool{}
	for _, f := range res.Faults {
		seen[f.Kind] = true
	}
	for _, k := range kinds {
		if !seen[k] {
			t.Errorf("fault %s never ran", k)
		}
	}
	if res.Report.Acknowledged < 1000 {
		t.Errorf("only %d requests acknowledged: the workload barely ran", res.Report.Acknowledged)
	}
	if s := res.Report.Settled; s.Reserves.OK < 50 || s.Completes.OK < 10 || s.Reads.OK < 100 || res.Tracked.Expired == 0 {
		t.Errorf("the tracked workload barely ran: %v; %+v", s, res.Tracked)
	}
	if k := res.Keyed; res.Report.Keyed < 50 || res.Report.Replays == 0 || len(k.Crashes) != 1 || !k.Crashes[0].Matched {
		t.Errorf("the keyed workload barely ran, or no leader ended between a keyed call's commit and its answer: %v; %+v", res.Report, k)
	}
	if len(res.Sequences) != 3 {
		t.Errorf("%d sequences checked, want 3", len(res.Sequences))
	}
	for _, s := range res.Sequences {
		if s.Report.Acknowledged < 50 || (s.Kind == "dense") != (s.Dense != nil) {
			t.Errorf("sequence %s (%s) barely ran or went unchecked: %v", s.Name, s.Kind, s.Report)
		}
	}
}

// TestVerifyLease runs the faults that leases elsewhere got wrong (leader
// transfer, a paused or cut-off leader, a voter restarted within its
// promise) against nodes serving from the lease.
func TestVerifyLease(t *testing.T) {
	cfg := verify.Config{
		Binary: ordoBin, Dir: t.TempDir(), Nodes: 3,
		Duration: 3 * time.Minute, Rounds: 1,
		Clients: 8, Streams: 4, Pinned: true, MaxCount: 8, Tracked: 4,
		Faults:   []string{"transfer-leader", "pause-leader", "restart-follower", "isolate-leader", "one-way", "kill-leader", "grow-shrink"},
		Interval: 2500 * time.Millisecond, Hold: 1200 * time.Millisecond, Seed: 3,
		ServeArgs: append([]string{"--log-level", "warn", "--lease=150ms"}, fastTimers...),
		Progress:  testWriter{t},
	}
	mustVerifyEach(t, cfg)
}

// mustVerifyEach runs cfg and fails unless the history is clean and every
// fault ran.
func mustVerifyEach(t *testing.T, cfg verify.Config) {
	t.Helper()
	var res verify.Result
	defer explainVerifyFailure(t, &res, cfg.Dir)
	res, err := verify.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if !res.OK() || len(res.Faults) != len(cfg.Faults) {
		t.Fatalf("verification failed or incomplete (%d of %d faults ran); see the report above", len(res.Faults), len(cfg.Faults))
	}
}

// TestVerifyFiveNodes runs the faults whose shape depends on the cluster
// size against five voters: two may fail, three may not.
func TestVerifyFiveNodes(t *testing.T) {
	cfg := verify.Config{
		Binary: ordoBin, Dir: t.TempDir(), Nodes: 5,
		Duration: 3 * time.Minute, Rounds: 1,
		Clients: 8, Pinned: true, MaxCount: 8,
		Faults:   []string{"kill-majority", "partition", "bridge", "pause-leader", "kill-leader"},
		Interval: 2500 * time.Millisecond, Hold: 1200 * time.Millisecond, Seed: 5,
		ServeArgs: append([]string{"--log-level", "warn"}, fastTimers...),
		Progress:  testWriter{t},
	}
	mustVerifyEach(t, cfg)
}

// TestVerifyCatchesStaleLeader runs `ordo verify` against nodes built with
// the classic stale-leader bug (IDs from the committed reservation, no
// leadership confirmation): a checker that cannot fail proves nothing.
func TestVerifyCatchesStaleLeader(t *testing.T) {
	res := runOrdoFor(t, 2*time.Minute, "verify", "--duration", "8s", "--faults", "pause-leader,isolate-leader",
		"--interval", "2s", "--hold", "1200ms", "--clients", "8", "--seed", "1", "--dir", t.TempDir(),
		"--unsafe-trust-reservation")
	if res.Code != 1 || !strings.Contains(res.Stdout, "verdict: FAIL") || !strings.Contains(res.Stdout, "order-violations=") {
		t.Fatalf("ordo verify on a stale-leader build: exit %d, want 1 with verdict FAIL\nstdout: %s\nstderr: %s", res.Code, res.Stdout, lastLines(res.Stderr, 20))
	}
	t.Log(lastLines(res.Stdout, 6))

	// The same run without the bug passes: the failure above is the bug's.
	res = runOrdoFor(t, 2*time.Minute, "verify", "--duration", "8s", "--faults", "pause-leader,isolate-leader",
		"--interval", "2s", "--hold", "1200ms", "--clients", "8", "--seed", "1", "--dir", t.TempDir())
	if res.Code != 0 || !strings.Contains(res.Stdout, "verdict: PASS") {
		t.Fatalf("ordo verify on a correct build: exit %d, want 0 with verdict PASS\nstdout: %s\nstderr: %s", res.Code, res.Stdout, lastLines(res.Stderr, 20))
	}
}

// TestVerifyCatchesSettleEarly runs `ordo verify` against nodes whose
// reads of the settled mark answer past open reservations: the tracked
// writers then complete reservations a reader already saw W pass, which
// the settled-order check must report, while the same run on a correct
// build passes.
func TestVerifyCatchesSettleEarly(t *testing.T) {
	args := []string{"verify", "--duration", "6s", "--faults", "none", "--clients", "4", "--streams", "0", "--tracked", "8", "--seed", "1"}
	res := runOrdoFor(t, time.Minute, append(args, "--dir", t.TempDir(), "--unsafe-settle-early")...)
	if res.Code != 1 || !strings.Contains(res.Stdout, "verdict: FAIL") || !strings.Contains(res.Stdout, "completed-settled: ") {
		t.Fatalf("ordo verify on a build that settles early: exit %d, want 1 with verdict FAIL naming completed-settled\nstdout: %s\nstderr: %s", res.Code, res.Stdout, lastLines(res.Stderr, 20))
	}
	t.Log(lastLines(res.Stdout, 6))

	res = runOrdoFor(t, time.Minute, append(args, "--dir", t.TempDir())...)
	if res.Code != 0 || !strings.Contains(res.Stdout, "verdict: PASS") || !strings.Contains(res.Stdout, "settled OK: ") {
		t.Fatalf("ordo verify on a correct build: exit %d, want 0 with verdict PASS and the settled order checked\nstdout: %s\nstderr: %s", res.Code, res.Stdout, lastLines(res.Stderr, 20))
	}
}

// TestVerifyClientOnly checks an existing cluster from the client side,
// and refuses faults it cannot inject there.
func TestVerifyClientOnly(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	defer explainVerifyFailure(t, nil, filepath.Dir(c.Nodes[0].LogFile))
	res := runOrdoFor(t, time.Minute, "verify", "--addrs", c.addrList(), "--duration", "2s", "--clients", "4")
	if res.Code != 0 || !strings.Contains(res.Stdout, "verdict: PASS") {
		t.Fatalf("ordo verify --addrs: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	res = runOrdoFor(t, time.Minute, "verify", "--addrs", c.addrList(), "--duration", "2s", "--faults", "kill-leader")
	if res.Code != 2 || !strings.Contains(res.Stderr, "faults need a cluster") {
		t.Fatalf("ordo verify --addrs with faults: exit %d, want 2 naming the problem\nstderr: %s", res.Code, res.Stderr)
	}
	for _, cfg := range []verify.Config{
		{Addrs: c.addrs(), Duration: time.Second, Clients: 1, MaxCount: 1, Faults: []string{"no-such-fault"}},
		{Addrs: c.addrs(), Duration: 0, Clients: 1, MaxCount: 1},
		{Addrs: c.addrs(), Duration: time.Second, Clients: 0, MaxCount: 1},
		{Binary: ordoBin, Dir: t.TempDir(), Nodes: 3, Duration: time.Second, Clients: 1, MaxCount: 1,
			Faults: []string{"kill-leader"}, Interval: time.Second, Hold: 2 * time.Second},
		{Binary: ordoBin, Dir: t.TempDir(), Nodes: 1, Duration: time.Second, Clients: 1, MaxCount: 1,
			Faults: []string{"partition"}, Interval: 2 * time.Second, Hold: time.Second},
	} {
		if _, err := verify.Run(context.Background(), cfg); !errors.Is(err, verify.ErrBadConfig) {
			t.Errorf("Run(%+v) = %v, want ErrBadConfig", cfg, err)
		}
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
