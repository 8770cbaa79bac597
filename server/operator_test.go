package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/client"
	"github.com/seed-e8569b35/ordo/internal/eventually"
)

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// TestHTTPUnreachableLeaderSaysWhatToDo: a follower that cannot reach the
// leader to forward a request for IDs answers 503 with a body that names
// the leader and what to do, not gRPC's transport internals.
func TestHTTPUnreachableLeaderSaysWhatToDo(t *testing.T) {
	nodes := mustClusterWith(t, withHTTP)
	leader := mustLeader(t, nodes)
	f := followerOf(nodes, leader)
	dead := deadAddr(t)
	mustPointAt(t, leader, leader, dead)
	eventually.True(t, seqTestWait, f.ID()+" to see the leader at "+dead, func() bool {
		_, addr := f.Leader()
		return addr == dead
	})
	code, body := httpGet(t, plainHTTP, "http://"+f.HTTPAddr()+"/v1/ids")
	var e struct {
		Error      string `json:"error"`
		Code       string `json:"code"`
		LeaderID   string `json:"leader_id"`
		LeaderAddr string `json:"leader_addr"`
	}
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusServiceUnavailable || e.Code != "UNAVAILABLE" {
		t.Fatalf("ids with the leader unreachable: %d %s (%v), want 503 UNAVAILABLE", code, body, err)
	}
	want := "leader " + leader.ID() + " at " + dead + " cannot be reached"
	if !strings.Contains(e.Error, want) || !strings.Contains(e.Error, "retry") || e.LeaderAddr != dead {
		t.Errorf("error %q (leader %q at %q), want it to say %q and what to do", e.Error, e.LeaderID, e.LeaderAddr, want)
	}
	for _, internal := range []string{"transport", "desc =", "rpc error", "dial tcp"} {
		if strings.Contains(e.Error, internal) {
			t.Errorf("error %q shows gRPC's internals (%q)", e.Error, internal)
		}
	}
}

// streamCounts are n's NextStream streams counted so far, by code.
func streamCounts(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	counts := map[string]float64{}
	re := regexp.MustCompile(`(?m)^ordo_requests_total\{code="([^"]*)",method="` + regexp.QuoteMeta(api.Sequencer_NextStream_FullMethodName) + `"\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(rec.Body.String(), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		counts[m[1]] = v
	}
	return counts
}

func total(counts map[string]float64) (sum float64) {
	for _, v := range counts {
		sum += v
	}
	return sum
}

// TestClientCloseCountsNoCanceled: a call as the CLI makes it (a client,
// one Next on its stream, Close) is counted as OK, on the leader and
// through a follower that relays the stream: a client ending its stream
// with every call answered is not a Canceled request, which would trip
// the alert on requests not OK at every CLI call.
func TestClientCloseCountsNoCanceled(t *testing.T) {
	nodes := mustCluster(t)
	leader := mustLeader(t, nodes)
	f := followerOf(nodes, leader)
	for _, target := range []*Node{leader, f} {
		c, err := client.New([]string{target.GRPCAddr()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
		_, err = c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Next through %s: %v", target.ID(), err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The leader serves the first client's stream and the relay's; the
	// follower relays the second's. Each is counted once it ends.
	eventually.True(t, seqTestWait, "every stream to be counted", func() bool {
		return total(streamCounts(t, leader)) >= 2 && total(streamCounts(t, f)) >= 1
	})
	for _, n := range nodes {
		if got := streamCounts(t, n); got["Canceled"] != 0 || got["OK"] != total(got) {
			t.Errorf("%s counted NextStream streams %v, want every one OK", n.ID(), got)
		}
	}
}

// logCapture keeps what loggers write, for a test to read.
type logCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, strings.Split(strings.TrimRight(string(p), "\n"), "\n")...)
	return len(p), nil
}

// since returns the lines written from mark on, and the next mark.
func (c *logCapture) since(mark int) ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines[mark:]...), len(c.lines)
}

// TestRemovedNodeClosesWithoutErrors: removing a member and stopping it,
// the normal way a node leaves, logs no ERROR on it, nor "use of closed
// network connection" on any node: the Raft connections its close cuts
// short end as streams do.
func TestRemovedNodeClosesWithoutErrors(t *testing.T) {
	logs := &logCapture{}
	nodes := mustClusterWith(t, func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.ID, Level: hclog.Info, Output: io.MultiWriter(logs, testWriter{t})})
	})
	leader := mustLeader(t, nodes)
	removed := followerOf(nodes, leader)
	_, mark := logs.since(0)
	ctx, cancel := context.WithTimeout(context.Background(), seqTestWait)
	defer cancel()
	if err := leader.RemoveMember(ctx, removed.ID()); err != nil {
		t.Fatalf("remove %s: %v", removed.ID(), err)
	}
	if err := removed.Close(); err != nil {
		t.Fatalf("close removed %s: %v", removed.ID(), err)
	}
	// What the others log of it comes soon after, if at all.
	time.Sleep(500 * time.Millisecond)
	lines, _ := logs.since(mark)
	for _, l := range lines {
		if strings.Contains(l, "[ERROR]") && (strings.Contains(l, " "+removed.ID()+".") || strings.Contains(l, " "+removed.ID()+":") || strings.Contains(l, "closed network connection")) {
			t.Errorf("logged while a removed node stopped: %s", l)
		}
	}
}
