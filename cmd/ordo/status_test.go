package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/seed-e8569b35/ordo/api"
)

// statusNode answers Status as a leader n1 with named sequences would,
// its rates from n1 unless noLeader, and records each request.
type statusNode struct {
	api.UnimplementedAdminServer
	noLeader bool
	none     bool // no named sequences

	mu    sync.Mutex
	asked []*api.StatusRequest
}

func (f *statusNode) Status(_ context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	f.mu.Lock()
	f.asked = append(f.asked, req)
	f.mu.Unlock()
	resp := &api.StatusResponse{LeaderId: "n1", LeaderAddr: "127.0.0.1:7001", Layout: "default",
		Nodes: []*api.NodeInfo{{Id: "n1", Role: "leader", Voter: true, Term: 2, AppliedIndex: 9, CommitIndex: 9, HighWater: 77, RaftAddr: "127.0.0.1:7101", GrpcAddr: "127.0.0.1:7001", ClusterId: "c1"}}}
	if !req.Sequences || f.none {
		return resp, nil
	}
	resp.Sequences = []*api.SequenceStatus{
		{Name: "orders", Kind: "dense", Next: 1201, Rate: 120.25, Issued: 1200},
		{Name: "events", Kind: "twitter", Group: 3, Next: 1 << 40, Rate: 0.5, Issued: 5},
	}
	resp.MoreSequences, resp.RatesFrom, resp.RateWindowMs = 3, "n1", 10_000
	if f.noLeader {
		resp.RatesFrom = ""
		for _, s := range resp.Sequences {
			s.Rate, s.Issued = 0, 0
		}
	}
	return resp, nil
}

func (f *statusNode) serve(t *testing.T) string { return serveAdmin(t, f) }

// serveAdmin serves admin on a free loopback port until the test ends.
func serveAdmin(t *testing.T, admin api.AdminServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterAdminServer(s, admin)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestStatusSequences: ordo status --sequences asks for the named
// sequences with the limit (50 by default) and prints them after the
// nodes, with how many more there are and whose rates they are; without
// a leader's rates it says so; --json carries them; without --sequences
// it asks for none and prints none.
func TestStatusSequences(t *testing.T) {
	f := &statusNode{}
	addr := f.serve(t)
	out, err := output(t, runStatus, "--addrs", addr, "--sequences", "--limit", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := "\nSEQUENCE  KIND     GROUP  NEXT           IDS/S  ISSUED\n" +
		"orders    dense    0      1201           120.2  1200\n" +
		"events    twitter  3      1099511627776  0.5    5\n" +
		"... and 3 more named sequences: raise --limit to list them\n" +
		"IDS/S: IDs a second over the last 10s, busiest first; ISSUED: IDs since the leader (n1) started; both as it counts them\n"
	if !strings.HasSuffix(out, want) || !strings.HasPrefix(out, "leader n1 (127.0.0.1:7001)") {
		t.Fatalf("printed\n%s\nwant the nodes, then\n%s", out, want)
	}
	if _, err := output(t, runStatus, "--addrs", addr, "--sequences"); err != nil {
		t.Fatal(err)
	}
	out, err = output(t, runStatus, "--addrs", addr)
	if err != nil || strings.Contains(out, "SEQUENCE") {
		t.Fatalf("without --sequences: %v, printed\n%s", err, out)
	}
	out, err = output(t, runStatus, "--addrs", addr, "--sequences", "--json")
	if err != nil || !strings.Contains(out, `"name": "orders"`) || !strings.Contains(out, `"rate": 120.25`) ||
		!strings.Contains(out, `"more_sequences": "3"`) || !strings.Contains(out, `"rates_from": "n1"`) {
		t.Fatalf("--json: %v, printed\n%s", err, out)
	}
	f.mu.Lock()
	asked := f.asked
	f.mu.Unlock()
	if len(asked) != 4 || !asked[0].Sequences || asked[0].SequenceLimit != 2 || asked[1].SequenceLimit != 50 || asked[2].Sequences || !asked[3].Sequences {
		t.Fatalf("asked %v", asked)
	}

	out, err = output(t, runStatus, "--addrs", (&statusNode{noLeader: true}).serve(t), "--sequences")
	if err != nil || !strings.Contains(out, "orders    dense    0      1201           -      -\n") || !strings.Contains(out, "no rates: no leader answered") {
		t.Fatalf("without a leader: %v, printed\n%s", err, out)
	}
	out, err = output(t, runStatus, "--addrs", (&statusNode{none: true}).serve(t), "--sequences")
	if err != nil || !strings.HasSuffix(out, "\nno named sequences: create one with ordo sequence create NAME --kind dense\n") {
		t.Fatalf("no sequences: %v, printed\n%s", err, out)
	}
}

// TestStatusRefusesBadInput: each bad command line is a usage error
// naming the fix, found before any node is asked.
func TestStatusRefusesBadInput(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		wantIn string
	}{
		{[]string{"--limit", "5"}, "--limit is for the named sequences: ordo status --sequences --limit 5"},
		{[]string{"--sequences", "--limit", "0"}, "--limit 0: want 1 to 10000"},
		{[]string{"--sequences", "--limit", "10001"}, "--limit 10001: want 1 to 10000"},
		{[]string{"--sequences", "10"}, `unexpected arguments ["10"]`},
	} {
		err := runStatus(append([]string{"--addrs", "127.0.0.1:1", "--timeout", "1s"}, tt.args...))
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("ordo status %q: %v, want a usage error containing %q", tt.args, err, tt.wantIn)
		}
	}
}
