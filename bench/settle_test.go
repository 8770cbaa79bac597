package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/client"
)

// TestSettleTargetsBackToBack runs the settled-order targets one after
// the other on one node, as `ordo bench --target reserve,commit-floor,
// watermark-lag` does. The reserve run's IDs are checked; the commit
// floor's calls yield none; and the lag run starts only if the two runs
// before left no reservation open (its first call waits for W to pass a
// completed one), so a pair the end of a run cut short, or a floor's
// reservation not abandoned, fails it.
func TestSettleTargetsBackToBack(t *testing.T) {
	n := mustNode(t)
	cfg := Config{Addrs: []string{n.GRPCAddr()}, Concurrency: 8, Count: 1, Duration: 300 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var results []Result
	for _, target := range []string{TargetReserve, TargetCommitFloor, TargetWatermarkLag} {
		cfg.Target = target
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatalf("target %s: %v", target, err)
		}
		if !res.OK() || res.Requests == 0 || res.Errors != 0 {
			t.Fatalf("target %s: %d requests, %d errors (last %q), check %s; want some requests, no errors, a clean check",
				target, res.Requests, res.Errors, res.LastError, res.Check)
		}
		results = append(results, res)
	}
	reserve, floor, lag := results[0], results[1], results[2]
	if reserve.IDs != reserve.Requests || reserve.Check.IDs != int(reserve.IDs) {
		t.Fatalf("reserve run: %d IDs over %d requests, %d checked; want one ID a request, each checked", reserve.IDs, reserve.Requests, reserve.Check.IDs)
	}
	if floor.IDs != 0 || floor.Lag != nil {
		t.Fatalf("commit floor run: %d IDs, lag %v; want neither", floor.IDs, floor.Lag)
	}
	if lag.Lag == nil || lag.Lag.Samples != int(lag.Requests) || lag.Lag.CommitP50 <= 0 {
		t.Fatalf("watermark lag run: %d requests, lag %+v; want a sample and a commit time for each", lag.Requests, lag.Lag)
	}
	// The watcher cannot hear of a completion before it is asked for,
	// unless W passed a reservation that was still open.
	if lag.Lag.AfterCallP50 <= 0 {
		t.Fatalf("W passed completed IDs %s after Complete was called (p50), want a positive time", lag.Lag.AfterCallP50)
	}
	if got := Ratios(results); len(got) != 1 || got[0].Of != TargetReserve || got[0].Over != TargetCommitFloor || got[0].Requests <= 0 {
		t.Fatalf("ratios %+v, want reserve over commit-floor alone (no ratio of the watermark lag)", got)
	}
}

// TestWatermarkLagNeedsNothingOpen: with a reservation held open, W
// cannot pass a later completion, so the lag run refuses to start rather
// than measure that reservation's TTL.
func TestWatermarkLagNeedsNothingOpen(t *testing.T) {
	n := mustNode(t)
	c, err := client.New([]string{n.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Reserve(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	runCtx, cancelRun := context.WithTimeout(ctx, 2*time.Second)
	defer cancelRun()
	_, err = Run(runCtx, Config{Target: TargetWatermarkLag, Addrs: []string{n.GRPCAddr()}, Concurrency: 1, Count: 1, Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "another reservation open") {
		t.Fatalf("watermark lag run behind an open reservation: %v, want a refusal that names it", err)
	}
}

func TestSettleTargetsBadConfig(t *testing.T) {
	base := Config{Addrs: []string{"x:1"}, Concurrency: 1, Count: 1, Duration: time.Second}
	for _, target := range []string{TargetReserve, TargetCommitFloor, TargetWatermarkLag} {
		for name, change := range map[string]func(*Config){
			"unary":    func(c *Config) { c.Unary = true },
			"coalesce": func(c *Config) { c.Coalesce = 1 },
			"count 2":  func(c *Config) { c.Count = 2 },
		} {
			if target == TargetReserve && name == "count 2" {
				continue // reservations of several IDs are measured too
			}
			cfg := base
			cfg.Target = target
			change(&cfg)
			if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
				t.Errorf("target %s with %s: %v, want ErrBadConfig", target, name, err)
			}
		}
	}
}

func TestRatios(t *testing.T) {
	rs := []Result{
		{Target: TargetReserve, RequestsS: 800, P50: 2 * time.Millisecond},
		{Target: TargetWatermarkLag, RequestsS: 100},
		{Target: TargetCommitFloor, RequestsS: 1000, P50: time.Millisecond},
		{Target: TargetOrdo, RequestsS: 0},
	}
	got := Ratios(rs)
	want := []Ratio{
		{Of: TargetReserve, Over: TargetCommitFloor, Requests: 0.8, P50: 2},
		{Of: TargetReserve, Over: TargetOrdo},
	}
	if len(got) != len(want) {
		t.Fatalf("ratios %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ratio %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if Ratios(nil) != nil || Ratios(rs[:1]) != nil {
		t.Error("ratios of fewer than two results")
	}
}

// TestWatcherPassed: a waiter gets the time W first rose above its ID,
// also when the rise came before it asked, and waits for one to come.
func TestWatcherPassed(t *testing.T) {
	w := newWatcher()
	for _, id := range []uint64{5, 5, 9, 12} {
		w.see(client.Mark{ID: id})
	}
	first := w.rises[1].at // the rise to 9
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if at, err := w.passed(ctx, 6); err != nil || !at.Equal(first) {
		t.Fatalf("passed(6) = %v, %v; want the rise to 9 at %v", at, err, first)
	}
	got := make(chan time.Time)
	go func() {
		at, _ := w.passed(ctx, 12)
		got <- at
	}()
	w.see(client.Mark{ID: 13})
	if at := <-got; at.IsZero() || at.Before(first) {
		t.Fatalf("passed(12) = %v, want the rise to 13", at)
	}
	short, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancelShort()
	if _, err := w.passed(short, 13); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("passed(13) with no rise above it: %v, want the context's deadline", err)
	}
}
