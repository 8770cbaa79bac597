package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/seed-e8569b35/ordo/api"
	"github.com/seed-e8569b35/ordo/httpapi"
)

// httpStatusNode serves GET /v1/status from a statusNode's answer; the
// rest of httpapi.Node is never called.
type httpStatusNode struct {
	httpapi.Node
	f *statusNode
}

func (n httpStatusNode) Status(ctx context.Context) (*api.StatusResponse, error) {
	return n.f.Status(ctx, &api.StatusRequest{Sequences: true, SequenceLimit: 50})
}

// TestStatusJSONIsHTTPs: ordo status --json prints the status in the
// schema GET /v1/status answers it in: for one status, the same keys with
// the same types and values, every field present (an empty error, a zero
// group), 64-bit numbers as strings.
func TestStatusJSONIsHTTPs(t *testing.T) {
	f := &statusNode{}
	out, err := output(t, runStatus, "--addrs", f.serve(t), "--sequences", "--json")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.Handler(httpStatusNode{f: f}, httpapi.Config{}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/status: %d %s (%v)", resp.StatusCode, body, err)
	}
	var cli, web map[string]any
	if err := json.Unmarshal([]byte(out), &cli); err != nil {
		t.Fatalf("ordo status --json printed %s: %v", out, err)
	}
	if err := json.Unmarshal(body, &web); err != nil {
		t.Fatalf("GET /v1/status answered %s: %v", body, err)
	}
	if !reflect.DeepEqual(cli, web) {
		t.Fatalf("ordo status --json printed\n%s\nGET /v1/status answered\n%s\nwant one schema", out, body)
	}
	node := cli["nodes"].([]any)[0].(map[string]any)
	if term, ok := node["term"].(string); !ok || term != "2" {
		t.Errorf("term %#v, want the string \"2\"", node["term"])
	}
	if e, ok := node["error"].(string); !ok || e != "" {
		t.Errorf("error %#v, want it present and empty", node["error"])
	}
	if g, ok := cli["group"].(string); !ok || g != "0" {
		t.Errorf("group %#v, want the string \"0\"", cli["group"])
	}
}
