package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve serves NewServer(node, cfg) on a free loopback port until the
// test ends, and returns its base URL.
func serve(t *testing.T, node Node, cfg Config) string {
	t.Helper()
	return "http://" + listen(t, NewServer(node, cfg))
}

// listen serves srv on a free loopback port until the test ends, and
// returns its address.
func listen(t *testing.T, srv *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// TestEveryErrorBodyIsJSON: over a served port, every refusal a client can
// meet has the JSON error body and names what to do: an unknown path
// (404), a wrong method (405), and a request line or header longer than
// the node reads (431), which net/http would refuse itself in plain text.
func TestEveryErrorBodyIsJSON(t *testing.T) {
	base := serve(t, newFake(t), Config{})
	c := &http.Client{Timeout: 5 * time.Second}
	long := strings.Repeat("x", 2*maxHeaderBytes) // past net/http's own limit, before this change
	for _, tt := range []struct {
		name, method, path string
		header             http.Header
		status             int
		code, says         string
	}{
		{"an unknown path", http.MethodGet, "/v2/ids", nil, 404, "NOT_FOUND", "/v2/ids"},
		{"a wrong method", http.MethodDelete, "/v1/ids", nil, 405, "METHOD_NOT_ALLOWED", "allowed: GET"},
		{"a long query", http.MethodGet, "/v1/ids?count=1&pad=" + long, nil, 431, "INVALID_ARGUMENT", "shorten the URL's query or the headers"},
		{"a long path", http.MethodGet, "/" + long, nil, 431, "INVALID_ARGUMENT", "reads at most 16384"},
		{"a long header", http.MethodGet, "/v1/ids", http.Header{"X-Pad": {long}}, 431, "INVALID_ARGUMENT", "reads at most 16384"},
	} {
		req, err := http.NewRequest(tt.method, base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tt.header {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var e errorResponse
		if err := json.Unmarshal(body, &e); err != nil || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q (Content-Type %q), want a JSON error body (%v)", tt.name, resp.StatusCode, body, resp.Header.Get("Content-Type"), err)
			continue
		}
		if resp.StatusCode != tt.status || e.Code != tt.code || !strings.Contains(e.Error, tt.says) {
			t.Errorf("%s: %d %+v, want %d %s saying %q", tt.name, resp.StatusCode, e, tt.status, tt.code, tt.says)
		}
	}
}
