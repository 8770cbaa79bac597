package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seed-e8569b35/ordo/internal/grpctest"
	"github.com/seed-e8569b35/ordo/secure"
	"github.com/seed-e8569b35/ordo/secure/securetest"
	"github.com/seed-e8569b35/ordo/startup"
)

// httpWait bounds waiting for a node to become ready or not.
const httpWait = 10 * time.Second

func withHTTP(cfg *Config) { cfg.HTTPAddr = "127.0.0.1:0" }

// httpGet GETs url and returns the status and the body.
func httpGet(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}

var plainHTTP = &http.Client{Timeout: 5 * time.Second}

// waitHTTP polls url until it answers want, for at most httpWait.
func waitHTTP(t *testing.T, c *http.Client, url string, want int) []byte {
	t.Helper()
	deadline := time.Now().Add(httpWait)
	for {
		code, body := httpGet(t, c, url)
		if code == want {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s, want %d within %s", url, code, body, want, httpWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHealth polls the gRPC health service of the node at addr until it
// reports want, for at most httpWait.
func waitHealth(t *testing.T, conn *grpc.ClientConn, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	c := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(httpWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC health of %s: %v %v, want %v within %s", conn.Target(), resp, err, want, httpWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// idsOver asks url for IDs and returns them, checking they are strings.
func idsOver(t *testing.T, c *http.Client, url string, count int) []uint64 {
	t.Helper()
	code, body := httpGet(t, c, url+"/v1/ids?count="+strconv.Itoa(count))
	if code != http.StatusOK {
		t.Fatalf("GET %s/v1/ids: %d %s", url, code, body)
	}
	var resp struct {
		IDs   []string `json:"ids"`
		Count int      `json:"count"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("IDs must be JSON strings: %v in %s", err, body)
	}
	if len(resp.IDs) != count || resp.Count != count {
		t.Fatalf("%d IDs (count %d), want %d: %s", len(resp.IDs), resp.Count, count, body)
	}
	ids := make([]uint64, count)
	for i, s := range resp.IDs {
		var err error
		if ids[i], err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// TestHTTPThreeNodes: every node of a cluster is ready over HTTP and
// gRPC health; IDs asked of the leader and of followers, over HTTP and
// gRPC, increase across calls; status names every node.
func TestHTTPThreeNodes(t *testing.T) {
	nodes := mustClusterWith(t, withHTTP)
	leader := mustLeader(t, nodes)
	for _, n := range nodes {
		waitHTTP(t, plainHTTP, "http://"+n.HTTPAddr()+"/readyz", http.StatusOK)
		waitHealth(t, grpctest.Dial(t, n.GRPCAddr()), healthpb.HealthCheckResponse_SERVING)
		if code, body := httpGet(t, plainHTTP, "http://"+n.HTTPAddr()+"/healthz"); code != http.StatusOK || !strings.Contains(string(body), `"ok"`) {
			t.Fatalf("%s healthz: %d %s", n.ID(), code, body)
		}
	}
	var last uint64
	for round := range 3 {
		for _, n := range nodes {
			last = mustIncrease(t, last, idsOver(t, plainHTTP, "http://"+n.HTTPAddr(), 1+round*50))
			last = mustIncrease(t, last, mustNext(t, n.GRPCAddr(), 3))
		}
	}

	code, body := httpGet(t, plainHTTP, "http://"+nodes[1].HTTPAddr()+"/v1/status")
	if code != http.StatusOK {
		t.Fatalf("status: %d %s", code, body)
	}
	var st struct {
		LeaderID string `json:"leader_id"`
		Nodes    []struct {
			ID        string `json:"id"`
			Role      string `json:"role"`
			HighWater string `json:"high_water"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status: %v in %s", err, body)
	}
	if st.LeaderID != leader.ID() || len(st.Nodes) != 3 {
		t.Fatalf("status %s", body)
	}
	for _, n := range st.Nodes {
		if hw, err := strconv.ParseUint(n.HighWater, 10, 64); err != nil || hw == 0 || n.Role == "unreachable" {
			t.Fatalf("status of %s: %+v (%v)", n.ID, n, err)
		}
	}
	code, body = httpGet(t, plainHTTP, "http://"+leader.HTTPAddr()+"/metrics")
	if code != http.StatusOK || !strings.Contains(string(body), `/v1/ids`) {
		t.Fatalf("metrics: %d, want HTTP calls counted in them:\n%s", code, body)
	}
}

// TestHTTPNotReadyWithoutLeader: a node opened but in no cluster is alive
// and not ready, over HTTP and gRPC health, and refuses IDs with 503;
// once bootstrapped it becomes ready.
func TestHTTPNotReadyWithoutLeader(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir())
	withHTTP(&cfg)
	n := mustOpen(t, cfg)
	url := "http://" + n.HTTPAddr()
	conn := grpctest.Dial(t, n.GRPCAddr())
	if code, _ := httpGet(t, plainHTTP, url+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	code, body := httpGet(t, plainHTTP, url+"/readyz")
	var e struct{ Error, Code string }
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusServiceUnavailable || e.Code != "UNAVAILABLE" || !strings.Contains(e.Error, "no cluster") {
		t.Fatalf("readyz: %d %s (%v), want 503 naming the reason", code, body, err)
	}
	waitHealth(t, conn, healthpb.HealthCheckResponse_NOT_SERVING)
	if code, body := httpGet(t, plainHTTP, url+"/v1/ids"); code != http.StatusServiceUnavailable {
		t.Fatalf("ids without a leader: %d %s, want 503", code, body)
	}

	if err := n.BootstrapSingle(); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, plainHTTP, url+"/readyz", http.StatusOK)
	waitHealth(t, conn, healthpb.HealthCheckResponse_SERVING)
	mustIncrease(t, 0, idsOver(t, plainHTTP, url, 10))

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := plainHTTP.Get(url + "/healthz"); err == nil {
		t.Fatal("HTTP still served after Close")
	}
}

// TestHTTPFollowerLosesLeader: a follower whose leader is gone stops
// being ready.
func TestHTTPFollowerLosesLeader(t *testing.T) {
	nodes := mustClusterWith(t, withHTTP)
	leader := mustLeader(t, nodes)
	var followers []*Node
	for _, n := range nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	waitHTTP(t, plainHTTP, "http://"+followers[0].HTTPAddr()+"/readyz", http.StatusOK)
	// With two of three nodes gone, the last cannot elect anyone.
	for _, n := range []*Node{leader, followers[1]} {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	body := waitHTTP(t, plainHTTP, "http://"+followers[0].HTTPAddr()+"/readyz", http.StatusServiceUnavailable)
	if !strings.Contains(string(body), "UNAVAILABLE") {
		t.Fatalf("readyz: %s", body)
	}
	waitHealth(t, grpctest.Dial(t, followers[0].GRPCAddr()), healthpb.HealthCheckResponse_NOT_SERVING)
}

// TestHTTPTLS: with TLS the HTTP port is HTTPS: probes without a client
// certificate see health only; a client certificate gets IDs through a
// follower, as on the gRPC port.
func TestHTTPTLS(t *testing.T) {
	c := mustTLSClusterWith(t, withHTTP)
	leader := mustLeader(t, c.nodes)
	client := func(files secure.Files) *http.Client {
		tl := securetest.MustLoad(t, files)
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tl.ClientConfig()}}
	}
	withCert, noCert := client(c.pki.Client("ordo-client")), client(secure.Files{CA: c.pki.CAFile()})
	var last uint64
	for _, n := range c.nodes {
		url := "https://" + n.HTTPAddr()
		waitHTTP(t, noCert, url+"/readyz", http.StatusOK)
		if code, body := httpGet(t, noCert, url+"/v1/ids"); code != http.StatusForbidden {
			t.Fatalf("%s ids without a certificate: %d %s, want 403", n.ID(), code, body)
		}
		last = mustIncrease(t, last, idsOver(t, withCert, url, 5))
	}
	// A TLS server answers plain HTTP with a 400 of its own (or not at
	// all); never with what was asked.
	if resp, err := plainHTTP.Get("http://" + leader.HTTPAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the TLS port")
		}
	}
}

func TestHTTPPlaintextOnlyOnLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr     string
		insecure bool
		ok       bool
	}{
		{"", false, true},
		{"127.0.0.1:0", false, true},
		{"localhost:8001", false, true},
		{":8001", false, false},
		{"0.0.0.0:8001", false, false},
		{"10.1.2.3:8001", true, true},
	} {
		cfg := testConfig(t, "n1", t.TempDir())
		cfg.HTTPAddr, cfg.Insecure = tt.addr, tt.insecure
		err := cfg.Validate()
		if tt.ok != (err == nil) || (err != nil && !errors.Is(err, startup.ErrBadConfig)) {
			t.Errorf("http %q insecure %v: %v, want ok %v", tt.addr, tt.insecure, err, tt.ok)
		}
	}
}

