//go:build unix

package cluster_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCLI checks the ordo client commands against a running cluster.
func TestCLI(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})

	next := func() []uint64 {
		t.Helper()
		res := mustRunOrdo(t, "next", "--count", "3", "--json", "--addrs", c.addrList(), "--timeout", "10s")
		var out struct {
			IDs []string `json:"ids"` // strings: numbers above 2^53 lose precision in JSON tools
		}
		if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
			t.Fatalf("ordo next --json: %v; stdout %q", err, res.Stdout)
		}
		if len(out.IDs) != 3 {
			t.Fatalf("ordo next --count 3 --json: %d IDs: %q", len(out.IDs), out.IDs)
		}
		var ids []uint64
		for i, s := range out.IDs {
			id, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("ordo next --json: ID %q: %v", s, err)
			}
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("ordo next --json: IDs not increasing: %q", out.IDs)
			}
			ids = append(ids, id)
		}
		return ids
	}
	first := next()
	second := next()
	if second[0] <= first[2] {
		t.Errorf("second ordo next gave %d, not above the first run's %d", second[0], first[2])
	}
	t.Logf("ordo next: %d %d %d, then %d %d %d", first[0], first[1], first[2], second[0], second[1], second[2])

	res := mustRunOrdo(t, "next", "--addrs", c.addrList())
	if id, err := strconv.ParseUint(strings.TrimSpace(res.Stdout), 10, 64); err != nil || id <= second[2] {
		t.Errorf("ordo next: stdout %q; want one ID above %d", res.Stdout, second[2])
	}

	res = mustRunOrdo(t, "status", "--json", "--addrs", c.addrList())
	var st struct {
		LeaderID string `json:"leader_id"`
		Layout   string `json:"layout"`
		Nodes    []struct {
			ID    string `json:"id"`
			Role  string `json:"role"`
			Voter bool   `json:"voter"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &st); err != nil {
		t.Fatalf("ordo status --json: %v; stdout %q", err, res.Stdout)
	}
	leaders := 0
	for _, n := range st.Nodes {
		if n.Role == "leader" {
			leaders++
			if n.ID != st.LeaderID {
				t.Errorf("ordo status: %s has role leader but leader_id is %q", n.ID, st.LeaderID)
			}
		}
		if !n.Voter {
			t.Errorf("ordo status: %s is not a voter", n.ID)
		}
	}
	if len(st.Nodes) != 3 || leaders != 1 || st.Layout != "default" {
		t.Errorf("ordo status --json: %d nodes, %d leaders, layout %q; want 3, 1, default:\n%s", len(st.Nodes), leaders, st.Layout, res.Stdout)
	}

	res = mustRunOrdo(t, "decode", "--json", strconv.FormatUint(first[0], 10))
	var dec []struct {
		ID    string    `json:"id"`
		Time  time.Time `json:"time"`
		Group uint64    `json:"group"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &dec); err != nil || len(dec) != 1 {
		t.Fatalf("ordo decode --json: %v; stdout %q", err, res.Stdout)
	}
	if d := time.Since(dec[0].Time); d < -time.Minute || d > time.Minute {
		t.Errorf("ordo decode: ID %d has time %v, %v from now; want within a minute", first[0], dec[0].Time, d)
	}
	if dec[0].ID != strconv.FormatUint(first[0], 10) || dec[0].Group != 0 {
		t.Errorf("ordo decode --json: %+v", dec[0])
	}
	t.Logf("ordo decode %d: time %v group %d", first[0], dec[0].Time.Format(time.RFC3339Nano), dec[0].Group)
}

// TestBench runs `ordo bench` briefly: it must report throughput and a
// clean check of everything it received, and refuse bad flags.
func TestBench(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	res := runOrdoFor(t, time.Minute, "bench", "--addrs", c.addrList(), "--duration", "2s", "--concurrency", "8", "--count", "10", "--json")
	if res.Code != 0 {
		t.Fatalf("ordo bench: exit %d\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
	}
	var out struct {
		OK       bool  `json:"ok"`
		Requests int64 `json:"requests"`
		IDs      int64 `json:"ids"`
		P50      int64 `json:"p50"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		t.Fatalf("ordo bench --json: %v\n%s", err, res.Stdout)
	}
	if !out.OK || out.Requests == 0 || out.IDs != 10*out.Requests || out.P50 <= 0 {
		t.Fatalf("ordo bench result %+v, want ok with 10 IDs per request and a latency", out)
	}
	for _, mode := range [][]string{{"--unary"}, {"--coalesce", "2"}} {
		args := append([]string{"bench", "--addrs", c.addrList(), "--duration", "1s", "--concurrency", "8"}, mode...)
		if res := runOrdoFor(t, time.Minute, args...); res.Code != 0 || !strings.Contains(res.Stdout, "history OK") {
			t.Fatalf("ordo bench %v: exit %d\nstdout: %s\nstderr: %s", mode, res.Code, res.Stdout, res.Stderr)
		}
	}
	if res := runOrdo(t, "bench", "--addrs", c.addrList(), "--concurrency", "0"); res.Code != 2 {
		t.Fatalf("ordo bench --concurrency 0: exit %d, want 2\nstderr: %s", res.Code, res.Stderr)
	}
}

// TestBenchStartsItsOwnCluster: `ordo bench --start 3` runs three nodes
// of its own, measures them, checks the order and stops them.
func TestBenchStartsItsOwnCluster(t *testing.T) {
	res := runOrdoFor(t, 2*time.Minute, "bench", "--start", "3", "--duration", "1s", "--concurrency", "4", "--json")
	var out struct {
		OK       bool  `json:"ok"`
		Requests int64 `json:"requests"`
	}
	if res.Code != 0 || json.Unmarshal([]byte(res.Stdout), &out) != nil || !out.OK || out.Requests == 0 {
		t.Fatalf("ordo bench --start 3: exit %d, result %+v\nstdout: %s\nstderr: %s", res.Code, out, res.Stdout, res.Stderr)
	}
	for _, args := range [][]string{{"--start", "2"}, {"--start", "3", "--addrs", "127.0.0.1:1"}} {
		if res := runOrdo(t, append([]string{"bench"}, args...)...); res.Code != 2 {
			t.Fatalf("ordo bench %v: exit %d, want 2\nstderr: %s", args, res.Code, res.Stderr)
		}
	}
}
