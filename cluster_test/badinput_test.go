//go:build unix

package cluster_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/server"
)

// TestBadInput sends bad requests and starts misconfigured nodes while a
// checked workload runs. Each must get a clear error and leave the cluster
// serving.
func TestBadInput(t *testing.T) {
	c, w := mustLoadedCluster(t, "before the bad input")

	t.Log("raw gRPC Next with a count out of range, at every node")
	for _, n := range c.Nodes {
		seq := api.NewSequencerClient(grpctest.Dial(t, n.GRPCAddr))
		for _, count := range []uint32{0, server.DefaultMaxCount + 1, 1<<32 - 1} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := seq.Next(ctx, &api.NextRequest{Count: count})
			cancel()
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: Next(count=%d) = %v, %v; want InvalidArgument", n.Name, count, resp, err)
			} else if !strings.Contains(status.Convert(err).Message(), "count") {
				t.Errorf("%s: Next(count=%d): message %q does not name the count", n.Name, count, status.Convert(err).Message())
			}
		}
	}

	t.Log("raw gRPC Next with exactly the maximum count")
	{
		resp := mustRawNext(t, c, server.DefaultMaxCount)
		var total, last uint64
		for i, r := range resp.Runs {
			if i > 0 && r.First <= last {
				t.Errorf("run %d starts at %d, not above the previous run's last ID %d", i, r.First, last)
			}
			total += uint64(r.Count)
			last = r.First + uint64(r.Count-1)*r.Step
		}
		if total != server.DefaultMaxCount {
			t.Errorf("Next(count=%d) returned %d IDs in %d runs", server.DefaultMaxCount, total, len(resp.Runs))
		}
	}

	t.Log("client NextN with a count below 1")
	for _, n := range []int{0, -1} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ids, err := c.admin.NextN(ctx, n)
		cancel()
		if !errors.Is(err, client.ErrBadCount) {
			t.Errorf("NextN(%d) = %v, %v; want ErrBadCount", n, ids, err)
		}
	}

	t.Log("ordo next with a count below 1")
	for _, count := range []string{"0", "-5"} {
		res := runOrdo(t, "next", "--count", count, "--addrs", c.addrList(), "--timeout", "5s")
		if res.Code != 2 {
			t.Errorf("ordo next --count %s: exit code %d, want 2; stdout %q stderr %q", count, res.Code, res.Stdout, res.Stderr)
		}
		if !strings.Contains(res.Stderr, "--count") || res.Stdout != "" {
			t.Errorf("ordo next --count %s: stdout %q stderr %q; want the error naming --count on stderr only", count, res.Stdout, res.Stderr)
		}
	}

	t.Log("remove of an unknown node")
	{
		err := c.adminCall(func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
			_, err := a.Remove(ctx, &api.RemoveRequest{Id: "n9"}, opts...)
			return err
		})
		if status.Code(err) != codes.NotFound {
			t.Errorf("Remove(n9) = %v; want NotFound", err)
		}
	}

	t.Log("join with an id or a raft address already in use")
	{
		spare := freeaddr.Loopback(t, 2)
		n2, n3 := c.node("n2"), c.node("n3")
		for _, req := range []*api.JoinRequest{
			{Id: "n2", RaftAddr: spare[0], GrpcAddr: spare[1], Layout: "default"},        // id in use, other address
			{Id: "n9", RaftAddr: n3.Advertise, GrpcAddr: spare[1], Layout: "default"},    // address in use, other id
			{Id: "n2", RaftAddr: spare[0], GrpcAddr: n2.GRPCAddr, Layout: "default"},     // id in use, its gRPC address
			{Id: "n2", RaftAddr: n2.Advertise, GrpcAddr: n2.GRPCAddr, Layout: "default"}, // a member joining again: lost its data?
		} {
			err := c.adminCall(func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error {
				_, err := a.Join(ctx, req, opts...)
				return err
			})
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("Join(%v) = %v; want AlreadyExists", req, err)
			}
		}
	}
	c.waitStatus(leaderTimeout, "three voters after the refused joins", func(r *api.StatusResponse) bool {
		return len(r.Nodes) == 3
	})
	w.mustAcks(phaseAcks, phaseTimeout, "after the bad requests")

	t.Log("restart n3 with another layout than its data dir holds")
	n3 := c.node("n3")
	c.signal(n3, syscall.SIGTERM)
	if code, ok := n3.WaitExit(exitTimeout); !ok || code != 0 {
		t.Fatalf("n3 after SIGTERM: exited %v, code %d; want a clean exit", ok, code)
	}
	c.mustLeader(n3)
	c.mustRestart(n3, "--layout", "twitter")
	mustRefuseLayout(t, c, n3, "n3 with --layout twitter on a default-layout data dir")

	t.Log("a new node with another layout joins")
	n4 := c.newNode("n4", append([]string{"--join", c.mustLeader().GRPCAddr, "--layout", "twitter"}, fastTimers...)...)
	c.mustStart(n4)
	mustRefuseLayout(t, c, n4, "n4 joining with --layout twitter")

	t.Log("the remaining cluster serves, and n3 comes back with its own layout")
	resp := c.waitStatus(leaderTimeout, "a leader", func(r *api.StatusResponse) bool { return r.LeaderId != "" })
	for _, n := range resp.Nodes {
		if n.Id == "n4" {
			t.Errorf("refused node n4 is a member: %v", n)
		}
	}
	w.mustAcks(phaseAcks, phaseTimeout, "with n3 refused")
	c.mustRestart(n3)
	c.mustRole("n3", "follower", leaderTimeout)
	w.mustAcks(phaseAcks, phaseTimeout, "after n3 came back")

	mustCheck(t, w.stop())
}

// mustRefuseLayout checks that n, started with layout twitter on a
// cluster of the default layout, exits non-zero within exitTimeout and
// that its output names both layouts.
func mustRefuseLayout(t *testing.T, c *cluster, n *node, what string) {
	t.Helper()
	code, ok := n.WaitExit(exitTimeout)
	out := c.output(n)
	if !ok {
		t.Fatalf("%s still runs after %v", what, exitTimeout)
	}
	if code == 0 {
		t.Errorf("%s exited 0; want non-zero", what)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "layout") && strings.Contains(l, "twitter") && strings.Contains(l, "default") {
			line = l
			break
		}
	}
	if line == "" {
		t.Errorf("%s: no output line names both layouts (twitter and default); output:\n%s", what, out)
		return
	}
	t.Logf("%s: %s", what, strings.TrimSpace(line))
}

// adminCall runs one admin call through the cluster's admin client.
func (c *cluster) adminCall(fn func(ctx context.Context, a api.AdminClient, opts ...grpc.CallOption) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.admin.Admin(ctx, fn)
}

// mustRawNext calls Sequencer.Next with count on the leader over a plain
// gRPC connection, retrying while leadership moves.
func mustRawNext(t *testing.T, c *cluster, count uint32) *api.NextResponse {
	t.Helper()
	deadline := time.Now().Add(leaderTimeout)
	seqs := map[string]api.SequencerClient{} // one connection per leader address
	for {
		leader := c.mustLeader()
		seq, ok := seqs[leader.GRPCAddr]
		if !ok {
			seq = api.NewSequencerClient(grpctest.Dial(t, leader.GRPCAddr))
			seqs[leader.GRPCAddr] = seq
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := seq.Next(ctx, &api.NextRequest{Count: count})
		cancel()
		if err == nil {
			return resp
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("Next(count=%d) at %s: %v", count, leader.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