// httpPost POSTs to url with no body and decodes the JSON answer into v
// when it is 200; it returns the status and the body.
func httpPost(t *testing.T, url string, v any) (int, []byte) {
	t.Helper()
	resp, err := plainHTTP.Post(url, "", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("POST %s: %v in %s", url, err, body)
		}
	}
	return resp.StatusCode, body
}

// httpMark is W as the HTTP routes answer it.
type httpMark struct {
	Fate          string `json:"fate"`
	Watermark     string `json:"watermark"`
	WatermarkTick string `json:"watermark_tick"`
}

func (m httpMark) ticks(t *testing.T) (id, tick uint64) {
	t.Helper()
	id, err1 := strconv.ParseUint(m.Watermark, 10, 64)
	tick, err2 := strconv.ParseUint(m.WatermarkTick, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("W %+v is not two decimal strings", m)
	}
	return id, tick
}

// TestHTTPSettledOrder: over a follower's HTTP port (forwarded to the
// leader), a reservation holds W below its IDs until it is completed;
// completing again is answered the same. Then, on the leader and on the
// follower, abandoning it conflicts with its fate (409), a malformed
// handle is bad input (400) and one no reservation has is not found
// (404): the node's errors reach HTTP through the status path, whether
// found here or by the leader.
func TestHTTPSettledOrder(t *testing.T) {
	nodes := mustClusterWith(t, withHTTP)
	leader := mustLeader(t, nodes)
	url := "http://" + followerOf(nodes, leader).HTTPAddr()
	var res struct {
		Handle string   `json:"handle"`
		IDs    []string `json:"ids"`
		TTLMs  uint32   `json:"ttl_ms"`
	}
	// 503 until the leader raises the cluster version (every voter
	// answered).
	deadline := time.Now().Add(httpWait)
	for code, body := httpPost(t, url+"/v1/reservations?count=3&ttl=1m", &res); code != http.StatusOK; code, body = httpPost(t, url+"/v1/reservations?count=3&ttl=1m", &res) {
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("reserve: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(res.IDs) != 3 || res.TTLMs != 60_000 {
		t.Fatalf("reservation %+v", res)
	}
	ids := make([]uint64, len(res.IDs))
	for i, s := range res.IDs {
		var err error
		if ids[i], err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	mustIncrease(t, 0, ids)
	mustIncrease(t, ids[2], idsOver(t, plainHTTP, url, 2)) // untracked, after it

	var w httpMark
	if code, body := httpGet(t, plainHTTP, url+"/v1/watermark"); code != http.StatusOK || json.Unmarshal(body, &w) != nil {
		t.Fatalf("watermark: %d %s", code, body)
	}
	if id, _ := w.ticks(t); id > ids[0] {
		t.Fatalf("W %+v passed the open reservation's first ID %d", w, ids[0])
	}
	for range 2 { // the second is a retry, answered the same
		if code, body := httpPost(t, url+"/v1/reservations/complete?handle="+res.Handle, &w); code != http.StatusOK || w.Fate != "completed" {
			t.Fatalf("complete: %d %s", code, body)
		}
	}
	if code, body := httpGet(t, plainHTTP, url+"/v1/watermark"); code != http.StatusOK || json.Unmarshal(body, &w) != nil {
		t.Fatalf("watermark: %d %s", code, body)
	}
	if id, _ := w.ticks(t); id <= ids[2] {
		t.Fatalf("W %+v has not passed the completed reservation's IDs %v with nothing else open", w, ids)
	}
	// The leader's metrics read its settler.
	code, body := httpGet(t, plainHTTP, "http://"+leader.HTTPAddr()+"/metrics")
	for _, want := range []string{"\nordo_reservations_reserved_total 1\n", "\nordo_reservations_completed_total 1\n", "\nordo_reservations_open 0\n"} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("leader's metrics lack %q", want)
		}
	}
	for _, base := range []string{"http://" + leader.HTTPAddr(), url} {
		for _, tt := range []struct {
			path string
			code int
		}{
			{"/v1/reservations/abandon?handle=" + res.Handle, http.StatusConflict},
			{"/v1/reservations/complete?handle=r2.x", http.StatusBadRequest},
			{"/v1/reservations/complete?handle=r1.18446744073709551614.1", http.StatusNotFound},
		} {
			if code, body := httpPost(t, base+tt.path, &w); code != tt.code {
				t.Errorf("%s%s: %d %s, want %d", base, tt.path, code, body, tt.code)
			}
		}
	}
}
