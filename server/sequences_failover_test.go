package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/internal/eventually"
)

// TestNamedSequencesAcrossLeaderChanges: concurrent callers, through the
// Go client (named calls on its stream, keyed ones unary), ask for IDs
// of three layout sequences (served from the leader's windows) and a
// dense one while leadership moves twice. Every call is recorded in its
// sequence's history: each sequence's IDs are unique and in real time
// order (history.Check), the dense one's with no gap its lost calls do
// not explain (history.CheckDense); no answer is one the client withheld
// as below its floor (ErrBadResponse), which the history would not see;
// the calls of the two layout sequences asked only unkeyed all succeed,
// across both changes.
//
// The dense sequence's calls are keyed: an unkeyed call whose answer a
// leader change lost is retried by the client for new values, a gap the
// cluster may make (docs/design.md) that no recorded call would explain.
// One layout sequence, l-mixed, takes keyed calls among unkeyed ones:
// each keyed call is decided at the sequence's mark, above the leader's
// window, so the next unkeyed call needs a new window a whole window
// beyond it, and the mark soon leads the clock past the lead bound
// (OutOfRange, most of its calls here): a known issue of the windows'
// sizing, so its failures are not counted here; its answers are checked.
func TestNamedSequencesAcrossLeaderChanges(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	eventually.True(t, seqTestWait, "the cluster version that reads sequences", func() bool { return leader.fsm.ClusterVersion() >= 3 })
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.GRPCAddr())
	}
	c, err := client.New(addrs, client.WithBackoff(time.Millisecond, 50*time.Millisecond), client.WithCaller("named-windows-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	layouts := map[string]string{"l-default": "default", "l-twitter": "twitter", "l-mixed": "sonyflake"}
	group := uint64(1)
	for name, kind := range layouts {
		if _, err := c.CreateSequence(ctx, name, kind, group, 0); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		group++
	}
	if _, err := c.CreateSequence(ctx, "dense", client.DenseKind, 0, 1); err != nil {
		t.Fatalf("create dense: %v", err)
	}
	names := []string{"l-default", "l-twitter", "l-mixed", "dense"}
	recs := map[string]*history.Recorder{}
	for _, name := range names {
		recs[name] = history.NewRecorder()
	}

	var (
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		keys    atomic.Int64
		answers atomic.Int64
	)
	const callers = 8
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				name := names[(i+j)%len(names)]
				n := 1 + (i+j)%3
				// Every dense call, and one of l-mixed's in four, keyed.
				key := ""
				if name == "dense" || name == "l-mixed" && j%4 == 3 {
					key = fmt.Sprintf("k%d", keys.Add(1))
				}
				caller := history.Caller{Rec: recs[name], Client: i}
				end, err := caller.CallKeyed(key, n, func() ([]uint64, []string, error) {
					cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
					defer ccancel()
					if key != "" {
						cctx = client.WithIdempotencyKey(cctx, key)
					}
					ids, err := c.Sequence(name).NextN(cctx, n)
					return ids, nil, err
				})
				if end == history.Answered {
					answers.Add(1)
				}
				// The client withholds an answer that breaks the order
				// it saw (its floor): the history never sees it, so it
				// is the cluster's failure here.
				if errors.Is(err, client.ErrBadResponse) || errors.Is(err, client.ErrReplayBelowFloor) {
					t.Errorf("%s: %v", name, err)
				}
			}
		}()
	}
	// Calls before, between and after two leader changes.
	waitAnswers := func(more int64) {
		t.Helper()
		want := answers.Load() + more
		eventually.True(t, seqTestWait, fmt.Sprintf("%d more answers", more), func() bool { return answers.Load() >= want })
	}
	waitAnswers(200)
	leader = mustTransfer(t, nodes, leader)
	waitAnswers(200)
	mustTransfer(t, nodes, leader)
	waitAnswers(200)
	close(stop)
	wg.Wait()

	for _, name := range names {
		ops := recs[name].Ops()
		rep := history.Check(ops)
		if !rep.OK() || rep.Acknowledged == 0 || name != "l-mixed" && rep.Acknowledged != rep.Attempted {
			t.Errorf("%s: %s", name, rep)
		}
		t.Logf("%s: %s", name, rep)
		if name == "dense" {
			if d := history.CheckDense(ops, 1); !d.OK() {
				t.Errorf("%s: %s", name, d)
			}
		}
	}
}
