package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/history"
)

// TestSequencesTarget runs the sequences target twice on one node, as
// two `ordo bench --target sequences` runs on one cluster do: the first
// creates the sequences, the second finds them, and both pass the
// per-sequence check although two dense sequences hand out equal values.
// A third run that asks for another kind of the same names is refused.
func TestSequencesTarget(t *testing.T) {
	n := mustNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Config{Target: TargetSequences, Addrs: []string{n.GRPCAddr()}, Concurrency: 6, Count: 3,
		Duration: 300 * time.Millisecond, Sequences: 3, Kind: "dense"}
	for run := range 2 {
		res, err := Run(ctx, cfg)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if !res.OK() || res.Requests == 0 || res.Errors != 0 || res.IDs != 3*res.Requests || res.Check.IDs != int(res.IDs) {
			t.Fatalf("run %d: %d requests, %d IDs, %d errors (last %q), check %s; want some requests of 3 IDs, no errors, a clean check",
				run, res.Requests, res.IDs, res.Errors, res.LastError, res.Check)
		}
	}
	cfg.Kind = "twitter"
	if _, err := Run(ctx, cfg); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a run of kind twitter over dense sequences: %v, want ErrBadConfig", err)
	}
}

func TestSequencesBadConfig(t *testing.T) {
	base := Config{Target: TargetSequences, Addrs: []string{"127.0.0.1:1"}, Concurrency: 1, Count: 1, Duration: time.Second, Sequences: 1}
	for _, mod := range []func(*Config){
		func(c *Config) { c.Kind = "no-such-layout" },
		func(c *Config) { c.Kind = "uuidv7" }, // 128-bit: the bench checks 64-bit IDs
		func(c *Config) { c.Unary = true },
		func(c *Config) { c.Coalesce = 1 },
	} {
		cfg := base
		mod(&cfg)
		if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Run(%+v) = %v, want ErrBadConfig", cfg, err)
		}
	}
}

// TestCheckGroups: equal IDs in two groups, and one group's later call
// below the other's earlier one, break nothing; a duplicate within a
// group is found, and its example points into the whole history.
func TestCheckGroups(t *testing.T) {
	op := func(client int, start, end time.Duration, ids ...uint64) history.Op {
		return history.Op{Client: client, Start: start, End: end, Outcome: history.OK, IDs: ids}
	}
	ops := []history.Op{
		op(0, 0, 1, 1, 2),
		op(1, 0, 1, 1, 2),
		op(2, 2, 3, 3), // group 0, after caller 0's call
		op(3, 2, 3, 3), // group 1
	}
	if rep := checkGroups(ops, 2); !rep.OK() || rep.IDs != 6 || rep.Acknowledged != 4 {
		t.Fatalf("two groups: %s, want OK with 6 IDs", rep)
	}
	if rep := history.Check(ops); rep.OK() {
		t.Fatalf("as one sequence the history should fail: %s", rep)
	}
	ops = append(ops, op(4, 4, 5, 2)) // group 0 again: 2 was caller 0's
	rep := checkGroups(ops, 2)
	if rep.OK() || rep.Duplicates != 1 || len(rep.Examples) == 0 {
		t.Fatalf("a duplicate in group 0: %s, want one duplicate with an example", rep)
	}
	for _, v := range rep.Examples {
		if v.A != 0 && v.A != 4 && v.A != 2 {
			t.Fatalf("example %s points at op %d, want ops of group 0 (0, 2, 4)", v, v.A)
		}
	}
}
