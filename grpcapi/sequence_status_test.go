package grpcapi

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/fsm"
	"github.com/seed-e8569b35/ordo/layout"
	"github.com/seed-e8569b35/ordo/settle"
)

// statusNode is a node that is its cluster's only member, n1.
type statusNode struct{ fakeNode }

func (statusNode) Members() ([]Member, error) {
	return []Member{{ID: "n1", RaftAddr: "127.0.0.1:7101", GRPCAddr: "127.0.0.1:7001", Voter: true, Self: true}}, nil
}

type statusRaft struct{ state raft.RaftState }

func (r statusRaft) State() raft.RaftState { return r.state }
func (statusRaft) CurrentTerm() uint64     { return 3 }
func (statusRaft) AppliedIndex() uint64    { return 10 }
func (statusRaft) CommitIndex() uint64     { return 10 }
func (statusRaft) LastIndex() uint64       { return 10 }
func (statusRaft) LastContact() time.Time  { return time.Time{} }

// rateMeter answers SequenceRate from rates (issued is ten times the
// rate) and records what IssuedIn counted.
type rateMeter struct {
	nopMeter
	rates map[string]float64

	mu     sync.Mutex
	issued uint64
	in     map[string]uint64
}

func (m *rateMeter) Issued(n uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.issued += n
}

func (m *rateMeter) IssuedIn(names []string, counts []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.in == nil {
		m.in = map[string]uint64{}
	}
	for i, name := range names {
		m.in[name] += counts[i]
	}
}

func (m *rateMeter) SequenceRate(name string) (uint64, float64) {
	return uint64(m.rates[name] * 10), m.rates[name]
}

func (*rateMeter) RateWindow() time.Duration { return 10 * time.Second }

// mustApply applies c to f as a committed entry.
func mustApply(t *testing.T, f *fsm.FSM, c fsm.Command) {
	t.Helper()
	data, err := fsm.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := f.Apply(&raft.Log{Data: data, Term: 1}).(fsm.Result); !ok || res.Err != nil {
		t.Fatalf("apply %+v: %+v", c, res)
	}
}

// sequencesState holds named sequences a (dense), b (twitter, group 1),
// c (dense, from 50), e (twitter, group 2) and d (dropped).
func sequencesState(t *testing.T) *fsm.FSM {
	f := fsm.New(nil, nil)
	l := layout.MustPreset("default")
	mustApply(t, f, fsm.Command{Op: fsm.OpInit, Layout: &l, ClusterID: "c1"})
	mustApply(t, f, fsm.Command{Op: fsm.OpClusterVersion, ClusterVersion: fsm.SequencesVersion})
	for _, c := range []fsm.Command{
		{Sequence: "a", Kind: fsm.KindDense}, {Sequence: "b", Kind: "twitter", Group: 1}, {Sequence: "c", Kind: fsm.KindDense, Start: 50},
		{Sequence: "d", Kind: fsm.KindDense}, {Sequence: "e", Kind: "twitter", Group: 2},
	} {
		c.Op = fsm.OpCreateSequence
		mustApply(t, f, c)
	}
	mustApply(t, f, fsm.Command{Op: fsm.OpDropSequence, Sequence: "d"})
	return f
}

func names(list []*api.SequenceStatus) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

