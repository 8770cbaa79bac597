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

	"github.com/seed-e8569b35/ordo/internal/freeaddr"
)

// httpTimeout bounds one HTTP request and each wait on HTTP answers.
const httpTimeout = 15 * time.Second

// TestHTTP: nodes restarted one at a time with --http-addr answer the
// curl-style requests of the documentation: readiness on every node, IDs that
// increase across nodes and calls, status; and a node left alone stops
// being ready.
func TestHTTP(t *testing.T) {
	c := mustNewCluster(t, clusterOpts{})
	httpAddrs := freeaddr.Loopback(t, len(c.Nodes))
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
	for i, n := range c.Nodes {
		c.signal(n, syscall.SIGTERM)
		if _, ok := n.WaitExit(exitTimeout); !ok {
			t.Fatalf("%s did not exit on SIGTERM within %s", n.Name, exitTimeout)
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

	// The curl examples of docs/api.md and README.md, as written, with
	// their ports (8001-8003, what scripts/cluster.sh gives n1-n3) mapped
	// to this test's.
	ran := map[string]int{}
	for _, ex := range docCurlExamples(t, apiDoc, "README.md") {
		url := ex.url
		for i, a := range httpAddrs {
			url = strings.Replace(url, "127.0.0.1:"+strconv.Itoa(8001+i), a, 1)
		}
		// Reservations and W answer 503 until the leader has heard every
		// voter read the cluster version they need.
		code, body := get("http://" + url)
		for deadline := time.Now().Add(httpTimeout); code == http.StatusServiceUnavailable && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			code, body = get("http://" + url)
		}
		if code != http.StatusOK || !strings.Contains(string(body), ex.want) {
			t.Errorf("%s example %q: %d %.200s; want 200 with %q", ex.file, ex.line, code, body, ex.want)
		}
		ran[ex.file]++
	}
	t.Logf("ran curl examples: %v", ran)
	if ran[apiDoc] < 7 {
		t.Fatalf("found %d curl examples in %s, want the 7 of the HTTP/JSON section", ran[apiDoc], apiDoc)
	}

	// Alone, n1 cannot know a leader: not ready, and no IDs.
	c.mustKill(c.Nodes[1])
	c.mustKill(c.Nodes[2])
	waitFor("http://"+httpAddrs[0]+"/readyz", http.StatusServiceUnavailable)
	if code, body := get("http://" + httpAddrs[0] + "/v1/ids"); code != http.StatusServiceUnavailable {
		t.Fatalf("ids with no leader: %d %s, want 503", code, body)
	}
	if code, _ := get("http://" + httpAddrs[0] + "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz of a live node without a leader: %d", code)
	}
}

// apiDoc is the file whose HTTP/JSON section holds the curl examples.
const apiDoc = "docs/api.md"

// curlExample is one `curl -s URL  # ...` line of a documentation file
// and a piece of what its answer must hold.
type curlExample struct{ file, line, url, want string }

// docCurlExamples reads the plain-HTTP curl examples of the given files
// (paths from the repository's root): the HTTP/JSON section of
// docs/api.md, and any in the README, so that the documentation cannot
// drift from what nodes answer.
func docCurlExamples(t *testing.T, files ...string) []curlExample {
	t.Helper()
	var out []curlExample
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, curlExamples(t, f, b)...)
	}
	return out
}

// curlExamples finds the plain-HTTP curl examples in the text b of file.
func curlExamples(t *testing.T, file string, b []byte) []curlExample {
	t.Helper()
	// What each endpoint's answer must contain.
	want := map[string]string{
		"/healthz": `"status":"ok"`, "/readyz": `"status":"ready"`, "/v1/ids": `"ids":["`,
		"/v1/status": `"nodes":[`, "/metrics": "ordo_ids_issued_total", "/v1/watermark": `"watermark_tick":"`,
	}
	re := regexp.MustCompile(`(?m)^\s*curl -s '?(127\.0\.0\.1:800[1-3](/[^' ]*))'?`)
	var out []curlExample
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		path := m[2]
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		w, ok := want[path]
		if !ok {
			t.Fatalf("%s example %q: no expectation for %s", file, m[0], path)
		}
		if strings.Contains(m[1], "decode=true") {
			w = `"decoded":[`
		}
		out = append(out, curlExample{file: file, line: strings.TrimSpace(m[0]), url: m[1], want: w})
	}
	return out
}
