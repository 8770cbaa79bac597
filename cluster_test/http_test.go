//go:build unix

package cluster_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// httpTimeout bounds one HTTP request and each wait on HTTP answers.
const httpTimeout = 15 * time.Second

// TestHTTP: nodes restarted one at a time with --http-addr answer the
// curl-style requests of the README: readiness on every node, IDs that
// increase across nodes and calls, status; and a node left alone stops
// being ready.
func TestHTTP(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	httpAddrs := mustFreeAddrs(t, len(c.nodes))
	hc := &http.Client{Timeout: httpTimeout}
	get := func(url string) (int, []byte) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	waitFor := func(url string, want int) {
		t.Helper()
		deadline := time.Now().Add(httpTimeout)
		for {
			code, body := get(url)
			if code == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %s, want %d within %s", url, code, body, want, httpTimeout)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A rolling restart, as an operator would add the flag.
	for i, n := range c.nodes {
		c.signal(n, syscall.SIGTERM)
		if _, ok := c.waitExit(n, exitTimeout); !ok {
			t.Fatalf("%s did not exit on SIGTERM within %s", n.id, exitTimeout)
		}
		c.mustRestart(n, "--http-addr", httpAddrs[i])
		waitFor("http://"+httpAddrs[i]+"/readyz", http.StatusOK)
	}
	for _, a := range httpAddrs {
		waitFor("http://"+a+"/readyz", http.StatusOK)
		if code, body := get("http://" + a + "/healthz"); code != http.StatusOK {
			t.Fatalf("healthz at %s: %d %s", a, code, body)
		}
	}

	var last uint64
	for round := range 3 {
		for _, a := range httpAddrs {
			code, body := get("http://" + a + "/v1/ids?count=" + strconv.Itoa(1+round*10))
			if code != http.StatusOK {
				t.Fatalf("ids from %s: %d %s", a, code, body)
			}
			var resp struct {
				IDs []string `json:"ids"`
			}
			if err := json.Unmarshal(body, &resp); err != nil || len(resp.IDs) != 1+round*10 {
				t.Fatalf("ids from %s: %v in %s", a, err, body)
			}
			for _, s := range resp.IDs {
				id, err := strconv.ParseUint(s, 10, 64)
				if err != nil || id <= last {
					t.Fatalf("ID %s from %s: not above %d (%v)", s, a, last, err)
				}
				last = id
			}
		}
	}
	code, body := get("http://" + httpAddrs[0] + "/v1/status")
	var st struct {
		LeaderID string            `json:"leader_id"`
		Nodes    []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal(body, &st); code != http.StatusOK || err != nil || st.LeaderID == "" || len(st.Nodes) != 3 {
		t.Fatalf("status: %d %s (%v)", code, body, err)
	}

	// The README's curl examples, as written, with its ports (8001-8003,
	// what scripts/cluster.sh gives n1-n3) mapped to this test's.
	ran := 0
	for _, ex := range readmeCurlExamples(t) {
		url := ex.url
		for i, a := range httpAddrs {
			url = strings.Replace(url, "127.0.0.1:"+strconv.Itoa(8001+i), a, 1)
		}
		code, body := get("http://" + url)
		if code != http.StatusOK || !strings.Contains(string(body), ex.want) {
			t.Errorf("README example %q: %d %.200s; want 200 with %q", ex.line, code, body, ex.want)
		}
		ran++
	}
	t.Logf("ran %d curl examples of README.md", ran)
	if ran < 6 {
		t.Fatalf("found %d curl examples in README.md, want the 6 of the HTTP/JSON section", ran)
	}

	// Alone, n1 cannot know a leader: not ready, and no IDs.
	c.mustKill(c.nodes[1])
	c.mustKill(c.nodes[2])
	waitFor("http://"+httpAddrs[0]+"/readyz", http.StatusServiceUnavailable)
	if code, body := get("http://" + httpAddrs[0] + "/v1/ids"); code != http.StatusServiceUnavailable {
		t.Fatalf("ids with no leader: %d %s, want 503", code, body)
	}
	if code, _ := get("http://" + httpAddrs[0] + "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz of a live node without a leader: %d", code)
	}
}

// curlExample is one `curl -s URL  # ...` line of the README and a piece
// of what its answer must hold.
type curlExample struct{ line, url, want string }

// readmeCurlExamples reads the plain-HTTP curl examples of README.md's
// HTTP/JSON section, so that the README cannot drift from what nodes
// answer.
func readmeCurlExamples(t *testing.T) []curlExample {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// What each endpoint's answer must contain.
	want := map[string]string{
		"/healthz": `"status":"ok"`, "/readyz": `"status":"ready"`, "/v1/ids": `"ids":["`,
		"/v1/status": `"nodes":[`, "/metrics": "ordo_ids_issued_total",
	}
	re := regexp.MustCompile(`(?m)^curl -s '?(127\.0\.0\.1:800[1-3](/[^' ]*))'?`)
	var out []curlExample
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		path := m[2]
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		w, ok := want[path]
		if !ok {
			t.Fatalf("README example %q: no expectation for %s", m[0], path)
		}
		if strings.Contains(m[1], "decode=true") {
			w = `"decoded":[`
		}
		out = append(out, curlExample{line: m[0], url: m[1], want: w})
	}
	return out
}