// TestStatusSequences: Status reports the live named sequences only when
// asked: from a leader by its rates, highest first, ties by name, at most
// the limit, with how many more there are and the leader's id; from a
// node that leads nothing by name, with no rates and no id. A limit past
// the bound is InvalidArgument naming it.
func TestStatusSequences(t *testing.T) {
	meter := &rateMeter{rates: map[string]float64{"a": 5, "b": 50, "c": 0, "d": 100, "e": 50}}
	state := sequencesState(t)
	serve := func(leader bool) api.AdminClient {
		r := statusRaft{raft.Follower}
		if leader {
			r.state = raft.Leader
		}
		// n1 names itself as the leader it knows: a follower answers
		// itself instead of forwarding.
		srv := NewServer(Config{ID: "n1"}, Parts{Node: statusNode{fakeNode{leader: leader}}, Raft: r, State: state, Meter: meter})
		return api.NewAdminClient(mustServe(t, srv.Register))
	}
	ctx := t.Context()
	leader := serve(true)

	resp, err := leader.Status(ctx, &api.StatusRequest{})
	if err != nil || len(resp.Sequences) != 0 || resp.MoreSequences != 0 || resp.RatesFrom != "" || len(resp.Nodes) != 1 {
		t.Fatalf("status without --sequences: %v, %v; want the nodes and no sequences", resp, err)
	}
	resp, err = leader.Status(ctx, &api.StatusRequest{Sequences: true, SequenceLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(resp.Sequences); !slices.Equal(got, []string{"b", "e", "a"}) || resp.MoreSequences != 1 {
		t.Fatalf("limit 3: %q and %d more; want b, e (50/s, by name), a (5/s) and 1 more", got, resp.MoreSequences)
	}
	if resp.RatesFrom != "n1" || resp.RateWindowMs != 10_000 || len(resp.Nodes) != 1 {
		t.Fatalf("rates from %q over %d ms, %d nodes; want n1's, 10000, 1", resp.RatesFrom, resp.RateWindowMs, len(resp.Nodes))
	}
	if b := resp.Sequences[0]; b.Kind != "twitter" || b.Group != 1 || b.Rate != 50 || b.Issued != 500 || b.Next != 1 {
		t.Fatalf("b: %v", b)
	}
	resp, err = leader.Status(ctx, &api.StatusRequest{Sequences: true})
	if got := names(resp.Sequences); err != nil || !slices.Equal(got, []string{"b", "e", "a", "c"}) || resp.MoreSequences != 0 {
		t.Fatalf("the default limit: %q and %d more, %v; want every live one, d (dropped) left out", got, resp.MoreSequences, err)
	}
	if c := resp.Sequences[3]; c.Kind != fsm.KindDense || c.Next != 50 || c.Rate != 0 {
		t.Fatalf("c: %v", c)
	}
	_, err = leader.Status(ctx, &api.StatusRequest{Sequences: true, SequenceLimit: MaxSequenceLimit + 1})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 10000") {
		t.Fatalf("limit past the bound: %v, want InvalidArgument naming it", err)
	}

	resp, err = serve(false).Status(ctx, &api.StatusRequest{Sequences: true, SequenceLimit: 2})
	if got := names(resp.Sequences); err != nil || !slices.Equal(got, []string{"a", "b"}) || resp.MoreSequences != 2 || resp.RatesFrom != "" {
		t.Fatalf("from a node that does not lead: %q, %d more, rates from %q, %v; want a, b by name, 2 more, no rates", got, resp.MoreSequences, resp.RatesFrom, err)
	}
	for _, s := range resp.Sequences {
		if s.Rate != 0 || s.Issued != 0 {
			t.Fatalf("a node that does not lead reports %v", s)
		}
	}
}

// allocSettle commits every Alloc at 1, and refuses sequence "full".
type allocSettle struct{ Settle }

func (allocSettle) Grants(_ context.Context, asks []settle.Ask) []settle.Grant {
	grants := make([]settle.Grant, len(asks))
	for i, a := range asks {
		grants[i] = settle.Decided(1, nil)
		if a.Name == "full" {
			grants[i] = settle.Decided(0, errors.New("refused"))
		}
	}
	return grants
}

// TestNamedSequenceIDsCountedPerSequence: every named sequence's IDs the
// leader hands out are counted for it (and in the total); a call that
// fails counts nothing.
func TestNamedSequenceIDsCountedPerSequence(t *testing.T) {
	meter := &rateMeter{}
	state := sequencesState(t)
	mustApply(t, state, fsm.Command{Op: fsm.OpCreateSequence, Sequence: "full", Kind: fsm.KindDense})
	srv := NewServer(Config{ID: "n1", MaxCount: 100}, Parts{Node: fakeNode{leader: true}, State: state, Meter: meter, Settle: allocSettle{}})
	ctx := t.Context()
	for _, call := range []struct {
		seq   string
		count uint32
	}{{"a", 3}, {"b", 2}, {"a", 4}} {
		if _, err := srv.NextInSequence(ctx, call.seq, call.count, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []string{"full", "d", "zz"} {
		if _, err := srv.NextInSequence(ctx, seq, 5, false); err == nil {
			t.Fatalf("%s: no error", seq)
		}
	}
	if meter.issued != 9 || len(meter.in) != 2 || meter.in["a"] != 7 || meter.in["b"] != 2 {
		t.Fatalf("counted %d in all and %v; want 9, a 7 and b 2", meter.issued, meter.in)
	}
}

// Current: the fakes lead, caught up.
func (allocSettle) Current() bool     { return true }
func (*countingSettle) Current() bool { return true }
func (*fakeSettle) Current() bool     { return true }
func (*namedSettle) Current() bool    { return true }

// staleSettle is a new leader that has not yet applied every entry of
// earlier terms.
type staleSettle struct{ allocSettle }

func (staleSettle) Current() bool { return false }

// A new leader that has not caught up cannot tell that a sequence its
// state lacks does not exist (it may be in an entry not yet applied): it
// answers Unavailable, which the client retries, never NotFound. A
// sequence it holds is served.
func TestStaleLeaderDoesNotSayNotFound(t *testing.T) {
	state := sequencesState(t)
	srv := NewServer(Config{ID: "n1", MaxCount: 100}, Parts{Node: fakeNode{leader: true}, State: state, Meter: &rateMeter{}, Settle: staleSettle{}})
	ctx := t.Context()
	if _, err := srv.NextInSequence(ctx, "zz", 1, false); status.Code(err) != codes.Unavailable {
		t.Fatalf("unknown sequence on a leader not caught up: %v, want Unavailable", err)
	}
	if _, err := srv.NextInSequence(ctx, "a", 1, false); err != nil {
		t.Fatalf("a sequence the stale state holds: %v", err)
	}
	caught := NewServer(Config{ID: "n1", MaxCount: 100}, Parts{Node: fakeNode{leader: true}, State: state, Meter: &rateMeter{}, Settle: allocSettle{}})
	if _, err := caught.NextInSequence(ctx, "zz", 1, false); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown sequence on a leader caught up: %v, want NotFound", err)
	}
}

// checkNamed decides from the sequence as the state holds it (unknown,
// dropped, 64-bit, 128-bit), whether this leader's state answers for the
// cluster, and the width the caller reads: every combination.
func TestCheckNamedEveryCombination(t *testing.T) {
	narrow, wide := layout.MustPreset("twitter"), layout.MustPreset("uuidv7")
	seqs := map[string]struct {
		seq   fsm.Sequence
		known bool
	}{
		"unknown": {fsm.Sequence{}, false},
		"dropped": {fsm.Sequence{Kind: "twitter", Layout: &narrow, Dropped: true}, true},
		"dense":   {fsm.Sequence{Kind: fsm.KindDense}, true},
		"narrow":  {fsm.Sequence{Kind: "twitter", Layout: &narrow}, true},
		"wide":    {fsm.Sequence{Kind: "uuidv7", Layout: &wide}, true},
	}
	for name, sq := range seqs {
		for _, current := range []bool{false, true} {
			for _, ticks := range []bool{false, true} {
				var st Settle = staleSettle{}
				if current {
					st = allocSettle{}
				}
				srv := NewServer(Config{ID: "n1", MaxCount: 100}, Parts{Node: fakeNode{leader: true}, State: sequencesState(t), Meter: &rateMeter{}, Settle: st})
				err := srv.checkNamed(name, sq.seq, sq.known, ticks)
				var want codes.Code
				switch {
				case !sq.known || sq.seq.Dropped:
					want = codes.NotFound
					if !current {
						want = codes.Unavailable // cannot tell: the client retries
					}
				case (name == "wide") != ticks:
					want = codes.FailedPrecondition
				default:
					want = codes.OK
				}
				if got := status.Code(ToStatus(t.Context(), err, "")); got != want {
					t.Errorf("%s, current %t, ticks %t: %v (%v), want %v", name, current, ticks, got, err, want)
				}
			}
		}
	}
}
