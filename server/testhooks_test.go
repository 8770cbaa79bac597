package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/internal/eventually"
	"github.com/seed-e8569b35/ordo/internal/grpctest"
)

// keyedCommit is one call of TestHooks.AfterKeyedCommit.
type keyedCommit struct {
	key          fsm.Keyed
	seq          string
	first, count uint64
}

// TestAfterKeyedCommitRunsBeforeTheAnswer: the hook sees every keyed call
// of the default sequence and of a named one once it is committed, with
// what it will be answered, and the answer waits for it: a hook that
// ends the process there ends it between commit and answer. Unkeyed
// calls never reach it.
func TestAfterKeyedCommitRunsBeforeTheAnswer(t *testing.T) {
	seen := make(chan keyedCommit, 1)
	release := make(chan struct{})
	cfg := testConfig(t, "n1", t.TempDir())
	cfg.TestHooks.AfterKeyedCommit = func(key fsm.Keyed, seq string, first, count uint64) {
		seen <- keyedCommit{key: key, seq: seq, first: first, count: count}
		<-release
	}
	n := mustBootstrap(t, cfg)
	conn := grpctest.Dial(t, n.GRPCAddr())
	mustNextVia(t, conn, 1) // unkeyed: the hook would block it
	eventually.True(t, seqTestWait, "the cluster version that reads keys", func() bool { return n.fsm.ClusterVersion() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := api.NewAdminClient(conn).CreateSequence(ctx, &api.CreateSequenceRequest{Name: "ledger", Kind: "dense"}); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []string{"", "ledger"} {
		type answer struct {
			resp *api.NextResponse
			err  error
		}
		answered := make(chan answer, 1)
		go func() {
			resp, err := api.NewSequencerClient(conn).Next(ctx, &api.NextRequest{Count: 3, Sequence: seq, IdempotencyKey: "k" + seq})
			answered <- answer{resp, err}
		}()
		var c keyedCommit
		select {
		case c = <-seen:
		case a := <-answered:
			t.Fatalf("sequence %q: answered (%v, %v) without calling the hook", seq, a.resp, a.err)
		case <-ctx.Done():
			t.Fatalf("sequence %q: the hook was never called", seq)
		}
		if c.key.Key != "k"+seq || c.seq != seq || c.count != 3 {
			t.Errorf("sequence %q: hook called with %+v", seq, c)
		}
		select {
		case a := <-answered:
			t.Fatalf("sequence %q: answered (%v, %v) while the hook ran", seq, a.resp, a.err)
		case <-time.After(100 * time.Millisecond):
		}
		release <- struct{}{}
		a := <-answered
		if a.err != nil {
			t.Fatalf("sequence %q: %v", seq, a.err)
		}
		got := idsOf(t, a.resp.Runs)
		if seq == "" {
			for i := range got {
				got[i] = cfg.Layout.Tick(got[i])
			}
		}
		if want := []uint64{c.first, c.first + 1, c.first + 2}; !slices.Equal(got, want) {
			t.Errorf("sequence %q: answered %v (as ticks or values), the hook was told %v", seq, got, want)
		}
	}
	mustNextVia(t, conn, 2) // unkeyed again, after keyed ones
}
