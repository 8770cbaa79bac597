package verify

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/history"
	"github.com/seed-e8569b35/ordo/layout"
)

// keyedServer hands out IDs from a counter; with keep, it answers a key
// it answered before with the same IDs, as the cluster does; without, it
// forgets keys, so a key asked again gets new IDs (the bug keys exist to
// prevent).
type keyedServer struct {
	api.UnimplementedSequencerServer
	keep bool

	mu   sync.Mutex
	next uint64
	keys map[string][]*api.IDRun
}

func (s *keyedServer) Next(_ context.Context, req *api.NextRequest) (*api.NextResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if runs, ok := s.keys[req.IdempotencyKey]; ok && s.keep {
		return &api.NextResponse{Runs: runs, Keyed: req.IdempotencyKey != ""}, nil
	}
	runs := []*api.IDRun{{First: s.next + 1, Count: req.Count, Step: 1}}
	s.next += uint64(req.Count)
	if req.IdempotencyKey != "" {
		if s.keys == nil {
			s.keys = map[string][]*api.IDRun{}
		}
		s.keys[req.IdempotencyKey] = runs
	}
	return &api.NextResponse{Runs: runs, Keyed: req.IdempotencyKey != ""}, nil
}

// runKeyed runs keyed clients against s until they asked want keys
// again, and returns the checked history and what they counted.
func runKeyed(t *testing.T, s *keyedServer, want int64) (history.Report, KeyedCounts) {
	t.Helper()
	addr := serveSequencer(t, s)
	lay, err := layout.Parse("default")
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder()
	w, err := StartWorkload(WorkloadConfig{Addrs: []string{addr}, Keyed: 2, MaxCount: 3, Layout: lay}, rec)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for w.keyedCounts.reasked.Load() < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	w.Stop()
	ops := rec.Ops()
	k := w.keyedCountsOf(ops)
	if k.ReAsked < want {
		t.Fatalf("keyed clients asked %d keys again within 30s, want %d: %+v", k.ReAsked, want, k)
	}
	for _, op := range ops {
		if op.Key == "" {
			t.Fatalf("an attempt of a keyed client recorded without its key: %+v", op)
		}
	}
	return history.Check(ops), k
}

// TestKeyedClientsReplay: keyed clients against a server that keeps
// keys see every key asked again answered with its first IDs: replays,
// which the checker accepts.
func TestKeyedClientsReplay(t *testing.T) {
	rep, k := runKeyed(t, &keyedServer{keep: true}, 10)
	if !rep.OK() || rep.Replays != int(k.ReAsked) || rep.Keyed != int(k.Calls) || k.Attempts != k.Calls+k.ReAsked {
		t.Fatalf("history %v; keyed %+v: want every key asked again replayed", rep, k)
	}
	if k.Failures() != 0 {
		t.Errorf("failures in %+v", k)
	}
}

// TestKeyedClientsCatchForgottenKeys: against a server that forgets
// keys, a key asked again gets new IDs, which the checker reports.
func TestKeyedClientsCatchForgottenKeys(t *testing.T) {
	rep, k := runKeyed(t, &keyedServer{keep: false}, 10)
	if rep.OK() || rep.KeyConflicts != int(k.ReAsked) || rep.Replays != 0 {
		t.Fatalf("history %v; keyed %+v: want every key asked again reported as a conflict", rep, k)
	}
}

// TestCheckCrash: the key of a call a leader committed and ended before
// answering must be answered afterwards, with exactly the committed
// ticks, and the report says so.
func TestCheckCrash(t *testing.T) {
	lay, err := layout.Parse("default")
	if err != nil {
		t.Fatal(err)
	}
	const group = 3
	ids := func(first, n uint64) []uint64 {
		var out []uint64
		for i := range n {
			out = append(out, lay.ID(first+i, group))
		}
		return out
	}
	cr := crashed{node: "n1", rec: CrashRecord{Key: "k", First: 1000, Count: 2}}
	lost := history.Op{Key: "k", Outcome: history.Unknown}
	for _, tt := range []struct {
		name              string
		ops               []history.Op
		answered, matched bool
	}{
		{"retry got the committed IDs", []history.Op{lost, {Key: "k", Outcome: history.OK, IDs: ids(1000, 2)}}, true, true},
		{"retry got new IDs", []history.Op{lost, {Key: "k", Outcome: history.OK, IDs: ids(1002, 2)}}, true, false},
		{"one answer of two wrong", []history.Op{{Key: "k", Outcome: history.OK, IDs: ids(1000, 2)}, {Key: "k", Outcome: history.OK, IDs: ids(1000, 1)}}, true, false},
		{"never answered", []history.Op{lost, {Key: "j", Outcome: history.OK, IDs: ids(1000, 2)}}, false, false},
	} {
		c := checkCrash(cr, tt.ops, lay)
		if c.Answered != tt.answered || c.Matched != tt.matched {
			t.Errorf("%s: %+v; want answered %t, matched %t", tt.name, c, tt.answered, tt.matched)
		}
		res := Result{Recovered: true, Keyed: KeyedCounts{Crashes: []CrashCheck{c}}}
		if res.OK() != tt.matched {
			t.Errorf("%s: result OK %t, want %t", tt.name, res.OK(), tt.matched)
		}
		if !tt.matched {
			f := diagnose(res, tt.ops, nil, time.Second)
			if len(f) != 1 || f[0].Check != CheckCrashAnswer || !strings.Contains(f[0].Detail, "key k") {
				t.Errorf("%s: findings %+v, want one naming the crashed key", tt.name, f)
			}
		}
	}
}

// A run's named sequences and keyed clients are bounded, and a value out
// of bounds is refused naming its flag, before anything starts.
func TestConfigBoundsSequencesAndKeyed(t *testing.T) {
	base := Config{Duration: time.Second, Clients: 1, MaxCount: 1, Addrs: []string{"127.0.0.1:1"}}
	for _, tc := range []struct {
		set  func(*Config)
		want string // "" for valid
	}{
		{func(c *Config) {}, ""},
		{func(c *Config) { c.Sequences = maxSequences }, ""},
		{func(c *Config) { c.Keyed = maxKeyed }, ""},
		{func(c *Config) { c.Sequences = -1 }, "--sequences"},
		{func(c *Config) { c.Sequences = maxSequences + 1 }, "--sequences"},
		{func(c *Config) { c.Keyed = -1 }, "--keyed"},
		{func(c *Config) { c.Keyed = maxKeyed + 1 }, "--keyed"},
	} {
		cfg := base
		tc.set(&cfg)
		err := cfg.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("sequences %d, keyed %d: %v, want valid", cfg.Sequences, cfg.Keyed, err)
		case tc.want != "" && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("sequences %d, keyed %d: %v, want ErrBadConfig naming %s", cfg.Sequences, cfg.Keyed, err, tc.want)
		}
	}
}
