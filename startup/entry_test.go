package startup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/internal/freeaddr"
	"github.com/seed-e8569b35/ordo/startup/startuptest"
)

// testSelf is a starting node on dir that answers nobody (port 0), with
// its logs in the test log.
func testSelf(t *testing.T, id, dir string) Self {
	return Self{ID: id, DataDir: dir, GRPCAddr: "127.0.0.1:0",
		Logger: hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}})}
}

// testWriter sends logs to the test log, so they show only on failure.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestDecideStart runs the table at the top of entry.go, one row at a
// time, against fake peers: a node with an empty data dir bootstraps only
// when every listed peer answers, under its own id, and every --join
// address answers that it holds no Raft state (a list of itself alone
// needs --force-bootstrap), and joins only when a leader says it is not
// a member; whenever it cannot tell, it refuses. A data dir that holds state: server's
// TestDecideStartRestartsOnState. Real processes: cluster_test's
// TestLostDataDir and the lost-data tests.
func TestDecideStart(t *testing.T) {
	dead := func(id string) Peer {
		addrs := freeaddr.Loopback(t, 2)
		return Peer{ID: id, GRPCAddr: addrs[1]}
	}
	answering := func(id string, p *startuptest.Admin) Peer {
		return Peer{ID: id, GRPCAddr: startuptest.Serve(t, p)}
	}
	empty := func(id string) Peer {
		return answering(id, &startuptest.Admin{Info: &api.NodeInfo{Id: id, Role: "starting"}})
	}
	holding := func(id string) Peer {
		return answering(id, &startuptest.Admin{Info: &api.NodeInfo{Id: id, Role: "starting", HasState: true, ClusterId: "c1"}})
	}
	// A node of an earlier version: no has_state, but a term.
	older := func(id string) Peer {
		return answering(id, &startuptest.Admin{Info: &api.NodeInfo{Id: id, Role: "follower", Term: 3}})
	}
	// Whatever listens at the address is another node, without state.
	imposter := func(id string) Peer {
		return answering(id, &startuptest.Admin{Info: &api.NodeInfo{Id: "x", Role: "starting"}})
	}
	self := func() Peer { return dead("a") }
	// A member that holds state and leads members.
	memberLeads := func(id string, members ...string) string {
		info := &api.NodeInfo{Id: id, Role: "leader", HasState: true, ClusterId: "c1"}
		return startuptest.Serve(t, &startuptest.Admin{Info: info, Members: append([]string{id}, members...), Leader: id})
	}
	leaderSays := func(members ...string) []string {
		return []string{startuptest.Serve(t, &startuptest.Admin{Members: members, Leader: members[0]})}
	}
	noLeader := []string{startuptest.Serve(t, &startuptest.Admin{Members: []string{"b"}})}
	deadJoin := freeaddr.Loopback(t, 1)

	cases := []struct {
		name    string
		entry   Entry
		want    Start
		wantErr error // nil for none
		text    string
	}{
		{"listed, every peer without state", Entry{Bootstrap: []Peer{self(), empty("b"), empty("c")}}, StartBootstrap, nil, ""},
		{"listed alone", Entry{Bootstrap: []Peer{self()}}, 0, ErrBadConfig, "--force-bootstrap"},
		{"listed alone, forced", Entry{Bootstrap: []Peer{self()}, ForceBootstrap: true}, StartBootstrap, nil, ""},
		{"listed alone, --join: a leader says a member", Entry{Bootstrap: []Peer{self()}, Join: leaderSays("b", "a")}, 0, ErrNodeExists, "remove it first"},
		{"listed alone, --join: no leader", Entry{Bootstrap: []Peer{self()}, Join: noLeader}, 0, ErrClusterUnknown, "starting this node once with --force-bootstrap"},
		{"listed, peers without state, a --join address holds state and leads", Entry{Bootstrap: []Peer{self(), empty("b")}, Join: []string{memberLeads("c", "a")}}, 0, ErrNodeExists, "remove it first"},
		{"listed, peers without state, a --join address down", Entry{Bootstrap: []Peer{self(), empty("b")}, Join: deadJoin}, 0, ErrClusterUnknown, "join "},
		{"listed, peers and --join addresses without state", Entry{Bootstrap: []Peer{self(), empty("b")}, Join: []string{empty("c").GRPCAddr, empty("d").GRPCAddr}}, StartBootstrap, nil, ""},
		{"listed, every peer down", Entry{Bootstrap: []Peer{self(), dead("b"), dead("c")}, Join: deadJoin}, 0, ErrClusterUnknown, "cannot tell"},
		{"listed, one peer down, one without state", Entry{Bootstrap: []Peer{self(), dead("b"), empty("c")}}, 0, ErrClusterUnknown, "b:"},
		{"listed, another node at a peer's address", Entry{Bootstrap: []Peer{self(), imposter("b"), empty("c")}}, 0, ErrClusterUnknown, `is "x"`},
		{"listed, a peer holds state, no --join", Entry{Bootstrap: []Peer{self(), holding("b"), dead("c")}}, 0, ErrClusterExists, "holds Raft state"},
		{"listed, an older peer with a term", Entry{Bootstrap: []Peer{self(), older("b"), empty("c")}}, 0, ErrClusterExists, "holds Raft state"},
		{"listed, a peer holds state, a leader says not a member", Entry{Bootstrap: []Peer{self(), holding("b")}, Join: leaderSays("b", "x")}, StartJoin, nil, ""},
		{"listed, a peer holds state, a leader says a member", Entry{Bootstrap: []Peer{self(), holding("b")}, Join: leaderSays("b", "a")}, 0, ErrNodeExists, "remove it first"},
		{"listed, a peer holds state, no leader", Entry{Bootstrap: []Peer{self(), holding("b")}, Join: noLeader}, 0, ErrClusterUnknown, "no leader known"},
		{"forced, every peer down", Entry{Bootstrap: []Peer{self(), dead("b")}, ForceBootstrap: true}, StartBootstrap, nil, ""},
		{"forced, a peer holds state", Entry{Bootstrap: []Peer{self(), holding("b"), dead("c")}, ForceBootstrap: true}, 0, ErrClusterExists, "--force-bootstrap, but node b"},
		{"forced alone, a --join address holds state", Entry{Bootstrap: []Peer{self()}, Join: []string{holding("c").GRPCAddr}, ForceBootstrap: true}, 0, ErrClusterExists, "the cluster exists"},
		{"forced, not listed", Entry{Bootstrap: []Peer{dead("b")}, ForceBootstrap: true}, 0, ErrBadConfig, "--force-bootstrap"},
		{"not listed, no --join", Entry{Bootstrap: []Peer{empty("b")}}, 0, ErrBadConfig, "does not name"},
		{"not listed, nobody answers --join", Entry{Bootstrap: []Peer{dead("b")}, Join: deadJoin}, 0, ErrClusterUnknown, ": cannot connect ("},
		{"only --join, a leader says not a member", Entry{Join: leaderSays("b", "x")}, StartJoin, nil, ""},
		{"only --join, a leader says a member", Entry{Join: leaderSays("b", "a")}, 0, ErrNodeExists, "remove it first"},
		{"neither", Entry{}, 0, ErrBadConfig, "give --bootstrap"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The cases run at once: those that cannot ask everyone give
			// up only when ctx ends, so it is long enough for a loaded
			// machine to carry the answers the others wait for.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
			defer cancel()
			got, err := DecideStart(ctx, testSelf(t, "a", t.TempDir()), tc.entry)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.text)):
				t.Fatalf("error %v, want %v containing %q", err, tc.wantErr, tc.text)
			case tc.wantErr == nil && got != tc.want:
				t.Fatalf("start = %s, want %s", got, tc.want)
			}
		})
	}
}
